#include "worker/train/trainer.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <new>
#include <optional>

#include "worker/comm/device_mesh.h"
#include "worker/model/cpu/gpt_cpu.h"
#include "worker/model/cuda/gpt_cuda.h"
#include "worker/model/gpt.h"
#include "worker/parallel/data/bucket_reducer.h"
#include "worker/parallel/data/zero.h"
#include "worker/parallel/pipeline/runner.h"
#include "worker/parallel/tensor/tensor_parallel.h"
#include "worker/train/adamw.h"
#include "worker/train/checkpoint.h"
#include "worker/train/data_loader.h"
#include "worker/train/gpu_replica.h"
#include "worker/train/lr_schedule.h"
#include "worker/train/memory.h"
#include "worker/train/metrics.h"
#include "worker/train/plan.h"

namespace tessera::train {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

double ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  if (!(statm >> pages_total >> pages_resident))
    return 0;
  return static_cast<double>(pages_resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

// Refuses a configuration whose memory on this rank — parameters, gradients, AdamW state and
// the activations of the micro-batches its stage keeps alive at once (TrainingPlan) — is more
// than the machine or container has left (fp32), or than the GPU has free (bf16), with the
// numbers: the first step would otherwise fail an allocation or be killed by the kernel.
Status CheckFitsInMemory(const StagePlan& stage, int micro, int T) {
  const std::optional<int64_t> available = AvailableMemoryBytes();
  if (!available)
    return Status::Ok();  // no /proc/meminfo: nothing to compare with
  return CheckStageFits(stage, micro, T, *available, "memory");
}

Status CheckFitsOnGpu(const StagePlan& stage, int micro, int T, int device) {
  const std::optional<int64_t> free = model::CudaFreeMemory(device);
  if (!free)
    return Status::Ok();
  return CheckStageFits(stage, micro, T, *free,
                        fmt::format("the free memory of CUDA device {}", device));
}

std::string ShardName(int rank) {
  return fmt::format("rank-{:05d}.bin", rank);
}

// What each rank tells the others about the shard file it wrote (all-gathered as bytes).
struct ShardRecord {
  int64_t bytes = 0;  // 0: this rank wrote no file
  char sha256[64] = {};
  uint8_t ok = 1;
  uint8_t pad[7] = {};
};
static_assert(sizeof(ShardRecord) == 80);

// Sum of squares of the gradients that count toward the global norm (mask 1): each distinct
// value once over the whole mesh.
double CountedSumOfSquares(std::span<const float> grads, std::span<const uint8_t> counted) {
  double sum = 0;
  for (size_t i = 0; i < grads.size(); i++) {
    if (counted[i])
      sum += static_cast<double>(grads[i]) * grads[i];
  }
  return sum;
}

// The pipeline runner's view of a loader batch.
void ToMicroBatch(Batch&& batch, parallel::MicroBatch* out) {
  out->tokens = std::move(batch.tokens);
  out->targets = std::move(batch.targets);
  out->B = batch.B;
  out->T = batch.T;
}

}  // namespace

struct Trainer::Impl {
  TrainerConfig config;
  RankContext rank;
  comm::MeshShape shape;    // data x pipeline x tensor
  comm::MeshCoords coords;  // this rank's place in it
  TokenDataset dataset;
  std::unique_ptr<DataLoader> loader;
  // The model: the CPU shard (precision fp32) or the GPU replica (bf16), never both.
  std::unique_ptr<model::Gpt> model;  // this rank's shard
  std::unique_ptr<AdamW> optimizer;
  std::unique_ptr<GpuReplica> gpu;
  // With the GPU model: host copies of its parameters and AdamW moments, for checkpoints.
  std::vector<float> host_params, host_m, host_v;
  std::vector<uint8_t> decay_mask;
  // 1 where this rank's gradient counts toward the global norm: a value replicated over
  // tensor ranks counts on tensor rank 0 only, the tied wte on the first stage only.
  std::vector<uint8_t> norm_mask;
  int64_t wte_size = 0;  // vocab x dModel: the tied embedding at the front of both ends' buffers
  LrSchedule schedule;
  std::unique_ptr<TrainMetrics> metrics;
  std::unique_ptr<MetricsServer> server;
  std::unique_ptr<CheckpointStore> store;
  // Groups; each is null where its dimension has one rank.
  std::shared_ptr<comm::ProcessGroup> world_group;
  std::shared_ptr<comm::ProcessGroup> group;  // data-parallel
  std::shared_ptr<comm::ProcessGroup> pipeline_group;
  std::shared_ptr<comm::ProcessGroup> tensor_group;
  std::shared_ptr<comm::ProcessGroup> tie_group;       // first and last stage: the tied wte
  std::unique_ptr<parallel::BucketReducer> reducer;    // zeroStage 0
  std::unique_ptr<parallel::ZeroShards> zero;          // zeroStage 1
  std::unique_ptr<parallel::PipelineRunner> pipeline;  // pipeline > 1
  parallel::TensorCommStats tensor_stats;
  parallel::BufferRange owned;  // the part of the parameters this rank's optimizer updates
  int64_t step = 0;             // optimizer steps completed
  int micro_batch = 0;          // sequences per micro-batch on this rank
  double flops_per_token = 0;
  double last_loss = 0;
  std::optional<double> last_val_loss;
  // Set by TrainStep from the world's stop wishes: how many ranks wished to stop after the
  // step, and the sum of their ranks (the rank itself when one did), so that the ranks that
  // stop with it can say which.
  int stop_wishers = 0;
  int64_t stop_wisher_rank_sum = 0;

  Status Resume(int64_t checkpoint_step);
  Status SaveCheckpoint();
  void PruneCheckpoints();
  Status SaveShardedCheckpoint(const CheckpointMeta& meta);
  double ValidationLoss();
  // `stop_here` is this rank's wish to stop after the step; *stop_any says whether any rank
  // wished so (ranks must stop at the same step, or the others would wait in a collective).
  double TrainStep(double lr, bool stop_here, double* grad_norm, bool* stop_any);
  double GpuTrainStep(double lr, bool stop_here, double* grad_norm, bool* stop_any);
  // The spans a checkpoint saves or restores: the CPU model's buffers, or the GPU model's host
  // copies (`fetch`: copied from the device first).
  struct State {
    std::span<float> params, first_moment, second_moment;
  };
  State CheckpointState(bool fetch);
  // Mean loss of an evaluation batch through the whole model (no pipeline).
  double EvaluationLoss(const Batch& batch);
  // Every rank's worst outcome (exit codes are ordered by nothing but 0 = fine): a rank that
  // failed keeps its own message, the others learn which code a peer failed with.
  Status Agree(const Status& mine, const std::string& what);
  int data_ranks() const { return shape.data; }
  // This rank's losses are the ones reported: the last stage's, on tensor rank 0.
  bool reports_loss() const { return gpu || (model->shard().head && coords.tensor == 0); }
  // The ranks whose files hold the parameters: one per (stage, tensor rank).
  bool writes_parameters() const { return coords.data == 0; }
  // Collective helpers over the whole world; no-ops in one-rank jobs.
  void SumOverRanks(std::span<double> values);
  // Adds the two ends' gradients of the tied wte (pipeline > 1, first and last stage).
  void SyncTiedEmbedding();
  void RecordTensorComm();
};

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;

Status Trainer::Create(const TrainerConfig& config, const RankContext& rank,
                       std::unique_ptr<Trainer>* out) {
  std::string mesh_error;
  const std::optional<comm::MeshShape> parsed = comm::MeshShape::Parse(rank.mesh, &mesh_error);
  if (!parsed)
    return BadConfig(fmt::format("TESSERA_MESH={}: {}", rank.mesh, mesh_error));
  // What each rank of this mesh holds; refuses what ValidateTrainerConfig refuses.
  TrainingPlan plan;
  if (Status st = PlanTraining(config, rank.world_size, parsed->pipeline, parsed->tensor, &plan,
                               model::GpuAttentionFromEnvironment());
      !st.ok()) {
    return st;
  }
  if (rank.rank < 0 || rank.rank >= rank.world_size) {
    return BadConfig(fmt::format("RANK={}: not in [0, WORLD_SIZE={})", rank.rank, rank.world_size));
  }
  if (rank.world_size > 1 && (!rank.world_group || rank.world_group->size() != rank.world_size ||
                              rank.world_group->rank() != rank.rank)) {
    return Status(ExitCode::kInternal,
                  fmt::format("WORLD_SIZE={} RANK={}: no world group of that shape was formed",
                              rank.world_size, rank.rank));
  }
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->rank = rank;
  comm::MeshShape& shape = impl->shape;
  shape = {rank.world_size / (parsed->pipeline * parsed->tensor), parsed->pipeline, parsed->tensor};
  impl->coords = shape.coords(rank.rank);
  const comm::MeshCoords& at = impl->coords;
  if (rank.world_size > 1) {
    impl->world_group = rank.world_group;
    if (shape.pipeline == 1 && shape.tensor == 1) {
      impl->group = rank.world_group;
    } else {
      try {
        const comm::DeviceMesh mesh = comm::DeviceMesh::Create(rank.world_group, shape);
        auto keep = [](const std::shared_ptr<comm::ProcessGroup>& g) {
          return g && g->size() > 1 ? g : nullptr;
        };
        impl->group = keep(mesh.group(comm::MeshDim::kData));
        impl->pipeline_group = keep(mesh.group(comm::MeshDim::kPipeline));
        impl->tensor_group = keep(mesh.group(comm::MeshDim::kTensor));
        if (shape.pipeline > 1) {
          const bool end = at.pipeline == 0 || at.pipeline == shape.pipeline - 1;
          impl->tie_group =
              rank.world_group->split(end ? at.data * shape.tensor + at.tensor : -1, at.pipeline,
                                      fmt::format("tie{}", at.data * shape.tensor + at.tensor));
        }
      } catch (const comm::CommError& e) {
        return CommFailed(fmt::format("forming the mesh {}: {}", shape.ToString(), e.what()));
      }
    }
  }
  if (rank.kernel_threads > 0)
    model::SetKernelThreads(rank.kernel_threads);
  const int T = config.model.seq_len;
  const int micro_batch = plan.micro_batch;
  // The shard: this stage's blocks, split over the tensor ranks.
  const StagePlan& stage = plan.stages[at.pipeline];
  const model::GptShard shard{.first_layer = stage.layers.first,
                              .end_layer = stage.layers.end,
                              .embedding = stage.embedding,
                              .head = stage.head,
                              .tensor_rank = at.tensor,
                              .tensor_size = shape.tensor};
  if (config.precision == Precision::kFp32) {
    if (Status st = CheckFitsInMemory(stage, micro_batch, T); !st.ok())
      return st;
  }
  if (Status st = TokenDataset::Load(config.data.path, config.data.tokenizer, config.model.vocab,
                                     config.data.validation_fraction, T, &impl->dataset);
      !st.ok()) {
    return st;
  }
  impl->loader = std::make_unique<DataLoader>(&impl->dataset, T, config.batch.global, config.seed);
  const size_t bucket_bytes = static_cast<size_t>(config.parallel.bucket_mib * 1024 * 1024);
  size_t n = 0;     // this rank's parameters
  int device = -1;  // the CUDA device with precision bf16
  if (config.precision == Precision::kBf16) {
    // The whole model on this rank's GPU (validation allowed only pipeline = tensor = 1).
    if (Status st = CheckGpu(rank.local_rank, &device); !st.ok())
      return st;
    if (Status st = CheckFitsOnGpu(stage, micro_batch, T, device); !st.ok())
      return st;
    if (rank.world_size > 1 && !rank.device_group) {
      return Status(
          ExitCode::kInternal,
          "precision bf16 with several ranks needs the NCCL world group; none was formed");
    }
    if (Status st = GpuReplica::Create(config, device, rank.device_group, bucket_bytes, &impl->gpu);
        !st.ok()) {
      return st;
    }
    n = static_cast<size_t>(impl->gpu->parameter_count());
    impl->owned = {0, static_cast<int64_t>(n)};
  } else {
    impl->model = std::make_unique<model::Gpt>(
        config.model, shard,
        impl->tensor_group ? parallel::MakeTensorSum(impl->tensor_group, &impl->tensor_stats)
                           : model::TensorSumFn());
    if (shape.pipeline > 1) {
      impl->pipeline = std::make_unique<parallel::PipelineRunner>(
          impl->model.get(), impl->pipeline_group,
          *parallel::ParseSchedule(config.parallel.schedule));  // validated above
    }
    n = impl->model->parameters().size();
    impl->owned = {0, static_cast<int64_t>(n)};
    if (impl->group && config.parallel.zero_stage == 1) {
      impl->zero = std::make_unique<parallel::ZeroShards>(impl->group, static_cast<int64_t>(n));
      impl->owned = impl->zero->own();
    } else if (impl->group) {
      impl->reducer = std::make_unique<parallel::BucketReducer>(
          impl->group, impl->model->gradients(), bucket_bytes,
          model::GradientReadyOffsets(impl->model->tensors()));
    }
    impl->optimizer = std::make_unique<AdamW>(
        static_cast<size_t>(impl->owned.size()),
        AdamWOptions{.beta1 = static_cast<float>(config.optimizer.beta1),
                     .beta2 = static_cast<float>(config.optimizer.beta2),
                     .eps = static_cast<float>(config.optimizer.eps),
                     .weight_decay = static_cast<float>(config.optimizer.weight_decay)});
    impl->decay_mask.assign(n, 0);
    impl->norm_mask.assign(n, 0);
    for (const model::ShardTensor& t : impl->model->tensors()) {
      const model::ParameterTensor& l = t.local;
      std::fill_n(impl->decay_mask.begin() + l.offset, l.size, l.decays ? 1 : 0);
      const bool tied_copy = l.name == "wte" && !shard.embedding;  // the last stage's copy
      const bool counted = (!t.replicated || at.tensor == 0) && !tied_copy;
      std::fill_n(impl->norm_mask.begin() + l.offset, l.size, counted ? 1 : 0);
      if (l.name == "wte")
        impl->wte_size = l.size;
    }
  }
  impl->schedule = {.peak = config.optimizer.lr,
                    .warmup_steps = config.schedule.warmup_steps,
                    .total_steps = config.schedule.steps,
                    .decay = config.schedule.decay,
                    .min_ratio = config.schedule.min_lr_ratio};
  impl->micro_batch = micro_batch;
  impl->flops_per_token = FlopsPerToken(config.model);
  impl->metrics = std::make_unique<TrainMetrics>(config.schedule.steps);
  impl->metrics->SetMemoryBytes("parameters", 4.0 * static_cast<double>(n));
  impl->metrics->SetMemoryBytes(
      "gradients", 4.0 * static_cast<double>(n) +
                       (impl->zero ? static_cast<double>(impl->zero->layout().buffer_bytes()) : 0));
  impl->metrics->SetMemoryBytes("optimizer", 8.0 * static_cast<double>(impl->owned.size()));
  impl->metrics->SetMemoryBytes("resident", ResidentBytes());
  if (config.metrics.port >= 0) {
    if (Status st = MetricsServer::Start(config.metrics.port, impl->metrics.get(), &impl->server);
        !st.ok()) {
      return st;
    }
    spdlog::info("metrics on port {} (/metrics, /progress)", impl->server->port());
  }
  if (!config.checkpoint.dir.empty()) {
    impl->store = std::make_unique<CheckpointStore>(config.checkpoint.dir);
  }
  spdlog::info(
      "model: {} layers, dModel {}, {} heads, seqLen {}, vocab {}: {} parameters; data: {} "
      "({} train / {} validation tokens)",
      config.model.layers, config.model.d_model, config.model.heads, T, config.model.vocab,
      plan.parameters, config.data.path, impl->dataset.train().size(),
      impl->dataset.validation().size());
  if (shape.pipeline > 1 || shape.tensor > 1) {
    std::vector<parallel::StageLayers> stages;
    for (const StagePlan& s : plan.stages)
      stages.push_back(s.layers);
    spdlog::info(
        "mesh {}: rank {} is data {} pipeline {} tensor {}; stages {} ({}); this shard holds "
        "{} parameters",
        shape.ToString(), rank.rank, at.data, at.pipeline, at.tensor,
        parallel::DescribeStages(stages), config.parallel.schedule, n);
  }
  if (impl->gpu) {
    spdlog::info("model on CUDA device {} in bf16 (fp32 master weights and AdamW state)", device);
  }
  if (impl->reducer || (impl->gpu && impl->gpu->buckets() > 0)) {
    spdlog::info(
        "data parallel: rank {} of {}, gradients all-reduced ({}) in {} buckets of <= {} "
        "MiB",
        at.data, shape.data, impl->gpu ? "nccl" : impl->group->backend(),
        impl->gpu ? impl->gpu->buckets() : impl->reducer->buckets().size(),
        config.parallel.bucket_mib);
  } else if (impl->zero) {
    spdlog::info(
        "data parallel: rank {} of {}, ZeRO-1: this rank keeps optimizer state for "
        "parameters [{}, {}) of {}",
        at.data, shape.data, impl->owned.begin, impl->owned.end, n);
  }
  if (impl->world_group && !impl->gpu) {
    // Every group and the metrics server exist: from here the threads this one creates (the
    // kernels' OpenMP team) compute at a lower priority than the communication threads.
    int nice = 0;
    try {
      nice = comm::ComputeNiceFromEnv();
    } catch (const comm::CommConfigError& e) {
      return BadConfig(e.what());
    }
    if (!comm::YieldCoresToCommunication(nice))
      spdlog::warn("TESSERA_COMPUTE_NICE={}: could not lower the compute priority", nice);
  }
  out->reset(new Trainer(std::move(impl)));
  return Status::Ok();
}

int Trainer::metrics_port() const {
  return impl_->server ? impl_->server->port() : -1;
}

std::string Trainer::ProgressJson() const {
  return impl_->metrics->ProgressJson();
}

double Trainer::ValidationLoss() {
  return impl_->ValidationLoss();
}

double Trainer::Impl::ValidationLoss() {
  const int64_t windows =
      std::min<int64_t>(static_cast<int64_t>(config.schedule.eval_batches) * config.batch.global,
                        loader->validation_windows());
  // Each data-parallel rank (with its pipeline and tensor peers) evaluates a contiguous share
  // of the windows; the sums are added up.
  const int64_t share = (windows + data_ranks() - 1) / data_ranks();
  const int64_t begin = std::min(windows, coords.data * share);
  const int64_t end = std::min(windows, begin + share);
  double sum = 0;
  if (pipeline) {
    const int batches = static_cast<int>((end - begin + micro_batch - 1) / micro_batch);
    sum = pipeline->Evaluate(batches, [&](int i, parallel::MicroBatch* mb) {
      const int64_t first = begin + static_cast<int64_t>(i) * micro_batch;
      const int count = static_cast<int>(std::min<int64_t>(micro_batch, end - first));
      Batch batch;
      loader->ValidationBatch(first, count, &batch);
      ToMicroBatch(std::move(batch), mb);
    });
  } else {
    Batch batch;
    for (int64_t first = begin; first < end; first += micro_batch) {
      const int count = static_cast<int>(std::min<int64_t>(micro_batch, end - first));
      loader->ValidationBatch(first, count, &batch);
      // The loss is the mean over count*T positions; weight by count for the exact mean.
      sum += EvaluationLoss(batch) * count;
    }
  }
  RecordTensorComm();
  if (!reports_loss())
    sum = 0;
  SumOverRanks(std::span<double>(&sum, 1));
  return sum / static_cast<double>(windows);
}

double Trainer::Impl::EvaluationLoss(const Batch& batch) {
  if (gpu)
    return gpu->EvaluationLoss(batch);
  return model->Forward(batch.tokens, batch.targets, batch.B, batch.T);
}

void Trainer::Impl::SumOverRanks(std::span<double> values) {
  if (!world_group)
    return;
  const auto start = Clock::now();
  world_group->all_reduce(values, comm::ReduceOp::kSum)->wait();
  metrics->RecordComm("all_reduce", "data", Seconds(start),
                      static_cast<double>(values.size_bytes()));
}

void Trainer::Impl::SyncTiedEmbedding() {
  if (!tie_group)
    return;
  const auto start = Clock::now();
  std::span<float> wte = model->gradients().subspan(0, static_cast<size_t>(wte_size));
  tie_group->all_reduce(wte, comm::ReduceOp::kSum)->wait();
  metrics->RecordComm("all_reduce", "pipeline", Seconds(start),
                      static_cast<double>(wte.size_bytes()));
}

void Trainer::Impl::RecordTensorComm() {
  if (tensor_stats.calls == 0)
    return;
  metrics->RecordComm("all_reduce", "tensor", tensor_stats.seconds, tensor_stats.bytes);
  tensor_stats = {};
}

Status Trainer::Impl::Agree(const Status& mine, const std::string& what) {
  if (!world_group)
    return mine;
  int32_t code = mine.exit_code();
  world_group->all_reduce(std::span<int32_t>(&code, 1), comm::ReduceOp::kMax)->wait();
  if (!mine.ok() || code == 0)
    return mine;
  return Status(static_cast<ExitCode>(code),
                fmt::format("{}: another rank failed with exit code {} (see its log)", what, code));
}

// One optimizer step's forward, backward, reduction and update; returns the step's loss
// (the mean over the global batch) and sets *grad_norm (before clipping).
double Trainer::Impl::TrainStep(double lr, bool stop_here, double* grad_norm, bool* stop_any) {
  if (gpu)
    return GpuTrainStep(lr, stop_here, grad_norm, stop_any);
  const TrainerConfig& c = config;
  const int M = c.batch.micro_batches;
  model->ZeroGradients();
  double loss = 0;
  const model::GradientsReadyFn on_ready = [this](int64_t first) {
    reducer->GradientsReady(first);
  };
  // Micro-batch m of this data-parallel rank's share of the global batch.
  const auto first_sequence = [&](int m) {
    return coords.data * (c.batch.global / data_ranks()) + m * micro_batch;
  };
  if (pipeline) {
    const parallel::PipelineStats stats = pipeline->Train(
        M,
        [&](int m, parallel::MicroBatch* mb) {
          Batch batch;
          loader->TrainBatch(step, first_sequence(m), micro_batch, &batch);
          ToMicroBatch(std::move(batch), mb);
        },
        1.0f / static_cast<float>(M), reducer ? on_ready : model::GradientsReadyFn());
    loss = stats.loss_sum;
    metrics->SetPipelineBubble(stats.bubble());
    metrics->RecordComm("send_recv", "pipeline", stats.idle_seconds, stats.comm_bytes);
  } else {
    Batch batch;
    for (int m = 0; m < M; ++m) {
      loader->TrainBatch(step, first_sequence(m), micro_batch, &batch);
      loss += model->Forward(batch.tokens, batch.targets, batch.B, batch.T);
      // Only the last micro-batch's backward makes gradients final, so only it starts buckets.
      model->Backward(1.0f / static_cast<float>(M),
                      reducer && m == M - 1 ? on_ready : model::GradientsReadyFn());
    }
  }
  RecordTensorComm();
  loss /= M;
  std::span<float> params = model->parameters();
  std::span<float> grads = model->gradients();
  std::span<const uint8_t> mask = decay_mask;
  std::span<const uint8_t> counted = norm_mask;
  if (reducer) {
    const parallel::ReductionStats stats = reducer->Finish();
    metrics->RecordComm("all_reduce", "data", stats.exposed_seconds,
                        static_cast<double>(stats.bytes));
  }
  // The tied wte: after the data-parallel average (sums commute with it), before ZeRO splits
  // the buffer into shards.
  SyncTiedEmbedding();
  if (zero) {
    const auto start = Clock::now();
    grads = zero->ReduceScatter(grads);
    metrics->RecordComm("reduce_scatter", "data", Seconds(start),
                        static_cast<double>(zero->shard_bytes() * zero->layout().ranks));
    const auto own = [&](auto span) {
      return span.subspan(static_cast<size_t>(owned.begin), static_cast<size_t>(owned.size()));
    };
    params = own(params);
    mask = own(mask);
    counted = own(counted);
  }
  // One small all-reduce over the world for all three: the losses of the data-parallel
  // shares (each reported once, by the last stage's tensor rank 0), the squared gradient
  // norm, and the stop wish. Each distinct gradient value is counted once: with ZeRO-1 every
  // data rank holds a shard, otherwise the data ranks hold the same reduced gradient and data
  // rank 0 alone contributes; replicated values count where norm_mask says.
  const bool norm_here = zero || coords.data == 0;
  double sums[4] = {reports_loss() ? loss : 0.0,
                    norm_here ? CountedSumOfSquares(grads, counted) : 0.0, stop_here ? 1.0 : 0.0,
                    stop_here ? static_cast<double>(rank.rank) : 0.0};
  SumOverRanks(sums);
  loss = sums[0] / data_ranks();
  *grad_norm = std::sqrt(sums[1]);
  *stop_any = sums[2] > 0;
  stop_wishers = static_cast<int>(std::lround(sums[2]));
  stop_wisher_rank_sum = std::llround(sums[3]);
  if (!std::isfinite(loss) || !std::isfinite(*grad_norm))
    return loss;  // the caller reports divergence; nothing is updated
  ClipToNorm(grads, *grad_norm, c.optimizer.grad_clip);
  optimizer->Step(params, grads, mask, static_cast<float>(lr));
  if (zero) {
    const auto start = Clock::now();
    zero->AllGather(model->parameters());
    metrics->RecordComm("all_gather", "data", Seconds(start),
                        static_cast<double>(zero->shard_bytes()));
  }
  return loss;
}

// The GPU model's step: forward, backward and the bucketed NCCL all-reduce, then the loss and
// stop wish summed over the world (host), then norm, clipping and AdamW on the device. Every
// replica holds the same averaged gradient, so every one computes the same norm.
double Trainer::Impl::GpuTrainStep(double lr, bool stop_here, double* grad_norm, bool* stop_any) {
  const int global = config.batch.global;
  parallel::ReductionStats stats;
  double loss = gpu->ForwardBackward(
      config.batch.micro_batches,
      [&](int m, Batch* batch) {
        loader->TrainBatch(step, coords.data * (global / data_ranks()) + m * micro_batch,
                           micro_batch, batch);
      },
      &stats);
  if (stats.buckets > 0) {
    metrics->RecordComm("all_reduce", "data", stats.exposed_seconds,
                        static_cast<double>(stats.bytes));
  }
  double sums[3] = {loss, stop_here ? 1.0 : 0.0, stop_here ? static_cast<double>(rank.rank) : 0.0};
  SumOverRanks(sums);
  loss = sums[0] / data_ranks();
  *stop_any = sums[1] > 0;
  stop_wishers = static_cast<int>(std::lround(sums[1]));
  stop_wisher_rank_sum = std::llround(sums[2]);
  *grad_norm = gpu->Step(config.optimizer, lr);
  return loss;
}

Trainer::Impl::State Trainer::Impl::CheckpointState(bool fetch) {
  if (!gpu) {
    return {model->parameters(), optimizer->first_moment(), optimizer->second_moment()};
  }
  const size_t n = static_cast<size_t>(gpu->parameter_count());
  for (std::vector<float>* v : {&host_params, &host_m, &host_v})
    v->resize(n);
  if (fetch)
    gpu->GetState(host_params, host_m, host_v);
  return {host_params, host_m, host_v};
}

Status Trainer::Impl::Resume(int64_t checkpoint_step) {
  CheckpointMeta meta;
  if (Status st = store->ReadMeta(checkpoint_step, &meta); !st.ok())
    return st;
  const std::string meta_path = store->StepDir(checkpoint_step) + "/meta.json";
  if (meta.config_hash != ConfigHash(config)) {
    const std::string diff = FirstJsonDifference(meta.config_json, TrajectoryJson(config));
    return CheckpointRefused(
        fmt::format("{}: written by a job with another configuration ({}: checkpoint vs this job); "
                    "restore the configuration or use another checkpoint.dir",
                    meta_path, diff.empty() ? "config hash differs" : diff));
  }
  if (meta.mesh != shape.ToString() || meta.world_size != rank.world_size) {
    return CheckpointRefused(
        fmt::format("{}: mesh '{}' ({} ranks) does not match this job's '{}' ({} ranks); run "
                    "with the mesh it was written with or use another checkpoint.dir",
                    meta_path, meta.mesh, meta.world_size, shape.ToString(), rank.world_size));
  }
  const DataCursor expected = loader->CursorAt(checkpoint_step);
  if (meta.data_cursor.train_tokens != expected.train_tokens) {
    return CheckpointRefused(fmt::format(
        "{}: the train split had {} tokens, {} has {} now; the dataset changed: restore it or "
        "use another checkpoint.dir",
        meta_path, meta.data_cursor.train_tokens, config.data.path, expected.train_tokens));
  }
  if (meta.data_cursor.step != checkpoint_step ||
      meta.data_cursor.samples_consumed != expected.samples_consumed ||
      meta.optimizer_steps != checkpoint_step || meta.rng_seed != config.seed) {
    return CheckpointRefused(fmt::format(
        "{}: data cursor (step {}, {} samples), optimizer steps {} or seed {} do not match "
        "step {}, so the checkpoint is damaged{}",
        meta_path, meta.data_cursor.step, meta.data_cursor.samples_consumed, meta.optimizer_steps,
        meta.rng_seed, checkpoint_step, MoveAsideAdvice(store->StepDir(checkpoint_step))));
  }
  if (meta.zero_stage != config.parallel.zero_stage && data_ranks() > 1) {
    return CheckpointRefused(fmt::format(
        "{}: written with parallelism.zeroStage {}, this job has {}; use the same zeroStage",
        meta_path, meta.zero_stage, config.parallel.zero_stage));
  }
  // Data rank 0 of this rank's stage and tensor coordinates wrote the shard's parameters (and
  // its whole optimizer state unless that is sharded); with ZeRO-1 every rank wrote its own
  // shard of the optimizer state.
  const int source = shape.rank_of({0, coords.pipeline, coords.tensor});
  ShardContents first;
  if (Status st = store->ReadShard(meta, ShardName(source), &first); !st.ok())
    return st;
  ShardContents own_file;
  const ShardContents* state = &first;
  if (zero && rank.rank != source) {
    if (Status st = store->ReadShard(meta, ShardName(rank.rank), &own_file); !st.ok())
      return st;
    state = &own_file;
  }
  struct Target {
    const ShardContents* file;
    int file_rank;
    const char* name;
    std::span<float> dst;
  };
  const State into = CheckpointState(/*fetch=*/false);
  const Target targets[] = {{&first, source, "params", into.params},
                            {state, zero ? rank.rank : source, "adamw.m", into.first_moment},
                            {state, zero ? rank.rank : source, "adamw.v", into.second_moment}};
  for (const Target& t : targets) {
    const std::vector<float>* values = t.file->Find(t.name);
    if (values == nullptr || values->size() != t.dst.size()) {
      return CheckpointRefused(
          fmt::format("{}/{}: tensor '{}' has {} values, this rank needs {}{}",
                      store->StepDir(checkpoint_step), ShardName(t.file_rank), t.name,
                      values ? static_cast<int64_t>(values->size()) : int64_t{-1}, t.dst.size(),
                      MoveAsideAdvice(store->StepDir(checkpoint_step))));
    }
    std::copy(values->begin(), values->end(), t.dst.begin());
  }
  if (gpu)
    gpu->SetState(into.params, into.first_moment, into.second_moment, meta.optimizer_steps);
  else
    optimizer->set_step_count(meta.optimizer_steps);
  step = checkpoint_step;
  last_loss = meta.loss;
  last_val_loss = meta.val_loss;
  metrics->RecordResume(step, last_loss, last_val_loss);
  spdlog::info("resumed from {} (step {}, loss {:.4f})", store->StepDir(checkpoint_step), step,
               meta.loss);
  return Status::Ok();
}

Status Trainer::Impl::SaveCheckpoint() {
  const auto start = Clock::now();
  CheckpointMeta meta;
  meta.step = step;
  meta.config_hash = ConfigHash(config);
  meta.config_json = TrajectoryJson(config);
  meta.mesh = shape.ToString();
  meta.world_size = rank.world_size;
  meta.data_cursor = loader->CursorAt(step);
  meta.rng_seed = config.seed;
  meta.rng_counter = meta.data_cursor.samples_consumed;
  meta.optimizer_steps = gpu ? gpu->step_count() : optimizer->step_count();
  meta.loss = last_loss;
  meta.val_loss = last_val_loss;
  meta.created_at = NowRfc3339();
  meta.zero_stage = config.parallel.zero_stage;
  if (world_group) {
    if (Status st = SaveShardedCheckpoint(meta); !st.ok())
      return st;
  } else {
    const State state = CheckpointState(/*fetch=*/true);
    const std::vector<ShardTensor> tensors = {
        {"params", state.params},
        {"adamw.m", state.first_moment},
        {"adamw.v", state.second_moment},
    };
    if (Status st = store->Save(meta, {{ShardName(rank.rank), tensors}}); !st.ok())
      return st;
    PruneCheckpoints();
  }
  const double seconds = Seconds(start);
  metrics->RecordCheckpoint(seconds);
  spdlog::info("checkpoint {} written in {:.3f} s", store->StepDir(step), seconds);
  return Status::Ok();
}

// Retention is housekeeping: the checkpoint just written stands, so an older one that cannot be
// deleted (a reader holding it open on NFS, a read-only snapshot) is a warning, not a failed
// run that a gang restart would only repeat.
void Trainer::Impl::PruneCheckpoints() {
  if (Status st = store->Prune(config.checkpoint.keep); !st.ok()) {
    spdlog::warn("{}; checkpoint.keep {} is not enforced until it is deleted", st.message(),
                 config.checkpoint.keep);
  }
}

// Several ranks, one directory: rank 0 opens step-<N>.tmp/, each rank that holds something
// unique writes its file there (data rank 0 of each stage and tensor coordinate: its shard's
// parameters and, unless sharded, optimizer state; with ZeRO-1 every rank its optimizer
// shard), the file descriptions are all-gathered, and rank 0 commits. Every rank returns the
// same outcome.
Status Trainer::Impl::SaveShardedCheckpoint(const CheckpointMeta& meta) {
  const std::string what = fmt::format("checkpoint {}", store->StepDir(meta.step));
  if (Status st = Agree(rank.rank == 0 ? store->Begin(meta.step) : Status::Ok(), what); !st.ok())
    return st;
  std::vector<ShardTensor> tensors;
  const bool writes = writes_parameters() || zero;
  const State state = CheckpointState(/*fetch=*/writes);
  if (writes_parameters())
    tensors.push_back({"params", state.params});
  if (writes) {
    tensors.push_back({"adamw.m", state.first_moment});
    tensors.push_back({"adamw.v", state.second_moment});
  }
  ShardRecord mine;
  Status written;
  if (!tensors.empty()) {
    CheckpointFile file;
    written = store->WriteShard(meta.step, rank.rank, ShardName(rank.rank), tensors, &file);
    if (written.ok()) {
      mine.bytes = file.bytes;
      std::copy_n(file.sha256.begin(), std::min<size_t>(file.sha256.size(), 64), mine.sha256);
    } else {
      mine.ok = 0;
    }
  }
  std::vector<ShardRecord> records(static_cast<size_t>(rank.world_size));
  world_group->all_gather(&mine, records.data(), sizeof(ShardRecord), comm::DataType::kUInt8)
      ->wait();
  Status committed;
  if (rank.rank == 0) {
    CheckpointMeta full = meta;
    full.files.clear();
    for (int r = 0; r < rank.world_size; ++r) {
      const ShardRecord& rec = records[static_cast<size_t>(r)];
      if (!rec.ok && committed.ok()) {
        committed = IoError(fmt::format("{}: rank {} could not write its shard", what, r));
      }
      if (rec.bytes > 0)
        full.files.push_back({ShardName(r), r, rec.bytes, std::string(rec.sha256, 64)});
    }
    if (!written.ok())
      committed = written;
    if (committed.ok()) {
      committed = store->Commit(full);
      if (!committed.ok())
        store->Abandon(meta.step);
    } else {
      store->Abandon(meta.step);  // every rank is past its write (the all-gather above)
    }
    if (committed.ok())
      PruneCheckpoints();
  } else if (!written.ok()) {
    committed = written;
  }
  return Agree(committed, what);
}

Status Trainer::Run(const RunOptions& options, TrainResult* result) {
  try {
    return RunSteps(options, result);
  } catch (const comm::CommError& e) {
    // The group is broken: no checkpoint can be agreed on; the newest complete one stands.
    return CommFailed(fmt::format("step {}: {}", impl_->step + 1, e.what()));
  } catch (const std::bad_alloc&) {
    // The kernel refused memory CheckFitsInMemory expected to be there (other processes took
    // it); the newest checkpoint stands, and a gang restart may find the memory again.
    return IoError(fmt::format(
        "step {}: out of memory ({:.1f} GiB resident); lower batch.global or model.seqLen, raise "
        "batch.microBatches, or give the rank more memory",
        impl_->step + 1, ResidentBytes() / (1024.0 * 1024.0 * 1024.0)));
  } catch (const std::runtime_error& e) {
    if (!impl_->gpu)
      throw;
    // A CUDA or cuBLAS error (out of memory, a device fault): the newest checkpoint stands.
    return IoError(fmt::format("step {}: the GPU failed: {}", impl_->step + 1, e.what()));
  }
}

Status Trainer::RunSteps(const RunOptions& options, TrainResult* result) {
  Impl& s = *impl_;
  const TrainerConfig& c = s.config;
  *result = TrainResult();
  std::optional<int64_t> newest;
  if (s.store)
    newest = s.store->NewestComplete();
  if (newest) {
    if (Status st = s.Agree(s.Resume(*newest), "resume"); !st.ok())
      return st;
  } else {
    if (s.gpu)
      s.gpu->InitParameters(c.seed);
    else
      s.model->InitParameters(c.seed);
  }
  result->start_step = s.step;
  const int64_t end_step = options.stop_after_step >= 0
                               ? std::min(options.stop_after_step, c.schedule.steps)
                               : c.schedule.steps;
  const int T = c.model.seq_len;
  const double tokens_per_step = static_cast<double>(c.batch.global) * T;
  while (s.step < end_step) {
    const auto start = Clock::now();
    const double lr = LearningRate(s.schedule, s.step);
    double grad_norm = 0;
    bool stop_any = false;
    const double loss =
        s.TrainStep(lr, stop_requested_.load(std::memory_order_relaxed), &grad_norm, &stop_any);
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
      return Status(ExitCode::kDiverged,
                    fmt::format("step {}: loss {} and gradient norm {} are not finite; lower "
                                "optimizer.lr or raise schedule.warmupSteps",
                                s.step + 1, loss, grad_norm));
    }
    ++s.step;
    s.last_loss = loss;
    result->losses.push_back(static_cast<float>(loss));
    const double seconds = Seconds(start);
    const double tokens_per_second = tokens_per_step / seconds;
    const double peak = c.metrics.peak_flops_per_second;
    s.metrics->RecordStep(
        {.step = s.step,
         .loss = loss,
         .learning_rate = lr,
         .grad_norm = grad_norm,
         .tokens_per_second = tokens_per_second,
         .step_seconds = seconds,
         .mfu_ratio = MfuRatio(s.flops_per_token, tokens_per_second, peak, s.rank.world_size)});
    s.metrics->SetMemoryBytes("resident", ResidentBytes());
    s.metrics->SetMemoryBytes(
        "activations",
        static_cast<double>(s.gpu ? s.gpu->activation_bytes() : s.model->activation_bytes()));
    const bool last = s.step == c.schedule.steps;
    if (s.step % c.log_every == 0 || s.step == result->start_step + 1 || last) {
      spdlog::info("step {}/{} loss {:.4f} lr {:.3e} grad_norm {:.3f} tokens/s {:.0f}", s.step,
                   c.schedule.steps, loss, lr, grad_norm, tokens_per_second);
    }
    const int64_t eval_every = c.schedule.eval_every;
    if (last || (eval_every > 0 && s.step % eval_every == 0)) {
      s.last_val_loss = s.ValidationLoss();
      s.metrics->RecordValidation(*s.last_val_loss);
      spdlog::info("step {} val_loss {:.4f}", s.step, *s.last_val_loss);
    }
    // One rank decides alone; several stop at the step every one of them agreed on.
    const bool stop = s.world_group ? stop_any : stop_requested_.load(std::memory_order_relaxed);
    const bool stopping = stop || s.step == end_step;
    const int64_t every = c.checkpoint.every_steps;
    if (s.store && (last || stopping || (every > 0 && s.step % every == 0))) {
      if (Status st = s.SaveCheckpoint(); !st.ok())
        return st;
    }
    if (stop) {
      result->stopped = true;
      if (s.world_group) {
        result->signaled_ranks = s.stop_wishers;
        result->signaled_rank = s.stop_wishers == 1 ? s.stop_wisher_rank_sum : -1;
      }
      break;
    }
  }
  if (s.step < c.schedule.steps)
    result->stopped = true;
  result->steps_completed = s.step;
  result->val_loss = s.last_val_loss;
  if (s.step == c.schedule.steps) {
    spdlog::info("done: {} steps, loss {:.4f}, val_loss {}", s.step, s.last_loss,
                 s.last_val_loss ? fmt::format("{:.4f}", *s.last_val_loss) : "n/a");
  }
  return Status::Ok();
}

}  // namespace tessera::train
