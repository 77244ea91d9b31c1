// A cancellation signal shared between a long-running call (a watch, a back-off wait, an
// informer or leader-election loop) and whoever wants to stop it. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

namespace tessera::k8s {

// Thread-safe. Once cancelled it stays cancelled.
class Cancellation {
 public:
  Cancellation() = default;
  Cancellation(const Cancellation&) = delete;
  Cancellation& operator=(const Cancellation&) = delete;

  // Cancels: wakes every WaitFor and runs every registered callback once (on this thread).
  void Cancel();
  bool IsCancelled() const;

  // Waits up to `d`; returns true when cancelled (early or already), false on time-out.
  bool WaitFor(std::chrono::steady_clock::duration d) const;

  // Runs `fn` when Cancel() is called (at once, on this thread, if already cancelled).
  // Returns an id for Unregister. `fn` must not call back into this object.
  uint64_t Register(std::function<void()> fn);
  // After Unregister returns, the callback is not running and will not run.
  void Unregister(uint64_t id);

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::mutex callback_mu_;  // held while callbacks run, so Unregister can wait them out
  bool cancelled_ = false;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::function<void()>> callbacks_;
};

}  // namespace tessera::k8s
