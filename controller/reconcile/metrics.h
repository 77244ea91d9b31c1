// The controller's Prometheus metrics (DESIGN.md §5, docs/controller.md): reconcile outcomes
// and durations, work queue depth, API requests, watch restarts, leadership, jobs by phase,
// gang restarts and startup time. Holds a prometheus-cpp registry; serving it is main.cpp's
// business. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>

namespace prometheus {
class Registry;
class Gauge;
class Histogram;
class Counter;
template <typename T>
class Family;
}  // namespace prometheus

namespace tessera::reconcile {

class ControllerMetrics {
 public:
  ControllerMetrics();
  ~ControllerMetrics();
  ControllerMetrics(const ControllerMetrics&) = delete;
  ControllerMetrics& operator=(const ControllerMetrics&) = delete;

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // tessera_controller_reconcile_total{result} (success, requeue, conflict, error) and
  // tessera_controller_reconcile_duration_seconds.
  void ObserveReconcile(const std::string& result, double seconds);
  // tessera_controller_workqueue_depth.
  void SetWorkqueueDepth(double depth);
  // tessera_controller_api_requests_total{verb,code}.
  void ObserveApiRequest(const std::string& verb, int code);
  // tessera_controller_watch_restarts_total{resource}.
  void ObserveWatchRestart(const std::string& resource);
  // tessera_controller_leader (1 while this replica leads).
  void SetLeader(bool leader);
  // tessera_jobs{phase}: how many jobs the controller last saw in each phase (every phase is
  // reported, zero included).
  void SetJobPhases(const std::map<std::string, int64_t>& counts);
  // tessera_job_restarts_total.
  void ObserveJobRestart();
  // tessera_job_startup_seconds: attempt created -> all workers Running.
  void ObserveJobStartup(double seconds);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* reconcile_total_;
  prometheus::Histogram* reconcile_duration_;
  prometheus::Gauge* workqueue_depth_;
  prometheus::Family<prometheus::Counter>* api_requests_;
  prometheus::Family<prometheus::Counter>* watch_restarts_;
  prometheus::Gauge* leader_;
  prometheus::Family<prometheus::Gauge>* jobs_;
  prometheus::Counter* job_restarts_;
  prometheus::Histogram* job_startup_;
};

}  // namespace tessera::reconcile
