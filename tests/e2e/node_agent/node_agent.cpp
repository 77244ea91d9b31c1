// tessera-node-agent: a stand-in kubelet for the end-to-end tests (DESIGN.md §9). It registers
// a Node and runs the worker container of every pod bound to it as a real process on this
// machine, so `kubectl apply` -> tessera-controller -> pods -> real training -> `Succeeded`
// runs end to end against the local control plane, where kwok's simulated nodes run nothing.
//
// What it does for a pod, as a kubelet would:
// - command and args of the container named `worker` (else the first), with the container's
//   env resolved (literal values, secretKeyRef, fieldRef); configMap volumes written to files
//   and emptyDir volumes made as directories under --work-dir, hostPath volumes used in place;
//   a mountPath at the start of an argument or an env value is rewritten to where the volume is;
// - the pod's status: Running (podIP 127.0.0.1, Ready) once started, then Succeeded or Failed
//   with the container's exit code (128 + signal when killed) and
//   what the container wrote to its termination message file (TESSERA_TERMINATION_MESSAGE_PATH
//   points there), or, when it asks for terminationMessagePolicy FallbackToLogsOnError and
//   failed, the tail of its log, as message;
// - deletion: SIGTERM to the process group, SIGKILL after the grace period, then the pod is
//   removed (a delete with grace 0, as the kubelet confirms a deletion);
// - the Node's Ready condition, renewed every few seconds, and a NoSchedule taint
//   `tessera.dev/node-agent` so that only pods which tolerate it land here.
// What stands in for the cluster network: every pod is 127.0.0.1, so the rendezvous endpoint's
// host and MASTER_ADDR become 127.0.0.1, TESSERA_COMM_HOST is set to it, and every worker but
// worker 0 (whose port the controller polls for progress) gets a free metrics port.
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/run/process.h"
#include "controller/k8s/config.h"
#include "controller/k8s/connect.h"
#include "controller/k8s/rest.h"
#include "controller/reconcile/rfc3339.h"

namespace {

namespace fs = std::filesystem;
namespace k8s = tessera::k8s;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using tessera::reconcile::FormatTime;

constexpr const char* kTaintKey = "tessera.dev/node-agent";
// The kubelet's limits for a termination message taken from the log.
constexpr size_t kMessageLines = 80;
constexpr size_t kMessageBytes = 2048;

volatile std::sig_atomic_t g_stop = 0;
void OnStop(int) {
  g_stop = 1;
}

std::string Now() {
  return FormatTime(std::chrono::system_clock::now());
}

// A pod whose container this agent started.
struct Running {
  std::string ns, name, uid;
  std::string container;  // its name
  pid_t pid = -1;
  std::string started_at;
  std::string log;
  std::string termination_log;    // the container's terminationMessagePath, on this machine
  bool fallback_to_logs = false;  // terminationMessagePolicy: FallbackToLogsOnError
  bool exited = false;
  int exit_code = 0;
  std::optional<Clock::time_point> kill_at;  // SIGTERM sent; SIGKILL at this time
};

class Agent {
 public:
  Agent(k8s::RestClient& client, std::string node, fs::path work)
      : client_(client), node_(std::move(node)), work_(std::move(work)) {}

  bool Register() {
    const std::string now = Now();
    Json node = {
        {"apiVersion", "v1"},
        {"kind", "Node"},
        {"metadata",
         {{"name", node_},
          {"labels",
           {{"kubernetes.io/hostname", node_},
            {"kubernetes.io/os", "linux"},
            {kTaintKey, "true"}}}}},
        {"spec",
         {{"taints",
           Json::array({{{"key", kTaintKey}, {"value", "true"}, {"effect", "NoSchedule"}}})}}},
        {"status",
         {{"capacity", Capacity()},
          {"allocatable", Capacity()},
          {"addresses", Json::array({{{"type", "InternalIP"}, {"address", "127.0.0.1"}}})},
          {"conditions", Json::array({ReadyCondition(now)})}}},
    };
    auto created = client_.Create(k8s::Nodes(), node);
    if (!created.ok() && !created.error().IsAlreadyExists()) {
      std::cerr << "node-agent: cannot register node " << node_ << ": " << created.error().message
                << "\n";
      return false;
    }
    ready_since_ = now;
    return Heartbeat();
  }

  bool Heartbeat() {
    const Json patch = {{"status", {{"conditions", Json::array({ReadyCondition(Now())})}}}};
    auto r = client_.PatchStatus(k8s::Nodes().Named(node_), k8s::PatchType::kStrategic, patch);
    if (!r.ok())
      std::cerr << "node-agent: heartbeat: " << r.error().message << "\n";
    return r.ok();
  }

  void Deregister() {
    for (auto& [uid, r] : running_) {
      if (!r.exited)
        tessera::cli::SignalProcessGroup(r.pid, SIGKILL);
    }
    client_.Delete(k8s::Nodes().Named(node_));
  }

  // One pass: start what is new, stop what is being deleted, report what exited.
  void Sync() {
    for (const tessera::cli::ReapedChild& child : tessera::cli::ReapExitedChildren()) {
      for (auto& [uid, r] : running_) {
        if (r.pid == child.pid && !r.exited) {
          r.exited = true;
          r.exit_code = child.code;
          ReportExit(r);
        }
      }
    }
    k8s::ListOptions options;
    options.field_selector = "spec.nodeName=" + node_;
    auto list = client_.List(k8s::Pods(), options);
    if (!list.ok()) {
      std::cerr << "node-agent: listing pods: " << list.error().message << "\n";
      return;
    }
    std::map<std::string, bool> seen;
    for (const Json& pod : (*list)["items"]) {
      const Json& meta = pod["metadata"];
      const std::string uid = meta.value("uid", "");
      seen[uid] = true;
      auto it = running_.find(uid);
      if (meta.contains("deletionTimestamp")) {
        if (it == running_.end() || it->second.exited) {
          Remove(meta);
          if (it != running_.end())
            running_.erase(it);
        } else if (!it->second.kill_at) {
          const int64_t grace = meta.value("deletionGracePeriodSeconds", int64_t{30});
          tessera::cli::SignalProcessGroup(it->second.pid, SIGTERM);
          it->second.kill_at = Clock::now() + std::chrono::seconds(grace);
        } else if (Clock::now() >= *it->second.kill_at) {
          tessera::cli::SignalProcessGroup(it->second.pid, SIGKILL);
        }
        continue;
      }
      const std::string phase = pod.value("status", Json::object()).value("phase", "");
      if (it == running_.end() && phase != "Succeeded" && phase != "Failed")
        Start(pod);
    }
    // Pods gone from the API (force-deleted): their processes go too.
    for (auto it = running_.begin(); it != running_.end();) {
      if (!seen.count(it->first)) {
        if (!it->second.exited)
          tessera::cli::SignalProcessGroup(it->second.pid, SIGKILL);
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
  }

 private:
  static Json Capacity() {
    return {{"cpu", "64"}, {"memory", "64Gi"}, {"pods", "110"}, {"ephemeral-storage", "100Gi"}};
  }

  Json ReadyCondition(const std::string& now) const {
    return {{"type", "Ready"},
            {"status", "True"},
            {"reason", "KubeletReady"},
            {"message", "tessera-node-agent is posting ready status"},
            {"lastHeartbeatTime", now},
            {"lastTransitionTime", ready_since_.empty() ? now : ready_since_}};
  }

  static const Json* WorkerContainer(const Json& pod) {
    const Json& containers = pod["spec"]["containers"];
    for (const Json& c : containers) {
      if (c.value("name", "") == "worker")
        return &c;
    }
    return containers.empty() ? nullptr : &containers[0];
  }

  // The value `ref` (a secretKeyRef: name, key) names; nullopt when it cannot be had.
  std::optional<std::string> SecretValue(const std::string& ns, const Json& ref) {
    auto secret = client_.Get(k8s::Secrets(ns).Named(ref.value("name", "")));
    if (!secret.ok() || !(*secret)["data"].contains(ref.value("key", "")))
      return std::nullopt;
    return k8s::DecodeBase64((*secret)["data"][ref.value("key", "")].get<std::string>());
  }

  // Where each volume of the pod is on this machine, by volume name.
  std::map<std::string, fs::path> MaterializeVolumes(const Json& pod, const fs::path& dir,
                                                     std::string* error) {
    std::map<std::string, fs::path> where;
    const std::string ns = pod["metadata"].value("namespace", "");
    const Json volumes = pod["spec"].value("volumes", Json::array());
    for (const Json& v : volumes) {
      const std::string name = v.value("name", "");
      const fs::path at = dir / "volumes" / name;
      if (v.contains("configMap")) {
        const std::string cm = v["configMap"].value("name", "");
        auto got = client_.Get(k8s::ConfigMaps(ns).Named(cm));
        if (!got.ok()) {
          *error = "configMap " + cm + ": " + got.error().message;
          return {};
        }
        fs::create_directories(at);
        const Json data = got->value("data", Json::object());
        for (const auto& [key, value] : data.items())
          std::ofstream(at / key) << value.get<std::string>();
        where[name] = at;
      } else if (v.contains("emptyDir")) {
        fs::create_directories(at);
        where[name] = at;
      } else if (v.contains("hostPath")) {
        where[name] = v["hostPath"].value("path", "");
      }
    }
    return where;
  }

  // `text` with a leading mountPath replaced by where its volume is.
  static std::string Remap(const std::string& text, const std::map<std::string, fs::path>& mounts) {
    std::string best;
    for (const auto& [mount, _] : mounts) {
      if (text.rfind(mount, 0) == 0 && mount.size() > best.size() &&
          (text.size() == mount.size() || text[mount.size()] == '/')) {
        best = mount;
      }
    }
    return best.empty() ? text : mounts.at(best).string() + text.substr(best.size());
  }

  void Start(const Json& pod) {
    const Json& meta = pod["metadata"];
    Running r;
    r.ns = meta.value("namespace", "");
    r.name = meta.value("name", "");
    r.uid = meta.value("uid", "");
    r.started_at = Now();
    const fs::path dir = work_ / (r.ns + "_" + r.name + "_" + r.uid);
    fs::create_directories(dir);
    r.log = (dir / "container.log").string();
    r.termination_log = (dir / "termination-log").string();
    const Json* c = WorkerContainer(pod);
    std::string error;
    std::map<std::string, fs::path> mounts;
    std::vector<std::pair<std::string, std::string>> env;
    std::vector<std::string> argv;
    if (c == nullptr) {
      error = "the pod has no container";
    } else {
      r.container = c->value("name", "");
      r.fallback_to_logs = c->value("terminationMessagePolicy", "") == "FallbackToLogsOnError";
      const std::map<std::string, fs::path> volumes = MaterializeVolumes(pod, dir, &error);
      for (const Json& m : c->value("volumeMounts", Json::array())) {
        auto v = volumes.find(m.value("name", ""));
        if (v != volumes.end())
          mounts[m.value("mountPath", "")] = v->second;
      }
      for (const char* key : {"command", "args"}) {
        for (const Json& a : c->value(key, Json::array()))
          argv.push_back(Remap(a.get<std::string>(), mounts));
      }
      if (argv.empty() && error.empty())
        error = "the container has no command (the agent runs no images)";
      std::ofstream(r.termination_log, std::ios::trunc);  // empty, as the kubelet makes it
      env = Environment(pod, *c, mounts, r.termination_log, &error);
    }
    if (error.empty()) {
      tessera::cli::ProcessSpec spec;
      spec.argv = argv;
      spec.env = env;
      spec.log_path = r.log;
      r.pid = tessera::cli::StartProcessGroup(spec, &error);
    }
    if (!error.empty() || r.pid < 0) {
      std::cerr << "node-agent: " << r.ns << "/" << r.name << ": " << error << "\n";
      r.exited = true;
      r.exit_code = 128;
      std::ofstream(r.log, std::ios::app) << "node-agent: " << error << "\n";
      running_[r.uid] = r;
      ReportExit(running_[r.uid]);
      return;
    }
    std::cerr << "node-agent: started " << r.ns << "/" << r.name << " (pid " << r.pid << ")\n";
    const Json patch = {
        {"status",
         {{"phase", "Running"},
          {"podIP", "127.0.0.1"},
          {"podIPs", Json::array({{{"ip", "127.0.0.1"}}})},
          {"hostIP", "127.0.0.1"},
          {"startTime", r.started_at},
          {"conditions",
           Json::array(
               {{{"type", "Ready"}, {"status", "True"}, {"lastTransitionTime", Now()}},
                {{"type", "ContainersReady"}, {"status", "True"}, {"lastTransitionTime", Now()}}})},
          {"containerStatuses",
           Json::array({{{"name", c->value("name", "")},
                         {"image", c->value("image", "")},
                         {"imageID", ""},
                         {"containerID", fmt::format("tessera-node-agent://{}", r.pid)},
                         {"ready", true},
                         {"started", true},
                         {"restartCount", 0},
                         {"state", {{"running", {{"startedAt", r.started_at}}}}}}})}}}};
    PatchPodStatus(r, patch);
    running_[r.uid] = r;
  }

  std::vector<std::pair<std::string, std::string>> Environment(
      const Json& pod, const Json& c, const std::map<std::string, fs::path>& mounts,
      const std::string& termination_log, std::string* error) {
    const Json& meta = pod["metadata"];
    std::vector<std::pair<std::string, std::string>> env;
    std::string worker_index;
    for (const Json& e : c.value("env", Json::array())) {
      const std::string name = e.value("name", "");
      std::string value = e.value("value", "");
      if (e.contains("valueFrom")) {
        const Json& from = e["valueFrom"];
        if (from.contains("secretKeyRef")) {
          const auto secret = SecretValue(meta.value("namespace", ""), from["secretKeyRef"]);
          if (!secret) {
            *error = "env " + name + ": the secret's key cannot be read";
            return {};
          }
          value = *secret;
        } else if (from.contains("fieldRef")) {
          const std::string field = from["fieldRef"].value("fieldPath", "");
          if (field == "metadata.name")
            value = meta.value("name", "");
          else if (field == "metadata.namespace")
            value = meta.value("namespace", "");
          else if (field == "status.podIP" || field == "status.hostIP")
            value = "127.0.0.1";
          else if (field == "spec.nodeName")
            value = node_;
        }
      }
      // The cluster's names resolve to this machine.
      if (name == "TESSERA_RDZV_ENDPOINT")
        value = "127.0.0.1" + value.substr(value.rfind(':'));
      if (name == "MASTER_ADDR" || name == "PET_MASTER_ADDR")
        value = "127.0.0.1";
      if (name == "TESSERA_NODE_RANK")
        worker_index = value;
      env.emplace_back(name, Remap(value, mounts));
    }
    env.emplace_back("TESSERA_COMM_HOST", "127.0.0.1");
    // The kubelet's terminationMessagePath file, where the process can find it here.
    env.emplace_back("TESSERA_TERMINATION_MESSAGE_PATH", termination_log);
    if (worker_index != "0") {
      for (auto& [name, value] : env) {
        if (name == "TESSERA_METRICS_PORT")
          value = std::to_string(tessera::cli::FreeLoopbackPort());
      }
    }
    return env;
  }

  void ReportExit(const Running& r) {
    std::cerr << "node-agent: " << r.ns << "/" << r.name << " exited with code " << r.exit_code
              << "\n";
    // As the kubelet: the termination message file (its first 4096 bytes), else, for a failed
    // container that asks for it, the tail of its log.
    std::string message;
    {
      std::ifstream in(r.termination_log);
      message.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      message = message.substr(0, 4096);
    }
    if (message.empty() && r.fallback_to_logs && r.exit_code != 0) {
      for (const std::string& line : tessera::cli::TailLines(r.log, kMessageLines))
        message += line + "\n";
      if (message.size() > kMessageBytes)
        message = message.substr(message.size() - kMessageBytes);
    }
    const std::string now = Now();
    const Json patch = {
        {"status",
         {{"phase", r.exit_code == 0 ? "Succeeded" : "Failed"},
          {"conditions",
           Json::array(
               {{{"type", "Ready"}, {"status", "False"}, {"lastTransitionTime", now}},
                {{"type", "ContainersReady"}, {"status", "False"}, {"lastTransitionTime", now}}})},
          {"containerStatuses",
           Json::array({{{"name", r.container},
                         {"image", ""},
                         {"imageID", ""},
                         {"containerID", fmt::format("tessera-node-agent://{}", r.pid)},
                         {"ready", false},
                         {"started", false},
                         {"restartCount", 0},
                         {"state",
                          {{"terminated",
                            {{"exitCode", r.exit_code},
                             {"reason", r.exit_code == 0 ? "Completed" : "Error"},
                             {"message", message},
                             {"startedAt", r.started_at},
                             {"finishedAt", now}}}}}}})}}}};
    PatchPodStatus(r, patch);
  }

  void PatchPodStatus(const Running& r, const Json& patch) {
    auto result =
        client_.PatchStatus(k8s::Pods(r.ns).Named(r.name), k8s::PatchType::kStrategic, patch);
    if (!result.ok())
      std::cerr << "node-agent: status of " << r.ns << "/" << r.name << ": "
                << result.error().message << "\n";
  }

  // The kubelet's last word on a deleted pod: remove it now that its container is gone.
  void Remove(const Json& meta) {
    k8s::DeleteOptions options;
    options.grace_period_seconds = 0;
    options.precondition_uid = meta.value("uid", "");
    client_.Delete(k8s::Pods(meta.value("namespace", "")).Named(meta.value("name", "")), options);
  }

  k8s::RestClient& client_;
  const std::string node_;
  const fs::path work_;
  std::string ready_since_;
  std::map<std::string, Running> running_;  // by pod uid
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera-node-agent: runs the pods bound to one Node as processes (tests)"};
  std::string kubeconfig, node = "tessera-agent-0", work_dir, bin_dir;
  double interval = 0.2, heartbeat = 5;
  app.add_option("--kubeconfig", kubeconfig, "Kubeconfig (default: $KUBECONFIG)");
  app.add_option("--node", node, "Name of the Node to register")->capture_default_str();
  app.add_option("--work-dir", work_dir, "Where volumes and container logs go")->required();
  app.add_option("--bin-dir", bin_dir, "Put first on the containers' PATH (tessera-worker)")
      ->required();
  app.add_option("--interval", interval, "Seconds between syncs")->check(CLI::Range(0.01, 60.0));
  app.add_option("--heartbeat", heartbeat, "Seconds between Ready heartbeats")
      ->check(CLI::Range(0.1, 60.0));
  CLI11_PARSE(app, argc, argv);

  k8s::RestOptions rest;
  rest.qps = 100;
  rest.burst = 200;
  auto connection = k8s::Connect(kubeconfig, rest);
  if (!connection.ok()) {
    std::cerr << "node-agent: " << connection.error() << "\n";
    return 2;
  }
  std::signal(SIGTERM, OnStop);
  std::signal(SIGINT, OnStop);
  tessera::cli::BecomeSubreaper();
  // The containers' PATH (commands are looked up in this process's PATH, which they inherit).
  const char* path = std::getenv("PATH");
  const std::string bin = fs::absolute(bin_dir).string();
  ::setenv("PATH", (bin + ":" + (path != nullptr ? path : "/usr/bin:/bin")).c_str(), 1);
  fs::create_directories(work_dir);
  Agent agent(*connection.value()->client, node, fs::absolute(work_dir));
  if (!agent.Register())
    return 1;
  std::cerr << "node-agent: node " << node << " ready\n";
  auto next_heartbeat = Clock::now() + std::chrono::duration<double>(heartbeat);
  while (!g_stop) {
    agent.Sync();
    if (Clock::now() >= next_heartbeat) {
      agent.Heartbeat();
      next_heartbeat = Clock::now() + std::chrono::duration<double>(heartbeat);
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(interval));
  }
  agent.Deregister();
  return 0;
}
