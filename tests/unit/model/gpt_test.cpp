// The whole GPT: configuration helpers, parameter layout, initialisation, a whole-model
// gradient check in double precision, the float model against the double one, learning on
// a fixed batch, and bit-identical repeated runs.
#include "worker/model/gpt.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "worker/model/cpu/gpt_cpu.h"

namespace tessera::model {
namespace {

std::vector<int32_t> RandomIds(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids)
    id = static_cast<int32_t>(rng() % vocab);
  return ids;
}

TEST(ModelConfigTest, Presets) {
  GptConfig c;
  ASSERT_TRUE(GptPreset("gpt2-124m", &c));
  EXPECT_EQ(c.layers, 12);
  EXPECT_EQ(c.d_model, 768);
  EXPECT_EQ(c.heads, 12);
  EXPECT_EQ(c.seq_len, 1024);
  EXPECT_EQ(c.vocab, 50257);
  EXPECT_EQ(GptParameterCount(c), 124439808);  // GPT-2 small with a tied head
  EXPECT_FALSE(GptPreset("gpt2-125m", &c));
}

TEST(ModelConfigTest, Validation) {
  struct Case {
    GptConfig config;
    std::string error;
  };
  const Case cases[] = {
      {{2, 64, 4, 64, 256}, ""},
      {{0, 64, 4, 64, 256}, "model.layers: must be positive, got 0"},
      {{2, 0, 4, 64, 256}, "model.dModel: must be positive, got 0"},
      {{2, 64, 5, 64, 256}, "model.heads: 5 does not divide dModel 64"},
      {{2, 64, 0, 64, 256}, "model.heads: must be positive, got 0"},
      {{2, 64, 4, -1, 256}, "model.seqLen: must be positive, got -1"},
      {{2, 64, 4, 64, 0}, "model.vocab: must be positive, got 0"},
  };
  for (const Case& c : cases)
    EXPECT_EQ(ValidateGptConfig(c.config), c.error);
  EXPECT_THROW(Gpt(GptConfig{2, 64, 5, 64, 256}), std::invalid_argument);
}

TEST(ModelConfigTest, TensorsTileTheBufferInOrder) {
  const GptConfig c{3, 16, 4, 10, 50};
  const std::vector<ParameterTensor> tensors = GptParameterTensors(c);
  ASSERT_EQ(tensors.size(), 4u + 12u * 3u);
  int64_t offset = 0;
  int last_layer = -1;
  for (const ParameterTensor& t : tensors) {
    EXPECT_EQ(t.offset, offset) << t.name;
    offset += t.size;
    // Blocks appear in order, each contiguous.
    if (t.layer >= 0) {
      EXPECT_GE(t.layer, last_layer) << t.name;
      last_layer = t.layer;
    }
    const bool matrix = t.name.ends_with("weight") && t.name.find("ln") == std::string::npos;
    EXPECT_EQ(t.decays, matrix || t.name == "wte" || t.name == "wpe") << t.name;
  }
  EXPECT_EQ(offset, GptParameterCount(c));
  EXPECT_EQ(tensors.front().name, "wte");
  EXPECT_EQ(tensors[4].name, "h0.attn.qkv.weight");
  EXPECT_EQ(tensors.back().name, "lnf.bias");
}

TEST(ModelGptTest, InitialisationIsSeededAndGpt2Style) {
  const GptConfig c{2, 32, 4, 16, 64};
  Gpt a(c), b(c), other(c);
  a.InitParameters(7);
  b.InitParameters(7);
  other.InitParameters(8);
  ASSERT_EQ(0,
            std::memcmp(a.parameters().data(), b.parameters().data(), a.parameters().size_bytes()));
  EXPECT_NE(0, std::memcmp(a.parameters().data(), other.parameters().data(),
                           a.parameters().size_bytes()));
  for (const ParameterTensor& t : GptParameterTensors(c)) {
    std::span<const float> v = a.parameters().subspan(t.offset, t.size);
    double mean = 0, sq = 0;
    for (float x : v)
      mean += x;
    mean /= v.size();
    for (float x : v)
      sq += (x - mean) * (x - mean);
    const double stddev = std::sqrt(sq / v.size());
    if (t.name.ends_with("ln1.weight") || t.name.ends_with("ln2.weight") ||
        t.name == "lnf.weight") {
      EXPECT_EQ(mean, 1.0) << t.name;
      EXPECT_EQ(stddev, 0.0) << t.name;
    } else if (!t.decays) {
      EXPECT_EQ(mean, 0.0) << t.name;
      EXPECT_EQ(stddev, 0.0) << t.name;
    } else {
      const double want = t.name.ends_with("proj.weight") ? 0.02 / std::sqrt(4.0) : 0.02;
      EXPECT_NEAR(stddev, want, 0.15 * want) << t.name;
      EXPECT_NEAR(mean, 0.0, 0.2 * want) << t.name;
    }
  }
}

TEST(ModelGptTest, LossAtInitIsLogVocab) {
  const GptConfig c{2, 64, 4, 32, 256};
  Gpt gpt(c);
  gpt.InitParameters(1);
  const int B = 4, T = 32;
  const float loss = gpt.Forward(RandomIds(B * T, c.vocab, 1), RandomIds(B * T, c.vocab, 2), B, T);
  EXPECT_NEAR(loss, std::log(256.0), 0.05);
}

// Gradient of the mean loss with respect to every parameter, in double precision, against
// central differences. Parameters are randomised well beyond the init scale so that every
// path (attention, layer norms, GELU) carries a gradient of order one.
TEST(ModelGptTest, WholeModelGradientCheckDouble) {
  const GptConfig c{2, 8, 2, 6, 11};
  const int B = 2, T = 5;
  const int64_t P = GptParameterCount(c);
  std::vector<double> params(P), grads(P, 0.0);
  std::mt19937_64 rng(3);
  std::normal_distribution<double> noise(0.0, 0.4);
  for (const ParameterTensor& t : GptParameterTensors(c)) {
    const bool gain =
        t.name.ends_with("ln1.weight") || t.name.ends_with("ln2.weight") || t.name == "lnf.weight";
    for (int64_t i = 0; i < t.size; i++)
      params[t.offset + i] = (gain ? 1.0 : 0.0) + noise(rng);
  }
  const std::vector<int32_t> tokens = RandomIds(B * T, c.vocab, 4);
  const std::vector<int32_t> targets = RandomIds(B * T, c.vocab, 5);
  cpu::GptActivations<double> acts;
  const cpu::GptParams<double> p = cpu::BindParams(c, params.data());
  const cpu::GptParams<double> g = cpu::BindParams(c, grads.data());
  auto loss = [&] { return cpu::GptForward(c, p, acts, tokens.data(), targets.data(), B, T); };
  loss();
  cpu::GptBackward(c, p, g, acts, tokens.data(), targets.data(), B, T, 1.0);

  const double h = 1e-5;
  double worst = 0;
  int nonzero = 0;
  for (const ParameterTensor& t : GptParameterTensors(c)) {
    for (int64_t i = t.offset; i < t.offset + t.size; i++) {
      const double saved = params[i];
      params[i] = saved + h;
      const double up = loss();
      params[i] = saved - h;
      const double down = loss();
      params[i] = saved;
      const double numeric = (up - down) / (2 * h);
      const double err = std::abs(numeric - grads[i]);
      ASSERT_LE(err, 1e-9 + 1e-5 * std::abs(numeric))
          << t.name << "[" << i - t.offset << "]: analytic " << grads[i] << " numeric " << numeric;
      worst = std::max(worst, err / (1e-9 + std::abs(numeric)));
      if (std::abs(numeric) > 1e-6)
        nonzero++;
    }
  }
  // wpe rows beyond T and wte rows of unused ids have zero gradient; most others do not.
  EXPECT_GT(nonzero, P / 2);
  RecordProperty("worst_relative_error", std::to_string(worst));
}

// The trainer checks a configuration's memory with BytesFor before allocating anything; it must
// be what Allocate then holds, for every kind of shard.
TEST(ModelGptTest, ActivationBytesForIsWhatAllocateHolds) {
  const GptConfig c{4, 24, 6, 16, 37};
  const GptShard shards[] = {
      {},
      {.first_layer = 0, .end_layer = 2, .embedding = true, .head = false},
      {.first_layer = 2, .end_layer = 4, .embedding = false, .head = true},
      {.first_layer = 1,
       .end_layer = 3,
       .embedding = false,
       .head = false,
       .tensor_rank = 1,
       .tensor_size = 3},
  };
  for (const GptShard& shard : shards) {
    for (const auto& [B, T] : {std::pair{1, 1}, {3, 16}, {2, 7}}) {
      cpu::GptActivations<float> f;
      f.Allocate(c, B, T, shard);
      EXPECT_EQ(f.bytes(), cpu::GptActivations<float>::BytesFor(c, B, T, shard))
          << "B " << B << " T " << T << " layers [" << shard.first_layer << ", " << shard.end(c)
          << ") head " << shard.head << " tensor " << shard.tensor_size;
      size_t att = 0;
      for (const auto& block : f.blocks)
        att += block.att.size() * sizeof(float);
      EXPECT_EQ(static_cast<int64_t>(att),
                cpu::GptActivations<float>::AttentionBytesFor(c, B, T, shard));
      cpu::GptActivations<double> d;
      d.Allocate(c, B, T, shard);
      EXPECT_EQ(d.bytes(), cpu::GptActivations<double>::BytesFor(c, B, T, shard));
    }
  }
}

// The float model computes what the double one does, to float accuracy.
TEST(ModelGptTest, FloatModelMatchesDouble) {
  const GptConfig c{2, 32, 4, 16, 64};
  const int B = 3, T = 16;
  Gpt gpt(c);
  gpt.InitParameters(11);
  // Larger weights than at init, so that the comparison is not dominated by tiny values.
  std::mt19937_64 rng(5);
  std::normal_distribution<float> noise(0.0f, 0.1f);
  for (float& x : gpt.parameters())
    x += noise(rng);
  const std::vector<int32_t> tokens = RandomIds(B * T, c.vocab, 6);
  const std::vector<int32_t> targets = RandomIds(B * T, c.vocab, 7);
  gpt.ZeroGradients();
  const float loss = gpt.Forward(tokens, targets, B, T);
  gpt.Backward();

  std::vector<double> params(gpt.parameters().begin(), gpt.parameters().end());
  std::vector<double> grads(params.size(), 0.0);
  cpu::GptActivations<double> acts;
  const cpu::GptParams<double> p = cpu::BindParams(c, params.data());
  const double want = cpu::GptForward(c, p, acts, tokens.data(), targets.data(), B, T);
  cpu::GptBackward(c, p, cpu::BindParams(c, grads.data()), acts, tokens.data(), targets.data(), B,
                   T, 1.0);
  EXPECT_NEAR(loss, want, 1e-5 * want);
  double max_grad = 0;
  for (double v : grads)
    max_grad = std::max(max_grad, std::abs(v));
  for (size_t i = 0; i < grads.size(); i++) {
    ASSERT_NEAR(gpt.gradients()[i], grads[i], 1e-4 * max_grad) << i;
  }
}

// Plain SGD on one fixed batch: the model memorises it.
std::vector<float> TrainSgd(const GptConfig& c, int steps, std::vector<float>* losses) {
  const int B = 4, T = 16;
  Gpt gpt(c);
  gpt.InitParameters(1337);
  const std::vector<int32_t> tokens = RandomIds(B * T, c.vocab, 21);
  const std::vector<int32_t> targets = RandomIds(B * T, c.vocab, 22);
  for (int s = 0; s < steps; s++) {
    gpt.ZeroGradients();
    const float loss = gpt.Forward(tokens, targets, B, T);
    if (losses != nullptr)
      losses->push_back(loss);
    gpt.Backward();
    std::span<float> p = gpt.parameters();
    std::span<const float> g = gpt.gradients();
    for (size_t i = 0; i < p.size(); i++)
      p[i] -= 0.5f * g[i];
  }
  return std::vector<float>(gpt.parameters().begin(), gpt.parameters().end());
}

TEST(ModelGptTest, SgdOnAFixedBatchDrivesTheLossDown) {
  const GptConfig c{2, 32, 4, 16, 64};
  std::vector<float> losses;
  TrainSgd(c, 40, &losses);
  ASSERT_EQ(losses.size(), 40u);
  EXPECT_NEAR(losses.front(), std::log(64.0), 0.1);
  EXPECT_LT(losses.back(), losses.front() - 1.0) << "first " << losses.front();
}

TEST(ModelGptTest, RepeatedRunsAreBitIdentical) {
  const GptConfig c{2, 32, 4, 16, 64};
  for (int threads : {1, 2}) {
    SetKernelThreads(threads);
    const std::vector<float> a = TrainSgd(c, 5, nullptr);
    const std::vector<float> b = TrainSgd(c, 5, nullptr);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
        << threads << " threads";
  }
}

TEST(ModelGptTest, GradientsAccumulateAcrossMicroBatches) {
  const GptConfig c{1, 16, 2, 8, 32};
  const int B = 2, T = 8;
  const std::vector<int32_t> tokens = RandomIds(B * T, c.vocab, 1);
  const std::vector<int32_t> targets = RandomIds(B * T, c.vocab, 2);
  Gpt gpt(c);
  gpt.InitParameters(3);
  gpt.ZeroGradients();
  gpt.Forward(tokens, targets, B, T);
  gpt.Backward(1.0f);
  const std::vector<float> once(gpt.gradients().begin(), gpt.gradients().end());
  gpt.ZeroGradients();
  for (int i = 0; i < 2; i++) {
    gpt.Forward(tokens, targets, B, T);
    gpt.Backward(0.5f);
  }
  for (size_t i = 0; i < once.size(); i++) {
    ASSERT_NEAR(gpt.gradients()[i], once[i], 1e-6f + 1e-5f * std::abs(once[i])) << i;
  }
}

// GradientReadyOffsets lists exactly what Backward reports, in its order, for the whole model
// and for a pipeline stage's shard.
TEST(ModelGptTest, GradientReadyOffsetsAreWhatBackwardReports) {
  const GptConfig c{3, 16, 2, 8, 32};
  const int B = 1, T = 8;
  const std::vector<int32_t> tokens = RandomIds(B * T, c.vocab, 1);
  const std::vector<int32_t> targets = RandomIds(B * T, c.vocab, 2);
  Gpt whole(c);
  whole.InitParameters(3);
  std::vector<int64_t> reported;
  whole.Forward(tokens, targets, B, T);
  whole.Backward(1.0f, [&](int64_t first) { reported.push_back(first); });
  const std::vector<int64_t> listed = GradientReadyOffsets(whole.tensors());
  EXPECT_EQ(reported, listed);
  ASSERT_EQ(listed.size(), 4u);  // 3 blocks, then 0
  EXPECT_EQ(listed.back(), 0);
  EXPECT_EQ(GradientReadyOffsets(GptShardTensors(c, {})), listed);

  // The last stage of two: blocks 2..3 of 3 and the head.
  Gpt last(c, GptShard{.first_layer = 2, .embedding = false});
  last.InitParameters(3);
  std::vector<float> input(static_cast<size_t>(B) * T * c.d_model, 0.1f);
  last.Forward({}, targets, B, T, 0, input);
  reported.clear();
  last.Backward(1.0f, [&](int64_t first) { reported.push_back(first); });
  EXPECT_EQ(reported, GradientReadyOffsets(last.tensors()));
}

TEST(ModelGptTest, ForwardWithoutTargetsGivesTheSameLogits) {
  const GptConfig c{1, 16, 2, 8, 32};
  const int B = 2, T = 7;  // T below seq_len
  const std::vector<int32_t> tokens = RandomIds(B * T, c.vocab, 1);
  const std::vector<int32_t> targets = RandomIds(B * T, c.vocab, 2);
  Gpt gpt(c);
  gpt.InitParameters(3);
  EXPECT_GT(gpt.Forward(tokens, targets, B, T), 0.0f);
  const std::vector<float> with(gpt.logits().begin(), gpt.logits().end());
  EXPECT_EQ(gpt.Forward(tokens, {}, B, T), 0.0f);
  ASSERT_EQ(gpt.logits().size(), static_cast<size_t>(B * T * c.vocab));
  EXPECT_EQ(0, std::memcmp(with.data(), gpt.logits().data(), with.size() * sizeof(float)));
  EXPECT_THROW(gpt.Backward(), std::logic_error);  // no targets
}

TEST(ModelGptTest, RefusesBadInput) {
  const GptConfig c{1, 16, 2, 8, 32};
  Gpt gpt(c);
  gpt.InitParameters(3);
  std::vector<int32_t> ids(2 * 9, 1);
  EXPECT_THROW(gpt.Forward(ids, ids, 2, 9), std::invalid_argument);  // T > seq_len
  ids.resize(2 * 8);
  EXPECT_THROW(gpt.Forward(ids, ids, 2, 7), std::invalid_argument);  // size != B*T
  ids[5] = 32;
  EXPECT_THROW(gpt.Forward(ids, {}, 2, 8), std::out_of_range);
  EXPECT_THROW(gpt.Backward(), std::logic_error);
}

// Every preset of docs/model.md, with its parameter count.
TEST(ModelConfigTest, EveryPresetHasTheDocumentedShapeAndParameterCount) {
  struct Case {
    const char* name;
    GptConfig config;
    int64_t parameters;
  };
  const Case cases[] = {
      {"gpt2-124m", {12, 768, 12, 1024, 50257}, 124439808},
      {"gpt2-350m", {24, 1024, 16, 1024, 50257}, 354823168},
      {"gpt2-774m", {36, 1280, 20, 1024, 50257}, 774030080},
      {"gpt2-1558m", {48, 1600, 25, 1024, 50257}, 1557611200},
  };
  for (const Case& c : cases) {
    GptConfig got;
    ASSERT_TRUE(GptPreset(c.name, &got)) << c.name;
    EXPECT_EQ(got.layers, c.config.layers) << c.name;
    EXPECT_EQ(got.d_model, c.config.d_model) << c.name;
    EXPECT_EQ(got.heads, c.config.heads) << c.name;
    EXPECT_EQ(got.seq_len, c.config.seq_len) << c.name;
    EXPECT_EQ(got.vocab, c.config.vocab) << c.name;
    EXPECT_EQ(GptParameterCount(got), c.parameters) << c.name;
    EXPECT_EQ(ValidateGptConfig(got), "") << c.name;
  }
}

TEST(ModelConfigTest, ShardValidationRefusesLayersAndTensorRanksOutOfRange) {
  const GptConfig c{4, 64, 4, 64, 256};
  struct Case {
    GptShard shard;
    std::string error;
  };
  const Case cases[] = {
      {{}, ""},
      {{.first_layer = 2, .end_layer = 2}, ""},  // a stage without blocks
      {{.first_layer = 0, .end_layer = 4, .tensor_rank = 3, .tensor_size = 4}, ""},
      {{.first_layer = -1}, "model shard: layers [-1, 4) are not within the model's 4"},
      {{.first_layer = 0, .end_layer = 5},
       "model shard: layers [0, 5) are not within the model's 4"},
      {{.first_layer = 3, .end_layer = 2},
       "model shard: layers [3, 2) are not within the model's 4"},
      {{.tensor_size = 0}, "parallelism.tensor: 0 does not divide model.heads 4"},
      {{.tensor_size = 3}, "parallelism.tensor: 3 does not divide model.heads 4"},
      {{.tensor_rank = 2, .tensor_size = 2}, "model shard: tensor rank 2 not in [0, 2)"},
      {{.tensor_rank = -1, .tensor_size = 2}, "model shard: tensor rank -1 not in [0, 2)"},
  };
  for (const Case& k : cases) {
    EXPECT_EQ(ValidateGptShard(c, k.shard), k.error)
        << "layers [" << k.shard.first_layer << ", " << k.shard.end_layer << ") tensor "
        << k.shard.tensor_rank << "/" << k.shard.tensor_size;
  }
}

// The generator is part of the contract: the same seed gives the same initial model in every
// version (and GptCuda copies these values bit for bit), so a run can be reproduced.
TEST(ModelGptTest, InitialValuesOfASeedArePinned) {
  const GptConfig c{2, 32, 4, 16, 64};
  Gpt gpt(c);
  gpt.InitParameters(7);
  const std::vector<ParameterTensor> tensors = GptParameterTensors(c);
  struct Pin {
    int tensor;
    int64_t index;
    float value;
  };
  const Pin pins[] = {
      {0, 0, -0.00498778606f},      // wte
      {0, 1, 0.0187297724f},        // wte, the second value of the first Box-Muller pair
      {0, 2047, 0.00541336602f},    // wte, last
      {1, 3, -0.00377751142f},      // wpe
      {6, 5, 0.0047453451f},        // h0.attn.proj.weight
      {22, 1001, 0.0118903797f},    // h1.mlp.fc.weight
      {24, 4095, 0.000321142608f},  // h1.mlp.proj.weight, last
  };
  for (const Pin& p : pins) {
    EXPECT_NEAR(gpt.parameters()[tensors[p.tensor].offset + p.index], p.value,
                1e-6f * std::abs(p.value))
        << tensors[p.tensor].name << "[" << p.index << "]";
  }
}

// Forward and Backward refuse what a caller can get wrong (shapes, ids, slots, a second
// Backward of one Forward) with the exception the header names.
TEST(ModelGptTest, RefusesBadShapesIdsAndCallOrder) {
  const GptConfig c{1, 16, 2, 8, 32};
  Gpt gpt(c);
  gpt.InitParameters(3);
  const std::vector<int32_t> ids(2 * 8, 1);
  EXPECT_THROW(gpt.Forward({}, {}, 0, 8), std::invalid_argument);  // B = 0
  EXPECT_THROW(gpt.Forward(ids, std::vector<int32_t>(15, 1), 2, 8), std::invalid_argument);
  std::vector<int32_t> bad = ids;
  bad[3] = -1;
  EXPECT_THROW(gpt.Forward(bad, ids, 2, 8), std::out_of_range);  // negative token
  EXPECT_THROW(gpt.Forward(ids, bad, 2, 8), std::out_of_range);  // negative target
  bad[3] = 32;
  EXPECT_THROW(gpt.Forward(ids, bad, 2, 8), std::out_of_range);  // target == vocab
  EXPECT_THROW(gpt.Forward(ids, ids, 2, 8, -1), std::invalid_argument);

  gpt.Forward(ids, ids, 2, 8);
  EXPECT_THROW(gpt.logits(1), std::logic_error);  // a slot never used
  gpt.Backward();
  EXPECT_THROW(gpt.Backward(), std::logic_error);  // Backward already ran on that Forward

  // A middle stage: its input and output gradient must hold B*T*dModel values, no more.
  Gpt middle(c, GptShard{.embedding = false, .head = false});
  middle.InitParameters(3);
  const std::vector<float> input(2 * 8 * 16, 0.5f), too_long(2 * 8 * 16 + 1, 0.5f);
  EXPECT_THROW(middle.Forward({}, {}, 2, 8, 0, too_long), std::invalid_argument);
  middle.Forward({}, {}, 2, 8, 0, input);
  EXPECT_THROW(middle.Backward(1.0f, {}, 0, too_long), std::invalid_argument);
  middle.Backward(1.0f, {}, 0, input);
  EXPECT_EQ(middle.input_gradient().size(), input.size());
  EXPECT_EQ(middle.output().size(), input.size());
}

// Activation buffers are kept between calls and resized when B or T changes: a model that
// ran other shapes before computes what a fresh one does.
TEST(ModelGptTest, ChangingBatchShapeGivesWhatAFreshModelGives) {
  const GptConfig c{2, 16, 2, 8, 32};
  Gpt used(c);
  used.InitParameters(3);
  for (const auto& [B, T] : {std::pair{2, 8}, {2, 5}, {3, 5}, {3, 8}}) {
    const std::vector<int32_t> tokens = RandomIds(B * T, c.vocab, 10 + B * T);
    const std::vector<int32_t> targets = RandomIds(B * T, c.vocab, 20 + B * T);
    Gpt fresh(c);
    fresh.InitParameters(3);
    fresh.ZeroGradients();
    used.ZeroGradients();
    EXPECT_EQ(used.Forward(tokens, targets, B, T), fresh.Forward(tokens, targets, B, T))
        << "B " << B << " T " << T;
    used.Backward();
    fresh.Backward();
    EXPECT_EQ(0, std::memcmp(used.gradients().data(), fresh.gradients().data(),
                             used.gradients().size_bytes()))
        << "B " << B << " T " << T;
  }
}

// Every activation slot counts in activation_bytes (a pipeline stage keeps several).
TEST(ModelGptTest, ActivationBytesSumOverSlots) {
  const GptConfig c{2, 16, 2, 8, 32};
  Gpt gpt(c);
  gpt.InitParameters(3);
  const std::vector<int32_t> ids = RandomIds(2 * 8, c.vocab, 1);
  gpt.Forward(ids, ids, 2, 8, 0);
  const std::span<const int32_t> half(ids.data(), 8);
  gpt.Forward(half, half, 1, 8, 2);  // slot 1 is created too, empty
  EXPECT_EQ(gpt.activation_bytes(), cpu::GptActivations<float>::BytesFor(c, 2, 8) +
                                        cpu::GptActivations<float>::BytesFor(c, 1, 8));
}

TEST(ModelGptTest, KernelThreadsBelowOneMeanOne) {
  const int saved = omp_get_max_threads();
  SetKernelThreads(0);
  EXPECT_EQ(omp_get_max_threads(), 1);
  SetKernelThreads(saved);
}

// Megatron slicing of one block for rank 1 of 2 (C = 8, so Ct = 4): q, k and v by head rows,
// the first MLP matrix by rows, both output projections by input columns; everything else
// replicated (the trainer counts a replicated gradient once in the global norm).
TEST(ModelConfigTest, TensorShardSlicesEachBlockMegatronStyle) {
  const GptConfig c{1, 8, 2, 4, 10};
  using Rows = std::vector<std::pair<int64_t, int64_t>>;
  struct Want {
    std::string name;
    int64_t whole_rows, whole_cols;
    Rows rows;
    int64_t col_begin, col_end;
    bool replicated;
  };
  const Want want[] = {
      {"wte", 10, 8, {{0, 10}}, 0, 8, true},
      {"wpe", 4, 8, {{0, 4}}, 0, 8, true},
      {"h0.ln1.weight", 8, 1, {{0, 8}}, 0, 1, true},
      {"h0.ln1.bias", 8, 1, {{0, 8}}, 0, 1, true},
      {"h0.attn.qkv.weight", 24, 8, {{4, 8}, {12, 16}, {20, 24}}, 0, 8, false},
      {"h0.attn.qkv.bias", 24, 1, {{4, 8}, {12, 16}, {20, 24}}, 0, 1, false},
      {"h0.attn.proj.weight", 8, 8, {{0, 8}}, 4, 8, false},
      {"h0.attn.proj.bias", 8, 1, {{0, 8}}, 0, 1, true},
      {"h0.ln2.weight", 8, 1, {{0, 8}}, 0, 1, true},
      {"h0.ln2.bias", 8, 1, {{0, 8}}, 0, 1, true},
      {"h0.mlp.fc.weight", 32, 8, {{16, 32}}, 0, 8, false},
      {"h0.mlp.fc.bias", 32, 1, {{16, 32}}, 0, 1, false},
      {"h0.mlp.proj.weight", 8, 32, {{0, 8}}, 16, 32, false},
      {"h0.mlp.proj.bias", 8, 1, {{0, 8}}, 0, 1, true},
      {"lnf.weight", 8, 1, {{0, 8}}, 0, 1, true},
      {"lnf.bias", 8, 1, {{0, 8}}, 0, 1, true},
  };
  const std::vector<ShardTensor> got = GptShardTensors(c, {.tensor_rank = 1, .tensor_size = 2});
  ASSERT_EQ(got.size(), std::size(want));
  int64_t offset = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const ShardTensor& t = got[i];
    const Want& w = want[i];
    EXPECT_EQ(t.local.name, w.name);
    EXPECT_EQ(t.whole_index, static_cast<int>(i)) << w.name;
    EXPECT_EQ(t.whole_rows, w.whole_rows) << w.name;
    EXPECT_EQ(t.whole_cols, w.whole_cols) << w.name;
    EXPECT_EQ(t.row_ranges, w.rows) << w.name;
    EXPECT_EQ(t.col_begin, w.col_begin) << w.name;
    EXPECT_EQ(t.col_end, w.col_end) << w.name;
    EXPECT_EQ(t.replicated, w.replicated) << w.name;
    int64_t rows = 0;
    for (const auto& [b, e] : w.rows)
      rows += e - b;
    EXPECT_EQ(t.local.offset, offset) << w.name;
    EXPECT_EQ(t.local.size, rows * (w.col_end - w.col_begin)) << w.name;
    offset += t.local.size;
  }
}

// One position: the loss is that position's cross-entropy, logsumexp(logits) - logit[target].
TEST(ModelGptTest, LossOfASinglePositionIsItsCrossEntropy) {
  const GptConfig c{1, 16, 2, 8, 32};
  Gpt gpt(c);
  gpt.InitParameters(3);
  const std::vector<int32_t> token = {5}, target = {31};
  const float loss = gpt.Forward(token, target, 1, 1);
  double sum = 0;
  for (float l : gpt.logits())
    sum += std::exp(static_cast<double>(l));
  EXPECT_NEAR(loss, std::log(sum) - gpt.logits()[31], 1e-5);
  EXPECT_GT(loss, 0.0f);
}

}  // namespace
}  // namespace tessera::model
