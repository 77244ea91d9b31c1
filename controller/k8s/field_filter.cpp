#include "controller/k8s/field_filter.h"

#include <cstddef>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

namespace tessera::k8s {

using Json = nlohmann::json;

FieldFilter FieldFilter::Keep(std::initializer_list<std::string_view> paths) {
  return FromPaths(std::vector<std::string_view>(paths));
}

FieldFilter FieldFilter::FromPaths(const std::vector<std::string_view>& paths) {
  static const auto kWhole = std::make_shared<const FieldFilter>();
  // Grouped by their first name: the rest of each path below it, or (empty) the whole value.
  std::map<std::string_view, std::vector<std::string_view>> below;
  std::set<std::string_view> whole;
  for (std::string_view path : paths) {
    const std::size_t dot = path.find('.');
    const std::string_view name = path.substr(0, dot);
    below[name];
    if (dot == std::string_view::npos)
      whole.insert(name);
    else
      below[name].push_back(path.substr(dot + 1));
  }
  FieldFilter filter;
  filter.keep_all_ = false;
  for (const auto& [name, rest] : below) {
    filter.members_.emplace(
        std::string(name),
        whole.count(name) ? kWhole : std::make_shared<const FieldFilter>(FromPaths(rest)));
  }
  return filter;
}

FieldFilter FieldFilter::Under(std::string_view name, std::shared_ptr<const FieldFilter> inner,
                               std::initializer_list<std::string_view> names) {
  FieldFilter filter = Keep(names);
  filter.members_.insert_or_assign(std::string(name), std::move(inner));
  return filter;
}

const FieldFilter* FieldFilter::Member(std::string_view name) const {
  if (keep_all_)
    return this;
  auto it = members_.find(name);
  return it == members_.end() ? nullptr : it->second.get();
}

Json FieldFilter::Apply(const Json& value) const {
  if (keep_all_ || !value.is_structured())
    return value;
  if (value.is_array()) {
    Json kept = Json::array();
    for (const Json& element : value)
      kept.push_back(Apply(element));
    return kept;
  }
  Json kept = Json::object();
  for (const auto& [name, filter] : members_) {
    if (auto it = value.find(name); it != value.end())
      kept[name] = filter->Apply(*it);
  }
  return kept;
}

namespace {

// nlohmann's SAX interface, building the tree as its own DOM parser does, except that a member
// whose name the current object's filter does not keep is skipped: its value, however large,
// is read past by counting nesting, and nothing is allocated for it.
class FilteringBuilder {
 public:
  explicit FilteringBuilder(const FieldFilter& filter) : root_filter_(&filter) {}

  Json Take() { return std::move(root_); }

  bool null() { return Value(nullptr); }
  bool boolean(bool value) { return Value(value); }
  bool number_integer(std::int64_t value) { return Value(value); }
  bool number_unsigned(std::uint64_t value) { return Value(value); }
  bool number_float(double value, const std::string& /*text*/) { return Value(value); }
  bool string(std::string& value) { return Value(std::move(value)); }
  bool binary(Json::binary_t& value) { return Value(std::move(value)); }

  bool start_object(std::size_t /*size*/) { return Start(Json::object()); }
  bool start_array(std::size_t /*size*/) { return Start(Json::array()); }
  bool end_object() { return End(); }
  bool end_array() { return End(); }

  bool key(std::string& name) {
    if (skip_depth_ > 0)
      return true;
    Frame& frame = stack_.back();
    frame.member_filter = frame.filter->Member(name);
    if (frame.member_filter != nullptr)
      frame.member_name = std::move(name);
    return true;
  }

  bool parse_error(std::size_t /*position*/, const std::string& /*token*/,
                   const nlohmann::detail::exception& /*error*/) {
    return false;
  }

 private:
  struct Frame {
    Json* container;
    const FieldFilter* filter;  // of this container's members (or elements)
    // Of an object: the member whose value comes next, and its filter (null: skip it).
    std::string member_name;
    const FieldFilter* member_filter = nullptr;
  };

  // Where the next value goes, with its filter; null when it is skipped.
  std::pair<Json*, const FieldFilter*> Slot() {
    if (stack_.empty())
      return {&root_, root_filter_};
    Frame& frame = stack_.back();
    if (frame.container->is_array()) {
      frame.container->push_back(nullptr);
      return {&frame.container->back(), frame.filter};
    }
    if (frame.member_filter == nullptr)
      return {nullptr, nullptr};
    Json* slot = &(*frame.container)[frame.member_name];
    return {slot, std::exchange(frame.member_filter, nullptr)};
  }

  template <typename T>
  bool Value(T&& value) {
    if (skip_depth_ > 0)
      return true;
    if (Json* slot = Slot().first)
      *slot = Json(std::forward<T>(value));
    return true;
  }

  bool Start(Json empty) {
    if (skip_depth_ > 0) {
      skip_depth_++;
      return true;
    }
    auto [slot, filter] = Slot();
    if (slot == nullptr) {
      skip_depth_ = 1;
      return true;
    }
    *slot = std::move(empty);
    stack_.push_back(Frame{slot, filter, {}, nullptr});
    return true;
  }

  bool End() {
    if (skip_depth_ > 0) {
      skip_depth_--;
      return true;
    }
    stack_.pop_back();
    return true;
  }

  Json root_;
  const FieldFilter* root_filter_;
  std::vector<Frame> stack_;
  std::size_t skip_depth_ = 0;  // > 0: inside a skipped value, this many levels deep
};

}  // namespace

Json ParseFiltered(std::string_view text, const FieldFilter& filter) {
  FilteringBuilder builder(filter);
  if (!Json::sax_parse(text, &builder, nlohmann::detail::input_format_t::json, /*strict=*/true))
    return Json(Json::value_t::discarded);
  return builder.Take();
}

}  // namespace tessera::k8s
