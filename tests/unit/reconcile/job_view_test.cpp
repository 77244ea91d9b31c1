// A TrainingJob from the cache as the controller reads it, and the lifecycle policy it runs
// under (controller/reconcile/job_view.h, lifecycle/from_api.h).
#include "controller/reconcile/job_view.h"

#include <gtest/gtest.h>

#include <functional>

namespace tessera::reconcile {
namespace {

using Json = nlohmann::json;

// A valid job as the informer hands it over, with `spec_patch` merged into its spec.
Json JobObject(const Json& spec_patch = Json::object()) {
  Json spec = {{"workers", 2},
               {"template",
                {{"spec",
                  {{"containers", Json::array({{{"name", "worker"},
                                                {"image", "busybox"},
                                                {"command", Json::array({"true"})}}})}}}}}};
  spec.merge_patch(spec_patch);
  return {{"apiVersion", "tessera.dev/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata",
           {{"name", "gpt"},
            {"namespace", "ml"},
            {"uid", "uid-1"},
            {"generation", 5},
            {"resourceVersion", "77"}}},
          {"spec", spec}};
}

TEST(ViewJob, KeepsTheCachesBookkeeping) {
  Json object = JobObject();
  JobView view = ViewJob(object);
  EXPECT_FALSE(view.invalid.has_value()) << *view.invalid;
  EXPECT_EQ(view.resource_version, "77");
  EXPECT_FALSE(view.deleting);
  EXPECT_EQ(view.job.metadata.name, "gpt");
  EXPECT_EQ(view.job.metadata.generation, 5);
  // Defaulted as the rest of the controller reads it: one process per worker, the data axis
  // spanning every process.
  EXPECT_EQ(view.job.spec.procs_per_worker, 1);
  EXPECT_EQ(view.job.spec.parallelism.data, 2);

  object["metadata"]["deletionTimestamp"] = "2026-03-01T10:00:00Z";
  EXPECT_TRUE(ViewJob(object).deleting);
}

// Every field of the policy is read from the job; a policy that dropped one would run the job
// under the default instead (a suspended job left running, a TTL never applied).
TEST(PolicyOf, ValidJobRunsUnderItsOwnRunPolicy) {
  struct Case {
    const char* name;
    Json spec_patch;
    std::function<void(const lifecycle::Policy&)> check;
  };
  using lifecycle::CleanPodPolicy;
  const Case cases[] = {
      {"defaults", Json::object(),
       [](const lifecycle::Policy& p) {
         EXPECT_EQ(p.workers, 2);
         EXPECT_EQ(p.backoff_limit, 3);
         EXPECT_EQ(p.permanent_exit_codes, std::vector<int64_t>{2});
         EXPECT_EQ(p.active_deadline_seconds, std::nullopt);
         EXPECT_EQ(p.progress_deadline_seconds, 600);
         EXPECT_EQ(p.ttl_seconds_after_finished, std::nullopt);
         EXPECT_EQ(p.clean_pod_policy, CleanPodPolicy::kRunning);
         EXPECT_FALSE(p.suspend);
         EXPECT_TRUE(p.gang);
         EXPECT_EQ(p.startup_timeout_seconds, 300);
         EXPECT_EQ(p.generation, 5);
         EXPECT_EQ(p.invalid_spec, std::nullopt);
       }},
      {"every field set",
       {{"suspend", true},
        {"runPolicy",
         {{"backoffLimit", 7},
          {"permanentExitCodes", {3, 4}},
          {"activeDeadlineSeconds", 900},
          {"progressDeadlineSeconds", 120},
          {"ttlSecondsAfterFinished", 60},
          {"cleanPodPolicy", "None"}}},
        {"scheduling", {{"gang", false}, {"startupTimeoutSeconds", 45}}}},
       [](const lifecycle::Policy& p) {
         EXPECT_EQ(p.backoff_limit, 7);
         EXPECT_EQ(p.permanent_exit_codes, (std::vector<int64_t>{3, 4}));
         EXPECT_EQ(p.active_deadline_seconds, 900);
         EXPECT_EQ(p.progress_deadline_seconds, 120);
         EXPECT_EQ(p.ttl_seconds_after_finished, 60);
         EXPECT_EQ(p.clean_pod_policy, CleanPodPolicy::kNone);
         EXPECT_TRUE(p.suspend);
         EXPECT_FALSE(p.gang);
         EXPECT_EQ(p.startup_timeout_seconds, 45);
       }},
      // (startupTimeoutSeconds 0 does not validate.)
      {"a zero progress deadline is off",
       {{"runPolicy", {{"progressDeadlineSeconds", 0}}}},
       [](const lifecycle::Policy& p) { EXPECT_EQ(p.progress_deadline_seconds, std::nullopt); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const JobView view = ViewJob(JobObject(c.spec_patch));
    ASSERT_FALSE(view.invalid.has_value()) << *view.invalid;
    c.check(PolicyOf(view));
  }
}

// An invalid job fails with InvalidSpec: its policy names every error and keeps the job's
// generation (the conditions report it), whatever check the spec failed.
TEST(PolicyOf, InvalidJobFailsWithEveryErrorAndItsGeneration) {
  struct Case {
    const char* name;
    Json spec_patch;
    std::vector<std::string> errors;  // each in the message, in this order
  };
  const Case cases[] = {
      {"fails the schema", {{"workers", 0}}, {"spec.workers"}},
      {"fails a cross-field rule", {{"parallelism", {{"data", 3}}}}, {"spec.parallelism"}},
      {"fails decoding", {{"workers", "two"}}, {"spec.workers"}},
      {"two errors",
       {{"workers", 0}, {"runPolicy", {{"backoffLimit", -1}}}},
       {"spec.runPolicy.backoffLimit", "; spec.workers"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const JobView view = ViewJob(JobObject(c.spec_patch));
    ASSERT_TRUE(view.invalid.has_value());
    EXPECT_EQ(view.job.metadata.name, "gpt");
    EXPECT_EQ(view.job.metadata.uid, "uid-1");
    const lifecycle::Policy policy = PolicyOf(view);
    EXPECT_EQ(policy.generation, 5);
    ASSERT_TRUE(policy.invalid_spec.has_value());
    EXPECT_EQ(*policy.invalid_spec, "invalid spec: " + *view.invalid);
    size_t from = 0;
    for (const std::string& error : c.errors) {
      const size_t at = view.invalid->find(error, from);
      EXPECT_NE(at, std::string::npos) << error << " in " << *view.invalid;
      from = at == std::string::npos ? from : at + error.size();
    }
  }
}

}  // namespace
}  // namespace tessera::reconcile
