// How much of the data-parallel gradient all-reduce is hidden behind backward. N ranks (fork,
// Gloo on loopback) each train a GPT on random tokens; per step, interleaved:
//   comm    the bucketed all-reduce of the gradient buffer alone (no compute running)
//   overlap forward, backward reporting final gradients to the BucketReducer, Finish()
//   serial  forward, backward, then all buckets (the reduction after backward, no overlap)
// exposed = the time Finish() waited in the overlapped step; hidden = 1 - exposed / comm.
// The peer is the serial step of the same run: speedup = serial / overlap step time.
// Medians over the measured steps, each the slowest rank's. The last line is
//   hidden=<fraction> ...
// "wall" is the same fraction measured on step time instead, (serial - overlap) / comm: it also
// charges the overlap for slowing compute down (on a machine whose cores are all busy with
// compute, the communication thread competes with it).
// Usage: dp_overlap_bench [ranks=2] [layers=12] [dModel=128] [bucketMiB=0.5] [steps=10]
//        [threads=1] [batch=4]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "worker/comm/gloo_process_group.h"
#include "worker/comm/local_gang.h"
#include "worker/model/gpt.h"
#include "worker/parallel/data/bucket_reducer.h"
#include "worker/rendezvous/store_client.h"
#include "worker/rendezvous/store_server.h"

using namespace tessera;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  int ranks = 2;
  int layers = 12;
  int d_model = 128;
  double bucket_mib = 0.5;
  int steps = 10;
  int threads = 1;
  int batch = 4;
};

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int RunRank(int rank, int listen_fd, int port, const Options& o) {
  std::unique_ptr<rendezvous::StoreServer> server;
  if (rank == 0)
    server = rendezvous::StoreServer::Adopt(listen_fd, {});
  rendezvous::StoreClientOptions co;
  co.port = port;
  auto client = std::make_unique<rendezvous::StoreClient>(co);
  comm::GlooOptions go;
  go.host = "127.0.0.1";
  // The buckets go through shared memory (worker/comm/shm_allreduce.h) unless
  // TESSERA_SHM_ALLREDUCE=0, which compares with Gloo's loopback sockets.
  go.shared_memory_allreduce = comm::GlooOptions::FromEnv().shared_memory_allreduce;
  std::shared_ptr<comm::ProcessGroup> group =
      comm::CreateGlooProcessGroup(*client, rank, o.ranks, go);

  // As the trainer does: compute yields the cores to the communication threads
  // (TESSERA_COMPUTE_NICE, default 10; 0 compares without).
  comm::YieldCoresToCommunication(comm::ComputeNiceFromEnv());
  model::SetKernelThreads(o.threads);
  const model::GptConfig config{
      .layers = o.layers, .d_model = o.d_model, .heads = 4, .seq_len = 64, .vocab = 256};
  model::Gpt gpt(config);
  gpt.InitParameters(1);
  const int B = o.batch, T = config.seq_len;
  std::mt19937 rng(static_cast<unsigned>(rank) + 7);
  std::vector<int32_t> tokens(static_cast<size_t>(B * T)), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>(rng() % 256);
    targets[i] = static_cast<int32_t>(rng() % 256);
  }
  // TESSERA_BUCKETS=fixed compares with buckets cut every bucketMiB, blind to where backward
  // reports gradients final.
  const char* plan = std::getenv("TESSERA_BUCKETS");
  const bool fixed = plan != nullptr && std::string(plan) == "fixed";
  auto reducer_ptr = std::make_unique<parallel::BucketReducer>(
      group, gpt.gradients(), static_cast<size_t>(o.bucket_mib * 1024 * 1024),
      fixed ? std::vector<int64_t>() : model::GradientReadyOffsets(gpt.tensors()));
  parallel::BucketReducer& reducer = *reducer_ptr;
  const auto ready = [&](int64_t first) { reducer.GradientsReady(first); };

  std::vector<double> comm, exposed, overlap_step, serial_step, pending;
  for (int step = -2; step < o.steps; ++step) {  // two warm-up steps
    double t[5];
    group->barrier()->wait();
    auto start = Clock::now();
    reducer.GradientsReady(0);
    reducer.Finish();
    t[0] = Since(start);

    group->barrier()->wait();
    start = Clock::now();
    gpt.ZeroGradients();
    gpt.Forward(tokens, targets, B, T);
    gpt.Backward(1.0f, ready);
    const parallel::ReductionStats overlapped = reducer.Finish();
    t[1] = overlapped.exposed_seconds;
    t[4] = overlapped.pending_at_finish;
    t[2] = Since(start);

    group->barrier()->wait();
    start = Clock::now();
    gpt.ZeroGradients();
    gpt.Forward(tokens, targets, B, T);
    gpt.Backward(1.0f);
    reducer.Finish();
    t[3] = Since(start);

    group->all_reduce(t, 5, comm::DataType::kFloat64, comm::ReduceOp::kMax)->wait();
    if (step < 0)
      continue;
    comm.push_back(t[0]);
    exposed.push_back(t[1]);
    overlap_step.push_back(t[2]);
    serial_step.push_back(t[3]);
    pending.push_back(t[4]);
  }
  if (rank == 0) {
    const double c = Median(comm), e = Median(exposed);
    const double so = Median(overlap_step), ss = Median(serial_step);
    std::printf(
        "# %d ranks, GPT %d layers x %d (%zu parameters, %.1f MiB of gradients), "
        "%zu buckets of <= %.2f MiB, batch %d x %d per rank, %d thread(s) per rank\n",
        o.ranks, o.layers, o.d_model, gpt.parameters().size(),
        static_cast<double>(gpt.parameters().size()) * 4 / (1 << 20), reducer.buckets().size(),
        o.bucket_mib, B, T, o.threads);
    std::printf(
        "comm_alone_ms=%.2f exposed_ms=%.2f overlap_step_ms=%.2f serial_step_ms=%.2f "
        "speedup=%.3f pending_at_finish=%.0f/%zu\n",
        c * 1e3, e * 1e3, so * 1e3, ss * 1e3, ss / so, Median(pending), reducer.buckets().size());
    std::printf(
        "hidden=%.3f wall=%.3f (hidden: 1 - exposed / comm alone, target >= 0.70; wall: "
        "(serial - overlap step) / comm alone)\n",
        std::clamp(1.0 - e / c, 0.0, 1.0), (ss - so) / c);
  }
  group->barrier()->wait();
  reducer_ptr.reset();  // it holds the group, whose store connections rank 0 waits for
  group.reset();
  client.reset();
  if (server)
    server->WaitForClientsToLeave(60s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  auto arg = [&](int i, auto fallback) {
    return argc > i ? static_cast<decltype(fallback)>(std::atof(argv[i])) : fallback;
  };
  o.ranks = arg(1, o.ranks);
  o.layers = arg(2, o.layers);
  o.d_model = arg(3, o.d_model);
  o.bucket_mib = arg(4, o.bucket_mib);
  o.steps = arg(5, o.steps);
  o.threads = arg(6, o.threads);
  o.batch = arg(7, o.batch);
  if (o.ranks < 2 || o.layers < 1 || o.d_model < 4 || o.d_model % 4 != 0 || o.bucket_mib <= 0 ||
      o.steps < 1 || o.threads < 1 || o.batch < 1) {
    std::fprintf(stderr,
                 "usage: dp_overlap_bench [ranks>=2] [layers] [dModel, a multiple of 4] "
                 "[bucketMiB>0] [steps] [threads] [batch]\n");
    return 2;
  }
  auto results = comm::RunLocalGang(
      o.ranks, [&](int rank, int fd, int port) { return RunRank(rank, fd, port, o); }, 1800s);
  int failed = 0;
  for (const auto& r : results) {
    if (r.rank == 0 || r.signaled || r.exit_code != 0)
      std::printf("%s", r.output.c_str());
    failed += r.signaled || r.exit_code != 0;
  }
  return failed == 0 ? 0 : 1;
}
