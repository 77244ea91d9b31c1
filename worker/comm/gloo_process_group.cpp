#include "worker/comm/gloo_process_group.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <thread>

#include "worker/comm/gloo_work.h"
#include "worker/comm/liveness.h"
#include "worker/comm/shm_allreduce.h"

namespace tessera::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Slot spaces of our own transfers; Gloo's collectives use small prefixes of their own.
constexpr uint64_t kP2PSlot = 0x7Aull << 56;
constexpr uint64_t kReduceScatterSlot = 0x7Bull << 56;

// Gloo's view of our store: every key under `prefix`, every wait bounded by `timeout`.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(rendezvous::StoreClient& client, std::string prefix, milliseconds timeout)
      : client_(client), prefix_(std::move(prefix)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    client_.Set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::string v = client_.Get(prefix_ + key, timeout_);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const auto& k : keys)
      full.push_back(prefix_ + k);
    client_.Wait(full, std::min(timeout, timeout_));
  }

 private:
  rendezvous::StoreClient& client_;
  std::string prefix_;
  milliseconds timeout_;
};

template <typename Fn>
void Dispatch(DataType type, Fn&& fn) {
  switch (type) {
    case DataType::kFloat32:
      return fn(float{});
    case DataType::kFloat64:
      return fn(double{});
    case DataType::kInt32:
      return fn(int32_t{});
    case DataType::kInt64:
      return fn(int64_t{});
    case DataType::kUInt8:
      return fn(uint8_t{});
    case DataType::kBFloat16:
      throw CommError("the gloo backend does not support bfloat16; reduce in float32");
  }
}

template <typename T>
gloo::AllreduceOptions::Func ReduceFunc(ReduceOp op) {
  using F = void (*)(void*, const void*, const void*, size_t);
  return op == ReduceOp::kMax ? static_cast<F>(&gloo::max<T>) : static_cast<F>(&gloo::sum<T>);
}

template <typename T>
void Combine(T* out, const T* a, const T* b, size_t n, ReduceOp op) {
  if (op == ReduceOp::kMax) {
    for (size_t i = 0; i < n; ++i)
      out[i] = std::max(a[i], b[i]);
  } else {
    for (size_t i = 0; i < n; ++i)
      out[i] = static_cast<T>(a[i] + b[i]);
  }
}

template <typename T>
void DivideBy(T* data, size_t n, int size) {
  for (size_t i = 0; i < n; ++i)
    data[i] = static_cast<T>(data[i] / static_cast<T>(size));
}

using detail::GlooWork;

// A send or receive: posted at once, completed by the caller's wait().
class GlooP2PWork : public Work {
 public:
  using Explain = std::function<std::string(const std::string&)>;
  GlooP2PWork(std::unique_ptr<gloo::transport::UnboundBuffer> buf, bool is_send, std::string what,
              milliseconds timeout, Explain explain)
      : buf_(std::move(buf)),
        is_send_(is_send),
        what_(std::move(what)),
        timeout_(timeout),
        explain_(std::move(explain)) {}

  void wait() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) {
      std::string error;
      try {
        const bool ok = is_send_ ? buf_->waitSend(timeout_) : buf_->waitRecv(timeout_);
        if (!ok)
          error = "aborted";
      } catch (const std::exception& e) {
        error = e.what();
      }
      if (!error.empty())
        error_ = explain_(error);
      done_ = true;
    }
    if (!error_.empty())
      throw CommError(error_);
  }
  bool completed() override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  // Wakes a wait() blocked on a lost peer.
  void Abort() {
    if (is_send_) {
      buf_->abortWaitSend();
    } else {
      buf_->abortWaitRecv();
    }
  }

 private:
  std::unique_ptr<gloo::transport::UnboundBuffer> buf_;
  const bool is_send_;
  const std::string what_;
  const milliseconds timeout_;
  Explain explain_;
  std::mutex mu_;
  bool done_ = false;
  std::string error_;
};

struct Shared {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<LivenessMonitor> monitor;
  std::unique_ptr<rendezvous::StoreClient> store;  // for creating groups; one at a time
  std::mutex store_mu;
  GlooOptions options;
  // The world's size when all its ranks are on this machine (its segment was set up), else 0.
  int ranks_here = 0;
};

// Everything the executor thread touches; outlives the group while an operation stuck in
// Gloo finishes (bounded by the timeout).
struct Core {
  std::string name;
  std::vector<int> world_ranks;
  std::shared_ptr<gloo::Context> context;
  std::shared_ptr<Shared> shared;
  milliseconds timeout;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<std::shared_ptr<GlooWork>, std::function<void()>>> queue;
  std::list<std::weak_ptr<GlooP2PWork>> p2p;
  std::string broken;  // non-empty once the group failed
  bool stop = false;
  // Float32 all-reduces of a group whose ranks share this machine (GlooOptions), else null.
  std::unique_ptr<ShmAllReduce> shm;

  // One line for a failed operation: the lost rank when the store knows one.
  std::string Explain(const std::string& what, const std::string& detail) const {
    auto loss = shared->monitor->loss();
    if (!loss)
      loss = shared->monitor->WaitForLoss(std::min(timeout, milliseconds(3000)));
    if (loss)
      return what + " failed: " + loss->message;
    std::string msg = what + " failed: " + detail;
    if (detail.find("Timed out") != std::string::npos ||
        detail.find("timed out") != std::string::npos) {
      msg += " (after " + GlooWork::Seconds(timeout) +
             ", TESSERA_COMM_TIMEOUT; no rank was reported lost: a peer may be hung or slow)";
    }
    return msg;
  }

  // Marks the group failed. Queued operations fail at once (Gloo never saw their buffers);
  // the one running keeps its buffers until Gloo itself gives up on the lost peer (at once
  // for a direct neighbour, else at the timeout), so a caller never frees memory Gloo still
  // writes. Its error then names the lost rank.
  void Break(const std::string& message) {
    std::vector<std::shared_ptr<GlooWork>> fail;
    std::vector<std::shared_ptr<GlooP2PWork>> abort;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (broken.empty())
        broken = message;
      if (shm)
        shm->Abort(message);
      for (auto& [w, fn] : queue)
        fail.push_back(w);
      queue.clear();
      for (auto& w : p2p) {
        if (auto s = w.lock())
          abort.push_back(s);
      }
    }
    cv.notify_all();
    for (auto& w : fail)
      w->Finish(w->what() + " failed: " + message);
    for (auto& w : abort)
      w->Abort();
  }

  void Run() {
    for (;;) {
      std::shared_ptr<GlooWork> work;
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty())
          return;
        std::tie(work, fn) = std::move(queue.front());
        queue.pop_front();
      }
      work->Start();
      std::string error;
      try {
        fn();
      } catch (const std::exception& e) {
        error = Explain(work->what(), e.what());
      }
      if (!error.empty()) {
        // Broken first: a caller woken by this failure must find the group broken, so its
        // next operation fails at once instead of being queued or posted meanwhile.
        Break(error);
        work->Finish(error);
      } else {
        work->Finish("");
      }
    }
  }
};

class GlooProcessGroup : public ProcessGroup {
 public:
  GlooProcessGroup(std::shared_ptr<Core> core, std::string prefix)
      : core_(std::move(core)), prefix_(std::move(prefix)) {
    std::weak_ptr<Core> weak = core_;
    subscription_ = core_->shared->monitor->Subscribe([weak](const RankLoss& loss) {
      if (auto c = weak.lock())
        c->Break(loss.message);
    });
    thread_ = std::thread([c = core_] { c->Run(); });
  }

  ~GlooProcessGroup() override {
    core_->shared->monitor->Unsubscribe(subscription_);
    bool broken;
    {
      std::lock_guard<std::mutex> lock(core_->mu);
      core_->stop = true;
      broken = !core_->broken.empty();
    }
    core_->cv.notify_all();
    // A broken group may have an operation stuck in Gloo until its timeout; let it finish on
    // its own (it owns the core) rather than hold the caller.
    if (broken) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }

  int rank() const override { return core_->context->rank; }
  int size() const override { return core_->context->size; }
  std::string backend() const override { return "gloo"; }
  const std::string& name() const override { return core_->name; }
  const std::vector<int>& world_ranks() const override { return core_->world_ranks; }

  std::shared_ptr<Work> all_reduce(void* data, size_t count, DataType type, ReduceOp op) override {
    CheckType(type);
    ShmAllReduce* shm = core_->shm.get();  // the core, which owns it, outlives the thread
    return Enqueue(Label("all_reduce", count, type), [=, ctx = core_->context, t = core_->timeout] {
      if (count == 0)
        return;
      if (shm != nullptr && type == DataType::kFloat32 &&
          (op == ReduceOp::kSum || op == ReduceOp::kAvg)) {
        shm->AllReduce(static_cast<float*>(data), count, op == ReduceOp::kAvg);
        return;
      }
      Dispatch(type, [&](auto tag) {
        using T = decltype(tag);
        if (ctx->size > 1) {
          gloo::AllreduceOptions o(ctx);
          o.setOutput(static_cast<T*>(data), count);
          o.setReduceFunction(ReduceFunc<T>(op));
          o.setTimeout(t);
          gloo::allreduce(o);
        }
        if (op == ReduceOp::kAvg)
          DivideBy(static_cast<T*>(data), count, ctx->size);
      });
    });
  }

  std::shared_ptr<Work> reduce_scatter(const void* input, void* output, size_t count, DataType type,
                                       ReduceOp op) override {
    CheckType(type);
    const uint64_t slot = kReduceScatterSlot | (reduce_scatter_seq_++ & 0xffffffffffull);
    return Enqueue(Label("reduce_scatter", count, type),
                   [=, ctx = core_->context, t = core_->timeout] {
                     if (count == 0)
                       return;
                     Dispatch(type, [&](auto tag) {
                       using T = decltype(tag);
                       RingReduceScatter<T>(*ctx, static_cast<const T*>(input),
                                            static_cast<T*>(output), count, op, slot, t);
                     });
                   });
  }

  std::shared_ptr<Work> all_gather(const void* input, void* output, size_t count,
                                   DataType type) override {
    CheckType(type);
    return Enqueue(Label("all_gather", count, type), [=, ctx = core_->context, t = core_->timeout] {
      if (count == 0)
        return;
      Dispatch(type, [&](auto tag) {
        using T = decltype(tag);
        if (ctx->size == 1) {
          std::memmove(output, input, count * sizeof(T));
          return;
        }
        gloo::AllgatherOptions o(ctx);
        o.setInput(const_cast<T*>(static_cast<const T*>(input)), count);
        o.setOutput(static_cast<T*>(output), count * ctx->size);
        o.setTimeout(t);
        gloo::allgather(o);
      });
    });
  }

  std::shared_ptr<Work> broadcast(void* data, size_t count, DataType type, int root) override {
    CheckType(type);
    CheckPeer(root, "broadcast root");
    return Enqueue(Label("broadcast", count, type), [=, ctx = core_->context, t = core_->timeout] {
      if (count == 0 || ctx->size == 1)
        return;
      Dispatch(type, [&](auto tag) {
        using T = decltype(tag);
        gloo::BroadcastOptions o(ctx);
        o.setOutput(static_cast<T*>(data), count);
        o.setRoot(root);
        o.setTimeout(t);
        gloo::broadcast(o);
      });
    });
  }

  std::shared_ptr<Work> barrier() override {
    return Enqueue("barrier on group " + core_->name, [ctx = core_->context, t = core_->timeout] {
      if (ctx->size == 1)
        return;
      gloo::BarrierOptions o(ctx);
      o.setTimeout(t);
      gloo::barrier(o);
    });
  }

  std::shared_ptr<Work> send(const void* data, size_t count, DataType type, int dst,
                             uint32_t tag) override {
    return PostP2P(true, const_cast<void*>(data), count, type, dst, tag);
  }
  std::shared_ptr<Work> recv(void* data, size_t count, DataType type, int src,
                             uint32_t tag) override {
    return PostP2P(false, data, count, type, src, tag);
  }

  std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name) override;

 private:
  void CheckType(DataType type) const {
    if (type == DataType::kBFloat16) {
      throw CommError("group " + core_->name + ": the gloo backend does not support bfloat16");
    }
  }
  void CheckPeer(int peer, const char* what) const {
    if (peer < 0 || peer >= size()) {
      throw CommError("group " + core_->name + ": " + what + " " + std::to_string(peer) +
                      " is not a rank of this group of " + std::to_string(size()));
    }
  }
  std::string Label(const char* op, size_t count, DataType type) const {
    return std::string(op) + " of " + std::to_string(count) + " " + ToString(type) + " on group " +
           core_->name;
  }

  std::shared_ptr<Work> Enqueue(std::string what, std::function<void()> fn) {
    std::weak_ptr<Core> weak = core_;
    auto work = std::make_shared<GlooWork>(std::move(what), core_->timeout,
                                           [weak](const std::string& error) {
                                             if (auto c = weak.lock())
                                               c->Break(error);
                                           });
    std::unique_lock<std::mutex> lock(core_->mu);
    if (!core_->broken.empty()) {
      lock.unlock();
      work->Finish(work->what() + " failed: group is broken: " + core_->broken);
      return work;
    }
    core_->queue.emplace_back(work, std::move(fn));
    lock.unlock();
    core_->cv.notify_all();
    return work;
  }

  std::shared_ptr<Work> PostP2P(bool is_send, void* data, size_t count, DataType type, int peer,
                                uint32_t tag) {
    CheckPeer(peer, is_send ? "send destination" : "recv source");
    if (peer == rank()) {
      throw CommError("group " + core_->name +
                      ": send and recv to this rank itself are not supported");
    }
    const std::string what = std::string(is_send ? "send to" : "recv from") + " rank " +
                             std::to_string(peer) + " (world rank " +
                             std::to_string(core_->world_ranks[peer]) + ") on group " + core_->name;
    {
      std::lock_guard<std::mutex> lock(core_->mu);
      if (!core_->broken.empty())
        throw CommError(what + " failed: group is broken: " + core_->broken);
    }
    const size_t bytes = count * ElementSize(type);
    static char empty = 0;
    auto buf = core_->context->createUnboundBuffer(bytes ? data : &empty, bytes);
    try {
      if (is_send) {
        buf->send(peer, kP2PSlot | tag, 0, bytes);
      } else {
        buf->recv(peer, kP2PSlot | tag, 0, bytes);
      }
    } catch (const std::exception& e) {
      // Gloo already saw the connection to the peer close (gloo::IoException): the group is
      // broken, as when an operation fails, and the caller gets the CommError a wait() would
      // have given, naming the lost rank when the store knows it.
      const std::string error = core_->Explain(what, e.what());
      core_->Break(error);
      throw CommError(error);
    }
    std::weak_ptr<Core> weak = core_;
    // A failed send or recv breaks the group as a failed collective does (the peers' order of
    // messages is lost), so the next operation fails at once.
    auto explain = [weak, what](const std::string& detail) {
      auto c = weak.lock();
      if (!c)
        return what + " failed: " + detail;
      std::string broken;
      {
        std::lock_guard<std::mutex> lock(c->mu);
        broken = c->broken;
      }
      if (!broken.empty())
        return what + " failed: " + broken;
      std::string error = c->Explain(what, detail);
      c->Break(error);
      return error;
    };
    auto work =
        std::make_shared<GlooP2PWork>(std::move(buf), is_send, what, core_->timeout, explain);
    std::lock_guard<std::mutex> lock(core_->mu);
    core_->p2p.remove_if([](auto& w) { return w.expired(); });
    core_->p2p.push_back(work);
    return work;
  }

  // Ring reduce-scatter over Gloo's unbound buffers: n-1 steps, each sending one block to
  // the right neighbour and folding the block from the left one into our copy, arranged so
  // that rank r ends holding block r. The timeout bounds the whole ring, as Gloo's own
  // collectives are bounded: per step it would allow 2(n-1) timeouts, past GlooWork's last resort.
  template <typename T>
  static void RingReduceScatter(gloo::Context& ctx, const T* input, T* output, size_t count,
                                ReduceOp op, uint64_t slot, milliseconds timeout) {
    const int n = ctx.size, r = ctx.rank;
    if (n == 1) {
      std::memmove(output, input, count * sizeof(T));
      if (op == ReduceOp::kAvg)
        DivideBy(output, count, n);
      return;
    }
    auto block = [&](int i) { return input + static_cast<size_t>(((i % n) + n) % n) * count; };
    std::vector<T> send_block(block(r - 1), block(r - 1) + count);
    std::vector<T> recv_block(count);
    auto sbuf = ctx.createUnboundBuffer(send_block.data(), count * sizeof(T));
    auto rbuf = ctx.createUnboundBuffer(recv_block.data(), count * sizeof(T));
    const int right = (r + 1) % n, left = (r - 1 + n) % n;
    const Clock::time_point deadline = Clock::now() + timeout;
    auto left_until_deadline = [&] {
      return std::max(milliseconds(1),
                      std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
    };
    for (int s = 0; s < n - 1; ++s) {
      rbuf->recv(left, slot);
      sbuf->send(right, slot);
      if (!rbuf->waitRecv(left_until_deadline()) || !sbuf->waitSend(left_until_deadline())) {
        throw CommError("reduce_scatter transfer aborted");
      }
      T* dst = s == n - 2 ? output : send_block.data();
      Combine(dst, block(r - s - 2), recv_block.data(), count, op);
    }
    if (op == ReduceOp::kAvg)
      DivideBy(output, count, n);
  }

  std::shared_ptr<Core> core_;
  std::string prefix_;
  int subscription_ = -1;
  std::thread thread_;
  uint64_t reduce_scatter_seq_ = 0;
  int split_seq_ = 0;
};

// Connects a Gloo context of `members.size()` ranks under `prefix`.
std::shared_ptr<gloo::Context> Connect(Shared& shared, const std::string& prefix, int rank,
                                       int size, const std::string& name) {
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->setTimeout(shared.options.comm.timeout);
  std::lock_guard<std::mutex> lock(shared.store_mu);
  GlooStore store(*shared.store, prefix, shared.options.comm.timeout);
  try {
    ctx->connectFullMesh(store, shared.device);
  } catch (const rendezvous::StoreTimeoutError& e) {
    throw CommError("group " + name + ": not every rank arrived within " +
                    GlooWork::Seconds(shared.options.comm.timeout) + ": " + e.what());
  } catch (const std::exception& e) {
    throw CommError("group " + name + ": connecting rank " + std::to_string(rank) +
                    " failed: " + e.what());
  }
  return ctx;
}

std::shared_ptr<ProcessGroup> GlooProcessGroup::split(int color, int key, const std::string& name) {
  // Everyone learns everyone's (color, key) through this group.
  std::vector<int64_t> mine = {color, key};
  std::vector<int64_t> all(2 * static_cast<size_t>(size()));
  all_gather(mine.data(), all.data(), 2, DataType::kInt64)->wait();
  const int seq = split_seq_++;
  if (color < 0)
    return nullptr;
  std::vector<int> members;  // group ranks of this group, in the new group's order
  for (int i = 0; i < size(); ++i) {
    if (all[2 * i] == color)
      members.push_back(i);
  }
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
  const int new_rank =
      static_cast<int>(std::find(members.begin(), members.end(), rank()) - members.begin());
  auto core = std::make_shared<Core>();
  core->name = core_->name + "/" + name;
  for (int m : members)
    core->world_ranks.push_back(core_->world_ranks[m]);
  core->shared = core_->shared;
  core->timeout = core_->timeout;
  const std::string prefix =
      prefix_ + "split" + std::to_string(seq) + "/" + std::to_string(color) + "/";
  core->context =
      Connect(*core->shared, prefix, new_rank, static_cast<int>(members.size()), core->name);
  if (core->shared->options.shared_memory_allreduce && members.size() > 1) {
    // A data, tensor or pipeline group of ranks on one machine reduces through shared memory
    // as the world does; null (Gloo alone) when its members are not all here.
    std::lock_guard<std::mutex> lock(core->shared->store_mu);
    try {
      core->shm = ShmAllReduce::Create(*core->shared->store, prefix, new_rank,
                                       static_cast<int>(members.size()), core->timeout, nullptr);
    } catch (const rendezvous::StoreTimeoutError& e) {
      throw CommError("group " + core->name + ": not every rank set up shared memory within " +
                      GlooWork::Seconds(core->timeout) + ": " + e.what());
    }
    if (core->shm && core->shared->ranks_here > 0)
      core->shm->SetRanksHere(core->shared->ranks_here);
  }
  return std::make_shared<GlooProcessGroup>(std::move(core), prefix);
}

}  // namespace

GlooOptions GlooOptions::FromEnv() {
  GlooOptions o;
  o.comm = CommOptions::FromEnv();
  if (const char* host = std::getenv("TESSERA_COMM_HOST"); host != nullptr && *host != '\0') {
    o.host = host;
  } else {
    char name[256] = {0};
    if (::gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0')
      o.host = name;
  }
  if (const char* shm = std::getenv("TESSERA_SHM_ALLREDUCE"); shm != nullptr)
    o.shared_memory_allreduce = std::string(shm) != "0";
  return o;
}

std::shared_ptr<ProcessGroup> CreateGlooProcessGroup(const rendezvous::StoreClient& store, int rank,
                                                     int size, const GlooOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw CommConfigError("process group: rank " + std::to_string(rank) +
                          " is outside a world of size " + std::to_string(size));
  }
  // Gloo writes to its sockets without MSG_NOSIGNAL: a peer that dies mid-transfer would
  // kill this process with SIGPIPE instead of surfacing as an error we can name.
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
  auto shared = std::make_shared<Shared>();
  shared->options = options;
  shared->store = store.Clone();
  try {
    gloo::transport::tcp::attr attr(options.host.c_str());
    shared->device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw CommConfigError("process group: cannot use address " + options.host +
                          " for Gloo (set TESSERA_COMM_HOST): " + e.what());
  }
  shared->monitor = std::make_shared<LivenessMonitor>(store, options.prefix, rank);
  auto core = std::make_shared<Core>();
  core->name = "world";
  for (int i = 0; i < size; ++i)
    core->world_ranks.push_back(i);
  core->shared = shared;
  core->timeout = options.comm.timeout;
  const std::string prefix = options.prefix + "world/";
  core->context = Connect(*shared, prefix, rank, size, "world");
  if (options.shared_memory_allreduce && size > 1) {
    // Null when the ranks are not all here (then Gloo does everything, as without the option);
    // each rank's outcome stays in the store (ShmAllReduce::Create's "mapped" keys).
    core->shm = ShmAllReduce::Create(*shared->store, prefix, rank, size, core->timeout, nullptr);
    if (core->shm)
      shared->ranks_here = size;
  }
  return std::make_shared<GlooProcessGroup>(std::move(core), prefix);
}

}  // namespace tessera::comm
