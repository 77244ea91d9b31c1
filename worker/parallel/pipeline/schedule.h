// The order in which one pipeline stage runs the forward and backward passes of a step's
// micro-batches. GPipe runs every forward, then every backward: simple, but all m micro-
// batches' activations are alive at once. 1F1B (PipeDream-flush, as in Megatron-LM) runs
// p - s - 1 forwards to fill the pipeline, then alternates one forward and one backward,
// then drains: the same bubble, (p-1)/(m+p-1) of the step, with at most p - s micro-batches
// in flight on stage s.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace tessera::parallel {

enum class Schedule { kGPipe, k1F1B };

const char* ToString(Schedule schedule);  // "GPipe", "1F1B"
// Parses "GPipe" or "1F1B" (the API's spelling); nullopt otherwise.
std::optional<Schedule> ParseSchedule(const std::string& text);

struct PipelineOp {
  enum Kind { kForward, kBackward } kind;
  int micro_batch;
  bool operator==(const PipelineOp&) const = default;
};

// The ops of `stage` (0-based) of `stages` for `micro_batches` micro-batches. Every
// micro-batch appears once forward and once backward, forward first; backward passes come in
// micro-batch order on every stage, so neighbours' sends and receives pair up.
std::vector<PipelineOp> MakeSchedule(Schedule schedule, int stages, int stage, int micro_batches);

// The most micro-batches whose activations a stage holds at once under `ops`.
int PeakInFlight(const std::vector<PipelineOp>& ops);

// The idle fraction of an ideal pipeline with equal stages: (p - 1) / (m + p - 1).
double IdealBubble(int stages, int micro_batches);

}  // namespace tessera::parallel
