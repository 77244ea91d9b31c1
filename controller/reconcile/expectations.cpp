#include "controller/reconcile/expectations.h"

namespace tessera::reconcile {

Expectations::Expectations(Clock::duration ttl) : ttl_(ttl) {}

Expectations::Pending& Expectations::Raise(const std::string& key) {
  Pending& p = pending_[key];
  if (p.Empty())
    p.since = Clock::now();
  return p;
}

void Expectations::PruneLocked(const std::string& key) {
  auto it = pending_.find(key);
  if (it != pending_.end() && it->second.Empty())
    pending_.erase(it);
}

void Expectations::ExpectCreation(const std::string& key, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  Raise(key).creates.insert(name);
}

void Expectations::CreationObserved(const std::string& key, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(key);
  if (it == pending_.end())
    return;
  it->second.creates.erase(name);
  PruneLocked(key);
}

void Expectations::CreationFailed(const std::string& key, const std::string& name) {
  CreationObserved(key, name);
}

void Expectations::ExpectDeletion(const std::string& key, const std::string& uid) {
  std::lock_guard<std::mutex> lock(mu_);
  Raise(key).deletes.insert(uid);
}

void Expectations::DeletionObserved(const std::string& key, const std::string& uid) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(key);
  if (it == pending_.end())
    return;
  it->second.deletes.erase(uid);
  PruneLocked(key);
}

void Expectations::ExpectStatus(const std::string& key, const std::string& resource_version) {
  if (resource_version.empty())
    return;
  std::lock_guard<std::mutex> lock(mu_);
  Raise(key).status_rv = resource_version;
}

void Expectations::StatusObserved(const std::string& key, const std::string& resource_version) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(key);
  if (it == pending_.end() || it->second.status_rv != resource_version)
    return;
  it->second.status_rv.clear();
  PruneLocked(key);
}

std::optional<std::string> Expectations::PendingStatus(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(key);
  if (it == pending_.end() || it->second.status_rv.empty())
    return std::nullopt;
  return it->second.status_rv;
}

void Expectations::ClearStatus(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(key);
  if (it == pending_.end())
    return;
  it->second.status_rv.clear();
  PruneLocked(key);
}

bool Expectations::Satisfied(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(key);
  if (it == pending_.end())
    return true;
  if (Clock::now() - it->second.since >= ttl_) {
    pending_.erase(it);
    return true;
  }
  return false;
}

Expectations::Clock::duration Expectations::TimeToExpiry(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(key);
  if (it == pending_.end())
    return Clock::duration::zero();
  const auto left = it->second.since + ttl_ - Clock::now();
  return left > Clock::duration::zero() ? left : Clock::duration::zero();
}

void Expectations::Forget(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.erase(key);
}

size_t Expectations::PendingJobs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.size();
}

}  // namespace tessera::reconcile
