// Fuzz target: what the controller reads from outside the API server. A worker pod's /progress
// body (rank 0 serves it; the controller polls it every few seconds, and the local runner's
// progress bar reads the same document) and a kubeconfig. Whatever the bytes: a sample or
// nothing, a configuration or one error line, never a crash or a hang.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "api/progress.h"
#include "cli/run/progress.h"
#include "controller/k8s/config.h"
#include "controller/reconcile/progress.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);

  const nlohmann::json body = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const auto sample = tessera::reconcile::ParseProgress(body, /*attempt=*/3);
  if (sample && (sample->attempt != 3 || sample->step < 0))
    std::abort();
  const auto report = tessera::api::DecodeProgressJson(text);
  if (sample.has_value() != report.has_value())
    std::abort();  // the controller and `tessera run` disagree on a body
  if (report) {
    // What the trainer would write for it reads back the same.
    if (tessera::api::DecodeProgressJson(tessera::api::EncodeProgress(*report)) != report)
      std::abort();
    // What the progress bar and the log line make of it must not crash either.
    tessera::cli::ProgressView view;
    view.report = *report;
    view.eta_seconds = report->loss;  // any double the document holds
    tessera::cli::FormatProgressBar(view, 80);
    tessera::cli::FormatProgressLine(view);
  }

  const auto config = tessera::k8s::ParseKubeconfig(text, "/nonexistent-fuzz-dir");
  if (!config.ok() && config.error().empty()) {
    std::fprintf(stderr, "controller_input_fuzz: a kubeconfig refused without a message\n");
    std::abort();
  }
  return 0;
}
