// Reading one field of a JSON object without trusting its type: nlohmann's value() throws when a
// member has another type than the default's, and a float or an unsigned past int64's range is
// undefined or wraps when read as int64_t. These read such a member as absent instead. For
// documents from outside the process: the trainer's /progress (api/progress.h), objects from the
// API server (controller/k8s/object.h), a TrainingJob's status. Header-only.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace tessera::api {

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

// object[key] when it is an integer that fits int64_t, else nullopt.
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

// object[key] when it is a number (integer or float), else nullopt.
inline std::optional<double> NumberAt(const nlohmann::json& object, const char* key) {
  if (!object.is_object())
    return std::nullopt;
  auto it = object.find(key);
  return it != object.end() && it->is_number() ? std::optional<double>(it->get<double>())
                                               : std::nullopt;
}

}  // namespace tessera::api
