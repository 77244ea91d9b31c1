#include "worker/train/metrics.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tessera::train {
namespace {

TEST(TrainMetrics, ExposesEveryDocumentedMetric) {
  TrainMetrics m(100);
  m.RecordStep({.step = 7,
                .loss = 2.25,
                .learning_rate = 3e-4,
                .grad_norm = 0.75,
                .tokens_per_second = 1234,
                .step_seconds = 0.2,
                .mfu_ratio = 0.125});
  m.RecordValidation(2.5);
  m.RecordCheckpoint(0.03);
  m.SetMemoryBytes("parameters", 4096);
  const std::string text = m.MetricsText();
  for (const char* line :
       {"tessera_train_step 7", "tessera_train_loss 2.25", "tessera_train_validation_loss 2.5",
        "tessera_train_tokens_per_second 1234", "tessera_train_step_seconds_count 1",
        "tessera_train_mfu_ratio 0.125", "tessera_train_learning_rate 0.0003",
        "tessera_train_grad_norm 0.75", "tessera_checkpoint_seconds_count 1",
        "tessera_memory_bytes{kind=\"parameters\"} 4096"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
}

TEST(TrainMetrics, ProgressJsonHasTheControllerFields) {
  TrainMetrics m(50);
  nlohmann::json before = nlohmann::json::parse(m.ProgressJson());
  EXPECT_EQ(before["step"], 0);
  EXPECT_EQ(before["totalSteps"], 50);
  EXPECT_TRUE(before["valLoss"].is_null());
  m.RecordStep({.step = 3, .loss = 4.5, .tokens_per_second = 100});
  m.RecordValidation(4.75);
  nlohmann::json after = nlohmann::json::parse(m.ProgressJson());
  EXPECT_EQ(after["step"], 3);
  EXPECT_EQ(after["loss"], 4.5);
  EXPECT_EQ(after["valLoss"], 4.75);
  EXPECT_EQ(after["tokensPerSecond"], 100);
  const std::string updated = after["updatedAt"];
  EXPECT_EQ(updated.size(), 20u);  // 2026-01-02T03:04:05Z
  EXPECT_EQ(updated.back(), 'Z');
}

TEST(TrainMetrics, ResumeShowsTheCheckpointsProgress) {
  TrainMetrics m(50);
  m.RecordResume(20, 3.5, 3.75);
  nlohmann::json p = nlohmann::json::parse(m.ProgressJson());
  EXPECT_EQ(p["step"], 20);
  EXPECT_EQ(p["loss"], 3.5);
  EXPECT_EQ(p["valLoss"], 3.75);
  EXPECT_NE(m.MetricsText().find("tessera_train_step 20"), std::string::npos);
}

}  // namespace
}  // namespace tessera::train
