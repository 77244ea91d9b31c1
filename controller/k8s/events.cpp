#include "controller/k8s/events.h"

#include <atomic>
#include <cstdio>

#include "controller/k8s/micro_time.h"
#include "controller/k8s/object.h"

namespace tessera::k8s {

EventRecorder::EventRecorder(RestClient& client, EventRecorderOptions options)
    : client_(client), options_(std::move(options)) {
  if (options_.reporting_instance.empty())
    options_.reporting_instance = "tessera-controller";
}

Json EventRecorder::Build(const Json& regarding, const std::string& type, const std::string& reason,
                          const std::string& action, const std::string& note) const {
  const Json& meta = Metadata(regarding);
  std::string ns = StringAt(meta, "namespace");
  std::string name = StringAt(meta, "name");
  // Unique, like client-go's "<name>.<hex timestamp>": time in ns plus a process counter.
  static std::atomic<uint64_t> counter{0};
  auto now = std::chrono::system_clock::now();
  uint64_t stamp = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count());
  char suffix[40];
  std::snprintf(suffix, sizeof(suffix), "%llx", static_cast<unsigned long long>(stamp + counter++));

  Json ref = {{"apiVersion", StringAt(regarding, "apiVersion")},
              {"kind", StringAt(regarding, "kind")},
              {"name", name}};
  if (!ns.empty())
    ref["namespace"] = ns;
  if (meta.contains("uid"))
    ref["uid"] = meta["uid"];
  if (meta.contains("resourceVersion"))
    ref["resourceVersion"] = meta["resourceVersion"];

  std::string cut = note;
  if (note.size() > 1024) {
    // Between characters: half of one is invalid UTF-8, which the Event's JSON cannot hold.
    size_t end = 1021;
    while (end > 0 && (static_cast<unsigned char>(note[end]) & 0xC0) == 0x80)
      --end;
    cut = note.substr(0, end) + "...";
  }
  return {{"apiVersion", "events.k8s.io/v1"},
          {"kind", "Event"},
          {"metadata", {{"name", name + "." + suffix}, {"namespace", ns.empty() ? "default" : ns}}},
          {"eventTime", FormatMicroTime(now)},
          {"reportingController", options_.reporting_controller},
          {"reportingInstance", options_.reporting_instance},
          {"regarding", ref},
          {"type", type},
          {"reason", reason},
          {"action", action},
          {"note", cut}};
}

Status EventRecorder::Record(const Json& regarding, const std::string& type,
                             const std::string& reason, const std::string& action,
                             const std::string& note) {
  Json event = Build(regarding, type, reason, action, note);
  auto created = client_.Create(Events(event["metadata"]["namespace"].get<std::string>()), event);
  if (!created.ok())
    return created.error();
  return Status::Ok();
}

}  // namespace tessera::k8s
