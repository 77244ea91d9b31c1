// What the controller's informer caches keep of each object (InformerOptions::transform): only
// the fields reconcile reads (observe.h, the indexes, progress, status), copied into a fresh,
// small object. A cached kwok worker pod shrinks from about 5 KiB of JSON text (its whole spec,
// environment, volumes, every condition and container status) to a few hundred bytes, and an
// nlohmann::json tree costs several times its text in memory, so this is what bounds the
// controller's memory with thousands of pods (DESIGN.md §10: 1000 jobs x 8 workers, 64 MiB).
// A field read by new reconcile code must be added to PodFields or NodeFields, or the cache
// will not have it.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "controller/k8s/field_filter.h"

namespace tessera::reconcile {

// What the pod and node informers parse of each object (ReflectorOptions::object_filter), and
// what their trims keep: for a pod, metadata name, namespace, uid, resourceVersion,
// creationTimestamp, deletionTimestamp, labels, and of the owner references uid, kind, name,
// controller; spec nodeName and terminationGracePeriodSeconds; status phase, reason, message,
// podIP, the conditions' type, status and lastTransitionTime, and each container's name and
// terminated state (exitCode, reason, message, finishedAt). For a node, metadata name, uid,
// resourceVersion, deletionTimestamp and the conditions (readiness is all the controller
// reads of a node). One list for both uses, so a trim never needs a field the parse dropped.
// Built once, shared.
std::shared_ptr<const k8s::FieldFilter> PodFields();
std::shared_ptr<const k8s::FieldFilter> NodeFields();

// The pod's PodFields, and of its lists only the controller owner reference and the Ready
// condition. A value of the wrong type is kept as it is: the readers take it as absent.
void TrimPod(nlohmann::json& pod);

// The node's NodeFields.
void TrimNode(nlohmann::json& node);

// The whole TrainingJob but metadata.managedFields and the last-applied-configuration
// annotation (kubectl apply's copy of the whole object).
void TrimTrainingJob(nlohmann::json& job);

}  // namespace tessera::reconcile
