#include "worker/train/data_loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <future>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace tessera::train {
namespace {

// A corpus whose token at position i is i % 1000, so a window's content reveals its start.
TokenDataset Corpus(int64_t n, double validation_fraction, int seq_len) {
  std::vector<uint16_t> tokens(n);
  for (int64_t i = 0; i < n; ++i)
    tokens[i] = static_cast<uint16_t>(i % 1000);
  TokenDataset ds;
  EXPECT_TRUE(TokenDataset::FromTokens(tokens, "corpus", validation_fraction, seq_len, &ds).ok());
  return ds;
}

TEST(TokenDataset, MissingFileIsBadConfigNamingThePath) {
  TokenDataset ds;
  const Status st = TokenDataset::Load("no/such/corpus.txt", "byte", 256, 0.1, 8, &ds);
  EXPECT_EQ(st.code(), ExitCode::kBadConfig);
  EXPECT_EQ(st.exit_code(), 2);
  EXPECT_NE(st.message().find("no/such/corpus.txt"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos);
}

TEST(TokenDataset, TooSmallCorpusIsBadConfig) {
  TokenDataset ds;
  const Status st = TokenDataset::FromTokens(std::vector<uint16_t>(40, 1), "tiny", 0.1, 16, &ds);
  EXPECT_EQ(st.code(), ExitCode::kBadConfig);
  EXPECT_NE(st.message().find("tiny"), std::string::npos);
}

TEST(TokenDataset, UnreadablePathIsBadConfigNamingIt) {
  const std::string dir = ::testing::TempDir();  // exists, but is not a file
  // A FIFO nobody writes to: opening it for reading the usual way would wait forever.
  const std::string fifo = dir + "tokens-fifo-" + std::to_string(::getpid());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << fifo;
  struct Case {
    std::string path;
    const char* tokenizer;
    bool exists;
  } cases[] = {{"no/such/tokens.u16", "uint16", false},
               {dir, "byte", true},
               {dir, "uint16", true},
               {fifo, "byte", true},
               {fifo, "uint16", true}};
  for (const Case& c : cases) {
    auto load = std::async(std::launch::async, [&] {
      TokenDataset ds;
      return TokenDataset::Load(c.path, c.tokenizer, 1000, 0.1, 8, &ds);
    });
    if (load.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      ADD_FAILURE() << c.path << ": Load still waiting after 10 s";
      // Give the blocked open a writer so that it returns and the test can end.
      ::close(::open(c.path.c_str(), O_WRONLY | O_NONBLOCK));
    }
    const Status st = load.get();
    EXPECT_EQ(st.code(), ExitCode::kBadConfig) << c.path << " " << c.tokenizer;
    EXPECT_NE(st.message().find("data.path: cannot read the dataset '" + c.path + "'"),
              std::string::npos)
        << c.tokenizer << ": " << st.message();
    EXPECT_EQ(st.message().find("not a regular file") != std::string::npos, c.exists)
        << st.message();
  }
  ::unlink(fifo.c_str());
}

// A file that ends before the size stat gave (one truncated while it is read; a sysfs file
// always does) is refused naming it, not waited on for the bytes that never come.
TEST(TokenDataset, AFileEndingBeforeItsSizeIsRefused) {
  const std::string path = "/sys/devices/system/cpu/online";  // 4096 bytes by stat, a few read
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 4096)
    GTEST_SKIP() << path << " is not here, or not a file longer by stat than by read";
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> load = done->get_future();
  std::thread([done, path] {
    TokenDataset ds;
    done->set_value(TokenDataset::Load(path, "byte", 256, 0.1, 8, &ds));
  }).detach();  // a Load that never returns must not hold the test
  ASSERT_EQ(load.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << path << ": Load still reading after 10 s";
  const Status got = load.get();
  EXPECT_EQ(got.code(), ExitCode::kBadConfig);
  EXPECT_EQ(got.message(), "data.path: error reading the dataset '" + path + "'");
}

// Validation is the last `fraction` of the tokens, rounded down; each split must hold at least
// 2*seqLen+1 (train) and seqLen+1 (validation) tokens.
TEST(TokenDataset, SplitSizesAndTheSmallestCorpus) {
  struct Case {
    int64_t total;
    double fraction;
    int seq_len;
    bool ok;
    size_t train;
    size_t validation;
  } cases[] = {
      {18, 0.5, 4, true, 9, 9},    // train exactly 2*4+1
      {16, 0.5, 4, false, 0, 0},   // train 8, one short
      {20, 0.25, 4, true, 15, 5},  // validation exactly 4+1
      {20, 0.25, 5, false, 0, 0},  // validation 5, one short of 5+1
      {21, 0.25, 4, true, 16, 5},  // 5.25 validation tokens: 5
  };
  for (const Case& c : cases) {
    std::vector<uint16_t> tokens(c.total);
    std::iota(tokens.begin(), tokens.end(), uint16_t{0});
    TokenDataset ds;
    const Status st = TokenDataset::FromTokens(tokens, "corpus", c.fraction, c.seq_len, &ds);
    EXPECT_EQ(st.ok(), c.ok) << c.total << " tokens, seqLen " << c.seq_len << ": " << st.message();
    if (!c.ok) {
      EXPECT_EQ(st.code(), ExitCode::kBadConfig);
      EXPECT_NE(st.message().find("corpus"), std::string::npos) << st.message();
      continue;
    }
    EXPECT_EQ(ds.train().size(), c.train) << c.total << " tokens";
    EXPECT_EQ(ds.validation().size(), c.validation) << c.total << " tokens";
    EXPECT_EQ(ds.validation().front(), c.train) << c.total << " tokens";
  }
}

// A text file is one id per byte, the byte's unsigned value, held as a copy.
TEST(TokenDataset, ByteFileIdsAreTheUnsignedBytes) {
  const std::string path = ::testing::TempDir() + "/corpus.txt";
  std::string text;
  for (int i = 0; i < 40; ++i)
    text.push_back(static_cast<char>(i % 2 == 0 ? 'a' + i / 2 : 0xff - i));  // ASCII and >= 0x80
  std::ofstream(path, std::ios::binary) << text;
  TokenDataset ds;
  const Status st = TokenDataset::Load(path, "byte", 256, 0.25, 4, &ds);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_FALSE(ds.mapped());
  ASSERT_EQ(ds.train().size(), 30u);
  ASSERT_EQ(ds.validation().size(), 10u);
  for (size_t i = 0; i < text.size(); ++i) {
    const uint16_t id = i < 30 ? ds.train()[i] : ds.validation()[i - 30];
    EXPECT_EQ(id, static_cast<unsigned char>(text[i])) << "byte " << i;
  }
}

TEST(TokenDataset, ReadsLittleEndianUint16Ids) {
  const std::string path = ::testing::TempDir() + "/tokens.u16";
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 100; ++i) {
      const int id = 300 + i;
      out.put(static_cast<char>(id & 0xff)).put(static_cast<char>(id >> 8));
    }
  }
  TokenDataset ds;
  ASSERT_TRUE(TokenDataset::Load(path, "uint16", 1000, 0.2, 8, &ds).ok());
  EXPECT_TRUE(ds.mapped());  // the file's pages, not a copy
  EXPECT_EQ(ds.train().size(), 80u);
  EXPECT_EQ(ds.train()[0], 300);
  EXPECT_EQ(ds.validation().back(), 399);
  // An id at or above the vocabulary, and an odd number of bytes, are refused.
  const Status too_big = TokenDataset::Load(path, "uint16", 350, 0.2, 8, &ds);
  EXPECT_EQ(too_big.exit_code(), 2);
  EXPECT_NE(too_big.message().find("token 350 at offset 100"), std::string::npos)
      << too_big.message();
  std::ofstream(path, std::ios::binary | std::ios::app).put('x');
  const Status odd = TokenDataset::Load(path, "uint16", 1000, 0.2, 8, &ds);
  EXPECT_EQ(odd.exit_code(), 2);
  EXPECT_NE(odd.message().find("uint16"), std::string::npos) << odd.message();
}

TEST(TokenDataset, ValidationIsTheTailOfTheCorpus) {
  const TokenDataset ds = Corpus(1000, 0.25, 8);
  ASSERT_EQ(ds.train().size(), 750u);
  ASSERT_EQ(ds.validation().size(), 250u);
  EXPECT_EQ(ds.train().front(), 0);
  EXPECT_EQ(ds.validation().front(), 750);
  EXPECT_EQ(ds.validation().back(), 999);
}

TEST(DataLoader, TargetsAreTokensShiftedByOne) {
  const TokenDataset ds = Corpus(5000, 0.1, 16);
  DataLoader loader(&ds, 16, 8, 1);
  Batch b;
  loader.TrainBatch(3, 0, 8, &b);
  ASSERT_EQ(b.tokens.size(), 8u * 16);
  for (int i = 0; i < 8; ++i) {
    const int64_t start = loader.TrainWindowStart(3, i);
    for (int t = 0; t < 16; ++t) {
      EXPECT_EQ(b.tokens[i * 16 + t], ds.train()[start + t]);
      EXPECT_EQ(b.targets[i * 16 + t], ds.train()[start + t + 1]);
    }
  }
}

// The global batch of a step is the same however it is split over ranks and micro-batches,
// and a loader built independently (another process) computes the same slices.
TEST(DataLoader, StepBatchIsIndependentOfRanksAndMicroBatches) {
  const TokenDataset ds = Corpus(20000, 0.1, 16);
  const int G = 16;
  DataLoader reference(&ds, 16, G, 42);
  for (int64_t step : {0, 1, 7, 100}) {
    Batch whole;
    reference.TrainBatch(step, 0, G, &whole);
    for (int ranks : {1, 2, 4, 8}) {
      for (int micro : {1, 2}) {
        std::vector<int32_t> assembled;
        for (int r = 0; r < ranks; ++r) {
          DataLoader rank_loader(&ds, 16, G, 42);  // as another rank process would
          const int per_micro = G / (ranks * micro);
          for (int m = 0; m < micro; ++m) {
            Batch part;
            rank_loader.TrainBatch(step, r * (G / ranks) + m * per_micro, per_micro, &part);
            assembled.insert(assembled.end(), part.tokens.begin(), part.tokens.end());
          }
        }
        EXPECT_EQ(assembled, whole.tokens)
            << "step " << step << " ranks " << ranks << " micro " << micro;
      }
    }
  }
}

TEST(DataLoader, EachEpochVisitsEveryWindowOnce) {
  const TokenDataset ds = Corpus(3000, 0.1, 10);  // 2700 train tokens -> 269 windows
  const int G = 4;
  DataLoader loader(&ds, 10, G, 7);
  const int64_t W = loader.windows_per_epoch();
  ASSERT_EQ(W, (2700 - 10) / 10);
  // Collect the window index of the first W global samples (epoch 0).
  std::set<int64_t> starts;
  for (int64_t g = 0; g < W; ++g) {
    starts.insert(loader.TrainWindowStart(g / G, static_cast<int>(g % G)));
  }
  ASSERT_EQ(static_cast<int64_t>(starts.size()), W);
  const int64_t shift = *starts.begin() % 10;
  for (int64_t s : starts) {
    EXPECT_EQ(s % 10, shift);  // one alignment per epoch
    EXPECT_LE(s + 10, 2699);   // the target of the last token is inside the split
  }
}

// Every epoch, not only the first, visits every window once at one alignment below seqLen
// (so the last target stays inside the split), and epochs differ in alignment and order.
TEST(DataLoader, EveryEpochVisitsEveryWindowOnceWithItsOwnAlignmentAndOrder) {
  const int T = 8;
  const TokenDataset ds = Corpus(250, 0.2, T);  // 200 train tokens -> 24 windows
  const int G = 5;                              // steps straddle epochs
  DataLoader loader(&ds, T, G, 11);
  const int64_t W = loader.windows_per_epoch();
  ASSERT_EQ(W, (200 - T) / T);
  std::vector<int64_t> every_window(W);
  std::iota(every_window.begin(), every_window.end(), 0);
  const int kEpochs = 40;
  std::set<int64_t> shifts;
  std::set<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < kEpochs; ++epoch) {
    const int64_t first = epoch * W;
    const int64_t shift = loader.TrainWindowStart(first / G, static_cast<int>(first % G)) % T;
    std::vector<int64_t> order;
    for (int64_t g = first; g < first + W; ++g) {
      const int64_t start = loader.TrainWindowStart(g / G, static_cast<int>(g % G));
      EXPECT_EQ(start % T, shift) << "epoch " << epoch << " sample " << g;
      EXPECT_LE(start + T + 1, 200) << "epoch " << epoch << " sample " << g;
      order.push_back(start / T);
    }
    orders.insert(order);
    std::sort(order.begin(), order.end());
    EXPECT_EQ(order, every_window) << "epoch " << epoch;
    shifts.insert(shift);
  }
  EXPECT_GT(shifts.size(), 1u);
  EXPECT_EQ(orders.size(), static_cast<size_t>(kEpochs));
}

// The order is a fixed function of (seed, step, index), the same in every build: a checkpoint
// records only where the run stands, so a run resumed by a newer worker must draw the windows
// the interrupted run would have drawn. These starts are what the loader computed when this
// test was written (commit 1f9c003); a change to them changes every resumed run's data.
TEST(DataLoader, TheOrderIsTheSameInEveryBuild) {
  const TokenDataset ds = Corpus(20000, 0.1, 16);  // 18000 train tokens: 1124 windows
  const DataLoader loader(&ds, 16, 8, 1234);
  ASSERT_EQ(loader.windows_per_epoch(), 1124);
  struct Case {
    int64_t step;
    int index;
    int64_t start;
  } cases[] = {
      // Samples 3 and 4 of step 140 are the last of epoch 0 and the first of epoch 1.
      {0, 0, 12429},  {0, 1, 12957},   {0, 7, 17645},     {140, 3, 1837},
      {140, 4, 3070}, {1000, 5, 6123}, {123456, 2, 1075},
  };
  for (const Case& c : cases)
    EXPECT_EQ(loader.TrainWindowStart(c.step, c.index), c.start) << c.step << " " << c.index;
}

TEST(DataLoader, OrderDependsOnTheSeed) {
  const TokenDataset ds = Corpus(20000, 0.1, 16);
  DataLoader a(&ds, 16, 8, 1), b(&ds, 16, 8, 2), a2(&ds, 16, 8, 1);
  int same = 0;
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(a.TrainWindowStart(5, i), a2.TrainWindowStart(5, i));
    same += a.TrainWindowStart(5, i) == b.TrainWindowStart(5, i);
  }
  EXPECT_LT(same, 8);
}

TEST(DataLoader, ValidationWindowsAreFixedAndInsideTheSplit) {
  const TokenDataset ds = Corpus(2000, 0.2, 16);  // validation 400 tokens -> 24 windows
  DataLoader loader(&ds, 16, 4, 3);
  ASSERT_EQ(loader.validation_windows(), (400 - 1) / 16);
  Batch b;
  loader.ValidationBatch(2, 3, &b);
  EXPECT_EQ(b.tokens.front(), (1600 + 32) % 1000);
  EXPECT_EQ(b.targets.back(), (1600 + 5 * 16) % 1000);
}

TEST(DataLoader, CursorCountsSamplesAndEpochs) {
  const TokenDataset ds = Corpus(3000, 0.1, 10);
  DataLoader loader(&ds, 10, 4, 7);
  const DataCursor c = loader.CursorAt(100);
  EXPECT_EQ(c.step, 100);
  EXPECT_EQ(c.samples_consumed, 400);
  EXPECT_EQ(c.epoch, 400 / loader.windows_per_epoch());
  EXPECT_EQ(c.train_tokens, 2700);
  // Step 269 starts at sample 1076 = 4 * 269, the first of epoch 4; step 268 is in epoch 3.
  ASSERT_EQ(loader.windows_per_epoch(), 269);
  EXPECT_EQ(loader.CursorAt(269).epoch, 4);
  EXPECT_EQ(loader.CursorAt(268).epoch, 3);
  EXPECT_EQ(loader.CursorAt(0).epoch, 0);
}

}  // namespace
}  // namespace tessera::train
