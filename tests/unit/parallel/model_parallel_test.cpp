// Model parallelism's pieces: the stage partition and the schedules (pure), the sharded
// model against the whole one (tensor-parallel shards on real Gloo groups run as threads of
// this process; pipeline stages chained by hand), and the pipeline runner over a real Gloo
// pipeline group with both schedules.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "worker/comm/local_gang.h"
#include "worker/model/gpt.h"
#include "worker/parallel/pipeline/partition.h"
#include "worker/parallel/pipeline/runner.h"
#include "worker/parallel/pipeline/schedule.h"
#include "worker/parallel/tensor/tensor_parallel.h"

namespace tessera::parallel {
namespace {

using namespace std::chrono_literals;

TEST(PartitionStages, EqualBlocksSplitEvenlyAndTheHeadWeighsOnTheLastStage) {
  LayerCosts costs;
  costs.blocks.assign(8, 1.0);
  std::vector<StageLayers> s = PartitionStages(costs, 4);
  EXPECT_EQ(DescribeStages(s), "[0,2) [2,4) [4,6) [6,8)");
  // A head worth two blocks: the last stage gets fewer blocks, the max cost is minimal (3).
  costs.head = 2.0;
  s = PartitionStages(costs, 2);
  EXPECT_EQ(DescribeStages(s), "[0,5) [5,8)");
  EXPECT_DOUBLE_EQ(std::max(s[0].cost, s[1].cost), 5.0);
  costs.head = 20.0;  // heavier than everything: the last stage keeps one block
  s = PartitionStages(costs, 3);
  EXPECT_EQ(s[2], (StageLayers{7, 8, 21.0}));
  EXPECT_EQ(s[0].first, 0);
  EXPECT_EQ(s[0].end, s[1].first);
  EXPECT_EQ(DescribeStages(PartitionStages(costs, 1)), "[0,8)");
  EXPECT_THROW(PartitionStages(costs, 9), std::invalid_argument);
  EXPECT_THROW(PartitionStages(costs, 0), std::invalid_argument);
}

// One row per decision: where the embedding weighs, ties, one block per stage.
TEST(PartitionStages, SplitTable) {
  struct Case {
    const char* what;
    std::vector<double> blocks;
    double embedding;
    double head;
    int stages;
    const char* want;
    double max_cost;
  };
  const std::vector<Case> cases = {
      {"the embedding weighs on the first stage", std::vector<double>(8, 1.0), 2.0, 0.0, 2,
       "[0,3) [3,8)", 5.0},
      {"a tie: the earlier split", std::vector<double>(7, 1.0), 0.0, 0.0, 2, "[0,3) [3,7)", 4.0},
      {"as many stages as blocks",
       {1.0, 2.0, 3.0, 4.0},
       1.0,
       1.0,
       4,
       "[0,1) [1,2) [2,3) [3,4)",
       5.0},
      {"one stage holds everything", {1.0, 2.0}, 3.0, 4.0, 1, "[0,2)", 10.0},
      {"uneven blocks", {5.0, 1.0, 1.0, 1.0, 1.0, 5.0}, 0.0, 0.0, 3, "[0,1) [1,5) [5,6)", 5.0},
  };
  for (const Case& c : cases) {
    const LayerCosts costs{c.blocks, c.embedding, c.head};
    const std::vector<StageLayers> s = PartitionStages(costs, c.stages);
    EXPECT_EQ(DescribeStages(s), c.want) << c.what;
    double max_cost = 0;
    for (const StageLayers& stage : s)
      max_cost = std::max(max_cost, stage.cost);
    EXPECT_DOUBLE_EQ(max_cost, c.max_cost) << c.what;
  }
}

// Against every split, by brute force: the largest stage cost is the least possible, the
// stages are contiguous runs of at least one block covering all, and each stage's cost is its
// blocks' plus the embedding on the first and the head on the last.
TEST(PartitionStages, LargestStageIsTheLeastOfAllSplits) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; trial++) {
    LayerCosts costs;
    const int blocks = 1 + static_cast<int>(rng() % 7);
    for (int i = 0; i < blocks; i++)
      costs.blocks.push_back(1.0 + static_cast<double>(rng() % 5));
    costs.embedding = static_cast<double>(rng() % 4);
    costs.head = static_cast<double>(rng() % 8);
    const int stages = 1 + static_cast<int>(rng() % static_cast<unsigned>(blocks));
    const auto cost_of = [&](int stage, int first, int end) {
      double c = 0;
      for (int i = first; i < end; i++)
        c += costs.blocks[i];
      return c + (stage == 0 ? costs.embedding : 0.0) + (stage == stages - 1 ? costs.head : 0.0);
    };
    // The least largest cost over all splits: cut points as a bitmask over the L-1 gaps.
    double least = std::numeric_limits<double>::infinity();
    for (unsigned mask = 0; mask < (1u << (blocks - 1)); mask++) {
      if (std::popcount(mask) != stages - 1)
        continue;
      double worst = 0;
      int first = 0, stage = 0;
      for (int end = 1; end <= blocks; end++) {
        if (end == blocks || ((mask >> (end - 1)) & 1u)) {
          worst = std::max(worst, cost_of(stage++, first, end));
          first = end;
        }
      }
      least = std::min(least, worst);
    }
    const std::vector<StageLayers> s = PartitionStages(costs, stages);
    const std::string what = "trial " + std::to_string(trial) + ": " + DescribeStages(s);
    ASSERT_EQ(static_cast<int>(s.size()), stages) << what;
    double worst = 0;
    for (int i = 0; i < stages; i++) {
      EXPECT_EQ(s[i].first, i == 0 ? 0 : s[i - 1].end) << what;
      EXPECT_LT(s[i].first, s[i].end) << what;
      EXPECT_DOUBLE_EQ(s[i].cost, cost_of(i, s[i].first, s[i].end)) << what;
      worst = std::max(worst, s[i].cost);
    }
    EXPECT_EQ(s.back().end, blocks) << what;
    EXPECT_DOUBLE_EQ(worst, least) << what;
  }
}

// The cost model's figures for a small configuration, per token (see GptLayerCosts).
TEST(PartitionStages, GptCostModelTable) {
  struct Case {
    int seq_len;
    double block;
  };
  const model::GptConfig config{4, 32, 4, 16, 64};  // C = 32, V = 64
  for (const Case& c : std::vector<Case>{{12, 24.0 * 32 * 32 + 2.0 * 32 * 12 + 30.0 * 32},
                                         {1, 24.0 * 32 * 32 + 2.0 * 32 + 30.0 * 32}}) {
    const LayerCosts costs = GptLayerCosts(config, c.seq_len);
    EXPECT_EQ(costs.blocks, std::vector<double>(4, c.block)) << "T=" << c.seq_len;
    EXPECT_DOUBLE_EQ(costs.embedding, 2.0 * 32) << "T=" << c.seq_len;
    EXPECT_DOUBLE_EQ(costs.head, 2.0 * 32 * 64 + 10.0 * 32 + 5.0 * 64) << "T=" << c.seq_len;
  }
}

TEST(PartitionStages, GptCostModelCountsTheHead) {
  // vocab 50257 x dModel 768: the head is worth about 7 blocks of GPT-2 small.
  model::GptConfig c;
  ASSERT_TRUE(model::GptPreset("gpt2-124m", &c));
  const LayerCosts costs = GptLayerCosts(c, 1024);
  EXPECT_GT(costs.head, 4 * costs.blocks[0]);
  const std::vector<StageLayers> s = PartitionStages(costs, 2);
  EXPECT_GT(s[0].end - s[0].first, s[1].end - s[1].first);
}

TEST(MakeSchedule, EveryMicroBatchOnceEachWayAndInFlightBounded) {
  for (Schedule kind : {Schedule::kGPipe, Schedule::k1F1B}) {
    for (int p : {1, 2, 4}) {
      for (int m : {1, 3, 4, 8}) {
        for (int s = 0; s < p; s++) {
          const std::vector<PipelineOp> ops = MakeSchedule(kind, p, s, m);
          ASSERT_EQ(ops.size(), 2u * m);
          std::set<int> forward_done;
          int next_backward = 0;
          for (const PipelineOp& op : ops) {
            if (op.kind == PipelineOp::kForward) {
              EXPECT_TRUE(forward_done.insert(op.micro_batch).second);
            } else {
              EXPECT_TRUE(forward_done.count(op.micro_batch)) << "backward before forward";
              EXPECT_EQ(op.micro_batch, next_backward++);
            }
          }
          EXPECT_EQ(PeakInFlight(ops), kind == Schedule::kGPipe ? m : std::min(p - s, m))
              << ToString(kind) << " p=" << p << " s=" << s << " m=" << m;
        }
      }
    }
  }
  EXPECT_EQ(ParseSchedule("1F1B"), Schedule::k1F1B);
  EXPECT_EQ(ParseSchedule("GPipe"), Schedule::kGPipe);
  EXPECT_EQ(ParseSchedule("gpipe"), std::nullopt);
  EXPECT_DOUBLE_EQ(IdealBubble(4, 8), 3.0 / 11.0);
}

TEST(MakeSchedule, NamesRoundTrip) {
  EXPECT_STREQ(ToString(Schedule::kGPipe), "GPipe");
  EXPECT_STREQ(ToString(Schedule::k1F1B), "1F1B");
  for (Schedule kind : {Schedule::kGPipe, Schedule::k1F1B})
    EXPECT_EQ(ParseSchedule(ToString(kind)), kind);
  EXPECT_EQ(ParseSchedule(""), std::nullopt);
  EXPECT_EQ(ParseSchedule("1f1b"), std::nullopt);
}

// "F0 F1 B0": the exact op sequence of one stage.
std::string Describe(const std::vector<PipelineOp>& ops) {
  std::string out;
  for (const PipelineOp& op : ops) {
    out += out.empty() ? "" : " ";
    out += (op.kind == PipelineOp::kForward ? "F" : "B") + std::to_string(op.micro_batch);
  }
  return out;
}

TEST(MakeSchedule, SequenceTable) {
  struct Case {
    Schedule kind;
    int stages, stage, micro_batches;
    const char* want;
  };
  const std::vector<Case> cases = {
      {Schedule::kGPipe, 2, 0, 3, "F0 F1 F2 B0 B1 B2"},
      {Schedule::kGPipe, 4, 3, 2, "F0 F1 B0 B1"},
      // Warm-up of p - s - 1 forwards, then one forward and one backward, then the drain.
      {Schedule::k1F1B, 4, 0, 6, "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5"},
      {Schedule::k1F1B, 4, 2, 4, "F0 F1 B0 F2 B1 F3 B2 B3"},
      {Schedule::k1F1B, 4, 3, 3, "F0 B0 F1 B1 F2 B2"},
      // Fewer micro-batches than the warm-up: all forwards, then all backwards.
      {Schedule::k1F1B, 4, 0, 2, "F0 F1 B0 B1"},
      {Schedule::k1F1B, 1, 0, 2, "F0 B0 F1 B1"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Describe(MakeSchedule(c.kind, c.stages, c.stage, c.micro_batches)), c.want)
        << ToString(c.kind) << " p=" << c.stages << " s=" << c.stage << " m=" << c.micro_batches;
  }
}

// All stages together, as the runner drives them: a forward waits for the previous stage's
// forward of that micro-batch, a backward for the next stage's backward of it. Every stage
// must run to its end (no stage waits on a transfer its neighbour never sends), and the
// activations a stage sends arrive in the order the next stage consumes them (and the
// gradients likewise backwards), so each send pairs with the receive posted for it.
TEST(MakeSchedule, StagesTogetherNeverDeadlockAndTransfersPairUp) {
  for (Schedule kind : {Schedule::kGPipe, Schedule::k1F1B}) {
    for (int p : {2, 3, 4}) {
      for (int m : {1, 2, 5, 8}) {
        const std::string what =
            std::string(ToString(kind)) + " p=" + std::to_string(p) + " m=" + std::to_string(m);
        std::vector<std::vector<PipelineOp>> ops(p);
        for (int s = 0; s < p; s++)
          ops[s] = MakeSchedule(kind, p, s, m);
        std::vector<size_t> next(p, 0);
        std::vector<std::set<int>> forward_done(p), backward_done(p);
        // What each stage sent toward a neighbour, and what each consumed, in order.
        std::vector<std::vector<int>> sent_up(p), received_up(p), sent_down(p), received_down(p);
        for (bool progress = true; progress;) {
          progress = false;
          for (int s = 0; s < p; s++) {
            if (next[s] == ops[s].size())
              continue;
            const PipelineOp& op = ops[s][next[s]];
            if (op.kind == PipelineOp::kForward) {
              if (s > 0 && !forward_done[s - 1].count(op.micro_batch))
                continue;
              if (s > 0)
                received_up[s].push_back(op.micro_batch);
              if (s < p - 1)
                sent_up[s].push_back(op.micro_batch);
              forward_done[s].insert(op.micro_batch);
            } else {
              if (s < p - 1 && !backward_done[s + 1].count(op.micro_batch))
                continue;
              if (s < p - 1)
                received_down[s].push_back(op.micro_batch);
              if (s > 0)
                sent_down[s].push_back(op.micro_batch);
              backward_done[s].insert(op.micro_batch);
            }
            next[s]++;
            progress = true;
          }
        }
        for (int s = 0; s < p; s++)
          EXPECT_EQ(next[s], ops[s].size()) << what << ": stage " << s << " blocked";
        for (int s = 0; s + 1 < p; s++) {
          EXPECT_EQ(sent_up[s], received_up[s + 1]) << what << " activations " << s;
          EXPECT_EQ(sent_down[s + 1], received_down[s]) << what << " gradients " << s;
        }
      }
    }
  }
}

const model::GptConfig kConfig{4, 32, 4, 16, 64};
constexpr int kB = 2, kT = 12;

std::vector<int32_t> Ids(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids)
    id = static_cast<int32_t>(rng() % kConfig.vocab);
  return ids;
}

// The whole model's loss and gradients for micro-batches 0..m-1 (loss scale 1/m).
struct Reference {
  double loss = 0;
  std::vector<float> grads;
};
Reference WholeModel(int m) {
  model::Gpt gpt(kConfig);
  gpt.InitParameters(5);
  gpt.ZeroGradients();
  Reference ref;
  for (int i = 0; i < m; i++) {
    ref.loss += gpt.Forward(Ids(kB * kT, 10 + i), Ids(kB * kT, 100 + i), kB, kT);
    gpt.Backward(1.0f / m);
  }
  ref.loss /= m;
  ref.grads.assign(gpt.gradients().begin(), gpt.gradients().end());
  return ref;
}

// Every tensor of `shard` against the same part of the whole model's gradient.
void ExpectGradientsMatch(const model::Gpt& shard_model, std::span<const float> shard_grads,
                          const std::vector<float>& whole_grads, double tolerance,
                          const std::string& what) {
  const std::vector<model::ParameterTensor> whole = model::GptParameterTensors(kConfig);
  for (const model::ShardTensor& t : shard_model.tensors()) {
    const model::ParameterTensor& w = whole[t.whole_index];
    std::vector<float> want(static_cast<size_t>(t.local.size));
    model::CopyFromWhole(t, std::span<const float>(whole_grads).subspan(w.offset, w.size), want);
    double max_abs = 0, max_diff = 0;
    for (int64_t i = 0; i < t.local.size; i++) {
      max_abs = std::max(max_abs, std::abs(static_cast<double>(want[i])));
      max_diff = std::max(max_diff,
                          std::abs(static_cast<double>(want[i]) - shard_grads[t.local.offset + i]));
    }
    EXPECT_LE(max_diff, tolerance * std::max(max_abs, 1e-3)) << what << " " << t.local.name;
  }
}

constexpr auto OnGroup = [](int ranks, const auto& fn) { comm::RunThreadGang(ranks, fn); };

TEST(ShardedGpt, InitialisationIsTheWholeModelsSliced) {
  model::Gpt whole(kConfig);
  whole.InitParameters(5);
  for (int tp : {2, 4}) {
    for (int r = 0; r < tp; r++) {
      model::Gpt part(kConfig,
                      {.first_layer = 1,
                       .end_layer = 3,
                       .embedding = false,
                       .head = true,
                       .tensor_rank = r,
                       .tensor_size = tp},
                      [](float*, int64_t) {});
      part.InitParameters(5);
      ExpectGradientsMatch(part, part.parameters(),
                           std::vector<float>(whole.parameters().begin(), whole.parameters().end()),
                           0.0, "init tp=" + std::to_string(tp));
    }
  }
  EXPECT_THROW(model::Gpt(kConfig, {.tensor_size = 3}, [](float*, int64_t) {}),
               std::invalid_argument);  // 3 does not divide 4 heads
  EXPECT_THROW(model::Gpt(kConfig, {.tensor_size = 2}), std::invalid_argument);  // no sum
  EXPECT_THROW(model::Gpt(kConfig, {.first_layer = 3, .end_layer = 5}), std::invalid_argument);
}

TEST(ShardedGpt, TensorShardsComputeTheWholeModel) {
  const Reference ref = WholeModel(2);
  for (int tp : {2, 4}) {
    OnGroup(tp, [&](int r, std::shared_ptr<comm::ProcessGroup> group) {
      TensorCommStats stats;
      model::Gpt gpt(kConfig, {.tensor_rank = r, .tensor_size = tp}, MakeTensorSum(group, &stats));
      gpt.InitParameters(5);
      gpt.ZeroGradients();
      double loss = 0;
      for (int i = 0; i < 2; i++) {
        loss += gpt.Forward(Ids(kB * kT, 10 + i), Ids(kB * kT, 100 + i), kB, kT);
        gpt.Backward(0.5f);
      }
      EXPECT_NEAR(loss / 2, ref.loss, 1e-5 * ref.loss) << "tp=" << tp << " rank " << r;
      // Two all-reduces per block each way, per micro-batch.
      EXPECT_EQ(stats.calls, 2 * 4 * kConfig.layers);
      ExpectGradientsMatch(gpt, gpt.gradients(), ref.grads, 1e-4, "tp=" + std::to_string(tp));
    });
  }
}

// The same with every parameter perturbed away from its init, biases and layer-norm gains
// included (at init the biases are 0, so a bias added by every tensor rank instead of once
// would go unnoticed above).
TEST(ShardedGpt, TensorShardsWithNonZeroBiasesComputeTheWholeModel) {
  model::Gpt whole(kConfig);
  whole.InitParameters(5);
  std::mt19937_64 rng(9);
  std::normal_distribution<float> noise(0.0f, 0.05f);
  for (float& x : whole.parameters())
    x += noise(rng);
  const std::vector<int32_t> tokens = Ids(kB * kT, 10), targets = Ids(kB * kT, 100);
  whole.ZeroGradients();
  const float want_loss = whole.Forward(tokens, targets, kB, kT);
  whole.Backward();
  const std::vector<float> want_grads(whole.gradients().begin(), whole.gradients().end());
  const std::vector<model::ParameterTensor> tensors = model::GptParameterTensors(kConfig);
  OnGroup(2, [&](int r, std::shared_ptr<comm::ProcessGroup> group) {
    model::Gpt gpt(kConfig, {.tensor_rank = r, .tensor_size = 2}, MakeTensorSum(group, nullptr));
    for (const model::ShardTensor& t : gpt.tensors()) {
      const model::ParameterTensor& w = tensors[t.whole_index];
      model::CopyFromWhole(t, whole.parameters().subspan(w.offset, w.size),
                           gpt.parameters().subspan(t.local.offset, t.local.size));
    }
    gpt.ZeroGradients();
    EXPECT_NEAR(gpt.Forward(tokens, targets, kB, kT), want_loss, 1e-5 * want_loss) << "rank " << r;
    gpt.Backward();
    ExpectGradientsMatch(gpt, gpt.gradients(), want_grads, 1e-4, "rank " + std::to_string(r));
  });
}

// The sum every tensor-parallel rank gets, and what it costs, counted per call.
TEST(TensorSum, SumsOverTheGroupAndCountsEveryCall) {
  OnGroup(3, [&](int r, std::shared_ptr<comm::ProcessGroup> group) {
    TensorCommStats stats;
    const model::TensorSumFn sum = MakeTensorSum(group, &stats);
    std::vector<float> a = {1.0f * (r + 1), 10.0f * (r + 1), -1.0f};
    std::vector<float> b(5, static_cast<float>(r));
    sum(a.data(), static_cast<int64_t>(a.size()));
    sum(b.data(), static_cast<int64_t>(b.size()));
    EXPECT_EQ(a, (std::vector<float>{6.0f, 60.0f, -3.0f})) << "rank " << r;
    EXPECT_EQ(b, std::vector<float>(5, 3.0f)) << "rank " << r;
    EXPECT_EQ(stats.calls, 2) << "rank " << r;
    EXPECT_DOUBLE_EQ(stats.bytes, 8.0 * sizeof(float)) << "rank " << r;
    EXPECT_GE(stats.seconds, 0.0) << "rank " << r;
    // Without stats the sum is the same.
    const model::TensorSumFn uncounted = MakeTensorSum(group, nullptr);
    std::vector<float> c = {static_cast<float>(r)};
    uncounted(c.data(), 1);
    EXPECT_EQ(c[0], 3.0f) << "rank " << r;
    EXPECT_EQ(stats.calls, 2) << "rank " << r;
  });
}

TEST(ShardedGpt, PipelineStagesChainedByHandComputeTheWholeModel) {
  const Reference ref = WholeModel(1);
  // Three stages: [0,1) with the embedding, [1,3), [3,4) with the head.
  const int bounds[] = {0, 1, 3, 4};
  std::vector<std::unique_ptr<model::Gpt>> stages;
  for (int s = 0; s < 3; s++) {
    stages.push_back(
        std::make_unique<model::Gpt>(kConfig, model::GptShard{.first_layer = bounds[s],
                                                              .end_layer = bounds[s + 1],
                                                              .embedding = s == 0,
                                                              .head = s == 2}));
    stages.back()->InitParameters(5);
    stages.back()->ZeroGradients();
  }
  const std::vector<int32_t> tokens = Ids(kB * kT, 10), targets = Ids(kB * kT, 100);
  stages[0]->Forward(tokens, {}, kB, kT);
  stages[1]->Forward({}, {}, kB, kT, 0, stages[0]->output());
  const float loss = stages[2]->Forward({}, targets, kB, kT, 0, stages[1]->output());
  EXPECT_NEAR(loss, ref.loss, 1e-6 * ref.loss);
  stages[2]->Backward(1.0f);
  stages[1]->Backward(1.0f, {}, 0, stages[2]->input_gradient());
  stages[0]->Backward(1.0f, {}, 0, stages[1]->input_gradient());
  // wte is tied: the two ends' gradients add up to the whole model's.
  std::vector<float> wte0(stages[0]->gradients().begin(),
                          stages[0]->gradients().begin() + kConfig.vocab * kConfig.d_model);
  const std::span<float> wte2 = stages[2]->gradients().subspan(0, wte0.size());
  for (size_t i = 0; i < wte0.size(); i++) {
    wte0[i] += wte2[i];
    wte2[i] = wte0[i];
  }
  std::copy(wte0.begin(), wte0.end(), stages[0]->gradients().begin());
  for (int s = 0; s < 3; s++)
    ExpectGradientsMatch(*stages[s], stages[s]->gradients(), ref.grads, 1e-5,
                         "stage " + std::to_string(s));
}

// Without a pipeline group the one stage is both first and last: it must hold both ends.
TEST(PipelineRunner, RefusesAShardWhoseEndsDoNotMatchItsStage) {
  struct Case {
    bool embedding, head, ok;
  };
  for (const Case& c : std::vector<Case>{
           {true, true, true}, {true, false, false}, {false, true, false}, {false, false, false}}) {
    model::Gpt gpt(kConfig, {.embedding = c.embedding, .head = c.head});
    if (c.ok) {
      EXPECT_NO_THROW(PipelineRunner(&gpt, nullptr, Schedule::k1F1B));
    } else {
      EXPECT_THROW(PipelineRunner(&gpt, nullptr, Schedule::k1F1B), std::invalid_argument)
          << "embedding " << c.embedding << " head " << c.head;
    }
  }
}

// The first stage of two, with the second played by a group that completes every receive at
// once (zero gradients) and checks the contract of a send: its buffer stays untouched until
// the send's wait().
class CheckedNeighbourGroup : public comm::ProcessGroup {
 public:
  struct SendWork : comm::Work {
    const float* data = nullptr;
    std::vector<float> sent;  // the buffer when the send was issued
    int waits = 0;
    bool changed = false;  // the buffer differed from `sent` at wait()
    void wait() override {
      if (waits++ == 0)
        changed = !std::equal(sent.begin(), sent.end(), data);
    }
    bool completed() override { return waits > 0; }
  };
  struct DoneWork : comm::Work {
    void wait() override {}
    bool completed() override { return true; }
  };

  std::vector<std::shared_ptr<SendWork>> sends;

  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend() const override { return "checked"; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  std::shared_ptr<comm::Work> send(const void* data, size_t count, comm::DataType, int dst,
                                   uint32_t) override {
    EXPECT_EQ(dst, 1);
    auto w = std::make_shared<SendWork>();
    w->data = static_cast<const float*>(data);
    w->sent.assign(w->data, w->data + count);
    sends.push_back(w);
    return w;
  }
  std::shared_ptr<comm::Work> recv(void* data, size_t count, comm::DataType, int src,
                                   uint32_t) override {
    EXPECT_EQ(src, 1);
    std::fill_n(static_cast<float*>(data), count, 0.0f);
    return std::make_shared<DoneWork>();
  }
  std::shared_ptr<comm::Work> barrier() override { return std::make_shared<DoneWork>(); }
  std::shared_ptr<comm::Work> all_reduce(void*, size_t, comm::DataType, comm::ReduceOp) override {
    throw comm::CommError("CheckedNeighbourGroup: all_reduce");
  }
  std::shared_ptr<comm::Work> reduce_scatter(const void*, void*, size_t, comm::DataType,
                                             comm::ReduceOp) override {
    throw comm::CommError("CheckedNeighbourGroup: reduce_scatter");
  }
  std::shared_ptr<comm::Work> all_gather(const void*, void*, size_t, comm::DataType) override {
    throw comm::CommError("CheckedNeighbourGroup: all_gather");
  }
  std::shared_ptr<comm::Work> broadcast(void*, size_t, comm::DataType, int) override {
    throw comm::CommError("CheckedNeighbourGroup: broadcast");
  }
  std::shared_ptr<comm::ProcessGroup> split(int, int, const std::string&) override {
    throw comm::CommError("CheckedNeighbourGroup: split");
  }

 private:
  std::string name_ = "checked";
  std::vector<int> world_ranks_ = {0, 1};
};

// Every send a step or a validation issues is waited for before it returns, and none of their
// buffers is overwritten before its wait (the next micro-batch reuses the activation slot).
TEST(PipelineRunner, WaitsForEverySendBeforeReusingItsBufferOrReturning) {
  const auto load = [](int i, MicroBatch* mb) {
    mb->tokens = Ids(kB * kT, 10 + i);
    mb->targets = Ids(kB * kT, 100 + i);
    mb->B = kB;
    mb->T = kT;
  };
  for (Schedule kind : {Schedule::kGPipe, Schedule::k1F1B}) {
    auto group = std::make_shared<CheckedNeighbourGroup>();
    model::Gpt gpt(kConfig, {.first_layer = 0, .end_layer = 2, .embedding = true, .head = false});
    gpt.InitParameters(5);
    gpt.ZeroGradients();
    PipelineRunner runner(&gpt, group, kind);
    ASSERT_TRUE(runner.first());
    ASSERT_FALSE(runner.last());
    for (const char* phase : {"Train", "Evaluate"}) {
      group->sends.clear();
      if (std::string(phase) == "Train") {
        runner.Train(4, load, 0.25f);
      } else {
        runner.Evaluate(3, load);
      }
      EXPECT_EQ(group->sends.size(), std::string(phase) == "Train" ? 4u : 3u);
      for (size_t i = 0; i < group->sends.size(); i++) {
        EXPECT_GE(group->sends[i]->waits, 1) << ToString(kind) << " " << phase << " send " << i;
        EXPECT_FALSE(group->sends[i]->changed)
            << ToString(kind) << " " << phase << " send " << i << ": buffer reused before wait";
      }
    }
  }
}

TEST(PipelineRunner, BothSchedulesOnRealGroupsComputeTheWholeModel) {
  constexpr int kMicro = 4;
  const Reference ref = WholeModel(kMicro);
  for (int p : {2, 4}) {
    const std::vector<StageLayers> split = PartitionStages(GptLayerCosts(kConfig, kT), p);
    for (Schedule kind : {Schedule::kGPipe, Schedule::k1F1B}) {
      OnGroup(p, [&](int s, std::shared_ptr<comm::ProcessGroup> group) {
        model::Gpt gpt(kConfig, {.first_layer = split[s].first,
                                 .end_layer = split[s].end,
                                 .embedding = s == 0,
                                 .head = s == p - 1});
        gpt.InitParameters(5);
        gpt.ZeroGradients();
        PipelineRunner runner(&gpt, group, kind);
        int ready_calls = 0;
        // What each report declared final, as it was then: it must be the step's final value.
        std::vector<std::pair<int64_t, std::vector<float>>> reported;
        const PipelineStats stats = runner.Train(
            kMicro,
            [](int i, MicroBatch* mb) {
              mb->tokens = Ids(kB * kT, 10 + i);
              mb->targets = Ids(kB * kT, 100 + i);
              mb->B = kB;
              mb->T = kT;
            },
            1.0f / kMicro,
            [&](int64_t first) {
              ready_calls++;
              reported.emplace_back(first, std::vector<float>(gpt.gradients().begin() + first,
                                                              gpt.gradients().end()));
            });
        const std::string what =
            std::string(ToString(kind)) + " p=" + std::to_string(p) + " stage " + std::to_string(s);
        for (const auto& [first, values] : reported) {
          EXPECT_TRUE(std::equal(values.begin(), values.end(), gpt.gradients().begin() + first))
              << what << ": gradients from " << first << " changed after being reported final";
        }
        // One micro-batch's activations (B x T x dModel floats) each way per neighbour.
        const double transfer = static_cast<double>(kB * kT * kConfig.d_model * sizeof(float));
        EXPECT_DOUBLE_EQ(stats.comm_bytes, kMicro * transfer * ((s > 0) + (s < p - 1))) << what;
        EXPECT_GE(stats.idle_seconds, 0.0) << what;
        EXPECT_LE(stats.idle_seconds, stats.seconds) << what;
        EXPECT_EQ(stats.peak_in_flight, kind == Schedule::kGPipe ? kMicro : std::min(p - s, kMicro))
            << what;
        EXPECT_EQ(ready_calls, split[s].end - split[s].first + 1) << what;  // blocks, then 0
        if (s == p - 1) {
          EXPECT_NEAR(stats.loss_sum / kMicro, ref.loss, 1e-5 * ref.loss) << what;
        } else {
          EXPECT_EQ(stats.loss_sum, 0.0);
        }
        // The tied wte: its gradient is the two ends' sum. Every stage joins the sum over the
        // pipeline group, the middle ones (which hold no wte) with zeros.
        std::vector<float> grads(gpt.gradients().begin(), gpt.gradients().end());
        const bool holds_wte = s == 0 || s == p - 1;
        std::vector<float> wte(static_cast<size_t>(kConfig.vocab * kConfig.d_model), 0.0f);
        if (holds_wte)
          std::copy_n(grads.begin(), wte.size(), wte.begin());
        group->all_reduce(std::span<float>(wte), comm::ReduceOp::kSum)->wait();
        if (holds_wte)
          std::copy(wte.begin(), wte.end(), grads.begin());
        ExpectGradientsMatch(gpt, grads, ref.grads, 1e-5, what);
        // Validation through the pipeline: the same as the whole model's forward.
        const double sum = runner.Evaluate(2, [](int i, MicroBatch* mb) {
          mb->tokens = Ids(kB * kT, 10 + i);
          mb->targets = Ids(kB * kT, 100 + i);
          mb->B = kB;
          mb->T = kT;
        });
        if (s == p - 1) {
          model::Gpt whole(kConfig);
          whole.InitParameters(5);
          double want = 0;
          for (int i = 0; i < 2; i++)
            want += whole.Forward(Ids(kB * kT, 10 + i), Ids(kB * kT, 100 + i), kB, kT) * kB;
          EXPECT_NEAR(sum, want, 1e-5 * want) << what;
        }
      });
    }
  }
}

}  // namespace
}  // namespace tessera::parallel
