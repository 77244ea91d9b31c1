// RFC 3339 timestamps as the Kubernetes API writes them: metav1.Time ("2026-01-02T03:04:05Z",
// whole seconds, UTC) and metav1.MicroTime (six fractional digits). Pure functions.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::reconcile {

using TimePoint = std::chrono::system_clock::time_point;

// "2026-01-02T03:04:05Z": truncated to whole seconds, UTC.
std::string FormatTime(TimePoint t);
// "2026-01-02T03:04:05.123456Z": truncated to microseconds, UTC.
std::string FormatMicroTime(TimePoint t);
// Parses "YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)" (a lower-case t or z is accepted too);
// nullopt when malformed.
std::optional<TimePoint> ParseTime(std::string_view text);

}  // namespace tessera::reconcile
