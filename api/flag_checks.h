// Checks shared by the command lines of tessera, tessera-worker and tessera-controller (CLI11).
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <string>

namespace tessera {

// Refuses "nan" in a decimal flag, before its CLI::Range: a range check lets NaN through (every
// comparison with it is false), and NaN seconds converted to a duration is undefined.
inline CLI::Validator NotNaN() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        double number = 0;
        if (CLI::detail::lexical_cast(value, number) && std::isnan(number))
          return "Value " + value + " is not a number";
        return "";
      },
      "");
}

}  // namespace tessera
