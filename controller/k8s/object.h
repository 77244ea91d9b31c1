// Reading fields of API objects without trusting their types. The API server sends what its
// schemas allow, but a field read here as a string or an object may be absent, null or, from a
// proxy, an object of a resource without a schema or a newer version, of another type, and
// nlohmann's value() throws on a type it did not expect. These read such a field as "" or {}.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace tessera::k8s {

// object[key] when object is an object and that member is an object, else an empty object.
inline const nlohmann::json& ObjectAt(const nlohmann::json& object, const char* key) {
  static const nlohmann::json empty = nlohmann::json::object();
  if (!object.is_object())
    return empty;
  auto it = object.find(key);
  return it != object.end() && it->is_object() ? *it : empty;
}

// object[key] when it is a string, else "".
inline std::string StringAt(const nlohmann::json& object, const char* key) {
  if (!object.is_object())
    return {};
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// object[key] when it is an integer that fits int64_t, else nullopt (a float or an unsigned
// past INT64_MAX would be undefined or wrap to convert).
inline std::optional<int64_t> IntegerAt(const nlohmann::json& object, const char* key) {
  if (!object.is_object())
    return std::nullopt;
  auto it = object.find(key);
  if (it == object.end() || !it->is_number_integer())
    return std::nullopt;
  if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t{INT64_MAX})
    return std::nullopt;
  return it->get<int64_t>();
}

inline const nlohmann::json& Metadata(const nlohmann::json& object) {
  return ObjectAt(object, "metadata");
}

// metadata[key] when it is a string, else "".
inline std::string MetaString(const nlohmann::json& object, const char* key) {
  return StringAt(Metadata(object), key);
}

}  // namespace tessera::k8s
