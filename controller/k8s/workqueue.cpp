#include "controller/k8s/workqueue.h"

#include <algorithm>

namespace tessera::k8s {

WorkQueueRateLimiter::WorkQueueRateLimiter(Options options)
    : options_(options), bucket_(options.qps, options.burst) {}

std::chrono::nanoseconds WorkQueueRateLimiter::When(const std::string& item) {
  int failures;
  {
    std::lock_guard<std::mutex> lock(mu_);
    failures = failures_[item]++;
  }
  // base * 2^failures without overflow: stop doubling once past the cap.
  std::chrono::nanoseconds per_item = options_.base_delay;
  for (int i = 0; i < failures && per_item < options_.max_delay; ++i)
    per_item *= 2;
  per_item = std::min(per_item, options_.max_delay);
  auto overall = std::chrono::duration_cast<std::chrono::nanoseconds>(bucket_.Reserve());
  return std::max(per_item, overall);
}

void WorkQueueRateLimiter::Forget(const std::string& item) {
  std::lock_guard<std::mutex> lock(mu_);
  failures_.erase(item);
}

int WorkQueueRateLimiter::NumRequeues(const std::string& item) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = failures_.find(item);
  return it == failures_.end() ? 0 : it->second;
}

WorkQueue::WorkQueue(WorkQueueRateLimiter::Options limiter) : limiter_(limiter) {}

void WorkQueue::AddLocked(const std::string& item) {
  if (shutting_down_ || dirty_.count(item))
    return;
  dirty_.insert(item);
  if (processing_.count(item))
    return;  // re-queued by Done
  queue_.push_back(item);
  cv_.notify_one();
}

void WorkQueue::PromoteDueLocked(Clock::time_point now) {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->second <= now) {
      AddLocked(it->first);
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
}

void WorkQueue::Add(const std::string& item) {
  std::lock_guard<std::mutex> lock(mu_);
  AddLocked(item);
}

void WorkQueue::AddAfter(const std::string& item, Clock::duration delay) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_)
    return;
  if (delay <= Clock::duration::zero()) {
    AddLocked(item);
    return;
  }
  auto when = Clock::now() + delay;
  auto [it, inserted] = waiting_.emplace(item, when);
  if (!inserted && when < it->second)
    it->second = when;
  cv_.notify_all();  // waiting workers recompute their wake-up time
}

void WorkQueue::AddRateLimited(const std::string& item) {
  AddAfter(item, std::chrono::duration_cast<Clock::duration>(limiter_.When(item)));
}

void WorkQueue::Forget(const std::string& item) {
  limiter_.Forget(item);
}

int WorkQueue::NumRequeues(const std::string& item) const {
  return limiter_.NumRequeues(item);
}

std::optional<std::string> WorkQueue::Get() {
  return GetImpl(std::nullopt);
}

std::optional<std::string> WorkQueue::GetUntil(Clock::time_point deadline) {
  return GetImpl(deadline);
}

std::optional<std::string> WorkQueue::GetImpl(std::optional<Clock::time_point> deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (shutting_down_)
      return std::nullopt;
    auto now = Clock::now();
    PromoteDueLocked(now);
    if (!queue_.empty())
      break;
    if (deadline && now >= *deadline)
      return std::nullopt;
    std::optional<Clock::time_point> wake = deadline;
    for (const auto& [item, when] : waiting_) {
      if (!wake || when < *wake)
        wake = when;
    }
    if (wake) {
      cv_.wait_until(lock, *wake);
    } else {
      cv_.wait(lock);
    }
  }
  std::string item = std::move(queue_.front());
  queue_.pop_front();
  processing_.insert(item);
  dirty_.erase(item);
  return item;
}

void WorkQueue::Done(const std::string& item) {
  std::lock_guard<std::mutex> lock(mu_);
  processing_.erase(item);
  if (dirty_.count(item)) {
    queue_.push_back(item);
    cv_.notify_one();
  }
}

void WorkQueue::ShutDown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutting_down_ = true;
  queue_.clear();
  dirty_.clear();  // nothing is re-queued by Done either
  waiting_.clear();
  cv_.notify_all();
}

bool WorkQueue::ShuttingDown() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shutting_down_;
}

size_t WorkQueue::Len() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t ready = queue_.size();
  auto now = Clock::now();
  for (const auto& [item, when] : waiting_) {
    if (when <= now && !dirty_.count(item) && !processing_.count(item))
      ++ready;
  }
  return ready;
}

}  // namespace tessera::k8s
