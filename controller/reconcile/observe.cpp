#include "controller/reconcile/observe.h"

#include <algorithm>
#include <charconv>

#include "api/contract.h"
#include "controller/k8s/object.h"
#include "controller/reconcile/rfc3339.h"

namespace tessera::reconcile {
namespace {

using k8s::IntegerAt;
using k8s::Metadata;
using k8s::ObjectAt;
using k8s::StringAt;

std::optional<int64_t> LabelInt(const Json& pod, const char* key) {
  const Json& labels = ObjectAt(Metadata(pod), "labels");
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
    if (StringAt(c, "type") == "Ready")
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
    if (StringAt(cs, "name") == api::kWorkerContainerName && !worker)
      worker = &*terminated;
    if (IntegerAt(*terminated, "exitCode").value_or(0) != 0 && !nonzero)
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
  const std::string phase = StringAt(ObjectAt(pod, "status"), "phase");
  return lifecycle::ParseWorkerPhase(phase).value_or(lifecycle::WorkerPhase::kPending);
}

// An owner reference with controller: true (the API server allows one per object).
bool IsControllerRef(const Json& owner) {
  auto controller = owner.is_object() ? owner.find("controller") : owner.end();
  return controller != owner.end() && controller->is_boolean() && controller->get<bool>();
}

// The object's owner references; null when it has none or they are not a list.
const Json* OwnerRefs(const Json& object) {
  const Json& meta = Metadata(object);
  auto owners = meta.find("ownerReferences");
  return owners != meta.end() && owners->is_array() ? &*owners : nullptr;
}

}  // namespace

std::string JobKeyOf(const Json& object) {
  const Json& meta = Metadata(object);
  const std::string job = StringAt(ObjectAt(meta, "labels"), api::kLabelJobName);
  return job.empty() ? "" : StringAt(meta, "namespace") + "/" + job;
}

bool ControlledBy(const Json& object, const std::string& uid) {
  const Json* owners = OwnerRefs(object);
  return owners && std::any_of(owners->begin(), owners->end(), [&](const Json& owner) {
           return IsControllerRef(owner) && StringAt(owner, "uid") == uid;
         });
}

std::string DescribeController(const Json& object) {
  if (const Json* owners = OwnerRefs(object)) {
    for (const Json& owner : *owners) {
      if (IsControllerRef(owner))
        return StringAt(owner, "kind") + " " + StringAt(owner, "name") + " (uid " +
               StringAt(owner, "uid") + ")";
    }
  }
  return "no controller";
}

bool Deleting(const Json& object) {
  const Json& meta = Metadata(object);
  auto at = meta.find("deletionTimestamp");
  return at != meta.end() && !at->is_null();
}

std::string NodeNameOf(const Json& pod) {
  return StringAt(ObjectAt(pod, "spec"), "nodeName");
}

bool NodeIsReady(const Json& node) {
  const Json* ready = ReadyCondition(node);
  return ready && StringAt(*ready, "status") == "True";
}

std::optional<lifecycle::TimePoint> NodeNotReadySince(const Json& node) {
  const Json* ready = ReadyCondition(node);
  if (!ready)
    return std::nullopt;
  if (StringAt(*ready, "status") == "True")
    return std::nullopt;
  return ParseTime(StringAt(*ready, "lastTransitionTime"));
}

ObservedWorkers ObserveWorkers(const std::vector<const Json*>& pods, const NodeLookup& nodes,
                               lifecycle::TimePoint now) {
  std::vector<const Json*> sorted = pods;
  auto name_of = [](const Json* pod) { return k8s::MetaString(*pod, "name"); };
  std::sort(sorted.begin(), sorted.end(),
            [&](const Json* a, const Json* b) { return name_of(a) < name_of(b); });

  ObservedWorkers out;
  for (const Json* pod : sorted) {
    const std::optional<int64_t> index = LabelInt(*pod, api::kLabelWorkerIndex);
    const std::optional<int64_t> attempt = LabelInt(*pod, api::kLabelAttempt);
    if (!index || !attempt || out.pods.count(*index))
      continue;
    const Json& status = ObjectAt(*pod, "status");

    lifecycle::Worker w;
    w.index = *index;
    w.attempt = *attempt;
    w.name = k8s::MetaString(*pod, "name");
    w.phase = PhaseOf(*pod);
    const Json* ready = ReadyCondition(*pod);
    w.ready = ready && StringAt(*ready, "status") == "True";
    w.deleting = Deleting(*pod);

    if (const Json* terminated = HasContainerStatuses(*pod) ? TerminatedState(*pod) : nullptr) {
      w.exit_code = IntegerAt(*terminated, "exitCode").value_or(0);
      w.reason = StringAt(*terminated, "reason");
      api::TerminationMessage said = api::SplitTerminationMessage(StringAt(*terminated, "message"));
      w.message = std::move(said.text);
      if (said.progress && w.index == 0)
        out.final_progress = ObservedWorkers::FinalProgress{w.attempt, std::move(*said.progress)};
      if (auto at = ParseTime(StringAt(*terminated, "finishedAt")))
        w.finished_at = at;
    }
    if (w.phase == lifecycle::WorkerPhase::kFailed && w.reason.empty()) {
      w.reason = StringAt(status, "reason");
      w.message = StringAt(status, "message");
    }

    const bool finished =
        w.phase == lifecycle::WorkerPhase::kSucceeded || w.phase == lifecycle::WorkerPhase::kFailed;
    const std::string node_name = NodeNameOf(*pod);
    if (!finished) {
      if (w.phase == lifecycle::WorkerPhase::kUnknown || StringAt(status, "reason") == "NodeLost") {
        w.node_lost = true;
      } else if (!node_name.empty()) {
        const Json* node = nodes ? nodes(node_name) : nullptr;
        if (!node) {
          w.node_lost = true;
        } else if (!NodeIsReady(*node)) {
          // At most a year: an int64 of seconds past that overflows the clock's nanoseconds.
          constexpr int64_t kMaxGrace = int64_t{366} * 24 * 3600;
          const int64_t grace =
              std::clamp<int64_t>(IntegerAt(ObjectAt(*pod, "spec"), "terminationGracePeriodSeconds")
                                      .value_or(kDefaultGracePeriodSeconds),
                                  0, kMaxGrace);
          const auto since = NodeNotReadySince(*node).value_or(now);
          const auto lost_at = since + std::chrono::seconds(grace);
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
