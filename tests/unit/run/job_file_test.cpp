// cli/run/job_file: reading a job file as `tessera run` and `tessera plan` do.
#include "cli/run/job_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;

constexpr char kJob[] = R"(apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata: {name: j}
spec:
  workers: 1
  trainer:
    model: {layers: 1, dModel: 32, heads: 2, seqLen: 16}
    data: {path: data/x.txt}
    batch: {global: 4}
    schedule: {steps: 3}
)";

class JobFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("job_file_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& text) {
    const fs::path path = dir_ / "job.yaml";
    std::ofstream(path) << text;
    return path.string();
  }
  fs::path dir_;
};

// A file saved from `kubectl get -o yaml` carries the cluster's status; the apiserver ignores
// it on create, and so does a local run, which keeps its own.
TEST_F(JobFileTest, StatusOfTheFileIsIgnored) {
  const std::string file = Write(std::string(kJob) +
                                 "status:\n  phase: Succeeded\n  restarts: 4\n"
                                 "  progress: {step: 3, totalSteps: 3}\n");
  api::TrainingJob job;
  ASSERT_TRUE(LoadJobFile("tessera run", file, {}, &job));
  EXPECT_EQ(job.status, api::TrainingJobStatus{});
  EXPECT_EQ(job.spec.workers, 1);
}

TEST_F(JobFileTest, UnknownFieldOfStatusIsStillRefused) {
  const std::string file = Write(std::string(kJob) + "status:\n  phase: Running\n  foo: 1\n");
  api::TrainingJob job;
  testing::internal::CaptureStderr();
  EXPECT_FALSE(LoadJobFile("tessera run", file, {}, &job));
  EXPECT_NE(testing::internal::GetCapturedStderr().find("status.foo: unknown field"),
            std::string::npos);
}

// Exactly one document: an empty file and a file of two are each one line, naming the count.
TEST_F(JobFileTest, OneDocumentExactly) {
  for (const auto& [text, count] :
       std::vector<std::pair<std::string, int>>{{"", 0}, {std::string(kJob) + "---\n" + kJob, 2}}) {
    const std::string file = Write(text);
    api::TrainingJob job;
    testing::internal::CaptureStderr();
    EXPECT_FALSE(LoadJobFile("tessera plan", file, {}, &job));
    EXPECT_EQ(testing::internal::GetCapturedStderr(),
              "tessera plan: " + file + ": holds " + std::to_string(count) +
                  " documents; tessera plan takes exactly one TrainingJob\n");
  }
}

// Overrides apply in order before validation; a refused one is the command's one line.
TEST_F(JobFileTest, SetsApplyInOrderAndARefusedOneStops) {
  const std::string file = Write(kJob);
  api::TrainingJob job;
  ASSERT_TRUE(LoadJobFile("tessera run", file,
                          {"spec.trainer.schedule.steps=7", "trainer.schedule.steps=9"}, &job));
  EXPECT_EQ(job.spec.trainer->schedule.steps, std::optional<int64_t>(9));
  testing::internal::CaptureStderr();
  EXPECT_FALSE(LoadJobFile("tessera run", file, {"spec.workers"}, &job));
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "tessera run: --set spec.workers: expected path=value, e.g. "
            "spec.trainer.schedule.steps=50\n");
  // An override the api refuses is reported as `tessera validate` reports the file.
  testing::internal::CaptureStderr();
  EXPECT_FALSE(LoadJobFile("tessera run", file, {"spec.workers=0"}, &job));
  EXPECT_NE(testing::internal::GetCapturedStderr().find(file + ": spec.workers: must be >= 1"),
            std::string::npos);
}

// A file that cannot be read or is not YAML is the command's one line, naming the file.
TEST_F(JobFileTest, UnreadableOrMalformedFileIsOneLineNamingIt) {
  const std::string missing = (dir_ / "no-such.yaml").string();
  api::TrainingJob job;
  testing::internal::CaptureStderr();
  EXPECT_FALSE(LoadJobFile("tessera run", missing, {}, &job));
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "tessera run: " + missing + ": cannot read the file: No such file or directory\n");
  const std::string bad = Write("spec: [1, 2\n");
  testing::internal::CaptureStderr();
  EXPECT_FALSE(LoadJobFile("tessera run", bad, {}, &job));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.rfind("tessera run: " + bad + ": not valid YAML: line 2, column 1: ", 0), 0u)
      << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

// An error of the whole document (it is not an object) names "(document)", not an empty path.
TEST_F(JobFileTest, ADocumentThatIsNotAnObjectIsNamedAsTheDocument) {
  const std::string file = Write("- 1\n- 2\n");
  api::TrainingJob job;
  testing::internal::CaptureStderr();
  EXPECT_FALSE(LoadJobFile("tessera plan", file, {}, &job));
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            file + ": (document): must be object, not array\n");
}

// The job comes back with the defaults that depend on other fields filled in.
TEST_F(JobFileTest, TheJobHasItsDefaultsApplied) {
  const std::string file = Write(kJob);
  api::TrainingJob job;
  ASSERT_TRUE(LoadJobFile("tessera run", file, {"spec.workers=2"}, &job));
  EXPECT_EQ(job.spec.procs_per_worker, std::optional<int64_t>(1));
  EXPECT_EQ(job.spec.parallelism.data, std::optional<int64_t>(2));
  ASSERT_TRUE(job.spec.trainer.has_value());
  EXPECT_EQ(job.spec.trainer->model.vocab, std::optional<int64_t>(256));
}

// A --set path 20000 fields deep once nested the job so deeply that checking it overflowed the
// stack (a segmentation fault); it is one line and a refusal.
TEST_F(JobFileTest, AnOverrideNestedTooDeeplyIsOneLineNotACrash) {
  const std::string file = Write(kJob);
  std::string deep = "template";
  for (int i = 0; i < 20000; ++i)
    deep += ".a";
  api::TrainingJob job;
  testing::internal::CaptureStderr();
  EXPECT_FALSE(LoadJobFile("tessera run", file, {deep + "=1"}, &job));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.rfind("tessera run: --set template.a.a.", 0), 0u) << err.substr(0, 80);
  EXPECT_NE(err.find(": the path has more than 100 steps\n"), std::string::npos);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1);
}

// A job whose pod template has these containers (JSON text).
api::TrainingJob WithContainers(const std::string& containers) {
  api::TrainingJob job;
  job.spec.pod_template = nlohmann::json::parse(R"({"spec": {"containers": )" + containers + "}}");
  return job;
}

TEST(WorkerCommand, TheContainerNamedWorker) {
  const api::TrainingJob job = WithContainers(R"([
      {"name": "sidecar", "command": ["sleep", "inf"]},
      {"name": "worker", "image": "x", "command": ["python3", "-u"], "args": ["train.py", 3]}])");
  EXPECT_EQ(WorkerContainerIndex(job), std::optional<size_t>(1));
  nlohmann::json container;
  EXPECT_EQ(WorkerCommand(job, &container),
            (std::vector<std::string>{"python3", "-u", "train.py", "3"}));
  EXPECT_EQ(container["image"], "x");
}

TEST(WorkerCommand, TheWorkerIsFoundFirstOrAfterEntriesThatAreNotContainers) {
  EXPECT_EQ(WorkerContainerIndex(WithContainers(R"([{"name": "worker", "command": ["a"]}])")),
            std::optional<size_t>(0));
  const api::TrainingJob job = WithContainers(R"(["x", 3, {"name": "worker", "command": ["b"]}])");
  EXPECT_EQ(WorkerContainerIndex(job), std::optional<size_t>(2));
  nlohmann::json container;
  EXPECT_EQ(WorkerCommand(job, &container), std::vector<std::string>{"b"});
}

TEST(WorkerCommand, NoCommandIsTheBuiltinTrainer) {
  for (const char* containers : {R"([{"name": "worker", "args": ["--flag"]}])",
                                 R"([{"name": "worker", "command": [], "args": ["x"]}])",
                                 R"([{"name": "other", "command": ["sh"]}])"}) {
    nlohmann::json container;
    EXPECT_TRUE(WorkerCommand(WithContainers(containers), &container).empty()) << containers;
  }
  EXPECT_FALSE(WorkerContainerIndex(WithContainers(R"([{"name": "other"}])")).has_value());
  EXPECT_FALSE(WorkerContainerIndex(api::TrainingJob{}).has_value());
}

}  // namespace
}  // namespace tessera::cli
