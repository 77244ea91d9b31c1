#include "worker/train/metrics.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <string>

namespace tessera::train {
namespace {

// The value of the unlabelled sample `name` in Prometheus text, parsed as Prometheus does
// ("Nan", "NaN" and "+Inf" included); fails the test when there is no such line.
double SampleValue(const std::string& text, const std::string& name) {
  const std::string prefix = "\n" + name + " ";
  const auto at = text.find(prefix);
  if (at == std::string::npos) {
    ADD_FAILURE() << "no sample " << name << " in\n" << text;
    return 0;
  }
  const auto begin = at + prefix.size();
  return std::strtod(text.substr(begin, text.find('\n', begin) - begin).c_str(), nullptr);
}

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

TEST(TrainMetrics, ValidationLossIsNoValueUntilTheFirstEvaluation) {
  TrainMetrics m(50);
  m.RecordStep({.step = 1, .loss = 4.5});
  // Not 0, which a dashboard would draw as a validation loss of 0; the series exists.
  EXPECT_TRUE(std::isnan(SampleValue(m.MetricsText(), "tessera_train_validation_loss")));
  EXPECT_TRUE(nlohmann::json::parse(m.ProgressJson())["valLoss"].is_null());
  m.RecordValidation(4.25);
  EXPECT_EQ(SampleValue(m.MetricsText(), "tessera_train_validation_loss"), 4.25);

  TrainMetrics resumed_before_evaluating(50);
  resumed_before_evaluating.RecordResume(20, 3.5, std::nullopt);
  EXPECT_TRUE(std::isnan(
      SampleValue(resumed_before_evaluating.MetricsText(), "tessera_train_validation_loss")));
  TrainMetrics resumed(50);
  resumed.RecordResume(20, 3.5, 3.75);
  EXPECT_EQ(SampleValue(resumed.MetricsText(), "tessera_train_validation_loss"), 3.75);
}

// docs/metrics.md: the communication counters by op and dim, the all_reduce/data series from
// the start, and the measured pipeline bubble.
TEST(TrainMetrics, CommunicationAndPipelineBubble) {
  TrainMetrics m(50);
  const std::string fresh = m.MetricsText();
  for (const char* line : {"tessera_comm_seconds_total{dim=\"data\",op=\"all_reduce\"} 0",
                           "tessera_comm_bytes_total{dim=\"data\",op=\"all_reduce\"} 0",
                           "tessera_pipeline_bubble_ratio 0"}) {
    EXPECT_NE(fresh.find(line), std::string::npos) << line << "\n" << fresh;
  }
  m.RecordComm("reduce_scatter", "pipeline", 0.5, 1024);
  m.RecordComm("reduce_scatter", "pipeline", 0.25, 2048);
  m.SetPipelineBubble(0.375);
  const std::string text = m.MetricsText();
  for (const char* line :
       {"tessera_comm_seconds_total{dim=\"pipeline\",op=\"reduce_scatter\"} 0.75",
        "tessera_comm_bytes_total{dim=\"pipeline\",op=\"reduce_scatter\"} 3072",
        "tessera_pipeline_bubble_ratio 0.375"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
}

TEST(TrainMetrics, MemoryHelpNamesEveryKind) {
  TrainMetrics m(50);
  for (const char* kind : {"parameters", "gradients", "optimizer", "activations", "resident"})
    m.SetMemoryBytes(kind, 1);
  const std::string text = m.MetricsText();
  const auto help_at = text.find("# HELP tessera_memory_bytes ");
  ASSERT_NE(help_at, std::string::npos) << text;
  const std::string help = text.substr(help_at, text.find('\n', help_at) - help_at);
  for (const char* kind : {"parameters", "gradients", "optimizer", "activations", "resident"}) {
    EXPECT_NE(text.find("tessera_memory_bytes{kind=\"" + std::string(kind) + "\"} 1"),
              std::string::npos)
        << kind;
    EXPECT_NE(help.find(kind), std::string::npos) << help;
  }
}

}  // namespace
}  // namespace tessera::train
