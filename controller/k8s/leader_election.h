// Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection: one
// candidate holds the Lease and renews it; the others take over once it has not been renewed
// for leaseDuration (by their own clock), or at once when the holder releases it. Writes use
// the Lease's resourceVersion, so of two racing candidates one gets 409 and retries.
// It does not stop the caller's work when leadership is lost: on_stopped_leading must.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>

#include "controller/k8s/rest.h"

namespace tessera::k8s {

struct LeaderElectionConfig {
  std::string lease_namespace;
  std::string lease_name;
  std::string identity;  // unique per candidate, e.g. "<hostname>_<random>"
  std::chrono::milliseconds lease_duration{15000};  // how long a silent holder keeps the Lease
  std::chrono::milliseconds renew_deadline{10000};  // the leader gives up if it cannot renew
  std::chrono::milliseconds retry_period{2000};     // between attempts to acquire or renew
  bool release_on_cancel = true;  // on stop, hand the Lease back so a successor needn't wait
  // Called on the elector's thread; must return promptly (start work on another thread).
  std::function<void()> on_started_leading;
  std::function<void()> on_stopped_leading;
  std::function<void(const std::string& identity)> on_new_leader;  // optional
};

// One line describing what is wrong with `config`, starting "leader election: " (print it
// as it is), or "" when it is usable: lease_duration > renew_deadline > retry_period * 1.2,
// all positive, names set. tessera-controller checks the timings first, naming its flags.
std::string ValidateLeaderElectionConfig(const LeaderElectionConfig& config);

// Run() is meant for one thread; IsLeader() and ObservedLeader() may be called from any.
// Give it a RestClient of its own (as client-go gives leader election its own client
// config): another client's rate limit would delay renewals behind other traffic, and a
// client-wide cancellation (RestOptions::cancel) would prevent the release.
class LeaderElector {
 public:
  // `client` must outlive the elector. `config` must validate.
  LeaderElector(RestClient& client, LeaderElectionConfig config);

  // Campaigns until it holds the Lease (or `stop`), calls on_started_leading, renews every
  // retry_period until `stop` or until renew_deadline has passed since the last successful
  // renewal began, then calls on_stopped_leading (after releasing the Lease when stopped and
  // release_on_cancel). Each attempt's requests (a get, then a create or update) are bounded
  // together: while leading by the renew deadline, so a hung request cannot keep it leading
  // past it; while campaigning by renew_deadline from the attempt's start. `stop` cancels an
  // attempt in flight. The release is bounded by renew_deadline. Returns when it is no longer
  // leading (or never led and `stop` fired).
  void Run(Cancellation& stop);

  bool IsLeader() const { return leader_.load(); }
  std::string ObservedLeader() const;

 private:
  // One attempt, its requests bounded by `call`: true when this candidate holds the Lease
  // afterwards.
  bool TryAcquireOrRenew(const CallOptions& call);
  void Release();
  std::chrono::milliseconds Jittered(std::chrono::milliseconds d);

  RestClient& client_;
  LeaderElectionConfig config_;
  ResourceRef lease_;
  std::atomic<bool> leader_{false};

  mutable std::mutex mu_;
  std::string observed_holder_;
  Json observed_spec_;  // the Lease spec last seen, and when (our clock) it last changed
  std::chrono::steady_clock::time_point observed_time_;
};

}  // namespace tessera::k8s
