// The built-in GPT trainer of one rank: data, forward/backward with micro-batch accumulation,
// clipping, AdamW with warm-up and cosine decay, validation, checkpoints with bit-exact resume,
// metrics and logs. With a data-parallel group of several ranks it reduces gradients in
// buckets overlapped with backward (or, with parallelism.zeroStage 1, reduce-scatters them and
// updates only this rank's shard of the optimizer state), so every layout follows the same
// loss curve as one rank with the same global batch.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "worker/comm/process_group.h"
#include "worker/train/config.h"
#include "worker/train/status.h"

namespace tessera::train {

// Where this process sits in the job (DESIGN.md §3 environment).
struct RankContext {
  int rank = 0;
  int world_size = 1;
  // TESSERA_MESH: its pipeline and tensor sizes are used; the data-parallel size is
  // world_size / (pipeline x tensor). Ranks are laid out as comm::MeshShape says (tensor
  // innermost).
  std::string mesh = "data=1,pipeline=1,tensor=1";
  int kernel_threads = 0;  // 0: leave the kernels' default (OMP_NUM_THREADS / all cores)
  int local_rank = 0;      // LOCAL_RANK: picks the CUDA device with precision bf16
  // precision bf16 with world_size > 1: the same world over NCCL (device memory), for the
  // gradients; `world_group` keeps the host-side collectives (loss, checkpoint agreement).
  std::shared_ptr<comm::ProcessGroup> device_group = nullptr;
  // The group of all world_size ranks, this one at `rank`; required when world_size > 1,
  // ignored otherwise. The trainer splits it into the mesh's groups. Collectives failing
  // mid-run end Run with kCommFailed.
  std::shared_ptr<comm::ProcessGroup> world_group = nullptr;
};

struct RunOptions {
  // Stop after this many steps are completed (as if interrupted), writing a checkpoint there
  // when a checkpoint directory is configured. -1: run to schedule.steps.
  int64_t stop_after_step = -1;
};

struct TrainResult {
  int64_t start_step = 0;          // 0, or the step of the checkpoint resumed from
  int64_t steps_completed = 0;     // optimizer steps done when Run returned (the global count)
  std::vector<float> losses;       // training loss of each step this Run executed
  std::optional<double> val_loss;  // the last validation loss
  bool stopped = false;            // RequestStop or stop_after_step ended the run early
  // With several ranks, when RequestStop (tessera-worker's signal handler) on some of them
  // ended the run: on how many, and the rank when it was one (else -1). Every rank stops at
  // that step; these let the others say why.
  int signaled_ranks = 0;
  int64_t signaled_rank = -1;
};

class Trainer {
 public:
  // Validates `config` for `rank`, loads the dataset and builds the model shard and optimizer
  // (not yet initialised; Run does that or resumes). Collective with several ranks (it forms
  // the mesh's groups). Configuration and dataset problems are
  // kBadConfig with one line naming the field or path. Starts the metrics server when
  // config.metrics.port >= 0 (kIoError when the port cannot be bound).
  static Status Create(const TrainerConfig& config, const RankContext& rank,
                       std::unique_ptr<Trainer>* out);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Resumes from the newest complete checkpoint in config.checkpoint.dir (refusing, with
  // kCheckpointRefused, one that is corrupt or belongs to another job), otherwise starts
  // from InitParameters(seed); then trains to schedule.steps. Not reentrant.
  Status Run(const RunOptions& options, TrainResult* result);

  // Asks Run to stop after the step in progress and write a checkpoint. Thread-safe and
  // async-signal-safe (it only stores an atomic flag).
  void RequestStop() { stop_requested_.store(true, std::memory_order_relaxed); }

  // The port the metrics server listens on, or -1 when it is off.
  int metrics_port() const;

  // The /progress document as of now (api/progress.h), served or not. Thread-safe.
  std::string ProgressJson() const;

  // Mean validation loss over the fixed validation windows, with the current parameters.
  // Collective when there are several ranks (each evaluates a share of the windows).
  double ValidationLoss();

 private:
  struct Impl;
  explicit Trainer(std::unique_ptr<Impl> impl);
  Status RunSteps(const RunOptions& options, TrainResult* result);
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> stop_requested_{false};
};

}  // namespace tessera::train
