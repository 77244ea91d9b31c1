// Kubernetes timestamps: metav1.Time ("2026-01-02T03:04:05Z") and metav1.MicroTime
// ("2026-01-02T03:04:05.123456Z"), always UTC. Formatting only.
#pragma once

#include <chrono>
#include <ctime>
#include <string>

namespace tessera::k8s {

// metav1.MicroTime of `t`.
inline std::string FormatMicroTime(std::chrono::system_clock::time_point t) {
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(micros / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  char out[64];
  std::snprintf(out, sizeof(out), "%s.%06lldZ", buf, static_cast<long long>(micros % 1000000));
  return out;
}

}  // namespace tessera::k8s
