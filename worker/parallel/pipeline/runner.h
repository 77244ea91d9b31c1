// Runs a pipeline schedule on this stage's model shard: for each op, receives the previous
// stage's activations (or the next stage's gradients) through the pipeline group, computes,
// and sends its own on asynchronously. The receive of the next forward's input and of the next
// backward's gradient are posted one op ahead, so a transfer lands while this stage computes
// and only a true dependency makes it wait. Every stage of a pipeline (and every
// tensor-parallel rank of a stage) runs the same step with the same schedule kind and
// micro-batch count.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "worker/comm/process_group.h"
#include "worker/model/gpt.h"
#include "worker/parallel/pipeline/schedule.h"

namespace tessera::parallel {

// One micro-batch's tokens and targets, B sequences of T tokens.
struct MicroBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> targets;
  int B = 0;
  int T = 0;
};

// Fills *out with micro-batch `index` of the step (every stage loads the same one: the first
// needs its tokens, the last its targets).
using MicroBatchFn = std::function<void(int index, MicroBatch* out)>;

struct PipelineStats {
  double loss_sum = 0;      // sum of the micro-batches' mean losses (last stage; else 0)
  double seconds = 0;       // the whole step's forward and backward on this stage
  double idle_seconds = 0;  // of which waiting for a neighbour's activations or gradients
  double comm_bytes = 0;    // activations and gradients sent by this stage
  int peak_in_flight = 0;   // micro-batches whose activations were alive at once
  // The bubble: idle_seconds / seconds (0 for a one-stage pipeline).
  double bubble() const { return seconds > 0 ? idle_seconds / seconds : 0.0; }
};

class PipelineRunner {
 public:
  // `group` is the pipeline group (stage = its rank, stages = its size); null or of size 1
  // for a model that is not pipelined. The model shard must hold the embedding exactly on
  // stage 0 and the head exactly on the last stage.
  PipelineRunner(model::Gpt* model, std::shared_ptr<comm::ProcessGroup> group, Schedule schedule);

  int stage() const { return stage_; }
  int stages() const { return stages_; }
  bool first() const { return stage_ == 0; }
  bool last() const { return stage_ == stages_ - 1; }

  // One step's forward and backward passes over `micro_batches` micro-batches, adding
  // gradients (scaled by `loss_scale`) into the model's; `on_ready` is given to the final
  // backward pass of the step (data parallelism starts its buckets there). Throws CommError
  // when a neighbour is lost.
  PipelineStats Train(int micro_batches, const MicroBatchFn& load, float loss_scale,
                      const model::GradientsReadyFn& on_ready = {});

  // Forward passes only (validation): the sum over micro-batches of mean loss × B on the last
  // stage, 0 elsewhere.
  double Evaluate(int micro_batches, const MicroBatchFn& load);

 private:
  // A receive posted ahead of the op that consumes it.
  struct Receive {
    std::vector<float> data;
    std::shared_ptr<comm::Work> work;
  };
  void Forward(int index, int slot, const MicroBatch& batch, PipelineStats* stats);
  void Backward(int index, int slot, const MicroBatch& batch, float loss_scale,
                const model::GradientsReadyFn& on_ready, PipelineStats* stats);
  // Posts the receive of micro-batch `index`'s activations (forward) or output gradient
  // (backward) unless it is posted already or this stage has no such neighbour.
  void PostReceive(bool forward, int index, size_t count);
  // Waits for that receive (the wait counts as idle) and hands over its buffer.
  std::vector<float> TakeReceive(bool forward, int index, size_t count, PipelineStats* stats);
  void WaitSends(int slot, PipelineStats* stats);

  model::Gpt* model_;
  std::shared_ptr<comm::ProcessGroup> group_;
  Schedule schedule_;
  int stage_ = 0;
  int stages_ = 1;
  // Receives in flight, by micro-batch: activations from the previous stage, gradients from
  // the next. Buffers come back to `spare_` once consumed.
  std::map<int, Receive> activations_in_;
  std::map<int, Receive> gradients_in_;
  std::vector<std::vector<float>> spare_;
  // Per activation slot: the received input and output gradient it computes with, and sends
  // in flight that read the slot's buffers.
  struct SlotBuffers {
    std::vector<float> input;
    std::vector<float> dout;
    std::vector<std::shared_ptr<comm::Work>> sends;
  };
  std::vector<SlotBuffers> slots_;
};

}  // namespace tessera::parallel
