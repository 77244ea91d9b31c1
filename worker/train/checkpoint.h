// Checkpoints on a shared directory (DESIGN.md §6): `step-<N>/` holds one shard file per
// rank and a `meta.json` (step, config hash, mesh, data cursor, RNG state, per-file sha256).
// A checkpoint is written under `step-<N>.tmp/` and renamed once complete, so a `step-<N>/`
// directory is complete by construction; a crash leaves only a `.tmp` that is ignored.
// This layer moves bytes and verifies them; deciding whether a checkpoint fits a job (config,
// mesh, model size) is the trainer's.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "worker/train/data_loader.h"
#include "worker/train/status.h"

namespace tessera::train {

// One file of a checkpoint as recorded in meta.json.
struct CheckpointFile {
  std::string name;  // e.g. "rank-00000.bin", relative to the step directory
  int rank = 0;
  int64_t bytes = 0;
  std::string sha256;  // lower-case hex
};

struct CheckpointMeta {
  int format = 1;
  int64_t step = 0;         // optimizer steps completed
  std::string config_hash;  // ConfigHash of the job
  std::string config_json;  // TrajectoryJson of the job, to name what differs
  std::string mesh;         // "data=1,pipeline=1,tensor=1"
  int world_size = 1;
  DataCursor data_cursor;
  uint64_t rng_seed = 0;           // every random choice is a counter-based function of
  int64_t rng_counter = 0;         // (seed, counter); the counter is the samples drawn
  int64_t optimizer_steps = 0;     // AdamW step count (bias correction)
  int zero_stage = 0;              // 1: each rank's file holds its shard of the AdamW state
  double loss = 0;                 // training loss of the last step
  std::optional<double> val_loss;  // validation loss at this step, when one was computed
  std::string created_at;          // RFC 3339, informational
  std::vector<CheckpointFile> files;
};

// A named array of floats in a shard file.
struct ShardTensor {
  std::string name;
  std::span<const float> data;
};

// A shard file as read back: names and values, in file order.
struct ShardContents {
  std::vector<std::string> names;
  std::vector<std::vector<float>> values;
  // Values of `name`, or nullptr.
  const std::vector<float>* Find(const std::string& name) const;
};

// "; move <step_dir> aside to resume from an older one": how every refusal of a damaged
// checkpoint ends. The older checkpoints are still good, so starting afresh (which deletes them)
// is not what to do.
std::string MoveAsideAdvice(const std::string& step_dir);

// Not thread-safe. One process (rank 0) creates and commits a checkpoint; with several ranks
// each writes its own shard file between the two (the directory is shared):
//   rank 0: Begin(step)  --barrier--  every rank: WriteShard  --gather files--  rank 0: Commit
class CheckpointStore {
 public:
  explicit CheckpointStore(std::string root) : root_(std::move(root)) {}

  const std::string& root() const { return root_; }
  std::string StepDir(int64_t step) const;

  // Writes shard files (name -> tensors, in order) and meta.json (meta.files is filled in
  // here) under step-<meta.step>.tmp/, syncs them, and renames the directory to
  // step-<meta.step>/. An existing step-<N>/ is never overwritten (kCheckpointRefused); a
  // stale step-<N>.tmp/ from a crashed writer is replaced. I/O failures are kIoError naming
  // the path, and leave no step-<N>.tmp/ behind.
  Status Save(CheckpointMeta meta,
              const std::vector<std::pair<std::string, std::vector<ShardTensor>>>& shards);

  // The three phases of Save, for several writers. Begin creates step-<step>.tmp/ (refusing an
  // existing step-<step>/, replacing a stale .tmp); WriteShard writes and syncs one shard file
  // into it and describes it in *out; Commit writes meta.json (with meta.files as given) and
  // renames the directory into place.
  Status Begin(int64_t step);
  Status WriteShard(int64_t step, int rank, const std::string& name,
                    const std::vector<ShardTensor>& tensors, CheckpointFile* out);
  Status Commit(const CheckpointMeta& meta);
  // Deletes step-<step>.tmp/ after a failed WriteShard or Commit, so that a checkpoint that
  // ran out of space gives the space back at once (best effort: nothing to report if it
  // cannot). A complete step-<step>/ is never touched.
  void Abandon(int64_t step);

  // Deletes all but the newest `keep` step directories, and any .tmp directory older than the
  // newest complete checkpoint. One that cannot be deleted is left and the others deleted all
  // the same; the first such failure is returned (kIoError naming it).
  Status Prune(int keep);

  // Steps of the complete checkpoints (step-<N>/ directories), ascending. A missing root is
  // an empty list.
  std::vector<int64_t> CompleteSteps() const;
  std::optional<int64_t> NewestComplete() const;

  // Reads and checks step-<step>/meta.json: well-formed, its step matches the directory, and
  // every listed file exists with the recorded size. Failures are kCheckpointRefused naming
  // the file and what does not match.
  Status ReadMeta(int64_t step, CheckpointMeta* out) const;

  // Reads one shard file listed in `meta`, verifying its sha256 first.
  Status ReadShard(const CheckpointMeta& meta, const std::string& file, ShardContents* out) const;

 private:
  std::string root_;
};

// The first field whose values differ between two JSON objects (dotted path and both values),
// e.g. "optimizer.lr: 0.0003 vs 0.001"; empty when equal. For refusal messages.
std::string FirstJsonDifference(const std::string& a_json, const std::string& b_json);

}  // namespace tessera::train
