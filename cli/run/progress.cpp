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

void ProgressTracker::Record(const api::ProgressDocument& report, int64_t attempt,
                             Clock::time_point now) {
  if (attempt_ != attempt) {
    attempt_ = attempt;
    rate_origin_.reset();
  }
  if (!rate_origin_ && report.step > 0)
    rate_origin_ = Origin{now, report.step};
  // A resumed attempt reports the checkpoint's step, with no throughput, until it trains one.
  if (report.step > 0 && report.tokens_per_second > 0 && report.step != last_counted_step_) {
    last_counted_step_ = report.step;
    tokens_per_second_sum_ += report.tokens_per_second;
    ++tokens_per_second_count_;
  }
  latest_ = report;
  latest_at_ = now;
}

void ProgressTracker::Restarted() {
  latest_.reset();
}

std::optional<double> ProgressTracker::EtaSeconds() const {
  if (!latest_ || !rate_origin_ || latest_->step <= rate_origin_->step)
    return std::nullopt;
  // Both ends of the interval are reports: the steps and the seconds are measured alike.
  const double rate = static_cast<double>(latest_->step - rate_origin_->step) /
                      std::chrono::duration<double>(latest_at_ - rate_origin_->at).count();
  if (rate <= 0)
    return std::nullopt;
  return (latest_->total_steps - latest_->step) / rate;
}

std::optional<double> ProgressTracker::MeanTokensPerSecond() const {
  if (tokens_per_second_count_ <= 0)
    return std::nullopt;
  return tokens_per_second_sum_ / tokens_per_second_count_;
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
