// Training progress of running jobs: a poller that reads rank 0's /progress JSON (served on
// the job's metrics port) every few seconds, off the reconcile path, and keeps the latest
// sample per job for reconcile to read like a cache. Which addresses it may contact is a
// setting: on a real cluster, pod IPs; in tests, only loopback (simulated pods have fake IPs
// that must never be contacted); or nothing.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "api/progress.h"
#include "controller/reconcile/status.h"

namespace tessera::reconcile {

// What one read of /progress gave, tagged with the attempt of the pod that served it.
struct ProgressSample {
  int64_t attempt = 0;
  int64_t step = 0;
  ProgressDetail detail;
  bool operator==(const ProgressSample&) const = default;
};

// The sample in the trainer's /progress JSON (api::DecodeProgress); nullopt when the body is
// not a progress document.
std::optional<ProgressSample> ParseProgress(const nlohmann::json& body, int64_t attempt);
// The sample of a decoded document.
ProgressSample SampleOf(const api::ProgressDocument& progress, int64_t attempt);

// Fetches http://host:port/progress. Implementations must be thread-safe.
class ProgressReader {
 public:
  virtual ~ProgressReader() = default;
  // The parsed body, or nullopt on any failure (no answer, non-200, not JSON).
  virtual std::optional<nlohmann::json> Read(const std::string& host, int port,
                                             std::chrono::milliseconds timeout) = 0;
};

// A reader over plain HTTP (api::FetchProgressBody): the timeout bounds the whole read, and
// an answer over 1 MiB is refused, whatever the pod serves.
std::unique_ptr<ProgressReader> NewHttpProgressReader();

enum class ProgressPolling {
  kPods,          // rank 0's pod IP (production)
  kLoopbackOnly,  // only addresses in 127.0.0.0/8 or ::1; others are skipped (tests)
  kOff,           // never
};

// "pods", "loopback-only", "off"; nullopt for anything else.
std::optional<ProgressPolling> ParseProgressPolling(const std::string& text);

// True for 127.0.0.0/8 and ::1.
bool IsLoopbackAddress(const std::string& ip);

// Thread-safe. Track/Untrack/Latest are called by reconcile workers; one thread polls.
class ProgressPoller {
 public:
  struct Options {
    ProgressPolling polling = ProgressPolling::kPods;
    std::chrono::milliseconds interval{5000};
    std::chrono::milliseconds timeout{2000};  // per read
  };
  // `on_change(key)` runs on the polling thread when a job's step changes (enqueue the key).
  // `reader` must outlive the poller.
  ProgressPoller(ProgressReader& reader, Options options,
                 std::function<void(const std::string& key)> on_change);
  ~ProgressPoller();  // stops
  ProgressPoller(const ProgressPoller&) = delete;
  ProgressPoller& operator=(const ProgressPoller&) = delete;

  // Polls `host:port` for job `key` (uid and attempt identify the pod generation; a change
  // drops the previous sample). Ignored (and any target of `key` removed) when the polling
  // mode forbids the address.
  void Track(const std::string& key, const std::string& uid, int64_t attempt,
             const std::string& host, int port);
  void Untrack(const std::string& key);
  // The latest sample for `key` taken from the pod generation (uid, attempt); nullopt when none.
  std::optional<ProgressSample> Latest(const std::string& key, const std::string& uid) const;

  // Start is idempotent and does nothing after Stop; the two may race (Start runs on the leader
  // elector's thread). Stop waits for the read in progress (at most the timeout), not for the
  // rest of the round.
  void Start();
  void Stop();
  // Reads every target once, now (the polling thread does this every interval).
  void PollOnce();
  size_t Targets() const;

 private:
  struct Target {
    std::string uid;
    int64_t attempt = 0;
    std::string host;
    int port = 0;
    std::optional<ProgressSample> latest;
  };
  bool Allowed(const std::string& host) const;

  ProgressReader& reader_;
  Options options_;
  std::function<void(const std::string&)> on_change_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::map<std::string, Target> targets_;
  std::thread thread_;  // guarded by mu_
};

}  // namespace tessera::reconcile
