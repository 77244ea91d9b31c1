// `tessera-worker`: the per-pod process. `tessera-worker rank --config FILE` runs one
// training rank of the built-in GPT trainer from the environment of DESIGN.md §3; with
// WORLD_SIZE > 1 rank 0 serves the rendezvous store at TESSERA_RDZV_ENDPOINT's port and every
// rank joins the data-parallel process group through it. Starting and supervising several
// rank processes per pod is `tessera-worker agent` (worker/agent.h), the pod's entry point.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <unistd.h>
#include <chrono>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "api/flag_checks.h"
#include "api/version.h"
#include "worker/agent.h"
#include "worker/comm/device_mesh.h"
#include "worker/comm/gloo_process_group.h"
#include "worker/comm/nccl_process_group.h"
#include "worker/rendezvous/store_client.h"
#include "worker/rendezvous/store_error.h"
#include "worker/rendezvous/store_server.h"
#include "worker/termination_message.h"
#include "worker/train/config.h"
#include "worker/train/from_api.h"
#include "worker/train/gpu_replica.h"
#include "worker/train/memory.h"
#include "worker/train/plan.h"
#include "worker/train/trainer.h"

namespace {

namespace api = tessera::api;
using tessera::train::BadConfig;
using tessera::train::Status;

tessera::train::Trainer* g_trainer = nullptr;
volatile std::sig_atomic_t g_signal = 0;

void OnStopSignal(int signal) {
  g_signal = signal;
  if (g_trainer != nullptr)
    g_trainer->RequestStop();
}

// Reads an integer environment variable into *out when it is set.
Status IntFromEnv(const char* name, int min, int max, int* out) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0')
    return Status::Ok();
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < min || value > max) {
    return BadConfig(std::string(name) + "=" + text + ": expected an integer in [" +
                     std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  *out = static_cast<int>(value);
  return Status::Ok();
}

// The environment of DESIGN.md §3 overrides the file: RANK, WORLD_SIZE, LOCAL_RANK,
// TESSERA_MESH, TESSERA_CHECKPOINT_DIR, TESSERA_METRICS_PORT.
Status ApplyEnvironment(tessera::train::TrainerConfig* config, tessera::train::RankContext* rank) {
  if (Status st = IntFromEnv("RANK", 0, 1 << 20, &rank->rank); !st.ok())
    return st;
  if (Status st = IntFromEnv("WORLD_SIZE", 1, 1 << 20, &rank->world_size); !st.ok())
    return st;
  if (Status st = IntFromEnv("LOCAL_RANK", 0, 1 << 20, &rank->local_rank); !st.ok())
    return st;
  if (Status st = IntFromEnv("TESSERA_METRICS_PORT", -1, 65535, &config->metrics.port); !st.ok()) {
    return st;
  }
  if (const char* dir = std::getenv("TESSERA_CHECKPOINT_DIR"); dir != nullptr && *dir != '\0') {
    config->checkpoint.dir = dir;
  }
  if (const char* mesh = std::getenv("TESSERA_MESH"); mesh != nullptr && *mesh != '\0') {
    rank->mesh = mesh;
  }
  return Status::Ok();
}

// Rank 0's /progress document as it ends, whatever the outcome, so what reports the run has the
// step reached, not that of its last poll: in a pod, the termination message's last line (the
// controller's status.progress); with `tessera run`, TESSERA_PROGRESS_FILE (the runner's
// summary; written beside and renamed, so a reader finds a whole document or none). Best effort.
void WriteFinalProgress(const tessera::train::Trainer& trainer,
                        const tessera::train::RankContext& rank) {
  if (rank.rank != 0)
    return;
  const std::string progress = trainer.ProgressJson();
  tessera::worker::WriteFinalProgressMessage(progress);
  const char* path = std::getenv("TESSERA_PROGRESS_FILE");
  if (path == nullptr || *path == '\0')
    return;
  const std::string temporary = std::string(path) + ".tmp";
  std::ofstream out(temporary, std::ios::trunc);
  out << progress;
  out.close();
  if (!out || std::rename(temporary.c_str(), path) != 0)
    std::remove(temporary.c_str());
}

int Fail(const Status& st) {
  std::cerr << "tessera-worker: " << st.message() << "\n";
  tessera::worker::WriteTerminationMessage(st.message());
  return st.exit_code();
}

// The data-parallel world of a multi-rank job: rank 0's store server (kept until every other
// rank has left, so late readers still find failure reports) and this rank's groups: Gloo
// always, and NCCL on `device` for a GPU job's gradients.
struct World {
  std::unique_ptr<tessera::rendezvous::StoreServer> server;
  std::shared_ptr<tessera::comm::ProcessGroup> group;
  std::shared_ptr<tessera::comm::ProcessGroup> device_group;
  std::chrono::milliseconds timeout{0};

  ~World() {
    device_group.reset();
    group.reset();
    if (server && !server->WaitForClientsToLeave(timeout)) {
      spdlog::warn("rendezvous store: {} ranks still connected after {} s; stopping anyway",
                   server->connected_clients(), timeout.count() / 1000);
    }
  }
};

// `device` >= 0: also form the world over NCCL on that CUDA device.
Status JoinWorld(const tessera::train::RankContext& rank, int device, World* world) {
  namespace rdzv = tessera::rendezvous;
  namespace comm = tessera::comm;
  rdzv::StoreClientOptions client;
  try {
    client = rdzv::StoreClientOptions::FromEnv();
  } catch (const rdzv::StoreError& e) {
    return BadConfig(e.what());  // a missing or malformed variable, not a lost peer
  }
  try {
    const comm::GlooOptions gloo = comm::GlooOptions::FromEnv();
    world->timeout = gloo.comm.timeout;
    if (rank.rank == 0) {
      rdzv::StoreServerOptions options;
      options.port = client.port;
      options.token = client.token;
      world->server = rdzv::StoreServer::Start(options);
      spdlog::info("rendezvous store listening on port {}", world->server->port());
    }
    const rdzv::StoreClient store(client);
    world->group = comm::CreateGlooProcessGroup(store, rank.rank, rank.world_size, gloo);
    spdlog::info("joined the world group: rank {} of {} ({})", rank.rank, rank.world_size,
                 world->group->backend());
    if (device >= 0) {
      comm::NcclOptions nccl;
      nccl.comm = gloo.comm;
      nccl.prefix = "tessera/nccl/";
      world->device_group =
          comm::CreateNcclProcessGroup(store, rank.rank, rank.world_size, device, nccl);
      spdlog::info("joined the device world group on CUDA device {} (nccl)", device);
    }
  } catch (const comm::CommConfigError& e) {
    return BadConfig(e.what());
  } catch (const rdzv::StoreError& e) {
    return tessera::train::CommFailed(std::string("rendezvous: ") + e.what());
  } catch (const comm::CommError& e) {
    return tessera::train::CommFailed(e.what());
  }
  return Status::Ok();
}

int RunRank(const std::string& config_path, const std::vector<std::string>& overrides,
            int threads) {
  tessera::train::TrainerConfig config;
  tessera::train::RankContext rank;
  if (Status st = tessera::train::LoadTrainerConfigOrJob(config_path, &config); !st.ok())
    return Fail(st);
  for (const std::string& assignment : overrides) {
    if (Status st = tessera::train::ApplyTrainerConfigOverride(assignment, &config); !st.ok()) {
      return Fail(st);
    }
  }
  if (Status st = ApplyEnvironment(&config, &rank); !st.ok())
    return Fail(st);
  rank.kernel_threads = threads;
  // Checked before joining, so a bad file fails at once on every rank instead of as a lost
  // peer on the others.
  std::string mesh_error;
  const std::optional<tessera::comm::MeshShape> mesh =
      tessera::comm::MeshShape::Parse(rank.mesh, &mesh_error);
  if (!mesh)
    return Fail(BadConfig("TESSERA_MESH=" + rank.mesh + ": " + mesh_error));
  if (Status st = tessera::train::ValidateTrainerConfig(config, rank.world_size, mesh->pipeline,
                                                        mesh->tensor);
      !st.ok()) {
    return Fail(st);
  }

  try {
    (void)tessera::comm::ComputeNiceFromEnv();  // checked before joining, like the config
  } catch (const tessera::comm::CommConfigError& e) {
    return Fail(BadConfig(e.what()));
  }
  // A GPU job on a machine without a usable GPU fails here, on every rank alike.
  int device = -1;
  if (config.precision == tessera::train::Precision::kBf16) {
    if (Status st = tessera::train::CheckGpu(rank.local_rank, &device); !st.ok())
      return Fail(st);
  }
  World world;
  if (rank.world_size > 1) {
    if (Status st = JoinWorld(rank, device, &world); !st.ok())
      return Fail(st);
    rank.world_group = world.group;
    rank.device_group = world.device_group;
  }
  std::unique_ptr<tessera::train::Trainer> trainer;
  const Status created = tessera::train::Trainer::Create(config, rank, &trainer);
  // From here the trainer (destroyed before `world`) holds the only reference to the group, so
  // rank 0's store sees this rank's own connections close too.
  rank.world_group.reset();
  rank.device_group.reset();
  if (!created.ok())
    return Fail(created);
  g_trainer = trainer.get();
  std::signal(SIGTERM, OnStopSignal);
  std::signal(SIGINT, OnStopSignal);
  tessera::train::TrainResult result;
  const Status st = trainer->Run({}, &result);
  WriteFinalProgress(*trainer, rank);
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  g_trainer = nullptr;
  if (!st.ok())
    return Fail(st);
  if (g_signal != 0 && result.steps_completed < config.schedule.steps) {
    spdlog::info("stopped by signal {} at step {}", static_cast<int>(g_signal),
                 result.steps_completed);
    return 128 + g_signal;
  }
  if (g_signal != 0) {
    // It came during the last step (or after it): what it asks for, finish the step and write
    // a checkpoint, is what the end of the run does. The run is finished; 143 would fail the
    // attempt (a gang restart to find the last checkpoint, or a Failed job without restarts).
    spdlog::info("signal {} came at the end of the run: all {} steps are done",
                 static_cast<int>(g_signal), result.steps_completed);
  }
  if (result.steps_completed < config.schedule.steps) {
    // Another rank was stopped by a signal and this one stopped with it, at the same step.
    // Exit 0 would say the run is finished (worker 0's 0 makes the job Succeeded): exit 143, as
    // a rank stopped by SIGTERM does, so the gang is resumed from the checkpoint just written.
    const std::string which =
        result.signaled_rank >= 0   ? fmt::format("rank {}, which", result.signaled_rank)
        : result.signaled_ranks > 1 ? fmt::format("the {} ranks", result.signaled_ranks)
                                    : std::string("the rank");
    spdlog::info("stopped at step {} of {} with {} a signal stopped", result.steps_completed,
                 config.schedule.steps, which);
    return 128 + SIGTERM;
  }
  return 0;
}

// The agent of a built-in trainer's pod, before it starts the ranks: they start together and
// share the pod's memory, and each checks only its own share, so a pod whose ranks fit one by
// one but not together is refused here (exit 2, naming the fields). What this cannot read — the
// configuration, the environment — is left to the ranks and RunAgent, which report it.
int CheckPodMemory(const std::string& config_path, const std::vector<std::string>& overrides) {
  namespace train = tessera::train;
  train::TrainerConfig config;
  if (!train::LoadTrainerConfigOrJob(config_path, &config).ok())
    return 0;
  for (const std::string& assignment : overrides) {
    if (!train::ApplyTrainerConfigOverride(assignment, &config).ok())
      return 0;
  }
  // WORLD_SIZE and TESSERA_MESH as each rank reads them; RANK is not set in the agent.
  train::RankContext rank;
  int node_rank = 0, procs = 1;
  if (config.precision != train::Precision::kFp32 || !ApplyEnvironment(&config, &rank).ok() ||
      !IntFromEnv("TESSERA_NODE_RANK", 0, 1 << 20, &node_rank).ok() ||
      !IntFromEnv("TESSERA_PROCS_PER_NODE", 1, 1 << 20, &procs).ok() || procs <= 1 ||
      static_cast<int64_t>(node_rank + 1) * procs > rank.world_size) {
    return 0;
  }
  std::string mesh_error;
  const std::optional<tessera::comm::MeshShape> mesh =
      tessera::comm::MeshShape::Parse(rank.mesh, &mesh_error);
  train::TrainingPlan plan;
  if (!mesh ||
      !train::PlanTraining(config, rank.world_size, mesh->pipeline, mesh->tensor, &plan).ok())
    return 0;
  const std::optional<int64_t> available = train::AvailableMemoryBytes();
  if (!available)
    return 0;
  if (Status st = train::CheckPodFits(plan, node_rank * procs, procs, *available); !st.ok())
    return Fail(st);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera-worker: runs the training ranks of one pod"};
  bool print_version = false;
  app.add_flag("--version", print_version, "Print the version and exit");

  CLI::App* rank_cmd =
      app.add_subcommand("rank", "Run one rank of the built-in GPT trainer (see docs/training.md)");
  std::string config_path;
  std::vector<std::string> overrides;
  int threads = 0;
  rank_cmd->add_option("--config", config_path, "Trainer YAML, or a TrainingJob file")->required();
  rank_cmd->add_option("--set", overrides, "Override a field: key=value (camelCase path)");
  rank_cmd->add_option("--threads", threads, "Kernel threads (0 = OMP_NUM_THREADS or all cores)")
      ->check(CLI::Range(0, 1024));

  CLI::App* agent_cmd = app.add_subcommand(
      "agent",
      "Run this pod's TESSERA_PROCS_PER_NODE ranks and supervise them (the pod's entry point): "
      "`tessera-worker rank` with the options below, or the command after --");
  std::string agent_config;
  std::vector<std::string> agent_overrides;
  std::vector<std::string> agent_command;
  int agent_threads = 0;
  double grace_seconds = 30;
  agent_cmd->add_option("--config", agent_config, "Trainer YAML, or a TrainingJob file");
  agent_cmd->add_option("--set", agent_overrides, "Passed to every rank");
  agent_cmd->add_option("--threads", agent_threads, "Passed to every rank")
      ->check(CLI::Range(0, 1024));
  agent_cmd
      ->add_option("--grace", grace_seconds,
                   "Seconds ranks get to stop after SIGTERM before SIGKILL (default 30)")
      ->check(tessera::NotNaN())
      ->check(CLI::Range(0.0, 86400.0));
  agent_cmd->add_option("command", agent_command, "Your own trainer, after --");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0)
      return app.exit(e);  // --help
    std::cerr << tessera::ParseErrorLine("tessera-worker", app, e) << '\n';
    return 2;
  }
  if (print_version) {
    std::cout << tessera::FormatBuildInfo(tessera::GetBuildInfo());
    return 0;
  }
  if (*rank_cmd) {
    spdlog::set_default_logger(spdlog::stderr_color_mt("tessera"));
    return RunRank(config_path, overrides, threads);
  }
  if (*agent_cmd) {
    spdlog::set_default_logger(spdlog::stderr_color_mt("tessera"));
    tessera::worker::AgentOptions options;
    options.grace = std::chrono::milliseconds(static_cast<int64_t>(grace_seconds * 1000));
    // Either the built-in trainer or your own command: the options of the one are no part of
    // the other, and silently dropping them would run something else than was asked.
    if (!agent_command.empty() && agent_cmd->count("--config") > 0) {
      std::cerr << "tessera-worker agent: --config " << agent_config << " and a command after -- ("
                << agent_command.front()
                << ") both given; choose one: --config for the built-in trainer, or the command "
                   "for your own\n";
      return 2;
    }
    if (!agent_command.empty() &&
        (agent_cmd->count("--set") > 0 || agent_cmd->count("--threads") > 0)) {
      std::cerr << "tessera-worker agent: "
                << (agent_cmd->count("--set") > 0 ? "--set" : "--threads")
                << " applies to the built-in trainer (--config), not to a command after -- ("
                << agent_command.front() << "); leave it out or use --config\n";
      return 2;
    }
    if (!agent_command.empty()) {
      options.command = agent_command;
    } else if (!agent_config.empty()) {
      options.command = {"/proc/self/exe", "rank", "--config", agent_config};
      char self[4096];
      const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
      if (n > 0)
        options.command[0] = std::string(self, static_cast<size_t>(n));
      for (const std::string& o : agent_overrides) {
        options.command.push_back("--set");
        options.command.push_back(o);
      }
      if (agent_threads > 0) {
        options.command.push_back("--threads");
        options.command.push_back(std::to_string(agent_threads));
      }
      if (const int rc = CheckPodMemory(agent_config, agent_overrides); rc != 0)
        return rc;
    } else {
      std::cerr << "tessera-worker agent: give --config FILE (the built-in trainer) or a "
                   "command after --\n";
      return 2;
    }
    return tessera::worker::RunAgent(options);
  }
  std::cerr << "tessera-worker: no command; run `tessera-worker rank --config FILE` "
               "(see --help)\n";
  return 2;
}
