#include "controller/reconcile/cache_trim.h"

#include <vector>

#include "controller/k8s/object.h"

namespace tessera::reconcile {
namespace {

using Json = nlohmann::json;

// Removes from the array at pod[parent][name] (when each is what it should be) the entries
// that `keep` refuses.
template <typename Keep>
void KeepEntries(Json& pod, const char* parent, const char* name, Keep keep) {
  auto p = pod.find(parent);
  if (p == pod.end() || !p->is_object())
    return;
  auto list = p->find(name);
  if (list == p->end() || !list->is_array())
    return;
  std::erase_if(list->get_ref<Json::array_t&>(), [&keep](const Json& e) { return !keep(e); });
}

}  // namespace

std::shared_ptr<const k8s::FieldFilter> PodFields() {
  static const auto filter = std::make_shared<const k8s::FieldFilter>(k8s::FieldFilter::Keep({
      "metadata.name",
      "metadata.namespace",
      "metadata.uid",
      "metadata.resourceVersion",
      "metadata.creationTimestamp",
      "metadata.deletionTimestamp",
      "metadata.labels",
      "metadata.ownerReferences.uid",
      "metadata.ownerReferences.kind",
      "metadata.ownerReferences.name",
      "metadata.ownerReferences.controller",
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
      "status.containerStatuses.state.terminated.exitCode",
      "status.containerStatuses.state.terminated.reason",
      "status.containerStatuses.state.terminated.message",
      "status.containerStatuses.state.terminated.finishedAt",
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

void TrimPod(Json& pod) {
  if (!pod.is_object())
    return;
  pod = PodFields()->Apply(pod);
  // Of the lists, the entries reconcile reads: the controller owner reference, the Ready
  // condition.
  KeepEntries(pod, "metadata", "ownerReferences", [](const Json& owner) {
    const auto c = owner.is_object() ? owner.find("controller") : owner.end();
    return c != owner.end() && c->is_boolean() && c->get<bool>();
  });
  KeepEntries(pod, "status", "conditions",
              [](const Json& condition) { return k8s::StringAt(condition, "type") == "Ready"; });
}

void TrimNode(Json& node) {
  if (node.is_object())
    node = NodeFields()->Apply(node);
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
