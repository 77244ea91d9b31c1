#include "tests/unit/k8s/fake_apiserver.h"

#include <sstream>

namespace tessera::k8s::testing {
namespace {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep)) {
    if (!part.empty())
      out.push_back(part);
  }
  return out;
}

std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out.push_back(static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

HttpResponse JsonResponse(int status, const Json& body) {
  HttpResponse r;
  r.status = status;
  r.headers["content-type"] = "application/json";
  r.body = body.dump();
  return r;
}

Json StatusBody(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"}, {"apiVersion", "v1"}, {"status", code < 300 ? "Success" : "Failure"},
          {"code", code},     {"reason", reason},   {"message", message}};
}

HttpResponse Error(int code, const std::string& reason, const std::string& message) {
  return JsonResponse(code, StatusBody(code, reason, message));
}

std::string NsName(const std::string& ns, const std::string& name) {
  return ns.empty() ? name : ns + "/" + name;
}

}  // namespace

FakeApiServer::Parsed FakeApiServer::Parse(const std::string& full) {
  Parsed p;
  std::string path = full.substr(0, full.find('?'));
  if (auto q = full.find('?'); q != std::string::npos) {
    for (const auto& kv : Split(full.substr(q + 1), '&')) {
      auto eq = kv.find('=');
      p.query[kv.substr(0, eq)] = eq == std::string::npos ? "" : Unescape(kv.substr(eq + 1));
    }
  }
  auto parts = Split(path, '/');
  // api/v1/... or apis/group/version/...
  size_t i = parts[0] == "api" ? 2 : 3;
  std::string prefix;
  for (size_t j = 0; j < i; ++j)
    prefix += "/" + parts[j];
  if (i + 1 < parts.size() && parts[i] == "namespaces" && parts.size() > i + 2) {
    p.ns = parts[i + 1];
    i += 2;
  }
  p.collection = prefix + "/" + parts[i];
  if (i + 1 < parts.size())
    p.name = parts[i + 1];
  if (i + 2 < parts.size())
    p.subresource = parts[i + 2];
  return p;
}

bool FakeApiServer::Matches(const Json& object, const Parsed& p) {
  const Json& meta = object.value("metadata", Json::object());
  if (!p.ns.empty() && meta.value("namespace", "") != p.ns)
    return false;
  auto sel = p.query.find("labelSelector");
  if (sel == p.query.end())
    return true;
  const Json& labels = meta.value("labels", Json::object());
  for (const auto& term : Split(sel->second, ',')) {
    auto eq = term.find('=');
    std::string key = term.substr(0, eq);
    std::string value = term.substr(eq + 1);
    if (!labels.contains(key) || labels[key] != value)
      return false;
  }
  return true;
}

void FakeApiServer::RecordLocked(const std::string& collection, const std::string& type,
                                 const Json& object) {
  history_.push_back({rv_, collection, type, object});
  cv_.notify_all();
}

std::optional<int> FakeApiServer::TakeFailureLocked(const std::string& method) {
  for (auto it = failures_.begin(); it != failures_.end(); ++it) {
    if (it->first.empty() || it->first == method) {
      int status = it->second;
      failures_.erase(it);
      return status;
    }
  }
  return std::nullopt;
}

Result<HttpResponse> FakeApiServer::Send(const HttpRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  requests_.push_back(request);
  if (auto status = TakeFailureLocked(request.method)) {
    if (*status == 0)
      return ApiError{0, "Transport", "connection refused (injected)"};
    return Error(*status, "InternalError", "injected failure");
  }
  return Handle(request, Parse(request.path));
}

HttpResponse FakeApiServer::Handle(const HttpRequest& request, const Parsed& p) {
  auto& objects = store_[p.collection];
  const std::string key = NsName(p.ns, p.name);
  if (request.method == "GET" && !p.name.empty()) {
    auto it = objects.find(key);
    if (it == objects.end())
      return Error(404, "NotFound", p.name + " not found");
    return JsonResponse(200, it->second);
  }
  if (request.method == "GET") {
    // In pages of `limit` items, in key order; the continue token is the last key handed out.
    const int64_t limit = p.query.count("limit") ? std::stoll(p.query.at("limit")) : 0;
    const std::string after = p.query.count("continue") ? p.query.at("continue") : "";
    Json items = Json::array();
    std::string last, next;
    for (auto it = after.empty() ? objects.begin() : objects.upper_bound(after);
         it != objects.end(); ++it) {
      if (!Matches(it->second, p))
        continue;
      if (limit > 0 && static_cast<int64_t>(items.size()) == limit) {
        next = last;
        break;
      }
      items.push_back(it->second);
      last = it->first;
    }
    Json meta = {{"resourceVersion", std::to_string(rv_)}};
    if (!next.empty())
      meta["continue"] = next;
    return JsonResponse(200, {{"kind", "List"}, {"metadata", meta}, {"items", items}});
  }
  Json body = Json::parse(request.body, nullptr, false);
  if (request.method == "POST") {
    if (body.is_discarded())
      return Error(400, "BadRequest", "body is not JSON");
    Json& meta = body["metadata"];
    std::string name = meta.value("name", "");
    if (name.empty())
      return Error(422, "Invalid", "metadata.name: Required value");
    if (!p.ns.empty())
      meta["namespace"] = p.ns;
    std::string k = NsName(p.ns, name);
    if (objects.count(k))
      return Error(409, "AlreadyExists", name + " already exists");
    ++rv_;
    meta["resourceVersion"] = std::to_string(rv_);
    meta["uid"] = "uid-" + std::to_string(++uid_);
    meta["creationTimestamp"] = "2026-01-01T00:00:00Z";
    objects[k] = body;
    RecordLocked(p.collection, "ADDED", body);
    return JsonResponse(201, body);
  }
  auto it = objects.find(key);
  if (it == objects.end())
    return Error(404, "NotFound", p.name + " not found");
  Json& current = it->second;
  if (request.method == "DELETE") {
    Json gone = current;
    objects.erase(it);
    ++rv_;
    gone["metadata"]["resourceVersion"] = std::to_string(rv_);
    RecordLocked(p.collection, "DELETED", gone);
    return JsonResponse(200, StatusBody(200, "", ""));
  }
  Json updated;
  if (request.method == "PUT") {
    if (body.is_discarded())
      return Error(400, "BadRequest", "body is not JSON");
    std::string want = body.value("metadata", Json::object()).value("resourceVersion", "");
    if (!want.empty() && want != current["metadata"]["resourceVersion"]) {
      return Error(409, "Conflict",
                   "Operation cannot be fulfilled on " + p.name +
                       ": the object has been modified; please apply your changes to the "
                       "latest version and try again");
    }
    updated = body;
  } else if (request.method == "PATCH") {
    auto ct = request.headers.find("Content-Type");
    std::string type = ct == request.headers.end() ? "" : ct->second;
    try {
      if (type == "application/json-patch+json") {
        updated = current.patch(body);
      } else {
        updated = current;
        updated.merge_patch(body);
      }
    } catch (const std::exception& e) {
      return Error(422, "Invalid", e.what());
    }
  } else {
    return Error(405, "MethodNotAllowed", request.method);
  }
  if (p.subresource == "status") {
    Json status = updated.value("status", Json());
    updated = current;
    updated["status"] = status;
  } else if (current.contains("status")) {
    updated["status"] = current["status"];
  }
  updated["metadata"]["name"] = current["metadata"]["name"];
  updated["metadata"]["uid"] = current["metadata"]["uid"];
  if (!p.ns.empty())
    updated["metadata"]["namespace"] = p.ns;
  ++rv_;
  updated["metadata"]["resourceVersion"] = std::to_string(rv_);
  current = updated;
  RecordLocked(p.collection, "MODIFIED", updated);
  return JsonResponse(200, updated);
}

Result<HttpResponse> FakeApiServer::Stream(const HttpRequest& request,
                                           const std::function<bool(std::string_view)>& on_line,
                                           Cancellation& cancel) {
  std::unique_lock<std::mutex> lock(mu_);
  requests_.push_back(request);
  if (auto status = TakeFailureLocked(request.method)) {
    if (*status == 0)
      return ApiError{0, "Transport", "connection refused (injected)"};
    return Error(*status, "InternalError", "injected failure");
  }
  Parsed p = Parse(request.path);
  HttpResponse ok;
  ok.status = 200;
  int64_t from = p.query.count("resourceVersion") && !p.query["resourceVersion"].empty()
                     ? std::stoll(p.query["resourceVersion"])
                     : rv_;
  auto send = [&](const Json& event) {
    std::string line = event.dump();
    lock.unlock();
    bool more = on_line(line);
    lock.lock();
    return more;
  };
  if (from < compacted_) {
    send({{"type", "ERROR"},
          {"object", StatusBody(410, "Expired",
                                "too old resource version: " + std::to_string(from) + " (" +
                                    std::to_string(compacted_) + ")")}});
    return ok;
  }
  uint64_t generation = close_generation_;
  bool bookmarks = p.query["allowWatchBookmarks"] == "true";
  ++open_watches_;
  cv_.notify_all();
  uint64_t reg = 0;
  lock.unlock();
  reg = cancel.Register([this] {
    std::lock_guard<std::mutex> l(mu_);
    cv_.notify_all();
  });
  lock.lock();
  size_t next = 0;
  while (!cancel.IsCancelled() && generation == close_generation_) {
    bool stop = false;
    for (; !held_ && next < history_.size(); ++next) {
      const Change& c = history_[next];
      if (c.rv <= from)
        continue;
      Json event;
      if (c.type == "BOOKMARK") {
        if (!bookmarks)
          continue;
        event = {{"type", "BOOKMARK"},
                 {"object", {{"metadata", {{"resourceVersion", std::to_string(c.rv)}}}}}};
      } else if (c.collection != p.collection || !Matches(c.object, p)) {
        continue;
      } else {
        event = {{"type", c.type}, {"object", c.object}};
      }
      if (!send(event)) {
        stop = true;
        break;
      }
    }
    if (stop)
      break;
    cv_.wait(lock, [&] {
      return cancel.IsCancelled() || generation != close_generation_ ||
             (!held_ && next < history_.size());
    });
  }
  --open_watches_;
  lock.unlock();
  cancel.Unregister(reg);
  if (cancel.IsCancelled())
    return ApiError{0, "Cancelled", "stream cancelled"};
  return ok;
}

void FakeApiServer::FailNext(const std::string& method, int count, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int i = 0; i < count; ++i)
    failures_.emplace_back(method, status);
}

void FakeApiServer::Compact() {
  std::lock_guard<std::mutex> lock(mu_);
  compacted_ = rv_;  // running watches keep going, as with etcd compaction
}

void FakeApiServer::HoldWatches(bool hold) {
  std::lock_guard<std::mutex> lock(mu_);
  held_ = hold;
  cv_.notify_all();
}

void FakeApiServer::CloseWatches() {
  std::lock_guard<std::mutex> lock(mu_);
  ++close_generation_;
  cv_.notify_all();
}

void FakeApiServer::Bookmark() {
  std::lock_guard<std::mutex> lock(mu_);
  ++rv_;  // bookmarks carry a version newer than any event the watcher has seen
  history_.push_back({rv_, "", "BOOKMARK", Json::object()});
  cv_.notify_all();
}

std::vector<HttpRequest> FakeApiServer::Requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

size_t FakeApiServer::CountRequests(const std::string& method,
                                    const std::string& path_prefix) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& r : requests_) {
    if (r.method == method && r.path.rfind(path_prefix, 0) == 0)
      ++n;
  }
  return n;
}

int64_t FakeApiServer::ResourceVersion() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rv_;
}

size_t FakeApiServer::OpenWatches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<size_t>(open_watches_);
}

bool FakeApiServer::WaitForWatches(size_t n, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return static_cast<size_t>(open_watches_) >= n; });
}

}  // namespace tessera::k8s::testing
