// The CRD and the docs table, both generated from the field tree of schema.cpp.
#include "api/crd.h"

#include <regex>
#include <set>
#include <sstream>

#include "api/job.h"
#include "api/schema.h"

namespace tessera::api {
namespace {

using ojson = nlohmann::ordered_json;

std::string OpenApiType(const FieldSchema& f) {
  switch (f.type) {
    case FieldType::kObject:
    case FieldType::kStringMap:
      return "object";
    case FieldType::kString:
      return "string";
    case FieldType::kInteger:
      return "integer";
    case FieldType::kNumber:
      return "number";
    case FieldType::kBoolean:
      return "boolean";
    case FieldType::kArray:
      return "array";
  }
  return "";
}

ojson ToOrdered(const nlohmann::json& v) {
  return ojson::parse(v.dump());
}

// A number bound written as an integer when it is one.
ojson Bound(double d) {
  if (d == static_cast<double>(static_cast<int64_t>(d)))
    return static_cast<int64_t>(d);
  return d;
}

ojson OpenApi(const FieldSchema& f) {
  ojson o;
  if (!f.description.empty())
    o["description"] = f.description;
  o["type"] = OpenApiType(f);
  if (f.server_schema_open)
    return o;
  if (!f.default_value.is_null())
    o["default"] = ToOrdered(f.default_value);
  if (!f.enum_values.empty()) {
    ojson e = ojson::array();
    for (const auto& v : f.enum_values)
      e.push_back(ToOrdered(v));
    o["enum"] = e;
  }
  if (f.minimum)
    o["minimum"] = Bound(*f.minimum);
  if (f.minimum && f.exclusive_minimum)
    o["exclusiveMinimum"] = true;  // apiextensions v1: a boolean that qualifies `minimum`
  if (f.maximum)
    o["maximum"] = Bound(*f.maximum);
  if (f.min_length)
    o["minLength"] = *f.min_length;
  if (f.max_length)
    o["maxLength"] = *f.max_length;
  if (!f.pattern.empty())
    o["pattern"] = f.pattern;
  if (!f.format.empty())
    o["format"] = f.format;
  if (f.max_items)
    o["maxItems"] = *f.max_items;
  if (f.max_properties)
    o["maxProperties"] = *f.max_properties;
  if (f.nullable)
    o["nullable"] = true;
  if (f.preserve_unknown)
    o["x-kubernetes-preserve-unknown-fields"] = true;
  if (!f.list_type.empty())
    o["x-kubernetes-list-type"] = f.list_type;
  if (!f.list_map_keys.empty())
    o["x-kubernetes-list-map-keys"] = f.list_map_keys;
  if (f.type == FieldType::kStringMap)
    o["additionalProperties"] = {{"type", "string"}};
  if (f.type == FieldType::kArray)
    o["items"] = OpenApi(f.items.front());
  if (!f.properties.empty()) {
    ojson props = ojson::object();
    ojson required = ojson::array();
    for (const auto& p : f.properties) {
      if (p.server_schema_open && p.name == "metadata") {
        // The apiserver allows only name (and generateName) constraints on root metadata.
        ojson meta = {{"type", "object"}};
        ojson name = OpenApi(*p.Property("name"));
        name.erase("description");
        meta["properties"] = {{"name", name}};
        props[p.name] = meta;
        continue;
      }
      props[p.name] = OpenApi(p);
      if (p.required && !p.server_schema_open)
        required.push_back(p.name);
    }
    o["properties"] = props;
    if (!required.empty())
      o["required"] = required;
  }
  if (!f.rules.empty()) {
    ojson rules = ojson::array();
    for (const auto& r : f.rules) {
      ojson rule = {{"rule", r.cel}, {"message", r.message}};
      if (!r.field_path.empty())
        rule["fieldPath"] = r.field_path;
      rules.push_back(rule);
    }
    o["x-kubernetes-validations"] = rules;
  }
  return o;
}

ojson PrinterColumn(const std::string& name, const std::string& type, const std::string& path,
                    const std::string& description) {
  return {{"name", name}, {"type", type}, {"jsonPath", path}, {"description", description}};
}

// --- YAML writer. ---

bool PlainSafe(const std::string& s) {
  static const std::regex kWord("[A-Za-z_][A-Za-z0-9_./-]*");
  static const std::set<std::string> kReserved = {
      "true", "True", "TRUE", "false", "False", "FALSE", "yes",  "Yes", "YES",
      "no",   "No",   "NO",   "on",    "On",    "ON",    "off",  "Off", "OFF",
      "y",    "Y",    "n",    "N",     "null",  "Null",  "NULL", "~"};
  return std::regex_match(s, kWord) && !kReserved.contains(s);
}

std::string Scalar(const ojson& v) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    return PlainSafe(s) ? s : v.dump();  // JSON escapes are valid YAML double-quoted escapes
  }
  return v.dump();
}

bool IsEmptyContainer(const ojson& v) {
  return (v.is_object() || v.is_array()) && v.empty();
}

void Write(const ojson& v, int indent, std::ostringstream& out);

// Writes the value that follows "key:" or "- " on the same line or the next ones.
void WriteAfter(const ojson& v, int indent, std::ostringstream& out) {
  if (IsEmptyContainer(v)) {
    out << " " << (v.is_object() ? "{}" : "[]") << "\n";
  } else if (v.is_object() || v.is_array()) {
    out << "\n";
    Write(v, indent, out);
  } else {
    out << " " << Scalar(v) << "\n";
  }
}

void Write(const ojson& v, int indent, std::ostringstream& out) {
  const std::string pad(indent, ' ');
  if (v.is_object()) {
    for (const auto& [key, value] : v.items()) {
      out << pad << Scalar(key) << ":";
      WriteAfter(value, indent + 2, out);
    }
  } else if (v.is_array()) {
    for (const auto& item : v) {
      if (item.is_object() && !item.empty()) {
        // "- key: value" with the rest of the object aligned under the first key.
        std::ostringstream inner;
        Write(item, indent + 2, inner);
        std::string text = inner.str();
        out << pad << "- " << text.substr(indent + 2);
      } else {
        out << pad << "-";
        WriteAfter(item, indent + 2, out);
      }
    }
  } else {
    out << pad << Scalar(v) << "\n";
  }
}

// --- Reference table. ---

std::string Cell(std::string s) {
  size_t pos = 0;
  while ((pos = s.find('|', pos)) != std::string::npos) {
    s.replace(pos, 1, "\\|");
    pos += 2;
  }
  return s;
}

std::string Number(double d) {
  ojson b = Bound(d);
  return b.dump();
}

void Rows(const FieldSchema& f, const std::string& path, const std::vector<LocatedRule>& rules,
          std::ostringstream& out) {
  for (const auto& p : f.properties) {
    const std::string child = path.empty() ? p.name : path + "." + p.name;
    std::vector<std::string> constraints;
    if (p.required)
      constraints.push_back("required");
    if (p.nullable)
      constraints.push_back("may be null");
    if (!p.enum_values.empty()) {
      std::string e;
      for (const auto& v : p.enum_values) {
        e += (e.empty() ? "" : " \\| ") + std::string("`") +
             (v.is_string() ? v.get<std::string>() : v.dump()) + "`";
      }
      constraints.push_back("one of " + e);
    }
    const FieldSchema& bounds = p.type == FieldType::kArray ? p.items.front() : p;
    const std::string each = p.type == FieldType::kArray ? "each " : "";
    const std::string above = bounds.exclusive_minimum ? "> " : "";
    if (bounds.minimum && bounds.maximum) {
      constraints.push_back(each + above + Number(*bounds.minimum) + "–" + Number(*bounds.maximum));
    } else if (bounds.minimum) {
      constraints.push_back(each + (bounds.exclusive_minimum ? "> " : "≥ ") +
                            Number(*bounds.minimum));
    } else if (bounds.maximum) {
      constraints.push_back(each + "≤ " + Number(*bounds.maximum));
    }
    if (p.min_length && p.min_length > 0)
      constraints.push_back("not empty");
    if (p.max_length)
      constraints.push_back("≤ " + std::to_string(*p.max_length) + " chars");
    if (!p.pattern.empty())
      constraints.push_back("matches `" + p.pattern + "`");
    if (p.max_items)
      constraints.push_back("≤ " + std::to_string(*p.max_items) + " items");
    if (p.list_type == "set")
      constraints.push_back("no duplicates");
    if (p.list_type == "map")
      constraints.push_back("unique by `type`");
    // Kubernetes' own name rules on metadata, in words; other formats by their name.
    if (p.format == "labels") {
      constraints.push_back(
          "keys qualified names (`[prefix/]name`); values empty or ≤ 63 "
          "letters, digits, `-`, `_`, `.`");
    } else if (p.format == "annotations") {
      constraints.push_back("keys qualified names (`[prefix/]name`); ≤ 256 KiB in all");
    } else if (p.format == "qualified-name") {
      constraints.push_back("a qualified name (`[prefix/]name`)");
    } else if (p.format == "name-prefix") {
      constraints.push_back("a DNS subdomain, but for a last `-`");
    } else if (!p.format.empty()) {
      constraints.push_back(p.format);
    }
    for (const auto& r : rules) {
      if (r.ErrorPath() == child)
        constraints.push_back(r.rule->summary);
    }
    std::string def = "—";
    if (!p.default_value.is_null()) {
      def = "`" + p.default_value.dump() + "`";
    } else if (!p.computed_default.empty()) {
      def = p.computed_default;
    }
    std::string joined;
    for (const auto& c : constraints)
      joined += (joined.empty() ? "" : "; ") + c;
    if (joined.empty())
      joined = "—";
    out << "| `" << child << "` | " << TypeName(p) << " | " << Cell(def) << " | " << Cell(joined)
        << " | " << Cell(p.description) << " |\n";
    if (p.type == FieldType::kObject)
      Rows(p, child, rules, out);
    if (p.type == FieldType::kArray && p.items.front().type == FieldType::kObject) {
      Rows(p.items.front(), child + "[]", rules, out);
    }
  }
}

}  // namespace

nlohmann::ordered_json CrdObject() {
  ojson schema = OpenApi(TrainingJobSchema());
  ojson version = {
      {"name", kVersion},
      {"served", true},
      {"storage", true},
      {"subresources", {{"status", ojson::object()}}},
      {"additionalPrinterColumns",
       ojson::array({
           PrinterColumn("Phase", "string", ".status.phase", "Lifecycle phase"),
           PrinterColumn("Ready", "integer", ".status.workers.ready",
                         "Worker pods Running and ready (out of Workers)"),
           PrinterColumn("Workers", "integer", ".spec.workers", "Worker pods in the gang"),
           PrinterColumn("Step", "integer", ".status.progress.step", "Last training step"),
           PrinterColumn("Loss", "number", ".status.progress.loss", "Training loss"),
           PrinterColumn("Restarts", "integer", ".status.restarts", "Gang restarts"),
           PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since creation"),
       })},
      {"schema", {{"openAPIV3Schema", schema}}},
  };
  return {
      {"apiVersion", "apiextensions.k8s.io/v1"},
      {"kind", "CustomResourceDefinition"},
      {"metadata",
       {{"name", std::string("trainingjobs.") + kGroup},
        {"labels",
         {{"app.kubernetes.io/name", "tessera"}, {"app.kubernetes.io/part-of", "tessera"}}}}},
      {"spec",
       {{"group", kGroup},
        {"names",
         {{"kind", kKind},
          {"listKind", "TrainingJobList"},
          {"plural", "trainingjobs"},
          {"singular", "trainingjob"},
          {"shortNames", {"tj"}},
          {"categories", {"tessera"}}}},
        {"scope", "Namespaced"},
        {"versions", ojson::array({version})}}},
  };
}

std::string ToYaml(const nlohmann::ordered_json& value) {
  std::ostringstream out;
  Write(value, 0, out);
  return out.str();
}

std::string CrdYaml() {
  return "# Generated by `tessera crd` from api/schema.cpp and api/rules.cpp: do not edit.\n"
         "# Regenerate with: tessera crd > manifests/crd/trainingjobs.tessera.dev.yaml\n" +
         ToYaml(CrdObject());
}

std::string FieldReferenceMarkdown() {
  std::ostringstream out;
  const auto rules = AllRules();
  out << "| Field | Type | Default | Constraints | Meaning |\n";
  out << "|---|---|---|---|---|\n";
  Rows(TrainingJobSchema(), "", rules, out);
  out << "\n";
  out << "| Rule | Error at | Constraint |\n";
  out << "|---|---|---|\n";
  for (const auto& r : rules) {
    out << "| `" << r.rule->id << "` | `" << r.ErrorPath() << "` | " << Cell(r.rule->summary)
        << " |\n";
  }
  return out.str();
}

}  // namespace tessera::api
