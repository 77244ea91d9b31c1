#include "controller/k8s/cancellation.h"

#include <vector>

namespace tessera::k8s {

void Cancellation::Cancel() {
  std::lock_guard<std::mutex> run_lock(callback_mu_);
  std::map<uint64_t, std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_)
      return;
    cancelled_ = true;
    callbacks.swap(callbacks_);
  }
  cv_.notify_all();
  for (auto& [id, fn] : callbacks)
    fn();
}

bool Cancellation::IsCancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

bool Cancellation::WaitFor(std::chrono::steady_clock::duration d) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, d, [this] { return cancelled_; });
}

uint64_t Cancellation::Register(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cancelled_) {
      uint64_t id = next_id_++;
      callbacks_.emplace(id, std::move(fn));
      return id;
    }
  }
  fn();
  return 0;
}

void Cancellation::Unregister(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (callbacks_.erase(id) > 0)
      return;  // never ran, never will
  }
  // Cancel() may be running it right now: wait until it is finished.
  std::lock_guard<std::mutex> run_lock(callback_mu_);
}

}  // namespace tessera::k8s
