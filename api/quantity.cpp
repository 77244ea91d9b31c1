#include "api/quantity.h"

#include <cmath>
#include <cstdlib>
#include <string>

namespace tessera::api {
namespace {

struct Suffix {
  std::string_view name;
  double factor;
};
constexpr Suffix kSuffixes[] = {
    {"Ki", 0x1p10}, {"Mi", 0x1p20}, {"Gi", 0x1p30}, {"Ti", 0x1p40}, {"Pi", 0x1p50},
    {"Ei", 0x1p60}, {"n", 1e-9},    {"u", 1e-6},    {"m", 1e-3},    {"k", 1e3},
    {"M", 1e6},     {"G", 1e9},     {"T", 1e12},    {"P", 1e15},    {"E", 1e18},
};

// The length of a leading [+-]?(digits[.digits?]|.digits) in `s`; 0 when there is none.
size_t NumberLength(std::string_view s, bool allow_fraction) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-'))
    i++;
  size_t digits = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    i++;
    digits++;
  }
  if (allow_fraction && i < s.size() && s[i] == '.') {
    i++;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      i++;
      digits++;
    }
  }
  return digits == 0 ? 0 : i;
}

}  // namespace

std::optional<double> ParseQuantity(std::string_view text) {
  if (text.empty() || text.size() > 64)
    return std::nullopt;
  const size_t n = NumberLength(text, true);
  if (n == 0)
    return std::nullopt;
  const double number = std::strtod(std::string(text.substr(0, n)).c_str(), nullptr);
  const std::string_view suffix = text.substr(n);
  std::optional<double> factor = suffix.empty() ? std::optional<double>(1.0) : std::nullopt;
  for (const Suffix& s : kSuffixes) {
    if (suffix == s.name)
      factor = s.factor;
  }
  if (!factor && suffix.size() > 1 && (suffix[0] == 'e' || suffix[0] == 'E')) {
    const std::string_view exponent = suffix.substr(1);
    if (NumberLength(exponent, false) == exponent.size())
      factor = std::pow(10.0, std::strtod(std::string(exponent).c_str(), nullptr));
  }
  if (!factor)
    return std::nullopt;
  const double value = number * *factor;
  if (!std::isfinite(value))
    return std::nullopt;
  return value;
}

}  // namespace tessera::api
