// The training plan (worker/train/plan.h) against what the parts it predicts really hold: the
// CPU model's parameters and activation slots after a pipeline step on real Gloo groups, the
// ZeRO-1 shard the data-parallel layout gives, and the GPU model's arena layout sized on the host.
#include "worker/train/plan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <random>

#include "worker/comm/local_gang.h"
#include "worker/model/cpu/gpt_cpu.h"
#include "worker/model/cuda/activation_layout.h"
#include "worker/model/gpt.h"
#include "worker/parallel/data/zero.h"
#include "worker/parallel/pipeline/runner.h"
#include "worker/parallel/pipeline/schedule.h"

namespace tessera::train {
namespace {

TrainerConfig Config(int data_ranks, int micro_batches, int micro_batch) {
  TrainerConfig c;
  c.model = {.layers = 4, .d_model = 32, .heads = 4, .seq_len = 16, .vocab = 256};
  c.data.path = "corpus.txt";  // not read: a plan needs no data
  c.batch = {.global = data_ranks * micro_batches * micro_batch, .micro_batches = micro_batches};
  return c;
}

std::vector<int32_t> Ids(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids)
    id = static_cast<int32_t>(rng() % 256);
  return ids;
}

// Each stage of a real pipeline step holds what the plan says: its parameters and gradients,
// and the activations of the micro-batches its schedule keeps alive at once (GPipe all of
// them, 1F1B p - s on stage s). A wrong in-flight count or stage split fails here.
TEST(TrainingPlan, StagesHoldWhatAPipelineStepAllocates) {
  constexpr int kMicro = 4, kB = 2;
  for (int p : {2, 4}) {
    for (const char* schedule : {"GPipe", "1F1B"}) {
      TrainerConfig c = Config(1, kMicro, kB);
      c.parallel.schedule = schedule;
      TrainingPlan plan;
      ASSERT_TRUE(PlanTraining(c, p, p, 1, &plan).ok());
      ASSERT_EQ(plan.stages.size(), static_cast<size_t>(p));
      EXPECT_EQ(plan.micro_batch, kB);
      EXPECT_DOUBLE_EQ(plan.ideal_bubble, static_cast<double>(p - 1) / (kMicro + p - 1));
      comm::RunThreadGang(p, [&](int s, std::shared_ptr<comm::ProcessGroup> group) {
        const StagePlan& stage = plan.stages[s];
        model::Gpt gpt(c.model, {.first_layer = stage.layers.first,
                                 .end_layer = stage.layers.end,
                                 .embedding = stage.embedding,
                                 .head = stage.head});
        gpt.InitParameters(3);
        gpt.ZeroGradients();
        parallel::PipelineRunner runner(&gpt, group, *parallel::ParseSchedule(schedule));
        runner.Train(kMicro,
                     [&](int i, parallel::MicroBatch* mb) {
                       mb->tokens = Ids(kB * c.model.seq_len, 10 + i);
                       mb->targets = Ids(kB * c.model.seq_len, 100 + i);
                       mb->B = kB;
                       mb->T = c.model.seq_len;
                     },
                     1.0f / kMicro, {});
        const std::string what =
            std::string(schedule) + " p=" + std::to_string(p) + " stage " + std::to_string(s);
        EXPECT_EQ(stage.parameters, static_cast<int64_t>(gpt.parameters().size())) << what;
        EXPECT_EQ(stage.memory.parameters, 4 * stage.parameters) << what;
        EXPECT_EQ(stage.memory.gradients, 4 * static_cast<int64_t>(gpt.gradients().size())) << what;
        EXPECT_EQ(stage.in_flight, std::string(schedule) == "GPipe" ? kMicro : p - s) << what;
        EXPECT_EQ(stage.memory.activations, gpt.activation_bytes()) << what;
      });
    }
  }
}

// Without pipeline parallelism micro-batches run one after another through one slot.
TEST(TrainingPlan, OneStageKeepsOneMicroBatchAlive) {
  const TrainerConfig c = Config(1, 4, 2);
  TrainingPlan plan;
  ASSERT_TRUE(PlanTraining(c, 1, 1, 1, &plan).ok());
  ASSERT_EQ(plan.stages.size(), 1u);
  model::Gpt gpt(c.model);
  gpt.InitParameters(3);
  for (int i = 0; i < 4; i++) {
    gpt.Forward(Ids(2 * 16, i), Ids(2 * 16, 50 + i), 2, 16);
    gpt.Backward(0.25f);
  }
  EXPECT_EQ(plan.stages[0].in_flight, 1);
  EXPECT_EQ(plan.stages[0].memory.activations, gpt.activation_bytes());
  EXPECT_EQ(plan.parameters, model::GptParameterCount(c.model));
  EXPECT_EQ(plan.stages[0].parameters, plan.parameters);
  EXPECT_EQ(plan.ideal_bubble, 0.0);
}

// Tensor parallelism: a stage's rank holds its shard of the blocks (the model's own count) and
// the shard's activations; every rank of the mesh is counted once in the total.
TEST(TrainingPlan, TensorShardsAndTheTotalOverEveryRank) {
  const TrainerConfig c = Config(2, 2, 2);
  TrainingPlan plan;
  ASSERT_TRUE(PlanTraining(c, 8, 2, 2, &plan).ok());  // data 2 x pipeline 2 x tensor 2
  EXPECT_EQ(plan.shape.data, 2);
  int64_t sum = 0;
  for (const StagePlan& stage : plan.stages) {
    const model::GptShard shard{.first_layer = stage.layers.first,
                                .end_layer = stage.layers.end,
                                .embedding = stage.embedding,
                                .head = stage.head,
                                .tensor_rank = 1,
                                .tensor_size = 2};
    const model::Gpt gpt(c.model, shard, [](float*, int64_t) {});
    EXPECT_EQ(stage.parameters, static_cast<int64_t>(gpt.parameters().size()));
    model::cpu::GptActivations<float> acts;
    acts.Allocate(c.model, plan.micro_batch, c.model.seq_len, shard);
    EXPECT_EQ(stage.memory.activations, stage.in_flight * acts.bytes());
    sum += 4 * stage.memory.total();  // data 2 x tensor 2 ranks hold this stage
  }
  EXPECT_EQ(plan.all_ranks_bytes(), sum);
  EXPECT_EQ(plan.largest_rank_bytes(),
            std::max(plan.stages[0].memory.total(), plan.stages[1].memory.total()));
}

// ZeRO-1 keeps the AdamW moments of the largest shard the data-parallel layout gives a rank;
// zeroStage 0 keeps all of them.
TEST(TrainingPlan, ZeroOneShardsTheMoments) {
  TrainerConfig c = Config(3, 1, 2);
  TrainingPlan replicated, sharded;
  ASSERT_TRUE(PlanTraining(c, 3, 1, 1, &replicated).ok());
  c.parallel.zero_stage = 1;
  ASSERT_TRUE(PlanTraining(c, 3, 1, 1, &sharded).ok());
  const int64_t n = replicated.parameters;
  EXPECT_EQ(replicated.stages[0].memory.optimizer, 8 * n);
  const parallel::ZeroLayout layout{.count = n, .ranks = 3};
  EXPECT_EQ(sharded.stages[0].memory.optimizer, 8 * layout.shard(0).size());
  EXPECT_GE(3 * layout.shard_size(), n);
  EXPECT_EQ(sharded.stages[0].memory.parameters, replicated.stages[0].memory.parameters);
}

// ZeRO-1 shards only the moments: every data-parallel rank still holds every parameter and its
// gradient (the trainer reduces the whole gradient before it scatters it).
TEST(TrainingPlan, ZeroOneKeepsEveryGradient) {
  TrainerConfig c = Config(3, 1, 2);
  c.parallel.zero_stage = 1;
  TrainingPlan plan;
  ASSERT_TRUE(PlanTraining(c, 3, 1, 1, &plan).ok());
  // Besides every gradient, ZeRO-1's reduced shard, and a staging copy of the padded shards
  // when the parameters do not divide by the 3 data ranks.
  const int64_t shard = (plan.parameters + 2) / 3;
  const int64_t staging = plan.parameters % 3 == 0 ? 0 : 3 * shard;
  EXPECT_EQ(plan.stages[0].memory.gradients, 4 * (plan.parameters + shard + staging));
  EXPECT_EQ(plan.stages[0].memory.parameters, 4 * plan.parameters);
  EXPECT_EQ(plan.stages[0].memory.optimizer, 8 * shard);
}

// A bf16 rank keeps the whole model, its gradient and all of AdamW's state on its GPU, however
// many data-parallel ranks there are (the GPU model has no ZeRO).
TEST(TrainingPlan, EveryGpuRankHoldsTheWholeOptimizerState) {
  TrainerConfig c = Config(2, 1, 2);
  c.precision = Precision::kBf16;
  TrainingPlan plan;
  ASSERT_TRUE(PlanTraining(c, 2, 1, 1, &plan).ok());
  const model::GptCudaMemory gpu = model::GptCudaMemoryFor(
      c.model, plan.micro_batch, c.model.seq_len, model::GpuAttention::kMatmul);
  ASSERT_EQ(plan.stages.size(), 1u);
  EXPECT_EQ(plan.stages[0].memory.optimizer, gpu.optimizer);
  EXPECT_EQ(plan.stages[0].memory.gradients, gpu.gradients);
  EXPECT_EQ(plan.all_ranks_bytes(), 2 * plan.stages[0].memory.total());
}

// The batch and work figures `tessera plan` prints: sequences a data-parallel rank, tokens a
// step, and each stage's share of the cost model's work.
TEST(TrainingPlan, BatchSplitAndShareOfTheWork) {
  const TrainerConfig c = Config(2, 2, 3);  // 12 sequences of 16 tokens over 2 data ranks
  TrainingPlan plan;
  ASSERT_TRUE(PlanTraining(c, 8, 2, 2, &plan).ok());
  EXPECT_EQ(plan.sequences_per_rank, 6);
  EXPECT_EQ(plan.micro_batches, 2);
  EXPECT_EQ(plan.micro_batch, 3);
  EXPECT_EQ(plan.tokens_per_step, 12 * 16);
  ASSERT_EQ(plan.stages.size(), 2u);
  const double cost = plan.stages[0].layers.cost + plan.stages[1].layers.cost;
  for (const StagePlan& stage : plan.stages)
    EXPECT_DOUBLE_EQ(stage.cost_share, stage.layers.cost / cost);
  EXPECT_DOUBLE_EQ(plan.stages[0].cost_share + plan.stages[1].cost_share, 1.0);
}

// The attention probabilities of a CPU rank: (B, heads / tensor, T, T) floats a block of the
// stage, for every micro-batch alive at once.
TEST(TrainingPlan, AttentionIsTheTSquaredPartOfTheActivations) {
  TrainerConfig c = Config(1, 4, 2);
  c.parallel.schedule = "GPipe";
  TrainingPlan plan;
  ASSERT_TRUE(PlanTraining(c, 4, 2, 2, &plan).ok());
  for (const StagePlan& stage : plan.stages) {
    const int64_t blocks = stage.layers.end - stage.layers.first;
    EXPECT_EQ(stage.in_flight, 4);
    EXPECT_EQ(stage.memory.attention, 4 * blocks * 2 * (4 / 2) * 16 * 16 * 4);
    EXPECT_LT(stage.memory.attention, stage.memory.activations);
  }
}

// A text corpus found at data.path is held by every rank as 16-bit ids; a uint16 file is mapped
// (0); a corpus that is not here is not counted.
TEST(TrainingPlan, CorpusIdsAreCountedWhenTheFileIsHere) {
  const std::filesystem::path path =
      std::filesystem::path(::testing::TempDir()) / "plan_corpus.txt";
  std::ofstream(path) << std::string(3000, 'a');
  TrainerConfig c = Config(1, 1, 2);
  c.data.path = path.string();
  TrainingPlan plan;
  ASSERT_TRUE(PlanTraining(c, 2, 2, 1, &plan).ok());
  EXPECT_EQ(plan.corpus_bytes, std::optional<int64_t>(3000));
  for (const StagePlan& stage : plan.stages) {
    EXPECT_EQ(stage.memory.data, 6000);
    const RankMemory& m = stage.memory;
    EXPECT_EQ(m.total(), m.parameters + m.gradients + m.optimizer + m.activations + 6000);
  }
  const Status st = CheckStageFits(plan.stages[0], 2, 16, 1024, "memory");
  EXPECT_NE(st.message().find("AdamW state and 5.9 KiB of corpus ids, but 1.0 KiB of memory"),
            std::string::npos)
      << st.message();

  c.data.tokenizer = "uint16";
  ASSERT_TRUE(PlanTraining(c, 2, 2, 1, &plan).ok());
  EXPECT_EQ(plan.corpus_bytes, std::optional<int64_t>(3000));
  EXPECT_EQ(plan.stages[0].memory.data, 0);

  c.data.tokenizer = "byte";
  c.data.path = (std::filesystem::path(::testing::TempDir()) / "no_such_corpus.txt").string();
  ASSERT_TRUE(PlanTraining(c, 2, 2, 1, &plan).ok());
  EXPECT_FALSE(plan.corpus_bytes.has_value());
  EXPECT_EQ(plan.stages[0].memory.data, 0);
  std::filesystem::remove(path);
}

TEST(TrainingPlan, ARefusedConfigurationIsBadConfig) {
  TrainerConfig c = Config(2, 1, 2);
  TrainingPlan plan;
  Status st = PlanTraining(c, 3, 1, 1, &plan);  // 4 sequences over 3 data-parallel ranks
  EXPECT_EQ(st.exit_code(), 2);
  c.precision = Precision::kBf16;
  st = PlanTraining(c, 4, 2, 1, &plan);  // the GPU model is data-parallel only
  EXPECT_EQ(st.exit_code(), 2);
  EXPECT_NE(st.message().find("precision"), std::string::npos) << st.message();
}

// GPT-2 124M: 6 (P - wpe) + 12 L C T, by hand: P = 124,439,808, wpe = 1024 x 768.
TEST(TrainingPlan, FlopsPerTokenOfGpt2) {
  model::GptConfig g;
  ASSERT_TRUE(model::GptPreset("gpt2-124m", &g));
  EXPECT_DOUBLE_EQ(FlopsPerToken(g), 6.0 * (124439808 - 786432) + 12.0 * 12 * 768 * 1024);
}

// The GPU model's memory, sized on the host from the layout GptCuda carves its arena with: the
// matmul attention's (B, NH, T, T) buffers (one a block, and the gradient's scratch) against
// the flash attentions' log-sum-exp rows, at sizes where every buffer is a multiple of the
// arena's 256-byte alignment, so the difference is exact.
TEST(TrainingPlan, GpuMemoryFollowsTheArenaLayout) {
  const model::GptConfig g{.layers = 3, .d_model = 64, .heads = 4, .seq_len = 64, .vocab = 256};
  const int B = 2, T = 64;
  const int64_t N = B * T, NC = N * g.d_model, rows = int64_t{B} * g.heads * T;
  const int64_t att = rows * T;
  using model::GpuAttention;
  const model::GptCudaMemory matmul = model::GptCudaMemoryFor(g, B, T, GpuAttention::kMatmul);
  const model::GptCudaMemory flash = model::GptCudaMemoryFor(g, B, T, GpuAttention::kFlashMma);
  const model::GptCudaMemory flash2 = model::GptCudaMemoryFor(g, B, T, GpuAttention::kFlashMma2);
  // matmul: per block att (bf16), and qkvr, dqkvr (3 NC bf16 each) and datt (bf16).
  // flash: per block att_lse (fp32 rows), and att_delta (fp32 rows) and dq_accum (fp32 NC).
  EXPECT_EQ(matmul.activations - flash.activations,
            g.layers * (2 * att - 4 * rows) + (2 * 3 * NC * 2 + 2 * att) - (4 * rows + 4 * NC));
  EXPECT_EQ(flash.activations - flash2.activations, 4 * NC);  // mma2's dQ needs no scratch
  EXPECT_EQ(matmul.attention, (g.layers + 1) * 2 * att);
  EXPECT_EQ(flash.attention, 0);
  const int64_t P = model::GptParameterCount(g);
  EXPECT_EQ(matmul.parameters, 6 * P + 2 * 256 * g.d_model);  // vocab 256 is already padded
  EXPECT_EQ(matmul.gradients, 4 * P);
  EXPECT_EQ(matmul.optimizer, 8 * P);
  EXPECT_EQ(model::GptCudaPaddedVocab(50257), 50304);
  // The whole arena: the sum of every buffer at these sizes, counted by hand for flash-mma2.
  const int64_t per_block =
      2 * (NC + 3 * NC + NC + NC + NC + 4 * NC + 4 * NC + NC) + 4 * (N + N + N + N) + 4 * rows;
  const int64_t rest =
      4 * N * 2 /* tokens, targets */ + 2 * NC /* encoded */ + 2 * NC +
      4 * 2 * N /* lnf, mean, rstd */ + 2 * N * 256 /* logits */ + 4 * 2 * N /* losses, lse */ +
      2 * (NC + NC + NC + 3 * NC + 4 * NC) /* backward scratch */ + 4 * rows /* att_delta */;
  EXPECT_EQ(flash2.activations, g.layers * per_block + rest);
}

// The check the trainer makes before it allocates: Ok within the room, else one line with the
// fields to change and the figures; on a GPU with the matmul attention's T x T buffers it also
// points at a fused attention.
TEST(TrainingPlan, CheckStageFitsNamesTheFieldsAndTheFigures) {
  TrainerConfig c = Config(1, 2, 4);
  TrainingPlan plan;
  ASSERT_TRUE(PlanTraining(c, 1, 1, 1, &plan).ok());
  const StagePlan& stage = plan.stages[0];
  const int64_t need = stage.memory.total();
  EXPECT_TRUE(CheckStageFits(stage, 4, 16, need, "memory").ok());
  Status st = CheckStageFits(stage, 4, 16, need - 1, "memory");
  EXPECT_EQ(st.exit_code(), 2);
  EXPECT_EQ(
      st.message().rfind(
          "batch.global, model.seqLen: this rank needs at least " + FormatBytes(need) + ": ", 0),
      0u)
      << st.message();
  EXPECT_NE(st.message().find("micro-batches of 4 sequences of 16 tokens, 1 alive at once"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("but " + FormatBytes(need - 1) + " of memory is available"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(st.message().find("TESSERA_ATTENTION"), std::string::npos);
  // The rest beside the activations: parameters, gradients and AdamW state; no corpus here.
  const RankMemory& m = stage.memory;
  EXPECT_NE(st.message().find("and " + FormatBytes(m.parameters + m.gradients + m.optimizer) +
                              " of parameters, gradients and AdamW state, but"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(st.message().find("corpus"), std::string::npos) << st.message();

  c.precision = Precision::kBf16;
  ASSERT_TRUE(PlanTraining(c, 1, 1, 1, &plan).ok());  // the matmul attention
  st = CheckStageFits(plan.stages[0], 4, 16, 1024, "the free memory of CUDA device 0");
  EXPECT_NE(st.message().find("of the free memory of CUDA device 0 is available"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("TESSERA_ATTENTION=flash-mma2"), std::string::npos) << st.message();
  ASSERT_TRUE(PlanTraining(c, 1, 1, 1, &plan, model::GpuAttention::kFlashMma2).ok());
  EXPECT_LT(plan.stages[0].memory.activations,
            model::GptCudaMemoryFor(c.model, 4, 16, model::GpuAttention::kMatmul).activations);
  EXPECT_EQ(plan.stages[0].parameters, plan.parameters);  // the whole model on every GPU
  st = CheckStageFits(plan.stages[0], 4, 16, 1024, "the free memory of CUDA device 0");
  EXPECT_EQ(st.message().find("TESSERA_ATTENTION"), std::string::npos) << st.message();
}

// A pod's ranks start together and share its memory (the agent checks them before starting
// any): refused when they fit one by one but not together; a rank that does not fit alone is
// left to its own check.
TEST(TrainingPlan, CheckPodFitsAddsThePodsRanks) {
  TrainerConfig c = Config(2, 2, 2);
  TrainingPlan plan;
  ASSERT_TRUE(PlanTraining(c, 8, /*pipeline=*/2, /*tensor=*/2, &plan).ok());
  // Ranks 0-3: data 0, stage 0 (two tensor ranks), then stage 1; the stages differ.
  const int64_t s0 = plan.stages[0].memory.total(), s1 = plan.stages[1].memory.total();
  ASSERT_NE(s0, s1);
  EXPECT_EQ(plan.ranks_bytes(0, 4), 2 * s0 + 2 * s1);
  EXPECT_EQ(plan.ranks_bytes(2, 1), s1);
  EXPECT_EQ(plan.ranks_bytes(0, 8), plan.all_ranks_bytes());

  const int64_t together = 2 * s0 + 2 * s1, largest = std::max(s0, s1);
  EXPECT_TRUE(CheckPodFits(plan, 0, 4, together).ok());
  EXPECT_TRUE(CheckPodFits(plan, 0, 4, largest - 1).ok());  // the rank's own check says it
  EXPECT_TRUE(CheckPodFits(plan, 2, 1, 0).ok());            // one rank: its own check
  const Status st = CheckPodFits(plan, 4, 4, together - 1);
  EXPECT_EQ(st.exit_code(), 2);
  EXPECT_EQ(st.message().rfind("batch.global, model.seqLen: the 4 ranks of this pod (ranks 4 to 7) "
                               "need " +
                                   FormatBytes(together) + " together (the largest " +
                                   FormatBytes(largest) + "), but " + FormatBytes(together - 1) +
                                   " of memory is available",
                               0),
            0u)
      << st.message();
  EXPECT_NE(st.message().find("procsPerWorker"), std::string::npos);
  // Each rank fits exactly, together they do not.
  EXPECT_EQ(CheckPodFits(plan, 0, 4, largest).exit_code(), 2);

  // A GPU job's ranks each have a device of their own.
  c.precision = Precision::kBf16;
  ASSERT_TRUE(PlanTraining(c, 2, 1, 1, &plan).ok());
  EXPECT_TRUE(CheckPodFits(plan, 0, 2, plan.largest_rank_bytes()).ok());
}

// MFU is the job's FLOPs a second over the peak of all its ranks: each rank reports the job's
// tokens a second, so a rank's own peak alone would count the job's work against one GPU.
TEST(MfuRatio, IsTheJobsFlopsOverEveryRanksPeak) {
  EXPECT_DOUBLE_EQ(MfuRatio(6e8, 1000, 1.2e12, 1), 0.5);
  EXPECT_DOUBLE_EQ(MfuRatio(6e8, 8000, 1.2e12, 8), 0.5);
  EXPECT_DOUBLE_EQ(MfuRatio(6e8, 8000, 1.2e12, 16), 0.25);
  EXPECT_EQ(MfuRatio(6e8, 1000, 0, 1), 0);  // no peak configured: not reported
}

TEST(FormatBytes, BinaryUnits) {
  EXPECT_EQ(FormatBytes(12), "12 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1.0 KiB");
  EXPECT_EQ(FormatBytes(int64_t{1} << 20), "1.0 MiB");
  EXPECT_EQ(FormatBytes(4096), "4.0 KiB");
  EXPECT_EQ(FormatBytes(int64_t{3} << 29), "1.5 GiB");
  EXPECT_EQ(FormatBytes(int64_t{64} << 40), "64.0 TiB");
  // Never "1024.0" of a unit: from where one decimal rounds up to it, the next unit.
  EXPECT_EQ(FormatBytes(1048524), "1023.9 KiB");
  EXPECT_EQ(FormatBytes(1048525), "1.0 MiB");
  EXPECT_EQ(FormatBytes((int64_t{1} << 30) - 1), "1.0 GiB");
}

}  // namespace
}  // namespace tessera::train
