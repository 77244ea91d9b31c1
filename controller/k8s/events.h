// Writes events.k8s.io/v1 Events about objects ("regarding"): the record `kubectl describe`
// and `kubectl events` show. Each call creates one Event; there is no aggregation into
// series and no background queue (the caller decides what is worth recording).
#pragma once

#include <string>

#include "controller/k8s/rest.h"

namespace tessera::k8s {

struct EventRecorderOptions {
  std::string reporting_controller = "tessera.dev/controller";
  std::string reporting_instance;  // e.g. the pod name of this controller replica
};

// Thread-safe (as safe as the RestClient it uses).
class EventRecorder {
 public:
  // `client` must outlive the recorder.
  EventRecorder(RestClient& client, EventRecorderOptions options);

  // Records that `action` happened to `regarding` (a full object, or at least its
  // apiVersion, kind and metadata) for `reason`. `type` is "Normal" or "Warning"; `note` is
  // cut to 1 KiB, between characters. The Event lives in the object's namespace ("default" for
  // cluster-scoped).
  Status Record(const Json& regarding, const std::string& type, const std::string& reason,
                const std::string& action, const std::string& note);

  // The Event object Record would create (exposed for tests and dry runs).
  Json Build(const Json& regarding, const std::string& type, const std::string& reason,
             const std::string& action, const std::string& note) const;

 private:
  RestClient& client_;
  EventRecorderOptions options_;
};

}  // namespace tessera::k8s
