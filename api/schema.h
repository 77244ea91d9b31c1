// The single definition of the TrainingJob API: a tree of field descriptors (type, description,
// default, enum, bounds) and the cross-field rules, each a C++ check next to its CEL twin. The
// decoder, `tessera validate`, the CRD (`tessera crd`) and docs/api.md are all produced from it.
// It does not decode or print anything itself; see api/codec.h, api/validate.h and api/crd.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/job.h"

namespace tessera::api {

enum class FieldType { kObject, kString, kInteger, kNumber, kBoolean, kArray, kStringMap };

// A constraint that involves more than one field. `cel` is evaluated by the apiserver with
// `self` bound to the object at the rule's location (x-kubernetes-validations); `check` is the
// same constraint for the offline validator, run on a job after ApplyDefaults. Both report
// `message`; offline, the values involved follow in parentheses. (A CEL messageExpression could
// print them on the server too, but the apiserver's cost estimate for string(int) concatenation
// exceeds the CRD budget by 100x, so the server's message is static.)
struct CrossFieldRule {
  std::string id;          // short name for documentation, e.g. "parallel-product"
  std::string cel;         // true when the object is valid
  std::string message;     // what is wrong, naming the fields involved
  std::string field_path;  // where the error points, relative to the rule's object, e.g.
                           // ".parallelism.tensor"; empty: the object itself
  std::string summary;     // one line for docs/api.md
  // Offline twin: std::nullopt when the rule holds for `job` (or when the fields it reads are
  // missing or out of bounds, which the schema reports on its own); otherwise the values that
  // break it, e.g. "4 does not divide 6" (may be empty).
  std::function<std::optional<std::string>(const TrainingJob& job)> check;
  // A transition rule: `cel` also reads `oldSelf`, the object as stored, and the apiserver
  // evaluates it on updates only. It has no `check` (one file has no earlier version).
  bool transition = false;
};

struct FieldSchema {
  std::string name;  // YAML/JSON key (camelCase)
  FieldType type = FieldType::kObject;
  std::string description;
  nlohmann::json default_value;  // null: no default written by the schema
  std::string computed_default;  // documentation of a default ApplyDefaults computes
  std::vector<nlohmann::json> enum_values;
  std::optional<double> minimum;
  bool exclusive_minimum = false;  // the value must be above `minimum`, not equal to it
  std::optional<double> maximum;
  std::optional<int64_t> min_length;
  std::optional<int64_t> max_length;
  std::optional<int64_t> max_items;
  std::optional<int64_t> max_properties;
  // "date-time" (also in the CRD), or one of Kubernetes' name rules on metadata, which the
  // apiserver applies itself: "labels" and "annotations" (a string map's keys, values, size),
  // "qualified-name" (a finalizer), "name-prefix" (generateName).
  std::string format;
  std::string pattern;  // ECMA regular expression a string must match (needs max_length)
  // `pattern`, compiled once when the schema is built (a compile per check was over 80% of
  // decoding a job, and the controller decodes on every reconcile).
  std::shared_ptr<const std::regex> pattern_regex;
  bool required = false;
  bool nullable = false;
  bool preserve_unknown = false;    // unknown keys kept, not refused (template, metadata)
  bool server_schema_open = false;  // CRD shows only `type` (metadata at the root)
  std::string list_type;            // "set" | "map" | "atomic" | ""
  std::vector<std::string> list_map_keys;
  std::vector<FieldSchema> properties;  // kObject
  std::vector<FieldSchema> items;       // kArray: exactly one element schema
  std::vector<CrossFieldRule> rules;    // evaluated at this object

  const FieldSchema* Property(const std::string& key) const;
};

// The whole TrainingJob object: apiVersion, kind, metadata, spec, status.
const FieldSchema& TrainingJobSchema();

// A field at a dotted path from the root, e.g. "spec.parallelism.tensor"; array items are
// reached with "[]" ("spec.runPolicy.permanentExitCodes[]"). nullptr when there is none.
const FieldSchema* FindField(const std::string& dotted_path);

// A rule together with the dotted path of the object it is attached to ("" = the root).
struct LocatedRule {
  std::string object_path;
  const CrossFieldRule* rule;
  // The path an error of this rule points at, e.g. "spec.parallelism.tensor".
  std::string ErrorPath() const;
  // The offline error message: rule->message, then " (detail)" when there is a detail.
  std::string Message(const std::string& detail) const;
};

// Every cross-field rule in the tree, in document order.
std::vector<LocatedRule> AllRules();

// Structural and value checks of `value` against the schema, as the apiserver applies them:
// unknown fields, wrong types, missing required fields, enums, bounds, lengths, duplicate set
// items. Every problem is returned, fields in key order. Does not run cross-field rules. Sets
// `*structurally_sound` (when given) to false if a wrong type or unknown field keeps the
// document from being read into a TrainingJob. Call ApplySchemaDefaults first, as the apiserver
// does, so that nulls of non-nullable fields count as absent.
std::vector<FieldError> CheckSchema(const nlohmann::json& value,
                                    bool* structurally_sound = nullptr);

// Writes every schema default into `value` where the field is absent and its parent object is
// present, recursing into defaulted objects, as the apiserver does. Leaves wrong types alone.
void ApplySchemaDefaults(nlohmann::json& value);

// Human-readable name of a type ("integer", "map of string").
std::string TypeName(const FieldSchema& field);

}  // namespace tessera::api
