// Where reconcile records the lifecycle's events about a TrainingJob (what `kubectl describe tj`
// shows under Events). Best effort: a failed write is logged, never retried, never fails a
// reconcile. The Kubernetes side is controller/k8s/events.h; tests record in memory.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "controller/k8s/events.h"

namespace tessera::reconcile {

// Thread-safe implementations.
class EventSink {
 public:
  virtual ~EventSink() = default;
  // `type` is "Normal" or "Warning"; `reason` CamelCase; `job` the TrainingJob object.
  virtual void Record(const nlohmann::json& job, const std::string& type, const std::string& reason,
                      const std::string& message) = 0;
};

// Records through k8s::EventRecorder (events.k8s.io/v1, action "Reconcile"). Thread-safe.
class ApiEventSink final : public EventSink {
 public:
  // `recorder` must outlive the sink.
  explicit ApiEventSink(k8s::EventRecorder& recorder) : recorder_(recorder) {}
  void Record(const nlohmann::json& job, const std::string& type, const std::string& reason,
              const std::string& message) override;

 private:
  k8s::EventRecorder& recorder_;
};

}  // namespace tessera::reconcile
