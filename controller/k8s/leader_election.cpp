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

bool LeaderElector::TryAcquireOrRenew() {
  const auto now = std::chrono::steady_clock::now();
  const std::string now_time = FormatMicroTime(std::chrono::system_clock::now());
  const int64_t lease_seconds = std::max<int64_t>(
      1, std::chrono::duration_cast<std::chrono::seconds>(config_.lease_duration).count());

  auto current = client_.Get(lease_);
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
    auto created = client_.Create(lease_, lease);
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
  auto updated = client_.Update(lease_, lease);  // carries metadata.resourceVersion: 409 if stale
  if (!updated.ok())
    return false;
  std::lock_guard<std::mutex> lock(mu_);
  observed_spec_ = (*updated)["spec"];
  observed_time_ = now;
  observed_holder_ = config_.identity;
  return true;
}

void LeaderElector::Release() {
  auto current = client_.Get(lease_);
  if (!current.ok())
    return;
  Json lease = std::move(*current);
  if (StringAt(ObjectAt(lease, "spec"), "holderIdentity") != config_.identity)
    return;
  std::string now_time = FormatMicroTime(std::chrono::system_clock::now());
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["spec"]["renewTime"] = now_time;
  client_.Update(lease_, lease);
}

void LeaderElector::Run(Cancellation& stop) {
  while (!stop.IsCancelled()) {
    if (TryAcquireOrRenew())
      break;
    stop.WaitFor(Jittered(config_.retry_period));
  }
  if (stop.IsCancelled())
    return;

  leader_ = true;
  if (config_.on_new_leader)
    config_.on_new_leader(config_.identity);
  if (config_.on_started_leading)
    config_.on_started_leading();
  auto last_renew = std::chrono::steady_clock::now();
  while (!stop.WaitFor(config_.retry_period)) {
    if (TryAcquireOrRenew()) {
      last_renew = std::chrono::steady_clock::now();
      continue;
    }
    if (std::chrono::steady_clock::now() - last_renew >= config_.renew_deadline)
      break;  // lost
  }
  leader_ = false;
  if (stop.IsCancelled() && config_.release_on_cancel)
    Release();
  if (config_.on_stopped_leading)
    config_.on_stopped_leading();
}

}  // namespace tessera::k8s
