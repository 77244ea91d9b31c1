#include "controller/reconcile/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "lifecycle/job_state.h"

namespace tessera::reconcile {

ControllerMetrics::ControllerMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  reconcile_total_ = &prometheus::BuildCounter()
                          .Name("tessera_controller_reconcile_total")
                          .Help("Reconciles of a TrainingJob key, by result")
                          .Register(*registry_);
  reconcile_duration_ =
      &prometheus::BuildHistogram()
           .Name("tessera_controller_reconcile_duration_seconds")
           .Help("Time one reconcile took")
           .Register(*registry_)
           .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                            0.1, 0.25, 0.5, 1, 2.5, 5, 10});
  workqueue_depth_ = &prometheus::BuildGauge()
                          .Name("tessera_controller_workqueue_depth")
                          .Help("Job keys waiting in the work queue")
                          .Register(*registry_)
                          .Add({});
  api_requests_ = &prometheus::BuildCounter()
                       .Name("tessera_controller_api_requests_total")
                       .Help(
                           "Requests to the Kubernetes API server, by verb and HTTP code "
                           "(0: no response)")
                       .Register(*registry_);
  watch_restarts_ = &prometheus::BuildCounter()
                         .Name("tessera_controller_watch_restarts_total")
                         .Help("Relists of an informer after its first list, by resource")
                         .Register(*registry_);
  leader_ = &prometheus::BuildGauge()
                 .Name("tessera_controller_leader")
                 .Help("1 while this replica holds the leader lease (or runs without election)")
                 .Register(*registry_)
                 .Add({});
  jobs_ = &prometheus::BuildGauge()
               .Name("tessera_jobs")
               .Help("TrainingJobs by phase, as last reconciled")
               .Register(*registry_);
  job_restarts_ = &prometheus::BuildCounter()
                       .Name("tessera_job_restarts_total")
                       .Help("Gang restarts of TrainingJobs")
                       .Register(*registry_)
                       .Add({});
  job_startup_ = &prometheus::BuildHistogram()
                      .Name("tessera_job_startup_seconds")
                      .Help("Time from creating an attempt's workers to all of them Running")
                      .Register(*registry_)
                      .Add({}, prometheus::Histogram::BucketBoundaries{0.5, 1, 2, 5, 10, 20, 30, 60,
                                                                       120, 300, 600});
  for (auto phase :
       {lifecycle::Phase::kPending, lifecycle::Phase::kStarting, lifecycle::Phase::kRunning,
        lifecycle::Phase::kRestarting, lifecycle::Phase::kSucceeded, lifecycle::Phase::kFailed,
        lifecycle::Phase::kSuspended}) {
    jobs_->Add({{"phase", std::string(lifecycle::ToString(phase))}}).Set(0);
  }
}

ControllerMetrics::~ControllerMetrics() = default;

void ControllerMetrics::ObserveReconcile(const std::string& result, double seconds) {
  reconcile_total_->Add({{"result", result}}).Increment();
  reconcile_duration_->Observe(seconds);
}

void ControllerMetrics::SetWorkqueueDepth(double depth) {
  workqueue_depth_->Set(depth);
}

void ControllerMetrics::ObserveApiRequest(const std::string& verb, int code) {
  api_requests_->Add({{"verb", verb}, {"code", std::to_string(code)}}).Increment();
}

void ControllerMetrics::ObserveWatchRestart(const std::string& resource) {
  watch_restarts_->Add({{"resource", resource}}).Increment();
}

void ControllerMetrics::SetLeader(bool leader) {
  leader_->Set(leader ? 1 : 0);
}

void ControllerMetrics::SetJobPhases(const std::map<std::string, int64_t>& counts) {
  for (auto phase :
       {lifecycle::Phase::kPending, lifecycle::Phase::kStarting, lifecycle::Phase::kRunning,
        lifecycle::Phase::kRestarting, lifecycle::Phase::kSucceeded, lifecycle::Phase::kFailed,
        lifecycle::Phase::kSuspended}) {
    const std::string name(lifecycle::ToString(phase));
    auto it = counts.find(name);
    jobs_->Add({{"phase", name}}).Set(it == counts.end() ? 0 : static_cast<double>(it->second));
  }
}

void ControllerMetrics::ObserveJobRestart() {
  job_restarts_->Increment();
}

void ControllerMetrics::ObserveJobStartup(double seconds) {
  job_startup_->Observe(seconds);
}

}  // namespace tessera::reconcile
