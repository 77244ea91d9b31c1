#include "controller/reconcile/progress.h"

#include <arpa/inet.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "api/progress.h"

namespace tessera::reconcile {
namespace {

// A plain HTTP/1.0 GET with a deadline for the whole read and a size limit (the pod serving
// /progress runs the user's code), not the API server's transport.
class HttpProgressReader final : public ProgressReader {
 public:
  std::optional<nlohmann::json> Read(const std::string& host, int port,
                                     std::chrono::milliseconds timeout) override {
    const auto text = api::FetchProgressBody(host, port, timeout);
    if (!text)
      return std::nullopt;
    auto body = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded())
      return std::nullopt;
    return body;
  }
};

}  // namespace

std::optional<ProgressSample> ParseProgress(const nlohmann::json& body, int64_t attempt) {
  const std::optional<api::ProgressDocument> p = api::DecodeProgress(body);
  if (!p)
    return std::nullopt;
  return SampleOf(*p, attempt);
}

ProgressSample SampleOf(const api::ProgressDocument& progress, int64_t attempt) {
  ProgressSample s;
  s.attempt = attempt;
  s.step = progress.step;
  s.detail.total_steps = progress.total_steps;
  s.detail.loss = progress.loss;
  s.detail.tokens_per_second = progress.tokens_per_second;
  s.detail.val_loss = progress.val_loss;
  return s;
}

std::unique_ptr<ProgressReader> NewHttpProgressReader() {
  return std::make_unique<HttpProgressReader>();
}

std::optional<ProgressPolling> ParseProgressPolling(const std::string& text) {
  if (text == "pods")
    return ProgressPolling::kPods;
  if (text == "loopback-only")
    return ProgressPolling::kLoopbackOnly;
  if (text == "off")
    return ProgressPolling::kOff;
  return std::nullopt;
}

bool IsLoopbackAddress(const std::string& ip) {
  in_addr v4{};
  if (inet_pton(AF_INET, ip.c_str(), &v4) == 1)
    return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, ip.c_str(), &v6) == 1)
    return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

ProgressPoller::ProgressPoller(ProgressReader& reader, Options options,
                               std::function<void(const std::string& key)> on_change)
    : reader_(reader), options_(options), on_change_(std::move(on_change)) {}

ProgressPoller::~ProgressPoller() {
  Stop();
}

bool ProgressPoller::Allowed(const std::string& host) const {
  switch (options_.polling) {
    case ProgressPolling::kPods:
      return !host.empty();
    case ProgressPolling::kLoopbackOnly:
      return IsLoopbackAddress(host);
    case ProgressPolling::kOff:
      return false;
  }
  return false;
}

void ProgressPoller::Track(const std::string& key, const std::string& uid, int64_t attempt,
                           const std::string& host, int port) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!Allowed(host)) {
    targets_.erase(key);
    return;
  }
  Target& t = targets_[key];
  if (t.uid != uid || t.attempt != attempt)
    t.latest.reset();
  t.uid = uid;
  t.attempt = attempt;
  t.host = host;
  t.port = port;
}

void ProgressPoller::Untrack(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  targets_.erase(key);
}

std::optional<ProgressSample> ProgressPoller::Latest(const std::string& key,
                                                     const std::string& uid) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = targets_.find(key);
  if (it == targets_.end() || it->second.uid != uid)
    return std::nullopt;
  return it->second.latest;
}

size_t ProgressPoller::Targets() const {
  std::lock_guard<std::mutex> lock(mu_);
  return targets_.size();
}

void ProgressPoller::PollOnce() {
  std::vector<std::pair<std::string, Target>> snapshot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    snapshot.assign(targets_.begin(), targets_.end());
  }
  for (const auto& [key, target] : snapshot) {
    {
      // A stop waits for the read in progress only, not for the round (each read of a pod
      // that does not answer takes the whole timeout).
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_)
        return;
    }
    auto body = reader_.Read(target.host, target.port, options_.timeout);
    std::optional<ProgressSample> sample;
    if (body)
      sample = ParseProgress(*body, target.attempt);
    if (!sample)
      continue;
    bool changed = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = targets_.find(key);
      // The target may have moved on to another pod generation while we read.
      if (it == targets_.end() || it->second.uid != target.uid ||
          it->second.attempt != target.attempt) {
        continue;
      }
      changed = !it->second.latest || it->second.latest->step != sample->step;
      it->second.latest = sample;
    }
    if (changed && on_change_)
      on_change_(key);
  }
}

void ProgressPoller::Start() {
  std::lock_guard<std::mutex> guard(mu_);
  if (options_.polling == ProgressPolling::kOff || stopping_ || thread_.joinable())
    return;
  thread_ = std::thread([this] {  // takes mu_ once this returns
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      if (cv_.wait_for(lock, options_.interval, [this] { return stopping_; }))
        break;
      lock.unlock();
      PollOnce();
      lock.lock();
    }
  });
}

void ProgressPoller::Stop() {
  std::thread thread;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    thread = std::move(thread_);
  }
  cv_.notify_all();
  if (thread.joinable())
    thread.join();
}

}  // namespace tessera::reconcile
