// End-to-end checks of the Gloo process groups: forks N rank processes on 127.0.0.1 (rank 0
// hosting the rendezvous store), runs every collective for sizes up to a limit and checks
// results exactly; also the failure paths (a refused token, a rank killed with SIGKILL).
// Usage: comm_e2e collectives <ranks> <max-count>
//        comm_e2e kill <ranks> <victim> <timeout-seconds>
//        comm_e2e wrong-token
//        comm_e2e closed-peer
//        comm_e2e mesh <data> <pipeline> <tensor>
// Exits 0 when every check held; otherwise prints what failed.
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "worker/comm/device_mesh.h"
#include "worker/comm/gloo_process_group.h"
#include "worker/comm/local_gang.h"
#include "worker/rendezvous/store_client.h"
#include "worker/rendezvous/store_server.h"

using namespace tessera;
using namespace std::chrono_literals;
using comm::DataType;
using comm::ReduceOp;

namespace {

constexpr const char* kToken = "e2e-token";

// What a rank needs to take part: the store (served here by rank 0) and the world group.
struct RankSetup {
  std::unique_ptr<rendezvous::StoreServer> server;
  std::unique_ptr<rendezvous::StoreClient> client;
  std::shared_ptr<comm::ProcessGroup> world;

  RankSetup(int rank, int size, int listen_fd, int port) {
    if (rank == 0) {
      rendezvous::StoreServerOptions so;
      so.token = kToken;
      server = rendezvous::StoreServer::Adopt(listen_fd, so);
    }
    rendezvous::StoreClientOptions co;
    co.host = "127.0.0.1";
    co.port = port;
    co.token = kToken;
    co.connect_timeout = 60s;
    co.timeout = 60s;
    client = std::make_unique<rendezvous::StoreClient>(co);
    comm::GlooOptions go;
    go.host = "127.0.0.1";
    go.comm = comm::CommOptions::FromEnv();
    go.shared_memory_allreduce = comm::GlooOptions::FromEnv().shared_memory_allreduce;
    world = comm::CreateGlooProcessGroup(*client, rank, size, go);
    // Unless TESSERA_SHM_ALLREDUCE=0, the ranks (all on this machine) must have set up the
    // shared-memory all-reduce: every rank mapped the segment (an empty "mapped" report).
    if (go.shared_memory_allreduce) {
      for (int r = 0; r < size; ++r) {
        const auto mapped = client->TryGet("tessera/world/shm/mapped/" + std::to_string(r));
        if (!mapped || !mapped->empty()) {
          std::fprintf(stderr, "rank %d: the shared-memory all-reduce is not in use: %s\n", r,
                       mapped ? mapped->c_str() : "no report");
          std::exit(4);
        }
      }
    }
  }
  // A clean goodbye: everyone stops using the store, then rank 0 lets it go.
  void Finish() { world->barrier()->wait(); }
  // Also on failure: rank 0 keeps the store up until the others left (bounded), so they
  // can still learn which rank was lost.
  ~RankSetup() {
    world.reset();
    client.reset();
    if (server)
      server->WaitForClientsToLeave(60s);
  }
};

int failures = 0;

template <typename T>
void Expect(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) {
      std::fprintf(stderr, "MISMATCH %s at %zu: got %.17g want %.17g\n", what.c_str(), i,
                   static_cast<double>(got[i]), static_cast<double>(want[i]));
      ++failures;
      return;
    }
  }
}

// Integer-valued floats, so sums are exact in float32 for every size used here.
float Value(int rank, size_t i) {
  return static_cast<float>((rank + 1) * static_cast<int>(i % 1000 + 1));
}

void CheckAllCollectives(comm::ProcessGroup& pg, size_t count) {
  const int n = pg.size(), r = pg.rank();
  const std::string at = " count=" + std::to_string(count) + " ranks=" + std::to_string(n);
  const float tri = static_cast<float>(n * (n + 1) / 2);

  // all_reduce sum, avg and max, issued together and waited in reverse (they overlap).
  std::vector<float> sum(count), avg(count);
  std::vector<int32_t> mx(count);
  for (size_t i = 0; i < count; ++i) {
    sum[i] = avg[i] = Value(r, i);
    mx[i] = static_cast<int32_t>(Value(r, i)) * ((r % 2) ? -1 : 1);
  }
  auto w1 = pg.all_reduce(sum.data(), count, DataType::kFloat32, ReduceOp::kSum);
  auto w2 = pg.all_reduce(avg.data(), count, DataType::kFloat32, ReduceOp::kAvg);
  auto w3 = pg.all_reduce(mx.data(), count, DataType::kInt32, ReduceOp::kMax);
  w3->wait();
  w2->wait();
  w1->wait();
  std::vector<float> want_sum(count), want_avg(count);
  std::vector<int32_t> want_max(count);
  const int max_rank = n % 2 == 1 ? n - 1 : n - 2;  // the largest rank with a positive sign
  for (size_t i = 0; i < count; ++i) {
    const float base = static_cast<float>(i % 1000 + 1);
    want_sum[i] = tri * base;
    want_avg[i] = want_sum[i] / static_cast<float>(n);
    want_max[i] = static_cast<int32_t>(Value(max_rank, i));
  }
  Expect(sum, want_sum, "all_reduce sum" + at);
  Expect(avg, want_avg, "all_reduce avg" + at);
  Expect(mx, want_max, "all_reduce max" + at);

  // reduce_scatter and all_gather with `count` elements per rank.
  const size_t block = count;
  std::vector<float> input(block * n), shard(block);
  for (int b = 0; b < n; ++b) {
    for (size_t i = 0; i < block; ++i)
      input[b * block + i] = Value(r, i) + static_cast<float>(b);
  }
  pg.reduce_scatter(input.data(), shard.data(), block, DataType::kFloat32, ReduceOp::kSum)->wait();
  std::vector<float> want_shard(block);
  for (size_t i = 0; i < block; ++i) {
    want_shard[i] = tri * static_cast<float>(i % 1000 + 1) + static_cast<float>(n * r);
  }
  Expect(shard, want_shard, "reduce_scatter" + at);

  std::vector<int64_t> mine(block), gathered(block * n);
  for (size_t i = 0; i < block; ++i)
    mine[i] = static_cast<int64_t>(r) * 1000000007LL + static_cast<int64_t>(i);
  pg.all_gather(mine.data(), gathered.data(), block, DataType::kInt64)->wait();
  std::vector<int64_t> want_gathered(block * n);
  for (int b = 0; b < n; ++b) {
    for (size_t i = 0; i < block; ++i)
      want_gathered[b * block + i] = b * 1000000007LL + static_cast<int64_t>(i);
  }
  Expect(gathered, want_gathered, "all_gather" + at);

  // broadcast from a root that moves with the size.
  const int root = static_cast<int>(count % static_cast<size_t>(n));
  std::vector<double> bc(count);
  for (size_t i = 0; i < count; ++i)
    bc[i] = r == root ? 0.5 * static_cast<double>(i) : -1.0;
  pg.broadcast(bc.data(), count, DataType::kFloat64, root)->wait();
  std::vector<double> want_bc(count);
  for (size_t i = 0; i < count; ++i)
    want_bc[i] = 0.5 * static_cast<double>(i);
  Expect(bc, want_bc, "broadcast root=" + std::to_string(root) + at);

  // A ring of send/recv: everyone sends to the right and receives from the left.
  if (n == 1)
    return;
  std::vector<float> out(count), in(count, -1.0f);
  for (size_t i = 0; i < count; ++i)
    out[i] = Value(r, i);
  const int left = (r - 1 + n) % n, right = (r + 1) % n;
  auto rw = pg.recv(in.data(), count, DataType::kFloat32, left, 7);
  auto sw = pg.send(out.data(), count, DataType::kFloat32, right, 7);
  rw->wait();
  sw->wait();
  std::vector<float> want_in(count);
  for (size_t i = 0; i < count; ++i)
    want_in[i] = Value(left, i);
  Expect(in, want_in, "send/recv ring" + at);

  pg.barrier()->wait();
}

int RunCollectives(int ranks, size_t max_count) {
  std::vector<size_t> counts;
  for (size_t c : {1ul, 2ul, 3ul, 7ul, 1000ul, 65537ul, 1ul << 20, 10000000ul}) {
    if (c <= max_count)
      counts.push_back(c);
  }
  auto results = comm::RunLocalGang(
      ranks,
      [&](int rank, int fd, int port) {
        RankSetup s(rank, ranks, fd, port);
        for (size_t c : counts)
          CheckAllCollectives(*s.world, c);
        // Collectives on a sub-group (the even ranks), through split.
        auto evens = s.world->split(rank % 2 == 0 ? 0 : -1, rank, "evens");
        if (rank % 2 == 0) {
          if (!evens || evens->size() != (ranks + 1) / 2 || evens->rank() != rank / 2) {
            std::fprintf(stderr, "split gave a wrong group\n");
            ++failures;
          } else {
            CheckAllCollectives(*evens, 1000);
          }
        } else if (evens) {
          std::fprintf(stderr, "an odd rank got a group from a negative color\n");
          ++failures;
        }
        evens.reset();
        s.Finish();
        std::printf("rank %d: %zu sizes checked, %d failures\n", rank, counts.size(), failures);
        return failures == 0 ? 0 : 1;
      },
      300s);
  int bad = 0;
  for (const auto& r : results) {
    if (r.signaled || r.exit_code != 0) {
      std::fprintf(stderr, "rank %d failed (exit %d, signal %d):\n%s\n", r.rank, r.exit_code,
                   r.signal, r.output.c_str());
      ++bad;
    }
  }
  if (bad == 0)
    std::printf("collectives: %d ranks, all sizes up to %zu exact\n", ranks, max_count);
  return bad == 0 ? 0 : 1;
}

int RunKill(int ranks, int victim, double timeout_s) {
  const std::string timeout = std::to_string(timeout_s);
  ::setenv("TESSERA_COMM_TIMEOUT", timeout.c_str(), 1);
  auto results = comm::RunLocalGang(
      ranks,
      [&](int rank, int fd, int port) {
        RankSetup s(rank, ranks, fd, port);
        std::vector<float> data(100000, 1.0f);
        for (int step = 0; step < 1000000; ++step) {
          auto work =
              s.world->all_reduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kAvg);
          if (rank == victim && step == 3) {
            ::kill(::getpid(), SIGKILL);  // dies with a collective in flight, as kill -9 does
          }
          try {
            work->wait();
          } catch (const comm::CommError& e) {
            std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
            return 3;
          }
        }
        return 0;
      },
      std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000) * 4 + 60000));
  const auto& dead = results[victim];
  int bad = 0;
  if (!dead.signaled || dead.signal != SIGKILL) {
    std::fprintf(stderr, "victim rank %d was not killed (exit %d)\n", victim, dead.exit_code);
    ++bad;
  }
  const std::string named = "rank " + std::to_string(victim) + " lost";
  // Every survivor must fail on its own, within the timeout (plus a margin for process exit
  // on a loaded machine), naming the lost rank.
  const auto limit = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000) + 5000);
  for (const auto& r : results) {
    if (r.rank == victim)
      continue;
    const auto after = std::chrono::duration_cast<std::chrono::milliseconds>(r.ended - dead.ended);
    const bool ok = !r.signaled && r.exit_code != 0 && !r.killed_at_deadline &&
                    r.output.find(named) != std::string::npos && after <= limit;
    std::printf("rank %d: exit %d (signal %d) after %lld ms: %s", r.rank, r.exit_code, r.signal,
                static_cast<long long>(after.count()), r.output.c_str());
    if (!ok) {
      std::fprintf(
          stderr,
          "rank %d did not fail correctly (want non-zero exit within %lld ms naming '%s')\n",
          r.rank, static_cast<long long>(limit.count()), named.c_str());
      ++bad;
    }
  }
  return bad == 0 ? 0 : 1;
}

// Rank 1 closes its group (its sockets) while staying alive and connected to the store, so no
// loss is reported; once rank 0's Gloo has seen the connection close, a send or recv it posts
// must fail as a CommError naming the operation — Gloo's own exception used to escape
// PostP2P and abort the process (seen as exit 134 in hybrid_kill_rank_resume).
int RunClosedPeer() {
  auto results = comm::RunLocalGang(
      2,
      [&](int rank, int fd, int port) {
        RankSetup s(rank, 2, fd, port);
        s.world->barrier()->wait();
        if (rank == 1) {
          s.world.reset();
          std::this_thread::sleep_for(3s);
          return 0;
        }
        std::this_thread::sleep_for(500ms);  // Gloo's event loop sees the peer's sockets close
        int caught = 0;
        float value = 1.0f;
        for (const bool is_send : {true, false}) {
          try {
            auto work = is_send ? s.world->send(&value, 1, DataType::kFloat32, 1)
                                : s.world->recv(&value, 1, DataType::kFloat32, 1);
            work->wait();
            std::fprintf(stderr, "a %s to a closed peer succeeded\n", is_send ? "send" : "recv");
          } catch (const comm::CommError& e) {
            std::printf("rank 0: %s\n", e.what());
            const std::string want = is_send ? "send to rank 1" : "recv from rank 1";
            caught += std::string(e.what()).find(want) != std::string::npos ||
                      std::string(e.what()).find("group is broken") != std::string::npos;
          } catch (const std::exception& e) {
            std::fprintf(stderr, "not a CommError: %s\n", e.what());
          }
        }
        return caught == 2 ? 0 : 1;
      },
      60s);
  int bad = 0;
  for (const auto& r : results) {
    std::printf("rank %d: exit %d (signal %d): %s", r.rank, r.exit_code, r.signal,
                r.output.c_str());
    bad += r.signaled || r.exit_code != 0;
  }
  return bad == 0 ? 0 : 1;
}

int RunWrongToken() {
  auto results = comm::RunLocalGang(
      2,
      [&](int rank, int fd, int port) {
        rendezvous::StoreClientOptions co;
        co.host = "127.0.0.1";
        co.port = port;
        co.connect_timeout = 30s;
        co.timeout = 30s;
        if (rank == 0) {
          rendezvous::StoreServerOptions so;
          so.token = kToken;
          auto server = rendezvous::StoreServer::Adopt(fd, so);
          co.token = kToken;
          // Rank 1 tried a wrong token before setting this key.
          rendezvous::StoreClient(co).Get("intruder-done", 30s);
          const uint64_t refused = server->refused_clients();
          std::printf("rank 0: refused %llu client(s)\n", static_cast<unsigned long long>(refused));
          server->WaitForClientsToLeave(30s);
          return refused == 1 ? 0 : 1;
        }
        co.token = "not-the-token";
        try {
          rendezvous::StoreClient intruder(co);
          std::fprintf(stderr, "rank 1: a wrong token was accepted\n");
          return 1;
        } catch (const rendezvous::StoreAuthError& e) {
          std::printf("rank 1: refused as expected: %s\n", e.what());
        }
        co.token = kToken;
        rendezvous::StoreClient(co).Set("intruder-done", "1");
        return 0;
      },
      60s);
  int bad = 0;
  for (const auto& r : results) {
    std::printf("%s", r.output.c_str());
    if (r.signaled || r.exit_code != 0)
      ++bad;
  }
  // The server logged the refusal with the peer's address.
  if (results[0].output.find("refused client 127.0.0.1:") == std::string::npos) {
    std::fprintf(stderr, "rank 0's log does not name the refused peer\n");
    ++bad;
  }
  return bad == 0 ? 0 : 1;
}

int RunMesh(const comm::MeshShape& shape) {
  const int ranks = shape.world_size();
  auto results = comm::RunLocalGang(
      ranks,
      [&](int rank, int fd, int port) {
        RankSetup s(rank, ranks, fd, port);
        auto mesh = comm::DeviceMesh::Create(s.world, shape);
        for (comm::MeshDim dim : comm::kMeshDims) {
          auto& g = mesh.group(dim);
          const auto want = shape.group_ranks(rank, dim);
          if (g->world_ranks() != want || g->size() != shape.extent(dim) ||
              g->rank() != mesh.coords()[dim]) {
            std::fprintf(stderr, "rank %d: %s group has the wrong members\n", rank,
                         comm::ToString(dim));
            ++failures;
          }
          // Sum of world ranks over the group, through the group itself.
          int64_t v = rank;
          g->all_reduce(&v, 1, DataType::kInt64, ReduceOp::kSum)->wait();
          const int64_t expect = std::accumulate(want.begin(), want.end(), int64_t{0});
          if (v != expect) {
            std::fprintf(stderr, "rank %d: %s all_reduce gave %lld, want %lld\n", rank,
                         comm::ToString(dim), static_cast<long long>(v),
                         static_cast<long long>(expect));
            ++failures;
          }
        }
        mesh = {};
        s.Finish();
        return failures == 0 ? 0 : 1;
      },
      120s);
  int bad = 0;
  for (const auto& r : results) {
    if (r.signaled || r.exit_code != 0) {
      std::fprintf(stderr, "rank %d failed:\n%s\n", r.rank, r.output.c_str());
      ++bad;
    }
  }
  if (bad == 0)
    std::printf("mesh %s: every group correct\n", shape.ToString().c_str());
  return bad == 0 ? 0 : 1;
}

int Usage() {
  std::fprintf(
      stderr,
      "usage: comm_e2e collectives <ranks> <max-count> | kill <ranks> <victim> <timeout-s> | "
      "wrong-token | mesh <data> <pipeline> <tensor>\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2)
    return Usage();
  const std::string mode = argv[1];
  if (mode == "collectives" && argc == 4)
    return RunCollectives(std::atoi(argv[2]), std::stoul(argv[3]));
  if (mode == "kill" && argc == 5)
    return RunKill(std::atoi(argv[2]), std::atoi(argv[3]), std::atof(argv[4]));
  if (mode == "wrong-token" && argc == 2)
    return RunWrongToken();
  if (mode == "closed-peer")
    return RunClosedPeer();
  if (mode == "mesh" && argc == 5) {
    return RunMesh({std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4])});
  }
  return Usage();
}
