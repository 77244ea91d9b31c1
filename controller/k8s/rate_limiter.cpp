#include "controller/k8s/rate_limiter.h"

#include <algorithm>
#include <thread>

namespace tessera::k8s {

TokenBucket::TokenBucket(double qps, int burst)
    : qps_(qps), burst_(std::max(1, burst)), tokens_(burst_), last_(Clock::now()) {}

TokenBucket::Clock::duration TokenBucket::Reserve() {
  if (qps_ <= 0)
    return Clock::duration::zero();
  std::lock_guard<std::mutex> lock(mu_);
  auto now = Clock::now();
  double elapsed = std::chrono::duration<double>(now - last_).count();
  tokens_ = std::min(burst_, tokens_ + elapsed * qps_);
  last_ = now;
  tokens_ -= 1.0;
  if (tokens_ >= 0)
    return Clock::duration::zero();
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(-tokens_ / qps_));
}

bool TokenBucket::Wait(const Cancellation* cancel, std::optional<Clock::time_point> deadline) {
  if (cancel != nullptr && cancel->IsCancelled())
    return false;
  const auto delay = Reserve();
  if (delay <= Clock::duration::zero())
    return true;
  if (deadline && Clock::now() + delay > *deadline)
    return false;
  if (cancel != nullptr)
    return !cancel->WaitFor(delay);
  std::this_thread::sleep_for(delay);
  return true;
}

}  // namespace tessera::k8s
