#include "worker/train/trainer.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <fstream>

#include "worker/model/gpt.h"
#include "worker/train/adamw.h"
#include "worker/train/checkpoint.h"
#include "worker/train/data_loader.h"
#include "worker/train/lr_schedule.h"
#include "worker/train/metrics.h"

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

std::string ShardName(int rank) {
  return fmt::format("rank-{:05d}.bin", rank);
}

}  // namespace

struct Trainer::Impl {
  TrainerConfig config;
  RankContext rank;
  TokenDataset dataset;
  std::unique_ptr<DataLoader> loader;
  std::unique_ptr<model::Gpt> model;
  std::unique_ptr<AdamW> optimizer;
  std::vector<uint8_t> decay_mask;
  LrSchedule schedule;
  std::unique_ptr<TrainMetrics> metrics;
  std::unique_ptr<MetricsServer> server;
  std::unique_ptr<CheckpointStore> store;
  int64_t step = 0;     // optimizer steps completed
  int micro_batch = 0;  // sequences per micro-batch on this rank
  double flops_per_token = 0;
  double last_loss = 0;
  std::optional<double> last_val_loss;

  Status Resume(int64_t checkpoint_step);
  Status SaveCheckpoint();
  double ValidationLoss();
};

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;

Status Trainer::Create(const TrainerConfig& config, const RankContext& rank,
                       std::unique_ptr<Trainer>* out) {
  if (Status st = ValidateTrainerConfig(config, rank.world_size); !st.ok())
    return st;
  if (rank.world_size != 1 || rank.rank != 0) {
    return BadConfig(
        fmt::format("WORLD_SIZE={} RANK={}: this trainer runs a single rank; use WORLD_SIZE=1",
                    rank.world_size, rank.rank));
  }
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->rank = rank;
  if (rank.kernel_threads > 0)
    model::SetKernelThreads(rank.kernel_threads);
  const int T = config.model.seq_len;
  if (Status st = TokenDataset::Load(config.data.path, config.data.tokenizer, config.model.vocab,
                                     config.data.validation_fraction, T, &impl->dataset);
      !st.ok()) {
    return st;
  }
  impl->loader = std::make_unique<DataLoader>(&impl->dataset, T, config.batch.global, config.seed);
  impl->model = std::make_unique<model::Gpt>(config.model);
  const size_t n = impl->model->parameters().size();
  impl->optimizer = std::make_unique<AdamW>(
      n, AdamWOptions{.beta1 = static_cast<float>(config.optimizer.beta1),
                      .beta2 = static_cast<float>(config.optimizer.beta2),
                      .eps = static_cast<float>(config.optimizer.eps),
                      .weight_decay = static_cast<float>(config.optimizer.weight_decay)});
  impl->decay_mask.assign(n, 0);
  int64_t wpe_size = 0;
  for (const model::ParameterTensor& t : model::GptParameterTensors(config.model)) {
    std::fill_n(impl->decay_mask.begin() + t.offset, t.size, t.decays ? 1 : 0);
    if (t.name == "wpe")
      wpe_size = t.size;
  }
  impl->schedule = {.peak = config.optimizer.lr,
                    .warmup_steps = config.schedule.warmup_steps,
                    .total_steps = config.schedule.steps,
                    .decay = config.schedule.decay,
                    .min_ratio = config.schedule.min_lr_ratio};
  impl->micro_batch = config.batch.global / (rank.world_size * config.batch.micro_batches);
  // Matrix-multiply FLOPs per trained token, forward and backward: 6 per weight used in a
  // product (every parameter but the position embedding; the tied LM head counts once, as it
  // is one product) plus attention scores and mixing, 12 * layers * dModel * T.
  impl->flops_per_token =
      6.0 * static_cast<double>(static_cast<int64_t>(n) - wpe_size) +
      12.0 * config.model.layers * config.model.d_model * static_cast<double>(T);
  impl->metrics = std::make_unique<TrainMetrics>(config.schedule.steps);
  impl->metrics->SetMemoryBytes("parameters", 4.0 * static_cast<double>(n));
  impl->metrics->SetMemoryBytes("gradients", 4.0 * static_cast<double>(n));
  impl->metrics->SetMemoryBytes("optimizer", 8.0 * static_cast<double>(n));
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
      config.model.layers, config.model.d_model, config.model.heads, T, config.model.vocab, n,
      config.data.path, impl->dataset.train().size(), impl->dataset.validation().size());
  out->reset(new Trainer(std::move(impl)));
  return Status::Ok();
}

int Trainer::metrics_port() const {
  return impl_->server ? impl_->server->port() : -1;
}

double Trainer::ValidationLoss() {
  return impl_->ValidationLoss();
}

double Trainer::Impl::ValidationLoss() {
  const int64_t windows =
      std::min<int64_t>(static_cast<int64_t>(config.schedule.eval_batches) * config.batch.global,
                        loader->validation_windows());
  double sum = 0;
  Batch batch;
  for (int64_t first = 0; first < windows; first += micro_batch) {
    const int count = static_cast<int>(std::min<int64_t>(micro_batch, windows - first));
    loader->ValidationBatch(first, count, &batch);
    // Forward returns the mean over count*T positions; weight by count for the exact mean.
    sum +=
        static_cast<double>(model->Forward(batch.tokens, batch.targets, batch.B, batch.T)) * count;
  }
  return sum / static_cast<double>(windows);
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
  if (meta.mesh != rank.mesh || meta.world_size != rank.world_size) {
    return CheckpointRefused(
        fmt::format("{}: mesh '{}' ({} ranks) does not match this job's '{}' ({} ranks)", meta_path,
                    meta.mesh, meta.world_size, rank.mesh, rank.world_size));
  }
  const DataCursor expected = loader->CursorAt(checkpoint_step);
  if (meta.data_cursor.train_tokens != expected.train_tokens) {
    return CheckpointRefused(fmt::format(
        "{}: the train split had {} tokens, {} has {} now; the dataset changed", meta_path,
        meta.data_cursor.train_tokens, config.data.path, expected.train_tokens));
  }
  if (meta.data_cursor.step != checkpoint_step ||
      meta.data_cursor.samples_consumed != expected.samples_consumed ||
      meta.optimizer_steps != checkpoint_step || meta.rng_seed != config.seed) {
    return CheckpointRefused(fmt::format(
        "{}: data cursor (step {}, {} samples), optimizer steps {} or seed {} do not match "
        "step {}",
        meta_path, meta.data_cursor.step, meta.data_cursor.samples_consumed, meta.optimizer_steps,
        meta.rng_seed, checkpoint_step));
  }
  ShardContents shard;
  if (Status st = store->ReadShard(meta, ShardName(rank.rank), &shard); !st.ok())
    return st;
  const std::string shard_path = store->StepDir(checkpoint_step) + "/" + ShardName(rank.rank);
  const size_t n = model->parameters().size();
  struct Target {
    const char* name;
    std::span<float> dst;
  } targets[] = {{"params", model->parameters()},
                 {"adamw.m", optimizer->first_moment()},
                 {"adamw.v", optimizer->second_moment()}};
  for (const Target& t : targets) {
    const std::vector<float>* values = shard.Find(t.name);
    if (values == nullptr || values->size() != n) {
      return CheckpointRefused(
          fmt::format("{}: tensor '{}' has {} values, the model needs {}", shard_path, t.name,
                      values ? static_cast<int64_t>(values->size()) : int64_t{-1}, n));
    }
    std::copy(values->begin(), values->end(), t.dst.begin());
  }
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
  meta.mesh = rank.mesh;
  meta.world_size = rank.world_size;
  meta.data_cursor = loader->CursorAt(step);
  meta.rng_seed = config.seed;
  meta.rng_counter = meta.data_cursor.samples_consumed;
  meta.optimizer_steps = optimizer->step_count();
  meta.loss = last_loss;
  meta.val_loss = last_val_loss;
  meta.created_at = NowRfc3339();
  const std::vector<ShardTensor> tensors = {
      {"params", model->parameters()},
      {"adamw.m", optimizer->first_moment()},
      {"adamw.v", optimizer->second_moment()},
  };
  if (Status st = store->Save(meta, {{ShardName(rank.rank), tensors}}); !st.ok())
    return st;
  if (Status st = store->Prune(config.checkpoint.keep); !st.ok())
    return st;
  const double seconds = Seconds(start);
  metrics->RecordCheckpoint(seconds);
  spdlog::info("checkpoint {} written in {:.3f} s", store->StepDir(step), seconds);
  return Status::Ok();
}

Status Trainer::Run(const RunOptions& options, TrainResult* result) {
  Impl& s = *impl_;
  const TrainerConfig& c = s.config;
  *result = TrainResult();
  std::optional<int64_t> newest;
  if (s.store)
    newest = s.store->NewestComplete();
  if (newest) {
    if (Status st = s.Resume(*newest); !st.ok())
      return st;
  } else {
    s.model->InitParameters(c.seed);
  }
  result->start_step = s.step;
  const int64_t end_step = options.stop_after_step >= 0
                               ? std::min(options.stop_after_step, c.schedule.steps)
                               : c.schedule.steps;
  const int M = c.batch.micro_batches;
  const int T = c.model.seq_len;
  const double tokens_per_step = static_cast<double>(c.batch.global) * T;
  Batch batch;
  while (s.step < end_step) {
    const auto start = Clock::now();
    const double lr = LearningRate(s.schedule, s.step);
    s.model->ZeroGradients();
    double loss = 0;
    for (int m = 0; m < M; ++m) {
      const int first = s.rank.rank * (c.batch.global / s.rank.world_size) + m * s.micro_batch;
      s.loader->TrainBatch(s.step, first, s.micro_batch, &batch);
      loss += s.model->Forward(batch.tokens, batch.targets, batch.B, batch.T);
      s.model->Backward(1.0f / static_cast<float>(M));
    }
    loss /= M;
    const double grad_norm = std::sqrt(SumOfSquares(s.model->gradients()));
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
      return Status(ExitCode::kDiverged,
                    fmt::format("step {}: loss {} and gradient norm {} are not finite; lower "
                                "optimizer.lr or raise schedule.warmupSteps",
                                s.step + 1, loss, grad_norm));
    }
    ClipToNorm(s.model->gradients(), grad_norm, c.optimizer.grad_clip);
    s.optimizer->Step(s.model->parameters(), s.model->gradients(), s.decay_mask,
                      static_cast<float>(lr));
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
         .mfu_ratio = peak > 0 ? s.flops_per_token * tokens_per_second / peak : 0.0});
    s.metrics->SetMemoryBytes("resident", ResidentBytes());
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
    const bool stopping = stop_requested_.load(std::memory_order_relaxed) || s.step == end_step;
    const int64_t every = c.checkpoint.every_steps;
    if (s.store && (last || stopping || (every > 0 && s.step % every == 0))) {
      if (Status st = s.SaveCheckpoint(); !st.ok())
        return st;
    }
    if (stop_requested_.load(std::memory_order_relaxed)) {
      result->stopped = true;
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
