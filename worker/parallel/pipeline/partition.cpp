#include "worker/parallel/pipeline/partition.h"

#include <fmt/format.h>

#include <limits>
#include <stdexcept>

namespace tessera::parallel {

LayerCosts GptLayerCosts(const model::GptConfig& config, int seq_len) {
  const double C = config.d_model;
  const double V = config.vocab;
  const double T = seq_len;
  LayerCosts costs;
  // Per token: qkv (3C x C), attention projection (C x C) and the MLP (2 x 4C x C) at 2 FLOPs
  // per multiply-add, plus the scores and the weighted sum over on average T/2 earlier
  // positions (2 x 2 x C x T/2), and the element-wise layer norms, GELU and residuals (~30 C).
  const double block = 2.0 * 12.0 * C * C + 2.0 * C * T + 30.0 * C;
  costs.blocks.assign(static_cast<size_t>(config.layers), block);
  costs.embedding = 2.0 * C;
  costs.head = 2.0 * C * V + 10.0 * C + 5.0 * V;
  return costs;
}

std::vector<StageLayers> PartitionStages(const LayerCosts& costs, int stages) {
  const int L = static_cast<int>(costs.blocks.size());
  if (stages < 1 || stages > L) {
    throw std::invalid_argument(
        fmt::format("PartitionStages: {} stages for {} blocks (each stage needs one)", stages, L));
  }
  // prefix[i]: cost of blocks [0, i).
  std::vector<double> prefix(L + 1, 0.0);
  for (int i = 0; i < L; i++)
    prefix[i + 1] = prefix[i] + costs.blocks[i];
  auto stage_cost = [&](int s, int first, int end) {
    double c = prefix[end] - prefix[first];
    if (s == 0)
      c += costs.embedding;
    if (s == stages - 1)
      c += costs.head;
    return c;
  };
  // best[s][e]: the smallest largest-stage cost of stages 0..s covering blocks [0, e);
  // cut[s][e]: where stage s starts in that split.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages, std::vector<double>(L + 1, kInf));
  std::vector<std::vector<int>> cut(stages, std::vector<int>(L + 1, 0));
  for (int e = 1; e <= L; e++)
    best[0][e] = stage_cost(0, 0, e);
  for (int s = 1; s < stages; s++) {
    for (int e = s + 1; e <= L; e++) {
      // Latest start first, and `<=`: among equal costs the earliest start wins, so stage s
      // takes the extra block (the header's tie rule).
      for (int first = e - 1; first >= s; first--) {
        const double c = std::max(best[s - 1][first], stage_cost(s, first, e));
        if (c <= best[s][e]) {
          best[s][e] = c;
          cut[s][e] = first;
        }
      }
    }
  }
  std::vector<StageLayers> out(stages);
  int end = L;
  for (int s = stages - 1; s >= 0; s--) {
    const int first = s == 0 ? 0 : cut[s][end];
    out[s] = {first, end, stage_cost(s, first, end)};
    end = first;
  }
  return out;
}

std::string DescribeStages(const std::vector<StageLayers>& stages) {
  std::string out;
  for (const StageLayers& s : stages)
    out += fmt::format("{}[{},{})", out.empty() ? "" : " ", s.first, s.end);
  return out;
}

}  // namespace tessera::parallel
