// bench/pipeline_bubble: how much of a step each pipeline stage spends waiting, measured,
// against the ideal (p-1)/(m+p-1) of equal stages, for p in {2, 4} stages and m in {4, 8, 16}
// micro-batches, with the 1F1B schedule; and the peak activation memory of 1F1B against GPipe.
//
// Stages are threads of this process, one kernel thread each, joined by a real Gloo
// pipeline group on loopback; each runs the real model shard of its blocks (the partition of
// the trainer) through PipelineRunner. The idle time is what the runner measures: the time
// spent waiting to receive a neighbour's activations or gradients, and for the last sends to
// finish. A measurement is only meaningful with at least one core per stage: the bench says
// so, and counts the case as failed, when there are fewer.
//
// Usage: pipeline_bubble_bench [--steps N] [--layers L] [--dmodel C]
// Last line: `within=yes` when every measured 1F1B bubble is within 10% (relative) of the
// formula, else `within=no worst=p<P>m<M> measured=<x> ideal=<y>`.
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "worker/comm/local_gang.h"
#include "worker/model/gpt.h"
#include "worker/parallel/pipeline/partition.h"
#include "worker/parallel/pipeline/runner.h"
#include "worker/parallel/pipeline/schedule.h"

namespace {

using namespace tessera;
using namespace std::chrono_literals;

constexpr int kVocab = 64;

struct Options {
  int steps = 4;  // measured steps, after one warm-up step
  int layers = 8;
  int d_model = 256;
  int micro_batch = 4;  // sequences per micro-batch
  int seq_len = 64;
};

struct Result {
  double bubble = 0;             // mean over stages and measured steps
  double worst_stage = 0;        // the largest stage mean
  int64_t peak_activations = 0;  // bytes, the largest stage's
};

// Runs `steps + 1` steps of a p-stage pipeline over m micro-batches; one thread per stage.
Result Measure(const Options& o, int p, int m, parallel::Schedule schedule) {
  // A small vocabulary keeps the head (on the last stage) and the embedding (on the first)
  // light next to the blocks, so the stages are as equal as the formula assumes.
  const model::GptConfig config{o.layers, o.d_model, o.d_model / 32, o.seq_len, kVocab};
  const std::vector<parallel::StageLayers> split =
      parallel::PartitionStages(parallel::GptLayerCosts(config, o.seq_len), p);
  std::vector<double> stage_bubble(p, 0.0);
  std::vector<int64_t> stage_bytes(p, 0);
  comm::RunThreadGang(
      p,
      [&](int s, std::shared_ptr<comm::ProcessGroup> group) {
        omp_set_num_threads(1);
        model::Gpt gpt(config, {.first_layer = split[s].first,
                                .end_layer = split[s].end,
                                .embedding = s == 0,
                                .head = s == p - 1});
        gpt.InitParameters(1);
        parallel::PipelineRunner runner(&gpt, group, schedule);
        const auto load = [&](int i, parallel::MicroBatch* mb) {
          std::mt19937_64 rng(static_cast<uint64_t>(i) + 1);
          mb->B = o.micro_batch;
          mb->T = o.seq_len;
          mb->tokens.resize(static_cast<size_t>(mb->B) * mb->T);
          mb->targets.resize(mb->tokens.size());
          for (size_t k = 0; k < mb->tokens.size(); k++) {
            mb->tokens[k] = static_cast<int32_t>(rng() % kVocab);
            mb->targets[k] = static_cast<int32_t>(rng() % kVocab);
          }
        };
        for (int step = 0; step <= o.steps; step++) {
          gpt.ZeroGradients();
          group->barrier()->wait();  // every stage starts the step together
          const parallel::PipelineStats stats = runner.Train(m, load, 1.0f / m);
          if (step > 0)
            stage_bubble[s] += stats.bubble() / o.steps;
        }
        stage_bytes[s] = gpt.activation_bytes();
      },
      std::chrono::seconds(120));
  Result r;
  for (int s = 0; s < p; s++) {
    r.bubble += stage_bubble[s] / p;
    r.worst_stage = std::max(r.worst_stage, stage_bubble[s]);
    r.peak_activations = std::max(r.peak_activations, stage_bytes[s]);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--steps") {
      o.steps = value;
    } else if (flag == "--layers") {
      o.layers = value;
    } else if (flag == "--dmodel") {
      o.d_model = value;
    } else {
      std::fprintf(stderr, "pipeline_bubble_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (o.layers < 4 || o.d_model < 32 || o.d_model % 32 != 0 || o.steps < 1) {
    std::fprintf(stderr,
                 "pipeline_bubble_bench: need --layers >= 4, --dmodel a multiple of 32, "
                 "--steps >= 1\n");
    return 2;
  }
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  std::printf(
      "model: %d layers, dModel %d, micro-batches of %d x %d tokens; %ld cores; %d "
      "measured steps each\n",
      o.layers, o.d_model, o.micro_batch, o.seq_len, cores, o.steps);
  std::printf("%-4s %-4s %-8s %-8s %-8s %-8s %s\n", "p", "m", "measured", "ideal", "rel.err",
              "worst", "note");
  bool within = true;
  double worst_err = -1;
  std::string worst;
  for (int p : {2, 4}) {
    for (int m : {4, 8, 16}) {
      const Result r = Measure(o, p, m, parallel::Schedule::k1F1B);
      const double ideal = parallel::IdealBubble(p, m);
      const double err = (r.bubble - ideal) / ideal;
      const bool enough_cores = cores >= p;
      std::printf("%-4d %-4d %-8.3f %-8.3f %+-8.1f%% %-8.3f %s\n", p, m, r.bubble, ideal, 100 * err,
                  r.worst_stage, enough_cores ? "" : "fewer cores than stages: stages share cores");
      std::fflush(stdout);
      if (std::abs(err) > 0.10 || !enough_cores)
        within = false;
      if (std::abs(err) > worst_err) {
        worst_err = std::abs(err);
        char buf[128];
        std::snprintf(buf, sizeof(buf), "worst=p%dm%d measured=%.3f ideal=%.3f", p, m, r.bubble,
                      ideal);
        worst = buf;
      }
    }
  }
  // Peak activation memory: 1F1B keeps at most p - s micro-batches alive, GPipe all m.
  for (int p : {2, 4}) {
    const int m = 16;
    const Result a = Measure(o, p, m, parallel::Schedule::k1F1B);
    const Result g = Measure(o, p, m, parallel::Schedule::kGPipe);
    std::printf(
        "activations p=%d m=%d: 1F1B %.1f MiB, GPipe %.1f MiB (ratio %.3f; ideal %d/%d); "
        "bubble 1F1B %.3f GPipe %.3f\n",
        p, m, a.peak_activations / 1048576.0, g.peak_activations / 1048576.0,
        static_cast<double>(a.peak_activations) / static_cast<double>(g.peak_activations), p, m,
        a.bubble, g.bubble);
  }
  std::printf("%s\n", within ? "within=yes" : ("within=no " + worst).c_str());
  return 0;
}
