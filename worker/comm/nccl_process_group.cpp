#include "worker/comm/nccl_process_group.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>

#include "worker/comm/liveness.h"

namespace tessera::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string Secs(milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1fs", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

ncclDataType_t ToNccl(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kUInt8:
      return ncclUint8;
    case DataType::kBFloat16:
      return ncclBfloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t ToNccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

void CheckCuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess)
    throw CommError(what + ": " + cudaGetErrorString(e));
}

// Polls a non-blocking communicator until its pending call finished. Aborts it and throws
// when NCCL reports an error or `deadline` passes.
void WaitReady(ncclComm_t comm, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    if (rc != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
      const ncclResult_t bad = rc != ncclSuccess ? rc : state;
      ncclCommAbort(comm);
      throw CommError(what + " failed: " + ncclGetErrorString(bad));
    }
    if (state == ncclSuccess)
      return;
    if (Clock::now() >= deadline) {
      ncclCommAbort(comm);
      throw CommError(what +
                      " did not finish within the communication timeout "
                      "(TESSERA_COMM_TIMEOUT); communicator aborted");
    }
    std::this_thread::yield();
  }
}

struct Shared {
  std::shared_ptr<LivenessMonitor> monitor;
  std::unique_ptr<rendezvous::StoreClient> store;
  NcclOptions options;
  int device = 0;
};

// The communicator and its stream, shared by the group and its work handles.
struct Core {
  std::string name;
  std::vector<int> world_ranks;
  std::shared_ptr<Shared> shared;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  float* scratch = nullptr;  // one float on the device, for barrier
  int rank = 0, size = 1;
  std::mutex mu;
  std::string broken;  // set by the monitor or a failed operation
  bool aborted = false;

  // Aborts the communicator once (any thread); later NCCL calls on it are not made.
  void Abort(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (broken.empty())
      broken = why;
    if (!aborted && comm != nullptr) {
      ncclCommAbort(comm);
      aborted = true;
    }
  }
  std::string Broken() {
    std::lock_guard<std::mutex> lock(mu);
    return broken;
  }
  ~Core() {
    if (comm != nullptr && !aborted) {
      cudaSetDevice(shared->device);
      const ncclResult_t rc = ncclCommFinalize(comm);
      if (rc == ncclSuccess || rc == ncclInProgress) {
        try {
          WaitReady(comm, Clock::now() + shared->options.comm.timeout, "finalize");
          ncclCommDestroy(comm);
        } catch (const CommError&) {
          // WaitReady aborted it.
        }
      } else {
        ncclCommAbort(comm);
      }
    }
    if (scratch != nullptr)
      cudaFree(scratch);
    if (stream != nullptr)
      cudaStreamDestroy(stream);
  }
};

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<Core> core, std::string what, cudaEvent_t event)
      : core_(std::move(core)),
        what_(std::move(what)),
        event_(event),
        deadline_(Clock::now() + core_->shared->options.comm.timeout) {}
  ~NcclWork() override { cudaEventDestroy(event_); }

  void wait() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) {
      error_ = Poll();
      done_ = true;
    }
    if (!error_.empty())
      throw CommError(error_);
  }
  bool completed() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_ && cudaEventQuery(event_) == cudaSuccess)
      done_ = true;
    return done_;
  }

 private:
  // Waits for the event while watching for NCCL errors, a lost rank and the deadline.
  std::string Poll() {
    for (;;) {
      const std::string broken = core_->Broken();
      if (!broken.empty()) {
        core_->Abort(broken);
        return what_ + " failed: " + broken;
      }
      const cudaError_t q = cudaEventQuery(event_);
      if (q == cudaSuccess)
        return "";
      if (q != cudaErrorNotReady) {
        const std::string msg = what_ + " failed: " + cudaGetErrorString(q);
        core_->Abort(msg);
        return msg;
      }
      ncclResult_t state = ncclSuccess;
      {
        std::lock_guard<std::mutex> lock(core_->mu);
        if (!core_->aborted)
          ncclCommGetAsyncError(core_->comm, &state);
      }
      if (state != ncclSuccess && state != ncclInProgress) {
        const std::string msg = what_ + " failed: " + ncclGetErrorString(state);
        core_->Abort(msg);
        return msg;
      }
      if (Clock::now() >= deadline_) {
        auto loss = core_->shared->monitor->loss();
        const std::string msg =
            what_ + " failed: " +
            (loss ? loss->message
                  : "timed out after " + Secs(core_->shared->options.comm.timeout) +
                        " (TESSERA_COMM_TIMEOUT); communicator aborted");
        core_->Abort(msg);
        return msg;
      }
      std::this_thread::yield();
    }
  }

  std::shared_ptr<Core> core_;
  const std::string what_;
  cudaEvent_t event_;
  const Clock::time_point deadline_;
  std::mutex mu_;
  bool done_ = false;
  std::string error_;
};

class NcclProcessGroup : public ProcessGroup {
 public:
  explicit NcclProcessGroup(std::shared_ptr<Core> core) : core_(std::move(core)) {
    std::weak_ptr<Core> weak = core_;
    // Only mark the group; the next wait (or issue) aborts the communicator on its own thread.
    subscription_ = core_->shared->monitor->Subscribe([weak](const RankLoss& loss) {
      if (auto c = weak.lock()) {
        std::lock_guard<std::mutex> lock(c->mu);
        if (c->broken.empty())
          c->broken = loss.message;
      }
    });
  }
  ~NcclProcessGroup() override { core_->shared->monitor->Unsubscribe(subscription_); }

  int rank() const override { return core_->rank; }
  int size() const override { return core_->size; }
  std::string backend() const override { return "nccl"; }
  const std::string& name() const override { return core_->name; }
  const std::vector<int>& world_ranks() const override { return core_->world_ranks; }

  std::shared_ptr<Work> all_reduce(void* data, size_t count, DataType type, ReduceOp op) override {
    return Issue(Label("all_reduce", count, type), [&] {
      return ncclAllReduce(data, data, count, ToNccl(type), ToNccl(op), core_->comm, core_->stream);
    });
  }
  std::shared_ptr<Work> reduce_scatter(const void* input, void* output, size_t count, DataType type,
                                       ReduceOp op) override {
    return Issue(Label("reduce_scatter", count, type), [&] {
      return ncclReduceScatter(input, output, count, ToNccl(type), ToNccl(op), core_->comm,
                               core_->stream);
    });
  }
  std::shared_ptr<Work> all_gather(const void* input, void* output, size_t count,
                                   DataType type) override {
    return Issue(Label("all_gather", count, type), [&] {
      return ncclAllGather(input, output, count, ToNccl(type), core_->comm, core_->stream);
    });
  }
  std::shared_ptr<Work> broadcast(void* data, size_t count, DataType type, int root) override {
    CheckPeer(root);
    return Issue(Label("broadcast", count, type), [&] {
      return ncclBroadcast(data, data, count, ToNccl(type), root, core_->comm, core_->stream);
    });
  }
  std::shared_ptr<Work> send(const void* data, size_t count, DataType type, int dst,
                             uint32_t) override {
    CheckPeer(dst);
    return Issue("send to rank " + std::to_string(dst) + " on group " + core_->name, [&] {
      return ncclSend(data, count, ToNccl(type), dst, core_->comm, core_->stream);
    });
  }
  std::shared_ptr<Work> recv(void* data, size_t count, DataType type, int src, uint32_t) override {
    CheckPeer(src);
    return Issue("recv from rank " + std::to_string(src) + " on group " + core_->name, [&] {
      return ncclRecv(data, count, ToNccl(type), src, core_->comm, core_->stream);
    });
  }
  std::shared_ptr<Work> barrier() override {
    return Issue("barrier on group " + core_->name, [&] {
      return ncclAllReduce(core_->scratch, core_->scratch, 1, ncclFloat32, ncclSum, core_->comm,
                           core_->stream);
    });
  }

  void wait_event(void* cuda_event) override {
    const std::string what = "waiting for a device event on group " + core_->name;
    CheckCuda(cudaSetDevice(core_->shared->device), what);
    CheckCuda(cudaStreamWaitEvent(core_->stream, static_cast<cudaEvent_t>(cuda_event), 0), what);
  }

  std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name) override;

 private:
  void CheckPeer(int peer) const {
    if (peer < 0 || peer >= core_->size) {
      throw CommError("group " + core_->name + ": rank " + std::to_string(peer) +
                      " is not in this group of " + std::to_string(core_->size));
    }
  }
  std::string Label(const char* op, size_t count, DataType type) const {
    return std::string(op) + " of " + std::to_string(count) + " " + ToString(type) + " on group " +
           core_->name;
  }

  template <typename Launch>
  std::shared_ptr<Work> Issue(const std::string& what, Launch launch) {
    if (auto broken = core_->Broken(); !broken.empty()) {
      core_->Abort(broken);
      throw CommError(what + " failed: group is broken: " + broken);
    }
    CheckCuda(cudaSetDevice(core_->shared->device), what);
    const ncclResult_t rc = launch();
    if (rc == ncclInProgress) {
      try {
        WaitReady(core_->comm, Clock::now() + core_->shared->options.comm.timeout, what);
      } catch (const CommError& e) {
        std::lock_guard<std::mutex> lock(core_->mu);
        core_->aborted = true;  // WaitReady aborted it
        if (core_->broken.empty())
          core_->broken = e.what();
        throw;
      }
    } else if (rc != ncclSuccess) {
      const std::string msg = what + " failed: " + ncclGetErrorString(rc);
      core_->Abort(msg);
      throw CommError(msg);
    }
    cudaEvent_t event;
    CheckCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), what);
    CheckCuda(cudaEventRecord(event, core_->stream), what);
    return std::make_shared<NcclWork>(core_, what, event);
  }

  std::shared_ptr<Core> core_;
  int subscription_ = -1;
  int split_seq_ = 0;
};

// Allocates the stream and scratch of a connected core.
void Prepare(Core& core) {
  CheckCuda(cudaSetDevice(core.shared->device), "group " + core.name);
  CheckCuda(cudaStreamCreateWithFlags(&core.stream, cudaStreamNonBlocking), "group " + core.name);
  CheckCuda(cudaMalloc(&core.scratch, sizeof(float)), "group " + core.name);
}

ncclConfig_t NonBlockingConfig() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

std::shared_ptr<ProcessGroup> NcclProcessGroup::split(int color, int key, const std::string& name) {
  // Members and their order through the store, so the group knows its world ranks.
  auto& store = *core_->shared->store;
  const std::string base = core_->shared->options.prefix + "nccl/" + core_->name + "/split" +
                           std::to_string(split_seq_++) + "/";
  const auto timeout = core_->shared->options.comm.timeout;
  store.Set(base + std::to_string(core_->rank), std::to_string(color) + "," + std::to_string(key));
  std::vector<std::tuple<int, int, int>> members;  // key, group rank, world rank
  for (int i = 0; i < core_->size; ++i) {
    const std::string v = store.Get(base + std::to_string(i), timeout);
    const int c = std::stoi(v.substr(0, v.find(',')));
    const int k = std::stoi(v.substr(v.find(',') + 1));
    if (c == color)
      members.emplace_back(k, i, core_->world_ranks[i]);
  }
  std::stable_sort(members.begin(), members.end(),
                   [](auto& a, auto& b) { return std::get<0>(a) < std::get<0>(b); });

  ncclConfig_t config = NonBlockingConfig();
  ncclComm_t child = nullptr;
  const std::string what = "ncclCommSplit of group " + core_->name + " into " + name;
  CheckCuda(cudaSetDevice(core_->shared->device), what);
  const ncclResult_t rc =
      ncclCommSplit(core_->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    core_->Abort(what + " failed");
    throw CommError(what + " failed: " + ncclGetErrorString(rc));
  }
  const auto deadline = Clock::now() + timeout;
  try {
    WaitReady(core_->comm, deadline, what);
  } catch (const CommError& e) {
    std::lock_guard<std::mutex> lock(core_->mu);
    core_->aborted = true;  // WaitReady aborted it
    if (core_->broken.empty())
      core_->broken = e.what();
    throw;
  }
  if (color < 0)
    return nullptr;
  if (child == nullptr)
    throw CommError(what + ": NCCL returned no communicator");
  WaitReady(child, deadline, what);

  auto core = std::make_shared<Core>();
  core->name = core_->name + "/" + name;
  core->shared = core_->shared;
  core->comm = child;
  core->size = static_cast<int>(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    core->world_ranks.push_back(std::get<2>(members[i]));
    if (std::get<1>(members[i]) == core_->rank)
      core->rank = static_cast<int>(i);
  }
  Prepare(*core);
  return std::make_shared<NcclProcessGroup>(std::move(core));
}

}  // namespace

std::shared_ptr<ProcessGroup> CreateNcclProcessGroup(const rendezvous::StoreClient& store, int rank,
                                                     int size, int device,
                                                     const NcclOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw CommConfigError("process group: rank " + std::to_string(rank) +
                          " is outside a world of size " + std::to_string(size));
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    throw CommError("nccl process group: no CUDA device is visible to rank " +
                    std::to_string(rank));
  }
  if (device < 0 || device >= devices) {
    throw CommConfigError("nccl process group: device " + std::to_string(device) +
                          " does not exist (" + std::to_string(devices) + " visible)");
  }
  auto shared = std::make_shared<Shared>();
  shared->options = options;
  shared->device = device;
  shared->store = store.Clone();
  shared->monitor = std::make_shared<LivenessMonitor>(store, options.prefix, rank);

  const std::string key = options.prefix + "nccl/world/unique_id";
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess)
      throw CommError("ncclGetUniqueId failed on rank 0");
    shared->store->Set(key, std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
  } else {
    const std::string v = shared->store->Get(key, options.comm.timeout);
    if (v.size() != sizeof(id))
      throw CommError("store key " + key + " does not hold an NCCL id");
    std::memcpy(&id, v.data(), sizeof(id));
  }
  auto core = std::make_shared<Core>();
  core->name = "world";
  core->shared = shared;
  core->rank = rank;
  core->size = size;
  for (int i = 0; i < size; ++i)
    core->world_ranks.push_back(i);
  CheckCuda(cudaSetDevice(device), "nccl process group");
  ncclConfig_t config = NonBlockingConfig();
  const ncclResult_t rc = ncclCommInitRankConfig(&core->comm, size, id, rank, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    if (core->comm != nullptr)
      ncclCommAbort(core->comm);
    core->comm = nullptr;
    throw CommError(std::string("ncclCommInitRankConfig failed: ") + ncclGetErrorString(rc));
  }
  try {
    WaitReady(core->comm, Clock::now() + options.comm.timeout, "NCCL initialisation of world");
  } catch (...) {
    core->aborted = true;
    throw;
  }
  Prepare(*core);
  return std::make_shared<NcclProcessGroup>(std::move(core));
}

}  // namespace tessera::comm
