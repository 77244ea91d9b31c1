#include "worker/comm/liveness.h"

#include <charconv>

namespace tessera::comm {

using namespace std::chrono_literals;

LivenessMonitor::LivenessMonitor(const rendezvous::StoreClient& store, std::string prefix,
                                 int world_rank)
    : prefix_(std::move(prefix)), world_rank_(world_rank) {
  will_ = store.Clone();
  watch_ = store.Clone();
  const std::string me = std::to_string(world_rank_);
  will_->AddWill(prefix_ + "lost/" + me, me);
  will_->AddWill(prefix_ + "lost", me);
  thread_ = std::thread([this] { Watch(); });
}

LivenessMonitor::~LivenessMonitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  try {
    // Bounded: after a rank-0 failure (the store's host) a store that no longer answers must
    // not hold this rank's exit, and so the gang's restart, for the whole store timeout.
    will_->ClearWills(kClearWillsTimeout);
  } catch (const rendezvous::StoreError&) {
    // The store is gone already; there is nobody left to mislead.
  }
  watch_->Interrupt();
  thread_.join();
}

void LivenessMonitor::Watch() {
  const std::string key = prefix_ + "lost";
  for (;;) {
    try {
      const std::string value = watch_->Get(key, std::chrono::hours(1));
      int rank = -1;
      std::from_chars(value.data(), value.data() + value.size(), rank);
      Report({rank, "rank " + value +
                        " lost: its process exited or its connection to the rendezvous store "
                        "broke"});
      return;
    } catch (const rendezvous::StoreTimeoutError&) {
      continue;  // nobody died within the hour; keep watching
    } catch (const rendezvous::StoreError& e) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_)
          return;
      }
      Report({0, "rank 0 lost: the rendezvous store it hosts at " + watch_->endpoint() +
                     " is unreachable"});
      return;
    }
  }
}

void LivenessMonitor::Report(RankLoss loss) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (loss_ || stopping_)
      return;
    loss_ = loss;
  }
  reported_.notify_all();
  // Once loss_ is set, Subscribe calls new subscribers itself: subscribers_ only shrinks.
  for (;;) {
    std::function<void(const RankLoss&)> fn;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (subscribers_.empty())
        return;
      auto first = subscribers_.begin();
      calling_ = first->first;
      fn = std::move(first->second);
      subscribers_.erase(first);  // called once only
    }
    fn(loss);
    fn = nullptr;  // what fn holds is released before Unsubscribe may return
    {
      std::lock_guard<std::mutex> lock(mu_);
      calling_ = -1;
    }
    called_.notify_all();
  }
}

std::optional<RankLoss> LivenessMonitor::loss() const {
  std::lock_guard<std::mutex> lock(mu_);
  return loss_;
}

std::optional<RankLoss> LivenessMonitor::WaitForLoss(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  reported_.wait_for(lock, timeout, [&] { return loss_.has_value(); });
  return loss_;
}

int LivenessMonitor::Subscribe(std::function<void(const RankLoss&)> fn) {
  std::unique_lock<std::mutex> lock(mu_);
  const int id = next_id_++;
  if (loss_) {
    RankLoss loss = *loss_;
    lock.unlock();
    fn(loss);
    return id;
  }
  subscribers_[id] = std::move(fn);
  return id;
}

void LivenessMonitor::Unsubscribe(int id) {
  std::unique_lock<std::mutex> lock(mu_);
  subscribers_.erase(id);
  if (std::this_thread::get_id() == thread_.get_id())
    return;  // from inside a subscriber: nothing else runs on this thread
  called_.wait(lock, [&] { return calling_ != id; });
}

}  // namespace tessera::comm
