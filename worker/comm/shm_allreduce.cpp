#include "worker/comm/shm_allreduce.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <vector>

#include "worker/comm/process_group.h"

namespace tessera::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kHeaderBytes = 8192;  // the header (two pages), then the slots

// Futexes on a shared mapping (not FUTEX_PRIVATE_FLAG): the waiters are other processes.
void FutexWake(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}
void FutexWait(std::atomic<uint32_t>* word, uint32_t seen, std::chrono::microseconds limit) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(limit.count() / 1000000);
  ts.tv_nsec = static_cast<long>(limit.count() % 1000000) * 1000;
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

// The spin-wait hint: lets the sibling hyper-thread run and saves power while polling.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

std::string RandomHex() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%08x%08x", rd(), rd());
  return buf;
}

size_t SegmentBytes(int size) {
  return kHeaderBytes + static_cast<size_t>(size + 1) * ShmAllReduce::kSlotFloats * sizeof(float);
}

}  // namespace

std::string ShmAllReduce::ThisMachine() {
  char name[256] = {0};
  ::gethostname(name, sizeof(name) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return std::string(name) + "/" + boot;
}

// The segment: this header, then size() + 1 slots of kSlotFloats (the last holds the result).
// Fresh shared pages are zero, so every rank's phase starts at 0.
struct ShmAllReduce::Header {
  struct alignas(64) Arrival {
    std::atomic<uint32_t> phase;  // the last barrier phase this rank reached
  };
  Arrival ranks[kMaxRanks];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex words must be plain words");

std::unique_ptr<ShmAllReduce> ShmAllReduce::Create(rendezvous::StoreClient& store,
                                                   const std::string& prefix, int rank, int size,
                                                   std::chrono::milliseconds timeout,
                                                   std::string* why, const std::string& machine) {
  auto refuse = [&](const std::string& reason) -> std::unique_ptr<ShmAllReduce> {
    if (why != nullptr)
      *why = reason;
    return nullptr;
  };
  if (size < 2 || size > kMaxRanks)
    return refuse("shared-memory all-reduce needs 2 to " + std::to_string(kMaxRanks) + " ranks");
  static_assert(sizeof(Header) <= kHeaderBytes, "the header fits before the slots");
  const std::string keys = prefix + "shm/";

  // 1. Are we all on this machine? Every rank reads the same answers, so all decide alike.
  store.Set(keys + "machine/" + std::to_string(rank), machine);
  std::vector<std::string> machine_keys;
  for (int r = 0; r < size; ++r)
    machine_keys.push_back(keys + "machine/" + std::to_string(r));
  const std::vector<std::string> machines = store.Wait(machine_keys, timeout);
  for (int r = 1; r < size; ++r) {
    if (machines[r] != machines[0])
      return refuse("ranks 0 and " + std::to_string(r) + " are on different machines");
  }

  // 2. Rank 0 makes the segment; everyone maps it and says whether that worked.
  const size_t bytes = SegmentBytes(size);
  std::string name;
  std::string failure;
  if (rank == 0) {
    name = "/tessera-" + std::to_string(::getpid()) + "-" + RandomHex();
    // The pages are allocated now, not at first touch: on a full /dev/shm (a pod's is 64 MiB
    // by default) a touch would kill the rank with SIGBUS mid-step; here the group falls back
    // to Gloo instead.
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    int error = fd < 0 ? errno : 0;
    if (error == 0 && ::ftruncate(fd, static_cast<off_t>(bytes)) != 0)
      error = errno;
    if (error == 0)
      error = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (error != 0) {
      failure = "cannot create " + name + " in /dev/shm: " + std::strerror(error);
      if (fd >= 0) {
        ::close(fd);
        ::shm_unlink(name.c_str());
      }
      name.clear();
    } else {
      ::close(fd);
    }
    store.Set(keys + "name", name);
  } else {
    name = store.Get(keys + "name", timeout);
    if (name.empty())
      failure = "rank 0 could not create the segment";
  }
  void* base = MAP_FAILED;
  if (!name.empty()) {
    const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
    if (fd >= 0) {
      base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      ::close(fd);
    }
    if (base == MAP_FAILED)
      failure = "cannot map " + name + ": " + std::strerror(errno);
  }
  // From here the name and the mapping are released on every way out, a store timeout too.
  std::unique_ptr<void, std::function<void(void*)>> mapping(
      base == MAP_FAILED ? nullptr : base, [bytes](void* p) { ::munmap(p, bytes); });
  std::unique_ptr<const std::string, std::function<void(const std::string*)>> unlink_name(
      rank == 0 && !name.empty() ? &name : nullptr,
      [](const std::string* n) { ::shm_unlink(n->c_str()); });
  store.Set(keys + "mapped/" + std::to_string(rank), failure);
  std::vector<std::string> mapped_keys;
  for (int r = 0; r < size; ++r)
    mapped_keys.push_back(keys + "mapped/" + std::to_string(r));
  const std::vector<std::string> mapped = store.Wait(mapped_keys, timeout);
  unlink_name.reset();  // every rank has opened it (or given up): no name left behind
  for (int r = 0; r < size; ++r) {
    if (!mapped[r].empty())
      return refuse("rank " + std::to_string(r) + ": " + mapped[r]);
  }
  return std::unique_ptr<ShmAllReduce>(
      new ShmAllReduce(mapping.release(), bytes, rank, size, timeout));
}

ShmAllReduce::ShmAllReduce(void* base, size_t bytes, int rank, int size,
                           std::chrono::milliseconds timeout)
    : base_(base),
      bytes_(bytes),
      header_(static_cast<Header*>(base)),
      rank_(rank),
      size_(size),
      timeout_(timeout) {
  SetRanksHere(size);
}

void ShmAllReduce::SetRanksHere(int ranks) {
  // With a core for every rank, a waiting rank spins up to some 100-400 us: its peer is then
  // running and arrives within that, and a sleeping waiter takes far longer to be woken on
  // cores busy with compute (dp_overlap_bench 2 ranks on 2 cores: buckets still pending at
  // the end of backward 3 -> 0 of 25). With more ranks than cores the spinner would hold the
  // core its peer needs (4 ranks on 2 cores: steps 120 -> 148 ms), so it sleeps almost at once.
  cpu_set_t cpus;
  const int available = ::sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  spin_limit_ = std::max(ranks, size_) <= available ? 32768 : 256;
}

ShmAllReduce::~ShmAllReduce() {
  ::munmap(base_, bytes_);
}

float* ShmAllReduce::Slot(int r) const {
  return reinterpret_cast<float*>(static_cast<char*>(base_) + kHeaderBytes) +
         static_cast<size_t>(r) * kSlotFloats;
}

void ShmAllReduce::Abort(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (aborted_.load())
      return;
    abort_reason_ = why;
  }
  aborted_.store(true);
  // Wake our own waits: they sleep on the other ranks' words, so poke them all (a spurious
  // wake-up elsewhere only makes a waiter look again).
  for (int r = 0; r < size_; ++r)
    FutexWake(&header_->ranks[r].phase);
}

void ShmAllReduce::Barrier() {
  ++phase_;
  header_->ranks[rank_].phase.store(phase_, std::memory_order_release);
  FutexWake(&header_->ranks[rank_].phase);
  const auto deadline = Clock::now() + timeout_;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_)
      continue;
    std::atomic<uint32_t>& word = header_->ranks[r].phase;
    for (int spins = 0;; ++spins) {
      const uint32_t seen = word.load(std::memory_order_acquire);
      if (static_cast<int32_t>(seen - phase_) >= 0)
        break;
      if (aborted_.load())
        throw CommError(abort_reason_);
      // Spin while the peer is likely a moment away, then sleep on its word (spin_limit_ says
      // how long). Not sched_yield: with compute threads runnable it hands the core away for
      // a whole time slice (measured: no bucket finished during backward).
      if (spins < spin_limit_) {
        CpuRelax();
        continue;
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        throw CommError("shared-memory all-reduce: rank " + std::to_string(r) +
                        " did not arrive within " + std::to_string(timeout_.count()) +
                        " ms (TESSERA_COMM_TIMEOUT)");
      }
      FutexWait(&word, seen,
                std::min<std::chrono::microseconds>(
                    std::chrono::milliseconds(50),
                    std::chrono::duration_cast<std::chrono::microseconds>(deadline - now)));
    }
  }
}

void ShmAllReduce::AllReduce(float* data, size_t count, bool average) {
  if (aborted_.load())
    throw CommError(abort_reason_);
  float* mine = Slot(rank_);
  float* result = Slot(size_);
  for (size_t done = 0; done < count; done += kSlotFloats) {
    const size_t n = std::min(kSlotFloats, count - done);
    // Every rank finished reading the previous piece's result and slots before arriving here.
    std::memcpy(mine, data + done, n * sizeof(float));
    Barrier();
    const size_t lo = n * static_cast<size_t>(rank_) / static_cast<size_t>(size_);
    const size_t hi = n * static_cast<size_t>(rank_ + 1) / static_cast<size_t>(size_);
    std::memcpy(result + lo, Slot(0) + lo, (hi - lo) * sizeof(float));
    for (int r = 1; r < size_; ++r) {
      const float* slot = Slot(r);
      for (size_t i = lo; i < hi; ++i)
        result[i] += slot[i];
    }
    Barrier();
    if (average) {
      for (size_t i = 0; i < n; ++i)
        data[done + i] = result[i] / static_cast<float>(size_);
    } else {
      std::memcpy(data + done, result, n * sizeof(float));
    }
  }
}

}  // namespace tessera::comm
