#include "cli/run/progress.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <utility>

namespace tessera::cli {
namespace {

using Clock = std::chrono::steady_clock;

int MillisLeft(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(left, 0));
}

// Waits until `fd` is ready for `events` or the deadline passes.
bool WaitFor(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  while (true) {
    const int r = ::poll(&p, 1, MillisLeft(deadline));
    if (r > 0)
      return true;
    if (r == 0 || errno != EINTR)
      return false;
  }
}

std::string CompactRate(double per_second) {
  if (per_second >= 1e6)
    return fmt::format("{:.1f}M", per_second / 1e6);
  if (per_second >= 1e4)
    return fmt::format("{:.1f}k", per_second / 1e3);
  return fmt::format("{:.0f}", per_second);
}

}  // namespace

std::optional<api::ProgressDocument> FetchProgress(int port, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return std::nullopt;
  std::optional<api::ProgressDocument> result;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  bool connected = rc == 0;
  if (rc != 0 && errno == EINPROGRESS && WaitFor(fd, POLLOUT, deadline)) {
    int err = 0;
    socklen_t len = sizeof(err);
    connected = ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
  }
  if (connected) {
    const std::string request =
        "GET /progress HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    size_t sent = 0;
    while (sent < request.size() && WaitFor(fd, POLLOUT, deadline)) {
      const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0)
        break;
      sent += static_cast<size_t>(n);
    }
    std::string response;
    char buffer[4096];
    while (sent == request.size() && response.size() < (1 << 20) && WaitFor(fd, POLLIN, deadline)) {
      const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0)
        break;
      response.append(buffer, static_cast<size_t>(n));
    }
    const size_t body = response.find("\r\n\r\n");
    if (response.rfind("HTTP/1.", 0) == 0 && response.find(" 200") == response.find(' ') &&
        body != std::string::npos) {
      result = api::DecodeProgressJson(std::string_view(response).substr(body + 4));
    }
  }
  ::close(fd);
  return result;
}

std::string FormatDuration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s >= 3600)
    return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

std::string FormatProgressBar(const ProgressView& view, int width) {
  const api::ProgressDocument& r = view.report;
  std::string figures =
      fmt::format("{:>{}}/{}", r.step, std::to_string(r.total_steps).size(), r.total_steps);
  figures += fmt::format("  loss {:.4f}", r.loss);
  if (r.val_loss)
    figures += fmt::format("  val {:.4f}", *r.val_loss);
  figures += fmt::format("  {} tok/s", CompactRate(r.tokens_per_second));
  figures += "  ETA " + (view.eta_seconds ? FormatDuration(*view.eta_seconds) : "-:--");
  if (view.restarts > 0)
    figures += fmt::format("  restarts {}", view.restarts);
  const int bar_width = std::min(30, width - static_cast<int>(figures.size()) - 3);
  if (bar_width < 10)
    return figures.substr(0, static_cast<size_t>(std::max(width, 0)));
  const double fraction =
      r.total_steps > 0 ? std::clamp(static_cast<double>(r.step) / r.total_steps, 0.0, 1.0) : 0;
  const int filled = static_cast<int>(fraction * bar_width);
  return "[" + std::string(static_cast<size_t>(filled), '#') +
         std::string(static_cast<size_t>(bar_width - filled), '.') + "] " + figures;
}

std::string FormatProgressLine(const ProgressView& view) {
  const api::ProgressDocument& r = view.report;
  std::string line = fmt::format("step {}/{} loss {:.4f}", r.step, r.total_steps, r.loss);
  if (r.val_loss)
    line += fmt::format(" val_loss {:.4f}", *r.val_loss);
  line += fmt::format(" tokens/s {:.0f}", r.tokens_per_second);
  if (view.eta_seconds)
    line += " eta " + FormatDuration(*view.eta_seconds);
  if (view.restarts > 0)
    line += fmt::format(" attempt {} restarts {}", view.attempt, view.restarts);
  return line;
}

}  // namespace tessera::cli
