// The rendezvous key-value store's server, hosted by rank 0 (DESIGN.md §6): a TCP server
// with a thread per connection, token authentication and blocking waits with deadlines.
// It keeps everything in memory and does not persist or replicate anything.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "worker/rendezvous/frame.h"

namespace tessera::rendezvous {

struct StoreServerOptions {
  std::string host = "0.0.0.0";  // address to bind
  int port = 29500;              // 0 picks a free port (see StoreServer::port())
  std::string token;             // clients must present exactly this token
  // A client must authenticate within this time after connecting, or is dropped.
  std::chrono::milliseconds auth_timeout{10000};
};

// Thread-safe. Destroying the server stops it: blocked waits end, every connection is closed
// (wills are not applied on a server stop).
class StoreServer {
 public:
  // Binds and listens on options.host:options.port and starts serving.
  // Throws StoreError naming the address when it cannot bind.
  static std::unique_ptr<StoreServer> Start(const StoreServerOptions& options);

  // Serves on an already listening socket (for example one a launcher bound and passed to
  // rank 0 across fork); takes ownership of `listen_fd`.
  static std::unique_ptr<StoreServer> Adopt(int listen_fd, const StoreServerOptions& options);

  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }

  // Connections that presented a wrong token, since start.
  uint64_t refused_clients() const { return refused_.load(); }
  // Authenticated connections currently open.
  int connected_clients() const;

  // Blocks until at most `remaining` authenticated clients are connected (their departures
  // fully processed, wills applied) or `timeout` passes; true when so. Rank 0 calls it with
  // 0 before exiting so the others can still read failure reports.
  bool WaitForClientsToLeave(std::chrono::milliseconds timeout, int remaining = 0);

  // Stops accepting, closes every connection and joins all threads. Idempotent.
  void Stop();

 private:
  StoreServer(int listen_fd, const StoreServerOptions& options);
  struct Connection;
  void AcceptLoop();
  void Serve(Connection* conn);
  Response Handle(const Request& request, Connection& conn);
  void ApplyWills(Connection& conn);
  void ReapFinished();

  StoreServerOptions options_;
  int listen_fd_ = -1;
  int port_ = 0;
  int wake_pipe_[2] = {-1, -1};
  std::thread acceptor_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> refused_{0};

  mutable std::mutex mu_;  // guards data_, connections_, authenticated_
  std::condition_variable changed_;
  std::map<std::string, std::string> data_;
  std::list<std::unique_ptr<Connection>> connections_;
  int authenticated_ = 0;
};

}  // namespace tessera::rendezvous
