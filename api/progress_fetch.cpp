#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <string_view>
#include <system_error>

#include "api/progress.h"

namespace tessera::api {
namespace {

using Clock = std::chrono::steady_clock;

int MillisLeft(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));
}

// Waits until `fd` is ready for `events` or the deadline passes.
bool WaitFor(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  while (true) {
    const int r = ::poll(&p, 1, MillisLeft(deadline));
    if (r > 0)
      return true;
    if (r == 0 && Clock::now() >= deadline)
      return false;
    if (r < 0 && errno != EINTR)
      return false;
  }
}

// The address of an IPv4 or IPv6 literal (a pod IP); no name lookup.
bool ToAddress(const std::string& host, int port, sockaddr_storage* out, socklen_t* len) {
  *out = {};
  auto* v4 = reinterpret_cast<sockaddr_in*>(out);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(sockaddr_in);
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(out);
  if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

// The Content-Length of a response head, or nullopt when it has none (or a bad one).
std::optional<size_t> ContentLength(std::string_view head) {
  constexpr std::string_view kName = "\r\ncontent-length:";
  for (size_t at = 0; at + kName.size() <= head.size(); ++at) {
    bool match = true;
    for (size_t i = 0; i < kName.size() && match; ++i) {
      match = std::tolower(static_cast<unsigned char>(head[at + i])) == kName[i];
    }
    if (!match)
      continue;
    size_t pos = at + kName.size();
    while (pos < head.size() && head[pos] == ' ')
      ++pos;
    size_t value = 0;
    const auto [end, ec] = std::from_chars(head.data() + pos, head.data() + head.size(), value);
    if (ec != std::errc() || end == head.data() + pos)
      return std::nullopt;
    return value;
  }
  return std::nullopt;
}

// Whether `response` holds a whole answer: its head and, with a Content-Length, that many
// bytes of body (without one, the answer ends when the server closes).
bool Whole(const std::string& response) {
  const size_t head_end = response.find("\r\n\r\n");
  if (head_end == std::string::npos)
    return false;
  const auto length = ContentLength(std::string_view(response).substr(0, head_end + 2));
  return length && response.size() - (head_end + 4) >= *length;
}

}  // namespace

std::optional<std::string> FetchProgressBody(const std::string& host, int port,
                                             std::chrono::milliseconds timeout) {
  sockaddr_storage addr;
  socklen_t addr_len = 0;
  if (port < 1 || port > 65535 || !ToAddress(host, port, &addr, &addr_len))
    return std::nullopt;
  const auto deadline = Clock::now() + std::clamp(timeout, std::chrono::milliseconds(0),
                                                  std::chrono::milliseconds(3'600'000));
  const int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return std::nullopt;
  std::optional<std::string> body;
  const int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), addr_len);
  bool connected = rc == 0;
  if (rc != 0 && errno == EINPROGRESS && WaitFor(fd, POLLOUT, deadline)) {
    int err = 0;
    socklen_t len = sizeof(err);
    connected = ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
  }
  if (connected) {
    // HTTP/1.0: the answer is neither chunked nor kept alive; it ends when the server closes.
    const std::string request =
        "GET /progress HTTP/1.0\r\nHost: " + host + "\r\nConnection: close\r\n\r\n";
    size_t sent = 0;
    while (sent < request.size() && WaitFor(fd, POLLOUT, deadline)) {
      const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0)
        break;
      sent += static_cast<size_t>(n);
    }
    std::string response;
    bool ended = false;
    char buffer[16384];
    while (sent == request.size() && response.size() <= kMaxProgressResponseBytes &&
           WaitFor(fd, POLLIN, deadline)) {
      const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n == 0) {
        ended = true;
        break;
      }
      if (n < 0 && (errno == EINTR || errno == EAGAIN))
        continue;
      if (n < 0)
        break;
      response.append(buffer, static_cast<size_t>(n));
      if (Whole(response)) {
        ended = true;
        break;
      }
    }
    // Only a whole answer counts: one cut by the deadline or the size limit is not read.
    const size_t head_end = response.find("\r\n\r\n");
    const size_t space = response.find(' ');
    const bool ok = response.rfind("HTTP/1.", 0) == 0 && space != std::string::npos &&
                    response.compare(space + 1, 3, "200") == 0 && response.size() > space + 4 &&
                    (response[space + 4] == ' ' || response[space + 4] == '\r');
    if (ended && ok && response.size() <= kMaxProgressResponseBytes &&
        head_end != std::string::npos) {
      body = response.substr(head_end + 4);
      if (const auto length = ContentLength(std::string_view(response).substr(0, head_end + 2)))
        body->resize(std::min(body->size(), *length));
    }
  }
  ::close(fd);
  return body;
}

}  // namespace tessera::api
