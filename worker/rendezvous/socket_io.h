// Blocking socket I/O with deadlines, shared by the store's server and client.
// Internal to tessera_rendezvous; not a general networking library.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

struct addrinfo;

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

// TCP keepalive of store connections: a peer whose machine vanished without closing its
// connections (power loss, a partition) is found after kKeepAliveIdleSeconds of silence plus
// kKeepAliveCount unanswered probes kKeepAliveIntervalSeconds apart, 25 s, so the store applies
// its will and the other ranks fail naming it, sooner than TESSERA_COMM_TIMEOUT (60 s). A live
// kernel answers the probes, so an idle or stopped process is not mistaken for a lost one.
inline constexpr int kKeepAliveIdleSeconds = 10;
inline constexpr int kKeepAliveIntervalSeconds = 5;
inline constexpr int kKeepAliveCount = 3;

// The addresses of a host, or why there are none.
struct Resolved {
  std::shared_ptr<const addrinfo> list;  // null when `error` says why
  std::string error;
};

// getaddrinfo's signature: the resolver Resolve calls (tests pass one that never answers).
using Resolver = int (*)(const char* host, const char* service, const addrinfo* hints,
                         addrinfo** result);

// Resolves `host` for a TCP connection to `port`, giving up at `deadline`. getaddrinfo itself
// has no deadline: with a DNS server that drops queries glibc waits `timeout` × `attempts` per
// nameserver (resolv.conf), so the lookup runs on a thread of its own that a caller past its
// deadline leaves behind (it frees its own result).
Resolved Resolve(const std::string& host, int port, Clock::time_point deadline,
                 Resolver resolver = nullptr);

// Sets TCP_NODELAY, the keepalive above and FD_CLOEXEC; best effort.
void TuneSocket(int fd);

}  // namespace tessera::rendezvous::io
