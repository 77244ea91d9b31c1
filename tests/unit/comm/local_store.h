// The in-process store of the comm tests: a server on a free localhost port, the options of a
// client of it whose connects and calls give up after `timeout`, and a relay that can stop
// answering as a stopped (SIGSTOP) or wedged rank 0 would.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "worker/rendezvous/store_client.h"
#include "worker/rendezvous/store_server.h"

namespace tessera::comm::test {

inline std::unique_ptr<rendezvous::StoreServer> StartLocalStore() {
  rendezvous::StoreServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  return rendezvous::StoreServer::Start(options);
}

inline rendezvous::StoreClientOptions LocalStoreClient(const rendezvous::StoreServer& server,
                                                       std::chrono::milliseconds timeout) {
  rendezvous::StoreClientOptions options;
  options.port = server.port();
  options.connect_timeout = options.timeout = timeout;
  return options;
}

// Forwards connections on its own localhost port to `target_port`. Once frozen it keeps every
// connection open and accepts new ones, but forwards nothing: what clients see of a store whose
// process is stopped.
class FreezableRelay {
 public:
  explicit FreezableRelay(int target_port) : target_port_(target_port) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(listen_fd_, 16);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    threads_.emplace_back([this] { Accept(); });
  }
  ~FreezableRelay() {
    stop_ = true;
    for (auto& t : threads_)
      t.join();
    ::close(listen_fd_);
  }
  int port() const { return port_; }
  void Freeze() { frozen_ = true; }

 private:
  void Accept() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0)
        continue;
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0)
        continue;
      const int upstream = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(target_port_));
      if (::connect(upstream, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        ::close(client);
        ::close(upstream);
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      pipes_.emplace_back([this, client, upstream] { Pipe(client, upstream); });
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& t : pipes_)
      t.join();
  }
  void Pipe(int a, int b) {
    char buf[4096];
    while (!stop_) {
      if (frozen_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      if (::poll(p, 2, 50) <= 0 || frozen_)
        continue;
      bool closed = false;
      for (int i = 0; i < 2 && !closed; ++i) {
        if (p[i].revents == 0)
          continue;
        const ssize_t n = ::recv(p[i].fd, buf, sizeof(buf), 0);
        closed = n <= 0 || ::send(p[1 - i].fd, buf, static_cast<size_t>(n), MSG_NOSIGNAL) != n;
      }
      if (closed)
        break;
    }
    ::close(a);
    ::close(b);
  }

  const int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> frozen_{false};
  std::mutex mu_;
  std::vector<std::thread> pipes_;    // under mu_
  std::vector<std::thread> threads_;  // the accept loop
};

}  // namespace tessera::comm::test
