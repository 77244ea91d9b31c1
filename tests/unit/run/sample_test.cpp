// `tessera run --sample` (cli/run/sample.h): text from the newest checkpoint of a small GPT,
// against the model itself as the reference, and the checkpoints it refuses.
#include "cli/run/sample.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "worker/model/gpt.h"
#include "worker/train/checkpoint.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;

// A byte-level model of 1 block with an 8-token window.
model::GptConfig SmallModel() {
  model::GptConfig m;
  m.layers = 1;
  m.d_model = 16;
  m.heads = 2;
  m.seq_len = 8;
  m.vocab = 256;
  return m;
}

// A checkpoint directory of the case's own (emptied first) holding, at step 5, one shard file
// per entry of `shards`, in order (the first is rank 0's), each the parameters of a model
// initialised from seed 7.
train::TrainerConfig CheckpointOf(const std::vector<model::GptConfig>& shards) {
  const fs::path dir =
      fs::path(::testing::TempDir()) /
      (std::string("sample-") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(dir);
  std::vector<std::unique_ptr<model::Gpt>> models;
  std::vector<std::pair<std::string, std::vector<train::ShardTensor>>> files;
  for (size_t rank = 0; rank < shards.size(); ++rank) {
    models.push_back(std::make_unique<model::Gpt>(shards[rank]));
    models.back()->InitParameters(7);
    files.push_back(
        {"rank-0000" + std::to_string(rank) + ".bin", {{"params", models.back()->parameters()}}});
  }
  train::CheckpointMeta meta;
  meta.step = 5;
  EXPECT_TRUE(train::CheckpointStore(dir.string()).Save(meta, files).ok());
  train::TrainerConfig config;
  config.model = SmallModel();
  config.checkpoint.dir = dir.string();
  return config;
}

// What the sample should be at a temperature near 0: the most likely byte after the last
// seqLen bytes, each time.
std::string MostLikelyBytes(const train::TrainerConfig& config, const std::string& prompt,
                            int length) {
  model::Gpt gpt(config.model);
  gpt.InitParameters(7);
  std::vector<int32_t> context(prompt.begin(), prompt.end());
  std::string out;
  for (int i = 0; i < length; ++i) {
    const int T = std::min<int>(config.model.seq_len, static_cast<int>(context.size()));
    gpt.Forward(std::vector<int32_t>(context.end() - T, context.end()), {}, 1, T);
    const auto logits = gpt.logits().subspan(static_cast<size_t>(T - 1) * config.model.vocab, 256);
    const auto next = std::max_element(logits.begin(), logits.end()) - logits.begin();
    context.push_back(static_cast<int32_t>(next));
    out.push_back(static_cast<char>(next));
  }
  return out;
}

// A prompt longer than the window: only its last seqLen bytes are the context.
TEST(SampleText, AColdSampleIsTheModelsMostLikelyByteEachTime) {
  const train::TrainerConfig config = CheckpointOf({SmallModel()});
  SampleOptions options;
  options.prompt = "a prompt longer than the window";
  options.length = 24;
  options.temperature = 1e-6;
  std::string text;
  ASSERT_TRUE(SampleText(config, options, &text).ok());
  EXPECT_EQ(text, MostLikelyBytes(config, options.prompt, 24));
}

TEST(SampleText, TheSeedAloneDecidesTheText) {
  const train::TrainerConfig config = CheckpointOf({SmallModel()});
  SampleOptions options;
  options.length = 40;
  std::string first;
  std::string again = "left from before";
  ASSERT_TRUE(SampleText(config, options, &first).ok());
  ASSERT_TRUE(SampleText(config, options, &again).ok());
  EXPECT_EQ(first.size(), 40u);
  EXPECT_EQ(again, first);
  options.seed = 1338;
  std::string other;
  ASSERT_TRUE(SampleText(config, options, &other).ok());
  EXPECT_NE(other, first);
  // An empty prompt is a newline.
  options.prompt = "";
  std::string from_empty;
  ASSERT_TRUE(SampleText(config, options, &from_empty).ok());
  options.prompt = "\n";
  ASSERT_TRUE(SampleText(config, options, &other).ok());
  EXPECT_EQ(from_empty, other);
}

// Rank 0's file holds the whole model; another rank's (here of another model) is not read.
TEST(SampleText, TheSampleComesFromRankZerosFile) {
  model::GptConfig wider = SmallModel();
  wider.d_model = 32;
  const train::TrainerConfig config = CheckpointOf({SmallModel(), wider});
  SampleOptions options;
  options.length = 8;
  options.temperature = 1e-6;
  std::string text;
  ASSERT_TRUE(SampleText(config, options, &text).ok());
  EXPECT_EQ(text, MostLikelyBytes(config, "\n", 8));
}

TEST(SampleText, WhatCannotBeSampledIsRefusedNamingIt) {
  model::GptConfig wider = SmallModel();
  wider.d_model = 32;
  train::TrainerConfig mismatched = CheckpointOf({wider});
  train::TrainerConfig none = mismatched;
  none.checkpoint.dir = mismatched.checkpoint.dir + "-empty";
  fs::create_directories(none.checkpoint.dir);
  train::TrainerConfig no_dir = mismatched;
  no_dir.checkpoint.dir = "";
  struct Case {
    const train::TrainerConfig* config;
    std::string message;
  };
  const Case cases[] = {
      {&no_dir, "no checkpoint directory: the job keeps no checkpoints"},
      {&none, none.checkpoint.dir + ": no complete checkpoint"},
      {&mismatched, train::CheckpointStore(mismatched.checkpoint.dir).StepDir(5) +
                        "/rank-00000.bin: parameters do not match the model (" +
                        std::to_string(model::Gpt(SmallModel()).parameters().size()) +
                        " floats expected)"},
  };
  for (const Case& c : cases) {
    std::string text;
    const train::Status st = SampleText(*c.config, SampleOptions{}, &text);
    EXPECT_EQ(st.code(), train::ExitCode::kCheckpointRefused) << c.message;
    EXPECT_EQ(st.message(), c.message);
  }
}

}  // namespace
}  // namespace tessera::cli
