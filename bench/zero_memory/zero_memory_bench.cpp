// Optimizer memory per rank: the built-in trainer with N data-parallel ranks (fork, Gloo on
// loopback), once with replicated AdamW state (zeroStage 0) and once sharded (zeroStage 1).
// Each rank trains two steps and reads its own /metrics over HTTP: tessera_memory_bytes
// {kind="optimizer"} (the AdamW moments it holds) and {kind="resident"}; its peak resident set
// (VmHWM) comes from /proc. The last line is
//   ratio=<ZeRO-1 optimizer bytes per rank / replicated> (1/N expected)
// Usage: zero_memory_bench [ranks=4] [layers=4] [dModel=256] [data=data/tinyshakespeare.txt]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "worker/comm/gloo_process_group.h"
#include "worker/comm/local_gang.h"
#include "worker/rendezvous/store_client.h"
#include "worker/rendezvous/store_server.h"
#include "worker/train/trainer.h"

using namespace tessera;
using namespace std::chrono_literals;

namespace {

struct Options {
  int ranks = 4;
  int layers = 4;
  int d_model = 256;
  std::string data = "data/tinyshakespeare.txt";
};

// GET http://127.0.0.1:port/path; the body, or "" on failure.
std::string HttpGet(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "";
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return "";
  }
  std::string response;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;)
    response.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

double Gauge(const std::string& text, const std::string& kind) {
  const std::regex re("tessera_memory_bytes\\{kind=\"" + kind + "\"\\} ([0-9.e+]+)");
  std::smatch m;
  return std::regex_search(text, m, re) ? std::stod(m[1]) : -1;
}

double PeakResidentBytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0)
      return std::stod(line.substr(6)) * 1024;
  }
  return -1;
}

int RunRank(int rank, int listen_fd, int port, const Options& o, int zero_stage) {
  spdlog::set_level(spdlog::level::warn);  // the trainer's step lines are not the point here
  std::unique_ptr<rendezvous::StoreServer> server;
  if (rank == 0)
    server = rendezvous::StoreServer::Adopt(listen_fd, {});
  rendezvous::StoreClientOptions co;
  co.port = port;
  auto client = std::make_unique<rendezvous::StoreClient>(co);
  comm::GlooOptions go;
  go.host = "127.0.0.1";
  std::shared_ptr<comm::ProcessGroup> group =
      comm::CreateGlooProcessGroup(*client, rank, o.ranks, go);

  train::TrainerConfig c;
  c.model = {.layers = o.layers, .d_model = o.d_model, .heads = 4, .seq_len = 64, .vocab = 256};
  c.data.path = o.data;
  c.batch = {.global = 2 * o.ranks, .micro_batches = 1};
  c.schedule.steps = 2;
  c.schedule.warmup_steps = 1;
  c.schedule.eval_batches = 1;
  c.metrics.port = 0;
  c.parallel.zero_stage = zero_stage;
  train::RankContext ctx{.rank = rank,
                         .world_size = o.ranks,
                         .mesh = "data=" + std::to_string(o.ranks) + ",pipeline=1,tensor=1",
                         .kernel_threads = 1,
                         .world_group = group};
  std::unique_ptr<train::Trainer> trainer;
  train::Status st = train::Trainer::Create(c, ctx, &trainer);
  ctx.world_group.reset();
  if (!st.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, st.message().c_str());
    return st.exit_code();
  }
  train::TrainResult result;
  st = trainer->Run({}, &result);
  if (!st.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, st.message().c_str());
    return st.exit_code();
  }
  const std::string metrics = HttpGet(trainer->metrics_port(), "/metrics");
  double figures[3] = {Gauge(metrics, "optimizer"), Gauge(metrics, "resident"),
                       PeakResidentBytes()};
  // Rank 0 reports the largest figure of any rank.
  group->all_reduce(figures, 3, comm::DataType::kFloat64, comm::ReduceOp::kMax)->wait();
  if (rank == 0) {
    std::printf(
        "zeroStage %d: optimizer %.2f MiB per rank, resident %.1f MiB, peak resident "
        "%.1f MiB (largest over %d ranks)\n",
        zero_stage, figures[0] / (1 << 20), figures[1] / (1 << 20), figures[2] / (1 << 20),
        o.ranks);
    std::fflush(stdout);
    std::FILE* f = std::fopen(("zero_memory." + std::to_string(zero_stage)).c_str(), "w");
    if (f != nullptr) {
      std::fprintf(f, "%.17g\n", figures[0]);
      std::fclose(f);
    }
  }
  trainer.reset();
  group.reset();
  client.reset();
  if (server)
    server->WaitForClientsToLeave(60s);
  return 0;
}

double ReadFigure(const std::string& path) {
  std::ifstream in(path);
  double v = -1;
  in >> v;
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (argc > 1)
    o.ranks = std::atoi(argv[1]);
  if (argc > 2)
    o.layers = std::atoi(argv[2]);
  if (argc > 3)
    o.d_model = std::atoi(argv[3]);
  if (argc > 4)
    o.data = argv[4];
  if (o.ranks < 2 || o.layers < 1 || o.d_model < 4 || o.d_model % 4 != 0) {
    std::fprintf(stderr,
                 "usage: zero_memory_bench [ranks>=2] [layers] [dModel, a multiple of 4] "
                 "[data file]\n");
    return 2;
  }
  std::printf("# %d ranks, GPT %d layers x %d, AdamW (2 float32 moments per parameter)\n", o.ranks,
              o.layers, o.d_model);
  std::fflush(stdout);
  int failed = 0;
  for (int zero_stage : {0, 1}) {
    auto results = comm::RunLocalGang(
        o.ranks, [&](int rank, int fd, int port) { return RunRank(rank, fd, port, o, zero_stage); },
        600s);
    for (const auto& r : results) {
      if (r.rank == 0 || r.signaled || r.exit_code != 0)
        std::printf("%s", r.output.c_str());
      failed += r.signaled || r.exit_code != 0;
    }
  }
  if (failed != 0)
    return 1;
  const double replicated = ReadFigure("zero_memory.0"), sharded = ReadFigure("zero_memory.1");
  std::remove("zero_memory.0");
  std::remove("zero_memory.1");
  std::printf("ratio=%.4f (ZeRO-1 optimizer bytes per rank / replicated; 1/N = %.4f)\n",
              sharded / replicated, 1.0 / o.ranks);
  return 0;
}
