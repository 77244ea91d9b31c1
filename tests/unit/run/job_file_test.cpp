// cli/run/job_file: reading a job file as `tessera run` and `tessera plan` do.
#include "cli/run/job_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

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

}  // namespace
}  // namespace tessera::cli
