#include "api/progress.h"

#include "api/json_fields.h"

#include <nlohmann/json.hpp>

namespace tessera::api {
std::string EncodeProgress(const ProgressDocument& progress) {
  nlohmann::json j = {
      {"step", progress.step},
      {"totalSteps", progress.total_steps},
      {"loss", progress.loss},
      {"valLoss", nullptr},
      {"tokensPerSecond", progress.tokens_per_second},
      {"updatedAt", progress.updated_at},
  };
  if (progress.val_loss)
    j["valLoss"] = *progress.val_loss;
  return j.dump();
}

std::optional<ProgressDocument> DecodeProgress(const nlohmann::json& body) {
  if (!body.is_object())
    return std::nullopt;
  const std::optional<int64_t> step = IntegerAt(body, "step");
  if (!step || *step < 0)
    return std::nullopt;
  ProgressDocument p;
  p.step = *step;
  p.total_steps = IntegerAt(body, "totalSteps").value_or(0);
  p.loss = NumberAt(body, "loss").value_or(0);
  p.val_loss = NumberAt(body, "valLoss");
  p.tokens_per_second = NumberAt(body, "tokensPerSecond").value_or(0);
  p.updated_at = StringAt(body, "updatedAt");
  return p;
}

std::optional<ProgressDocument> DecodeProgressJson(std::string_view text) {
  return DecodeProgress(nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false));
}

}  // namespace tessera::api
