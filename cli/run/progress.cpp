#include "cli/run/progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <utility>

namespace tessera::cli {
namespace {

std::string CompactRate(double per_second) {
  if (per_second >= 1e6)
    return fmt::format("{:.1f}M", per_second / 1e6);
  if (per_second >= 1e4)
    return fmt::format("{:.1f}k", per_second / 1e3);
  return fmt::format("{:.0f}", per_second);
}

}  // namespace

std::optional<api::ProgressDocument> FetchProgress(int port, int timeout_ms) {
  const auto body =
      api::FetchProgressBody("127.0.0.1", port, std::chrono::milliseconds(timeout_ms));
  if (!body)
    return std::nullopt;
  return api::DecodeProgressJson(*body);
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
