#include "controller/k8s/discovery.h"

#include "controller/k8s/object.h"

namespace tessera::k8s {
namespace {

bool Lists(const Json& resources, const std::string& resource) {
  if (!resources.is_array())
    return false;
  for (const Json& r : resources) {
    if (StringAt(r, "name") == resource)
      return true;
  }
  return false;
}

}  // namespace

Discovery::Discovery(RestClient& client, DiscoveryOptions options)
    : client_(client), options_(options) {}

Result<bool> Discovery::Serves(const std::string& group, const std::string& version,
                               const std::string& resource) {
  const auto key = std::make_pair(group, version);
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end() && now < it->second.expires)
      return Lists(it->second.resources, resource);
  }
  // Outside the lock: a slow server must not hold up lookups answered from memory.
  auto list = client_.Discover(group, version);
  Json resources;
  if (list.ok()) {
    if (auto it = list->find("resources"); it != list->end() && it->is_array())
      resources = std::move(*it);
  } else if (!list.error().IsNotFound()) {
    return list.error();
  }
  std::lock_guard<std::mutex> lock(mu_);
  cache_[key] = Entry{now + options_.ttl, resources};
  return Lists(resources, resource);
}

void Discovery::Invalidate(const std::string& group, const std::string& version) {
  std::lock_guard<std::mutex> lock(mu_);
  cache_.erase({group, version});
}

}  // namespace tessera::k8s
