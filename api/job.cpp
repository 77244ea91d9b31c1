// Model presets and error formatting for the TrainingJob types.
#include "api/job.h"

namespace tessera::api {

std::string FormatError(const FieldError& error) {
  return error.path.empty() ? error.message : error.path + ": " + error.message;
}

const std::vector<ModelPreset>& ModelPresets() {
  static const std::vector<ModelPreset> presets = {
      {"gpt2-124m", 12, 768, 12, 1024, 50257},
      {"gpt2-350m", 24, 1024, 16, 1024, 50257},
      {"gpt2-774m", 36, 1280, 20, 1024, 50257},
      {"gpt2-1558m", 48, 1600, 25, 1024, 50257},
  };
  return presets;
}

const ModelPreset* FindModelPreset(const std::string& name) {
  for (const auto& p : ModelPresets()) {
    if (p.name == name)
      return &p;
  }
  return nullptr;
}

}  // namespace tessera::api
