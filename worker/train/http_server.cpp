#include "worker/train/http_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace tessera::train {
namespace {

constexpr size_t kMaxRequestBytes = 16 * 1024;
// How long a request may take to arrive, and then its answer to be taken, each as a whole: a
// client trickling bytes cannot hold the one serving thread (and so every scrape, and the
// worker's exit, which joins it) for longer.
constexpr std::chrono::milliseconds kRequestTimeout{2000};

using Clock = std::chrono::steady_clock;

// Waits until `fd` is ready for `events`. False when the deadline passed first, or the server is
// stopping (its wake pipe was written: Serve returns at its next poll).
bool WaitReady(int fd, short events, int wake_fd, Clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0)
      return false;
    pollfd p[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
    const int ready = poll(p, 2, static_cast<int>(left));
    if (ready < 0 && errno == EINTR)
      continue;
    if (ready < 0 || p[1].revents != 0)
      return false;
    if (p[0].revents != 0)
      return true;
  }
}

void SendAll(int fd, int wake_fd, const std::string& data) {
  const Clock::time_point deadline = Clock::now() + kRequestTimeout;
  for (size_t sent = 0; sent < data.size();) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!WaitReady(fd, POLLOUT, wake_fd, deadline))
        return;  // the client takes too long, or we are stopping
      continue;
    }
    if (n <= 0)
      return;  // the client went away; nothing to tell it
    sent += static_cast<size_t>(n);
  }
}

std::string Response(int code, const char* reason, const std::string& content_type,
                     const std::string& body, bool with_body) {
  return fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
      code, reason, content_type, body.size(), with_body ? body : "");
}

// Reads the request head (up to the blank line) within kRequestTimeout; empty when it did not
// all come in time, or the server is stopping.
std::string ReadHead(int fd, int wake_fd) {
  const Clock::time_point deadline = Clock::now() + kRequestTimeout;
  std::string head;
  char buf[2048];
  while (head.find("\r\n\r\n") == std::string::npos && head.size() < kMaxRequestBytes) {
    if (!WaitReady(fd, POLLIN, wake_fd, deadline))
      return "";
    const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
      continue;
    if (n <= 0)
      return "";
    head.append(buf, static_cast<size_t>(n));
  }
  return head;
}

}  // namespace

Status HttpServer::Start(int port, std::vector<Route> routes, std::unique_ptr<HttpServer>* out) {
  const auto fail = [port](const char* what) {
    return IoError(fmt::format("metrics.port {}: cannot listen ({}: {}); choose another port or 0",
                               port, what, std::strerror(errno)));
  };
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->routes_ = std::move(routes);
  s->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s->listen_fd_ < 0)
    return fail("socket");
  const int one = 1;
  setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    return fail("bind");
  if (listen(s->listen_fd_, 64) != 0)
    return fail("listen");
  socklen_t len = sizeof(addr);
  if (getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return fail("getsockname");
  s->port_ = ntohs(addr.sin_port);
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0)
    return fail("pipe");
  s->wake_read_ = pipe_fds[0];
  s->wake_write_ = pipe_fds[1];
  s->thread_ = std::thread([raw = s.get()] { raw->Serve(); });
  *out = std::move(s);
  return Status::Ok();
}

HttpServer::~HttpServer() {
  if (thread_.joinable()) {
    const char stop = 1;
    while (write(wake_write_, &stop, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_read_, wake_write_}) {
    if (fd >= 0)
      close(fd);
  }
}

void HttpServer::Serve() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR)
        continue;
      return;
    }
    if (fds[1].revents != 0)
      return;
    if ((fds[0].revents & POLLIN) == 0)
      continue;
    const int connection = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0)
      continue;  // the client gave up already, or a transient error: keep serving
    Answer(connection);
    close(connection);
  }
}

void HttpServer::Answer(int connection) {
  const std::string head = ReadHead(connection, wake_read_);
  if (head.empty())
    return;
  // "GET /metrics?x=1 HTTP/1.1"
  const size_t method_end = head.find(' ');
  const size_t path_end =
      method_end == std::string::npos ? method_end : head.find_first_of(" ?\r", method_end + 1);
  if (method_end == std::string::npos || path_end == std::string::npos) {
    SendAll(connection, wake_read_,
            Response(400, "Bad Request", "text/plain", "bad request line\n", true));
    return;
  }
  const std::string method = head.substr(0, method_end);
  const std::string path = head.substr(method_end + 1, path_end - method_end - 1);
  if (method != "GET" && method != "HEAD") {
    SendAll(connection, wake_read_,
            Response(405, "Method Not Allowed", "text/plain", "GET only\n", true));
    return;
  }
  for (const Route& route : routes_) {
    if (route.path == path) {
      SendAll(connection, wake_read_,
              Response(200, "OK", route.content_type, route.body(), method == "GET"));
      return;
    }
  }
  SendAll(connection, wake_read_,
          Response(404, "Not Found", "text/plain", "not found: " + path + "\n", method == "GET"));
}

}  // namespace tessera::train
