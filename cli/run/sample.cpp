#include "cli/run/sample.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "worker/model/gpt.h"
#include "worker/train/checkpoint.h"

namespace tessera::cli {

train::Status SampleText(const train::TrainerConfig& config, const SampleOptions& options,
                         std::string* out) {
  if (config.checkpoint.dir.empty())
    return train::CheckpointRefused("no checkpoint directory: the job keeps no checkpoints");
  train::CheckpointStore store(config.checkpoint.dir);
  const std::optional<int64_t> step = store.NewestComplete();
  if (!step)
    return train::CheckpointRefused(config.checkpoint.dir + ": no complete checkpoint");
  train::CheckpointMeta meta;
  if (train::Status st = store.ReadMeta(*step, &meta); !st.ok())
    return st;
  std::string shard_file;
  for (const train::CheckpointFile& f : meta.files) {
    if (f.rank == 0)
      shard_file = f.name;
  }
  train::ShardContents shard;
  if (train::Status st = store.ReadShard(meta, shard_file, &shard); !st.ok())
    return st;
  model::Gpt gpt(config.model);
  const std::vector<float>* params = shard.Find("params");
  if (params == nullptr || params->size() != gpt.parameters().size()) {
    return train::CheckpointRefused(
        fmt::format("{}/{}: parameters do not match the model ({} floats expected)",
                    store.StepDir(*step), shard_file, gpt.parameters().size()));
  }
  std::copy(params->begin(), params->end(), gpt.parameters().begin());

  std::vector<int32_t> context;
  for (unsigned char c : options.prompt.empty() ? std::string("\n") : options.prompt)
    context.push_back(c);
  const int V = config.model.vocab;
  const int window = config.model.seq_len;
  std::mt19937_64 rng(options.seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<double> weights(static_cast<size_t>(V));
  out->clear();
  for (int i = 0; i < options.length; ++i) {
    const int T = std::min<int>(window, static_cast<int>(context.size()));
    const std::vector<int32_t> tokens(context.end() - T, context.end());
    gpt.Forward(tokens, {}, 1, T);
    const std::span<const float> logits = gpt.logits().subspan(static_cast<size_t>(T - 1) * V, V);
    const float top = *std::max_element(logits.begin(), logits.end());
    double total = 0;
    for (int v = 0; v < V; ++v) {
      // Only byte values can be printed back; larger ids (vocab > 256) are never drawn.
      weights[v] = v < 256 ? std::exp((logits[v] - top) / options.temperature) : 0.0;
      total += weights[v];
    }
    double pick = uniform(rng) * total;
    const int drawable = std::min(V, 256);
    int next = 0;
    for (; next < drawable - 1; ++next) {
      pick -= weights[next];
      if (pick <= 0)
        break;
    }
    context.push_back(next);
    out->push_back(static_cast<char>(next));
  }
  return train::Status::Ok();
}

}  // namespace tessera::cli
