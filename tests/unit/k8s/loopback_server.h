// A plain-HTTP server on 127.0.0.1 for tests of the real (cpprestsdk) transport: one request
// per connection, served one at a time on its own thread. It records each request's method and
// path, reads its body (Content-Length), and hands the connection to the test's handler, which
// writes the whole response (or holds the connection, as a server that never answers).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessera::k8s::testing {

class LoopbackServer {
 public:
  struct Request {
    std::string method;
    std::string path;
    std::string body;
  };
  using Handler = std::function<void(int conn, const Request& request)>;

  explicit LoopbackServer(Handler handler) : handler_(std::move(handler)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd_, 8) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen on 127.0.0.1";
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  // Waits for the handler in progress to return.
  ~LoopbackServer() {
    stop_ = true;
    if (thread_.joinable())
      thread_.join();
    close(fd_);
  }
  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<std::string> paths() {
    std::lock_guard<std::mutex> lock(mu_);
    return paths_;
  }

  static void Write(int conn, const std::string& bytes) {
    for (size_t sent = 0; sent < bytes.size();) {
      ssize_t n = write(conn, bytes.data() + sent, bytes.size() - sent);
      if (n <= 0)
        return;
      sent += static_cast<size_t>(n);
    }
  }
  // Holds `conn` without answering until the client closes it (as a server that never
  // answers); returns then.
  static void HoldUntilClosed(int conn) {
    char buf[256];
    while (read(conn, buf, sizeof buf) > 0) {
    }
  }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0)
        continue;
      int conn = accept(fd_, nullptr, nullptr);
      if (conn < 0)
        continue;
      std::string bytes;
      char buf[4096];
      for (ssize_t n;
           bytes.find("\r\n\r\n") == std::string::npos && (n = read(conn, buf, sizeof buf)) > 0;)
        bytes.append(buf, static_cast<size_t>(n));
      Request request;
      request.method = bytes.substr(0, bytes.find(' '));
      const size_t start = bytes.find(' ') + 1;
      request.path = bytes.substr(start, bytes.find(' ', start) - start);
      const size_t head_end = bytes.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        request.body = bytes.substr(head_end + 4);
        const size_t length = ContentLength(bytes.substr(0, head_end));
        for (ssize_t n; request.body.size() < length && (n = read(conn, buf, sizeof buf)) > 0;)
          request.body.append(buf, static_cast<size_t>(n));
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        paths_.push_back(request.path);
      }
      handler_(conn, request);
      close(conn);
    }
  }

  static size_t ContentLength(const std::string& head) {
    std::string lower;
    for (char c : head)
      lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    const size_t at = lower.find("\r\ncontent-length:");
    if (at == std::string::npos)
      return 0;
    return std::strtoul(head.c_str() + at + 17, nullptr, 10);
  }

  Handler handler_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> paths_;
};

}  // namespace tessera::k8s::testing
