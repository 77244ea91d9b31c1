// The Gpt class and its configuration helpers; the numerics live in cpu/.
#include "worker/model/gpt.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>
#include <utility>

#include "worker/model/cpu/gpt_cpu.h"

namespace tessera::model {

bool GptPreset(const std::string& name, GptConfig* out) {
  struct Preset {
    const char* name;
    GptConfig config;
  };
  // layers, d_model, heads, seq_len, vocab
  static const Preset kPresets[] = {
      {"gpt2-124m", {12, 768, 12, 1024, 50257}},
      {"gpt2-350m", {24, 1024, 16, 1024, 50257}},
      {"gpt2-774m", {36, 1280, 20, 1024, 50257}},
      {"gpt2-1558m", {48, 1600, 25, 1024, 50257}},
  };
  for (const Preset& p : kPresets) {
    if (name == p.name) {
      *out = p.config;
      return true;
    }
  }
  return false;
}

std::string ValidateGptConfig(const GptConfig& c) {
  auto positive = [](const char* field, int v) -> std::string {
    if (v > 0)
      return "";
    return std::string("model.") + field + ": must be positive, got " + std::to_string(v);
  };
  for (const std::string& e :
       {positive("layers", c.layers), positive("dModel", c.d_model), positive("heads", c.heads),
        positive("seqLen", c.seq_len), positive("vocab", c.vocab)}) {
    if (!e.empty())
      return e;
  }
  if (c.d_model % c.heads != 0) {
    return "model.heads: " + std::to_string(c.heads) + " does not divide dModel " +
           std::to_string(c.d_model);
  }
  return "";
}

std::vector<ParameterTensor> GptParameterTensors(const GptConfig& config) {
  const int64_t C = config.d_model;
  std::vector<ParameterTensor> tensors;
  int64_t offset = 0;
  auto add = [&](std::string name, int64_t size, int layer, bool decays) {
    tensors.push_back({std::move(name), offset, size, layer, decays});
    offset += size;
  };
  add("wte", config.vocab * C, -1, true);
  add("wpe", config.seq_len * C, -1, true);
  for (int l = 0; l < config.layers; l++) {
    const std::string h = "h" + std::to_string(l) + ".";
    add(h + "ln1.weight", C, l, false);
    add(h + "ln1.bias", C, l, false);
    add(h + "attn.qkv.weight", 3 * C * C, l, true);
    add(h + "attn.qkv.bias", 3 * C, l, false);
    add(h + "attn.proj.weight", C * C, l, true);
    add(h + "attn.proj.bias", C, l, false);
    add(h + "ln2.weight", C, l, false);
    add(h + "ln2.bias", C, l, false);
    add(h + "mlp.fc.weight", 4 * C * C, l, true);
    add(h + "mlp.fc.bias", 4 * C, l, false);
    add(h + "mlp.proj.weight", 4 * C * C, l, true);
    add(h + "mlp.proj.bias", C, l, false);
  }
  add("lnf.weight", C, -1, false);
  add("lnf.bias", C, -1, false);
  return tensors;
}

int64_t GptParameterCount(const GptConfig& config) {
  const int64_t C = config.d_model;
  const int64_t per_block = 12 * C * C + 13 * C;
  return (config.vocab + config.seq_len) * C + config.layers * per_block + 2 * C;
}

std::string ValidateGptShard(const GptConfig& config, const GptShard& shard) {
  const int end = shard.end(config);
  if (shard.first_layer < 0 || end > config.layers || shard.first_layer > end) {
    return "model shard: layers [" + std::to_string(shard.first_layer) + ", " +
           std::to_string(end) + ") are not within the model's " + std::to_string(config.layers);
  }
  if (shard.tensor_size < 1 || config.heads % shard.tensor_size != 0) {
    return "parallelism.tensor: " + std::to_string(shard.tensor_size) +
           " does not divide model.heads " + std::to_string(config.heads);
  }
  if (shard.tensor_rank < 0 || shard.tensor_rank >= shard.tensor_size) {
    return "model shard: tensor rank " + std::to_string(shard.tensor_rank) + " not in [0, " +
           std::to_string(shard.tensor_size) + ")";
  }
  return "";
}

std::vector<ShardTensor> GptShardTensors(const GptConfig& config, const GptShard& shard) {
  const int64_t C = config.d_model;
  const int tp = shard.tensor_size;
  const int64_t r = shard.tensor_rank;
  const std::vector<ParameterTensor> whole = GptParameterTensors(config);
  std::vector<ShardTensor> out;
  int64_t offset = 0;
  for (size_t i = 0; i < whole.size(); i++) {
    const ParameterTensor& w = whole[i];
    if (w.layer < 0) {
      const bool held = w.name == "wte"   ? shard.embedding || shard.head
                        : w.name == "wpe" ? shard.embedding
                                          : shard.head;  // lnf
      if (!held)
        continue;
    } else if (w.layer < shard.first_layer || w.layer >= shard.end(config)) {
      continue;
    }
    ShardTensor t;
    t.whole_index = static_cast<int>(i);
    // Matrices are (out, in) row-major; vectors are one column.
    const std::string suffix = w.layer < 0 ? w.name : w.name.substr(w.name.find('.') + 1);
    const bool matrix = w.decays && w.layer >= 0;
    t.whole_cols = matrix ? (suffix == "mlp.proj.weight" ? 4 * C : C) : 1;
    if (w.name == "wte" || w.name == "wpe")
      t.whole_cols = C;
    t.whole_rows = w.size / t.whole_cols;
    t.row_ranges = {{0, t.whole_rows}};
    t.col_begin = 0;
    t.col_end = t.whole_cols;
    t.replicated = true;
    if (tp > 1) {
      const int64_t Ct = C / tp;
      if (suffix == "attn.qkv.weight" || suffix == "attn.qkv.bias") {
        // This rank's heads of q, k and v: three bands of rows.
        t.row_ranges.clear();
        for (int64_t part = 0; part < 3; part++)
          t.row_ranges.push_back({part * C + r * Ct, part * C + (r + 1) * Ct});
        t.replicated = false;
      } else if (suffix == "mlp.fc.weight" || suffix == "mlp.fc.bias") {
        t.row_ranges = {{r * 4 * Ct, (r + 1) * 4 * Ct}};
        t.replicated = false;
      } else if (suffix == "attn.proj.weight" || suffix == "mlp.proj.weight") {
        const int64_t in = t.whole_cols / tp;
        t.col_begin = r * in;
        t.col_end = (r + 1) * in;
        t.replicated = false;
      }
    }
    int64_t rows = 0;
    for (const auto& [b, e] : t.row_ranges)
      rows += e - b;
    t.local = {w.name, offset, rows * (t.col_end - t.col_begin), w.layer, w.decays};
    offset += t.local.size;
    out.push_back(std::move(t));
  }
  return out;
}

void CopyFromWhole(const ShardTensor& t, std::span<const float> whole_tensor,
                   std::span<float> out) {
  const int64_t width = t.col_end - t.col_begin;
  size_t at = 0;
  for (const auto& [begin, end] : t.row_ranges) {
    for (int64_t row = begin; row < end; row++) {
      const float* src = whole_tensor.data() + row * t.whole_cols + t.col_begin;
      std::copy_n(src, width, out.data() + at);
      at += static_cast<size_t>(width);
    }
  }
}

void SetKernelThreads(int threads) {
  if (threads < 1)
    threads = 1;
  omp_set_num_threads(threads);
  // The kernels split matrix products over their own threads (see cpu/layers.cpp); each
  // BLAS call runs on one thread.
  openblas_set_num_threads(1);
}

struct Gpt::Slot {
  cpu::GptActivations<float> acts;
  std::vector<int32_t> tokens;   // (B,T) of the last Forward (with the embedding)
  std::vector<int32_t> targets;  // (B,T), empty when the last Forward had none
  int B = 0;
  int T = 0;
  bool have_forward = false;
};

Gpt::Gpt(const GptConfig& config, const GptShard& shard, TensorSumFn tensor_sum)
    : config_(config), shard_(shard), tensor_sum_(std::move(tensor_sum)) {
  std::string error = ValidateGptConfig(config);
  if (error.empty())
    error = ValidateGptShard(config, shard);
  if (error.empty() && shard.tensor_size > 1 && !tensor_sum_)
    error = "model shard: tensor parallelism needs a tensor-parallel sum";
  if (!error.empty())
    throw std::invalid_argument(error);
  openblas_set_num_threads(1);  // see SetKernelThreads
  tensors_ = GptShardTensors(config, shard);
  const int64_t n =
      tensors_.empty() ? 0 : tensors_.back().local.offset + tensors_.back().local.size;
  params_.assign(n, 0.0f);
  grads_.assign(params_.size(), 0.0f);
}

Gpt::~Gpt() = default;

Gpt::Slot& Gpt::SlotAt(int slot) {
  if (slot < 0)
    throw std::invalid_argument("Gpt: negative activation slot");
  while (static_cast<int>(slots_.size()) <= slot)
    slots_.push_back(std::make_unique<Slot>());
  return *slots_[slot];
}

const Gpt::Slot& Gpt::SlotAt(int slot) const {
  if (slot < 0 || slot >= static_cast<int>(slots_.size()))
    throw std::logic_error("Gpt: activation slot " + std::to_string(slot) + " was never used");
  return *slots_[slot];
}

int64_t Gpt::activation_bytes() const {
  int64_t bytes = 0;
  for (const auto& s : slots_)
    bytes += s->acts.bytes();
  return bytes;
}

namespace {

// SplitMix64: a small, well-mixed generator; one stream per tensor, so a tensor's initial
// values do not depend on which other tensors a process holds.
struct SplitMix64 {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1].
  double Uniform() { return (static_cast<double>(Next() >> 11) + 1.0) * 0x1.0p-53; }
};

// Fills out with normal(0, stddev) by Box-Muller.
void FillNormal(std::span<float> out, double stddev, SplitMix64& rng) {
  constexpr double kTwoPi = 6.283185307179586;
  for (size_t i = 0; i < out.size(); i += 2) {
    const double r = std::sqrt(-2.0 * std::log(rng.Uniform()));
    const double theta = kTwoPi * rng.Uniform();
    out[i] = static_cast<float>(stddev * r * std::cos(theta));
    if (i + 1 < out.size())
      out[i + 1] = static_cast<float>(stddev * r * std::sin(theta));
  }
}

bool EndsWith(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

void Gpt::InitParameters(uint64_t seed) {
  const double kStd = 0.02;
  const double residual_std = kStd / std::sqrt(2.0 * config_.layers);
  const std::vector<ParameterTensor> whole = GptParameterTensors(config_);
  std::vector<float> values;
  for (const ShardTensor& st : tensors_) {
    // The whole tensor from its own stream, then this shard's part of it.
    const size_t i = static_cast<size_t>(st.whole_index);
    const ParameterTensor& t = whole[i];
    values.resize(static_cast<size_t>(t.size));
    SplitMix64 rng{seed * 0x100000001B3ull + i};
    rng.Next();
    if (EndsWith(t.name, "proj.weight")) {
      FillNormal(values, residual_std, rng);  // projections into the residual stream
    } else if (t.decays) {
      FillNormal(values, kStd, rng);
    } else if (EndsWith(t.name, "ln1.weight") || EndsWith(t.name, "ln2.weight") ||
               t.name == "lnf.weight") {
      std::fill(values.begin(), values.end(), 1.0f);
    } else {
      std::fill(values.begin(), values.end(), 0.0f);
    }
    CopyFromWhole(st, values, std::span<float>(params_).subspan(st.local.offset, st.local.size));
  }
}

std::span<float> Gpt::parameters() {
  return params_;
}
std::span<const float> Gpt::parameters() const {
  return params_;
}
std::span<float> Gpt::gradients() {
  return grads_;
}

void Gpt::ZeroGradients() {
  std::fill(grads_.begin(), grads_.end(), 0.0f);
}

float Gpt::Forward(std::span<const int32_t> tokens, std::span<const int32_t> targets, int B, int T,
                   int slot, std::span<const float> input) {
  if (B < 1 || T < 1 || T > config_.seq_len) {
    throw std::invalid_argument("Gpt::Forward: need B >= 1 and 1 <= T <= seqLen " +
                                std::to_string(config_.seq_len) + ", got B=" + std::to_string(B) +
                                " T=" + std::to_string(T));
  }
  const size_t n = static_cast<size_t>(B) * T;
  if ((shard_.embedding && tokens.size() != n) ||
      (shard_.head && !targets.empty() && targets.size() != n)) {
    throw std::invalid_argument("Gpt::Forward: tokens and targets must hold B*T ids");
  }
  if (!shard_.embedding && input.size() != n * config_.d_model) {
    throw std::invalid_argument(
        "Gpt::Forward: a shard without the embedding needs B*T*dModel "
        "input values");
  }
  auto check_ids = [&](std::span<const int32_t> ids, const char* what) {
    for (int32_t id : ids) {
      if (id < 0 || id >= config_.vocab) {
        throw std::out_of_range(std::string("Gpt::Forward: ") + what + " id " + std::to_string(id) +
                                " outside [0, vocab " + std::to_string(config_.vocab) + ")");
      }
    }
  };
  if (shard_.embedding)
    check_ids(tokens, "token");
  if (shard_.head)
    check_ids(targets, "target");
  Slot& s = SlotAt(slot);
  s.tokens.assign(tokens.begin(), tokens.end());
  if (shard_.head)
    s.targets.assign(targets.begin(), targets.end());
  s.B = B;
  s.T = T;
  s.have_forward = true;
  const cpu::GptParams<float> p = cpu::BindParams(config_, params_.data(), shard_);
  const cpu::TensorSum sum = tensor_sum_;
  const double loss = cpu::GptForward(config_, p, s.acts, s.tokens.data(),
                                      s.targets.empty() ? nullptr : s.targets.data(), B, T, shard_,
                                      input.empty() ? nullptr : input.data(), &sum);
  return static_cast<float>(loss);
}

namespace {

// Where each block's tensors start in the buffer (tensors come in buffer order, so a block's
// first tensor is its start).
std::map<int, int64_t> BlockStarts(const std::vector<ShardTensor>& tensors) {
  std::map<int, int64_t> starts;
  for (const ShardTensor& t : tensors) {
    if (t.local.layer >= 0)
      starts.emplace(t.local.layer, t.local.offset);
  }
  return starts;
}

}  // namespace

std::vector<int64_t> GradientReadyOffsets(const std::vector<ShardTensor>& tensors) {
  const std::map<int, int64_t> starts = BlockStarts(tensors);
  std::vector<int64_t> offsets;
  for (auto it = starts.rbegin(); it != starts.rend(); ++it)
    offsets.push_back(it->second);
  offsets.push_back(0);
  return offsets;
}

void Gpt::Backward(float loss_scale, const GradientsReadyFn& on_ready, int slot,
                   std::span<const float> dout) {
  Slot& s = SlotAt(slot);
  if (!s.have_forward || (shard_.head && s.targets.empty())) {
    throw std::logic_error("Gpt::Backward: needs a Forward with targets first");
  }
  if (!shard_.head && dout.size() != static_cast<size_t>(s.B) * s.T * config_.d_model) {
    throw std::invalid_argument(
        "Gpt::Backward: a shard without the head needs B*T*dModel "
        "output gradients");
  }
  const cpu::GptParams<float> p = cpu::BindParams(config_, params_.data(), shard_);
  const cpu::GptParams<float> g = cpu::BindParams(config_, grads_.data(), shard_);
  std::function<void(int)> block_done;
  if (on_ready) {
    // Everything from block l's start on (later blocks, the final layer norm) is final when
    // block l is; the embeddings (layer -1) complete the buffer (GradientReadyOffsets).
    block_done = [&on_ready, starts = BlockStarts(tensors_)](int layer) {
      on_ready(layer < 0 ? 0 : starts.at(layer));
    };
  }
  const cpu::TensorSum sum = tensor_sum_;
  cpu::GptBackward(config_, p, g, s.acts, s.tokens.data(), s.targets.data(), s.B, s.T, loss_scale,
                   block_done ? &block_done : nullptr, shard_, dout.empty() ? nullptr : dout.data(),
                   &sum);
  s.have_forward = false;  // the logits now hold their gradient
}

std::span<const float> Gpt::output(int slot) const {
  const Slot& s = SlotAt(slot);
  return std::span<const float>(s.acts.output(), static_cast<size_t>(s.B) * s.T * config_.d_model);
}

std::span<const float> Gpt::input_gradient(int slot) const {
  const Slot& s = SlotAt(slot);
  return std::span<const float>(s.acts.dresidual.data(),
                                static_cast<size_t>(s.B) * s.T * config_.d_model);
}

std::span<const float> Gpt::logits(int slot) const {
  const Slot& s = SlotAt(slot);
  return std::span<const float>(s.acts.logits.data(),
                                static_cast<size_t>(s.B) * s.T * config_.vocab);
}

}  // namespace tessera::model
