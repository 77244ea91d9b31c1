// The trainer's /progress document: rank 0 serves it on its metrics port
// (worker/train/metrics.h), the controller polls it into TrainingJob status and `tessera run`
// draws its progress bar from it. One encoder and one decoder, so the writer and both readers
// agree on every field and on what a reader refuses.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace tessera::api {

struct ProgressDocument {
  int64_t step = 0;         // steps done, >= 0
  int64_t total_steps = 0;  // 0: unknown
  double loss = 0;
  std::optional<double> val_loss;  // null before the first validation
  double tokens_per_second = 0;
  std::string updated_at;  // RFC 3339 UTC of the last step; "" before it
  bool operator==(const ProgressDocument&) const = default;
};

// {"step", "totalSteps", "loss", "valLoss" (null when absent), "tokensPerSecond",
//  "updatedAt"}.
std::string EncodeProgress(const ProgressDocument& progress);

// The document, or nullopt when it is not an object with an integer "step" in [0, 2^63).
// Every other field is optional: a missing or mistyped one reads as unknown (0, absent, ""),
// and so does a "totalSteps" that is not an int64 (a float past int64's range would be
// undefined to convert).
std::optional<ProgressDocument> DecodeProgress(const nlohmann::json& body);
// The same from the document's text (not JSON: nullopt).
std::optional<ProgressDocument> DecodeProgressJson(std::string_view text);

// Rank 0's /progress document as it ended, carried to the controller by the container's
// termination message (which the kubelet copies into the pod's status whether the container
// succeeded or failed): the message's last line, after kFinalProgressPrefix, below the
// failure's own line when there is one. The controller reads it into status.progress, so a
// finished job shows the step it reached, not the one of its last poll.
inline constexpr std::string_view kFinalProgressPrefix = "final progress: ";

// A termination message taken apart: what the container said, and the final progress line.
struct TerminationMessage {
  std::string text;           // the message without the progress line ("" when it had none)
  std::string progress_json;  // the document's text as written; "" when there is none
  std::optional<ProgressDocument> progress;  // decoded from progress_json
};

// Splits `message`: its last line is the progress line when it starts with
// kFinalProgressPrefix and the rest decodes (DecodeProgressJson); any other text is all `text`.
TerminationMessage SplitTerminationMessage(std::string_view message);

// `text` then, on a line of its own, kFinalProgressPrefix and `progress_json` (when not
// empty), in at most `max_bytes`: `text` is cut (between UTF-8 characters) to make room for the
// progress line, which is left out only when it alone would not fit.
std::string JoinTerminationMessage(std::string_view text, std::string_view progress_json,
                                   size_t max_bytes);

// A whole answer to GET /progress is at most this long (a document is a few hundred bytes).
inline constexpr size_t kMaxProgressResponseBytes = size_t{1} << 20;

// GETs http://host:port/progress, `host` an IPv4 or IPv6 literal (a pod IP; no name lookup),
// within `timeout` in all: the body of a whole 200 answer, or nullopt (nothing answered in
// time, another status, an answer over kMaxProgressResponseBytes or still coming at the
// deadline). Serving /progress is the user's code in a pod; this bounds what it can cost the
// reader. Blocking; thread-safe.
std::optional<std::string> FetchProgressBody(const std::string& host, int port,
                                             std::chrono::milliseconds timeout);

}  // namespace tessera::api
