// Learns that a rank died, through the rendezvous store, so every other rank fails fast with
// an error naming it instead of hanging in a collective. Each rank leaves a "will" with the
// store (set by the server when that rank's connection drops without a goodbye, as it does
// when the process is killed) and waits for anyone's will to fire. It does not detect a
// rank that hangs while alive; the communication timeout covers that.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "worker/rendezvous/store_client.h"

namespace tessera::comm {

struct RankLoss {
  int world_rank = -1;
  std::string message;  // "rank 3 lost: ..." (one line)
};

// Thread-safe. Shared by a world group and every group split from it.
class LivenessMonitor {
 public:
  static constexpr std::chrono::milliseconds kClearWillsTimeout{5000};

  // Opens two connections like `store` (one holds the will, one waits) under key prefix
  // `prefix` and starts watching. Throws rendezvous::StoreError when the store is unreachable.
  LivenessMonitor(const rendezvous::StoreClient& store, std::string prefix, int world_rank);
  // Withdraws the will (a clean exit is not a loss; waiting at most kClearWillsTimeout for a
  // store that does not answer) and stops watching.
  ~LivenessMonitor();
  LivenessMonitor(const LivenessMonitor&) = delete;
  LivenessMonitor& operator=(const LivenessMonitor&) = delete;

  // The first loss seen, if any.
  std::optional<RankLoss> loss() const;
  // Waits up to `timeout` for a loss report (used right after an operation failed, since the
  // store may learn of the death a moment after a direct peer did).
  std::optional<RankLoss> WaitForLoss(std::chrono::milliseconds timeout) const;

  // Calls `fn` once when a loss is reported (at once if one already was). Returns an id for
  // Unsubscribe. `fn` runs on the monitor's thread and must not block.
  int Subscribe(std::function<void(const RankLoss&)> fn);
  // After this returns, `fn` of `id` is not running and never will: a call already under way
  // on the monitor's thread is waited for. So whatever `fn` holds (a group's core, which may
  // own this monitor) is never released last on the monitor's own thread.
  void Unsubscribe(int id);

 private:
  void Watch();
  void Report(RankLoss loss);

  std::string prefix_;
  int world_rank_;
  std::unique_ptr<rendezvous::StoreClient> will_;
  std::unique_ptr<rendezvous::StoreClient> watch_;
  mutable std::mutex mu_;
  mutable std::condition_variable reported_;
  std::condition_variable called_;  // a subscriber's call returned
  std::optional<RankLoss> loss_;
  std::map<int, std::function<void(const RankLoss&)>> subscribers_;
  int next_id_ = 0;
  int calling_ = -1;  // the subscriber whose fn runs now, else -1
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tessera::comm
