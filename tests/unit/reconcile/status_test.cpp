// lifecycle::Status <-> .status JSON (controller/reconcile/status.h) and RFC 3339 times.
#include "controller/reconcile/status.h"

#include <gtest/gtest.h>

#include "controller/reconcile/rfc3339.h"

namespace tessera::reconcile {
namespace {

using namespace std::chrono_literals;
using lifecycle::Phase;

lifecycle::TimePoint T(const char* text) {
  auto t = ParseTime(text);
  EXPECT_TRUE(t.has_value()) << text;
  return t.value_or(lifecycle::TimePoint{});
}

lifecycle::Status Full() {
  lifecycle::Status s;
  s.phase = Phase::kRunning;
  s.conditions = {
      {lifecycle::ConditionType::kCreated, lifecycle::ConditionStatus::kTrue, "JobCreated",
       "job accepted", T("2026-03-01T10:00:00Z"), 2},
      {lifecycle::ConditionType::kRestarting, lifecycle::ConditionStatus::kFalse, "Running", "",
       T("2026-03-01T10:05:00Z"), 2},
  };
  s.workers = {4, 3, 0, 1};
  s.restarts = 1;
  s.attempt = 2;
  s.start_time = T("2026-03-01T10:00:01Z");
  s.attempt_start_time = T("2026-03-01T10:04:00Z");
  s.last_failure =
      lifecycle::Failure{"WorkerFailed", "worker-3 failed with exit code 1", "j-worker-3", 1};
  s.progress = lifecycle::ProgressMark{2, 420, T("2026-03-01T10:06:00Z")};
  s.observed_generation = 2;
  return s;
}

TEST(Rfc3339, FormatsAndParses) {
  const auto t = T("2026-03-01T10:00:00Z") + 1234567us;
  EXPECT_EQ(FormatTime(t), "2026-03-01T10:00:01Z");
  EXPECT_EQ(FormatMicroTime(t), "2026-03-01T10:00:01.234567Z");
  EXPECT_EQ(T("2026-03-01T12:00:00+02:00"), T("2026-03-01T10:00:00Z"));
  EXPECT_EQ(T("2026-03-01T10:00:00.5Z"), T("2026-03-01T10:00:00Z") + 500ms);
  for (const char* bad : {"", "2026-03-01", "2026-13-01T00:00:00Z", "2026-03-01T10:00:00",
                          "2026-03-01T10:00:00Zjunk", "2026-03-01T10:00:00.Z",
                          // Valid RFC 3339, but past what the clock's int64 of nanoseconds
                          // holds (1678..2262): converting them overflowed.
                          "9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z"}) {
    EXPECT_FALSE(ParseTime(bad).has_value()) << bad;
  }
}

// What the parser accepts besides the apiserver's own "...Z" form, and the field ranges it
// checks.
TEST(Rfc3339, ParsesOtherSpellingsAndRejectsFieldsOutOfRange) {
  struct Case {
    const char* text;
    std::optional<const char*> same_as;  // nullopt: malformed
  };
  const Case cases[] = {
      {"2026-03-01t10:00:00z", "2026-03-01T10:00:00Z"},
      {"2026-03-01T15:30:00+05:30", "2026-03-01T10:00:00Z"},
      {"2026-03-01T04:15:00-05:45", "2026-03-01T10:00:00Z"},
      {"2026-03-01T23:59:60Z", "2026-03-02T00:00:00Z"},  // a leap second
      {"2026-03-01T24:00:00Z", std::nullopt},
      {"2026-03-01T10:60:00Z", std::nullopt},
      {"2026-03-01T10:00:61Z", std::nullopt},
      {"2026-02-29T10:00:00Z", std::nullopt},
      {"2026-03-01T10:00:00+0200", std::nullopt},
      {"2026-03-01 10:00:00Z", std::nullopt},
      // Offsets beyond RFC 3339's 23:59 (once read as a shift of days).
      {"2026-03-01T10:00:00+99:99", std::nullopt},
      {"2026-03-01T10:00:00+24:00", std::nullopt},
      {"2026-03-01T10:00:00+05:60", std::nullopt},
      {"2026-03-02T09:59:00+23:59", "2026-03-01T10:00:00Z"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const std::optional<lifecycle::TimePoint> t = ParseTime(c.text);
    if (c.same_as) {
      EXPECT_EQ(t, T(*c.same_as));
    } else {
      EXPECT_EQ(t, std::nullopt);
    }
  }
}

TEST(Rfc3339, ParsesTheEdgesOfTheClocksRange) {
  EXPECT_TRUE(ParseTime("2262-01-01T00:00:00Z").has_value());
  EXPECT_TRUE(ParseTime("1678-12-31T00:00:00Z").has_value());
  EXPECT_FALSE(ParseTime("2262-12-31T00:00:00Z").has_value());
  // The range applies to the time in UTC, after its offset.
  EXPECT_FALSE(ParseTime("2262-04-10T01:00:00-23:00").has_value());
  EXPECT_FALSE(ParseTime("1677-09-22T23:00:00+23:00").has_value());
}

TEST(EncodeStatus, Fields) {
  const Json j = EncodeStatus(Full(), {2000, 1.5, 51200});
  EXPECT_EQ(j["phase"], "Running");
  EXPECT_EQ(j["conditions"][0]["type"], "Created");
  EXPECT_EQ(j["conditions"][0]["status"], "True");
  EXPECT_EQ(j["conditions"][0]["reason"], "JobCreated");
  EXPECT_EQ(j["conditions"][0]["lastTransitionTime"], "2026-03-01T10:00:00Z");
  EXPECT_EQ(j["conditions"][0]["observedGeneration"], 2);
  EXPECT_FALSE(j["conditions"][1].contains("message"));
  EXPECT_EQ(j["workers"], Json({{"active", 4}, {"ready", 3}, {"succeeded", 0}, {"failed", 1}}));
  EXPECT_EQ(j["restarts"], 1);
  EXPECT_EQ(j["attempt"], 2);
  EXPECT_EQ(j["lastFailure"]["exitCode"], 1);
  EXPECT_EQ(j["lastFailure"]["worker"], "j-worker-3");
  EXPECT_EQ(j["progress"]["step"], 420);
  EXPECT_EQ(j["progress"]["totalSteps"], 2000);
  EXPECT_EQ(j["progress"]["loss"], 1.5);
  EXPECT_EQ(j["progress"]["updatedAt"], "2026-03-01T10:06:00Z");
  EXPECT_FALSE(j["progress"].contains("valLoss"));  // before the first validation
  EXPECT_EQ(j["startTime"], "2026-03-01T10:00:01Z");
  EXPECT_FALSE(j.contains("completionTime"));
  EXPECT_EQ(j["observedGeneration"], 2);
}

TEST(EncodeStatus, ClampsExitCodesToTheSchema) {
  const std::pair<int64_t, int64_t> cases[] = {{999, 255}, {255, 255},   {137, 137},  {0, 0},
                                               {-1, -1},   {-255, -255}, {-999, -255}};
  for (const auto& [code, written] : cases) {
    lifecycle::Status s;
    s.last_failure = lifecycle::Failure{"WorkerFailed", "", "w", code};
    EXPECT_EQ(EncodeStatus(s, {})["lastFailure"]["exitCode"], written) << code;
  }
}

// An empty reason or message is left out rather than written as "" (a condition's reason, when
// present, is CamelCase and not empty).
TEST(EncodeStatus, LeavesOutAnEmptyReasonAndMessage) {
  lifecycle::Status s;
  s.conditions = {{lifecycle::ConditionType::kCreated, lifecycle::ConditionStatus::kTrue, "", "",
                   T("2026-03-01T10:00:00Z"), 1}};
  const Json c = EncodeStatus(s, {})["conditions"][0];
  EXPECT_FALSE(c.contains("reason")) << c.dump();
  EXPECT_FALSE(c.contains("message")) << c.dump();
}

// progress.attempt is written for every known attempt, 0 included; -1 (unknown after a pruning
// CRD) is left out. Read back, a written one is not recovered again.
TEST(EncodeStatus, ProgressAttemptUnlessUnknown) {
  const std::pair<int64_t, bool> cases[] = {{0, true}, {3, true}, {-1, false}};
  for (const auto& [attempt, written] : cases) {
    SCOPED_TRACE(attempt);
    lifecycle::Status s;
    s.progress = lifecycle::ProgressMark{attempt, 10, T("2026-03-01T10:06:00Z")};
    const Json j = EncodeStatus(s, {});
    EXPECT_EQ(j["progress"].contains("attempt"), written) << j.dump();
    const DecodedStatus d = DecodeStatus(j);
    EXPECT_EQ(d.has_progress_attempt, written);
    if (written) {
      EXPECT_EQ(d.status.progress, s.progress);
    }
  }
}

TEST(DecodeStatus, RoundTrip) {
  const lifecycle::Status s = Full();
  for (const ProgressDetail& detail :
       {ProgressDetail{2000, 1.5, 51200}, ProgressDetail{2000, 1.5, 51200, 2.25}}) {
    SCOPED_TRACE(detail.val_loss.value_or(-1));
    const DecodedStatus d = DecodeStatus(EncodeStatus(s, detail));
    EXPECT_EQ(d.status, s);
    EXPECT_EQ(d.detail, detail);
  }
  const DecodedStatus d = DecodeStatus(EncodeStatus(s, {}));
  EXPECT_TRUE(d.has_attempt);
  EXPECT_TRUE(d.has_attempt_start_time);
  EXPECT_TRUE(d.has_progress_attempt);
}

TEST(DecodeStatus, EmptyAndMalformed) {
  for (const Json& in : {Json(), Json::object(), Json::array(),
                         Json{{"phase", "Exploded"}, {"conditions", "nope"}, {"restarts", "x"}},
                         // An attempt that is not a number was not written by this controller:
                         // recovered like a pruned one.
                         Json{{"attempt", "3"}}}) {
    SCOPED_TRACE(in.dump());
    const DecodedStatus d = DecodeStatus(in);
    EXPECT_EQ(d.status, lifecycle::Status{});
    EXPECT_FALSE(d.has_attempt);
  }
  const DecodedStatus d =
      DecodeStatus({{"conditions", Json::array({{{"type", "Weird"}, {"status", "True"}},
                                                {{"type", "Created"}, {"status", "True"}}})}});
  ASSERT_EQ(d.status.conditions.size(), 1u);
  EXPECT_EQ(d.status.conditions[0].type, lifecycle::ConditionType::kCreated);
}

// Converting a float past int64's range is undefined: 2e118 was converted (found by
// apiserver_object_fuzz). Integers past it, and such floats, read as absent; a float within
// range still counts, as an older writer may have written one.
TEST(DecodeStatus, IntegersOutOfRangeReadAsAbsent) {
  const DecodedStatus d = DecodeStatus(
      {{"restarts", 2e118},
       {"attempt", 18446744073709551615u},
       {"workers", {{"active", 3.0}, {"ready", -1e300}, {"failed", -4611686018427387904.0}}}});
  EXPECT_EQ(d.status.restarts, 0);
  EXPECT_EQ(d.status.attempt, 0);
  EXPECT_EQ(d.status.workers.active, 3);
  EXPECT_EQ(d.status.workers.ready, 0);
  EXPECT_EQ(d.status.workers.failed, -4611686018427387904);  // -2^62, exact

  // The edges: -2^63 is int64's least value; 2^63 is one past its greatest.
  const DecodedStatus edges = DecodeStatus(
      {{"workers", {{"succeeded", -9223372036854775808.0}}}, {"restarts", 9223372036854775808.0}});
  EXPECT_EQ(edges.status.workers.succeeded, INT64_MIN);
  EXPECT_EQ(edges.status.restarts, 0);
}

TEST(RecoverPrunedFields, Table) {
  // A status as a CRD without attempt/attemptStartTime/progress.attempt stores it.
  Json pruned = EncodeStatus(Full(), {});
  pruned.erase("attempt");
  pruned.erase("attemptStartTime");
  pruned["progress"].erase("attempt");
  const DecodedStatus decoded = DecodeStatus(pruned);
  ASSERT_FALSE(decoded.has_attempt);

  struct Case {
    const char* name;
    std::optional<PrunedFields> remembered;
    std::vector<PodAge> pods;
    int64_t attempt;
    std::optional<lifecycle::TimePoint> attempt_start;
    int64_t progress_attempt;
  };
  const Case cases[] = {
      {"remembered",
       PrunedFields{2, T("2026-03-01T10:04:00Z"), 2},
       {},
       2,
       T("2026-03-01T10:04:00Z"),
       2},
      {"from pods: newest attempt, earliest creation",
       std::nullopt,
       {{2, T("2026-03-01T10:04:03Z")},
        {2, T("2026-03-01T10:04:01Z")},
        {1, T("2026-03-01T09:00:00Z")}},
       2,
       T("2026-03-01T10:04:01Z"),
       -1},
      {"no pods: at least the restarts", std::nullopt, {}, 1, std::nullopt, -1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const lifecycle::Status s = RecoverPrunedFields(decoded, c.remembered, c.pods);
    EXPECT_EQ(s.attempt, c.attempt);
    EXPECT_EQ(s.attempt_start_time, c.attempt_start);
    ASSERT_TRUE(s.progress.has_value());
    EXPECT_EQ(s.progress->attempt, c.progress_attempt);
    EXPECT_EQ(s.restarts, 1);
  }
  // A progress attempt that is not a number is unknown, as if pruned.
  Json mistyped = EncodeStatus(Full(), {});
  mistyped["progress"]["attempt"] = "2";
  const DecodedStatus m = DecodeStatus(mistyped);
  EXPECT_FALSE(m.has_progress_attempt);
  ASSERT_TRUE(m.status.progress.has_value());
  EXPECT_EQ(RecoverPrunedFields(m, std::nullopt, {}).progress->attempt, -1);

  // Present fields are never overridden.
  const DecodedStatus full = DecodeStatus(EncodeStatus(Full(), {}));
  EXPECT_EQ(RecoverPrunedFields(full, PrunedFields{7, std::nullopt, 7}, {{9, {}}}), Full());
}

// Only the attempt's own start time is recovered: from what this controller remembers of the
// same attempt, else from the pods while the attempt has them (Starting or Running); a start
// time taken from another attempt would make the lifecycle think the new one was created.
TEST(RecoverPrunedFields, AttemptStartTimeOnlyFromTheSameAttempt) {
  struct Case {
    const char* name;
    Phase phase;
    bool attempt_present;  // the CRD kept status.attempt (2); attemptStartTime is always absent
    std::optional<PrunedFields> remembered;
    std::vector<PodAge> pods;
    std::optional<lifecycle::TimePoint> attempt_start;
  };
  const Case cases[] = {
      {"remembered for the same attempt",
       Phase::kRunning,
       true,
       PrunedFields{2, T("2026-03-01T10:04:00Z"), 2},
       {},
       T("2026-03-01T10:04:00Z")},
      {"remembered for an older attempt",
       Phase::kRestarting,
       true,
       PrunedFields{1, T("2026-03-01T09:00:00Z"), 1},
       {},
       std::nullopt},
      {"starting: the earliest pod of the attempt",
       Phase::kStarting,
       false,
       std::nullopt,
       {{2, T("2026-03-01T10:04:03Z")}, {2, T("2026-03-01T10:04:01Z")}},
       T("2026-03-01T10:04:01Z")},
      {"restarting: none, whatever pods remain",
       Phase::kRestarting,
       false,
       std::nullopt,
       {{2, T("2026-03-01T10:04:03Z")}},
       std::nullopt},
      {"pending (as a status wiped of its phase reads): none, whatever is remembered",
       Phase::kPending,
       false,
       PrunedFields{2, T("2026-03-01T10:04:00Z"), 2},
       {{2, T("2026-03-01T10:04:03Z")}},
       std::nullopt},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    lifecycle::Status status = Full();
    status.phase = c.phase;
    Json pruned = EncodeStatus(status, {});
    pruned.erase("attemptStartTime");
    if (!c.attempt_present)
      pruned.erase("attempt");
    const lifecycle::Status s = RecoverPrunedFields(DecodeStatus(pruned), c.remembered, c.pods);
    EXPECT_EQ(s.attempt, 2);
    EXPECT_EQ(s.attempt_start_time, c.attempt_start);
  }
}

}  // namespace
}  // namespace tessera::reconcile
