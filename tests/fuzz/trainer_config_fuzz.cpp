// Fuzz target: the trainer's own YAML, as `tessera-worker rank --config FILE` reads it. Whatever
// the bytes, parsing gives a configuration or one kBadConfig message, never a crash or a hang;
// a configuration that parses writes back (TrainerConfigYaml) as text that parses to the same
// configuration; and one that validates can be planned (PlanTraining), or is refused in a
// message, at one rank and at a 2 x 2 x 2 mesh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "worker/train/config.h"
#include "worker/train/from_api.h"
#include "worker/train/plan.h"

namespace {

namespace train = tessera::train;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "trainer_config_fuzz: %s\n", what.c_str());
  std::abort();
}

void CheckPlan(const train::TrainerConfig& config, int world, int pipeline, int tensor) {
  if (!train::ValidateTrainerConfig(config, world, pipeline, tensor).ok())
    return;
  train::TrainingPlan plan;
  const train::Status st = train::PlanTraining(config, world, pipeline, tensor, &plan);
  if (!st.ok() && st.message().empty())
    Fail("PlanTraining refused a configuration without a message");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  train::TrainerConfig config;
  const train::Status parsed = train::ParseTrainerConfigYaml(text, "fuzz.yaml", &config);
  if (!parsed.ok()) {
    if (parsed.message().empty())
      Fail("a refused configuration without a message");
    return 0;
  }
  const std::string written = train::TrainerConfigYaml(config);
  train::TrainerConfig again;
  const train::Status reread = train::ParseTrainerConfigYaml(written, "written.yaml", &again);
  if (!reread.ok())
    Fail("TrainerConfigYaml wrote what does not parse: " + reread.message() + "\n" + written);
  if (train::TrainerConfigYaml(again) != written)
    Fail("the configuration changes through TrainerConfigYaml:\n" + written);
  CheckPlan(config, 1, 1, 1);
  CheckPlan(config, 8, 2, 2);
  return 0;
}
