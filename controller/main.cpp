// `tessera-controller`: reconciles TrainingJob resources against a Kubernetes API server
// (DESIGN.md §5). Flags, logging, the metrics and health endpoints, signals; the reconcile
// loop itself lives in controller/reconcile/. docs/controller.md documents the flags.
#include <CivetServer.h>
#include <arpa/inet.h>
#include <malloc.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>
#include <spdlog/fmt/fmt.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "api/flag_checks.h"
#include "api/version.h"
#include "controller/k8s/cancellation.h"
#include "controller/k8s/config.h"
#include "controller/k8s/events.h"
#include "controller/k8s/leader_election.h"
#include "controller/k8s/rest.h"
#include "controller/k8s/transport_cpprest.h"
#include "controller/reconcile/controller.h"
#include "controller/reconcile/events.h"
#include "controller/reconcile/metrics.h"
#include "controller/reconcile/progress.h"
#include "controller/reconcile/rfc3339.h"

namespace {

using tessera::reconcile::FormatMicroTime;

constexpr int kExitBadConfig = 2;

// One JSON object per line: {"ts", "level", "msg"}.
class JsonLineSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    nlohmann::json line = {
        {"ts", FormatMicroTime(
                   std::chrono::time_point_cast<std::chrono::system_clock::duration>(msg.time))},
        {"level", std::string(spdlog::level::to_string_view(msg.level).data(),
                              spdlog::level::to_string_view(msg.level).size())},
        {"msg", std::string(msg.payload.data(), msg.payload.size())}};
    std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    text.push_back('\n');
    std::fwrite(text.data(), 1, text.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }
};

void ConfigureLogging(const std::string& format, int verbosity) {
  std::shared_ptr<spdlog::logger> logger;
  if (format == "json") {
    logger = std::make_shared<spdlog::logger>("tessera", std::make_shared<JsonLineSink>());
  } else {
    logger = std::make_shared<spdlog::logger>("tessera",
                                              std::make_shared<spdlog::sinks::stderr_sink_mt>());
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %L %v", spdlog::pattern_time_type::utc);
  }
  logger->set_level(verbosity >= 2   ? spdlog::level::trace
                    : verbosity == 1 ? spdlog::level::debug
                                     : spdlog::level::info);
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

// ":8080" -> "0.0.0.0:8080"; "127.0.0.1:9090" stays; "0" disables (returns "").
std::optional<std::string> CivetAddress(const std::string& flag) {
  if (flag == "0")
    return std::string();
  const auto colon = flag.rfind(':');
  if (colon == std::string::npos)
    return std::nullopt;
  const std::string host = flag.substr(0, colon);
  const std::string port = flag.substr(colon + 1);
  if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  // civetweb reads a dotted host itself, each number modulo 256 (999.0.0.1 listened on the
  // multicast address 231.0.0.1): such a host must be an IPv4 address. Names are looked up.
  in_addr ipv4{};
  if (!host.empty() && host.find_first_not_of("0123456789.") == std::string::npos &&
      ::inet_pton(AF_INET, host.c_str(), &ipv4) != 1)
    return std::nullopt;
  return (host.empty() ? std::string("0.0.0.0") : host) + ":" + port;
}

class TextHandler final : public CivetHandler {
 public:
  explicit TextHandler(std::function<bool()> healthy) : healthy_(std::move(healthy)) {}
  bool handleGet(CivetServer*, mg_connection* conn) override {
    const bool ok = healthy_();
    const std::string body = ok ? "ok\n" : "not ready\n";
    mg_printf(conn,
              "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
              "Connection: close\r\n\r\n",
              ok ? "200 OK" : "503 Service Unavailable", body.size());
    mg_write(conn, body.data(), body.size());
    return true;
  }

 private:
  std::function<bool()> healthy_;
};

// This replica's name: $POD_NAME in a pod, else <hostname>_<pid>.
std::string InstanceName() {
  if (const char* pod = std::getenv("POD_NAME"); pod && *pod)
    return pod;
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0)
    std::snprintf(host, sizeof(host), "unknown");
  return std::string(host) + "_" + std::to_string(getpid());
}

// The rules of ValidateLeaderElectionConfig between the leader-election timings, as one line
// naming the flags and the values given; "" when they hold. Compared in whole milliseconds,
// as the elector uses them, so this and the elector's own check agree.
std::string LeaderElectionFlagProblem(const tessera::k8s::LeaderElectionConfig& election,
                                      double lease_duration, double renew_deadline,
                                      double retry_period) {
  if (election.renew_deadline >= election.lease_duration) {
    return fmt::format(
        "--leader-election-renew-deadline {} must be less than "
        "--leader-election-lease-duration {}",
        renew_deadline, lease_duration);
  }
  if (election.renew_deadline.count() * 10 <= election.retry_period.count() * 12) {
    return fmt::format(
        "--leader-election-renew-deadline {} must be more than 1.2 times "
        "--leader-election-retry-period {} ({:g})",
        renew_deadline, retry_period, retry_period * 1.2);
  }
  return "";
}

std::string DefaultLeaseNamespace() {
  if (const char* ns = std::getenv("POD_NAMESPACE"); ns && *ns)
    return ns;
  return "tessera-system";
}

}  // namespace

int main(int argc, char** argv) {
  // glibc gives each thread that allocates its own arena (up to 8 per core), and the HTTP,
  // watch and reconcile threads all parse JSON; two arenas keep the resident set near the
  // caches' size instead of holding freed memory per thread. MALLOC_ARENA_MAX overrides it.
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr)
    mallopt(M_ARENA_MAX, 2);
  CLI::App app{"tessera-controller: runs TrainingJobs as gangs of worker pods"};
  bool print_version = false;
  std::string kubeconfig;
  std::string context;
  std::string namespace_;
  int workers = 4;
  std::string metrics_address = ":8080";
  std::string health_address = ":8081";
  double qps = 20;
  int burst = 30;
  std::string log_format = "text";
  int verbosity = 0;
  std::string progress_polling = "pods";
  double progress_interval = 5;
  double pod_event_batch = 1;
  double sync_timeout = 120;
  bool leader_elect = false;
  std::string lease_namespace = DefaultLeaseNamespace();
  std::string lease_name = "tessera-controller";
  double lease_duration = 15;
  double renew_deadline = 10;
  double retry_period = 2;
  app.add_flag("--version", print_version, "Print the version and exit");
  app.add_option("--kubeconfig", kubeconfig,
                 "Kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)");
  app.add_option("--context", context, "Kubeconfig context (default: current-context)");
  app.add_option("--namespace", namespace_, "Watch only this namespace (default: all)");
  app.add_option("--workers", workers, "Jobs reconciled concurrently")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--metrics-bind-address", metrics_address,
                 "Serve /metrics here (host:port, :port; 0 disables)")
      ->capture_default_str();
  app.add_option("--health-probe-bind-address", health_address,
                 "Serve /healthz and /readyz here (host:port, :port; 0 disables)")
      ->capture_default_str();
  app.add_option("--qps", qps, "Client-side limit on API requests per second")
      ->check(tessera::NotNaN())
      ->check(CLI::Range(0.01, 1e6))
      ->capture_default_str();
  app.add_option("--burst", burst, "Client-side burst of API requests")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--log-format", log_format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_flag("-v,--verbose", verbosity, "More logging (-v debug, -vv trace)");
  app.add_option("--progress-polling", progress_polling,
                 "Read rank 0's /progress: pods (its pod IP), loopback-only (tests), off")
      ->check(CLI::IsMember({"pods", "loopback-only", "off"}))
      ->capture_default_str();
  app.add_option("--progress-interval", progress_interval, "Seconds between /progress reads")
      ->check(tessera::NotNaN())
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str();
  app.add_option("--pod-event-batch", pod_event_batch,
                 "Seconds a pod event waits for others of its job before one reconcile (0: none)")
      ->check(tessera::NotNaN())
      ->check(CLI::Range(0.0, 60.0))
      ->capture_default_str();
  app.add_option("--cache-sync-timeout", sync_timeout,
                 "Seconds to wait for the first list of every watched resource")
      ->check(tessera::NotNaN())
      ->check(CLI::Range(0.01, 86400.0))
      ->capture_default_str();
  app.add_flag("--leader-elect", leader_elect,
               "Elect a leader on a Lease; only the leader reconciles");
  app.add_option("--leader-election-namespace", lease_namespace,
                 "Namespace of the Lease (default: $POD_NAMESPACE, else tessera-system)")
      ->capture_default_str();
  app.add_option("--leader-election-id", lease_name, "Name of the Lease")->capture_default_str();
  app.add_option("--leader-election-lease-duration", lease_duration,
                 "Seconds a silent leader keeps the Lease")
      ->check(tessera::NotNaN())
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str();
  app.add_option("--leader-election-renew-deadline", renew_deadline,
                 "Seconds the leader keeps trying to renew before giving up")
      ->check(tessera::NotNaN())
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str();
  app.add_option("--leader-election-retry-period", retry_period,
                 "Seconds between attempts to acquire or renew")
      ->check(tessera::NotNaN())
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0) {
      // One line, as every other refusal (docs/controller.md); app.exit would add a second,
      // pointing at --help.
      std::cerr << e.what() << '\n';
      return kExitBadConfig;
    }
    return app.exit(e);  // --help
  }
  if (print_version) {
    std::cout << tessera::FormatBuildInfo(tessera::GetBuildInfo());
    return 0;
  }
  ConfigureLogging(log_format, verbosity);

  const auto metrics_bind = CivetAddress(metrics_address);
  if (!metrics_bind) {
    spdlog::error("--metrics-bind-address {}: expected host:port, :port or 0", metrics_address);
    return kExitBadConfig;
  }
  const auto health_bind = CivetAddress(health_address);
  if (!health_bind) {
    spdlog::error("--health-probe-bind-address {}: expected host:port, :port or 0", health_address);
    return kExitBadConfig;
  }

  auto seconds = [](double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); };
  const std::string instance = InstanceName();
  tessera::k8s::LeaderElectionConfig election;
  election.lease_namespace = lease_namespace;
  election.lease_name = lease_name;
  election.identity = instance;
  election.lease_duration = seconds(lease_duration);
  election.renew_deadline = seconds(renew_deadline);
  election.retry_period = seconds(retry_period);
  if (leader_elect) {
    std::string problem =
        LeaderElectionFlagProblem(election, lease_duration, renew_deadline, retry_period);
    if (problem.empty())
      problem = tessera::k8s::ValidateLeaderElectionConfig(election);  // Lease, identity
    if (!problem.empty()) {
      spdlog::error("{}", problem);
      return kExitBadConfig;
    }
  }

  auto config = tessera::k8s::LoadDefaultConfig(kubeconfig, context);
  if (!config.ok()) {
    spdlog::error("{}", config.error());
    return kExitBadConfig;
  }
  auto transport = tessera::k8s::NewCpprestTransport(*config);
  if (!transport.ok()) {
    spdlog::error("{}", transport.error());
    return kExitBadConfig;
  }

  // Signals are taken by one thread with sigwait; every other thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // The signal thread is detached and may still be inside Cancel when main returns, so it
  // shares ownership of what it touches.
  auto stop_owner = std::make_shared<tessera::k8s::Cancellation>();
  tessera::k8s::Cancellation& stop = *stop_owner;
  std::thread signal_thread([signals, stop_owner] {
    int signal = 0;
    while (sigwait(&signals, &signal) == 0) {
      if (signal == SIGTERM || signal == SIGINT) {
        spdlog::info("received {}; stopping", signal == SIGTERM ? "SIGTERM" : "SIGINT");
        stop_owner->Cancel();
        return;
      }
    }
  });
  signal_thread.detach();

  tessera::reconcile::ControllerMetrics metrics;
  tessera::k8s::RestOptions rest_options;
  rest_options.qps = qps;
  rest_options.burst = burst;
  rest_options.observer = [&metrics](const std::string& verb, int code) {
    metrics.ObserveApiRequest(verb, code);
  };
  // Leader election has a client of its own, as in client-go: its renewals never wait behind
  // the reconcile traffic's rate limit, and the shutdown's cancellation of the reconcile
  // traffic (controller->Stop) leaves it able to release the Lease afterwards.
  tessera::k8s::RestClient election_client(**transport, *config, rest_options);
  tessera::k8s::Cancellation cancel_requests;  // Stop cancels every reconcile request
  rest_options.cancel = &cancel_requests;
  tessera::k8s::RestClient client(**transport, *config, rest_options);

  std::unique_ptr<prometheus::Exposer> exposer;
  if (!metrics_bind->empty()) {
    try {
      exposer = std::make_unique<prometheus::Exposer>(*metrics_bind, 2);
    } catch (const std::exception& e) {
      spdlog::error("--metrics-bind-address {}: cannot listen ({})", metrics_address, e.what());
      return kExitBadConfig;
    }
    exposer->RegisterCollectable(metrics.registry());
    for (int port : exposer->GetListeningPorts())
      spdlog::info("serving metrics on port {} (/metrics)", port);
  }

  tessera::k8s::EventRecorder recorder(
      client, {.reporting_controller = "tessera.dev/controller", .reporting_instance = instance});
  tessera::reconcile::ApiEventSink events(recorder);
  auto reader = tessera::reconcile::NewHttpProgressReader();
  tessera::reconcile::ProgressPoller::Options poll_options;
  poll_options.polling = *tessera::reconcile::ParseProgressPolling(progress_polling);
  poll_options.interval = std::chrono::milliseconds(static_cast<int64_t>(progress_interval * 1000));
  std::unique_ptr<tessera::reconcile::Controller> controller;
  std::atomic<tessera::reconcile::Controller*> controller_ptr{nullptr};
  tessera::reconcile::ProgressPoller poller(*reader, poll_options, [&](const std::string& key) {
    if (auto* c = controller_ptr.load())
      c->Enqueue(key);
  });

  tessera::reconcile::ControllerOptions options;
  options.namespace_ = namespace_;
  options.workers = workers;
  options.pod_event_batch = std::chrono::milliseconds(static_cast<int64_t>(pod_event_batch * 1000));
  options.cancel_requests = &cancel_requests;
  controller =
      std::make_unique<tessera::reconcile::Controller>(client, events, &metrics, &poller, options);
  controller_ptr = controller.get();

  std::unique_ptr<CivetServer> health;
  TextHandler healthz([] { return true; });
  TextHandler readyz([&controller] { return controller->Synced(); });
  if (!health_bind->empty()) {
    try {
      health = std::make_unique<CivetServer>(
          std::vector<std::string>{"listening_ports", *health_bind, "num_threads", "2"});
    } catch (const std::exception& e) {
      spdlog::error("--health-probe-bind-address {}: cannot listen ({})", health_address, e.what());
      return kExitBadConfig;
    }
    health->addHandler("/healthz", &healthz);
    health->addHandler("/readyz", &readyz);
    for (int port : health->getListeningPorts())
      spdlog::info("serving health probes on port {} (/healthz, /readyz)", port);
  }

  spdlog::info("tessera-controller {} watching {} on {}", tessera::GetBuildInfo().version,
               namespace_.empty() ? std::string("all namespaces") : "namespace " + namespace_,
               config->server);
  controller->StartInformers();
  const auto sync_deadline = std::chrono::steady_clock::now() + seconds(sync_timeout);
  while (!controller->WaitForSync(std::chrono::milliseconds(200))) {
    if (stop.IsCancelled()) {
      controller->Stop();
      return 0;
    }
    if (std::chrono::steady_clock::now() >= sync_deadline) {
      spdlog::error(
          "caches did not sync within {}s: is {} reachable, is the TrainingJob CRD installed "
          "(manifests/crd/), and may this identity list and watch trainingjobs, pods and "
          "nodes (manifests/rbac/)?",
          sync_timeout, config->server);
      controller->Stop();
      return 1;
    }
  }
  int exit_code = 0;
  if (!leader_elect) {
    spdlog::info("caches synced; starting {} workers", workers);
    metrics.SetLeader(true);
    controller->RunWorkers();
    poller.Start();
    stop.WaitFor(std::chrono::hours(24 * 365 * 100));
  } else {
    // The elector campaigns on its own thread. Losing the lease (not by our own stop) ends
    // the process, as client-go controllers do: a fresh start is the safe way back.
    tessera::k8s::Cancellation election_stop;
    std::atomic<bool> lost{false};
    election.on_started_leading = [&] {
      spdlog::info("became leader ({}/{}); starting {} workers", lease_namespace, lease_name,
                   workers);
      metrics.SetLeader(true);
      controller->RunWorkers();
      poller.Start();
    };
    election.on_stopped_leading = [&] {
      metrics.SetLeader(false);
      if (!election_stop.IsCancelled()) {
        spdlog::error("lost the leader lease {}/{}; exiting", lease_namespace, lease_name);
        lost = true;
        stop.Cancel();
      }
    };
    election.on_new_leader = [&](const std::string& who) {
      if (who != instance)
        spdlog::info("leader is {}", who);
    };
    tessera::k8s::LeaderElector elector(election_client, election);
    spdlog::info("campaigning for the leader lease {}/{} as {}", lease_namespace, lease_name,
                 instance);
    std::thread election_thread([&] { elector.Run(election_stop); });
    stop.WaitFor(std::chrono::hours(24 * 365 * 100));
    // Stop acting before handing the lease on, so two leaders never act at once: no queued
    // key is taken, requests in flight are cancelled, and the workers have returned before
    // the elector (stopped only now) releases the Lease. The progress poller only enqueues
    // keys, which the stopped queue ignores: it may stop after the release.
    controller->Stop();
    election_stop.Cancel();
    election_thread.join();
    if (lost)
      exit_code = 1;
  }
  controller->Stop();
  poller.Stop();
  metrics.SetLeader(false);
  spdlog::info("stopped");
  return exit_code;
}
