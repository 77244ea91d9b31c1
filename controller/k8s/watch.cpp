#include "controller/k8s/watch.h"

#include <algorithm>

#include "controller/k8s/object.h"

namespace tessera::k8s {

Backoff::Backoff(Options options)
    : options_(options), current_(options.initial), rng_(std::random_device{}()) {}

std::chrono::milliseconds Backoff::Next() {
  std::uniform_real_distribution<double> factor(1.0, 1.0 + options_.jitter);
  auto delay = std::chrono::milliseconds(
      static_cast<int64_t>(static_cast<double>(current_.count()) * factor(rng_)));
  current_ = std::min(options_.max, current_ * 2);
  return std::min(delay, options_.max);
}

void Backoff::Reset() {
  current_ = options_.initial;
}

Reflector::Reflector(RestClient& client, ResourceRef ref, ReflectorOptions options,
                     ReflectorSink sink)
    : client_(client),
      ref_(std::move(ref)),
      options_(std::move(options)),
      sink_(std::move(sink)),
      backoff_(options_.backoff) {}

bool Reflector::ListAll(Cancellation& stop) {
  std::vector<Json> items;
  ListOptions list;
  list.label_selector = options_.label_selector;
  list.field_selector = options_.field_selector;
  list.limit = options_.page_size;
  list.item_filter = options_.object_filter;
  while (!stop.IsCancelled()) {
    auto page = client_.List(ref_, list);
    if (!page.ok()) {
      if (sink_.error)
        sink_.error(page.error(), true);
      return false;
    }
    Json& body = *page;
    if (auto it = body.find("items"); it != body.end() && it->is_array()) {
      for (auto& item : *it)
        items.push_back(std::move(item));
    }
    const std::string next = MetaString(body, "continue");
    if (next.empty()) {
      resource_version_ = MetaString(body, "resourceVersion");
      if (sink_.replace)
        sink_.replace(std::move(items), resource_version_);
      return true;
    }
    list.continue_token = next;
  }
  return false;
}

void Reflector::Run(Cancellation& stop) {
  bool need_list = true;
  bool first_list = true;
  while (!stop.IsCancelled()) {
    if (need_list) {
      if (!first_list && options_.on_watch_restart)
        options_.on_watch_restart();
      if (!ListAll(stop)) {
        stop.WaitFor(backoff_.Next());
        continue;
      }
      first_list = false;
      need_list = false;
    }
    WatchOptions watch;
    watch.label_selector = options_.label_selector;
    watch.field_selector = options_.field_selector;
    watch.resource_version = resource_version_;
    watch.allow_bookmarks = true;
    watch.timeout_seconds = options_.watch_timeout_seconds;
    watch.object_filter = options_.object_filter;
    bool got_event = false;
    const auto started = std::chrono::steady_clock::now();
    Status status = client_.Watch(
        ref_, watch,
        [&](const WatchEvent& event) {
          got_event = true;
          std::string rv = MetaString(event.object, "resourceVersion");
          if (!rv.empty())
            resource_version_ = rv;
          if (sink_.event)
            sink_.event(event);
          return !stop.IsCancelled();
        },
        stop);
    if (stop.IsCancelled())
      return;
    if (status.ok()) {
      // The server ended the watch. After a healthy one, resume at once; one that ended at
      // once with nothing in it suggests a server in trouble: back off, as client-go does.
      if (got_event || std::chrono::steady_clock::now() - started >= std::chrono::seconds(1)) {
        backoff_.Reset();
      } else {
        stop.WaitFor(backoff_.Next());
      }
      continue;
    }
    if (got_event)
      backoff_.Reset();
    if (sink_.error)
      sink_.error(status.error(), status.error().IsGone());
    if (status.error().IsGone()) {
      need_list = true;  // our resourceVersion was compacted away: relist right away
      continue;
    }
    stop.WaitFor(backoff_.Next());
  }
}

}  // namespace tessera::k8s
