// Blocking socket I/O with deadlines, shared by the store's server and client.
// Internal to tessera_rendezvous; not a general networking library.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera::rendezvous::io {

using Clock = std::chrono::steady_clock;

enum class IoResult { kOk, kTimeout, kClosed, kError };

// Writes all `n` bytes before `deadline`. Never raises SIGPIPE.
IoResult SendAll(int fd, const void* data, size_t n, Clock::time_point deadline);

// Reads exactly `n` bytes before `deadline` (Clock::time_point::max() waits forever).
// kClosed when the peer closed the connection first.
IoResult RecvAll(int fd, void* data, size_t n, Clock::time_point deadline);

// "host:port" of the peer of a connected socket, for logs.
std::string PeerAddress(int fd);

// Sets TCP_NODELAY and FD_CLOEXEC; best effort.
void TuneSocket(int fd);

}  // namespace tessera::rendezvous::io
