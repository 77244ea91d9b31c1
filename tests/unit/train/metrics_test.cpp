#include "worker/train/metrics.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <thread>

#include "tests/unit/train/loopback_http.h"

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

// The step and checkpoint histograms are in seconds (what the dashboard's histogram_quantile
// reads), each observation in its own histogram, over the documented buckets 5 ms ... 300 s.
TEST(TrainMetrics, DurationsAreSecondsInTheDocumentedBuckets) {
  TrainMetrics m(50);
  m.RecordStep({.step = 1, .loss = 4.5, .step_seconds = 0.2});
  m.RecordCheckpoint(42);
  const std::string text = m.MetricsText();
  for (const char* line : {
           "tessera_train_step_seconds_count 1\n",
           "tessera_train_step_seconds_sum 0.2\n",
           "tessera_train_step_seconds_bucket{le=\"0.1\"} 0\n",
           "tessera_train_step_seconds_bucket{le=\"0.25\"} 1\n",
           "tessera_checkpoint_seconds_count 1\n",
           "tessera_checkpoint_seconds_sum 42\n",
           "tessera_checkpoint_seconds_bucket{le=\"30\"} 0\n",
           "tessera_checkpoint_seconds_bucket{le=\"60\"} 1\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  for (const char* le : {"0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5",
                         "10", "30", "60", "120", "300", "+Inf"}) {
    for (const char* name : {"tessera_train_step_seconds", "tessera_checkpoint_seconds"}) {
      const std::string bucket = std::string(name) + "_bucket{le=\"" + le + "\"} ";
      EXPECT_NE(text.find(bucket), std::string::npos) << bucket << "\n" << text;
    }
  }
}

// A resumed rank shows its checkpoint's loss on /metrics as on /progress, before it trains a step.
TEST(TrainMetrics, ResumeSetsTheLossGauge) {
  TrainMetrics m(50);
  m.RecordResume(20, 3.5, std::nullopt);
  EXPECT_EQ(SampleValue(m.MetricsText(), "tessera_train_loss"), 3.5);
  EXPECT_EQ(SampleValue(m.MetricsText(), "tessera_train_step"), 20);
}

// updatedAt moves with every step, validation and resume (the controller's progress deadline
// reads it). The clock has one-second resolution: the reports wait, with a deadline, for the
// clock to pass the stamp the documents were created with.
TEST(TrainMetrics, ProgressUpdatedAtMovesWithEachReport) {
  TrainMetrics stepped(50), validated(50), resumed(50);
  const auto updated = [](const TrainMetrics& m) {
    return nlohmann::json::parse(m.ProgressJson())["updatedAt"].get<std::string>();
  };
  const std::string created = std::max({updated(stepped), updated(validated), updated(resumed)});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (NowRfc3339() <= created && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_GT(NowRfc3339(), created);
  stepped.RecordStep({.step = 1, .loss = 4.5});
  validated.RecordValidation(4.25);
  resumed.RecordResume(20, 3.5, std::nullopt);
  EXPECT_GT(updated(stepped), created);
  EXPECT_GT(updated(validated), created);
  EXPECT_GT(updated(resumed), created);
}

// RFC 3339 in UTC whatever the process's time zone: the stamp lies between the clock read
// before and after it.
TEST(TrainMetrics, NowIsUtcWhateverTheTimeZone) {
  const char* zone = std::getenv("TZ");
  const std::string saved = zone != nullptr ? zone : "";
  setenv("TZ", "<+05>-5", 1);  // five hours east of UTC
  tzset();
  using std::chrono::system_clock;  // the clock NowRfc3339 reads (time() may lag it)
  const std::time_t before = system_clock::to_time_t(system_clock::now());
  const std::string now = NowRfc3339();
  const std::time_t after = system_clock::to_time_t(system_clock::now());
  if (zone != nullptr)
    setenv("TZ", saved.c_str(), 1);
  else
    unsetenv("TZ");
  tzset();
  std::tm utc{};
  ASSERT_NE(strptime(now.c_str(), "%Y-%m-%dT%H:%M:%SZ", &utc), nullptr) << now;
  const std::time_t stamp = timegm(&utc);
  EXPECT_LE(before, stamp) << now;
  EXPECT_LE(stamp, after) << now;
}

// MetricsServer: /metrics in Prometheus' text format (by its Content-Type, which a scraper
// uses to choose the parser), /progress as the JSON document, on the port it reports.
TEST(MetricsServer, ServesMetricsAndProgressOnItsPort) {
  TrainMetrics m(50);
  m.RecordStep({.step = 3, .loss = 4.5, .tokens_per_second = 100});
  std::unique_ptr<MetricsServer> server;
  const Status st = MetricsServer::Start(0, &m, &server);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_GT(server->port(), 0);
  const std::string metrics =
      test::LoopbackExchange(server->port(), "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(metrics.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << metrics;
  EXPECT_NE(metrics.find("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("\ntessera_train_step 3\n"), std::string::npos) << metrics;
  const std::string progress =
      test::LoopbackExchange(server->port(), "GET /progress HTTP/1.1\r\n\r\n");
  EXPECT_NE(progress.find("\r\nContent-Type: application/json\r\n"), std::string::npos) << progress;
  const auto body = progress.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos) << progress;
  EXPECT_EQ(nlohmann::json::parse(progress.substr(body + 4)),
            nlohmann::json::parse(m.ProgressJson()));
}

}  // namespace
}  // namespace tessera::train
