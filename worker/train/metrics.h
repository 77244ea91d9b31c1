// Training metrics (DESIGN.md §6, docs/metrics.md): Prometheus gauges and a histogram kept
// with prometheus-cpp, and the same figures as the `/progress` JSON the controller polls.
// MetricsServer serves both over HTTP (http_server.h). Nothing here computes a figure; the
// trainer reports them.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "api/progress.h"
#include "worker/train/status.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace tessera::train {

// What one optimizer step reports.
struct StepReport {
  int64_t step = 0;  // steps completed, 1-based
  double loss = 0;
  double learning_rate = 0;
  double grad_norm = 0;  // before clipping
  double tokens_per_second = 0;
  double step_seconds = 0;
  double mfu_ratio = 0;  // 0 when the peak is unknown
};

// Thread-safe: the trainer writes while the HTTP server reads.
class TrainMetrics {
 public:
  explicit TrainMetrics(int64_t total_steps);
  ~TrainMetrics();
  TrainMetrics(const TrainMetrics&) = delete;
  TrainMetrics& operator=(const TrainMetrics&) = delete;

  void RecordStep(const StepReport& report);
  // tessera_train_validation_loss is NaN (no value, for Prometheus and Grafana) until the
  // first RecordValidation, or a RecordResume with a validation loss, as /progress's valLoss
  // is null.
  void RecordValidation(double val_loss);
  // After resuming from a checkpoint: step, loss and validation loss as it recorded them.
  void RecordResume(int64_t step, double loss, std::optional<double> val_loss);
  void RecordCheckpoint(double seconds);
  // tessera_memory_bytes{kind}: kind is parameters, gradients, optimizer, activations or
  // resident.
  void SetMemoryBytes(const std::string& kind, double bytes);
  // tessera_comm_seconds_total{op,dim} and tessera_comm_bytes_total{op,dim}: `seconds` is the
  // time the step waited for the operation (what overlap did not hide), `bytes` what this
  // rank contributed. op: all_reduce, reduce_scatter, all_gather, send_recv; dim: data,
  // pipeline, tensor.
  void RecordComm(const std::string& op, const std::string& dim, double seconds, double bytes);
  // tessera_pipeline_bubble_ratio: the fraction of the last step's forward and backward this
  // pipeline stage spent waiting for its neighbours (0 without pipeline parallelism).
  void SetPipelineBubble(double ratio);

  // Prometheus text exposition format (version 0.0.4) of every metric.
  std::string MetricsText() const;
  // The /progress document (api/progress.h).
  std::string ProgressJson() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Gauge* step_;
  prometheus::Gauge* loss_;
  prometheus::Gauge* val_loss_;
  prometheus::Gauge* tokens_per_second_;
  prometheus::Histogram* step_seconds_;
  prometheus::Gauge* mfu_;
  prometheus::Gauge* lr_;
  prometheus::Gauge* grad_norm_;
  prometheus::Histogram* checkpoint_seconds_;
  prometheus::Family<prometheus::Gauge>* memory_;
  prometheus::Family<prometheus::Counter>* comm_seconds_;
  prometheus::Family<prometheus::Counter>* comm_bytes_;
  prometheus::Gauge* pipeline_bubble_;

  mutable std::mutex mu_;  // guards progress_
  api::ProgressDocument progress_;
};

// An HTTP listener serving GET /metrics and GET /progress from a TrainMetrics.
// Thread-safe; stops when destroyed.
class MetricsServer {
 public:
  // Listens on `port` on all interfaces (0: a free port, see port()). A port that cannot be
  // bound is kIoError naming it. `metrics` must outlive the server.
  static Status Start(int port, TrainMetrics* metrics, std::unique_ptr<MetricsServer>* out);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }

 private:
  struct Impl;
  MetricsServer() = default;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

// Now as RFC 3339 UTC with seconds, e.g. "2026-01-02T03:04:05Z".
std::string NowRfc3339();

}  // namespace tessera::train
