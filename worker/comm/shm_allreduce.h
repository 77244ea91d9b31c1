// A float32 all-reduce through shared memory, for the ranks of a group that all run on one
// machine (tessera run, or procsPerWorker ranks in one pod). Gloo's TCP pairs move such data
// through the kernel's loopback: 0.44-0.93 GB/s on the 2-core development machine
// (allreduce_bench), and every byte costs the CPU time that backward needs, so a reduction
// overlapped with backward falls behind (bench/dp_overlap). Here each rank copies its data into
// its slot of one segment, reduces its 1/N share of every slot in rank order, and copies the
// result back: memory copies, two barriers per piece (futex waits, no spinning past a moment).
//
// A Gloo group (the world, or a data, pipeline or tensor group split from it) uses it for
// float32 sums and averages whenever its ranks share a machine
// (GlooOptions::shared_memory_allreduce; TESSERA_SHM_ALLREDUCE=0 turns it off), and Gloo for
// everything else, in the same order on the same thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "worker/rendezvous/store_client.h"

namespace tessera::comm {

class ShmAllReduce {
 public:
  // Floats per rank and piece: a segment holds size() + 1 such slots (1 MiB each).
  static constexpr size_t kSlotFloats = size_t{1} << 18;
  static constexpr int kMaxRanks = 64;

  // Collective over the group: every rank calls it with the same `prefix` (store keys). Null,
  // with the reason in *why, on every rank alike when the ranks are not all on one machine
  // (`machine`, by default this machine's hostname and boot id, compared through the store),
  // there are more than kMaxRanks, or a rank could not map the segment. `timeout` bounds the
  // setup and every wait of AllReduce.
  static std::unique_ptr<ShmAllReduce> Create(rendezvous::StoreClient& store,
                                              const std::string& prefix, int rank, int size,
                                              std::chrono::milliseconds timeout, std::string* why,
                                              const std::string& machine = ThisMachine());
  // "<hostname>/<kernel boot id>": containers of one host share the boot id, two hosts never.
  static std::string ThisMachine();
  ~ShmAllReduce();
  ShmAllReduce(const ShmAllReduce&) = delete;
  ShmAllReduce& operator=(const ShmAllReduce&) = delete;

  // In place: data[0..count) becomes the sum over the ranks, divided by size() when `average`.
  // Every rank gets bit-identical results (each value is summed once, in rank order). Throws
  // CommError naming a rank that did not arrive within the timeout, or after Abort().
  void AllReduce(float* data, size_t count, bool average);

  // Makes a waiting AllReduce, and every later one, throw CommError with `why` (the group
  // broke). Thread-safe.
  void Abort(const std::string& why);

  // How many ranks of the job run on this machine, when more than this group's (a tensor
  // group of 2 among 4 ranks): a waiting rank spins before it sleeps only while every one of
  // them has a core. Call it before the first AllReduce.
  void SetRanksHere(int ranks);

  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  struct Header;
  ShmAllReduce(void* base, size_t bytes, int rank, int size, std::chrono::milliseconds timeout);
  // The next phase: publishes this rank's arrival, then waits for every other rank's.
  void Barrier();
  float* Slot(int r) const;

  void* base_;
  size_t bytes_;
  Header* header_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  uint32_t phase_ = 0;
  int spin_limit_ = 0;  // polls of a peer's word before sleeping on it (see the constructor)
  std::mutex abort_mu_;
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;  // written once, under abort_mu_, before aborted_ is set
};

}  // namespace tessera::comm
