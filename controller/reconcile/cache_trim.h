// What the controller's informer caches keep of each object (InformerOptions::transform): only
// the fields reconcile reads (observe.h, the indexes, progress, status), copied into a fresh,
// small object. A cached kwok worker pod shrinks from about 5 KiB of JSON text (its whole spec,
// environment, volumes, every condition and container status) to a few hundred bytes, and an
// nlohmann::json tree costs several times its text in memory, so this is what bounds the
// controller's memory with thousands of pods (DESIGN.md §10: 1000 jobs x 8 workers, 64 MiB).
// A field read by new reconcile code must be added here, or the cache will not have it.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "controller/k8s/field_filter.h"

namespace tessera::reconcile {

// metadata: name, namespace, uid, resourceVersion, creationTimestamp, deletionTimestamp,
// labels, the controller owner reference (uid, kind, name, controller); spec: nodeName,
// terminationGracePeriodSeconds; status: phase, reason, message, podIP, the Ready condition
// (type, status, lastTransitionTime) and each container's name and terminated state
// (exitCode, reason, message, finishedAt).
void TrimPod(nlohmann::json& pod);

// metadata: name, uid, resourceVersion, deletionTimestamp; status.conditions: type, status,
// lastTransitionTime of each (readiness is all the controller reads of a node).
void TrimNode(nlohmann::json& node);

// What the pod and node informers parse of each object (ReflectorOptions::object_filter): every
// field their trim reads, so that TrimPod(ParseFiltered(text, *PodFields())) equals
// TrimPod(parse(text)), without allocating for the rest on the way (the fuzz target
// apiserver_object_fuzz checks the equality). Built once, shared.
std::shared_ptr<const k8s::FieldFilter> PodFields();
std::shared_ptr<const k8s::FieldFilter> NodeFields();

// The whole TrainingJob but metadata.managedFields and the last-applied-configuration
// annotation (kubectl apply's copy of the whole object).
void TrimTrainingJob(nlohmann::json& job);

}  // namespace tessera::reconcile
