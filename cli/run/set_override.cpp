#include "cli/run/set_override.h"

#include <fmt/format.h>

#include <cctype>
#include <limits>
#include <variant>
#include <vector>

#include "api/codec.h"
#include "api/utf8.h"

namespace tessera::cli {
namespace {

// A YAML file nests a few hundred levels at most; a job's paths need far fewer steps.
constexpr size_t kMaxPathSteps = 100;

using Step = std::variant<std::string, size_t>;  // an object key or a list index

// Splits `a.b[2].c` into steps; empty result on a syntax error (*error says which).
std::vector<Step> ParsePath(const std::string& path, std::string* error) {
  std::vector<Step> steps;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '[') {
      const size_t close = path.find(']', i);
      if (close == std::string::npos || close == i + 1) {
        *error = "unclosed or empty [index]";
        return {};
      }
      size_t index = 0;
      for (size_t k = i + 1; k < close; ++k) {
        if (!std::isdigit(static_cast<unsigned char>(path[k]))) {
          *error = "index '" + path.substr(i + 1, close - i - 1) + "' is not a number";
          return {};
        }
        const size_t digit = static_cast<size_t>(path[k] - '0');
        // Refused rather than wrapped around, which would name another element.
        if (index > (std::numeric_limits<size_t>::max() - digit) / 10) {
          *error = "index '" + path.substr(i + 1, close - i - 1) + "' is too large";
          return {};
        }
        index = index * 10 + digit;
      }
      steps.emplace_back(index);
      i = close + 1;
      if (i < path.size() && path[i] != '.' && path[i] != '[') {
        *error = "expected '.' or '[' after ']'";
        return {};
      }
    } else {
      size_t end = i;
      while (end < path.size() && path[end] != '.' && path[end] != '[')
        ++end;
      if (end == i) {
        *error = "empty field name";
        return {};
      }
      steps.emplace_back(path.substr(i, end - i));
      i = end;
    }
    // Deeper, a job could nest beyond what checking it can recurse into (stack overflow).
    if (steps.size() > kMaxPathSteps) {
      *error = fmt::format("the path has more than {} steps", kMaxPathSteps);
      return {};
    }
    if (i < path.size() && path[i] == '.') {
      ++i;
      if (i == path.size()) {
        *error = "path ends with '.'";
        return {};
      }
    }
  }
  if (steps.empty())
    *error = "empty path";
  return steps;
}

}  // namespace

std::string ApplySetOverride(const std::string& assignment, nlohmann::json* document) {
  const std::string where = "--set " + assignment;
  // A path or value that is not UTF-8 would reach the job's JSON, which cannot hold it.
  if (const auto bad = api::FirstNonTextByte(assignment)) {
    return fmt::format("--set {}...: byte {} (0x{:02X}) is not UTF-8 text",
                       assignment.substr(0, *bad), *bad + 1,
                       static_cast<unsigned char>(assignment[*bad]));
  }
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos) {
    return where + ": expected path=value, e.g. spec.trainer.schedule.steps=50";
  }
  std::string error;
  std::vector<Step> steps = ParsePath(assignment.substr(0, eq), &error);
  if (steps.empty())
    return where + ": " + error;
  if (const auto* first = std::get_if<std::string>(&steps.front());
      first == nullptr ||
      (*first != "spec" && *first != "metadata" && *first != "apiVersion" && *first != "kind")) {
    steps.insert(steps.begin(), Step(std::string("spec")));
  }

  const std::string value_text = assignment.substr(eq + 1);
  nlohmann::json value;
  if (value_text.empty()) {
    value = "";
  } else {
    const api::ParsedYaml parsed = api::ParseYaml(value_text);
    if (!parsed.ok())
      return where + ": the value is not valid YAML: " + parsed.error;
    if (parsed.documents.size() > 1) {
      return fmt::format("{}: the value holds {} YAML documents; give one", where,
                         parsed.documents.size());
    }
    value = parsed.documents.empty() ? nlohmann::json(nullptr) : parsed.documents.front();
  }

  nlohmann::json copy = *document;
  nlohmann::json* node = &copy;
  std::string walked;
  for (size_t s = 0; s < steps.size(); ++s) {
    const bool last = s + 1 == steps.size();
    if (const auto* key = std::get_if<std::string>(&steps[s])) {
      walked += (walked.empty() ? "" : ".") + *key;
      if (node->is_null())
        *node = nlohmann::json::object();
      if (!node->is_object())
        return where + ": " + walked + " is inside a value that is not an object";
      nlohmann::json& child = (*node)[*key];
      node = &child;
    } else {
      const size_t index = std::get<size_t>(steps[s]);
      walked += "[" + std::to_string(index) + "]";
      if (node->is_null())
        *node = nlohmann::json::array();
      if (!node->is_array())
        return where + ": " + walked + " indexes a value that is not a list";
      if (index > node->size()) {
        return where + ": " + walked + " is past the end of a list of " +
               std::to_string(node->size());
      }
      if (index == node->size())
        node->push_back(nullptr);
      node = &(*node)[index];
    }
    if (last)
      *node = value;
  }
  *document = std::move(copy);
  return "";
}

}  // namespace tessera::cli
