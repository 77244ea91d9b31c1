#include "worker/train/data_loader.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cassert>

namespace tessera::train {
namespace {

// SplitMix64 finalizer: a bijective 64-bit mixer, good enough to key the permutation.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t Key(uint64_t seed, int64_t epoch, uint64_t salt) {
  return Mix(Mix(seed ^ 0x7465737365726121ULL) ^ Mix(static_cast<uint64_t>(epoch) + salt));
}

}  // namespace

Status TokenDataset::Split(std::shared_ptr<const void> storage, std::span<const uint16_t> tokens,
                           bool mapped, const std::string& source, double validation_fraction,
                           int seq_len, TokenDataset* out) {
  const auto total = static_cast<int64_t>(tokens.size());
  const auto val = static_cast<int64_t>(static_cast<double>(total) * validation_fraction);
  const int64_t train = total - val;
  if (train < 2 * static_cast<int64_t>(seq_len) + 1 || val < seq_len + 1) {
    return BadConfig(fmt::format(
        "{}: {} tokens are too few for seqLen {} with validationFraction {} (train {} needs >= "
        "{}, validation {} needs >= {}); use a larger corpus or a smaller model.seqLen",
        source, total, seq_len, validation_fraction, train, 2 * seq_len + 1, val, seq_len + 1));
  }
  out->storage_ = std::move(storage);
  out->tokens_ = tokens;
  out->train_size_ = static_cast<size_t>(train);
  out->mapped_ = mapped;
  return Status::Ok();
}

Status TokenDataset::FromTokens(std::vector<uint16_t> tokens, const std::string& source,
                                double validation_fraction, int seq_len, TokenDataset* out) {
  auto owned = std::make_shared<const std::vector<uint16_t>>(std::move(tokens));
  const std::span<const uint16_t> view(*owned);
  return Split(std::move(owned), view, false, source, validation_fraction, seq_len, out);
}

Status TokenDataset::Load(const std::string& path, const std::string& tokenizer, int vocab,
                          double validation_fraction, int seq_len, TokenDataset* out) {
  // O_NONBLOCK: opening a FIFO nobody writes to would otherwise wait forever; it is refused below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    if (fd >= 0)
      ::close(fd);
    return BadConfig(fmt::format("data.path: cannot read the dataset '{}'; check the path", path));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return BadConfig(fmt::format(
        "data.path: cannot read the dataset '{}': not a regular file (a directory, a FIFO or a "
        "device); point it at the dataset file",
        path));
  }
  const auto bytes = static_cast<size_t>(st.st_size);
  if (tokenizer == "byte") {
    // One id per byte, its unsigned value (ByteTokenizer), read in chunks.
    std::vector<uint16_t> ids(bytes);
    std::vector<unsigned char> chunk(1 << 20);
    size_t done = 0;
    while (done < bytes) {
      const ssize_t n = ::read(fd, chunk.data(), std::min(chunk.size(), bytes - done));
      if (n <= 0) {
        ::close(fd);
        return BadConfig(fmt::format("data.path: error reading the dataset '{}'", path));
      }
      std::copy_n(chunk.begin(), n, ids.begin() + static_cast<std::ptrdiff_t>(done));
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    return FromTokens(std::move(ids), path, validation_fraction, seq_len, out);
  }
  assert(tokenizer == "uint16");
  if (bytes % 2 != 0) {
    ::close(fd);
    return BadConfig(fmt::format(
        "{}: {} bytes is not a whole number of uint16 token ids; is data.tokenizer right?", path,
        bytes));
  }
  // The file's pages, read-only and shared; a zero-length file maps nothing (too few tokens).
  void* base = bytes == 0 ? nullptr : ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED)
    return BadConfig(fmt::format("data.path: cannot map the dataset '{}'", path));
  std::shared_ptr<const void> mapping(base, [bytes](const void* p) {
    if (p != nullptr)
      ::munmap(const_cast<void*>(p), bytes);
  });
  std::span<const uint16_t> ids(static_cast<const uint16_t*>(base), bytes / 2);
  if constexpr (std::endian::native != std::endian::little) {
    // The file is little-endian: a big-endian machine keeps a swapped copy.
    std::vector<uint16_t> swapped(ids.begin(), ids.end());
    for (uint16_t& id : swapped)
      id = static_cast<uint16_t>((id >> 8) | (id << 8));
    auto owned = std::make_shared<const std::vector<uint16_t>>(std::move(swapped));
    ids = std::span<const uint16_t>(*owned);
    mapping = std::move(owned);
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= vocab) {
      return BadConfig(fmt::format("{}: token {} at offset {} is not below model.vocab {}", path,
                                   ids[i], 2 * i, vocab));
    }
  }
  return Split(std::move(mapping), ids, std::endian::native == std::endian::little, path,
               validation_fraction, seq_len, out);
}

DataLoader::DataLoader(const TokenDataset* dataset, int seq_len, int global_batch, uint64_t seed)
    : dataset_(dataset), seq_len_(seq_len), global_batch_(global_batch), seed_(seed) {
  const auto n = static_cast<int64_t>(dataset_->train().size());
  // Window k with shift s covers [s + k*T, s + k*T + T]; s <= T-1 must keep it inside.
  windows_ = (n - seq_len_) / seq_len_;
  assert(windows_ >= 1);
  val_windows_ = (static_cast<int64_t>(dataset_->validation().size()) - 1) / seq_len_;
  assert(val_windows_ >= 1);
  int bits = 0;
  while ((int64_t{1} << bits) < windows_)
    ++bits;
  half_bits_ = (bits + 1) / 2;
}

int64_t DataLoader::PermuteWindow(int64_t epoch, int64_t position) const {
  if (windows_ == 1)
    return 0;
  // A balanced 4-round Feistel network over 2*half_bits bits is a bijection of
  // [0, 2^(2*half_bits)); cycle-walking restricts it to a bijection of [0, windows_).
  // The domain is < 4*windows_, so the expected number of walks is below 4.
  const uint64_t mask = (uint64_t{1} << half_bits_) - 1;
  uint64_t x = static_cast<uint64_t>(position);
  do {
    uint64_t left = x >> half_bits_;
    uint64_t right = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = Mix(Key(seed_, epoch, round) ^ right) & mask;
      const uint64_t next_right = left ^ f;
      left = right;
      right = next_right;
    }
    x = (left << half_bits_) | right;
  } while (x >= static_cast<uint64_t>(windows_));
  return static_cast<int64_t>(x);
}

int64_t DataLoader::TrainWindowStart(int64_t step, int index) const {
  assert(index >= 0 && index < global_batch_);
  const int64_t g = step * global_batch_ + index;
  const int64_t epoch = g / windows_;
  const int64_t shift =
      static_cast<int64_t>(Key(seed_, epoch, 0x5348494654ULL) % static_cast<uint64_t>(seq_len_));
  return shift + PermuteWindow(epoch, g % windows_) * seq_len_;
}

void DataLoader::TrainBatch(int64_t step, int first, int count, Batch* out) const {
  const int T = seq_len_;
  out->B = count;
  out->T = T;
  out->tokens.resize(static_cast<size_t>(count) * T);
  out->targets.resize(static_cast<size_t>(count) * T);
  const auto train = dataset_->train();
  for (int b = 0; b < count; ++b) {
    const int64_t start = TrainWindowStart(step, first + b);
    for (int t = 0; t < T; ++t) {
      out->tokens[static_cast<size_t>(b) * T + t] = train[start + t];
      out->targets[static_cast<size_t>(b) * T + t] = train[start + t + 1];
    }
  }
}

void DataLoader::ValidationBatch(int64_t first, int count, Batch* out) const {
  assert(first >= 0 && first + count <= val_windows_);
  const int T = seq_len_;
  out->B = count;
  out->T = T;
  out->tokens.resize(static_cast<size_t>(count) * T);
  out->targets.resize(static_cast<size_t>(count) * T);
  const auto val = dataset_->validation();
  for (int b = 0; b < count; ++b) {
    const int64_t start = (first + b) * T;
    for (int t = 0; t < T; ++t) {
      out->tokens[static_cast<size_t>(b) * T + t] = val[start + t];
      out->targets[static_cast<size_t>(b) * T + t] = val[start + t + 1];
    }
  }
}

DataCursor DataLoader::CursorAt(int64_t step) const {
  DataCursor c;
  c.step = step;
  c.samples_consumed = step * global_batch_;
  c.epoch = c.samples_consumed / windows_;
  c.train_tokens = static_cast<int64_t>(dataset_->train().size());
  return c;
}

}  // namespace tessera::train
