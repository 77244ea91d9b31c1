// `tessera-worker`: the per-pod agent that starts and supervises rank processes.
#include <CLI/CLI.hpp>

#include <iostream>

#include "api/version.h"

int main(int argc, char** argv) {
  CLI::App app{"tessera-worker: starts and supervises the rank processes of one pod"};
  bool print_version = false;
  app.add_flag("--version", print_version, "Print the version and exit");
  CLI11_PARSE(app, argc, argv);
  if (print_version) {
    std::cout << tessera::FormatBuildInfo(tessera::GetBuildInfo());
    return 0;
  }
  std::cerr << "tessera-worker: no trainer is built yet; run with --version\n";
  return 2;
}
