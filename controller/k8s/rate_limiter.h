// A token bucket: `qps` tokens per second, holding at most `burst`. Used for client-side
// request limits (--qps/--burst) and the work queue's overall limit. Thread-safe.
#pragma once

#include <chrono>
#include <mutex>
#include <optional>

#include "controller/k8s/cancellation.h"

namespace tessera::k8s {

class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;
  // qps <= 0 means unlimited. The bucket starts full.
  TokenBucket(double qps, int burst);

  // Takes one token now, going into debt if none is left; returns how long the caller must
  // wait before acting (zero when a token was available). Like golang.org/x/time/rate's
  // Reserve: successive callers queue up behind each other.
  Clock::duration Reserve();
  // Reserve() and wait out the delay. Returns false as soon as `cancel` (when set) is
  // cancelled, and at once, without waiting, when the delay would end after `deadline` (when
  // set); the token stays taken either way. True once the delay has passed.
  bool Wait(const Cancellation* cancel = nullptr,
            std::optional<Clock::time_point> deadline = std::nullopt);

 private:
  std::mutex mu_;
  double qps_;
  double burst_;
  double tokens_;
  Clock::time_point last_;
};

}  // namespace tessera::k8s
