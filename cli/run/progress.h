// Rank 0's training progress as `tessera run` sees it: reading the trainer's `/progress` JSON
// over loopback HTTP, and formatting it as a progress bar (terminal) or a plain log line.
// Formatting is pure; FetchProgress does blocking I/O with a deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "api/progress.h"

namespace tessera::cli {

// GET http://127.0.0.1:<port>/progress, giving up after `timeout_ms` in total. Absent when
// nothing answered in time or the answer was not a progress document.
std::optional<api::ProgressDocument> FetchProgress(int port, int timeout_ms);

// What the progress line shows.
struct ProgressView {
  api::ProgressDocument report;
  std::optional<double> eta_seconds;  // absent until a step rate is known
  int64_t attempt = 0;
  int64_t restarts = 0;
};

// Rank 0's reports over the attempts of one run, as `tessera run` keeps them: the latest one
// of the current attempt (what is shown, and what the progress deadline watches), the ETA from
// the step rate since the attempt's first report, and the summary's mean throughput. Pure: the
// caller gives the time of every report. Not thread-safe.
class ProgressTracker {
 public:
  using Clock = std::chrono::steady_clock;

  // A report read from rank 0 of `attempt` at `now`. The first report of an attempt with a
  // step (its first step, or the checkpoint step it resumed from) is the origin of that
  // attempt's step rate. A step trained and not counted yet adds its tokensPerSecond to the
  // mean; a report without throughput (a resumed attempt before its first step) does not.
  void Record(const api::ProgressDocument& report, int64_t attempt, Clock::time_point now);
  // The gang restarts: nothing is shown until the next attempt reports.
  void Restarted();

  // The latest report; absent before the first and after Restarted until the next.
  const std::optional<api::ProgressDocument>& latest() const { return latest_; }
  // The attempt of the latest report; -1 before the first.
  int64_t attempt() const { return attempt_; }
  // Seconds left as of the latest report, at the attempt's rate from its origin to that
  // report; absent until a step was trained since the origin.
  std::optional<double> EtaSeconds() const;
  // The mean of the throughputs counted; absent when none was.
  std::optional<double> MeanTokensPerSecond() const;

 private:
  struct Origin {
    Clock::time_point at;
    int64_t step = 0;
  };
  std::optional<api::ProgressDocument> latest_;
  Clock::time_point latest_at_;
  int64_t attempt_ = -1;
  std::optional<Origin> rate_origin_;
  double tokens_per_second_sum_ = 0;
  int64_t tokens_per_second_count_ = 0;
  int64_t last_counted_step_ = -1;
};

// "[#########...........]  120/300  loss 2.1345  val 2.2001  12.3k tok/s  ETA 0:45" in
// `width` columns at most (the bar shrinks first; below ~50 columns there is no bar). Adds
// "  restarts 1" after a restart.
std::string FormatProgressBar(const ProgressView& view, int width);

// "step 120/300 loss 2.1345 val_loss 2.2001 tokens/s 12345 eta 45s" for logs (no terminal).
std::string FormatProgressLine(const ProgressView& view);

// "1:02:03", "4:05" or "0:07".
std::string FormatDuration(double seconds);

}  // namespace tessera::cli
