#include "controller/k8s/leader_election.h"

#include <algorithm>
#include <cstdint>
#include <random>

#include "controller/k8s/micro_time.h"
#include "controller/k8s/object.h"

namespace tessera::k8s {

std::string ValidateLeaderElectionConfig(const LeaderElectionConfig& c) {
  if (c.lease_name.empty() || c.lease_namespace.empty()) {
    return "leader election: the Lease namespace and name must be set";
  }
  if (c.identity.empty())
    return "leader election: identity must be set";
  if (c.retry_period.count() <= 0)
    return "leader election: retry period must be positive";
  if (c.renew_deadline.count() * 10 <= c.retry_period.count() * 12) {
    return "leader election: renew deadline must exceed 1.2 x the retry period";
  }
  if (c.lease_duration <= c.renew_deadline) {
    return "leader election: lease duration must exceed the renew deadline";
  }
  return "";
}

LeaderElector::LeaderElector(RestClient& client, LeaderElectionConfig config)
    : client_(client),
      config_(std::move(config)),
      lease_(Leases(config_.lease_namespace).Named(config_.lease_name)) {}

std::string LeaderElector::ObservedLeader() const {
  std::lock_guard<std::mutex> lock(mu_);
  return observed_holder_;
}

std::chrono::milliseconds LeaderElector::Jittered(std::chrono::milliseconds d) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_real_distribution<double> factor(1.0, 1.2);
  return std::chrono::milliseconds(
      static_cast<int64_t>(static_cast<double>(d.count()) * factor(rng)));
}

bool LeaderElector::TryAcquireOrRenew(const CallOptions& call) {
  const auto now = std::chrono::steady_clock::now();
  const std::string now_time = FormatMicroTime(std::chrono::system_clock::now());
  const int64_t lease_seconds = std::max<int64_t>(
      1, std::chrono::duration_cast<std::chrono::seconds>(config_.lease_duration).count());

  auto current = client_.Get(lease_, call);
  if (!current.ok() && current.error().IsNotFound()) {
    Json lease = {
        {"apiVersion", "coordination.k8s.io/v1"},
        {"kind", "Lease"},
        {"metadata", {{"name", config_.lease_name}, {"namespace", config_.lease_namespace}}},
        {"spec",
         {{"holderIdentity", config_.identity},
          {"leaseDurationSeconds", lease_seconds},
          {"acquireTime", now_time},
          {"renewTime", now_time},
          {"leaseTransitions", 0}}}};
    auto created = client_.Create(lease_, lease, call);
    if (!created.ok())
      return false;
    std::lock_guard<std::mutex> lock(mu_);
    observed_spec_ = (*created)["spec"];
    observed_time_ = now;
    observed_holder_ = config_.identity;
    return true;
  }
  if (!current.ok())
    return false;

  Json lease = std::move(*current);
  Json spec = ObjectAt(lease, "spec");
  std::string holder = StringAt(spec, "holderIdentity");
  std::string previous_leader;
  bool held_by_other = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (spec != observed_spec_) {
      observed_spec_ = spec;
      observed_time_ = now;  // our clock, not the holder's renewTime: immune to clock skew
    }
    previous_leader = observed_holder_;
    observed_holder_ = holder;
    // An int32 in the Lease API; bounded here so that adding it to a time cannot overflow.
    auto their_duration = std::chrono::seconds(std::clamp<int64_t>(
        IntegerAt(spec, "leaseDurationSeconds").value_or(lease_seconds), 0, INT32_MAX));
    held_by_other =
        !holder.empty() && holder != config_.identity && observed_time_ + their_duration > now;
  }
  if (held_by_other) {  // someone else holds a lease that has not expired
    if (holder != previous_leader && config_.on_new_leader)
      config_.on_new_leader(holder);
    return false;
  }

  Json next = spec;
  next["holderIdentity"] = config_.identity;
  next["leaseDurationSeconds"] = lease_seconds;
  next["renewTime"] = now_time;
  if (holder != config_.identity) {
    next["acquireTime"] = now_time;
    next["leaseTransitions"] =
        std::clamp<int64_t>(IntegerAt(spec, "leaseTransitions").value_or(0), 0, INT32_MAX - 1) + 1;
  }
  lease["spec"] = next;
  // Carries metadata.resourceVersion: 409 if stale.
  auto updated = client_.Update(lease_, lease, call);
  if (!updated.ok())
    return false;
  std::lock_guard<std::mutex> lock(mu_);
  observed_spec_ = (*updated)["spec"];
  observed_time_ = now;
  observed_holder_ = config_.identity;
  return true;
}

void LeaderElector::Release() {
  // Called after the caller's work has stopped; a hung apiserver must not hold up the exit
  // for longer than a renewal could take.
  const CallOptions call{.deadline = std::chrono::steady_clock::now() + config_.renew_deadline};
  auto current = client_.Get(lease_, call);
  if (!current.ok())
    return;
  Json lease = std::move(*current);
  if (StringAt(ObjectAt(lease, "spec"), "holderIdentity") != config_.identity)
    return;
  std::string now_time = FormatMicroTime(std::chrono::system_clock::now());
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["spec"]["renewTime"] = now_time;
  client_.Update(lease_, lease, call);
}

void LeaderElector::Run(Cancellation& stop) {
  using Clock = std::chrono::steady_clock;
  // When the last successful attempt began: the Lease's renewTime, and what the others time
  // the Lease's expiry from.
  Clock::time_point renewed;
  bool acquired = false;
  while (!stop.IsCancelled()) {
    const auto started = Clock::now();
    if (TryAcquireOrRenew({.deadline = started + config_.renew_deadline, .cancel = &stop})) {
      renewed = started;
      acquired = true;
      break;
    }
    stop.WaitFor(Jittered(config_.retry_period));
  }
  if (stop.IsCancelled()) {
    if (acquired && config_.release_on_cancel)
      Release();  // won just as we were told to stop
    return;
  }

  leader_ = true;
  if (config_.on_new_leader)
    config_.on_new_leader(config_.identity);
  if (config_.on_started_leading)
    config_.on_started_leading();
  // As client-go: renewals are retried every retry period until one succeeds or the renew
  // deadline passes; every request of an attempt ends by that deadline.
  while (true) {
    const auto deadline = renewed + config_.renew_deadline;
    const auto wait = std::min<Clock::duration>(config_.retry_period, deadline - Clock::now());
    if (stop.WaitFor(std::max(wait, Clock::duration::zero())))
      break;
    if (Clock::now() >= deadline)
      break;  // lost
    const auto started = Clock::now();
    if (TryAcquireOrRenew({.deadline = deadline, .cancel = &stop}))
      renewed = started;
  }
  leader_ = false;
  if (stop.IsCancelled() && config_.release_on_cancel)
    Release();
  if (config_.on_stopped_leading)
    config_.on_stopped_leading();
}

}  // namespace tessera::k8s
