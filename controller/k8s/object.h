// Reading fields of API objects without trusting their types (api/json_fields.h). The API
// server sends what its schemas allow, but a field read here may be absent, null or, from a
// proxy, a resource without a schema or a newer version, of another type; these read it as
// absent ("", {}, nullopt) where nlohmann's value() would throw.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "api/json_fields.h"

namespace tessera::k8s {

using api::IntegerAt;
using api::NumberAt;
using api::ObjectAt;
using api::StringAt;

inline const nlohmann::json& Metadata(const nlohmann::json& object) {
  return ObjectAt(object, "metadata");
}

// metadata[key] when it is a string, else "".
inline std::string MetaString(const nlohmann::json& object, const char* key) {
  return StringAt(Metadata(object), key);
}

}  // namespace tessera::k8s
