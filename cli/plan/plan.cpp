#include "cli/plan/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "api/quantity.h"
#include "api/rules.h"
#include "cli/run/job_file.h"
#include "cli/run/runner.h"
#include "worker/train/from_api.h"
#include "worker/train/memory.h"
#include "worker/train/plan.h"

namespace tessera::cli {
namespace {

int BadJob(const std::string& message) {
  std::cerr << "tessera plan: " << message << "\n";
  return kPlanBadJob;
}

// 10765056 -> "10,765,056".
std::string Grouped(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3)
    digits.insert(static_cast<size_t>(i), ",");
  return n < 0 ? "-" + digits : digits;
}

// 1.07e12 -> "1.07 TFLOP".
std::string Flops(double flops) {
  constexpr const char* kPrefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  int i = 0;
  while (flops >= 1000.0 && i < 6) {
    flops /= 1000.0;
    i++;
  }
  return fmt::format("{:.3g} {}FLOP", flops, kPrefixes[i]);
}

// Where each rank runs: worker pod rank / procsPerWorker, local rank rank % procsPerWorker
// (the contract of DESIGN.md §3), and its mesh coordinates (tensor innermost).
struct Placement {
  int rank = 0, worker = 0, local_rank = 0;
  comm::MeshCoords at;
};

std::vector<Placement> Place(const comm::MeshShape& shape, int procs_per_worker) {
  std::vector<Placement> out;
  for (int r = 0; r < shape.world_size(); r++)
    out.push_back({r, r / procs_per_worker, r % procs_per_worker, shape.coords(r)});
  return out;
}

nlohmann::json MemoryJson(const train::RankMemory& m) {
  return {{"parameters", m.parameters}, {"gradients", m.gradients},
          {"optimizer", m.optimizer},   {"activations", m.activations},
          {"attention", m.attention},   {"data", m.data},
          {"total", m.total()}};
}

struct JobPlan {
  std::string name;
  int workers = 0;
  int procs_per_worker = 0;
  comm::MeshShape shape;
  std::vector<std::string> command;            // bring your own trainer; empty: the built-in one
  std::optional<train::TrainerConfig> config;  // the built-in trainer
  train::TrainingPlan training;
  std::optional<int64_t> available;  // this machine's memory, for `tessera run` (fp32 only)
  // bf16: this machine's GPUs, for `tessera run` (one a rank); absent when CUDA_VISIBLE_DEVICES
  // chooses them (then nothing is counted) and for fp32.
  std::optional<int> gpus_here;
  int64_t largest_worker = 0;       // the most any worker pod's ranks hold together (fp32)
  std::optional<double> pod_limit;  // the worker container's resources.limits.memory
  std::string pod_limit_text;       // as written
};

// What the ranks of the worker that holds the most hold together.
int64_t LargestWorkerBytes(const train::TrainingPlan& t, int procs_per_worker) {
  int64_t most = 0;
  for (int first = 0; first < t.shape.world_size(); first += procs_per_worker)
    most = std::max(most, t.ranks_bytes(first, procs_per_worker));
  return most;
}

// The worker container's resources.limits.memory, as written ("" without one).
std::string PodMemoryLimit(const api::TrainingJob& job) {
  const std::optional<size_t> index = WorkerContainerIndex(job);
  if (!index)
    return "";
  const nlohmann::json& c = job.spec.pod_template["spec"]["containers"][*index];
  const nlohmann::json* limit = &c;
  for (const char* key : {"resources", "limits", "memory"}) {
    if (!limit->is_object() || !limit->contains(key))
      return "";
    limit = &(*limit)[key];
  }
  return limit->is_string() ? limit->get<std::string>() : limit->dump();
}

nlohmann::json ToJson(const JobPlan& p) {
  nlohmann::json out = {
      {"name", p.name},
      {"ranks", p.shape.world_size()},
      {"workers", p.workers},
      {"procsPerWorker", p.procs_per_worker},
      {"mesh",
       {{"data", p.shape.data}, {"pipeline", p.shape.pipeline}, {"tensor", p.shape.tensor}}},
  };
  nlohmann::json placement = nlohmann::json::array();
  for (const Placement& r : Place(p.shape, p.procs_per_worker)) {
    placement.push_back({{"rank", r.rank},
                         {"worker", r.worker},
                         {"localRank", r.local_rank},
                         {"data", r.at.data},
                         {"pipeline", r.at.pipeline},
                         {"tensor", r.at.tensor}});
  }
  out["placement"] = placement;
  if (!p.config) {
    out["command"] = p.command;
    out["trainer"] = nullptr;
    return out;
  }
  const train::TrainerConfig& c = *p.config;
  const train::TrainingPlan& t = p.training;
  nlohmann::json stages = nlohmann::json::array();
  for (size_t i = 0; i < t.stages.size(); i++) {
    const train::StagePlan& s = t.stages[i];
    stages.push_back({{"stage", i},
                      {"firstLayer", s.layers.first},
                      {"endLayer", s.layers.end},
                      {"embedding", s.embedding},
                      {"head", s.head},
                      {"costShare", s.cost_share},
                      {"parameters", s.parameters},
                      {"inFlight", s.in_flight},
                      {"memory", MemoryJson(s.memory)}});
  }
  const bool gpu = c.precision == train::Precision::kBf16;
  out["trainer"] = {
      {"precision", gpu ? "bf16" : "fp32"},
      {"device", gpu ? "gpu" : "cpu"},
      {"parameters", t.parameters},
      {"batch",
       {{"global", c.batch.global},
        {"perDataRank", t.sequences_per_rank},
        {"microBatches", t.micro_batches},
        {"microBatch", t.micro_batch},
        {"tokensPerStep", t.tokens_per_step}}},
      {"data",
       {{"path", c.data.path},
        {"tokenizer", c.data.tokenizer},
        {"bytes", t.corpus_bytes ? nlohmann::json(*t.corpus_bytes) : nlohmann::json(nullptr)}}},
      {"flopsPerToken", t.flops_per_token},
      {"flopsPerStep", t.flops_per_token * static_cast<double>(t.tokens_per_step)},
      {"pipeline", {{"schedule", c.parallel.schedule}, {"idealBubble", t.ideal_bubble}}},
      {"zeroStage", c.parallel.zero_stage},
      {"stages", stages},
      {"memory",
       {{"largestRank", t.largest_rank_bytes()},
        {"allRanks", t.all_ranks_bytes()},
        {"largestWorker", gpu ? nlohmann::json(nullptr) : nlohmann::json(p.largest_worker)},
        {"podLimit", p.pod_limit ? nlohmann::json(static_cast<int64_t>(*p.pod_limit))
                                 : nlohmann::json(nullptr)},
        {"available", p.available ? nlohmann::json(*p.available) : nlohmann::json(nullptr)},
        {"gpusHere", p.gpus_here ? nlohmann::json(*p.gpus_here) : nlohmann::json(nullptr)}}},
  };
  return out;
}

void PrintText(const JobPlan& p) {
  const comm::MeshShape& s = p.shape;
  std::cout << fmt::format(
      "{}: {} rank(s) = {} worker(s) x {} process(es); mesh data {} x pipeline {} x tensor {}\n",
      p.name, s.world_size(), p.workers, p.procs_per_worker, s.data, s.pipeline, s.tensor);
  if (!p.config) {
    std::string joined;
    for (const std::string& part : p.command)
      joined += (joined.empty() ? "" : " ") + part;
    std::cout << "trainer    your own: every rank runs `" << joined
              << "` with the torchrun-compatible environment (docs/local-mode.md)\n";
  } else {
    const train::TrainerConfig& c = *p.config;
    const train::TrainingPlan& t = p.training;
    const bool gpu = c.precision == train::Precision::kBf16;
    std::cout << fmt::format(
        "model      {}{} layers, dModel {}, {} heads, seqLen {}, vocab {}: {} parameters; {}\n",
        c.model_preset.empty() ? "" : c.model_preset + ": ", c.model.layers, c.model.d_model,
        c.model.heads, c.model.seq_len, c.model.vocab, Grouped(t.parameters),
        gpu ? "bf16 on a GPU per rank (fp32 master weights and AdamW)" : "fp32 on CPU");
    std::cout << fmt::format(
        "batch      {} sequences ({} tokens) a step: {} per data-parallel rank as {} "
        "micro-batch(es) of {}\n",
        c.batch.global, Grouped(t.tokens_per_step), t.sequences_per_rank, t.micro_batches,
        t.micro_batch);
    if (!t.corpus_bytes) {
      std::cout << "data       " << c.data.path
                << ": not on this machine, so not counted in the memory below\n";
    } else if (c.data.tokenizer == "byte") {
      std::cout << fmt::format("data       {}: {} of text, held as {} of ids by every rank\n",
                               c.data.path, train::FormatBytes(*t.corpus_bytes),
                               train::FormatBytes(2 * *t.corpus_bytes));
    } else {
      std::cout << fmt::format(
          "data       {}: {} of uint16 ids, mapped (pages shared by the ranks of a machine)\n",
          c.data.path, train::FormatBytes(*t.corpus_bytes));
    }
    std::cout << fmt::format(
        "compute    {} a token, {} a step (matrix products, forward and backward)\n",
        Flops(t.flops_per_token),
        Flops(t.flops_per_token * static_cast<double>(t.tokens_per_step)));
    if (s.pipeline > 1) {
      std::cout << fmt::format(
          "pipeline   {} over {} stages and {} micro-batches: ideal bubble (p-1)/(m+p-1) = "
          "{:.3f}\n",
          c.parallel.schedule, s.pipeline, t.micro_batches, t.ideal_bubble);
    }
    if (s.data > 1) {
      std::cout << fmt::format(
          "optimizer  AdamW; {}\n",
          c.parallel.zero_stage == 1
              ? fmt::format("ZeRO-1: each of the {} data-parallel ranks keeps 1/{} of its moments",
                            s.data, s.data)
              : fmt::format("every data-parallel rank keeps all of its moments (zeroStage 0); "
                            "gradients all-reduced in buckets of {} MiB",
                            c.parallel.bucket_mib));
    }
    std::cout << fmt::format(
        "\n{:>5}  {:<7}  {:<10}  {:>6}  {:>12}  {:>9}  {:>11}  {:>11}  {:>11}  "
        "{:>11}  {:>11}  {:>11}\n",
        "stage", "blocks", "also", "work", "parameters", "in flight", "params", "grads", "AdamW",
        "activations", "corpus ids", "rank total");
    for (size_t i = 0; i < t.stages.size(); i++) {
      const train::StagePlan& st = t.stages[i];
      std::string also = st.embedding && st.head ? "emb, head"
                         : st.embedding          ? "embedding"
                         : st.head               ? "head, loss"
                                                 : "-";
      const std::string blocks = st.layers.end - st.layers.first == 1
                                     ? std::to_string(st.layers.first)
                                     : fmt::format("{}-{}", st.layers.first, st.layers.end - 1);
      std::cout << fmt::format(
          "{:>5}  {:<7}  {:<10}  {:>5.1f}%  {:>12}  {:>9}  {:>11}  {:>11}  {:>11}  {:>11}  "
          "{:>11}  {:>11}\n",
          i, blocks, also, 100.0 * st.cost_share, Grouped(st.parameters), st.in_flight,
          train::FormatBytes(st.memory.parameters), train::FormatBytes(st.memory.gradients),
          train::FormatBytes(st.memory.optimizer), train::FormatBytes(st.memory.activations),
          train::FormatBytes(st.memory.data), train::FormatBytes(st.memory.total()));
    }
    if (s.tensor > 1) {
      std::cout << fmt::format(
          "(each stage's blocks split over {} tensor-parallel ranks; parameters and memory are "
          "one rank's)\n",
          s.tensor);
    }
    std::cout << fmt::format("\nmemory     {} the largest rank, {} all {} ranks together{}\n",
                             train::FormatBytes(t.largest_rank_bytes()),
                             train::FormatBytes(t.all_ranks_bytes()), s.world_size(),
                             gpu ? " (GPU memory, one GPU a rank)" : "");
    if (!gpu) {
      std::cout << fmt::format("           {} the largest worker pod's {} rank(s); ",
                               train::FormatBytes(p.largest_worker), p.procs_per_worker);
      if (!p.pod_limit) {
        std::cout << "the worker container sets no memory limit (request at least that much "
                     "in resources.requests.memory)\n";
      } else if (*p.pod_limit >= static_cast<double>(p.largest_worker)) {
        std::cout << "its memory limit " << p.pod_limit_text << " holds it\n";
      } else {
        std::cout << "its memory limit " << p.pod_limit_text
                  << " does NOT: each rank would stop at start with exit code 2 (or be "
                     "OOM-killed); raise resources.limits.memory\n";
      }
    }
    if (p.available) {
      const bool fits = t.all_ranks_bytes() <= *p.available;
      std::cout << fmt::format(
          "           this machine has {} available: {} for `tessera run` (every rank here)\n",
          train::FormatBytes(*p.available), fits ? "enough" : "NOT enough");
    }
    if (gpu && p.gpus_here) {
      std::cout << fmt::format(
          "           this machine has {} GPU(s) (/dev/nvidia*): {} for `tessera run` (one a "
          "rank)\n",
          *p.gpus_here, *p.gpus_here >= s.world_size() ? "enough" : "NOT enough");
    } else if (gpu) {
      std::cout << "           CUDA_VISIBLE_DEVICES is set: `tessera run` leaves the ranks' GPUs "
                   "to it and counts none\n";
    }
  }
  std::cout << "\nworker  rank (data, pipeline, tensor) ...\n";
  int worker = -1;
  for (const Placement& r : Place(s, p.procs_per_worker)) {
    if (r.worker != worker) {
      if (worker >= 0)
        std::cout << "\n";
      worker = r.worker;
      std::cout << fmt::format("{:>6}", worker);
    }
    std::cout << fmt::format("  {} ({},{},{})", r.rank, r.at.data, r.at.pipeline, r.at.tensor);
  }
  std::cout << "\n";
}

}  // namespace

int PlanJob(const PlanOptions& options) {
  if (options.output != "text" && options.output != "json")
    return BadJob("--output " + options.output + ": use text or json");
  api::TrainingJob job;
  if (!LoadJobFile("tessera plan", options.file, options.sets, &job))
    return kPlanBadJob;
  JobPlan p;
  p.name = job.metadata.name;
  p.workers = static_cast<int>(job.spec.workers);
  p.procs_per_worker = static_cast<int>(api::EffectiveProcsPerWorker(job.spec));
  const int world = static_cast<int>(api::WorldSize(job.spec));
  const int pipeline = static_cast<int>(job.spec.parallelism.pipeline);
  const int tensor = static_cast<int>(job.spec.parallelism.tensor);
  p.shape = {world / (pipeline * tensor), pipeline, tensor};
  nlohmann::json container;
  p.command = WorkerCommand(job, &container);
  if (p.command.empty()) {
    train::TrainerConfig config;
    if (train::Status st = train::TrainerConfigFromJob(job, &config); !st.ok())
      return BadJob(options.file + ": " + st.message());
    if (train::Status st = train::PlanTraining(config, world, pipeline, tensor, &p.training,
                                               model::GpuAttentionFromEnvironment());
        !st.ok()) {
      return BadJob(options.file + ": " + st.message());
    }
    if (config.precision == train::Precision::kBf16 && !GpusChosenByUser())
      p.gpus_here = LocalGpuCount();
    if (config.precision == train::Precision::kFp32) {
      p.available = train::AvailableMemoryBytes();
      p.largest_worker = LargestWorkerBytes(p.training, p.procs_per_worker);
      p.pod_limit_text = PodMemoryLimit(job);
      if (!p.pod_limit_text.empty()) {
        p.pod_limit = api::ParseQuantity(p.pod_limit_text);
        if (!p.pod_limit) {
          return BadJob(fmt::format(
              "{}: spec.template.spec.containers[{}].resources.limits.memory: '{}' is not a "
              "quantity (e.g. 16Gi, 512Mi)",
              options.file, *WorkerContainerIndex(job), p.pod_limit_text));
        }
      }
    }
    p.config = config;
  }
  if (options.output == "json")
    std::cout << ToJson(p).dump(2) << "\n";
  else
    PrintText(p);
  return kPlanPrinted;
}

void AddPlanCommand(CLI::App* app, int* rc) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* plan = app->add_subcommand(
      "plan",
      "Show what a TrainingJob will do before it runs: ranks and their workers, the mesh, the "
      "batch split, pipeline stages and their share of the work, FLOPs, and each rank's memory "
      "(docs/local-mode.md). Exit 0: printed; 2: invalid job");
  plan->add_option("FILE", options->file, "TrainingJob YAML; - reads standard input")->required();
  plan->add_option("--set", options->sets,
                   "Override a field first, as tessera run --set: path=value; repeatable");
  plan->add_option("-o,--output", options->output, "text or json")->capture_default_str();
  plan->callback([options, rc] { *rc = PlanJob(*options); });
}

}  // namespace tessera::cli
