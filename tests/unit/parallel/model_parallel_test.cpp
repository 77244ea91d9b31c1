// Model parallelism's pieces: the stage partition and the schedules (pure), the sharded
// model against the whole one (tensor-parallel shards on real Gloo groups run as threads of
// this process; pipeline stages chained by hand), and the pipeline runner over a real Gloo
// pipeline group with both schedules.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <set>
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
        const PipelineStats stats = runner.Train(
            kMicro,
            [](int i, MicroBatch* mb) {
              mb->tokens = Ids(kB * kT, 10 + i);
              mb->targets = Ids(kB * kT, 100 + i);
              mb->B = kB;
              mb->T = kT;
            },
            1.0f / kMicro, [&](int64_t) { ready_calls++; });
        const std::string what =
            std::string(ToString(kind)) + " p=" + std::to_string(p) + " stage " + std::to_string(s);
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
