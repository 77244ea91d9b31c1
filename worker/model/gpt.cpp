// The Gpt class and its configuration helpers; the numerics live in cpu/.
#include "worker/model/gpt.h"

#include <cblas.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <stdexcept>

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

void SetKernelThreads(int threads) {
  if (threads < 1)
    threads = 1;
  omp_set_num_threads(threads);
  // The kernels split matrix products over their own threads (see cpu/layers.cpp); each
  // BLAS call runs on one thread.
  openblas_set_num_threads(1);
}

struct Gpt::State {
  cpu::GptActivations<float> acts;
  std::vector<int32_t> tokens;   // (B,T) of the last Forward
  std::vector<int32_t> targets;  // (B,T), empty when the last Forward had none
  int B = 0;
  int T = 0;
  bool have_forward = false;
};

Gpt::Gpt(const GptConfig& config) : config_(config), state_(std::make_shared<State>()) {
  const std::string error = ValidateGptConfig(config);
  if (!error.empty())
    throw std::invalid_argument(error);
  openblas_set_num_threads(1);  // see SetKernelThreads
  params_.assign(GptParameterCount(config), 0.0f);
  grads_.assign(params_.size(), 0.0f);
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
  const std::vector<ParameterTensor> tensors = GptParameterTensors(config_);
  for (size_t i = 0; i < tensors.size(); i++) {
    const ParameterTensor& t = tensors[i];
    std::span<float> values(params_.data() + t.offset, t.size);
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

float Gpt::Forward(std::span<const int32_t> tokens, std::span<const int32_t> targets, int B,
                   int T) {
  if (B < 1 || T < 1 || T > config_.seq_len) {
    throw std::invalid_argument("Gpt::Forward: need B >= 1 and 1 <= T <= seqLen " +
                                std::to_string(config_.seq_len) + ", got B=" + std::to_string(B) +
                                " T=" + std::to_string(T));
  }
  const size_t n = static_cast<size_t>(B) * T;
  if (tokens.size() != n || (!targets.empty() && targets.size() != n)) {
    throw std::invalid_argument("Gpt::Forward: tokens and targets must hold B*T ids");
  }
  auto check_ids = [&](std::span<const int32_t> ids, const char* what) {
    for (int32_t id : ids) {
      if (id < 0 || id >= config_.vocab) {
        throw std::out_of_range(std::string("Gpt::Forward: ") + what + " id " + std::to_string(id) +
                                " outside [0, vocab " + std::to_string(config_.vocab) + ")");
      }
    }
  };
  check_ids(tokens, "token");
  check_ids(targets, "target");
  State& s = *state_;
  s.tokens.assign(tokens.begin(), tokens.end());
  s.targets.assign(targets.begin(), targets.end());
  s.B = B;
  s.T = T;
  s.have_forward = true;
  const cpu::GptParams<float> p = cpu::BindParams(config_, params_.data());
  const double loss = cpu::GptForward(config_, p, s.acts, s.tokens.data(),
                                      s.targets.empty() ? nullptr : s.targets.data(), B, T);
  return static_cast<float>(loss);
}

void Gpt::Backward(float loss_scale, const GradientsReadyFn& on_ready) {
  State& s = *state_;
  if (!s.have_forward || s.targets.empty()) {
    throw std::logic_error("Gpt::Backward: needs a Forward with targets first");
  }
  const cpu::GptParams<float> p = cpu::BindParams(config_, params_.data());
  const cpu::GptParams<float> g = cpu::BindParams(config_, grads_.data());
  std::function<void(int)> block_done;
  if (on_ready) {
    // Block l's tensors start at its first tensor's offset; everything after it (later blocks,
    // the final layer norm) is already final when block l is.
    std::vector<int64_t> block_offset(config_.layers, 0);
    for (const ParameterTensor& t : GptParameterTensors(config_)) {
      if (t.layer >= 0 && block_offset[t.layer] == 0)
        block_offset[t.layer] = t.offset;
    }
    block_done = [&on_ready, block_offset](int layer) {
      on_ready(layer < 0 ? 0 : block_offset[layer]);
    };
  }
  cpu::GptBackward(config_, p, g, s.acts, s.tokens.data(), s.targets.data(), s.B, s.T, loss_scale,
                   block_done ? &block_done : nullptr);
  s.have_forward = false;  // the logits now hold their gradient
}

std::span<const float> Gpt::logits() const {
  const State& s = *state_;
  return std::span<const float>(s.acts.logits.data(),
                                static_cast<size_t>(s.B) * s.T * config_.vocab);
}

}  // namespace tessera::model
