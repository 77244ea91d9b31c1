#include "controller/k8s/informer.h"

#include "controller/k8s/object.h"

namespace tessera::k8s {

std::string KeyOf(const Json& object) {
  const std::string ns = MetaString(object, "namespace");
  const std::string name = MetaString(object, "name");
  return ns.empty() ? name : ns + "/" + name;
}

void StripManagedFields(Json& object) {
  auto meta = object.find("metadata");
  if (meta != object.end() && meta->is_object())
    meta->erase("managedFields");
}

static std::string ResourceVersionOf(const Json& object) {
  return MetaString(object, "resourceVersion");
}

IndexFunc IndexByLabel(std::string key) {
  return [key](const Json& object) -> std::vector<std::string> {
    const Json& labels = ObjectAt(Metadata(object), "labels");
    auto it = labels.find(key);
    if (it == labels.end() || !it->is_string())
      return {};
    return {it->get<std::string>()};
  };
}

IndexFunc IndexByOwnerUid() {
  return [](const Json& object) {
    std::vector<std::string> uids;
    const Json& meta = Metadata(object);
    auto owners = meta.find("ownerReferences");
    if (owners == meta.end() || !owners->is_array())
      return uids;
    for (const auto& owner : *owners) {
      if (std::string uid = StringAt(owner, "uid"); !uid.empty())
        uids.push_back(std::move(uid));
    }
    return uids;
  };
}

Informer::Informer(RestClient& client, ResourceRef ref, InformerOptions options)
    : client_(client), ref_(std::move(ref)), options_(std::move(options)) {}

Informer::~Informer() {
  Stop();
}

void Informer::AddHandlers(InformerHandlers handlers) {
  handlers_.push_back(std::move(handlers));
}

void Informer::AddIndex(const std::string& name, IndexFunc fn) {
  index_funcs_[name] = std::move(fn);
}

void Informer::Start() {
  if (thread_.joinable())
    return;
  ReflectorOptions ro = options_.reflector;
  ro.label_selector = options_.label_selector;
  ro.field_selector = options_.field_selector;
  thread_ = std::thread([this, ro] {
    ReflectorSink sink;
    sink.replace = [this](std::vector<Json> items, const std::string& rv) {
      Replace(std::move(items), rv);
    };
    sink.event = [this](const WatchEvent& event) { Apply(event); };
    sink.error = options_.on_error;
    Reflector reflector(client_, ref_, ro, sink);
    reflector.Run(stop_);
  });
}

void Informer::Stop() {
  stop_.Cancel();
  if (thread_.joinable())
    thread_.join();
}

bool Informer::HasSynced() const {
  std::lock_guard<std::mutex> lock(mu_);
  return synced_;
}

bool Informer::WaitForSync(std::chrono::steady_clock::duration timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return synced_cv_.wait_for(lock, timeout, [this] { return synced_; });
}

ObjectPtr Informer::Unpack(const Entry& entry) {
  return std::make_shared<const Json>(Json::from_msgpack(entry.packed));
}

ObjectPtr Informer::Get(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = items_.find(key);
  return it == items_.end() ? nullptr : Unpack(it->second);
}

std::vector<ObjectPtr> Informer::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ObjectPtr> out;
  out.reserve(items_.size());
  for (const auto& [key, entry] : items_)
    out.push_back(Unpack(entry));
  return out;
}

std::vector<ObjectPtr> Informer::ByIndex(const std::string& index, const std::string& value) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ObjectPtr> out;
  auto idx = indices_.find(index);
  if (idx == indices_.end())
    return out;
  auto keys = idx->second.find(value);
  if (keys == idx->second.end())
    return out;
  for (const auto& key : keys->second) {
    if (auto it = items_.find(key); it != items_.end())
      out.push_back(Unpack(it->second));
  }
  return out;
}

std::string Informer::LastResourceVersion() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resource_version_;
}

void Informer::IndexLocked(const std::string& key, const Json& object, bool insert) {
  for (const auto& [name, fn] : index_funcs_) {
    for (const auto& value : fn(object)) {
      auto& keys = indices_[name][value];
      if (insert) {
        keys.insert(key);
      } else {
        keys.erase(key);
        if (keys.empty())
          indices_[name].erase(value);
      }
    }
  }
}

void Informer::Upsert(Json object) {
  if (options_.transform)
    options_.transform(object);
  std::string key = KeyOf(object);
  Entry entry{Json::to_msgpack(object), ResourceVersionOf(object)};
  auto fresh = std::make_shared<const Json>(std::move(object));
  ObjectPtr old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = items_.find(key);
    if (it != items_.end()) {
      old = Unpack(it->second);
      IndexLocked(key, *old, false);
      it->second = std::move(entry);
    } else {
      items_.emplace(key, std::move(entry));
    }
    IndexLocked(key, *fresh, true);
  }
  for (const auto& h : handlers_) {
    if (old) {
      if (h.on_update)
        h.on_update(old, fresh);
    } else if (h.on_add) {
      h.on_add(fresh);
    }
  }
}

void Informer::Remove(const Json& object) {
  std::string key = KeyOf(object);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = items_.find(key);
    if (it == items_.end())
      return;
    IndexLocked(key, *Unpack(it->second), false);
    items_.erase(it);
  }
  // Hand out the final state the server reported, which may be newer than the cached one.
  Json final_state = object;
  if (options_.transform)
    options_.transform(final_state);
  auto last = std::make_shared<const Json>(std::move(final_state));
  for (const auto& h : handlers_) {
    if (h.on_delete)
      h.on_delete(last);
  }
}

void Informer::Replace(std::vector<Json> items, const std::string& resource_version) {
  // A relist: objects no longer listed were deleted while we were not watching; listed ones
  // are added or (when their resourceVersion moved) updated.
  std::map<std::string, std::string> listed;  // key -> resourceVersion
  for (const auto& item : items)
    listed.emplace(KeyOf(item), ResourceVersionOf(item));
  std::vector<ObjectPtr> gone;
  std::set<std::string> unchanged;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, entry] : items_) {
      auto it = listed.find(key);
      if (it == listed.end())
        gone.push_back(Unpack(entry));
      else if (it->second == entry.resource_version)
        unchanged.insert(key);
    }
  }
  for (const auto& object : gone)
    Remove(*object);
  for (auto& item : items) {
    if (!unchanged.count(KeyOf(item)))
      Upsert(std::move(item));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    resource_version_ = resource_version;
    synced_ = true;
  }
  synced_cv_.notify_all();
}

void Informer::Apply(const WatchEvent& event) {
  if (event.type == "ADDED" || event.type == "MODIFIED") {
    Upsert(event.object);
  } else if (event.type == "DELETED") {
    Remove(event.object);
  }
  std::string rv = ResourceVersionOf(event.object);
  std::lock_guard<std::mutex> lock(mu_);
  if (!rv.empty())
    resource_version_ = rv;
}

}  // namespace tessera::k8s
