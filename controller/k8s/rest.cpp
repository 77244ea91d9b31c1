#include "controller/k8s/rest.h"

#include "api/utf8.h"
#include "controller/k8s/object.h"

#include <utility>

namespace tessera::k8s {

ResourceRef ResourceRef::InNamespace(std::string ns) const {
  ResourceRef r = *this;
  r.namespace_ = std::move(ns);
  return r;
}

ResourceRef ResourceRef::Named(std::string n) const {
  ResourceRef r = *this;
  r.name = std::move(n);
  return r;
}

std::string ResourceRef::Path(const std::string& subresource) const {
  std::string p = group.empty() ? "/api/" + version : "/apis/" + group + "/" + version;
  if (!namespace_.empty())
    p += "/namespaces/" + namespace_;
  p += "/" + resource;
  if (!name.empty())
    p += "/" + name;
  if (!subresource.empty())
    p += "/" + subresource;
  return p;
}

ResourceRef ConfigMaps(std::string ns) {
  return {"", "v1", "configmaps", std::move(ns), ""};
}
ResourceRef Pods(std::string ns) {
  return {"", "v1", "pods", std::move(ns), ""};
}
ResourceRef Services(std::string ns) {
  return {"", "v1", "services", std::move(ns), ""};
}
ResourceRef Secrets(std::string ns) {
  return {"", "v1", "secrets", std::move(ns), ""};
}
ResourceRef Namespaces() {
  return {"", "v1", "namespaces", "", ""};
}
ResourceRef Nodes() {
  return {"", "v1", "nodes", "", ""};
}
ResourceRef Leases(std::string ns) {
  return {"coordination.k8s.io", "v1", "leases", std::move(ns), ""};
}
ResourceRef Events(std::string ns) {
  return {"events.k8s.io", "v1", "events", std::move(ns), ""};
}

ResourceRef EndpointSlices(std::string ns) {
  return {"discovery.k8s.io", "v1", "endpointslices", std::move(ns), ""};
}

void RequestCounters::Record(const std::string& verb, int code) {
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[{verb, code}];
}

int64_t RequestCounters::Get(const std::string& verb, int code) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = counts_.find({verb, code});
  return it == counts_.end() ? 0 : it->second;
}

std::map<std::pair<std::string, int>, int64_t> RequestCounters::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

RequestObserver RequestCounters::Observer() {
  return [this](const std::string& verb, int code) { Record(verb, code); };
}

std::string QueryEscape(const std::string& value) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

namespace {

// `text` on one line, as ApiError::ToString promises: runs of blanks and line breaks become
// one space, none at either end.
std::string OneLine(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool blank = c == ' ' || c == '\n' || c == '\r' || c == '\t';
    if (!blank)
      out.push_back(c);
    else if (!out.empty() && out.back() != ' ')
      out.push_back(' ');
  }
  if (!out.empty() && out.back() == ' ')
    out.pop_back();
  return out;
}

}  // namespace

ApiError ErrorFromResponse(int status, const std::string& body, std::string_view location) {
  ApiError err{status, "", ""};
  Json parsed = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (StringAt(parsed, "kind") == "Status") {
    err.reason = StringAt(parsed, "reason");
    err.message = StringAt(parsed, "message");
  } else if (status >= 300 && status < 400) {
    // A proxy or a plain-HTTP port in front of the API server, most likely.
    err.reason = "Redirect";
    err.message =
        "the server redirected to " +
        (location.empty() ? std::string("(no Location)") : api::ValidUtf8Prefix(location, 512)) +
        ", which is not followed: set the kubeconfig's server to the API server's "
        "own address";
  } else {
    // Not a Status (a proxy's page, say): quoted in events and logs, so valid UTF-8.
    err.message = OneLine(api::ValidUtf8Prefix(body, 512));
  }
  if (err.reason.empty()) {
    switch (status) {
      case 400:
        err.reason = "BadRequest";
        break;
      case 401:
        err.reason = "Unauthorized";
        break;
      case 403:
        err.reason = "Forbidden";
        break;
      case 404:
        err.reason = "NotFound";
        break;
      case 409:
        err.reason = "Conflict";
        break;
      case 410:
        err.reason = "Gone";
        break;
      case 422:
        err.reason = "Invalid";
        break;
      case 429:
        err.reason = "TooManyRequests";
        break;
      default:
        err.reason = status >= 500 ? "InternalError" : "Unknown";
    }
  }
  return err;
}

namespace {

std::string_view Location(const HttpResponse& response) {
  auto it = response.headers.find("location");
  return it == response.headers.end() ? std::string_view() : std::string_view(it->second);
}

void AddQuery(std::string& path, const char* key, const std::string& value) {
  if (value.empty())
    return;
  path += path.find('?') == std::string::npos ? '?' : '&';
  path += key;
  path += '=';
  path += QueryEscape(value);
}

const char* PatchContentType(PatchType type) {
  switch (type) {
    case PatchType::kMerge:
      return "application/merge-patch+json";
    case PatchType::kJson:
      return "application/json-patch+json";
    case PatchType::kStrategic:
      return "application/strategic-merge-patch+json";
  }
  return "application/merge-patch+json";
}

// While it lives, cancelling `from` (when not null) cancels `to`.
class CancelLink {
 public:
  CancelLink(Cancellation* from, Cancellation& to)
      : from_(from), id_(from != nullptr ? from->Register([&to] { to.Cancel(); }) : 0) {}
  ~CancelLink() {
    if (from_ != nullptr)
      from_->Unregister(id_);
  }
  CancelLink(const CancelLink&) = delete;
  CancelLink& operator=(const CancelLink&) = delete;

 private:
  Cancellation* from_;
  uint64_t id_;
};

}  // namespace

RestClient::RestClient(HttpTransport& transport, const ClientConfig& config, RestOptions options)
    : transport_(transport),
      token_(config.token),
      options_(std::move(options)),
      limiter_(options_.qps, options_.burst) {}

void RestClient::Authorize(HttpRequest& request) {
  request.headers["Accept"] = "application/json";
  if (token_) {
    std::string token = token_->Token();
    if (!token.empty())
      request.headers["Authorization"] = "Bearer " + token;
  }
}

void RestClient::Observe(const std::string& verb, int code) {
  if (options_.observer)
    options_.observer(verb, code);
}

Result<Json> RestClient::Do(const std::string& verb, const std::string& method,
                            const std::string& path, const Json* body,
                            const std::string& content_type, const FieldFilter* response_filter,
                            const CallOptions& call) {
  // The client's cancellation (shutdown) and the call's both end the call: with both, one
  // Cancellation that either cancels.
  const bool both = call.cancel != nullptr && options_.cancel != nullptr;
  Cancellation either;
  CancelLink from_client(both ? options_.cancel : nullptr, either);
  CancelLink from_call(both ? call.cancel : nullptr, either);
  Cancellation* cancel = both ? &either : (call.cancel != nullptr ? call.cancel : options_.cancel);
  const auto cancelled = [] { return ApiError{0, "Cancelled", "request cancelled"}; };
  const auto too_late = [] {
    return ApiError{0, "Timeout", "the call's deadline passed before it could be sent"};
  };
  if (!limiter_.Wait(cancel, call.deadline))
    return cancel != nullptr && cancel->IsCancelled() ? cancelled() : too_late();
  if (cancel != nullptr && cancel->IsCancelled())
    return cancelled();
  if (call.deadline && std::chrono::steady_clock::now() >= *call.deadline)
    return too_late();
  HttpRequest request;
  request.method = method;
  request.path = path;
  request.timeout = options_.timeout;
  request.cancel = cancel;
  request.deadline = call.deadline;
  Authorize(request);
  if (body) {
    request.headers["Content-Type"] = content_type;
    // Invalid UTF-8 (no JSON string can hold it) becomes U+FFFD instead of an exception that
    // would end the caller's reconcile every time.
    request.body = body->dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  auto response = transport_.Send(request);
  if (!response.ok()) {
    Observe(verb, 0);
    return response.error();
  }
  Observe(verb, response->status);
  if (response->status < 200 || response->status >= 300) {
    return ErrorFromResponse(response->status, response->body, Location(*response));
  }
  Json parsed = response_filter != nullptr
                    ? ParseFiltered(response->body, *response_filter)
                    : Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return ApiError{
        response->status, "InvalidResponse",
        "the server's response is not JSON: " + api::ValidUtf8Prefix(response->body, 200)};
  }
  return parsed;
}

Result<Json> RestClient::Get(const ResourceRef& ref, const CallOptions& call) {
  return Do("get", "GET", ref.Path(), nullptr, "application/json", nullptr, call);
}

Result<Json> RestClient::Discover(const std::string& group, const std::string& version) {
  return Do("get", "GET", group.empty() ? "/api/" + version : "/apis/" + group + "/" + version,
            nullptr);
}

Result<Json> RestClient::List(const ResourceRef& ref, const ListOptions& options) {
  std::string path = ref.Named("").Path();
  AddQuery(path, "labelSelector", options.label_selector);
  AddQuery(path, "fieldSelector", options.field_selector);
  AddQuery(path, "resourceVersion", options.resource_version);
  if (options.limit > 0)
    AddQuery(path, "limit", std::to_string(options.limit));
  AddQuery(path, "continue", options.continue_token);
  if (options.item_filter == nullptr)
    return Do("list", "GET", path, nullptr);
  // The list's own metadata (resourceVersion, continue) whole; of each item what is asked.
  const FieldFilter filter =
      FieldFilter::Under("items", options.item_filter, {"apiVersion", "kind", "metadata"});
  return Do("list", "GET", path, nullptr, "application/json", &filter);
}

Result<Json> RestClient::Create(const ResourceRef& ref, const Json& object,
                                const CallOptions& call) {
  return Do("create", "POST", ref.Named("").Path(), &object, "application/json", nullptr, call);
}

Result<Json> RestClient::Update(const ResourceRef& ref, const Json& object,
                                const CallOptions& call) {
  return Do("update", "PUT", ref.Path(), &object, "application/json", nullptr, call);
}

Result<Json> RestClient::Patch(const ResourceRef& ref, PatchType type, const Json& patch,
                               const CallOptions& call) {
  return Do("patch", "PATCH", ref.Path(), &patch, PatchContentType(type), nullptr, call);
}

Result<Json> RestClient::Delete(const ResourceRef& ref, const DeleteOptions& options,
                                const CallOptions& call) {
  Json body = {{"apiVersion", "v1"}, {"kind", "DeleteOptions"}};
  if (options.propagation_policy)
    body["propagationPolicy"] = *options.propagation_policy;
  if (options.grace_period_seconds)
    body["gracePeriodSeconds"] = *options.grace_period_seconds;
  if (options.precondition_uid)
    body["preconditions"]["uid"] = *options.precondition_uid;
  if (options.precondition_resource_version) {
    body["preconditions"]["resourceVersion"] = *options.precondition_resource_version;
  }
  return Do("delete", "DELETE", ref.Path(), &body, "application/json", nullptr, call);
}

Result<Json> RestClient::UpdateStatus(const ResourceRef& ref, const Json& object,
                                      const CallOptions& call) {
  return Do("update", "PUT", ref.Path("status"), &object, "application/json", nullptr, call);
}

Result<Json> RestClient::PatchStatus(const ResourceRef& ref, PatchType type, const Json& patch,
                                     const CallOptions& call) {
  return Do("patch", "PATCH", ref.Path("status"), &patch, PatchContentType(type), nullptr, call);
}

Result<WatchEvent> DecodeWatchEvent(std::string_view line,
                                    std::shared_ptr<const FieldFilter> object_filter) {
  Json parsed;
  if (object_filter != nullptr) {
    parsed = ParseFiltered(line, FieldFilter::Under("object", std::move(object_filter), {"type"}));
    // An ERROR's object is a Status, which the filter (made for the watched kind) would cut.
    if (StringAt(parsed, "type") == "ERROR")
      return DecodeWatchEvent(line);
  } else {
    parsed = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  }
  auto type = parsed.is_object() ? parsed.find("type") : parsed.end();
  auto object = parsed.is_object() ? parsed.find("object") : parsed.end();
  if (!parsed.is_object() || type == parsed.end() || !type->is_string() || object == parsed.end() ||
      !object->is_object()) {
    return ApiError{200, "InvalidResponse",
                    "watch event is not JSON: " + api::ValidUtf8Prefix(line, 200)};
  }
  WatchEvent event{type->get<std::string>(), std::move(*object)};
  if (event.type != "ERROR")
    return event;
  // A metav1.Status: 410 Gone (Expired) when our resourceVersion was compacted away.
  const Json& s = event.object;
  auto code = s.find("code");
  ApiError err{500, StringAt(s, "reason"), StringAt(s, "message")};
  if (code != s.end() && code->is_number_integer() && code->get<int64_t>() >= 100 &&
      code->get<int64_t>() <= 599)
    err.code = static_cast<int>(code->get<int64_t>());
  if (err.reason.empty())
    err.reason = ErrorFromResponse(err.code, "").reason;  // the Status's message stays
  return err;
}

Status RestClient::Watch(const ResourceRef& ref, const WatchOptions& options,
                         const std::function<bool(const WatchEvent&)>& on_event,
                         Cancellation& cancel) {
  if (!limiter_.Wait(&cancel))
    return Status::Ok();  // cancelled while waiting for the rate limiter
  std::string path = ref.Named("").Path() + "?watch=true";
  AddQuery(path, "labelSelector", options.label_selector);
  AddQuery(path, "fieldSelector", options.field_selector);
  AddQuery(path, "resourceVersion", options.resource_version);
  if (options.allow_bookmarks)
    AddQuery(path, "allowWatchBookmarks", "true");
  if (options.timeout_seconds > 0) {
    AddQuery(path, "timeoutSeconds", std::to_string(options.timeout_seconds));
  }
  HttpRequest request;
  request.path = path;
  // The server may be silent for a while (bookmarks come about once a minute): allow the
  // whole watch plus a margin before the transport gives up.
  request.timeout = std::chrono::seconds(std::max(options.timeout_seconds, 60) + 30);
  Authorize(request);

  std::optional<ApiError> stream_error;
  auto response = transport_.Stream(
      request,
      [&](std::string_view line) {
        Result<WatchEvent> event = DecodeWatchEvent(line, options.object_filter);
        if (!event.ok()) {
          stream_error = event.error();
          return false;
        }
        return on_event(*event);
      },
      cancel);
  if (!response.ok()) {
    Observe("watch", 0);
    if (cancel.IsCancelled())
      return Status::Ok();
    return response.error();
  }
  Observe("watch", response->status);
  if (response->status < 200 || response->status >= 300) {
    return ErrorFromResponse(response->status, response->body, Location(*response));
  }
  if (stream_error)
    return *stream_error;
  return Status::Ok();
}

}  // namespace tessera::k8s
