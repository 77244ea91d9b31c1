// The exports of the TrainingJob definition (api/schema.h): the CustomResourceDefinition that
// `tessera crd` prints and manifests/crd/ holds, and the field reference table of docs/api.md.
// Both are pure functions of the definition; nothing here talks to a cluster.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tessera::api {

// The CRD trainingjobs.tessera.dev (apiextensions.k8s.io/v1) as an ordered JSON value: the
// structural openAPIV3Schema with descriptions, defaults, enums, bounds and CEL rules, the status
// subresource, printer columns and names.
nlohmann::ordered_json CrdObject();

// CrdObject() as YAML, with a header comment; byte-for-byte stable.
std::string CrdYaml();

// Markdown tables of every field (path, type, default, constraints, meaning) and every
// cross-field rule; docs/api.md holds this text between its GENERATED markers.
std::string FieldReferenceMarkdown();

// A small deterministic YAML writer for JSON values: block style, strings double-quoted unless
// they are plain words that YAML would not read as anything but a string.
std::string ToYaml(const nlohmann::ordered_json& value);

}  // namespace tessera::api
