// Registers the `run` subcommand of the `tessera` CLI (cli/main.cpp) on top of RunJob.
#pragma once

#include <CLI/CLI.hpp>

namespace tessera::cli {

// Adds `tessera run FILE [--set path=value ...] [--summary-json PATH] [--workdir DIR] ...` to
// `app`; when it is the chosen subcommand its callback runs the job and stores the exit code in
// *rc, which must outlive app.parse.
void AddRunCommand(CLI::App* app, int* rc);

}  // namespace tessera::cli
