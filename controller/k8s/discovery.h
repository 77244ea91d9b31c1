// Which resources the API server serves, from its discovery documents
// (GET /apis/<group>/<version>), remembered for a while so that many reconciles cost one
// request. For optional integrations whose CRD may or may not be installed (a gang
// scheduler's PodGroup). It does not watch CRDs: that would need permission to read them,
// while discovery is open to every authenticated user.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "controller/k8s/rest.h"
#include "controller/k8s/result.h"

namespace tessera::k8s {

struct DiscoveryOptions {
  // How long an answer (served or not) is remembered. A CRD installed meanwhile is noticed
  // at most this late.
  std::chrono::steady_clock::duration ttl = std::chrono::seconds(10);
};

// Thread-safe. `client` must outlive it.
class Discovery {
 public:
  explicit Discovery(RestClient& client, DiscoveryOptions options = {});
  Discovery(const Discovery&) = delete;
  Discovery& operator=(const Discovery&) = delete;

  // True when the server lists `resource` (plural) under group/version; false when it does
  // not serve group/version (404) or lists no such resource. A failed lookup (no answer, 403,
  // 5xx) is returned as its error and not remembered.
  Result<bool> Serves(const std::string& group, const std::string& version,
                      const std::string& resource);

  // Forgets what is remembered of group/version, e.g. after a create there answered 404.
  void Invalidate(const std::string& group, const std::string& version);

 private:
  struct Entry {
    std::chrono::steady_clock::time_point expires;
    Json resources;  // the APIResourceList's "resources", or null when not served
  };
  RestClient& client_;
  DiscoveryOptions options_;
  std::mutex mu_;
  std::map<std::pair<std::string, std::string>, Entry> cache_;
};

}  // namespace tessera::k8s
