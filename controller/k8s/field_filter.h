// Parsing JSON into a tree that holds only some of its fields. The informers cache a few fields
// of each pod and node (controller/reconcile/cache_trim.h); parsing a whole watch event into a
// tree and trimming it afterwards allocates for every field the cache then throws away (a kwok
// pod's spec, environment, managedFields ...). ParseFiltered skips those while it reads.
// Nothing here knows about Kubernetes kinds: the caller says which fields to keep.
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::k8s {

// Which members of a JSON object to keep, by path. A member named with nothing below it keeps
// its whole value; one with members below keeps, of an object value, only those. Arrays are
// transparent: the filter of an array's member applies to each of its elements. A value that
// is not an object where the filter expects one is kept as it is (the readers decide what a
// mistyped field means). Immutable once built; safe to share between threads.
class FieldFilter {
 public:
  // Keeps everything.
  FieldFilter() = default;
  // Keeps the dotted paths, e.g. {"metadata.name", "metadata.labels", "status"}. A path that
  // is a prefix of another keeps the whole value ("status" and "status.phase": all of status).
  static FieldFilter Keep(std::initializer_list<std::string_view> paths);
  // Keeps member `name` of the root filtered by `inner` (shared, not copied: cheap enough to
  // build per call) and the members `names` whole: a watch line is Under("object", pods,
  // {"type"}).
  static FieldFilter Under(std::string_view name, std::shared_ptr<const FieldFilter> inner,
                           std::initializer_list<std::string_view> names = {});

  // The filter of member `name`'s value, or null when the member is dropped. Valid as long
  // as this filter.
  const FieldFilter* Member(std::string_view name) const;

  // What ParseFiltered would have kept of `value` (the same tree, for tests).
  nlohmann::json Apply(const nlohmann::json& value) const;

 private:
  static FieldFilter FromPaths(const std::vector<std::string_view>& paths);

  bool keep_all_ = true;
  std::map<std::string, std::shared_ptr<const FieldFilter>, std::less<>> members_;
};

// Parses `text` as one JSON value keeping what `filter` keeps, or returns a discarded value
// (is_discarded()) when the text is not JSON. Equal to filter.Apply(nlohmann::json::parse(text))
// for every valid text, but allocates nothing for what is dropped. Duplicate members: the last
// one wins, as in nlohmann::json::parse.
nlohmann::json ParseFiltered(std::string_view text, const FieldFilter& filter);

}  // namespace tessera::k8s
