#include "api/progress.h"

#include "api/json_fields.h"

#include <nlohmann/json.hpp>

#include <algorithm>

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

TerminationMessage SplitTerminationMessage(std::string_view message) {
  const size_t newline = message.rfind('\n');
  const size_t start = newline == std::string_view::npos ? 0 : newline + 1;
  const std::string_view last = message.substr(start);
  TerminationMessage out;
  if (last.starts_with(kFinalProgressPrefix)) {
    const std::string_view json = last.substr(kFinalProgressPrefix.size());
    if (auto progress = DecodeProgressJson(json)) {
      out.text = std::string(message.substr(0, newline == std::string_view::npos ? 0 : newline));
      out.progress_json = std::string(json);
      out.progress = std::move(progress);
      return out;
    }
  }
  out.text = std::string(message);
  return out;
}

std::string JoinTerminationMessage(std::string_view text, std::string_view progress_json,
                                   size_t max_bytes) {
  std::string line;
  if (!progress_json.empty())
    line = std::string(kFinalProgressPrefix) + std::string(progress_json);
  if (line.size() > max_bytes)
    line.clear();
  const size_t reserved = line.empty() ? 0 : line.size() + 1;  // the line and its newline
  const size_t room = reserved > max_bytes ? 0 : max_bytes - reserved;
  size_t cut = std::min(text.size(), room);
  while (cut < text.size() && cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
    --cut;  // not inside a character
  std::string out(text.substr(0, cut));
  if (!line.empty()) {
    if (!out.empty())
      out += '\n';
    out += line;
  }
  return out;
}

}  // namespace tessera::api
