// The handle of one queued Gloo group operation (an internal part of gloo_process_group.cpp,
// in a header of its own for its tests). The group's executor thread runs operations one at
// a time: Start() when it begins one, Finish() when Gloo returns. The caller's wait() blocks
// until then.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <utility>

#include "worker/comm/process_group.h"

namespace tessera::comm::detail {

class GlooWork : public Work {
 public:
  using Clock = std::chrono::steady_clock;
  using milliseconds = std::chrono::milliseconds;
  // Called once, outside any lock, when wait() gives up on a started operation (below).
  using OnAbandon = std::function<void(const std::string& error)>;

  GlooWork(std::string what, milliseconds timeout, OnAbandon on_abandon = {},
           milliseconds margin = milliseconds(2000))
      : what_(std::move(what)),
        timeout_(timeout),
        margin_(margin),
        on_abandon_(std::move(on_abandon)) {}

  // An operation that has not started is queued behind others, each bounded by the timeout.
  // Once started, Gloo's own timeout ends it; the deadline here (twice that, plus the margin)
  // is only a last resort against a transport that ignored it. Past it the operation is
  // abandoned: the error goes to the caller and to on_abandon (the group marks itself broken,
  // so the next operation fails at once instead of queueing behind the stuck one).
  void wait() override {
    bool abandoned = false;
    std::string error;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return done_ || started_; });
      if (!done_ && !cv_.wait_until(lock, start_ + 2 * timeout_ + margin_, [&] { return done_; })) {
        done_ = true;
        abandoned = true;
        error_ = what_ + " timed out after " + Seconds(timeout_) +
                 " (TESSERA_COMM_TIMEOUT) and did not return: the transport ignored its timeout";
      }
      error = error_;
    }
    if (abandoned && on_abandon_)
      on_abandon_(error);
    if (!error.empty())
      throw CommError(error);
  }
  bool completed() override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  void Start() {
    std::lock_guard<std::mutex> lock(mu_);
    started_ = true;
    start_ = Clock::now();
    cv_.notify_all();
  }
  // The outcome ("" for success); a second call, or one after wait() gave up, is ignored.
  void Finish(const std::string& error) {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_)
      return;
    done_ = true;
    error_ = error;
    cv_.notify_all();
  }
  const std::string& what() const { return what_; }

  // "12.5s".
  static std::string Seconds(milliseconds d) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1fs", static_cast<double>(d.count()) / 1000.0);
    return buf;
  }

 private:
  const std::string what_;
  const milliseconds timeout_;
  const milliseconds margin_;
  const OnAbandon on_abandon_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
  bool done_ = false;
  Clock::time_point start_;
  std::string error_;
};

}  // namespace tessera::comm::detail
