// List + watch for one resource, kept going forever: the reflector of client-go. It lists,
// then watches from the list's resourceVersion (with bookmarks), relists on 410 Gone, and
// backs off with jitter after failures. It keeps no cache itself (see informer.h).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "controller/k8s/rest.h"

namespace tessera::k8s {

// Exponential back-off with jitter: Next() returns initial, 2x, 4x ... up to max, each
// multiplied by a random factor in [1, 1 + jitter]. Reset() after a success.
// Not thread-safe: one loop owns it.
class Backoff {
 public:
  struct Options {
    std::chrono::milliseconds initial{800};
    std::chrono::milliseconds max{30000};
    double jitter = 1.0;
  };
  Backoff() : Backoff(Options{}) {}
  explicit Backoff(Options options);
  std::chrono::milliseconds Next();
  void Reset();

 private:
  Options options_;
  std::chrono::milliseconds current_;
  std::mt19937_64 rng_;
};

// What the reflector reports. Called on the reflector's thread, in order.
struct ReflectorSink {
  // A full list: the items replace whatever was known before.
  std::function<void(std::vector<Json> items, const std::string& resource_version)> replace;
  // One watch event (ADDED, MODIFIED, DELETED; BOOKMARK only moves the resourceVersion).
  std::function<void(const WatchEvent& event)> event;
  // A failed list or watch (for logs); the reflector retries by itself.
  std::function<void(const ApiError& error, bool relist)> error;
};

struct ReflectorOptions {
  std::string label_selector;
  std::string field_selector;
  int watch_timeout_seconds = 300;  // each watch request lasts at most this long
  int64_t page_size = 500;          // list in pages of this many items
  Backoff::Options backoff;
  std::function<void()> on_watch_restart;  // every relist after the first (watch_restarts_total)
  // Parse only these fields of each object, listed or watched (field_filter.h); null: all.
  // It must keep metadata.resourceVersion, which the reflector resumes its watch from.
  std::shared_ptr<const FieldFilter> object_filter;
};

// Not thread-safe: one thread calls Run.
class Reflector {
 public:
  Reflector(RestClient& client, ResourceRef ref, ReflectorOptions options, ReflectorSink sink);

  // Lists and watches until `stop` is cancelled. A watch that ends normally is resumed from
  // the last resourceVersion seen (events or bookmarks); a 410 Gone (as a response or an
  // ERROR event) makes it list again; other failures back off, then resume.
  void Run(Cancellation& stop);

  // The resourceVersion of the last list, event or bookmark seen.
  const std::string& LastResourceVersion() const { return resource_version_; }

 private:
  bool ListAll(Cancellation& stop);

  RestClient& client_;
  ResourceRef ref_;
  ReflectorOptions options_;
  ReflectorSink sink_;
  Backoff backoff_;
  std::string resource_version_;
};

}  // namespace tessera::k8s
