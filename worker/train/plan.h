// What a trainer configuration asks of each rank, computed from the configuration alone (no
// data, processes or devices): how the global batch splits, which blocks each pipeline stage
// holds (the cost model's partition, as the trainer uses), how many micro-batches a stage
// keeps alive at once under its schedule, and the memory of a rank of each stage: parameters,
// gradients, AdamW state and activations. `tessera plan` prints it; the trainer compares its
// own stage's figure with the memory it can have before training, and `tessera run` compares
// every rank's with this machine's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "worker/comm/device_mesh.h"
#include "worker/model/cuda/gpt_cuda.h"
#include "worker/parallel/pipeline/partition.h"
#include "worker/train/config.h"
#include "worker/train/status.h"

namespace tessera::train {

// Bytes one rank holds: on the CPU (fp32) or, with precision bf16, on its GPU.
struct RankMemory {
  int64_t parameters = 0;   // fp32; with bf16 also their bf16 copy and the padded LM head
  int64_t gradients = 0;    // fp32; with ZeRO-1 also its reduced shard (and staging copy)
  int64_t optimizer = 0;    // AdamW's two fp32 moments over the values this rank updates
  int64_t activations = 0;  // every micro-batch alive at once, and the backward's scratch
  int64_t attention = 0;    // of `activations`: the (B, heads, T, T) attention probabilities
  int64_t data = 0;  // the corpus as ids (fp32 only: host memory): 2 bytes a byte of a text file
                     // found at data.path; a uint16 file is mapped, its pages shared (0)
  bool gpu = false;  // the figures are a GPU's device memory (precision bf16)
  int64_t total() const { return parameters + gradients + optimizer + activations + data; }
};

struct StagePlan {
  parallel::StageLayers layers;  // [first, end) blocks, forward FLOPs per token
  double cost_share = 1;         // of the whole model's forward FLOPs (the stages' sum to 1)
  bool embedding = false;        // the first stage: token and position embeddings
  bool head = false;             // the last stage: final layer norm, tied LM head, loss
  int64_t parameters = 0;        // values each (tensor) rank of the stage holds
  int in_flight = 1;             // micro-batches whose activations are alive at once
  RankMemory memory;             // one rank of the stage (the largest ZeRO-1 shard)
};

struct TrainingPlan {
  comm::MeshShape shape;       // data x pipeline x tensor
  int64_t parameters = 0;      // the whole model
  int sequences_per_rank = 0;  // of the global batch, per data-parallel rank
  int micro_batch = 0;         // sequences a micro-batch
  int micro_batches = 0;       // per step and data-parallel rank
  int64_t tokens_per_step = 0;
  std::optional<int64_t> corpus_bytes;  // data.path's size; nullopt when it is not here
  double flops_per_token = 0;           // FlopsPerToken
  double ideal_bubble = 0;              // (p - 1) / (m + p - 1); 0 with one stage
  std::vector<StagePlan> stages;
  // The most any one rank holds, and what all ranks hold together (ranks on one machine).
  int64_t largest_rank_bytes() const;
  int64_t all_ranks_bytes() const;
  // What ranks [first, first + count) hold together: the ranks of one pod (worker), which
  // share its memory.
  int64_t ranks_bytes(int first, int count) const;
};

// Matrix-multiply FLOPs per trained token of the whole model, forward and backward: 6 per
// weight used in a product (every parameter but the position embedding; the tied LM head
// counts once, as it is one product) plus the attention's scores and mixing,
// 12 * layers * dModel * seqLen. The numerator of MFU.
double FlopsPerToken(const model::GptConfig& config);

// Model FLOPs utilisation of a step: the job's matrix-product FLOPs a second (the whole job's
// `tokens_per_second` times `flops_per_token`) over the peak of all its `world_size` ranks,
// `peak_per_rank` each (one rank's GPU, or the cores it uses); 0 when the peak is unknown (0).
double MfuRatio(double flops_per_token, double tokens_per_second, double peak_per_rank,
                int world_size);

// The plan of `config` over `world_size` ranks as data x `pipeline` x `tensor`. With precision
// bf16 the memory is the GPU's, for `attention`'s buffers (the trainer's: TESSERA_ATTENTION or
// the default). A configuration ValidateTrainerConfig refuses is that kBadConfig. Reads
// nothing but the size of data.path, when that file exists here.
Status PlanTraining(const TrainerConfig& config, int world_size, int pipeline, int tensor,
                    TrainingPlan* out,
                    model::GpuAttention attention = model::GpuAttention::kMatmul);

// kBadConfig when `stage`'s memory is more than `available` bytes of `where` ("memory",
// "free memory of CUDA device 0"), in one line naming the fields to change and the figures,
// for micro-batches of `micro_batch` sequences of `seq_len` tokens; Ok otherwise. When the
// figure is a GPU's and holds the matmul attention's probabilities it also suggests a fused
// attention.
Status CheckStageFits(const StagePlan& stage, int micro_batch, int seq_len, int64_t available,
                      const std::string& where);

// kBadConfig when the `count` ranks from `first` — one pod's ranks, started together by its
// agent — need more than `available` bytes together although each fits alone (a rank that does
// not fit alone is its own CheckStageFits' to report, on that rank); Ok otherwise. fp32 only: a
// bf16 rank has a GPU of its own.
Status CheckPodFits(const TrainingPlan& plan, int first, int count, int64_t available);

// "1.5 GiB", "312.0 MiB", "4.0 KiB", "12 B": binary units, one decimal.
std::string FormatBytes(int64_t bytes);

}  // namespace tessera::train
