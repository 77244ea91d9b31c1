#include "worker/train/checkpoint.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>

#include "worker/train/digest.h"

namespace {
// Sees every fsync the checkpoint code makes: this binary links with -Wl,--wrap=fsync
// (CMakeLists.txt). Given the path of what is synced, returns an errno to fail with, or 0.
std::function<int(const std::string& path)> on_fsync;
}  // namespace

extern "C" int __real_fsync(int fd);
extern "C" int __wrap_fsync(int fd) {
  if (on_fsync) {
    std::error_code ec;
    const auto path = std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(fd), ec);
    if (const int err = on_fsync(path.string()); err != 0) {
      errno = err;
      return -1;
    }
  }
  return __real_fsync(fd);
}

namespace tessera::train {
namespace {
namespace fs = std::filesystem;

// Sets on_fsync for one scope.
class FsyncProbe {
 public:
  explicit FsyncProbe(std::function<int(const std::string& path)> f) { on_fsync = std::move(f); }
  ~FsyncProbe() { on_fsync = nullptr; }
  FsyncProbe(const FsyncProbe&) = delete;
  FsyncProbe& operator=(const FsyncProbe&) = delete;
};

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

// Every field of meta.json comes back as written (a resume continues from all of them), and
// the files listed are the shards Save wrote, each with its rank, whatever the caller passed.
TEST_F(CheckpointTest, RoundTripKeepsEveryMetaFieldAndEveryShard) {
  CheckpointMeta m = Meta(30);
  m.world_size = 2;
  m.data_cursor = {30, 240, 3, 777};
  m.rng_seed = (uint64_t{1} << 63) + 5;  // past int64: meta.json holds it unsigned
  m.rng_counter = 241;
  m.optimizer_steps = 29;
  m.zero_stage = 1;
  m.loss = 2.25;
  m.val_loss = 2.75;
  m.created_at = "2024-05-01T12:00:00Z";
  m.files = {{"rank-00009.bin", 9, 1, "00"}};  // stale: replaced by what Save writes
  const std::vector<float> rank0 = {1.0f, -0.0f};
  const std::vector<float> rank1 = {2.0f, 3.0f, 4.0f};
  CheckpointStore store(root_.string());
  ASSERT_TRUE(store
                  .Save(m, {{"rank-00000.bin", {{"params", rank0}}},
                            {"rank-00001.bin", {{"params", rank1}, {"adamw.v", rank0}}}})
                  .ok());

  CheckpointMeta got;
  const Status st = store.ReadMeta(30, &got);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(got.format, 1);
  EXPECT_EQ(got.step, 30);
  EXPECT_EQ(got.world_size, 2);
  EXPECT_EQ(got.data_cursor.step, 30);
  EXPECT_EQ(got.data_cursor.samples_consumed, 240);
  EXPECT_EQ(got.data_cursor.epoch, 3);
  EXPECT_EQ(got.data_cursor.train_tokens, 777);
  EXPECT_EQ(got.rng_seed, m.rng_seed);
  EXPECT_EQ(got.rng_counter, 241);
  EXPECT_EQ(got.optimizer_steps, 29);
  EXPECT_EQ(got.zero_stage, 1);
  EXPECT_EQ(got.loss, 2.25);
  EXPECT_EQ(got.val_loss, std::optional<double>(2.75));
  EXPECT_EQ(got.created_at, "2024-05-01T12:00:00Z");
  ASSERT_EQ(got.files.size(), 2u);
  // One ShardContents reused for every file, as a reader of several shards would.
  const std::vector<std::vector<std::string>> want_names = {{"params"}, {"params", "adamw.v"}};
  const std::vector<std::vector<float>> want_params = {rank0, rank1};
  ShardContents shard;
  for (int rank = 0; rank < 2; ++rank) {
    const CheckpointFile& f = got.files[rank];
    EXPECT_EQ(f.rank, rank) << f.name;
    EXPECT_EQ(f.bytes, static_cast<int64_t>(fs::file_size(root_ / "step-30" / f.name))) << f.name;
    ASSERT_TRUE(store.ReadShard(got, f.name, &shard).ok()) << f.name;
    EXPECT_EQ(shard.names, want_names[rank]) << f.name;
    ASSERT_NE(shard.Find("params"), nullptr) << f.name;
    EXPECT_EQ(*shard.Find("params"), want_params[rank]) << f.name;
  }
  EXPECT_EQ(got.files[0].name, "rank-00000.bin");
  EXPECT_EQ(got.files[1].name, "rank-00001.bin");

  // A step without a validation loss reads back without one.
  ASSERT_TRUE(SaveStep(store, 31).ok());
  ASSERT_TRUE(store.ReadMeta(31, &got).ok());
  EXPECT_EQ(got.val_loss, std::nullopt);
}

TEST_F(CheckpointTest, ShardNotListedInMetaIsRefused) {
  CheckpointStore store(root_.string());
  ASSERT_TRUE(SaveStep(store, 5).ok());
  const fs::path extra = root_ / "step-5" / "rank-00001.bin";
  fs::copy_file(root_ / "step-5" / "rank-00000.bin", extra);
  CheckpointMeta meta;
  ASSERT_TRUE(store.ReadMeta(5, &meta).ok());
  ShardContents shard;
  const Status st = store.ReadShard(meta, "rank-00001.bin", &shard);
  EXPECT_EQ(st.code(), ExitCode::kCheckpointRefused);
  EXPECT_NE(st.message().find(extra.string() + ": not listed in meta.json"), std::string::npos)
      << st.message();
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
  EXPECT_NE(st.message().find("move " + (root_ / "step-10").string() + " aside"), std::string::npos)
      << st.message();
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
      {"format from a newer build",
       [](const fs::path& d) { EditMeta(d, [](nlohmann::json& j) { j["format"] = 2; }); },
       "meta.json", "format 2 is not supported"},
      {"negative seed",
       [](const fs::path& d) { EditMeta(d, [](nlohmann::json& j) { j["rng"]["seed"] = -1; }); },
       "meta.json", "seed: -1 is not an integer in range"},
      {"samples consumed past int64",
       [](const fs::path& d) {
         EditMeta(d, [](nlohmann::json& j) {
           j["dataCursor"]["samplesConsumed"] = std::numeric_limits<uint64_t>::max();
         });
       },
       "meta.json", "samplesConsumed: 18446744073709551615 is not an integer in range"},
      {"shard truncated", [](const fs::path& d) { fs::resize_file(d / "rank-00000.bin", 10); },
       "rank-00000.bin", "bytes"},
      {"shard grown",
       [](const fs::path& d) {
         std::ofstream(d / "rank-00000.bin", std::ios::binary | std::ios::app) << "xx";
       },
       "rank-00000.bin", "bytes, meta.json records"},
      {"shard removed", [](const fs::path& d) { fs::remove(d / "rank-00000.bin"); },
       "rank-00000.bin", "missing"},
      // Reading it fails (EISDIR here, EIO on a failing disk): once an uncaught exception that
      // aborted the rank, and `tessera run` with it (exit 134, restarted, no summary).
      {"meta a directory",
       [](const fs::path& d) {
         fs::remove(d / "meta.json");
         fs::create_directory(d / "meta.json");
       },
       "meta.json", "missing or unreadable"},
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
    // What to do, rather than start afresh and lose the older checkpoints too.
    EXPECT_NE(st.message().find("move " + (root_ / "step-5").string() + " aside"),
              std::string::npos)
        << c.name << ": " << st.message();
  }
}

// A shard whose bytes match the size and sha256 in meta.json (a writer's bug, or a file and
// meta.json replaced together) is still decoded defensively: refused, never read past its end.
TEST_F(CheckpointTest, ShardMatchingItsDigestButMalformedIsRefused) {
  auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), sizeof(v)); };
  auto u64 = [](uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), sizeof(v)); };
  const std::string magic = "TSRSHRD1";
  struct Case {
    const char* name;
    std::string bytes;
    const char* says;
  } cases[] = {
      {"empty tensor list is fine", magic + u32(0), ""},
      {"bad magic", "TSRSHRD2" + u32(0), "not a Tessera shard file (bad magic)"},
      {"header cut short", magic + "\x01", "truncated header"},
      {"trailing bytes", magic + u32(0) + "x", "trailing bytes after the last tensor"},
      {"name past the end", magic + u32(1) + u32(1000) + "ab", "truncated at tensor 0"},
      {"values past the end", magic + u32(1) + u32(1) + "p" + u64(uint64_t{1} << 40) + u32(0),
       "truncated in tensor 'p'"},
  };
  for (const Case& c : cases) {
    fs::remove_all(root_);
    CheckpointStore store(root_.string());
    ASSERT_TRUE(SaveStep(store, 5).ok());
    const fs::path dir = root_ / "step-5";
    std::ofstream(dir / "rank-00000.bin", std::ios::binary | std::ios::trunc) << c.bytes;
    EditMeta(dir, [&](nlohmann::json& j) {
      j["files"][0]["bytes"] = c.bytes.size();
      j["files"][0]["sha256"] = Sha256Hex(std::as_bytes(std::span(c.bytes)));
    });
    CheckpointMeta meta;
    ASSERT_TRUE(store.ReadMeta(5, &meta).ok()) << c.name;
    ShardContents shard;
    const Status st = store.ReadShard(meta, "rank-00000.bin", &shard);
    if (std::string(c.says).empty()) {
      EXPECT_TRUE(st.ok()) << c.name << ": " << st.message();
      EXPECT_TRUE(shard.names.empty()) << c.name;
      continue;
    }
    EXPECT_EQ(st.code(), ExitCode::kCheckpointRefused) << c.name;
    EXPECT_NE(st.message().find((dir / "rank-00000.bin").string() + ": " + c.says),
              std::string::npos)
        << c.name << ": " << st.message();
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

// An entry named like a checkpoint whose type cannot be read (a symbolic link loop: ELOOP) is
// not a checkpoint, as a dangling link is not: once an uncaught filesystem_error that aborted
// every rank and `tessera run` (exit 134) before anything was resumed or summarised.
TEST_F(CheckpointTest, EntriesWhoseTypeCannotBeReadAreNotCheckpoints) {
  CheckpointStore store(root_.string());
  ASSERT_TRUE(SaveStep(store, 10).ok());
  ASSERT_TRUE(SaveStep(store, 20).ok());
  fs::create_symlink("step-30", root_ / "step-30");          // a loop
  fs::create_symlink(root_ / "nowhere", root_ / "step-40");  // dangling
  EXPECT_EQ(store.CompleteSteps(), (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(store.NewestComplete(), 20);
  ASSERT_TRUE(store.Prune(1).ok());
  EXPECT_EQ(store.CompleteSteps(), (std::vector<int64_t>{20}));
  EXPECT_TRUE(fs::is_symlink(root_ / "step-30"));  // not ours to delete
}

TEST_F(CheckpointTest, OnlyStepDirectoriesAreCheckpoints) {
  struct Case {
    const char* dir;
    std::optional<int64_t> step;
  } cases[] = {
      {"step-0", 0},
      {"step-9", 9},
      {"step-19", 19},
      {"step-10000", 10000},
      {"step-", std::nullopt},
      {"step-9x", std::nullopt},
      {"step--1", std::nullopt},
      {"Step-9", std::nullopt},
      {"step-9.tmp", std::nullopt},
      {"step-99999999999999999999", std::nullopt},  // past int64: refused, not wrapped
      // Not a name StepDir gives: taken as step 10, it was resumed from step-10/, which is
      // not there (refused as damaged), and never pruned.
      {"step-010", std::nullopt},
      {"step-00", std::nullopt},
  };
  for (const Case& c : cases) {
    fs::remove_all(root_);
    fs::create_directories(root_ / c.dir);
    const CheckpointStore store(root_.string());
    EXPECT_EQ(store.NewestComplete(), c.step) << c.dir;
  }
}

TEST_F(CheckpointTest, ExistingStepIsNeverOverwritten) {
  CheckpointStore store(root_.string());
  ASSERT_TRUE(SaveStep(store, 10).ok());
  const Status st = SaveStep(store, 10);
  EXPECT_EQ(st.code(), ExitCode::kCheckpointRefused);
  EXPECT_NE(st.message().find("step-10"), std::string::npos);
}

// A step-<N>/ that appeared after Begin (another writer's) is not replaced by Commit.
TEST_F(CheckpointTest, CommitNeverReplacesACheckpointThatAppearedMeanwhile) {
  CheckpointStore store(root_.string());
  ASSERT_TRUE(store.Begin(7).ok());
  const std::vector<float> params = {1.0f};
  CheckpointMeta meta = Meta(7);
  meta.files.resize(1);
  ASSERT_TRUE(store.WriteShard(7, 0, "rank-00000.bin", {{"params", params}}, &meta.files[0]).ok());
  fs::create_directories(root_ / "step-7");
  std::ofstream(root_ / "step-7" / "meta.json") << "{}";
  const Status st = store.Commit(meta);
  EXPECT_EQ(st.code(), ExitCode::kIoError);
  EXPECT_NE(st.message().find((root_ / "step-7.tmp").string() + ": cannot rename to " +
                              (root_ / "step-7").string()),
            std::string::npos)
      << st.message();
  std::string kept;
  std::getline(std::ifstream(root_ / "step-7" / "meta.json"), kept);
  EXPECT_EQ(kept, "{}");
}

TEST_F(CheckpointTest, StaleTemporaryOfTheSameStepIsReplaced) {
  CheckpointStore store(root_.string());
  fs::create_directories(root_ / "step-10.tmp");
  std::ofstream(root_ / "step-10.tmp" / "junk") << "x";
  ASSERT_TRUE(SaveStep(store, 10).ok());
  EXPECT_FALSE(fs::exists(root_ / "step-10" / "junk"));
  EXPECT_FALSE(fs::exists(root_ / "step-10.tmp"));
}

// A checkpoint whose write fails (a full disk, here a shard path that cannot be opened) gives
// its space back at once: no step-<N>.tmp/ stays, and the checkpoint before it is untouched.
TEST_F(CheckpointTest, AFailedWriteLeavesNoTemporaryBehind) {
  CheckpointStore store(root_.string());
  ASSERT_TRUE(SaveStep(store, 10).ok());
  const std::vector<float> params = {1.0f};
  const Status st = store.Save(Meta(20), {{"rank-00000.bin", {{"params", params}}},
                                          {"no-such-dir/rank-00001.bin", {{"params", params}}}});
  EXPECT_EQ(st.code(), ExitCode::kIoError);
  EXPECT_NE(st.message().find("no-such-dir/rank-00001.bin: cannot write"), std::string::npos)
      << st.message();
  EXPECT_FALSE(fs::exists(root_ / "step-20.tmp"));
  EXPECT_FALSE(fs::exists(root_ / "step-20"));
  EXPECT_EQ(store.NewestComplete(), 10);
  CheckpointMeta meta;
  EXPECT_TRUE(store.ReadMeta(10, &meta).ok());
}

// A checkpoint is durable before it is complete: each file is synced, then the temporary
// directory (its entries), then, after the rename, the root (the new name). A crash at any
// point leaves the previous checkpoint or this one, never a step-<N>/ missing a file.
TEST_F(CheckpointTest, SaveSyncsEveryFileThenTheDirectoryAndAfterTheRenameTheRoot) {
  CheckpointStore store(root_.string());
  ASSERT_TRUE(SaveStep(store, 6).ok());  // so that the root exists and has a canonical path
  const fs::path root = fs::canonical(root_);
  const fs::path tmp = root / "step-7.tmp";
  std::vector<std::string> synced;
  {
    FsyncProbe probe([&](const std::string& path) {
      synced.push_back(path + (fs::exists(root / "step-7") ? " (renamed)" : ""));
      return 0;
    });
    const std::vector<float> params = {1.0f};
    ASSERT_TRUE(store
                    .Save(Meta(7), {{"rank-00000.bin", {{"params", params}}},
                                    {"rank-00001.bin", {{"params", params}}}})
                    .ok());
  }
  EXPECT_EQ(synced, (std::vector<std::string>{
                        (tmp / "rank-00000.bin").string(), (tmp / "rank-00001.bin").string(),
                        (tmp / "meta.json").string(), tmp.string(), root.string() + " (renamed)"}));
}

// The first checkpoint into a root that does not exist yet: the root and each parent created
// for it are synced into their own parents before anything is written in them, so a crash
// cannot keep the checkpoint's files and lose the directories that name them.
TEST_F(CheckpointTest, BeginSyncsEachDirectoryItCreatesIntoItsParent) {
  fs::create_directories(root_);
  const fs::path base = fs::canonical(root_);
  const fs::path root = base / "new-a" / "new-b";
  std::vector<std::string> synced;
  {
    FsyncProbe probe([&](const std::string& path) {
      synced.push_back(path);
      return 0;
    });
    CheckpointStore store(root.string());
    ASSERT_TRUE(store.Begin(5).ok());
  }
  EXPECT_EQ(synced, (std::vector<std::string>{(base / "new-a").string(), base.string()}));
}

// A file that cannot be written or synced (a full disk: /dev/full; a file whose fsync fails:
// /dev/null's is EINVAL) is an I/O error naming it, never a checkpoint reported written.
TEST_F(CheckpointTest, AFileThatCannotBeWrittenOrSyncedIsAnIoErrorNamingIt) {
  struct Case {
    const char* device;
    const char* file;
    const char* says;
  } cases[] = {
      {"/dev/full", "rank-00000.bin", "No space left on device"},
      {"/dev/null", "rank-00000.bin", "Invalid argument"},
      {"/dev/full", "meta.json", "No space left on device"},
      {"/dev/null", "meta.json", "Invalid argument"},
  };
  for (const Case& c : cases) {
    if (!fs::exists(c.device))
      GTEST_SKIP() << c.device << " is not available here";
    fs::remove_all(root_);
    CheckpointStore store(root_.string());
    ASSERT_TRUE(store.Begin(7).ok());
    const fs::path path = root_ / "step-7.tmp" / c.file;
    fs::create_symlink(c.device, path);  // the store writes through it
    const std::vector<float> params = {1.0f};
    CheckpointMeta meta = Meta(7);
    meta.files.resize(1);
    Status st = store.WriteShard(7, 0, "rank-00000.bin", {{"params", params}}, &meta.files[0]);
    if (st.ok())
      st = store.Commit(meta);
    EXPECT_EQ(st.code(), ExitCode::kIoError) << c.device << " " << c.file;
    EXPECT_NE(st.message().find(path.string() + ": cannot write: " + c.says), std::string::npos)
        << st.message();
    EXPECT_FALSE(fs::exists(root_ / "step-7")) << c.device << " " << c.file;
  }
}

// Save's commit failing (here meta.json's fsync, as on a disk that fails) is an I/O error
// naming meta.json; its temporary is deleted and the checkpoint before it stays the newest.
TEST_F(CheckpointTest, AFailedCommitLeavesNoTemporaryAndTheOlderCheckpointNewest) {
  CheckpointStore store(root_.string());
  ASSERT_TRUE(SaveStep(store, 10).ok());
  Status st;
  {
    FsyncProbe probe(
        [](const std::string& path) { return fs::path(path).filename() == "meta.json" ? EIO : 0; });
    st = SaveStep(store, 20);
  }
  EXPECT_EQ(st.code(), ExitCode::kIoError);
  EXPECT_NE(st.message().find("step-20.tmp/meta.json: cannot write: Input/output error"),
            std::string::npos)
      << st.message();
  EXPECT_FALSE(fs::exists(root_ / "step-20.tmp"));
  EXPECT_FALSE(fs::exists(root_ / "step-20"));
  EXPECT_EQ(store.NewestComplete(), 10);
}

// Abandon (what rank 0 calls when any rank's shard or the commit failed) deletes only the
// temporary directory of its step.
TEST_F(CheckpointTest, AbandonDeletesOnlyTheTemporaryOfItsStep) {
  CheckpointStore store(root_.string());
  ASSERT_TRUE(SaveStep(store, 10).ok());
  ASSERT_TRUE(store.Begin(20).ok());
  ASSERT_TRUE(store.Begin(30).ok());
  const std::vector<float> params = {1.0f};
  CheckpointFile file;
  ASSERT_TRUE(store.WriteShard(20, 0, "rank-00000.bin", {{"params", params}}, &file).ok());
  store.Abandon(20);
  EXPECT_FALSE(fs::exists(root_ / "step-20.tmp"));
  EXPECT_TRUE(fs::exists(root_ / "step-30.tmp"));
  store.Abandon(10);  // complete: not a temporary
  EXPECT_TRUE(fs::exists(root_ / "step-10" / "meta.json"));
  store.Abandon(40);  // nothing there: nothing to do
  EXPECT_EQ(store.CompleteSteps(), std::vector<int64_t>{10});
}

TEST_F(CheckpointTest, PruneKeepsTheNewestN) {
  struct Case {
    int keep;
    std::vector<int64_t> want;
  } cases[] = {{0, {40}},  // keep 0 still keeps the newest: the last checkpoint is never pruned
               {1, {40}},
               {2, {30, 40}},
               {3, {20, 30, 40}},
               {10, {10, 20, 30, 40}}};
  for (const Case& c : cases) {
    fs::remove_all(root_);
    CheckpointStore store(root_.string());
    for (int64_t step : {10, 20, 30, 40})
      ASSERT_TRUE(SaveStep(store, step).ok());
    fs::create_directories(root_ / "step-35.tmp");  // older than the newest: garbage
    fs::create_directories(root_ / "step-40.tmp");  // of the newest (Begin refuses it): garbage
    fs::create_directories(root_ / "step-50.tmp");  // maybe a writer at work: kept
    ASSERT_TRUE(store.Prune(c.keep).ok());
    EXPECT_EQ(store.CompleteSteps(), c.want) << "keep " << c.keep;
    EXPECT_FALSE(fs::exists(root_ / "step-35.tmp"));
    EXPECT_FALSE(fs::exists(root_ / "step-40.tmp"));
    EXPECT_TRUE(fs::exists(root_ / "step-50.tmp"));
  }
}

// step-10000 is a checkpoint, not a temporary of step 1.
TEST_F(CheckpointTest, PruneKeepsCheckpointsWhoseNamesEndLikeATemporary) {
  CheckpointStore store(root_.string());
  ASSERT_TRUE(SaveStep(store, 10000).ok());
  ASSERT_TRUE(SaveStep(store, 20000).ok());
  ASSERT_TRUE(store.Prune(2).ok());
  EXPECT_EQ(store.CompleteSteps(), (std::vector<int64_t>{10000, 20000}));
}

// Before the first checkpoint completes, a temporary may be a writer at work.
TEST_F(CheckpointTest, PruneWithoutACheckpointKeepsTemporaries) {
  fs::create_directories(root_ / "step-5.tmp");
  CheckpointStore store(root_.string());
  ASSERT_TRUE(store.Prune(1).ok());
  EXPECT_TRUE(fs::exists(root_ / "step-5.tmp"));
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
      {R"({"a":1,"b":2})", R"({"a":3})", "a: 1 vs 3"},  // the first of two differences
  };
  for (const Case& c : cases)
    EXPECT_EQ(FirstJsonDifference(c.a, c.b), c.want);
}

}  // namespace
}  // namespace tessera::train
