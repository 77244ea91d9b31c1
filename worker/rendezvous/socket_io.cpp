#include "worker/rendezvous/socket_io.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>

namespace tessera::rendezvous::io {
namespace {

// Waits until `fd` is ready for `events` or the deadline passes.
IoResult WaitReady(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    int timeout_ms = -1;
    if (deadline != Clock::time_point::max()) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0)
        return IoResult::kTimeout;
      timeout_ms = left > 60000 ? 60000 : static_cast<int>(left) + 1;
    }
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, timeout_ms);
    if (rc > 0)
      return IoResult::kOk;  // readiness, or an error the next call reports
    if (rc < 0 && errno != EINTR)
      return IoResult::kError;
  }
}

}  // namespace

IoResult SendAll(int fd, const void* data, size_t n, Clock::time_point deadline) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    if (auto r = WaitReady(fd, POLLOUT, deadline); r != IoResult::kOk)
      return r;
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
        continue;
      return (errno == EPIPE || errno == ECONNRESET) ? IoResult::kClosed : IoResult::kError;
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return IoResult::kOk;
}

IoResult RecvAll(int fd, void* data, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    if (auto r = WaitReady(fd, POLLIN, deadline); r != IoResult::kOk)
      return r;
    const ssize_t k = ::recv(fd, p, n, MSG_DONTWAIT);
    if (k == 0)
      return IoResult::kClosed;
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
        continue;
      return errno == ECONNRESET ? IoResult::kClosed : IoResult::kError;
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return IoResult::kOk;
}

std::string PeerAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    return "unknown peer";
  char host[INET6_ADDRSTRLEN] = {0};
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "unknown peer";
}

Resolved Resolve(const std::string& host, int port, Clock::time_point deadline, Resolver resolver) {
  // What the lookup thread and the caller share; whichever leaves last frees it.
  struct Lookup {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Resolved result;
  };
  auto lookup = std::make_shared<Lookup>();
  auto run = [lookup, host, port, resolver = resolver ? resolver : &::getaddrinfo] {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* list = nullptr;
    const int rc = resolver(host.c_str(), std::to_string(port).c_str(), &hints, &list);
    Resolved r;
    if (rc == 0) {
      r.list = std::shared_ptr<const addrinfo>(
          list, [](const addrinfo* a) { ::freeaddrinfo(const_cast<addrinfo*>(a)); });
    } else {
      r.error = std::string("cannot resolve host: ") + ::gai_strerror(rc);
    }
    std::lock_guard<std::mutex> lock(lookup->mu);
    lookup->result = std::move(r);
    lookup->done = true;
    lookup->cv.notify_all();
  };
  std::thread thread;
  try {
    thread = std::thread(run);
  } catch (const std::system_error& e) {
    return {nullptr, std::string("cannot resolve host: no thread for the lookup: ") + e.what()};
  }
  std::unique_lock<std::mutex> lock(lookup->mu);
  if (!lookup->cv.wait_until(lock, deadline, [&] { return lookup->done; })) {
    thread.detach();
    return {nullptr, "cannot resolve host: no answer from the resolver before the deadline"};
  }
  lock.unlock();
  thread.join();  // it has answered: no thread is left behind (a fork after us stays safe)
  return std::move(lookup->result);
}

void TuneSocket(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &kKeepAliveIdleSeconds, sizeof(int));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &kKeepAliveIntervalSeconds, sizeof(int));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &kKeepAliveCount, sizeof(int));
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
}

}  // namespace tessera::rendezvous::io
