// An informer: a thread running list + watch (Reflector) for one resource that keeps a
// thread-safe cache of the objects and calls add/update/delete handlers. It never writes to the
// server.
//
// The cache holds each object packed as MessagePack, not as a parsed tree: an nlohmann::json
// tree costs several times its text (a trimmed worker pod: 4.7 KiB as a tree, 0.8 KiB packed),
// and with thousands of pods that is most of the controller's memory (DESIGN.md §10). Readers
// get a freshly decoded, immutable copy (shared_ptr<const Json>; about 5 us for a pod), so a
// pointer held by a reader never changes under it and is not the cache's memory.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "controller/k8s/watch.h"

namespace tessera::k8s {

using ObjectPtr = std::shared_ptr<const Json>;

// "namespace/name", or "name" for cluster-scoped objects.
std::string KeyOf(const Json& object);

// Handlers run on the informer's thread, one at a time, in event order. Keep them short
// (enqueue a key); they must not call Stop().
struct InformerHandlers {
  std::function<void(const ObjectPtr& object)> on_add;
  std::function<void(const ObjectPtr& old_object, const ObjectPtr& new_object)> on_update;
  std::function<void(const ObjectPtr& object)> on_delete;
};

// Values an object is indexed under (e.g. its owner UIDs).
using IndexFunc = std::function<std::vector<std::string>(const Json& object)>;
// Index by the value of label `key` (objects without the label are not indexed).
IndexFunc IndexByLabel(std::string key);
// Index by the UID of every owner reference.
IndexFunc IndexByOwnerUid();

// Drops metadata.managedFields: server-side-apply bookkeeping that no controller reads and
// that is often the largest part of an object. The informer's default transform.
void StripManagedFields(Json& object);

struct InformerOptions {
  std::string label_selector;
  std::string field_selector;
  ReflectorOptions reflector;  // its selectors are overwritten by the two above
  // Applied to every object before it is cached or handed to handlers (saves memory);
  // null keeps objects exactly as the server sent them. With `reflector.object_filter` the
  // transform sees only the fields the filter kept (which must include metadata.name,
  // namespace and resourceVersion, and whatever the indexes read).
  std::function<void(Json& object)> transform = StripManagedFields;
  // Each failed list or watch (ReflectorSink::error), on the informer's thread; it retries by
  // itself. Until a list succeeds HasSynced stays false, so this is where to say why.
  std::function<void(const ApiError& error, bool relist)> on_error;
};

// Thread-safe: readers (Get, List, ByIndex, HasSynced) may be called from any thread while
// the informer runs. AddHandlers and AddIndex must be called before Start.
class Informer {
 public:
  // `client` must outlive the informer. ref.namespace_ empty = all namespaces.
  Informer(RestClient& client, ResourceRef ref, InformerOptions options = {});
  ~Informer();  // stops
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  void AddHandlers(InformerHandlers handlers);
  void AddIndex(const std::string& name, IndexFunc fn);

  // Starts the list + watch thread. Once: a stopped informer is not restarted.
  void Start();
  // Stops the thread (cancels the watch) and waits for it. Idempotent.
  void Stop();

  // True once the first full list is in the cache (and its add handlers have run).
  bool HasSynced() const;
  // Waits for HasSynced until `timeout`; returns HasSynced().
  bool WaitForSync(std::chrono::steady_clock::duration timeout) const;

  // Each call decodes: hold the result rather than calling again for the same object.
  ObjectPtr Get(const std::string& key) const;  // null when absent
  std::vector<ObjectPtr> List() const;
  std::vector<ObjectPtr> ByIndex(const std::string& index, const std::string& value) const;
  std::string LastResourceVersion() const;

 private:
  void Replace(std::vector<Json> items, const std::string& resource_version);
  void Apply(const WatchEvent& event);
  // One cached object: MessagePack bytes and the resourceVersion (compared on a relist).
  struct Entry {
    std::vector<std::uint8_t> packed;
    std::string resource_version;
  };
  static ObjectPtr Unpack(const Entry& entry);

  void IndexLocked(const std::string& key, const Json& object, bool insert);
  void Upsert(Json object);
  void Remove(const Json& object);

  RestClient& client_;
  ResourceRef ref_;
  InformerOptions options_;
  std::vector<InformerHandlers> handlers_;
  std::map<std::string, IndexFunc> index_funcs_;

  mutable std::mutex mu_;
  mutable std::condition_variable synced_cv_;
  std::map<std::string, Entry> items_;
  // index name -> value -> keys
  std::map<std::string, std::map<std::string, std::set<std::string>>> indices_;
  bool synced_ = false;
  std::string resource_version_;

  Cancellation stop_;
  std::thread thread_;
};

}  // namespace tessera::k8s
