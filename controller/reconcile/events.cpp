#include "controller/reconcile/events.h"

#include <spdlog/spdlog.h>

namespace tessera::reconcile {

void ApiEventSink::Record(const nlohmann::json& job, const std::string& type,
                          const std::string& reason, const std::string& message) {
  k8s::Status status = recorder_.Record(job, type, reason, "Reconcile", message);
  if (!status.ok()) {
    const nlohmann::json meta = job.value("metadata", nlohmann::json::object());
    spdlog::warn("event {} {} on {}/{} not recorded: {}", type, reason, meta.value("namespace", ""),
                 meta.value("name", ""), status.error().ToString());
  }
}

}  // namespace tessera::reconcile
