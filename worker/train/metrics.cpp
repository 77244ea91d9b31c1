#include "worker/train/metrics.h"

#include "worker/train/http_server.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <limits>

namespace tessera::train {
namespace {

prometheus::Gauge* NewGauge(prometheus::Registry& registry, const std::string& name,
                            const std::string& help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

// Seconds, from 5 ms to 5 minutes.
prometheus::Histogram::BucketBoundaries SecondsBuckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
}

}  // namespace

std::string NowRfc3339() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

TrainMetrics::TrainMetrics(int64_t total_steps)
    : registry_(std::make_shared<prometheus::Registry>()) {
  progress_.total_steps = total_steps;
  auto& r = *registry_;
  step_ = NewGauge(r, "tessera_train_step", "Optimizer steps completed.");
  pipeline_bubble_ = NewGauge(r, "tessera_pipeline_bubble_ratio",
                              "Fraction of the last step's forward and backward this pipeline "
                              "stage waited for its neighbours (0 without pipelining).");
  loss_ = NewGauge(r, "tessera_train_loss", "Training loss (mean cross-entropy) of the last step.");
  val_loss_ = NewGauge(r, "tessera_train_validation_loss",
                       "Mean cross-entropy on the validation split at the last evaluation "
                       "(NaN before the first).");
  // No evaluation yet: NaN, which Prometheus stores and Grafana draws as no value, where a 0
  // would draw a validation loss of 0. The series still exists from the first scrape.
  val_loss_->Set(std::numeric_limits<double>::quiet_NaN());
  tokens_per_second_ =
      NewGauge(r, "tessera_train_tokens_per_second",
               "Training tokens processed per second in the last step, all ranks.");
  step_seconds_ = &prometheus::BuildHistogram()
                       .Name("tessera_train_step_seconds")
                       .Help("Wall time of one optimizer step.")
                       .Register(r)
                       .Add({}, SecondsBuckets());
  mfu_ = NewGauge(r, "tessera_train_mfu_ratio",
                  "Model FLOPs utilization of the last step: achieved / peak FLOP/s (0 when the "
                  "peak is not configured).");
  lr_ = NewGauge(r, "tessera_train_learning_rate", "Learning rate of the last step.");
  grad_norm_ = NewGauge(r, "tessera_train_grad_norm",
                        "Global L2 norm of the gradient of the last step, before clipping.");
  checkpoint_seconds_ = &prometheus::BuildHistogram()
                             .Name("tessera_checkpoint_seconds")
                             .Help("Wall time to write one checkpoint.")
                             .Register(r)
                             .Add({}, SecondsBuckets());
  memory_ = &prometheus::BuildGauge()
                 .Name("tessera_memory_bytes")
                 .Help(
                     "Memory of this rank by kind: parameters, gradients, optimizer, "
                     "activations, resident.")
                 .Register(r);
  comm_seconds_ = &prometheus::BuildCounter()
                       .Name("tessera_comm_seconds_total")
                       .Help(
                           "Seconds the training loop waited for collectives, by operation and "
                           "parallel dimension (communication not hidden behind compute).")
                       .Register(r);
  comm_bytes_ = &prometheus::BuildCounter()
                     .Name("tessera_comm_bytes_total")
                     .Help(
                         "Bytes this rank contributed to collectives, by operation and "
                         "parallel dimension.")
                     .Register(r);
  // Every job reduces something over the data dimension (a one-rank job, nothing): the series
  // exist from the start so dashboards and rate() see a zero instead of no data.
  RecordComm("all_reduce", "data", 0, 0);
  progress_.updated_at = NowRfc3339();
}

TrainMetrics::~TrainMetrics() = default;

void TrainMetrics::RecordStep(const StepReport& s) {
  step_->Set(static_cast<double>(s.step));
  loss_->Set(s.loss);
  lr_->Set(s.learning_rate);
  grad_norm_->Set(s.grad_norm);
  tokens_per_second_->Set(s.tokens_per_second);
  step_seconds_->Observe(s.step_seconds);
  mfu_->Set(s.mfu_ratio);
  std::lock_guard<std::mutex> lock(mu_);
  progress_.step = s.step;
  progress_.loss = s.loss;
  progress_.tokens_per_second = s.tokens_per_second;
  progress_.updated_at = NowRfc3339();
}

void TrainMetrics::RecordValidation(double val_loss) {
  val_loss_->Set(val_loss);
  std::lock_guard<std::mutex> lock(mu_);
  progress_.val_loss = val_loss;
  progress_.updated_at = NowRfc3339();
}

void TrainMetrics::RecordResume(int64_t step, double loss, std::optional<double> val_loss) {
  step_->Set(static_cast<double>(step));
  loss_->Set(loss);
  if (val_loss)
    val_loss_->Set(*val_loss);
  std::lock_guard<std::mutex> lock(mu_);
  progress_.step = step;
  progress_.loss = loss;
  progress_.val_loss = val_loss;
  progress_.updated_at = NowRfc3339();
}

void TrainMetrics::RecordCheckpoint(double seconds) {
  checkpoint_seconds_->Observe(seconds);
}

void TrainMetrics::SetMemoryBytes(const std::string& kind, double bytes) {
  memory_->Add({{"kind", kind}}).Set(bytes);
}

void TrainMetrics::SetPipelineBubble(double ratio) {
  pipeline_bubble_->Set(ratio);
}

void TrainMetrics::RecordComm(const std::string& op, const std::string& dim, double seconds,
                              double bytes) {
  comm_seconds_->Add({{"op", op}, {"dim", dim}}).Increment(seconds);
  comm_bytes_->Add({{"op", op}, {"dim", dim}}).Increment(bytes);
}

std::string TrainMetrics::MetricsText() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

std::string TrainMetrics::ProgressJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  return api::EncodeProgress(progress_);
}

struct MetricsServer::Impl {
  std::unique_ptr<HttpServer> http;
};

Status MetricsServer::Start(int port, TrainMetrics* metrics, std::unique_ptr<MetricsServer>* out) {
  auto impl = std::make_unique<Impl>();
  std::vector<HttpServer::Route> routes = {
      {"/metrics", "text/plain; version=0.0.4; charset=utf-8",
       [metrics] { return metrics->MetricsText(); }},
      {"/progress", "application/json", [metrics] { return metrics->ProgressJson(); }},
  };
  if (Status st = HttpServer::Start(port, std::move(routes), &impl->http); !st.ok())
    return st;
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->port_ = impl->http->port();
  server->impl_ = std::move(impl);
  *out = std::move(server);
  return Status::Ok();
}

MetricsServer::~MetricsServer() = default;

}  // namespace tessera::train
