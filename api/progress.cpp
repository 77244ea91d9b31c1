#include "api/progress.h"

#include <nlohmann/json.hpp>

#include <utility>

namespace tessera::api {
namespace {

// An integer that fits int64_t, else nullopt (nlohmann keeps integers above INT64_MAX as
// unsigned; reading one as int64_t would wrap).
std::optional<int64_t> Int64At(const nlohmann::json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || !it->is_number_integer())
    return std::nullopt;
  if (it->is_number_unsigned() && !std::in_range<int64_t>(it->get<uint64_t>()))
    return std::nullopt;
  return it->get<int64_t>();
}

std::optional<double> NumberAt(const nlohmann::json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || !it->is_number())
    return std::nullopt;
  return it->get<double>();
}

}  // namespace

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
  const std::optional<int64_t> step = Int64At(body, "step");
  if (!step || *step < 0)
    return std::nullopt;
  ProgressDocument p;
  p.step = *step;
  p.total_steps = Int64At(body, "totalSteps").value_or(0);
  p.loss = NumberAt(body, "loss").value_or(0);
  p.val_loss = NumberAt(body, "valLoss");
  p.tokens_per_second = NumberAt(body, "tokensPerSecond").value_or(0);
  if (auto it = body.find("updatedAt"); it != body.end() && it->is_string())
    p.updated_at = it->get<std::string>();
  return p;
}

std::optional<ProgressDocument> DecodeProgressJson(std::string_view text) {
  return DecodeProgress(nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false));
}

}  // namespace tessera::api
