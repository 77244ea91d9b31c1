// Training data: a tokenized corpus split into train (head) and validation (tail), and a
// loader whose sample order is a pure function of (seed, step, sample index), so any rank of
// any data-parallel layout can compute its own slice of a step's global batch. It does not
// prefetch or shuffle across files; one text file is the whole corpus.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "worker/train/status.h"

namespace tessera::train {

// A corpus as 16-bit token ids (every vocabulary the trainer reads fits: the byte tokenizer's
// 256, a uint16 file's < 65536), split into train (head) and validation (tail). A uint16 file
// is mapped read-only rather than copied, so it costs no memory of the rank's own: the ranks on
// one machine share its pages through the page cache, and a corpus larger than memory is
// paged in as it is read. A text file (byte tokenizer) is held as ids, 2 bytes a byte.
// Immutable after Load; copies share the tokens; thread-safe to read.
class TokenDataset {
 public:
  // Reads `path` with `tokenizer` ("byte": a text file, one token per byte; "uint16": a file
  // of little-endian 16-bit token ids, each < vocab) and keeps the last `validation_fraction`
  // of the tokens for validation. Each split must hold at least 2*seq_len+1 tokens (train)
  // and seq_len+1 (validation). A missing or unreadable file is kBadConfig naming the path; a
  // too small or malformed one is kBadConfig naming the path and what is wrong.
  static Status Load(const std::string& path, const std::string& tokenizer, int vocab,
                     double validation_fraction, int seq_len, TokenDataset* out);

  // The same from ids already in memory (tests); `source` names it in messages.
  static Status FromTokens(std::vector<uint16_t> tokens, const std::string& source,
                           double validation_fraction, int seq_len, TokenDataset* out);

  std::span<const uint16_t> train() const { return tokens_.first(train_size_); }
  std::span<const uint16_t> validation() const { return tokens_.subspan(train_size_); }
  // True when the tokens are the file's pages (a uint16 file), not a copy.
  bool mapped() const { return mapped_; }

 private:
  static Status Split(std::shared_ptr<const void> storage, std::span<const uint16_t> tokens,
                      bool mapped, const std::string& source, double validation_fraction,
                      int seq_len, TokenDataset* out);

  std::shared_ptr<const void> storage_;  // owns what tokens_ views: a vector, or a mapping
  std::span<const uint16_t> tokens_;
  size_t train_size_ = 0;
  bool mapped_ = false;
};

// B sequences of T tokens and their next-token targets, row-major (B, T).
struct Batch {
  int B = 0;
  int T = 0;
  std::vector<int32_t> tokens;
  std::vector<int32_t> targets;
};

// Where the training data stream stands; saved in checkpoints so a resumed run continues
// with exactly the samples the uninterrupted run would have seen.
struct DataCursor {
  int64_t step = 0;              // next optimizer step
  int64_t samples_consumed = 0;  // global training samples drawn before `step`
  int64_t epoch = 0;             // epoch of the next sample
  int64_t train_tokens = 0;      // size of the train split the order was computed for
};

// Draws training windows of seq_len+1 tokens. Global sample g = step*global_batch + index
// belongs to epoch g / W (W windows per epoch); within an epoch, windows are a keyed
// pseudo-random permutation of the W non-overlapping windows of the train split, shifted by
// a per-epoch offset in [0, seq_len), so every epoch sees every window exactly once and the
// alignment differs between epochs. Const methods are thread-safe.
class DataLoader {
 public:
  // `dataset` must outlive the loader.
  DataLoader(const TokenDataset* dataset, int seq_len, int global_batch, uint64_t seed);

  int64_t windows_per_epoch() const { return windows_; }

  // Start offset, in the train split, of sample `index` (0 <= index < global_batch) of
  // optimizer step `step`. Depends only on the seed, the step and the index.
  int64_t TrainWindowStart(int64_t step, int index) const;

  // Fills *out with samples [first, first+count) of step `step`. Rank r of N with M micro-
  // batches takes first = r*G/N + m*G/(N*M), count = G/(N*M).
  void TrainBatch(int64_t step, int first, int count, Batch* out) const;

  // Non-overlapping validation windows, always the same ones in the same order.
  int64_t validation_windows() const { return val_windows_; }
  void ValidationBatch(int64_t first, int count, Batch* out) const;

  // The cursor before optimizer step `step`.
  DataCursor CursorAt(int64_t step) const;

 private:
  int64_t PermuteWindow(int64_t epoch, int64_t position) const;

  const TokenDataset* dataset_;
  int seq_len_;
  int global_batch_;
  uint64_t seed_;
  int64_t windows_;
  int64_t val_windows_;
  int half_bits_;  // the Feistel network permutes [0, 2^(2*half_bits))
};

}  // namespace tessera::train
