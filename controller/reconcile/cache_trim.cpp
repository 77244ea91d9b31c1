#include "controller/reconcile/cache_trim.h"

#include <initializer_list>

#include "controller/k8s/object.h"

namespace tessera::reconcile {
namespace {

using Json = nlohmann::json;

// A new object with `fields` moved out of `from` (those present).
Json Take(Json& from, std::initializer_list<const char*> fields) {
  Json kept = Json::object();
  if (!from.is_object())
    return kept;
  for (const char* field : fields) {
    auto it = from.find(field);
    if (it != from.end())
      kept[field] = std::move(*it);
  }
  return kept;
}

// Of a `conditions` array, the entries `keep` accepts, reduced to type, status and
// lastTransitionTime.
template <typename Keep>
Json Conditions(Json& conditions, Keep keep) {
  Json kept = Json::array();
  if (!conditions.is_array())
    return kept;
  for (Json& c : conditions) {
    if (c.is_object() && keep(c))
      kept.push_back(Take(c, {"type", "status", "lastTransitionTime"}));
  }
  return kept;
}

}  // namespace

void TrimPod(Json& pod) {
  if (!pod.is_object())
    return;
  Json trimmed = Json::object();
  Json& meta = pod["metadata"];
  Json m = Take(meta, {"name", "namespace", "uid", "resourceVersion", "creationTimestamp",
                       "deletionTimestamp", "labels"});
  if (auto owners = meta.find("ownerReferences"); owners != meta.end() && owners->is_array()) {
    Json controller = Json::array();
    for (Json& o : *owners) {
      if (auto c = o.is_object() ? o.find("controller") : o.end();
          c != o.end() && c->is_boolean() && c->get<bool>())
        controller.push_back(Take(o, {"uid", "kind", "name", "controller"}));
    }
    m["ownerReferences"] = std::move(controller);
  }
  trimmed["metadata"] = std::move(m);
  trimmed["spec"] = Take(pod["spec"], {"nodeName", "terminationGracePeriodSeconds"});
  Json& status = pod["status"];
  Json s = Take(status, {"phase", "reason", "message", "podIP"});
  if (auto c = status.find("conditions"); c != status.end()) {
    s["conditions"] = Conditions(
        *c, [](const Json& condition) { return k8s::StringAt(condition, "type") == "Ready"; });
  }
  if (auto cs = status.find("containerStatuses"); cs != status.end() && cs->is_array()) {
    Json containers = Json::array();
    for (Json& container : *cs) {
      if (!container.is_object())
        continue;
      Json kept = Take(container, {"name"});
      Json& state = container["state"];
      if (state.is_object() && state.contains("terminated")) {
        kept["state"]["terminated"] =
            Take(state["terminated"], {"exitCode", "reason", "message", "finishedAt"});
      } else {
        kept["state"] = Json::object();
      }
      containers.push_back(std::move(kept));
    }
    s["containerStatuses"] = std::move(containers);
  }
  trimmed["status"] = std::move(s);
  pod = std::move(trimmed);
}

void TrimNode(Json& node) {
  if (!node.is_object())
    return;
  Json trimmed = Json::object();
  trimmed["metadata"] =
      Take(node["metadata"], {"name", "uid", "resourceVersion", "deletionTimestamp"});
  trimmed["status"] = Json::object();
  Json& status = node["status"];
  if (auto c = status.find("conditions"); c != status.end())
    trimmed["status"]["conditions"] = Conditions(*c, [](const Json&) { return true; });
  node = std::move(trimmed);
}

std::shared_ptr<const k8s::FieldFilter> PodFields() {
  static const auto filter = std::make_shared<const k8s::FieldFilter>(k8s::FieldFilter::Keep({
      "metadata.name",
      "metadata.namespace",
      "metadata.uid",
      "metadata.resourceVersion",
      "metadata.creationTimestamp",
      "metadata.deletionTimestamp",
      "metadata.labels",
      "metadata.ownerReferences",
      "spec.nodeName",
      "spec.terminationGracePeriodSeconds",
      "status.phase",
      "status.reason",
      "status.message",
      "status.podIP",
      "status.conditions.type",
      "status.conditions.status",
      "status.conditions.lastTransitionTime",
      "status.containerStatuses.name",
      "status.containerStatuses.state.terminated",
  }));
  return filter;
}

std::shared_ptr<const k8s::FieldFilter> NodeFields() {
  static const auto filter = std::make_shared<const k8s::FieldFilter>(k8s::FieldFilter::Keep({
      "metadata.name",
      "metadata.uid",
      "metadata.resourceVersion",
      "metadata.deletionTimestamp",
      "status.conditions.type",
      "status.conditions.status",
      "status.conditions.lastTransitionTime",
  }));
  return filter;
}

void TrimTrainingJob(Json& job) {
  auto meta = job.find("metadata");
  if (meta == job.end() || !meta->is_object())
    return;
  meta->erase("managedFields");
  if (auto a = meta->find("annotations"); a != meta->end() && a->is_object()) {
    a->erase("kubectl.kubernetes.io/last-applied-configuration");
    if (a->empty())
      meta->erase("annotations");
  }
}

}  // namespace tessera::reconcile
