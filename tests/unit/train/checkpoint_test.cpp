#include "worker/train/checkpoint.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace tessera::train {
namespace {
namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        fs::path(::testing::TempDir()) /
        ("ckpt-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  CheckpointMeta Meta(int64_t step) const {
    CheckpointMeta m;
    m.step = step;
    m.config_hash = "abc123";
    m.config_json = R"({"optimizer":{"lr":0.001},"seed":1})";
    m.mesh = "data=1,pipeline=1,tensor=1";
    m.data_cursor = {step, step * 8, 0, 5000};
    m.rng_seed = 1;
    m.rng_counter = step * 8;
    m.optimizer_steps = step;
    m.loss = 2.5;
    return m;
  }

  Status SaveStep(CheckpointStore& store, int64_t step) {
    const std::vector<float> params = {1.0f, 2.0f, static_cast<float>(step)};
    const std::vector<float> moments = {0.5f};
    return store.Save(Meta(step), {{"rank-00000.bin", {{"params", params}, {"adamw.m", moments}}}});
  }

  fs::path root_;
};

TEST_F(CheckpointTest, RoundTripKeepsMetaAndTensors) {
  CheckpointStore store(root_.string());
  ASSERT_TRUE(SaveStep(store, 20).ok());
  EXPECT_TRUE(fs::exists(root_ / "step-20" / "meta.json"));
  EXPECT_FALSE(fs::exists(root_ / "step-20.tmp"));
  CheckpointMeta meta;
  const Status st = store.ReadMeta(20, &meta);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(meta.step, 20);
  EXPECT_EQ(meta.config_hash, "abc123");
  EXPECT_EQ(meta.config_json, R"({"optimizer":{"lr":0.001},"seed":1})");
  EXPECT_EQ(meta.mesh, "data=1,pipeline=1,tensor=1");
  EXPECT_EQ(meta.data_cursor.samples_consumed, 160);
  EXPECT_EQ(meta.data_cursor.train_tokens, 5000);
  EXPECT_EQ(meta.rng_counter, 160);
  EXPECT_EQ(meta.optimizer_steps, 20);
  ASSERT_EQ(meta.files.size(), 1u);
  EXPECT_EQ(meta.files[0].name, "rank-00000.bin");
  EXPECT_EQ(meta.files[0].sha256.size(), 64u);
  ShardContents shard;
  ASSERT_TRUE(store.ReadShard(meta, "rank-00000.bin", &shard).ok());
  ASSERT_NE(shard.Find("params"), nullptr);
  EXPECT_EQ(*shard.Find("params"), (std::vector<float>{1.0f, 2.0f, 20.0f}));
  EXPECT_EQ(*shard.Find("adamw.m"), (std::vector<float>{0.5f}));
  EXPECT_EQ(shard.Find("adamw.v"), nullptr);
}

TEST_F(CheckpointTest, CorruptShardIsRefusedNamingTheFile) {
  CheckpointStore store(root_.string());
  ASSERT_TRUE(SaveStep(store, 10).ok());
  const fs::path shard_path = root_ / "step-10" / "rank-00000.bin";
  {
    std::fstream f(shard_path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');  // same size, different bytes
  }
  CheckpointMeta meta;
  ASSERT_TRUE(store.ReadMeta(10, &meta).ok());
  ShardContents shard;
  const Status st = store.ReadShard(meta, "rank-00000.bin", &shard);
  EXPECT_EQ(st.code(), ExitCode::kCheckpointRefused);
  EXPECT_EQ(st.exit_code(), 3);
  EXPECT_NE(st.message().find(shard_path.string()), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("sha256"), std::string::npos) << st.message();
}

void EditMeta(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(std::ifstream(dir / "meta.json"));
  edit(j);
  std::ofstream(dir / "meta.json") << j.dump();
}

TEST_F(CheckpointTest, DamagedMetaOrFilesAreRefused) {
  struct Case {
    const char* name;
    std::function<void(const fs::path& dir)> damage;
    const char* names_file;
    const char* says;
  } cases[] = {
      {"meta removed", [](const fs::path& d) { fs::remove(d / "meta.json"); }, "meta.json",
       "missing"},
      {"meta garbled", [](const fs::path& d) { std::ofstream(d / "meta.json") << "{\"step\": 3,"; },
       "meta.json", "not a valid"},
      // Converting these to int was undefined (found by fuzzing meta.json).
      {"format a huge float",
       [](const fs::path& d) { EditMeta(d, [](nlohmann::json& j) { j["format"] = 1.1e36; }); },
       "meta.json", "format: 1.1e+36 is not an integer in range"},
      {"world size past int",
       [](const fs::path& d) {
         EditMeta(d, [](nlohmann::json& j) { j["worldSize"] = int64_t{1} << 40; });
       },
       "meta.json", "worldSize: 1099511627776 is not an integer in range"},
      {"shard truncated", [](const fs::path& d) { fs::resize_file(d / "rank-00000.bin", 10); },
       "rank-00000.bin", "bytes"},
      {"shard removed", [](const fs::path& d) { fs::remove(d / "rank-00000.bin"); },
       "rank-00000.bin", "missing"},
  };
  for (const Case& c : cases) {
    fs::remove_all(root_);
    CheckpointStore store(root_.string());
    ASSERT_TRUE(SaveStep(store, 5).ok());
    c.damage(root_ / "step-5");
    CheckpointMeta meta;
    const Status st = store.ReadMeta(5, &meta);
    EXPECT_EQ(st.code(), ExitCode::kCheckpointRefused) << c.name;
    EXPECT_NE(st.message().find(c.names_file), std::string::npos) << c.name << ": " << st.message();
    EXPECT_NE(st.message().find(c.says), std::string::npos) << c.name << ": " << st.message();
  }
}

TEST_F(CheckpointTest, MetaForAnotherStepIsRefused) {
  CheckpointStore store(root_.string());
  ASSERT_TRUE(SaveStep(store, 5).ok());
  fs::rename(root_ / "step-5", root_ / "step-6");
  CheckpointMeta meta;
  const Status st = store.ReadMeta(6, &meta);
  EXPECT_EQ(st.code(), ExitCode::kCheckpointRefused);
  EXPECT_NE(st.message().find("step 5"), std::string::npos) << st.message();
}

TEST_F(CheckpointTest, NewestCompleteIgnoresTemporaryDirectories) {
  CheckpointStore store(root_.string());
  EXPECT_EQ(store.NewestComplete(), std::nullopt);  // no directory yet
  ASSERT_TRUE(SaveStep(store, 10).ok());
  ASSERT_TRUE(SaveStep(store, 20).ok());
  // A writer that crashed half-way through step 30, and unrelated entries.
  fs::create_directories(root_ / "step-30.tmp");
  std::ofstream(root_ / "step-30.tmp" / "rank-00000.bin") << "partial";
  fs::create_directories(root_ / "step-x");
  std::ofstream(root_ / "step-40") << "a file, not a directory";
  EXPECT_EQ(store.CompleteSteps(), (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(store.NewestComplete(), 20);
}

TEST_F(CheckpointTest, ExistingStepIsNeverOverwritten) {
  CheckpointStore store(root_.string());
  ASSERT_TRUE(SaveStep(store, 10).ok());
  const Status st = SaveStep(store, 10);
  EXPECT_EQ(st.code(), ExitCode::kCheckpointRefused);
  EXPECT_NE(st.message().find("step-10"), std::string::npos);
}

TEST_F(CheckpointTest, StaleTemporaryOfTheSameStepIsReplaced) {
  CheckpointStore store(root_.string());
  fs::create_directories(root_ / "step-10.tmp");
  std::ofstream(root_ / "step-10.tmp" / "junk") << "x";
  ASSERT_TRUE(SaveStep(store, 10).ok());
  EXPECT_FALSE(fs::exists(root_ / "step-10" / "junk"));
  EXPECT_FALSE(fs::exists(root_ / "step-10.tmp"));
}

TEST_F(CheckpointTest, PruneKeepsTheNewestN) {
  struct Case {
    int keep;
    std::vector<int64_t> want;
  } cases[] = {{1, {40}}, {2, {30, 40}}, {3, {20, 30, 40}}, {10, {10, 20, 30, 40}}};
  for (const Case& c : cases) {
    fs::remove_all(root_);
    CheckpointStore store(root_.string());
    for (int64_t step : {10, 20, 30, 40})
      ASSERT_TRUE(SaveStep(store, step).ok());
    fs::create_directories(root_ / "step-35.tmp");  // older than the newest: garbage
    fs::create_directories(root_ / "step-50.tmp");  // maybe a writer at work: kept
    ASSERT_TRUE(store.Prune(c.keep).ok());
    EXPECT_EQ(store.CompleteSteps(), c.want) << "keep " << c.keep;
    EXPECT_FALSE(fs::exists(root_ / "step-35.tmp"));
    EXPECT_TRUE(fs::exists(root_ / "step-50.tmp"));
  }
}

TEST(FirstJsonDifference, NamesTheFirstDifferingField) {
  struct Case {
    const char* a;
    const char* b;
    const char* want;
  } cases[] = {
      {R"({"a":1,"b":{"c":2}})", R"({"a":1,"b":{"c":2}})", ""},
      {R"({"a":1,"b":{"c":2}})", R"({"a":1,"b":{"c":3}})", "b.c: 2 vs 3"},
      {R"({"a":1})", R"({"a":1,"z":true})", "z: (absent) vs true"},
      {R"({"m":{"x":"cosine"}})", R"({"m":{}})", "m.x: \"cosine\" vs (absent)"},
  };
  for (const Case& c : cases)
    EXPECT_EQ(FirstJsonDifference(c.a, c.b), c.want);
}

}  // namespace
}  // namespace tessera::train
