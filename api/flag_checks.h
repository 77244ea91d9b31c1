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

// The one line a refused command line ends with, CLI11's error and where help is:
// "tessera run: The following argument was not expected: --bogus (see tessera run --help)".
// `program` names the binary (CLI11 would take argv[0], a path); the subcommands the parse got
// to follow it. app.exit(e) would print a second line, "Run with --help for more information".
inline std::string ParseErrorLine(const std::string& program, const CLI::App& app,
                                  const CLI::ParseError& e) {
  std::string command = program;
  for (const CLI::App* sub = &app; !sub->get_subcommands().empty();) {
    sub = sub->get_subcommands().front();
    command += " " + sub->get_name();
  }
  return command + ": " + e.what() + " (see " + command + " --help)";
}

}  // namespace tessera
