// The SIMT emulator behind warp_mma.cuh's TESSERA_WARP_EMULATION build (see warp_emulator.h).
//
// One host thread per CUDA thread. All synchronisation of a block goes through one mutex: the
// block barrier (SyncThreads) and one barrier per warp, on which every warp-wide operation
// (SyncWarp, ShflXor, Mma16816, LdMatrixX4) meets. Each thread records which operation it waits
// in, so lanes of one warp that diverge into different operations, or a warp operation after a
// lane returned, are reported at once instead of deadlocking. Any failure sets a flag, wakes
// every waiter and unwinds every thread with Aborted; Launch joins them and throws the first
// message.

#include "tests/unit/gpu_emulation/warp_emulator.h"

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "worker/model/cuda/warp_mma.cuh"

namespace tessera::warp_emu {
namespace {

constexpr unsigned kWarpSize = 32;
constexpr unsigned kMaxThreads = 1024;  // CUDA's limit per block
constexpr size_t kSharedAlignment = 128;

// What a thread waits in at a barrier. Warp operations are told apart so that lanes of one warp
// in different operations are reported rather than paired up.
enum class Op {
  kNone,
  kSyncThreads,
  kSyncWarp,
  kShflXor,
  kMma16816,
  kLdMatrixX4,
  kLdMatrixX4Trans
};

const char* OpName(Op op) {
  switch (op) {
    case Op::kNone:
      return "nothing";
    case Op::kSyncThreads:
      return "SyncThreads";
    case Op::kSyncWarp:
      return "SyncWarp";
    case Op::kShflXor:
      return "ShflXor";
    case Op::kMma16816:
      return "Mma16816";
    case Op::kLdMatrixX4:
      return "LdMatrixX4";
    case Op::kLdMatrixX4Trans:
      return "LdMatrixX4Trans";
  }
  return "?";
}

bool IsWarpOp(Op op) {
  return op != Op::kNone && op != Op::kSyncThreads;
}

// Thrown to unwind a thread once the launch has failed (here or in another thread); caught at
// the thread's top. Not a std::exception, so a kernel's own catch of those does not swallow it.
struct Aborted {};

// What a lane publishes for a warp operation; the fields of other operations stay unused.
struct LaneInputs {
  float value = 0;     // ShflXor
  uint32_t a[4] = {};  // Mma16816
  uint32_t b[2] = {};
  const unsigned char* row = nullptr;  // LdMatrixX4: this lane's row address
};
using WarpInputs = std::array<LaneInputs, kWarpSize>;

// Threads [first, first + count) meet here; a returned thread leaves it (expected drops).
struct Barrier {
  unsigned first = 0, count = 0;
  unsigned expected = 0, arrived = 0;
  uint64_t generation = 0;  // +1 at each release; a waiter waits for it to change
  std::condition_variable released;
};

struct Warp {
  Barrier barrier;
  // Successive warp operations use the two areas alternately: a lane writes area n % 2 before
  // the barrier of operation n and reads it after. It can only write that area again at
  // operation n + 2, after every lane has arrived at n + 1 and so has finished reading n; hence
  // one barrier per operation is enough.
  std::array<WarpInputs, 2> exchange;
  unsigned returned = 0;  // lanes whose body has returned
};

// One 16-byte cp.async, waiting to be performed.
struct PendingCopy {
  void* dst;
  const void* src;
};
// A thread's cp.async copies not yet performed (in the Block, with its other per-thread state).
struct CopyQueue {
  std::vector<PendingCopy> open;                 // issued since the last commit
  std::vector<std::vector<PendingCopy>> groups;  // committed, oldest first
};

// Who last touched two bytes of shared memory, for the race check: the warp that last wrote
// them and the warps that read them, each with the block barrier generation (the number of
// SyncThreads the block has passed) it happened in.
constexpr uint64_t kNever = ~uint64_t{0};
struct SharedAccess {
  uint64_t write_generation = kNever;
  int write_warp = -1;
  uint64_t read_generation = kNever;
  int read_warp = -1;
  bool read_by_several = false;  // several warps read them in read_generation
};

struct Block {
  Block(const LaunchConfig& config, unsigned x, unsigned y, unsigned char* shared)
      : config(config),
        x(x),
        y(y),
        shared(shared),
        warps(config.threads / kWarpSize),
        waiting(config.threads, Op::kNone),
        returned(config.threads, false),
        accesses((config.shared_bytes + 1) / 2),
        copies(config.threads) {
    block_barrier.first = 0;
    block_barrier.count = block_barrier.expected = config.threads;
    for (unsigned w = 0; w < warps.size(); ++w) {
      warps[w].barrier.first = w * kWarpSize;
      warps[w].barrier.count = warps[w].barrier.expected = kWarpSize;
    }
  }

  std::string Where(unsigned thread) const {
    return "block (" + std::to_string(x) + ", " + std::to_string(y) + ") thread " +
           std::to_string(thread) + " (warp " + std::to_string(thread / kWarpSize) + ", lane " +
           std::to_string(thread % kWarpSize) + ")";
  }

  // Keeps the first failure and wakes every waiter so that it unwinds. Caller holds mutex.
  void RecordFailure(const std::string& message) {
    if (failed.load())
      return;
    failure = message;
    failed.store(true);
    block_barrier.released.notify_all();
    for (Warp& warp : warps)
      warp.barrier.released.notify_all();
  }

  // Caller holds mutex.
  [[noreturn]] void Fail(unsigned thread, const std::string& what) {
    RecordFailure(Where(thread) + ": " + what);
    throw Aborted{};
  }

  [[noreturn]] void FailUnlocked(unsigned thread, const std::string& what) {
    std::lock_guard lock(mutex);
    Fail(thread, what);
  }

  // A thread about to wait in op: every lane of its warp already waiting must wait in the same
  // op (otherwise neither barrier can ever release), and a warp operation needs all 32 lanes.
  void CheckWarpAgrees(Op op, unsigned thread) {
    const unsigned first = thread / kWarpSize * kWarpSize;
    for (unsigned t = first; t < first + kWarpSize; ++t) {
      if (t != thread && waiting[t] != Op::kNone && waiting[t] != op)
        Fail(thread, std::string("calls ") + OpName(op) + " while lane " +
                         std::to_string(t % kWarpSize) + " of its warp waits in " +
                         OpName(waiting[t]) + " (the lanes of the warp diverged)");
      if (IsWarpOp(op) && returned[t])
        Fail(thread, std::string("calls ") + OpName(op) + " but lane " +
                         std::to_string(t % kWarpSize) +
                         " of its warp has returned from the kernel (a warp operation needs "
                         "all 32 lanes)");
    }
  }

  // Opens the barrier; the caller then unlocks and notifies barrier.released. Notifying after
  // unlocking lets the woken threads take the mutex at once instead of queueing on it (this
  // halves the cost of a warp operation).
  void Release(Barrier& barrier, Op op) {
    barrier.arrived = 0;
    ++barrier.generation;
    // Cleared here, not by each waiter as it wakes: a lane slow to wake is no longer waiting,
    // and CheckWarpAgrees must not mistake it for one in a different operation.
    for (unsigned t = barrier.first; t < barrier.first + barrier.count; ++t)
      if (waiting[t] == op)
        waiting[t] = Op::kNone;
  }

  void ArriveAndWait(std::unique_lock<std::mutex>& lock, Barrier& barrier, Op op, unsigned thread) {
    CheckWarpAgrees(op, thread);
    waiting[thread] = op;
    if (++barrier.arrived == barrier.expected) {
      Release(barrier, op);
      lock.unlock();
      barrier.released.notify_all();
      return;
    }
    const uint64_t generation = barrier.generation;
    const bool released = barrier.released.wait_for(lock, config.barrier_timeout, [&] {
      return failed.load() || barrier.generation != generation;
    });
    if (failed.load())
      throw Aborted{};
    if (!released)
      Fail(thread, std::string(OpName(op)) + ": only " + std::to_string(barrier.arrived) +
                       " of the " + std::to_string(barrier.expected) +
                       " threads it waits for arrived within " +
                       std::to_string(config.barrier_timeout.count()) + " ms");
  }

  // The race check of shared memory, for the accesses made through primitives (ldmatrix reads;
  // Store32, Zero16 and cp.async writes): between two SyncThreads a warp may not read what
  // another warp wrote, nor write what another warp wrote or read. (Lanes of one warp are taken
  // to be in step.) Addresses outside shared memory are not checked. Caller holds mutex.
  bool InShared(const void* address, size_t bytes) const {
    const auto a = reinterpret_cast<uintptr_t>(address);
    const auto base = reinterpret_cast<uintptr_t>(shared);
    return a >= base && a - base < config.shared_bytes && bytes <= config.shared_bytes - (a - base);
  }
  // The tracked two-byte elements [first, end) that bytes at address cover.
  std::pair<size_t, size_t> Elements(const void* address, size_t bytes) const {
    const size_t first =
        (reinterpret_cast<uintptr_t>(address) - reinterpret_cast<uintptr_t>(shared)) / 2;
    return {first, first + (bytes + 1) / 2};
  }
  void CheckRead(unsigned thread, const void* address, size_t bytes, const char* what) {
    if (!InShared(address, bytes))
      return;
    const int warp = static_cast<int>(thread / kWarpSize);
    const uint64_t now = block_barrier.generation;
    const auto [first, end] = Elements(address, bytes);
    for (size_t i = first; i < end; ++i) {
      SharedAccess& a = accesses[i];
      if (a.write_generation == now && a.write_warp != warp)
        Fail(thread, std::string(what) + " reads shared memory at offset " + std::to_string(2 * i) +
                         " that warp " + std::to_string(a.write_warp) +
                         " wrote since the last SyncThreads (a missing barrier)");
      if (a.read_generation != now) {
        a.read_generation = now;
        a.read_warp = warp;
        a.read_by_several = false;
      } else if (a.read_warp != warp) {
        a.read_by_several = true;
      }
    }
  }
  // record: the store happens now (else it is a cp.async being issued: checked, not recorded).
  void CheckWrite(unsigned thread, const void* address, size_t bytes, const char* what,
                  bool record) {
    if (!InShared(address, bytes))
      return;
    const int warp = static_cast<int>(thread / kWarpSize);
    const uint64_t now = block_barrier.generation;
    const auto [first, end] = Elements(address, bytes);
    for (size_t i = first; i < end; ++i) {
      SharedAccess& a = accesses[i];
      if (a.read_generation == now && (a.read_warp != warp || a.read_by_several))
        Fail(thread, std::string(what) + " writes shared memory at offset " +
                         std::to_string(2 * i) + " that warp " +
                         std::to_string(a.read_warp == warp ? -1 : a.read_warp) +
                         " read since the last SyncThreads (a missing barrier)");
      if (a.write_generation == now && a.write_warp != warp)
        Fail(thread, std::string(what) + " writes shared memory at offset " +
                         std::to_string(2 * i) + " that warp " + std::to_string(a.write_warp) +
                         " wrote since the last SyncThreads (a missing barrier)");
      if (record) {
        a.write_generation = now;
        a.write_warp = warp;
      }
    }
  }

  // The thread's body returned: it leaves the block barrier (like arrive_and_drop), which may
  // release the others; its warp can no longer perform warp operations.
  void Return(unsigned thread) {
    std::unique_lock lock(mutex);
    if (failed.load())
      return;
    returned[thread] = true;
    ++warps[thread / kWarpSize].returned;
    const unsigned first = thread / kWarpSize * kWarpSize;
    for (unsigned t = first; t < first + kWarpSize; ++t)
      if (IsWarpOp(waiting[t]))
        Fail(thread, "returned from the kernel while lane " + std::to_string(t % kWarpSize) +
                         " of its warp waits in " + OpName(waiting[t]));
    --block_barrier.expected;
    if (block_barrier.arrived > 0 && block_barrier.arrived == block_barrier.expected) {
      Release(block_barrier, Op::kSyncThreads);
      lock.unlock();
      block_barrier.released.notify_all();
    }
  }

  const LaunchConfig& config;
  const unsigned x, y;
  unsigned char* const shared;

  std::mutex mutex;                 // guards everything below, except the exchange areas (see Warp)
  std::atomic<bool> failed{false};  // also read without the mutex, to stop early
  std::string failure;
  Barrier block_barrier;  // SyncThreads: the threads still running
  std::vector<Warp> warps;
  std::vector<Op> waiting;             // per thread: the operation it waits in, or kNone
  std::vector<bool> returned;          // per thread: its body has returned
  std::vector<SharedAccess> accesses;  // per 2 bytes of shared memory
  std::vector<CopyQueue> copies;       // per thread; each touched only by its thread
};

struct ThreadContext {
  Block* block = nullptr;
  unsigned thread = 0;
  unsigned warp_ops = 0;  // warp operations performed so far: picks the exchange area
};
thread_local ThreadContext t_self;

// The calling emulated thread; a primitive called outside Launch is a bug in the test.
ThreadContext& Self(const char* primitive) {
  if (t_self.block == nullptr)
    throw std::logic_error(std::string("tessera::warp_emu::") + primitive +
                           " called outside Launch");
  return t_self;
}

// Self, for a primitive that synchronises or writes: once the launch has failed the thread
// unwinds here, so a kernel looping over primitives stops too.
ThreadContext& Enter(const char* primitive) {
  ThreadContext& self = Self(primitive);
  if (self.block->failed.load(std::memory_order_relaxed))
    throw Aborted{};
  return self;
}

// One warp-wide operation for the calling lane: publishes inputs, waits for all 32 lanes, and
// returns every lane's inputs (valid until this lane's next warp operation).
const WarpInputs& Exchange(ThreadContext& self, Op op, const LaneInputs& inputs) {
  Block& block = *self.block;
  Warp& warp = block.warps[self.thread / kWarpSize];
  WarpInputs& area = warp.exchange[self.warp_ops++ % 2];
  area[self.thread % kWarpSize] = inputs;
  std::unique_lock lock(block.mutex);
  block.ArriveAndWait(lock, warp.barrier, op, self.thread);
  return area;
}

float Bf16Half(uint32_t reg, unsigned high) {
  return model::cuda::warp::Bf16ToFloat(static_cast<uint16_t>(high ? reg >> 16 : reg & 0xffff));
}

// Element (row, k) of the 16x16 A operand: which lane and register hold it (warp_mma.cuh).
float AElement(const WarpInputs& lanes, unsigned row, unsigned k) {
  const unsigned lane = 4 * (row % 8) + (k % 8) / 2;
  const unsigned reg = row / 8 + 2 * (k / 8);
  return Bf16Half(lanes[lane].a[reg], k % 2);
}

// Element (k, n) of the 16x8 B operand.
float BElement(const WarpInputs& lanes, unsigned k, unsigned n) {
  const unsigned lane = 4 * n + (k % 8) / 2;
  return Bf16Half(lanes[lane].b[k / 8], k % 2);
}

void RunThread(Block& block, unsigned thread, const std::function<void()>& body) {
  t_self = ThreadContext{&block, thread, 0};
  try {
    body();
    block.Return(thread);
  } catch (const Aborted&) {
    // The failure is recorded already.
  } catch (const std::exception& e) {
    std::lock_guard lock(block.mutex);
    block.RecordFailure(block.Where(thread) + ": the kernel threw: " + e.what());
  } catch (...) {
    std::lock_guard lock(block.mutex);
    block.RecordFailure(block.Where(thread) + ": the kernel threw a non-std::exception");
  }
  t_self = ThreadContext{};
}

struct AlignedDelete {
  void operator()(unsigned char* p) const {
    ::operator delete (p, std::align_val_t{kSharedAlignment});
  }
};

}  // namespace

unsigned ThreadIdx() {
  return Self("ThreadIdx").thread;
}
unsigned BlockDimX() {
  return Self("BlockDimX").block->config.threads;
}
unsigned BlockIdxX() {
  return Self("BlockIdxX").block->x;
}
unsigned BlockIdxY() {
  return Self("BlockIdxY").block->y;
}
unsigned GridDimX() {
  return Self("GridDimX").block->config.grid_x;
}
unsigned char* SharedMemory() {
  return Self("SharedMemory").block->shared;
}

void SyncThreads() {
  ThreadContext& self = Enter("SyncThreads");
  std::unique_lock lock(self.block->mutex);
  self.block->ArriveAndWait(lock, self.block->block_barrier, Op::kSyncThreads, self.thread);
}

void SyncWarp() {
  ThreadContext& self = Enter("SyncWarp");
  Exchange(self, Op::kSyncWarp, LaneInputs{});
}

float ShflXor(float value, int lane_mask) {
  ThreadContext& self = Enter("ShflXor");
  // A mask past the warp would, on the device, return the lane's own value; it is a bug here.
  if (lane_mask < 0 || lane_mask >= static_cast<int>(kWarpSize))
    self.block->FailUnlocked(self.thread,
                             "ShflXor: lane mask " + std::to_string(lane_mask) + " outside 0..31");
  LaneInputs inputs;
  inputs.value = value;
  const WarpInputs& lanes = Exchange(self, Op::kShflXor, inputs);
  return lanes[(self.thread % kWarpSize) ^ static_cast<unsigned>(lane_mask)].value;
}

void Mma16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  ThreadContext& self = Enter("Mma16816");
  LaneInputs inputs;
  std::memcpy(inputs.a, a, sizeof(inputs.a));
  std::memcpy(inputs.b, b, sizeof(inputs.b));
  const WarpInputs& lanes = Exchange(self, Op::kMma16816, inputs);
  const unsigned g = self.thread % kWarpSize / 4, t = self.thread % 4;
  const unsigned rows[4] = {g, g, g + 8, g + 8};
  const unsigned cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  for (int i = 0; i < 4; ++i) {
    // A product of two bf16 is exact in float; the sum runs over k in order.
    float sum = 0;
    for (unsigned k = 0; k < 16; ++k)
      sum += AElement(lanes, rows[i], k) * BElement(lanes, k, cols[i]);
    d[i] += sum;
  }
}

void LdMatrixX4(uint32_t r[4], const void* row_address, bool trans) {
  const Op op = trans ? Op::kLdMatrixX4Trans : Op::kLdMatrixX4;
  ThreadContext& self = Enter(OpName(op));
  Block& block = *self.block;
  const auto address = reinterpret_cast<uintptr_t>(row_address);
  const auto base = reinterpret_cast<uintptr_t>(block.shared);
  const size_t bytes = block.config.shared_bytes;
  if (address % 16 != 0 || address < base || address - base > bytes ||
      bytes - (address - base) < 16)
    block.FailUnlocked(
        self.thread, std::string(OpName(op)) + ": lane " + std::to_string(self.thread % kWarpSize) +
                         "'s row address is at shared-memory offset " +
                         std::to_string(static_cast<long long>(address - base)) +
                         ", not a 16-byte aligned row of 16 bytes inside the block's " +
                         std::to_string(bytes) + " bytes of shared memory");
  {
    std::lock_guard lock(block.mutex);
    block.CheckRead(self.thread, row_address, 16, OpName(op));
  }
  LaneInputs inputs;
  inputs.row = static_cast<const unsigned char*>(row_address);
  const WarpInputs& lanes = Exchange(self, op, inputs);
  const unsigned g = self.thread % kWarpSize / 4, t = self.thread % 4;
  for (unsigned i = 0; i < 4; ++i) {
    // Lanes 8i..8i+7 hold the addresses of rows 0..7 of matrix i.
    auto element = [&](unsigned row, unsigned col) {
      uint16_t bits;
      std::memcpy(&bits, lanes[8 * i + row].row + 2 * col, sizeof(bits));
      return static_cast<uint32_t>(bits);
    };
    const uint32_t lo = trans ? element(2 * t, g) : element(g, 2 * t);
    const uint32_t hi = trans ? element(2 * t + 1, g) : element(g, 2 * t + 1);
    r[i] = lo | (hi << 16);
  }
}

void AtomicAdd(float* address, float value) {
  ThreadContext& self = Enter("AtomicAdd");
  if (reinterpret_cast<uintptr_t>(address) % std::atomic_ref<float>::required_alignment != 0)
    self.block->FailUnlocked(self.thread, "AtomicAdd: address not 4-byte aligned");
  // Relaxed, as CUDA's atomicAdd: the result is read after Launch joins the threads.
  std::atomic_ref<float>(*address).fetch_add(value, std::memory_order_relaxed);
}

void CpAsync16(void* shared_dst, const void* global_src) {
  ThreadContext& self = Enter("CpAsync16");
  const auto dst = reinterpret_cast<uintptr_t>(shared_dst);
  const auto base = reinterpret_cast<uintptr_t>(self.block->shared);
  if (dst < base || dst - base > self.block->config.shared_bytes ||
      self.block->config.shared_bytes - (dst - base) < 16)
    self.block->FailUnlocked(self.thread,
                             "CpAsync16: the destination is not 16 bytes inside the block's "
                             "shared memory");
  {
    std::lock_guard lock(self.block->mutex);
    self.block->CheckWrite(self.thread, shared_dst, 16, "CpAsync16", false);
  }
  self.block->copies[self.thread].open.push_back({shared_dst, global_src});
}

void NoteStore(const void* address, unsigned bytes) {
  ThreadContext& self = Enter("a store");
  std::lock_guard lock(self.block->mutex);
  self.block->CheckWrite(self.thread, address, bytes, "a store", true);
}

void CpAsyncCommit() {
  ThreadContext& self = Enter("CpAsyncCommit");
  CopyQueue& queue = self.block->copies[self.thread];
  queue.groups.push_back(std::move(queue.open));
  queue.open.clear();
}

void CpAsyncWait(int pending) {
  ThreadContext& self = Enter("CpAsyncWait");
  CopyQueue& queue = self.block->copies[self.thread];
  while (queue.groups.size() > static_cast<size_t>(pending < 0 ? 0 : pending)) {
    for (const PendingCopy& copy : queue.groups.front()) {
      {
        std::lock_guard lock(self.block->mutex);
        self.block->CheckWrite(self.thread, copy.dst, 16, "a cp.async landing at CpAsyncWait",
                               true);
      }
      std::memcpy(copy.dst, copy.src, 16);
    }
    queue.groups.erase(queue.groups.begin());
  }
}

void Launch(const LaunchConfig& config, const std::function<void()>& body) {
  if (config.threads == 0 || config.threads % kWarpSize != 0 || config.threads > kMaxThreads)
    throw std::invalid_argument("tessera::warp_emu::Launch: threads per block is " +
                                std::to_string(config.threads) +
                                "; it must be a multiple of 32 from 32 to 1024");
  if (config.grid_x == 0 || config.grid_y == 0)
    throw std::invalid_argument("tessera::warp_emu::Launch: the grid must not be empty");
  if (!body)
    throw std::invalid_argument("tessera::warp_emu::Launch: no body");

  // Exactly shared_bytes long, so AddressSanitizer catches a kernel that overruns it.
  const std::unique_ptr<unsigned char, AlignedDelete> shared(static_cast<unsigned char*>(
      ::operator new (config.shared_bytes, std::align_val_t{kSharedAlignment})));

  // One host thread per CUDA thread of a block, kept for every block of the launch: worker t
  // runs thread t of each block in turn. (A host thread per CUDA thread of the whole grid, tens
  // of thousands in a test, made LeakSanitizer report the OpenMP threads' thread_local buffers
  // of the CPU reference as leaks.)
  std::mutex mutex;
  std::condition_variable block_ready, block_done;
  Block* current = nullptr;
  uint64_t block_number = 0;  // +1 for each block handed out
  unsigned finished = 0;      // workers done with the current block
  bool stop = false;
  auto worker = [&](unsigned thread) {
    for (uint64_t seen = 0;;) {
      Block* block = nullptr;
      {
        std::unique_lock lock(mutex);
        block_ready.wait(lock, [&] { return stop || block_number != seen; });
        if (stop)
          return;
        seen = block_number;
        block = current;
      }
      RunThread(*block, thread, body);
      std::lock_guard lock(mutex);
      if (++finished == config.threads)
        block_done.notify_one();
    }
  };
  std::vector<std::thread> workers;
  workers.reserve(config.threads);
  auto stop_workers = [&] {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    block_ready.notify_all();
    for (std::thread& thread : workers)
      thread.join();
  };
  try {
    for (unsigned t = 0; t < config.threads; ++t)
      workers.emplace_back(worker, t);
  } catch (const std::system_error& e) {
    stop_workers();
    throw std::runtime_error(std::string("tessera::warp_emu::Launch: could not start a host "
                                         "thread: ") +
                             e.what());
  }
  for (unsigned y = 0; y < config.grid_y; ++y) {
    for (unsigned x = 0; x < config.grid_x; ++x) {
      std::memset(shared.get(), 0xFF, config.shared_bytes);
      Block block(config, x, y, shared.get());
      {
        std::unique_lock lock(mutex);
        current = &block;
        finished = 0;
        ++block_number;
        block_ready.notify_all();
        block_done.wait(lock, [&] { return finished == config.threads; });
        current = nullptr;
      }
      if (block.failed.load()) {
        stop_workers();
        throw std::runtime_error("tessera::warp_emu::Launch: " + block.failure);
      }
    }
  }
  stop_workers();
}

}  // namespace tessera::warp_emu
