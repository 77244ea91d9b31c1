#include "worker/parallel/pipeline/runner.h"

#include <chrono>
#include <map>
#include <stdexcept>

namespace tessera::parallel {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Tags of the two directions of micro-batch `index`.
uint32_t ActivationTag(int index) {
  return static_cast<uint32_t>(2 * index);
}
uint32_t GradientTag(int index) {
  return static_cast<uint32_t>(2 * index + 1);
}

}  // namespace

PipelineRunner::PipelineRunner(model::Gpt* model, std::shared_ptr<comm::ProcessGroup> group,
                               Schedule schedule)
    : model_(model), group_(std::move(group)), schedule_(schedule) {
  if (group_ && group_->size() > 1) {
    stage_ = group_->rank();
    stages_ = group_->size();
  } else {
    group_.reset();
  }
  const model::GptShard& shard = model_->shard();
  if (shard.embedding != first() || shard.head != last()) {
    throw std::invalid_argument("PipelineRunner: stage " + std::to_string(stage_) + " of " +
                                std::to_string(stages_) +
                                " must hold the embedding exactly when first and the head "
                                "exactly when last");
  }
}

void PipelineRunner::WaitSends(int slot, PipelineStats* stats) {
  const auto start = Clock::now();
  for (const std::shared_ptr<comm::Work>& w : slots_[slot].sends)
    w->wait();
  slots_[slot].sends.clear();
  if (stats != nullptr)
    stats->idle_seconds += Seconds(start);
}

void PipelineRunner::PostReceive(bool forward, int index, size_t count) {
  if (forward ? first() : last())
    return;
  std::map<int, Receive>& pending = forward ? activations_in_ : gradients_in_;
  if (pending.count(index))
    return;
  Receive& r = pending[index];
  if (!spare_.empty()) {
    r.data = std::move(spare_.back());
    spare_.pop_back();
  }
  r.data.resize(count);
  r.work = forward ? group_->recv(r.data.data(), count, comm::DataType::kFloat32, stage_ - 1,
                                  ActivationTag(index))
                   : group_->recv(r.data.data(), count, comm::DataType::kFloat32, stage_ + 1,
                                  GradientTag(index));
}

std::vector<float> PipelineRunner::TakeReceive(bool forward, int index, size_t count,
                                               PipelineStats* stats) {
  PostReceive(forward, index, count);
  std::map<int, Receive>& pending = forward ? activations_in_ : gradients_in_;
  auto it = pending.find(index);
  const auto start = Clock::now();
  it->second.work->wait();
  stats->idle_seconds += Seconds(start);
  std::vector<float> data = std::move(it->second.data);
  pending.erase(it);
  return data;
}

void PipelineRunner::Forward(int index, int slot, const MicroBatch& batch, PipelineStats* stats) {
  SlotBuffers& buf = slots_[slot];
  const size_t n = static_cast<size_t>(batch.B) * batch.T * model_->config().d_model;
  if (!first()) {
    spare_.push_back(std::move(buf.input));
    buf.input = TakeReceive(true, index, n, stats);
  }
  const float loss = model_->Forward(batch.tokens, batch.targets, batch.B, batch.T, slot,
                                     first() ? std::span<const float>() : buf.input);
  if (last()) {
    stats->loss_sum += loss;
  } else {
    const std::span<const float> out = model_->output(slot);
    buf.sends.push_back(group_->send(out.data(), out.size(), comm::DataType::kFloat32, stage_ + 1,
                                     ActivationTag(index)));
    stats->comm_bytes += static_cast<double>(out.size_bytes());
  }
}

void PipelineRunner::Backward(int index, int slot, const MicroBatch& batch, float loss_scale,
                              const model::GradientsReadyFn& on_ready, PipelineStats* stats) {
  SlotBuffers& buf = slots_[slot];
  const size_t n = static_cast<size_t>(batch.B) * batch.T * model_->config().d_model;
  if (!last()) {
    spare_.push_back(std::move(buf.dout));
    buf.dout = TakeReceive(false, index, n, stats);
  }
  model_->Backward(loss_scale, on_ready, slot, last() ? std::span<const float>() : buf.dout);
  if (!first()) {
    const std::span<const float> din = model_->input_gradient(slot);
    buf.sends.push_back(group_->send(din.data(), din.size(), comm::DataType::kFloat32, stage_ - 1,
                                     GradientTag(index)));
    stats->comm_bytes += static_cast<double>(din.size_bytes());
  }
}

PipelineStats PipelineRunner::Train(int micro_batches, const MicroBatchFn& load, float loss_scale,
                                    const model::GradientsReadyFn& on_ready) {
  const auto start = Clock::now();
  PipelineStats stats;
  const std::vector<PipelineOp> ops = MakeSchedule(schedule_, stages_, stage_, micro_batches);
  stats.peak_in_flight = PeakInFlight(ops);
  if (static_cast<int>(slots_.size()) < stats.peak_in_flight)
    slots_.resize(static_cast<size_t>(stats.peak_in_flight));
  // Slots are handed out at forward and returned at backward, lowest free first.
  std::vector<int> free_slots;
  for (int s = stats.peak_in_flight - 1; s >= 0; s--)
    free_slots.push_back(s);
  std::map<int, std::pair<int, MicroBatch>> alive;  // micro-batch -> (slot, its data)
  int backward_left = micro_batches;
  size_t count = 0;  // floats of one micro-batch's activations (the same for all)
  for (size_t k = 0; k < ops.size(); k++) {
    const PipelineOp& op = ops[k];
    if (op.kind == PipelineOp::kForward) {
      const int slot = free_slots.back();
      free_slots.pop_back();
      WaitSends(slot, &stats);  // its buffers are about to be overwritten
      auto& [s, batch] = alive[op.micro_batch];
      s = slot;
      load(op.micro_batch, &batch);
      count = static_cast<size_t>(batch.B) * batch.T * model_->config().d_model;
    }
    // Post the receives the next forward and the next backward will need, so their
    // transfers overlap this op's compute.
    for (size_t j = k + 1; j < ops.size(); j++) {
      if (ops[j].kind == PipelineOp::kForward) {
        PostReceive(true, ops[j].micro_batch, count);
        break;
      }
    }
    for (size_t j = k + 1; j < ops.size(); j++) {
      if (ops[j].kind == PipelineOp::kBackward) {
        PostReceive(false, ops[j].micro_batch, count);
        break;
      }
    }
    auto it = alive.find(op.micro_batch);
    const int slot = it->second.first;
    if (op.kind == PipelineOp::kForward) {
      Forward(op.micro_batch, slot, it->second.second, &stats);
    } else {
      --backward_left;
      Backward(op.micro_batch, slot, it->second.second, loss_scale,
               backward_left == 0 ? on_ready : model::GradientsReadyFn(), &stats);
      alive.erase(it);
      free_slots.push_back(slot);
    }
  }
  for (int s = 0; s < static_cast<int>(slots_.size()); s++)
    WaitSends(s, &stats);
  // The step ends for every stage when the last one is done: the first stage finishes with
  // the drain's last backward, the last stage long before it. Without this common end a
  // stage's bubble would leave out the idle tail of the step.
  if (group_) {
    const auto end = Clock::now();
    group_->barrier()->wait();
    stats.idle_seconds += Seconds(end);
  }
  stats.seconds = Seconds(start);
  return stats;
}

double PipelineRunner::Evaluate(int micro_batches, const MicroBatchFn& load) {
  if (slots_.empty())
    slots_.resize(1);
  double sum = 0;
  PipelineStats stats;
  MicroBatch batch;
  for (int i = 0; i < micro_batches; i++) {
    WaitSends(0, nullptr);
    load(i, &batch);
    const double before = stats.loss_sum;
    Forward(i, 0, batch, &stats);
    if (last())
      sum += (stats.loss_sum - before) * batch.B;
  }
  WaitSends(0, nullptr);
  return sum;
}

}  // namespace tessera::parallel
