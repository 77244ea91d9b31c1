#include "worker/train/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "worker/model/cpu/gpt_cpu.h"
#include "worker/model/cuda/activation_layout.h"
#include "worker/parallel/data/zero.h"
#include "worker/parallel/pipeline/schedule.h"

namespace tessera::train {

int64_t TrainingPlan::largest_rank_bytes() const {
  int64_t most = 0;
  for (const StagePlan& s : stages)
    most = std::max(most, s.memory.total());
  return most;
}

int64_t TrainingPlan::all_ranks_bytes() const {
  int64_t sum = 0;
  for (const StagePlan& s : stages)
    sum += s.memory.total();
  return sum * shape.data * shape.tensor;
}

int64_t TrainingPlan::ranks_bytes(int first, int count) const {
  int64_t sum = 0;
  for (int r = first; r < first + count; ++r)
    sum += stages[static_cast<size_t>(shape.coords(r).pipeline)].memory.total();
  return sum;
}

double MfuRatio(double flops_per_token, double tokens_per_second, double peak_per_rank,
                int world_size) {
  if (!(peak_per_rank > 0) || world_size < 1)
    return 0;
  return flops_per_token * tokens_per_second / (peak_per_rank * world_size);
}

double FlopsPerToken(const model::GptConfig& config) {
  const int64_t whole = model::GptParameterCount(config);
  const int64_t wpe = static_cast<int64_t>(config.seq_len) * config.d_model;
  return 6.0 * static_cast<double>(whole - wpe) +
         12.0 * config.layers * config.d_model * static_cast<double>(config.seq_len);
}

Status PlanTraining(const TrainerConfig& config, int world_size, int pipeline, int tensor,
                    TrainingPlan* out, model::GpuAttention attention) {
  if (Status st = ValidateTrainerConfig(config, world_size, pipeline, tensor); !st.ok())
    return st;
  TrainingPlan plan;
  plan.shape = {world_size / (pipeline * tensor), pipeline, tensor};
  const int T = config.model.seq_len;
  plan.parameters = model::GptParameterCount(config.model);
  plan.micro_batches = config.batch.micro_batches;
  plan.sequences_per_rank = config.batch.global / plan.shape.data;
  plan.micro_batch = plan.sequences_per_rank / plan.micro_batches;
  plan.tokens_per_step = static_cast<int64_t>(config.batch.global) * T;
  plan.flops_per_token = FlopsPerToken(config.model);
  plan.ideal_bubble = pipeline > 1 ? parallel::IdealBubble(pipeline, plan.micro_batches) : 0.0;
  std::error_code ec;
  if (const auto size = std::filesystem::file_size(config.data.path, ec); !ec)
    plan.corpus_bytes = static_cast<int64_t>(size);
  const std::optional<parallel::Schedule> schedule =
      parallel::ParseSchedule(config.parallel.schedule);  // validated above
  const std::vector<parallel::StageLayers> layers =
      parallel::PartitionStages(parallel::GptLayerCosts(config.model, T), pipeline);
  for (int s = 0; s < pipeline; s++) {
    StagePlan stage;
    stage.layers = layers[s];
    stage.embedding = s == 0;
    stage.head = s == pipeline - 1;
    RankMemory& m = stage.memory;
    if (config.precision == Precision::kBf16) {
      // The whole model on each rank's GPU (validation allows data parallelism only).
      const model::GptCudaMemory gpu =
          model::GptCudaMemoryFor(config.model, plan.micro_batch, T, attention);
      stage.parameters = plan.parameters;
      m = {.parameters = gpu.parameters,
           .gradients = gpu.gradients,
           .optimizer = gpu.optimizer,
           .activations = gpu.activations,
           .attention = gpu.attention,
           .gpu = true};
    } else {
      const model::GptShard shard{.first_layer = stage.layers.first,
                                  .end_layer = stage.layers.end,
                                  .embedding = stage.embedding,
                                  .head = stage.head,
                                  .tensor_rank = 0,
                                  .tensor_size = tensor};
      for (const model::ShardTensor& t : model::GptShardTensors(config.model, shard))
        stage.parameters += t.local.size;
      // The pipeline runner keeps one activation slot per micro-batch alive at once; without
      // pipeline parallelism micro-batches run one after another in one slot.
      stage.in_flight = pipeline > 1 ? parallel::PeakInFlight(parallel::MakeSchedule(
                                           *schedule, pipeline, s, plan.micro_batches))
                                     : 1;
      const bool zero = config.parallel.zero_stage == 1 && plan.shape.data > 1;
      const parallel::ZeroLayout layout{.count = stage.parameters, .ranks = plan.shape.data};
      using Activations = model::cpu::GptActivations<float>;
      m.parameters = 4 * stage.parameters;
      m.gradients = 4 * stage.parameters + (zero ? layout.buffer_bytes() : 0);
      m.optimizer = 8 * (zero ? layout.shard_size() : stage.parameters);
      m.activations =
          stage.in_flight * Activations::BytesFor(config.model, plan.micro_batch, T, shard);
      m.attention = stage.in_flight *
                    Activations::AttentionBytesFor(config.model, plan.micro_batch, T, shard);
      // TokenDataset: a text file held as 16-bit ids; a uint16 file mapped, not held.
      if (plan.corpus_bytes && config.data.tokenizer == "byte")
        m.data = 2 * *plan.corpus_bytes;
    }
    plan.stages.push_back(stage);
  }
  double total_cost = 0;
  for (const StagePlan& s : plan.stages)
    total_cost += s.layers.cost;
  for (StagePlan& s : plan.stages)
    s.cost_share = s.layers.cost / total_cost;
  *out = std::move(plan);
  return Status::Ok();
}

Status CheckStageFits(const StagePlan& stage, int micro_batch, int seq_len, int64_t available,
                      const std::string& where) {
  const RankMemory& m = stage.memory;
  if (m.total() <= available)
    return Status::Ok();
  const int64_t state = m.parameters + m.gradients + m.optimizer;
  return BadConfig(fmt::format(
      "batch.global, model.seqLen: this rank needs at least {}: {} of activations for "
      "micro-batches of {} sequences of {} tokens, {} alive at once (attention probabilities "
      "{}), and {} of parameters, gradients and AdamW state{}, but {} of {} is available; "
      "lower batch.global or model.seqLen, or raise batch.microBatches{} (tessera plan shows "
      "every rank's figures)",
      FormatBytes(m.total()), FormatBytes(m.activations), micro_batch, seq_len, stage.in_flight,
      FormatBytes(m.attention), FormatBytes(state),
      m.data > 0 ? fmt::format(" and {} of corpus ids", FormatBytes(m.data)) : "",
      FormatBytes(available), where,
      m.gpu && m.attention > 0
          ? ", or set TESSERA_ATTENTION=flash-mma2 (no seqLen x seqLen buffers)"
          : ""));
}

Status CheckPodFits(const TrainingPlan& plan, int first, int count, int64_t available) {
  int64_t largest = 0;
  for (int r = first; r < first + count; ++r)
    largest = std::max(largest, plan.ranks_bytes(r, 1));
  const int64_t together = plan.ranks_bytes(first, count);
  if (count <= 1 || largest > available || together <= available || plan.stages[0].memory.gpu)
    return Status::Ok();
  return BadConfig(fmt::format(
      "batch.global, model.seqLen: the {} ranks of this pod (ranks {} to {}) need {} together "
      "(the largest {}), but {} of memory is available to the pod; lower batch.global or "
      "model.seqLen, raise batch.microBatches, or run fewer ranks a pod (procsPerWorker) or "
      "give the pod more memory (tessera plan shows every rank's figures)",
      count, first, first + count - 1, FormatBytes(together), FormatBytes(largest),
      FormatBytes(available)));
}

std::string FormatBytes(int64_t bytes) {
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024)
    return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  // The next unit from where one decimal would round up to 1024.0 (1048575 B is "1.0 MiB").
  while (value >= 1023.95 && unit < 3) {
    value /= 1024.0;
    unit++;
  }
  return fmt::format("{:.1f} {}", value, kUnits[unit]);
}

}  // namespace tessera::train
