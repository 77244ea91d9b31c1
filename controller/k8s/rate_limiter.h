// A token bucket: `qps` tokens per second, holding at most `burst`. Used for client-side
// request limits (--qps/--burst) and the work queue's overall limit. Thread-safe.
#pragma once

#include <chrono>
#include <mutex>

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
  // Reserve() and sleep for the delay.
  void Wait();

 private:
  std::mutex mu_;
  double qps_;
  double burst_;
  double tokens_;
  Clock::time_point last_;
};

}  // namespace tessera::k8s
