// The trainer's model on a GPU (`precision: bf16`): model::GptCuda on this rank's device and,
// with several data-parallel ranks, gradient buckets all-reduced over an NCCL group on the
// group's own stream as soon as backward has enqueued the kernels that finish them (the
// bucket waits for a CUDA event, the host does not), then clipping and AdamW fused in one
// device step. Parameters, gradients and AdamW state stay on the device; checkpoints copy
// them to the host. The trainer (trainer.cpp) chooses it or the CPU model at run time; this
// header names no CUDA type, and without CUDA CheckGpu says so.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "worker/comm/process_group.h"
#include "worker/parallel/data/bucket_reducer.h"
#include "worker/train/config.h"
#include "worker/train/data_loader.h"
#include "worker/train/status.h"

namespace tessera::model {
class GptCuda;
}

namespace tessera::train {

// The CUDA device a rank with `local_rank` uses: local_rank modulo the visible devices (the
// agent pins each rank to one GPU through CUDA_VISIBLE_DEVICES, so that is device 0). Without
// a CUDA build or a visible device: kBadConfig naming `precision` ("precision: bf16 needs a
// CUDA GPU: no CUDA device ...; use precision fp32 ..."). Checked before joining the world,
// so every rank of a job sent to a machine without GPUs fails the same way at once.
Status CheckGpu(int local_rank, int* device);

class GpuReplica {
 public:
  // `group`: the data-parallel group over NCCL (a device backend), or null for one rank.
  // `bucket_bytes`: gradient bucket size, as for the CPU model.
  static Status Create(const TrainerConfig& config, int device,
                       std::shared_ptr<comm::ProcessGroup> group, size_t bucket_bytes,
                       std::unique_ptr<GpuReplica>* out);
  ~GpuReplica();
  GpuReplica(const GpuReplica&) = delete;
  GpuReplica& operator=(const GpuReplica&) = delete;

  int64_t parameter_count() const;
  int64_t step_count() const;
  // Bytes of device memory the activations of the last shape took.
  int64_t activation_bytes() const;
  size_t buckets() const;  // 0 for one rank

  void InitParameters(uint64_t seed);

  // Zeroes the gradients, runs forward and backward over `micro_batches` batches from
  // `next_batch(m, &batch)` (the last one's backward starts the buckets) and waits for the
  // reduction. Returns this rank's mean loss over its micro-batches; *stats the reduction's
  // figures (exposed_seconds: how long the host waited for backward and the last buckets).
  double ForwardBackward(int micro_batches, const std::function<void(int, Batch*)>& next_batch,
                         parallel::ReductionStats* stats);
  // Global norm, clipping and AdamW on the device; returns the norm before clipping (the
  // step's wait). The update is applied whatever the norm: a caller that finds it not finite
  // stops without saving.
  double Step(const OptimizerConfig& optimizer, double lr);
  // Mean loss of one evaluation batch (forward only).
  double EvaluationLoss(const Batch& batch);

  // Host copies of the parameters and AdamW moments (parameter_count() floats each).
  void GetState(std::span<float> params, std::span<float> first_moment,
                std::span<float> second_moment) const;
  void SetState(std::span<const float> params, std::span<const float> first_moment,
                std::span<const float> second_moment, int64_t step_count);

 private:
  GpuReplica() = default;
  std::unique_ptr<model::GptCuda> model_;
  std::shared_ptr<comm::ProcessGroup> group_;
  std::unique_ptr<parallel::BucketReducer> reducer_;
};

}  // namespace tessera::train
