// An in-memory stand-in for kube-apiserver behind the HttpTransport seam, for unit tests of
// the REST client, reflector, informer, leader election and events. It implements the parts
// those use: CRUD with resourceVersion conflicts, merge and JSON patch, the status
// subresource, equality label selectors, lists in pages (limit and continue), and watches with
// history, compaction (410) and bookmarks. It is not a validator and knows no kinds. Thread-safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "controller/k8s/rest.h"
#include "controller/k8s/transport.h"

namespace tessera::k8s::testing {

class FakeApiServer : public HttpTransport {
 public:
  Result<HttpResponse> Send(const HttpRequest& request) override;
  Result<HttpResponse> Stream(const HttpRequest& request,
                              const std::function<bool(std::string_view line)>& on_line,
                              Cancellation& cancel) override;

  // The next `count` requests with this method ("" = any) fail: with HTTP `status`, or
  // with no response at all when status is 0.
  void FailNext(const std::string& method, int count, int status);
  // Forgets the watch history up to now: a watch from an older resourceVersion gets an
  // ERROR event with 410 Expired (as the real server does).
  void Compact();
  // While held, open watches deliver nothing (events queue up), as a stalled connection.
  void HoldWatches(bool hold);
  // Ends every open watch stream (as a server restart or timeout would).
  void CloseWatches();
  // Sends a BOOKMARK with the current resourceVersion to every open watch.
  void Bookmark();

  std::vector<HttpRequest> Requests() const;
  size_t CountRequests(const std::string& method, const std::string& path_prefix) const;
  int64_t ResourceVersion() const;
  size_t OpenWatches() const;
  // Waits until at least `n` watch streams are open; false on time-out.
  bool WaitForWatches(size_t n, std::chrono::milliseconds timeout) const;

 private:
  struct Parsed {
    std::string collection;  // "/api/v1/configmaps" (no namespace)
    std::string ns;
    std::string name;
    std::string subresource;
    std::map<std::string, std::string> query;
  };
  struct Change {
    int64_t rv;
    std::string collection;
    std::string type;
    Json object;
  };
  static Parsed Parse(const std::string& path);
  static bool Matches(const Json& object, const Parsed& p);
  HttpResponse Handle(const HttpRequest& request, const Parsed& p);
  void RecordLocked(const std::string& collection, const std::string& type, const Json& object);
  std::optional<int> TakeFailureLocked(const std::string& method);

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  int64_t rv_ = 100;
  int64_t compacted_ = 0;  // history before this rv is gone
  int64_t uid_ = 0;
  uint64_t close_generation_ = 0;
  int open_watches_ = 0;
  bool held_ = false;
  std::map<std::string, std::map<std::string, Json>> store_;  // collection -> "ns/name" -> obj
  std::vector<Change> history_;
  std::deque<std::pair<std::string, int>> failures_;  // (method, status)
  std::vector<HttpRequest> requests_;
};

}  // namespace tessera::k8s::testing
