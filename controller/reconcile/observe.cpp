#include "controller/reconcile/observe.h"

#include <algorithm>
#include <charconv>

#include "api/contract.h"
#include "controller/reconcile/rfc3339.h"

namespace tessera::reconcile {
namespace {

std::optional<int64_t> LabelInt(const Json& pod, const char* key) {
  const Json labels = pod.value("metadata", Json::object()).value("labels", Json::object());
  auto it = labels.find(key);
  if (it == labels.end() || !it->is_string())
    return std::nullopt;
  const std::string& text = it->get_ref<const std::string&>();
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0)
    return std::nullopt;
  return value;
}

const Json* ReadyCondition(const Json& object) {
  auto status = object.find("status");
  if (status == object.end() || !status->is_object())
    return nullptr;
  auto conditions = status->find("conditions");
  if (conditions == status->end() || !conditions->is_array())
    return nullptr;
  for (const Json& c : *conditions) {
    if (c.value("type", "") == "Ready")
      return &c;
  }
  return nullptr;
}

// The terminated state that speaks for the pod: the worker container's, else the first
// non-zero one, else any. The pod must have status.containerStatuses (an array).
const Json* TerminatedState(const Json& pod) {
  const Json* worker = nullptr;
  const Json* nonzero = nullptr;
  const Json* any = nullptr;
  const Json& all = pod.at("status").at("containerStatuses");
  for (const Json& cs : all) {
    auto state = cs.find("state");
    if (state == cs.end() || !state->is_object())
      continue;
    auto terminated = state->find("terminated");
    if (terminated == state->end() || !terminated->is_object())
      continue;
    if (cs.value("name", "") == api::kWorkerContainerName && !worker)
      worker = &*terminated;
    if (terminated->value("exitCode", 0) != 0 && !nonzero)
      nonzero = &*terminated;
    if (!any)
      any = &*terminated;
  }
  return worker ? worker : nonzero ? nonzero : any;
}

bool HasContainerStatuses(const Json& pod) {
  auto status = pod.find("status");
  if (status == pod.end() || !status->is_object())
    return false;
  auto cs = status->find("containerStatuses");
  return cs != status->end() && cs->is_array();
}

lifecycle::WorkerPhase PhaseOf(const Json& pod) {
  const std::string phase = pod.value("status", Json::object()).value("phase", "Pending");
  return lifecycle::ParseWorkerPhase(phase).value_or(lifecycle::WorkerPhase::kPending);
}

}  // namespace

bool NodeIsReady(const Json& node) {
  const Json* ready = ReadyCondition(node);
  return ready && ready->value("status", "") == "True";
}

std::optional<lifecycle::TimePoint> NodeNotReadySince(const Json& node) {
  const Json* ready = ReadyCondition(node);
  if (!ready)
    return std::nullopt;
  if (ready->value("status", "") == "True")
    return std::nullopt;
  return ParseTime(ready->value("lastTransitionTime", ""));
}

ObservedWorkers ObserveWorkers(const std::vector<const Json*>& pods, const NodeLookup& nodes,
                               lifecycle::TimePoint now) {
  std::vector<const Json*> sorted = pods;
  auto name_of = [](const Json* pod) {
    return pod->value("metadata", Json::object()).value("name", "");
  };
  std::sort(sorted.begin(), sorted.end(),
            [&](const Json* a, const Json* b) { return name_of(a) < name_of(b); });

  ObservedWorkers out;
  for (const Json* pod : sorted) {
    const std::optional<int64_t> index = LabelInt(*pod, api::kLabelWorkerIndex);
    const std::optional<int64_t> attempt = LabelInt(*pod, api::kLabelAttempt);
    if (!index || !attempt || out.pods.count(*index))
      continue;
    const Json meta = pod->value("metadata", Json::object());
    const Json status = pod->value("status", Json::object());

    lifecycle::Worker w;
    w.index = *index;
    w.attempt = *attempt;
    w.name = meta.value("name", "");
    w.phase = PhaseOf(*pod);
    const Json* ready = ReadyCondition(*pod);
    w.ready = ready && ready->value("status", "") == "True";
    w.deleting = meta.contains("deletionTimestamp") && !meta["deletionTimestamp"].is_null();

    if (const Json* terminated = HasContainerStatuses(*pod) ? TerminatedState(*pod) : nullptr) {
      w.exit_code = terminated->value("exitCode", int64_t{0});
      w.reason = terminated->value("reason", "");
      w.message = terminated->value("message", "");
      if (auto at = ParseTime(terminated->value("finishedAt", "")))
        w.finished_at = at;
    }
    if (w.phase == lifecycle::WorkerPhase::kFailed && w.reason.empty()) {
      w.reason = status.value("reason", "");
      w.message = status.value("message", "");
    }

    const bool finished =
        w.phase == lifecycle::WorkerPhase::kSucceeded || w.phase == lifecycle::WorkerPhase::kFailed;
    const std::string node_name =
        pod->value("spec", Json::object()).value("nodeName", std::string());
    if (!finished) {
      if (w.phase == lifecycle::WorkerPhase::kUnknown || status.value("reason", "") == "NodeLost") {
        w.node_lost = true;
      } else if (!node_name.empty()) {
        const Json* node = nodes ? nodes(node_name) : nullptr;
        if (!node) {
          w.node_lost = true;
        } else if (!NodeIsReady(*node)) {
          const int64_t grace =
              pod->value("spec", Json::object())
                  .value("terminationGracePeriodSeconds", kDefaultGracePeriodSeconds);
          const auto since = NodeNotReadySince(*node).value_or(now);
          const auto lost_at = since + std::chrono::seconds(std::max<int64_t>(grace, 0));
          if (now >= lost_at) {
            w.node_lost = true;
          } else {
            const auto wait = std::chrono::ceil<lifecycle::Duration>(lost_at - now);
            if (!out.recheck_after || wait < *out.recheck_after)
              out.recheck_after = wait;
          }
        }
      }
    }
    out.pods[w.index] = pod;
    out.workers.push_back(std::move(w));
  }
  return out;
}

}  // namespace tessera::reconcile
