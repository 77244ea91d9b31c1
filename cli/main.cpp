// `tessera`: the command-line tool. Subcommands: version.
#include <CLI/CLI.hpp>

#include <iostream>

#include "api/version.h"

int main(int argc, char** argv) {
  CLI::App app{"Tessera: Kubernetes-native distributed training"};
  app.require_subcommand(1);

  auto* version = app.add_subcommand("version", "Print the version, commit, and CUDA/NCCL versions");
  version->callback([] { std::cout << tessera::FormatBuildInfo(tessera::GetBuildInfo()); });

  CLI11_PARSE(app, argc, argv);
  return 0;
}
