#include "worker/parallel/pipeline/schedule.h"

#include <algorithm>

namespace tessera::parallel {

const char* ToString(Schedule schedule) {
  return schedule == Schedule::kGPipe ? "GPipe" : "1F1B";
}

std::optional<Schedule> ParseSchedule(const std::string& text) {
  if (text == "GPipe")
    return Schedule::kGPipe;
  if (text == "1F1B")
    return Schedule::k1F1B;
  return std::nullopt;
}

std::vector<PipelineOp> MakeSchedule(Schedule schedule, int stages, int stage, int micro_batches) {
  std::vector<PipelineOp> ops;
  const int m = micro_batches;
  if (schedule == Schedule::kGPipe) {
    for (int i = 0; i < m; i++)
      ops.push_back({PipelineOp::kForward, i});
    for (int i = 0; i < m; i++)
      ops.push_back({PipelineOp::kBackward, i});
    return ops;
  }
  const int warmup = std::min(stages - stage - 1, m);
  for (int i = 0; i < warmup; i++)
    ops.push_back({PipelineOp::kForward, i});
  for (int i = 0; i < m - warmup; i++) {
    ops.push_back({PipelineOp::kForward, warmup + i});
    ops.push_back({PipelineOp::kBackward, i});
  }
  for (int i = m - warmup; i < m; i++)
    ops.push_back({PipelineOp::kBackward, i});
  return ops;
}

int PeakInFlight(const std::vector<PipelineOp>& ops) {
  int alive = 0, peak = 0;
  for (const PipelineOp& op : ops) {
    alive += op.kind == PipelineOp::kForward ? 1 : -1;
    peak = std::max(peak, alive);
  }
  return peak;
}

double IdealBubble(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

}  // namespace tessera::parallel
