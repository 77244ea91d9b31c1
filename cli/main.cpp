// `tessera`: the command-line tool. Subcommands: version, validate, crd, run, plan.
#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <sstream>

#include "api/codec.h"
#include "api/crd.h"
#include "api/flag_checks.h"
#include "api/validate.h"
#include "api/version.h"
#include "cli/plan/plan.h"
#include "cli/run/command.h"

namespace {

// Exit codes of `tessera validate`.
constexpr int kAllValid = 0;
constexpr int kInvalid = 1;
constexpr int kUnreadable = 2;

// Validates every TrainingJob document of every file; prints one `file: field: message` line
// per problem (a file of several documents names the document: `file#2`).
int RunValidate(const std::vector<std::string>& files) {
  int rc = kAllValid;
  for (const auto& file : files) {
    const tessera::api::FileText text = tessera::api::ReadJobFile(file);
    if (!text.ok()) {
      std::cerr << file << ": " << text.error << "\n";
      rc = kUnreadable;
      continue;
    }
    const tessera::api::ParsedYaml parsed = tessera::api::ParseYaml(text.text);
    if (!parsed.ok()) {
      std::cerr << file << ": not valid YAML: " << parsed.error << "\n";
      rc = kUnreadable;
      continue;
    }
    if (parsed.documents.empty()) {
      std::cerr << file << ": no TrainingJob in the file\n";
      rc = kUnreadable;
      continue;
    }
    for (size_t i = 0; i < parsed.documents.size(); ++i) {
      const std::string where =
          parsed.documents.size() == 1 ? file : file + "#" + std::to_string(i + 1);
      for (const auto& e : tessera::api::ValidateDocument(parsed.documents[i])) {
        std::cout << where << ": " << (e.path.empty() ? "(document)" : e.path) << ": " << e.message
                  << "\n";
        if (rc == kAllValid)
          rc = kInvalid;
      }
    }
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tessera: Kubernetes-native distributed training"};
  app.require_subcommand(1);
  int rc = 0;

  auto* version =
      app.add_subcommand("version", "Print the version, commit, and CUDA/NCCL versions");
  version->callback([] { std::cout << tessera::FormatBuildInfo(tessera::GetBuildInfo()); });

  std::vector<std::string> files;
  auto* validate = app.add_subcommand(
      "validate",
      "Check TrainingJob files offline with the rules the CRD enforces. Exit 0: all valid; 1: "
      "some invalid (one 'file: field: message' line each); 2: a file unreadable or not YAML");
  validate->add_option("FILE", files, "TrainingJob YAML files; - reads standard input")->required();
  validate->callback([&] { rc = RunValidate(files); });

  bool reference = false;
  auto* crd = app.add_subcommand("crd", "Print the TrainingJob CustomResourceDefinition (YAML)");
  crd->add_flag("--reference", reference,
                "Print the field reference tables of docs/api.md instead");
  crd->callback([&] {
    std::cout << (reference ? tessera::api::FieldReferenceMarkdown() : tessera::api::CrdYaml());
  });

  tessera::cli::AddRunCommand(&app, &rc);
  tessera::cli::AddPlanCommand(&app, &rc);

  try {
    app.parse(argc, argv);  // runs the chosen subcommand's callback, which sets rc
  } catch (const CLI::ParseError& e) {
    // --help is a ParseError whose exit is 0; any other ends as every other bad input of these
    // commands does: one line, exit code 2.
    if (e.get_exit_code() == 0)
      return app.exit(e);
    std::cerr << tessera::ParseErrorLine("tessera", app, e) << '\n';
    return 2;
  }
  return rc;
}
