// Fuzz target: a job file, as `tessera validate`, `tessera plan` and `tessera run` read it.
// Whatever the bytes, decoding gives a job or errors, never a crash or a hang; a job decoded
// without errors encodes to JSON that decodes to the same job; and `tessera plan` on the text
// prints a plan (exit 0) or refuses it (exit 2) — text output for inputs of even length, JSON
// for odd. A job that decodes and validates without errors must plan (exit 0): what the API
// accepts, the built-in trainer must run (what depends on the machine, plan only reports).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>

#include "api/codec.h"
#include "api/validate.h"
#include "cli/plan/plan.h"

namespace {

using tessera::api::DecodeResult;
using tessera::api::TrainingJob;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "job_plan_fuzz: %s\n", what.c_str());
  std::abort();
}

// Whether the text is a job that decodes and validates without errors.
bool CheckRoundTrip(const std::string& text) {
  const DecodeResult decoded = tessera::api::DecodeYaml(text);
  if (!decoded.job || !decoded.errors.empty())
    return false;
  TrainingJob job = *decoded.job;
  tessera::api::ApplyDefaults(job);
  const auto errors = tessera::api::Validate(job);
  const nlohmann::json once = tessera::api::EncodeJson(job);
  const DecodeResult again = tessera::api::DecodeJson(once);
  if (!again.job || !again.errors.empty())
    Fail("the encoded job does not decode: " + once.dump());
  TrainingJob second = *again.job;
  tessera::api::ApplyDefaults(second);
  if (tessera::api::EncodeJson(second) != once)
    Fail("the job changes through JSON: " + once.dump());
  if (tessera::api::Validate(second) != errors)
    Fail("validation changes through JSON: " + once.dump());
  return errors.empty();
}

// Runs `tessera plan -` with `text` as standard input and the output thrown away.
int Plan(const std::string& text, const char* output, bool valid) {
  std::istringstream in(text);
  std::ostringstream out, err;
  std::streambuf* cin = std::cin.rdbuf(in.rdbuf());
  std::streambuf* cout = std::cout.rdbuf(out.rdbuf());
  std::streambuf* cerr = std::cerr.rdbuf(err.rdbuf());
  const int rc = tessera::cli::PlanJob({.file = "-", .sets = {}, .output = output});
  std::cin.rdbuf(cin);
  std::cout.rdbuf(cout);
  std::cerr.rdbuf(cerr);
  if (rc != tessera::cli::kPlanPrinted && rc != tessera::cli::kPlanBadJob)
    Fail("tessera plan exited " + std::to_string(rc));
  if (rc == tessera::cli::kPlanBadJob && err.str().empty())
    Fail("tessera plan refused the job without saying why");
  if (rc == tessera::cli::kPlanBadJob && valid)
    Fail("tessera plan refused a job that validates: " + err.str());
  return rc;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const bool valid = CheckRoundTrip(text);
  Plan(text, size % 2 == 0 ? "text" : "json", valid);
  return 0;
}
