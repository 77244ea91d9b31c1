// Fuzz target: what the controller reads from the API server. Each line of the input is one
// line of a watch stream: its framing ({"type", "object"}) is decoded, an error line becomes an
// ApiError, and the object an event carries goes through every function that reads objects
// from the server: the informer's key, indexes and packing, the cache trims, the pod and node
// readers, ObserveWorkers, ViewJob/PolicyOf, DecodeStatus and the EndpointSlice built from a
// pod. The API server validates what it stores, but a field's type is only as certain as a
// schema, a proxy or a version allows: whatever the line holds, nothing may throw, crash or
// hang, and every message quoted from it must be valid UTF-8 (it goes into events and status).
// The informer caches pods and nodes trimmed, so what reconcile reads of a trimmed one must
// also equal what it reads of the object as sent; and it parses them filtered, which must trim
// to the same object as the whole parse.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/contract.h"
#include "api/utf8.h"
#include "controller/k8s/field_filter.h"
#include "controller/k8s/informer.h"
#include "controller/k8s/object.h"
#include "controller/k8s/rest.h"
#include "controller/reconcile/cache_trim.h"
#include "controller/reconcile/job_view.h"
#include "controller/reconcile/objects.h"
#include "controller/reconcile/observe.h"
#include "controller/reconcile/status.h"
#include "lifecycle/decide.h"

namespace {

using nlohmann::json;
using namespace tessera;

void RequireText(const std::string& message, const char* what) {
  if (api::FirstInvalidUtf8(message)) {
    std::fprintf(stderr, "apiserver_object_fuzz: %s is not UTF-8\n", what);
    std::abort();
  }
}

void ReadObject(const json& object) {
  (void)k8s::KeyOf(object);
  (void)k8s::IndexByLabel(api::kLabelJobName)(object);
  (void)k8s::IndexByOwnerUid()(object);
  // The informer caches objects as MessagePack.
  if (json::from_msgpack(json::to_msgpack(object)) != object)
    std::abort();

  (void)reconcile::JobKeyOf(object);
  (void)reconcile::ControlledBy(object, "u");
  (void)reconcile::Deleting(object);
  (void)reconcile::NodeNameOf(object);
  (void)reconcile::NodeIsReady(object);
  (void)reconcile::NodeNotReadySince(object);
  const auto now = std::chrono::system_clock::now();
  const reconcile::ObservedWorkers observed = reconcile::ObserveWorkers(
      {&object}, [&object](const std::string&) { return &object; }, now);
  for (const auto& worker : observed.workers)
    RequireText(worker.message, "a worker's message");

  const json& status = object.contains("status") ? object["status"] : json();
  const reconcile::DecodedStatus decoded = reconcile::DecodeStatus(status);
  (void)reconcile::EncodeStatus(decoded.status, decoded.detail).dump();
  const reconcile::JobView view = reconcile::ViewJob(object);
  // What the lifecycle decides from the job's own status and the object as its only pod.
  lifecycle::Observation observation;
  observation.workers = observed.workers;
  const lifecycle::Status previous = reconcile::RecoverPrunedFields(decoded, std::nullopt, {});
  (void)reconcile::EncodeStatus(
      lifecycle::Decide(reconcile::PolicyOf(view), previous, observation, now).status,
      decoded.detail)
      .dump();
  if (!view.invalid) {
    // What the controller writes for a job it read: all of it must encode.
    (void)reconcile::DesiredEndpointSlice(view.job, {&object}).dump();
    (void)reconcile::DesiredPod(view.job, 0, 1).dump();
    (void)reconcile::DesiredService(view.job).dump();
    (void)reconcile::DesiredSecret(view.job, "token").dump();
    if (reconcile::RunsBuiltInTrainer(view.job))
      (void)reconcile::DesiredTrainerConfigMap(view.job, 1).dump();
  }
}

// The informer caches pods and nodes trimmed (cache_trim.h): whatever reconcile reads of the
// trimmed object must be what it reads of the object the server sent, or a trim dropped a
// field that reconcile needs.
void SameAfterTrim(const json& object) {
  json pod = object;
  reconcile::TrimPod(pod);
  json node = object;
  reconcile::TrimNode(node);
  bool same = reconcile::JobKeyOf(pod) == reconcile::JobKeyOf(object) &&
              reconcile::Deleting(pod) == reconcile::Deleting(object) &&
              reconcile::NodeNameOf(pod) == reconcile::NodeNameOf(object) &&
              k8s::KeyOf(pod) == k8s::KeyOf(object) &&
              reconcile::NodeIsReady(node) == reconcile::NodeIsReady(object) &&
              reconcile::NodeNotReadySince(node) == reconcile::NodeNotReadySince(object) &&
              k8s::MetaString(pod, "uid") == k8s::MetaString(object, "uid") &&
              k8s::StringAt(k8s::ObjectAt(pod, "status"), "podIP") ==
                  k8s::StringAt(k8s::ObjectAt(object, "status"), "podIP");
  std::vector<std::string> owners = k8s::IndexByOwnerUid()(object);
  owners.push_back("u");
  for (const std::string& uid : owners)
    same = same && reconcile::ControlledBy(pod, uid) == reconcile::ControlledBy(object, uid);
  const auto now = std::chrono::system_clock::now();
  const reconcile::ObservedWorkers full = reconcile::ObserveWorkers(
      {&object}, [&object](const std::string&) { return &object; }, now);
  const reconcile::ObservedWorkers trimmed = reconcile::ObserveWorkers(
      {&pod}, [&node](const std::string&) { return &node; }, now);
  same = same && full.workers == trimmed.workers && full.recheck_after == trimmed.recheck_after &&
         full.pods.size() == trimmed.pods.size();
  if (!same) {
    std::fprintf(stderr, "apiserver_object_fuzz: reconcile reads the trimmed object differently\n");
    std::abort();
  }
}

// The pod and node informers parse only the fields their trims read (PodFields, NodeFields):
// the filtered parse must fail where the whole one fails, equal the whole one cut by the filter,
// and trim to the same object.
void SameWhenParsedFiltered(std::string_view line, const k8s::Result<k8s::WatchEvent>& whole) {
  bool same = true;
  for (const auto& [fields, trim] : {std::pair{reconcile::PodFields(), &reconcile::TrimPod},
                                     std::pair{reconcile::NodeFields(), &reconcile::TrimNode}}) {
    const json parsed = k8s::ParseFiltered(line, *fields);
    const json cut = fields->Apply(json::parse(line, nullptr, /*allow_exceptions=*/false));
    same = same && parsed.is_discarded() == cut.is_discarded() &&
           (parsed.is_discarded() || parsed == cut);
    const k8s::Result<k8s::WatchEvent> filtered = k8s::DecodeWatchEvent(line, fields);
    same = same && filtered.ok() == whole.ok();
    if (!same)
      break;
    if (!whole.ok()) {
      same = filtered.error().code == whole.error().code &&
             filtered.error().reason == whole.error().reason &&
             filtered.error().message == whole.error().message;
      continue;
    }
    json from_whole = whole->object;
    trim(from_whole);
    json from_filtered = filtered->object;
    trim(from_filtered);
    same = same && filtered->type == whole->type && from_filtered == from_whole;
  }
  if (!same) {
    std::fprintf(stderr, "apiserver_object_fuzz: the filtered parse differs from the whole one\n");
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos)
      end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;

    RequireText(k8s::ErrorFromResponse(502, std::string(line)).message, "an error body");
    k8s::Result<k8s::WatchEvent> event = k8s::DecodeWatchEvent(line);
    SameWhenParsedFiltered(line, event);
    if (!event.ok()) {
      RequireText(event.error().message, "a watch error");
      continue;
    }
    json object = event->object;
    ReadObject(object);
    SameAfterTrim(object);
    for (void (*trim)(json&) : {k8s::StripManagedFields, reconcile::TrimPod, reconcile::TrimNode,
                                reconcile::TrimTrainingJob}) {
      json trimmed = object;
      trim(trimmed);
      ReadObject(trimmed);
    }
  }
  return 0;
}
