#include "controller/reconcile/status.h"

#include <algorithm>
#include <utility>

#include "api/json_fields.h"
#include "controller/reconcile/rfc3339.h"

namespace tessera::reconcile {
namespace {

using lifecycle::TimePoint;

// Times are stored with whole seconds; reading them back gives the same value.
std::optional<TimePoint> ReadTime(const Json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string())
    return std::nullopt;
  return ParseTime(it->get_ref<const std::string&>());
}

// An integer field; a float (an older writer's) counts when it is within int64's range
// (converting one past it is undefined: a status with "active": 2e118 was, found by
// apiserver_object_fuzz); anything else is `fallback`.
int64_t ReadInt(const Json& object, const char* key, int64_t fallback = 0) {
  if (const std::optional<int64_t> i = api::IntegerAt(object, key))
    return *i;
  auto it = object.find(key);
  if (it == object.end() || !it->is_number_float())
    return fallback;
  const double d = it->get<double>();
  // 2^63 is exact as a double; every double in [-2^63, 2^63) converts.
  return d >= -9223372036854775808.0 && d < 9223372036854775808.0 ? static_cast<int64_t>(d)
                                                                  : fallback;
}

}  // namespace

Json EncodeStatus(const lifecycle::Status& status, const ProgressDetail& detail) {
  Json out = Json::object();
  out["phase"] = std::string(lifecycle::ToString(status.phase));
  Json conditions = Json::array();
  for (const auto& c : status.conditions) {
    Json cj = {{"type", std::string(lifecycle::ToString(c.type))},
               {"status", std::string(lifecycle::ToString(c.status))},
               {"lastTransitionTime", FormatTime(c.last_transition_time)},
               {"observedGeneration", c.observed_generation}};
    if (!c.reason.empty())
      cj["reason"] = c.reason;
    if (!c.message.empty())
      cj["message"] = c.message;
    conditions.push_back(std::move(cj));
  }
  out["conditions"] = std::move(conditions);
  out["workers"] = {{"active", status.workers.active},
                    {"ready", status.workers.ready},
                    {"succeeded", status.workers.succeeded},
                    {"failed", status.workers.failed}};
  out["restarts"] = status.restarts;
  out["attempt"] = status.attempt;
  if (status.attempt_start_time)
    out["attemptStartTime"] = FormatTime(*status.attempt_start_time);
  if (status.last_failure) {
    const auto& f = *status.last_failure;
    out["lastFailure"] = {{"reason", f.reason},
                          {"message", f.message},
                          {"worker", f.worker},
                          {"exitCode", std::clamp<int64_t>(f.exit_code, -255, 255)}};
  }
  if (status.progress) {
    Json& progress = out["progress"];
    progress = {{"step", status.progress->step},
                {"updatedAt", FormatTime(status.progress->updated_at)},
                {"totalSteps", detail.total_steps},
                {"loss", detail.loss},
                {"tokensPerSecond", detail.tokens_per_second}};
    // -1 (recovered after an older CRD pruned it) means unknown; the schema has no room for it.
    if (status.progress->attempt >= 0)
      progress["attempt"] = status.progress->attempt;
    if (detail.val_loss)
      progress["valLoss"] = *detail.val_loss;
  }
  if (status.start_time)
    out["startTime"] = FormatTime(*status.start_time);
  if (status.completion_time)
    out["completionTime"] = FormatTime(*status.completion_time);
  out["observedGeneration"] = status.observed_generation;
  return out;
}

DecodedStatus DecodeStatus(const Json& in) {
  DecodedStatus out;
  if (!in.is_object())
    return out;
  lifecycle::Status& s = out.status;
  s.phase = lifecycle::ParsePhase(api::StringAt(in, "phase")).value_or(lifecycle::Phase::kPending);
  if (auto it = in.find("conditions"); it != in.end() && it->is_array()) {
    for (const Json& cj : *it) {
      if (!cj.is_object())
        continue;
      auto type = lifecycle::ParseConditionType(api::StringAt(cj, "type"));
      auto cstatus = lifecycle::ParseConditionStatus(api::StringAt(cj, "status"));
      if (!type || !cstatus)
        continue;
      lifecycle::Condition c;
      c.type = *type;
      c.status = *cstatus;
      c.reason = api::StringAt(cj, "reason");
      c.message = api::StringAt(cj, "message");
      c.last_transition_time = ReadTime(cj, "lastTransitionTime").value_or(TimePoint{});
      c.observed_generation = ReadInt(cj, "observedGeneration");
      s.conditions.push_back(std::move(c));
    }
  }
  const Json& workers = api::ObjectAt(in, "workers");
  s.workers = {ReadInt(workers, "active"), ReadInt(workers, "ready"), ReadInt(workers, "succeeded"),
               ReadInt(workers, "failed")};
  s.restarts = ReadInt(in, "restarts");
  out.has_attempt = in.contains("attempt") && in["attempt"].is_number();
  s.attempt = ReadInt(in, "attempt");
  s.attempt_start_time = ReadTime(in, "attemptStartTime");
  out.has_attempt_start_time = s.attempt_start_time.has_value();
  if (auto it = in.find("lastFailure"); it != in.end() && it->is_object()) {
    s.last_failure = lifecycle::Failure{api::StringAt(*it, "reason"), api::StringAt(*it, "message"),
                                        api::StringAt(*it, "worker"), ReadInt(*it, "exitCode")};
  }
  if (auto it = in.find("progress"); it != in.end() && it->is_object()) {
    const auto updated = ReadTime(*it, "updatedAt");
    out.has_progress_attempt = it->contains("attempt") && (*it)["attempt"].is_number();
    if (updated) {
      s.progress =
          lifecycle::ProgressMark{ReadInt(*it, "attempt", -1), ReadInt(*it, "step"), *updated};
    }
    out.detail = {ReadInt(*it, "totalSteps"), api::NumberAt(*it, "loss").value_or(0),
                  api::NumberAt(*it, "tokensPerSecond").value_or(0), std::nullopt};
    if (auto v = it->find("valLoss"); v != it->end() && v->is_number())
      out.detail.val_loss = v->get<double>();
  }
  s.start_time = ReadTime(in, "startTime");
  s.completion_time = ReadTime(in, "completionTime");
  s.observed_generation = ReadInt(in, "observedGeneration");
  return out;
}

}  // namespace tessera::reconcile

namespace tessera::reconcile {

PrunedFields PrunedFieldsOf(const lifecycle::Status& status) {
  PrunedFields f;
  f.attempt = status.attempt;
  f.attempt_start_time = status.attempt_start_time;
  if (status.progress)
    f.progress_attempt = status.progress->attempt;
  return f;
}

lifecycle::Status RecoverPrunedFields(const DecodedStatus& decoded,
                                      const std::optional<PrunedFields>& remembered,
                                      const std::vector<PodAge>& pods) {
  lifecycle::Status s = decoded.status;
  if (!decoded.has_attempt) {
    if (remembered) {
      s.attempt = remembered->attempt;
    } else {
      s.attempt = s.restarts;
      for (const PodAge& pod : pods)
        s.attempt = std::max(s.attempt, pod.attempt);
    }
  }
  // A Pending job has created no worker of its attempt yet, and a status without a phase
  // (wiped by hand, restored without it) reads as Pending: a start time recovered for it would
  // make the lifecycle wait, Pending for good, for workers it never creates.
  if (!decoded.has_attempt_start_time && s.phase != lifecycle::Phase::kPending) {
    if (remembered && remembered->attempt == s.attempt) {
      s.attempt_start_time = remembered->attempt_start_time;
    } else if (s.phase == lifecycle::Phase::kStarting || s.phase == lifecycle::Phase::kRunning) {
      for (const PodAge& pod : pods) {
        if (pod.attempt == s.attempt &&
            (!s.attempt_start_time || pod.created < *s.attempt_start_time)) {
          s.attempt_start_time = pod.created;
        }
      }
    }
  }
  if (s.progress && !decoded.has_progress_attempt) {
    s.progress->attempt =
        remembered && remembered->progress_attempt ? *remembered->progress_attempt : -1;
  }
  return s;
}

}  // namespace tessera::reconcile
