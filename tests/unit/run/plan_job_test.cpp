// `tessera plan` (cli/plan): the plan of a job file as text and JSON, and its refusals.
#include "cli/plan/plan.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/run/runner.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;

// manifests/examples/cpu-hybrid.yaml (2 workers x 2 processes as pipeline 2 x tensor 2), with a
// corpus that is not on this machine, so nothing here depends on the checkout's data.
constexpr char kHybrid[] = R"(apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata: {name: cpu-hybrid}
spec:
  workers: 2
  procsPerWorker: 2
  parallelism: {data: 1, pipeline: 2, tensor: 2, microBatches: 4, schedule: 1F1B}
  trainer:
    model: {layers: 4, dModel: 64, heads: 4, seqLen: 64, vocab: 256}
    data: {path: no/such/corpus.txt}
    batch: {global: 16}
    schedule: {steps: 200}
)";

class PlanJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("plan_job_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    file_ = (dir_ / "job.yaml").string();
    std::ofstream(file_) << kHybrid;
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Runs `tessera plan` with these options; its exit code, stdout and stderr.
  int Plan(const std::vector<std::string>& sets, const std::string& output) {
    testing::internal::CaptureStdout();
    testing::internal::CaptureStderr();
    const int rc = PlanJob({.file = file_, .sets = sets, .output = output});
    out_ = testing::internal::GetCapturedStdout();
    err_ = testing::internal::GetCapturedStderr();
    return rc;
  }
  fs::path dir_;
  std::string file_, out_, err_;
};

// The figures of docs/local-mode.md's example, which is this job.
TEST_F(PlanJobTest, TextNamesTheRanksModelBatchAndCompute) {
  ASSERT_EQ(Plan({}, "text"), kPlanPrinted) << err_;
  for (const char* line : {
           "cpu-hybrid: 4 rank(s) = 2 worker(s) x 2 process(es); mesh data 1 x pipeline 2 x "
           "tensor 2\n",
           "model      4 layers, dModel 64, 4 heads, seqLen 64, vocab 256: 220,544 parameters; "
           "fp32 on CPU\n",
           "batch      16 sequences (1,024 tokens) a step: 16 per data-parallel rank as 4 "
           "micro-batch(es) of 4\n",
           "data       no/such/corpus.txt: not on this machine, so not counted in the memory "
           "below\n",
           "compute    1.5 MFLOP a token, 1.53 GFLOP a step (matrix products, forward and "
           "backward)\n",
           "pipeline   1F1B over 2 stages and 4 micro-batches: ideal bubble (p-1)/(m+p-1) = "
           "0.200\n",
           "     0  0 (0,0,0)  1 (0,0,1)\n     1  2 (0,1,0)  3 (0,1,1)\n",
       }) {
    EXPECT_NE(out_.find(line), std::string::npos) << line << "\n" << out_;
  }
  EXPECT_EQ(err_, "");
}

TEST_F(PlanJobTest, JsonAgreesWithTheJob) {
  ASSERT_EQ(Plan({}, "json"), kPlanPrinted) << err_;
  const nlohmann::json p = nlohmann::json::parse(out_);
  EXPECT_EQ(p["ranks"], 4);
  std::vector<std::vector<int>> placement;
  for (const nlohmann::json& r : p["placement"])
    placement.push_back({r["rank"], r["worker"], r["localRank"], r["pipeline"], r["tensor"]});
  EXPECT_EQ(placement, (std::vector<std::vector<int>>{
                           {0, 0, 0, 0, 0}, {1, 0, 1, 0, 1}, {2, 1, 0, 1, 0}, {3, 1, 1, 1, 1}}));
  const nlohmann::json& t = p["trainer"];
  EXPECT_EQ(t["parameters"], 220544);
  EXPECT_EQ(t["batch"]["perDataRank"], 16);
  EXPECT_EQ(t["batch"]["microBatch"], 4);
  EXPECT_EQ(t["batch"]["tokensPerStep"], 1024);
  EXPECT_TRUE(t["data"]["bytes"].is_null());
  EXPECT_DOUBLE_EQ(t["flopsPerStep"].get<double>(), t["flopsPerToken"].get<double>() * 1024);
  EXPECT_DOUBLE_EQ(t["pipeline"]["idealBubble"].get<double>(), 0.2);
  ASSERT_EQ(t["stages"].size(), 2u);
  const int64_t stage0 = t["stages"][0]["memory"]["total"],
                stage1 = t["stages"][1]["memory"]["total"];
  EXPECT_EQ(t["memory"]["largestRank"], std::max(stage0, stage1));
  EXPECT_EQ(t["memory"]["allRanks"], 2 * (stage0 + stage1));
  // Worker 0 holds stage 0's two tensor ranks, worker 1 stage 1's.
  EXPECT_EQ(t["memory"]["largestWorker"], 2 * std::max(stage0, stage1));
  EXPECT_TRUE(t["memory"]["podLimit"].is_null());
}

// The worker container's memory limit against the largest worker pod's need.
TEST_F(PlanJobTest, PodMemoryLimit) {
  const auto limit = [](const std::string& memory) {
    return "spec.template={spec: {containers: [{name: worker, image: x, resources: {limits: "
           "{memory: " +
           memory + "}}}]}}";
  };
  ASSERT_EQ(Plan({limit("1Gi")}, "text"), kPlanPrinted) << err_;
  EXPECT_NE(out_.find("; its memory limit 1Gi holds it\n"), std::string::npos) << out_;
  ASSERT_EQ(Plan({limit("1Mi")}, "text"), kPlanPrinted) << err_;
  EXPECT_NE(out_.find("; its memory limit 1Mi does NOT:"), std::string::npos) << out_;
  ASSERT_EQ(Plan({limit("1.5Gi")}, "json"), kPlanPrinted) << err_;
  EXPECT_EQ(nlohmann::json::parse(out_)["trainer"]["memory"]["podLimit"], 1610612736);
  EXPECT_EQ(Plan({limit("8GB")}, "text"), kPlanBadJob);
  EXPECT_EQ(err_, "tessera plan: " + file_ +
                      ": spec.template.spec.containers[0].resources.limits.memory: '8GB' is not "
                      "a quantity (e.g. 16Gi, 512Mi)\n");
  EXPECT_EQ(out_, "");
}

// A bf16 job needs a GPU a rank to run here: the plan says whether this machine has them, as
// `tessera run` counts them (/dev/nvidia*), unless CUDA_VISIBLE_DEVICES chooses them.
TEST_F(PlanJobTest, ABf16JobSaysWhetherThisMachineHasAGpuForEveryRank) {
  std::ofstream(file_) << "apiVersion: tessera.dev/v1alpha1\n"
                          "kind: TrainingJob\n"
                          "metadata: {name: gpu-two}\n"
                          "spec:\n"
                          "  workers: 2\n"
                          "  gpusPerWorker: 1\n"
                          "  trainer:\n"
                          "    precision: bf16\n"
                          "    model: {layers: 2, dModel: 64, heads: 4, seqLen: 64}\n"
                          "    data: {path: no/such/corpus.txt}\n"
                          "    batch: {global: 16}\n"
                          "    schedule: {steps: 200}\n";
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::optional<std::string> saved =
      visible ? std::optional<std::string>(visible) : std::nullopt;
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  const int gpus = LocalGpuCount();
  ASSERT_EQ(Plan({}, "text"), kPlanPrinted) << err_;
  EXPECT_NE(out_.find(fmt::format(
                "           this machine has {} GPU(s) (/dev/nvidia*): {} for `tessera run` (one "
                "a rank)\n",
                gpus, gpus >= 2 ? "enough" : "NOT enough")),
            std::string::npos)
      << out_;
  ASSERT_EQ(Plan({}, "json"), kPlanPrinted) << err_;
  EXPECT_EQ(nlohmann::json::parse(out_)["trainer"]["memory"]["gpusHere"], gpus) << out_;

  ::setenv("CUDA_VISIBLE_DEVICES", "0", 1);
  ASSERT_EQ(Plan({}, "text"), kPlanPrinted) << err_;
  EXPECT_NE(out_.find("CUDA_VISIBLE_DEVICES is set: `tessera run` leaves the ranks' GPUs to it "
                      "and counts none\n"),
            std::string::npos)
      << out_;
  ASSERT_EQ(Plan({}, "json"), kPlanPrinted) << err_;
  EXPECT_TRUE(nlohmann::json::parse(out_)["trainer"]["memory"]["gpusHere"].is_null()) << out_;
  if (saved)
    ::setenv("CUDA_VISIBLE_DEVICES", saved->c_str(), 1);
  else
    ::unsetenv("CUDA_VISIBLE_DEVICES");

  // fp32 counts memory, not GPUs.
  ASSERT_EQ(Plan({"spec.trainer.precision=fp32", "spec.gpusPerWorker=0"}, "json"), kPlanPrinted)
      << err_;
  EXPECT_TRUE(nlohmann::json::parse(out_)["trainer"]["memory"]["gpusHere"].is_null()) << out_;
}

TEST_F(PlanJobTest, RefusalsAreOneLineAndExitTwo) {
  EXPECT_EQ(Plan({}, "yaml"), kPlanBadJob);
  EXPECT_EQ(err_, "tessera plan: --output yaml: use text or json\n");
  // An invalid field: the line `tessera validate` prints.
  EXPECT_EQ(Plan({"spec.trainer.batch.global=15"}, "text"), kPlanBadJob);
  EXPECT_EQ(err_, file_ +
                      ": spec.trainer.batch.global: must be divisible by data x microBatches (15 "
                      "is not divisible by 1x4)\n");
  EXPECT_EQ(out_, "");
}

// A bring-your-own command: its ranks and command, no trainer plan.
TEST_F(PlanJobTest, OwnCommandHasNoTrainerPlan) {
  std::ofstream(file_) << R"(apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata: {name: byo}
spec:
  workers: 2
  template:
    spec:
      containers: [{name: worker, image: x, command: [python3, train.py]}]
)";
  ASSERT_EQ(Plan({}, "json"), kPlanPrinted) << err_;
  const nlohmann::json p = nlohmann::json::parse(out_);
  EXPECT_TRUE(p["trainer"].is_null());
  EXPECT_EQ(p["command"], nlohmann::json::array({"python3", "train.py"}));
}

}  // namespace
}  // namespace tessera::cli
