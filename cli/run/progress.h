// Rank 0's training progress as `tessera run` sees it: reading the trainer's `/progress` JSON
// over loopback HTTP, and formatting it as a progress bar (terminal) or a plain log line.
// Formatting is pure; FetchProgress does blocking I/O with a deadline.
#pragma once

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

// "[#########...........]  120/300  loss 2.1345  val 2.2001  12.3k tok/s  ETA 0:45" in
// `width` columns at most (the bar shrinks first; below ~50 columns there is no bar). Adds
// "  restarts 1" after a restart.
std::string FormatProgressBar(const ProgressView& view, int width);

// "step 120/300 loss 2.1345 val_loss 2.2001 tokens/s 12345 eta 45s" for logs (no terminal).
std::string FormatProgressLine(const ProgressView& view);

// "1:02:03", "4:05" or "0:07".
std::string FormatDuration(double seconds);

}  // namespace tessera::cli
