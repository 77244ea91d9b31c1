// Fuzz target: what the controller reads from outside the API server. A worker pod's /progress
// body (rank 0 serves it; the controller polls it every few seconds, and the local runner's
// progress bar reads the same document), a container's termination message (whose last line
// may be rank 0's final progress) and a kubeconfig. Whatever the bytes: a sample or
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

  // A termination message: taken apart, put back together and taken apart again, it is the
  // same; a progress line joined below any text within the kubelet's 4096 bytes comes back out.
  const tessera::api::TerminationMessage said = tessera::api::SplitTerminationMessage(text);
  if (said.progress.has_value() != !said.progress_json.empty())
    std::abort();
  const tessera::api::TerminationMessage again = tessera::api::SplitTerminationMessage(
      tessera::api::JoinTerminationMessage(said.text, said.progress_json, text.size() + 1));
  if (again.text != said.text || again.progress_json != said.progress_json)
    std::abort();
  if (report) {
    const std::string json = tessera::api::EncodeProgress(*report);
    const std::string joined = tessera::api::JoinTerminationMessage(text, json, 4096);
    const tessera::api::TerminationMessage back = tessera::api::SplitTerminationMessage(joined);
    if (joined.size() > 4096 || back.progress != report || text.rfind(back.text, 0) != 0)
      std::abort();
  }

  const auto config = tessera::k8s::ParseKubeconfig(text, "/nonexistent-fuzz-dir");
  if (!config.ok() && config.error().empty()) {
    std::fprintf(stderr, "controller_input_fuzz: a kubeconfig refused without a message\n");
    std::abort();
  }
  return 0;
}
