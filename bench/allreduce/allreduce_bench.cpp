// All-reduce bus bandwidth of the Gloo process group on one machine, for 2 and 4 ranks,
// against message size, once through Gloo's TCP pairs on loopback and once through the
// shared-memory all-reduce (worker/comm/shm_allreduce.h). Bus bandwidth follows nccl-tests: algbw *
// 2(n-1)/n, where algbw = bytes / time. The peer is this machine's single-process memcpy bandwidth
// at the same size, measured in the same run, since loopback transfers are memory copies. Usage:
// allreduce_bench [max-bytes (default 64 MiB)] [ranks... (default 2 4)]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "worker/comm/gloo_process_group.h"
#include "worker/comm/local_gang.h"
#include "worker/rendezvous/store_client.h"
#include "worker/rendezvous/store_server.h"

using namespace tessera;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

int Iterations(size_t bytes) {
  const size_t target = 512ull << 20;  // about this many bytes reduced per size
  return static_cast<int>(std::clamp<size_t>(target / bytes, 3, 200));
}

double MemcpyGBps(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 0);
  const int iters = Iterations(bytes);
  std::memcpy(b.data(), a.data(), bytes);
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    a[i % bytes] = static_cast<char>(i);
    std::memcpy(b.data(), a.data(), bytes);
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
  return static_cast<double>(bytes) / s / 1e9;
}

int RunRank(int rank, int ranks, int listen_fd, int port, const std::vector<size_t>& sizes,
            bool shm) {
  std::unique_ptr<rendezvous::StoreServer> server;
  if (rank == 0)
    server = rendezvous::StoreServer::Adopt(listen_fd, {});
  rendezvous::StoreClientOptions co;
  co.port = port;
  auto client = std::make_unique<rendezvous::StoreClient>(co);
  comm::GlooOptions go;
  go.host = "127.0.0.1";
  go.shared_memory_allreduce = shm;
  auto pg = comm::CreateGlooProcessGroup(*client, rank, ranks, go);
  for (size_t bytes : sizes) {
    const size_t count = bytes / sizeof(float);
    std::vector<float> data(count, 1.0f);
    for (int i = 0; i < 2; ++i) {
      pg->all_reduce(data.data(), count, comm::DataType::kFloat32, comm::ReduceOp::kSum)->wait();
    }
    const int iters = Iterations(bytes);
    pg->barrier()->wait();
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      pg->all_reduce(data.data(), count, comm::DataType::kFloat32, comm::ReduceOp::kSum)->wait();
    }
    double seconds = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
    // The slowest rank defines the time.
    pg->all_reduce(&seconds, 1, comm::DataType::kFloat64, comm::ReduceOp::kMax)->wait();
    if (rank == 0) {
      const double algbw = static_cast<double>(bytes) / seconds / 1e9;
      const double busbw = algbw * 2.0 * (ranks - 1) / ranks;
      const double peer = MemcpyGBps(bytes);
      std::printf("%-9s %5d %12zu %12.1f %10.3f %10.3f %10.3f %8.3f\n", shm ? "shm" : "gloo", ranks,
                  bytes, seconds * 1e6, algbw, busbw, peer, busbw / peer);
    }
  }
  pg->barrier()->wait();
  pg.reset();
  client.reset();
  if (server)
    server->WaitForClientsToLeave(60s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  size_t max_bytes = 64ull << 20;
  if (argc > 1)
    max_bytes = std::strtoull(argv[1], nullptr, 10);
  std::vector<int> rank_counts;
  for (int i = 2; i < argc; ++i)
    rank_counts.push_back(std::atoi(argv[i]));
  if (rank_counts.empty())
    rank_counts = {2, 4};
  std::vector<size_t> sizes;
  for (size_t b = 4096; b <= max_bytes; b *= 4)
    sizes.push_back(b);

  std::printf(
      "# all_reduce (float32 sum) of the Gloo process group: Gloo's TCP pairs on loopback (gloo)\n"
      "# and the shared-memory all-reduce of ranks on one machine (shm); busbw = algbw * "
      "2(n-1)/n\n");
  std::printf("# peer: single-process memcpy bandwidth of the same size\n");
  std::printf("%-9s %5s %12s %12s %10s %10s %10s %8s\n", "transport", "ranks", "bytes", "time_us",
              "algbw_GBs", "busbw_GBs", "memcpy_GBs", "ratio");
  std::fflush(stdout);
  int failed = 0;
  for (int ranks : rank_counts) {
    for (bool shm : {false, true}) {
      auto results = comm::RunLocalGang(
          ranks,
          [&](int rank, int fd, int port) { return RunRank(rank, ranks, fd, port, sizes, shm); },
          600s);
      for (const auto& r : results) {
        if (r.rank == 0 || r.signaled || r.exit_code != 0)
          std::printf("%s", r.output.c_str());
        if (r.signaled || r.exit_code != 0)
          ++failed;
      }
      std::fflush(stdout);
    }
  }
  return failed == 0 ? 0 : 1;
}
