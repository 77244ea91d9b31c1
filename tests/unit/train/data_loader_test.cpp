#include "worker/train/data_loader.h"

#include <gtest/gtest.h>

#include <fstream>
#include <numeric>
#include <set>

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
  EXPECT_NE(too_big.message().find("token 350"), std::string::npos) << too_big.message();
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
}

}  // namespace
}  // namespace tessera::train
