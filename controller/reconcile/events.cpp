#include "controller/reconcile/events.h"

#include <spdlog/spdlog.h>

#include "controller/k8s/object.h"

namespace tessera::reconcile {

void ApiEventSink::Record(const nlohmann::json& job, const std::string& type,
                          const std::string& reason, const std::string& message) {
  k8s::Status status = recorder_.Record(job, type, reason, "Reconcile", message);
  if (!status.ok()) {
    spdlog::warn("event {} {} on {}/{} not recorded: {}", type, reason,
                 k8s::MetaString(job, "namespace"), k8s::MetaString(job, "name"),
                 status.error().ToString());
  }
}

}  // namespace tessera::reconcile
