// Expectations: per job, the writes the controller made that its informer caches have not
// shown yet (pods created, pods deleted, the status written). Until they are seen, or expire,
// the job is not decided again, so a cache that lags the controller's own writes never makes
// it create a pod twice or mistake a pod it just created for a missing one. The shape of
// client-go's ControllerExpectations. Thread-safe: reconcile workers raise expectations,
// informer handlers lower them.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace tessera::reconcile {

class Expectations {
 public:
  using Clock = std::chrono::steady_clock;
  // Expectations older than `ttl` count as met: a lost watch event delays a job at most this.
  explicit Expectations(Clock::duration ttl = std::chrono::minutes(2));

  // Before creating pod `name` of job `key`. Lower it with CreationObserved (the cache showed
  // the pod) or CreationFailed (the create did not happen).
  void ExpectCreation(const std::string& key, const std::string& name);
  void CreationObserved(const std::string& key, const std::string& name);
  void CreationFailed(const std::string& key, const std::string& name);

  // Before deleting the pod with `uid`. Lowered when the cache shows it gone or terminating,
  // or when the delete did not happen (404 counts as done).
  void ExpectDeletion(const std::string& key, const std::string& uid);
  void DeletionObserved(const std::string& key, const std::string& uid);

  // After writing the job's status, which the server stored as `resource_version`. Lowered
  // when the job cache shows that version (StatusObserved with it) or any later one that
  // carries the status (the caller checks).
  void ExpectStatus(const std::string& key, const std::string& resource_version);
  void StatusObserved(const std::string& key, const std::string& resource_version);
  // The resourceVersion an unmet status expectation waits for; nullopt when none.
  std::optional<std::string> PendingStatus(const std::string& key) const;
  void ClearStatus(const std::string& key);

  // True when nothing is pending for `key` (or what is pending has expired, which clears it).
  bool Satisfied(const std::string& key);
  // How long until what is pending for `key` expires; zero when satisfied.
  Clock::duration TimeToExpiry(const std::string& key) const;

  // Forgets everything about `key` (the job was deleted).
  void Forget(const std::string& key);

  // Jobs with anything pending (for tests and debugging).
  size_t PendingJobs() const;

 private:
  struct Pending {
    std::set<std::string> creates;  // pod names
    std::set<std::string> deletes;  // pod UIDs
    std::string status_rv;          // empty: none
    Clock::time_point since;        // when the oldest pending item was raised
    bool Empty() const { return creates.empty() && deletes.empty() && status_rv.empty(); }
  };
  Pending& Raise(const std::string& key);
  void PruneLocked(const std::string& key);

  Clock::duration ttl_;
  mutable std::mutex mu_;
  std::map<std::string, Pending> pending_;
};

}  // namespace tessera::reconcile
