// Reading what a test's processes left in files: a whole file, and the `NAME=value` lines
// that `env` writes.
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace tessera::testing {

// The file's text; "" when it cannot be read.
inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// `NAME=value` lines of a file written by `env`, as a map.
inline std::map<std::string, std::string> ReadEnv(const std::filesystem::path& path) {
  std::map<std::string, std::string> env;
  std::istringstream in(ReadFile(path));
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos)
      env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

}  // namespace tessera::testing
