// A small REST client for any Kubernetes resource: get, list, create, update, patch, delete
// and the status subresource, with JSON bodies (nlohmann), bearer tokens, client-side QPS and
// burst, and per-verb request counters. It does not cache, retry or watch (see watch.h).
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "controller/k8s/config.h"
#include "controller/k8s/field_filter.h"
#include "controller/k8s/rate_limiter.h"
#include "controller/k8s/result.h"
#include "controller/k8s/transport.h"

namespace tessera::k8s {

using Json = nlohmann::json;

// Which resource (and optionally which object). Group "" is the core API (/api/v1).
// An empty namespace_ means cluster-scoped, or all namespaces for a list or watch.
struct ResourceRef {
  std::string group;
  std::string version;
  std::string resource;  // plural, lower case: "configmaps", "leases"
  std::string namespace_;
  std::string name;

  ResourceRef InNamespace(std::string ns) const;
  ResourceRef Named(std::string n) const;
  // "/api/v1/namespaces/ns/configmaps/name" or "/apis/group/version/..."; `subresource`
  // (e.g. "status") is appended after the name.
  std::string Path(const std::string& subresource = "") const;
};

// Common resources.
ResourceRef ConfigMaps(std::string ns = "");
ResourceRef Pods(std::string ns = "");
ResourceRef Services(std::string ns = "");
ResourceRef Secrets(std::string ns = "");
ResourceRef Namespaces();
ResourceRef Nodes();
ResourceRef Leases(std::string ns = "");
ResourceRef Events(std::string ns = "");          // events.k8s.io/v1
ResourceRef EndpointSlices(std::string ns = "");  // discovery.k8s.io/v1

struct ListOptions {
  std::string label_selector;  // "a=b,c!=d"
  std::string field_selector;
  std::string resource_version;  // "" = most recent (quorum read)
  int64_t limit = 0;             // page size; 0 = everything in one response
  std::string continue_token;
  // Keep only these fields of each item (field_filter.h); null keeps everything.
  std::shared_ptr<const FieldFilter> item_filter;
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;  // start after this version
  bool allow_bookmarks = true;
  int timeout_seconds = 300;  // the server ends the watch after this long
  // Keep only these fields of each event's object (ERROR events are kept whole); null keeps
  // everything.
  std::shared_ptr<const FieldFilter> object_filter;
};

enum class PatchType {
  kMerge,      // application/merge-patch+json (RFC 7386)
  kJson,       // application/json-patch+json (RFC 6902)
  kStrategic,  // application/strategic-merge-patch+json (built-in kinds only)
};

struct DeleteOptions {
  std::optional<std::string> propagation_policy;  // "Foreground", "Background", "Orphan"
  std::optional<int64_t> grace_period_seconds;    // 0 = force delete
  std::optional<std::string> precondition_uid;
  std::optional<std::string> precondition_resource_version;
};

// One event of a watch stream.
struct WatchEvent {
  std::string type;  // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
  Json object;       // the object; for ERROR a metav1.Status
};

// Called once per finished request with the verb (get, list, create, update, patch, delete,
// watch) and the HTTP code (0 when no response came back). Must be thread-safe and cheap.
using RequestObserver = std::function<void(const std::string& verb, int code)>;

// Counts requests by {verb, code}: the data behind api_requests_total. Thread-safe.
class RequestCounters {
 public:
  void Record(const std::string& verb, int code);
  int64_t Get(const std::string& verb, int code) const;
  std::map<std::pair<std::string, int>, int64_t> Snapshot() const;
  // An observer that records into this object (which must outlive the client).
  RequestObserver Observer();

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> counts_;
};

struct RestOptions {
  double qps = 20;  // client-side limit on requests per second (<= 0: unlimited)
  int burst = 30;
  std::chrono::milliseconds timeout{30000};  // for every request except watches
  RequestObserver observer;                  // optional
  // Optional; must outlive the client. Once it is cancelled (at shutdown) every request except
  // watches, in flight, waiting for the rate limiter or made later, ends promptly with an
  // ApiError {0, "Cancelled"}. Watches end by their own `cancel`.
  Cancellation* cancel = nullptr;
};

// Bounds for one call, besides the client's own (RestOptions).
struct CallOptions {
  // The call (its wait for the rate limiter included) ends by this time, with an ApiError
  // {0, "Timeout"}: it is not sent when the time has passed or the limiter's delay would pass
  // it. Lets a caller bound several requests together.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Optional: cancelling it ends the call as RestOptions::cancel does. Must outlive the call.
  Cancellation* cancel = nullptr;
};

// Thread-safe: share one RestClient among all workers and informers.
class RestClient {
 public:
  // `transport` must outlive the client. `config` supplies the bearer token (if any).
  RestClient(HttpTransport& transport, const ClientConfig& config, RestOptions options = {});

  // The single-object verbs below take optional per-call bounds (CallOptions).
  Result<Json> Get(const ResourceRef& ref, const CallOptions& call = {});
  // The discovery document of group/version (/apis/<group>/<version>, /api/v1 for the core
  // group ""): an APIResourceList. 404 when the server does not serve that group/version.
  Result<Json> Discover(const std::string& group, const std::string& version);
  // Returns the List object ({"metadata": {"resourceVersion"...}, "items": [...]}).
  Result<Json> List(const ResourceRef& ref, const ListOptions& options = {});
  // Creates `object` in ref's namespace (ref.name is ignored).
  Result<Json> Create(const ResourceRef& ref, const Json& object, const CallOptions& call = {});
  // Replaces the object (PUT). Include metadata.resourceVersion for optimistic concurrency:
  // a stale one fails with a 409 Conflict.
  Result<Json> Update(const ResourceRef& ref, const Json& object, const CallOptions& call = {});
  Result<Json> Patch(const ResourceRef& ref, PatchType type, const Json& patch,
                     const CallOptions& call = {});
  // Returns what the server returns: the object (when finalizers delay it) or a Status.
  Result<Json> Delete(const ResourceRef& ref, const DeleteOptions& options = {},
                      const CallOptions& call = {});
  // The status subresource: only .status of `object` is applied.
  Result<Json> UpdateStatus(const ResourceRef& ref, const Json& object,
                            const CallOptions& call = {});
  Result<Json> PatchStatus(const ResourceRef& ref, PatchType type, const Json& patch,
                           const CallOptions& call = {});

  // Watches ref's collection; calls `on_event` for every event until the server ends the
  // stream (returns Ok), `on_event` returns false (Ok), `cancel` fires (Ok) or the request
  // fails (the error; 410 Gone when the resourceVersion is too old).
  Status Watch(const ResourceRef& ref, const WatchOptions& options,
               const std::function<bool(const WatchEvent&)>& on_event, Cancellation& cancel);

 private:
  // `response_filter`: parse the response keeping only what it keeps (null: everything).
  Result<Json> Do(const std::string& verb, const std::string& method, const std::string& path,
                  const Json* body, const std::string& content_type = "application/json",
                  const FieldFilter* response_filter = nullptr, const CallOptions& call = {});
  void Authorize(HttpRequest& request);
  void Observe(const std::string& verb, int code);

  HttpTransport& transport_;
  std::shared_ptr<TokenSource> token_;
  RestOptions options_;
  TokenBucket limiter_;
};

// Turns a non-2xx response into an ApiError, reading the metav1.Status body when present. A
// 3xx (the transport follows no redirect) becomes reason "Redirect", naming `location`.
ApiError ErrorFromResponse(int status, const std::string& body, std::string_view location = {});
// One line of a watch stream: the event; an ERROR event's metav1.Status as an ApiError; or an
// ApiError "InvalidResponse" for a line that is not {"type": string, "object": object}. With
// `object_filter` the object holds only the fields it keeps (an ERROR's Status: all).
Result<WatchEvent> DecodeWatchEvent(std::string_view line,
                                    std::shared_ptr<const FieldFilter> object_filter = nullptr);
// Percent-encodes a query parameter value.
std::string QueryEscape(const std::string& value);

}  // namespace tessera::k8s
