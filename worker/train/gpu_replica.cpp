#include "worker/train/gpu_replica.h"

#include <fmt/format.h>

#include "worker/model/cuda/gpt_cuda.h"

namespace tessera::train {

Status CheckGpu(int local_rank, int* device) {
  if (!model::GptCudaCompiled()) {
    return BadConfig(
        "precision: bf16 needs a CUDA GPU, and this tessera-worker was built without CUDA; use "
        "precision fp32 to train on the CPU");
  }
  const int count = model::CudaDeviceCount();
  if (count == 0) {
    return BadConfig(
        "precision: bf16 needs a CUDA GPU: no CUDA device is visible (give the pod "
        "gpusPerWorker > 0, check CUDA_VISIBLE_DEVICES and the driver); use precision fp32 to "
        "train on the CPU");
  }
  *device = local_rank % count;
  return Status::Ok();
}

Status GpuReplica::Create(const TrainerConfig& config, int device,
                          std::shared_ptr<comm::ProcessGroup> group, size_t bucket_bytes,
                          std::unique_ptr<GpuReplica>* out) {
  std::unique_ptr<GpuReplica> r(new GpuReplica());
  std::string error;
  r->model_ = model::CreateGptCuda(config.model, {.device = device}, &error);
  if (!r->model_) {
    return BadConfig(fmt::format("precision: bf16: cannot create the model on CUDA device {}: {}",
                                 device, error));
  }
  r->group_ = std::move(group);
  if (r->group_) {
    const std::span<float> grads(r->model_->device_gradients(),
                                 static_cast<size_t>(r->model_->parameter_count()));
    r->reducer_ = std::make_unique<parallel::BucketReducer>(
        r->group_, grads, bucket_bytes,
        model::GradientReadyOffsets(model::GptShardTensors(config.model, {})));
  }
  *out = std::move(r);
  return Status::Ok();
}

GpuReplica::~GpuReplica() = default;

int64_t GpuReplica::parameter_count() const {
  return model_->parameter_count();
}
int64_t GpuReplica::step_count() const {
  return model_->step_count();
}
int64_t GpuReplica::activation_bytes() const {
  return model_->activation_bytes();
}
size_t GpuReplica::buckets() const {
  return reducer_ ? reducer_->buckets().size() : 0;
}

void GpuReplica::InitParameters(uint64_t seed) {
  model_->InitParameters(seed);
}

double GpuReplica::ForwardBackward(int micro_batches,
                                   const std::function<void(int, Batch*)>& next_batch,
                                   parallel::ReductionStats* stats) {
  model_->ZeroGradients();
  const model::GpuGradientsReadyFn on_ready = [this](int64_t first, void* event) {
    reducer_->GradientsReady(first, event);
  };
  double loss = 0;
  Batch batch;
  for (int m = 0; m < micro_batches; ++m) {
    next_batch(m, &batch);
    model_->Forward(batch.tokens, batch.targets, batch.B, batch.T);
    // Only the last micro-batch's backward makes gradients final, so only it starts buckets.
    model_->Backward(1.0f / static_cast<float>(micro_batches),
                     reducer_ && m == micro_batches - 1 ? on_ready : model::GpuGradientsReadyFn());
    // Waits for this forward only; the backward just enqueued keeps the device busy while
    // the host prepares the next micro-batch.
    loss += model_->Loss();
  }
  *stats = reducer_ ? reducer_->Finish() : parallel::ReductionStats();
  return loss / micro_batches;
}

double GpuReplica::Step(const OptimizerConfig& optimizer, double lr) {
  const model::GpuAdamWOptions options{.lr = static_cast<float>(lr),
                                       .beta1 = static_cast<float>(optimizer.beta1),
                                       .beta2 = static_cast<float>(optimizer.beta2),
                                       .eps = static_cast<float>(optimizer.eps),
                                       .weight_decay = static_cast<float>(optimizer.weight_decay),
                                       .grad_clip = static_cast<float>(optimizer.grad_clip)};
  model_->Step(options, static_cast<float>(lr));
  return model_->GradNorm();
}

double GpuReplica::EvaluationLoss(const Batch& batch) {
  model_->Forward(batch.tokens, batch.targets, batch.B, batch.T);
  return model_->Loss();
}

void GpuReplica::GetState(std::span<float> params, std::span<float> first_moment,
                          std::span<float> second_moment) const {
  model_->GetParameters(params);
  model_->GetOptimizerState(first_moment, second_moment);
}

void GpuReplica::SetState(std::span<const float> params, std::span<const float> first_moment,
                          std::span<const float> second_moment, int64_t step_count) {
  model_->SetParameters(params);  // resets the moments: set them after
  model_->SetOptimizerState(first_moment, second_moment, step_count);
}

}  // namespace tessera::train
