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

// The stage table: each stage's blocks (first-last), what else it holds, its share of the work
// in percent (as the JSON's costShare), and the note that a stage's figures are one tensor
// rank's.
TEST_F(PlanJobTest, TheStageTableNamesEachStagesBlocksAndShare) {
  ASSERT_EQ(Plan({}, "json"), kPlanPrinted) << err_;
  const nlohmann::json stages = nlohmann::json::parse(out_)["trainer"]["stages"];
  ASSERT_EQ(Plan({}, "text"), kPlanPrinted) << err_;
  const std::string rows[] = {
      fmt::format("\n    0  0-1      embedding   {:>5.1f}%  ",
                  100 * stages[0]["costShare"].get<double>()),
      fmt::format("\n    1  2-3      head, loss  {:>5.1f}%  ",
                  100 * stages[1]["costShare"].get<double>()),
      "\n(each stage's blocks split over 2 tensor-parallel ranks; parameters and memory are one "
      "rank's)\n",
  };
  for (const std::string& row : rows)
    EXPECT_NE(out_.find(row), std::string::npos) << row << "\n" << out_;

  // One stage holds every block, the embedding and the head; no tensor note without tensor
  // parallelism.
  ASSERT_EQ(
      Plan({"spec.parallelism.data=4", "spec.parallelism.pipeline=1", "spec.parallelism.tensor=1"},
           "text"),
      kPlanPrinted)
      << err_;
  EXPECT_NE(out_.find("\n    0  0-3      emb, head   100.0%  "), std::string::npos) << out_;
  EXPECT_EQ(out_.find("tensor-parallel ranks"), std::string::npos) << out_;
}

// Each stage's memory in the JSON, attention probabilities included: (micro-batch, heads /
// tensor, seqLen, seqLen) floats a block, for every micro-batch the stage keeps alive.
TEST_F(PlanJobTest, JsonStageMemoryHasTheAttentionProbabilities) {
  ASSERT_EQ(Plan({}, "json"), kPlanPrinted) << err_;
  const nlohmann::json t = nlohmann::json::parse(out_)["trainer"];
  for (const nlohmann::json& stage : t["stages"]) {
    const int64_t blocks = stage["endLayer"].get<int64_t>() - stage["firstLayer"].get<int64_t>();
    EXPECT_EQ(stage["memory"]["attention"],
              stage["inFlight"].get<int64_t>() * blocks * 4 * (4 / 2) * 64 * 64 * 4)
        << stage.dump();
    EXPECT_LT(stage["memory"]["attention"], stage["memory"]["activations"]) << stage.dump();
  }
  EXPECT_EQ(t["precision"], "fp32");
  EXPECT_EQ(t["device"], "cpu");
  EXPECT_EQ(t["zeroStage"], 0);
  // This machine's memory, for `tessera run`.
  ASSERT_TRUE(t["memory"]["available"].is_number()) << t["memory"].dump();
  EXPECT_GT(t["memory"]["available"].get<int64_t>(), 0);
}

// Four data-parallel ranks in one pod, with ZeRO-1: the ranks line, the batch each rank takes,
// and the optimizer line.
TEST_F(PlanJobTest, DataParallelRanksSplitTheBatchAndZeroOneShardsTheMoments) {
  const std::vector<std::string> data4 = {"spec.workers=1",
                                          "spec.procsPerWorker=4",
                                          "spec.parallelism.data=4",
                                          "spec.parallelism.pipeline=1",
                                          "spec.parallelism.tensor=1",
                                          "spec.parallelism.microBatches=2"};
  std::vector<std::string> zero1 = data4;
  zero1.push_back("spec.parallelism.zeroStage=1");
  ASSERT_EQ(Plan(zero1, "json"), kPlanPrinted) << err_;
  const nlohmann::json t = nlohmann::json::parse(out_)["trainer"];
  EXPECT_EQ(t["batch"]["global"], 16);
  EXPECT_EQ(t["batch"]["perDataRank"], 4);
  EXPECT_EQ(t["batch"]["microBatch"], 2);
  EXPECT_EQ(t["zeroStage"], 1);
  ASSERT_EQ(Plan(zero1, "text"), kPlanPrinted) << err_;
  EXPECT_EQ(out_.rfind("cpu-hybrid: 4 rank(s) = 1 worker(s) x 4 process(es); mesh data 4 x "
                       "pipeline 1 x tensor 1\n",
                       0),
            0u)
      << out_;
  EXPECT_NE(out_.find("\noptimizer  AdamW; ZeRO-1: each of the 4 data-parallel ranks keeps 1/4 of "
                      "its moments\n"),
            std::string::npos)
      << out_;
  ASSERT_EQ(Plan(data4, "text"), kPlanPrinted) << err_;
  EXPECT_NE(out_.find("\noptimizer  AdamW; every data-parallel rank keeps all of its moments "
                      "(zeroStage 0); gradients all-reduced in buckets of 25 MiB\n"),
            std::string::npos)
      << out_;
}

// The corpus, when it is here: a text file is held as 2 bytes of ids a byte; a uint16 file is
// mapped.
TEST_F(PlanJobTest, TheDataLineSaysHowTheCorpusIsHeld) {
  const std::string corpus = (dir_ / "corpus.txt").string();
  std::ofstream(corpus) << std::string(3000, 'a');
  ASSERT_EQ(Plan({"spec.trainer.data.path=" + corpus}, "text"), kPlanPrinted) << err_;
  EXPECT_NE(out_.find("\ndata       " + corpus +
                      ": 2.9 KiB of text, held as 5.9 KiB of ids by every rank\n"),
            std::string::npos)
      << out_;
  ASSERT_EQ(
      Plan({"spec.trainer.data.path=" + corpus, "spec.trainer.data.tokenizer=uint16"}, "text"),
      kPlanPrinted)
      << err_;
  EXPECT_NE(out_.find("\ndata       " + corpus +
                      ": 2.9 KiB of uint16 ids, mapped (pages shared by the ranks of a machine)\n"),
            std::string::npos)
      << out_;
}

// The largest worker pod's need against its limit: a limit of exactly that many bytes holds
// it, one byte less does not.
TEST_F(PlanJobTest, APodLimitOfExactlyTheNeedHoldsIt) {
  ASSERT_EQ(Plan({}, "json"), kPlanPrinted) << err_;
  const int64_t need = nlohmann::json::parse(out_)["trainer"]["memory"]["largestWorker"];
  const auto limit = [](int64_t bytes) {
    return "spec.template={spec: {containers: [{name: worker, image: x, resources: {limits: "
           "{memory: \"" +
           std::to_string(bytes) + "\"}}}]}}";
  };
  ASSERT_EQ(Plan({limit(need)}, "text"), kPlanPrinted) << err_;
  EXPECT_NE(out_.find("its memory limit " + std::to_string(need) + " holds it\n"),
            std::string::npos)
      << out_;
  ASSERT_EQ(Plan({limit(need - 1)}, "text"), kPlanPrinted) << err_;
  EXPECT_NE(out_.find("its memory limit " + std::to_string(need - 1) + " does NOT:"),
            std::string::npos)
      << out_;
}

// The largest worker pod is the one whose ranks hold the most, whichever it is: with a large
// vocabulary the last stage's logits make worker 1 (stage 1) the larger.
TEST_F(PlanJobTest, TheLargestWorkerIsTheOneWhoseRanksHoldTheMost) {
  ASSERT_EQ(Plan({"spec.trainer.model.vocab=8192"}, "json"), kPlanPrinted) << err_;
  const nlohmann::json t = nlohmann::json::parse(out_)["trainer"];
  const int64_t stage0 = t["stages"][0]["memory"]["total"],
                stage1 = t["stages"][1]["memory"]["total"];
  ASSERT_GT(stage1, stage0);
  EXPECT_EQ(t["memory"]["largestWorker"], 2 * stage1);
}

// The limit read is the worker container's, wherever it is in the list.
TEST_F(PlanJobTest, ThePodLimitIsTheWorkerContainers) {
  ASSERT_EQ(Plan({"spec.template={spec: {containers: [{name: sidecar, image: y, resources: "
                  "{limits: {memory: 1Mi}}}, {name: worker, image: x, resources: {limits: "
                  "{memory: 1Gi}}}]}}"},
                 "text"),
            kPlanPrinted)
      << err_;
  EXPECT_NE(out_.find("; its memory limit 1Gi holds it\n"), std::string::npos) << out_;
}

// Whether this machine could run every rank (`tessera run`): this small job, yes; one whose
// attention probabilities alone are terabytes, no.
TEST_F(PlanJobTest, SaysWhetherThisMachineHasEnoughForEveryRank) {
  ASSERT_EQ(Plan({}, "text"), kPlanPrinted) << err_;
  EXPECT_NE(out_.find(" available: enough for `tessera run` (every rank here)\n"),
            std::string::npos)
      << out_;
  ASSERT_EQ(Plan({"spec.trainer.model.seqLen=131072"}, "text"), kPlanPrinted) << err_;
  EXPECT_NE(out_.find(" available: NOT enough for `tessera run` (every rank here)\n"),
            std::string::npos)
      << out_;
}

// A bf16 job's memory is each rank's GPU's, for the attention the trainer will use
// (TESSERA_ATTENTION, else the matmul attention with its seqLen x seqLen buffers); this
// machine's memory and the pods' are not compared with it.
TEST_F(PlanJobTest, ABf16PlanFollowsTheAttentionTheTrainerWillUse) {
  std::ofstream(file_) << R"(apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata: {name: gpu}
spec:
  workers: 1
  gpusPerWorker: 2
  trainer:
    model: {layers: 2, dModel: 64, heads: 4, seqLen: 64, vocab: 256}
    data: {path: no/such/corpus.txt}
    batch: {global: 8}
    schedule: {steps: 10}
    precision: bf16
)";
  const char* saved = std::getenv("TESSERA_ATTENTION");
  const std::string saved_value = saved != nullptr ? saved : "";
  unsetenv("TESSERA_ATTENTION");
  const int matmul_rc = Plan({}, "json");
  const std::string matmul_out = out_;
  setenv("TESSERA_ATTENTION", "flash-mma2", 1);
  const int flash_rc = Plan({}, "json");
  if (saved != nullptr)
    setenv("TESSERA_ATTENTION", saved_value.c_str(), 1);
  else
    unsetenv("TESSERA_ATTENTION");
  ASSERT_EQ(matmul_rc, kPlanPrinted) << err_;
  ASSERT_EQ(flash_rc, kPlanPrinted) << err_;
  const nlohmann::json matmul = nlohmann::json::parse(matmul_out)["trainer"];
  const nlohmann::json flash = nlohmann::json::parse(out_)["trainer"];
  EXPECT_EQ(matmul["precision"], "bf16");
  EXPECT_EQ(matmul["device"], "gpu");
  EXPECT_GT(matmul["stages"][0]["memory"]["attention"], 0);
  EXPECT_EQ(flash["stages"][0]["memory"]["attention"], 0);
  EXPECT_LT(flash["stages"][0]["memory"]["activations"],
            matmul["stages"][0]["memory"]["activations"]);
  EXPECT_TRUE(matmul["memory"]["available"].is_null());
  EXPECT_TRUE(matmul["memory"]["largestWorker"].is_null());
}

}  // namespace
}  // namespace tessera::cli
