// The TrainingJob's .status as JSON (DESIGN.md §2) to and from the lifecycle's Status, which
// the controller persists there between decisions. Pure functions; times are RFC 3339 with
// whole seconds (metav1.Time), so a status read back equals the one written.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <vector>

#include "lifecycle/job_state.h"

namespace tessera::reconcile {

using Json = nlohmann::json;

// The figures of status.progress beyond the step the lifecycle tracks: what rank 0's
// /progress reported last.
struct ProgressDetail {
  ProgressDetail() = default;
  ProgressDetail(int64_t total_steps_, double loss_, double tokens_per_second_,
                 std::optional<double> val_loss_ = std::nullopt)
      : total_steps(total_steps_),
        loss(loss_),
        tokens_per_second(tokens_per_second_),
        val_loss(val_loss_) {}

  int64_t total_steps = 0;
  double loss = 0;
  double tokens_per_second = 0;
  std::optional<double> val_loss;  // absent before the trainer's first validation
  bool operator==(const ProgressDetail&) const = default;
};

// `status` as the .status object: phase, conditions (type, status, reason, message,
// lastTransitionTime, observedGeneration), workers, restarts, attempt, attemptStartTime,
// lastFailure (exitCode clamped to the schema's -255..255), progress (step, updatedAt and
// attempt from the lifecycle, the rest from `detail`), startTime, completionTime,
// observedGeneration. Unset optional fields are left out, and so is an unknown (negative)
// progress attempt. Every field is declared by the CRD (api/schema.cpp). Deterministic.
Json EncodeStatus(const lifecycle::Status& status, const ProgressDetail& detail);

struct DecodedStatus {
  lifecycle::Status status;
  ProgressDetail detail;
  // Whether these fields were present. A CRD that predates them prunes them on write; the
  // caller then recovers them another way (see reconcile.h).
  bool has_attempt = false;
  bool has_attempt_start_time = false;
  bool has_progress_attempt = false;
};

// Reads a .status object written by EncodeStatus (or by an older controller, or empty/null for
// a job never seen). Unknown phases, condition types and malformed times are dropped rather
// than failing: the lifecycle then treats what is missing as not yet happened.
DecodedStatus DecodeStatus(const Json& status);

}  // namespace tessera::reconcile

namespace tessera::reconcile {

// The status fields a CRD older than this controller prunes (attempt, attemptStartTime,
// progress.attempt), as the controller last wrote them.
struct PrunedFields {
  int64_t attempt = 0;
  std::optional<lifecycle::TimePoint> attempt_start_time;
  std::optional<int64_t> progress_attempt;
  bool operator==(const PrunedFields&) const = default;
};

PrunedFields PrunedFieldsOf(const lifecycle::Status& status);

// One of the job's pods: its attempt label and creation time.
struct PodAge {
  int64_t attempt = 0;
  lifecycle::TimePoint created{};
};

// `decoded.status` with the fields the server dropped filled back in: from `remembered` (what
// this controller last wrote for the same job) when given, else derived from the job's pods:
// attempt = the newest pod attempt, at least `restarts`; attemptStartTime = the earliest
// creation of that attempt's pods while Starting or Running; progress attempt unknown (-1, so
// the progress deadline waits for a fresh report). A Pending status (one without a phase reads
// so) gets no attemptStartTime, remembered or not. Fields that were present are kept.
lifecycle::Status RecoverPrunedFields(const DecodedStatus& decoded,
                                      const std::optional<PrunedFields>& remembered,
                                      const std::vector<PodAge>& pods);

}  // namespace tessera::reconcile
