// `tessera-controller`: reconciles TrainingJob resources against a Kubernetes API server.
#include <CLI/CLI.hpp>

#include <iostream>

#include "api/version.h"

int main(int argc, char** argv) {
  CLI::App app{"tessera-controller: runs TrainingJobs as gangs of worker pods"};
  bool print_version = false;
  app.add_flag("--version", print_version, "Print the version and exit");
  CLI11_PARSE(app, argc, argv);
  if (print_version) {
    std::cout << tessera::FormatBuildInfo(tessera::GetBuildInfo());
    return 0;
  }
  std::cerr << "tessera-controller: no reconciler is built yet; run with --version\n";
  return 2;
}
