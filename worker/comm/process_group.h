// The communication interface every parallel strategy uses (DESIGN.md §6): a group of ranks
// running collectives and point-to-point transfers asynchronously, with work handles.
// Backends (Gloo on CPU, NCCL on GPU) live behind it; nothing here names either library.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace tessera::comm {

enum class DataType { kFloat32, kFloat64, kInt32, kInt64, kUInt8, kBFloat16 };
enum class ReduceOp { kSum, kAvg, kMax };

size_t ElementSize(DataType type);
const char* ToString(DataType type);
const char* ToString(ReduceOp op);

template <typename T>
constexpr DataType DataTypeOf();
template <>
constexpr DataType DataTypeOf<float>() {
  return DataType::kFloat32;
}
template <>
constexpr DataType DataTypeOf<double>() {
  return DataType::kFloat64;
}
template <>
constexpr DataType DataTypeOf<int32_t>() {
  return DataType::kInt32;
}
template <>
constexpr DataType DataTypeOf<int64_t>() {
  return DataType::kInt64;
}
template <>
constexpr DataType DataTypeOf<uint8_t>() {
  return DataType::kUInt8;
}

// A failed, timed-out or aborted communication. The message is one line that names the
// operation, the group and, when known, the lost rank (as a global rank).
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bad communication setting (for example TESSERA_COMM_TIMEOUT=abc): exit code 2.
class CommConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Settings shared by the backends.
struct CommOptions {
  // Every operation fails by this deadline instead of hanging; a lost peer is reported
  // sooner when the store learns of it.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};

  // TESSERA_COMM_TIMEOUT (seconds, may be fractional; default 60). Throws CommConfigError
  // naming the variable when it is not a positive number.
  static CommOptions FromEnv();
};

// The handle of an operation in flight. Buffers passed to the operation must stay alive
// and untouched until wait() returns (or throws). Thread-safe.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation finished. Throws CommError when it failed, a peer was lost,
  // or the communication timeout passed. Calling it again repeats the outcome.
  virtual void wait() = 0;
  // True once the operation finished, successfully or not. Never blocks.
  virtual bool completed() = 0;
};

// A group of ranks. Collectives must be issued in the same order on every member; they run
// in that order, asynchronously (compute may overlap them until wait()). Sends and receives
// match by (peer, tag) in issue order. Pointers are host memory for Gloo and device memory
// for NCCL. After any operation fails the group is broken: every later one fails at once.
// Thread-safe to issue from one thread at a time (ordering is the caller's contract).
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;
  // A readable name ("world", "world/data0") for messages and metrics.
  virtual const std::string& name() const = 0;
  // The world ranks of the members, indexed by group rank.
  virtual const std::vector<int>& world_ranks() const = 0;

  // In place: every rank ends with the reduction of all ranks' `data[0..count)`.
  // kAvg divides the sum by size() (integer division for integer types).
  virtual std::shared_ptr<Work> all_reduce(void* data, size_t count, DataType type,
                                           ReduceOp op) = 0;
  // `input` holds size() consecutive blocks of `count` elements; rank r receives the
  // reduction of every rank's block r in `output[0..count)`.
  virtual std::shared_ptr<Work> reduce_scatter(const void* input, void* output, size_t count,
                                               DataType type, ReduceOp op) = 0;
  // Each rank contributes `input[0..count)`; `output` receives size() blocks, block r
  // from rank r.
  virtual std::shared_ptr<Work> all_gather(const void* input, void* output, size_t count,
                                           DataType type) = 0;
  // In place: every rank ends with `root`'s `data[0..count)`.
  virtual std::shared_ptr<Work> broadcast(void* data, size_t count, DataType type, int root) = 0;
  // Point-to-point to another rank of the group (not to this rank itself).
  virtual std::shared_ptr<Work> send(const void* data, size_t count, DataType type, int dst,
                                     uint32_t tag = 0) = 0;
  virtual std::shared_ptr<Work> recv(void* data, size_t count, DataType type, int src,
                                     uint32_t tag = 0) = 0;
  virtual std::shared_ptr<Work> barrier() = 0;

  // Device backends: operations issued after this call start only once `cuda_event` (a
  // cudaEvent_t recorded on the producer's stream) has completed; the caller does not wait.
  // This is how a gradient bucket's all-reduce follows the backward kernels that finish it.
  // Host backends have no stream to order and throw CommError.
  virtual void wait_event(void* cuda_event);

  // Collective over this group (like MPI_Comm_split): ranks passing the same `color` form a
  // new group, ordered by (`key`, rank). A negative color takes part but joins no group and
  // gets nullptr. `name` labels the new group. Blocks until the new group is connected.
  virtual std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name) = 0;

  // Typed conveniences.
  template <typename T>
  std::shared_ptr<Work> all_reduce(std::span<T> data, ReduceOp op) {
    return all_reduce(data.data(), data.size(), DataTypeOf<T>(), op);
  }
  template <typename T>
  std::shared_ptr<Work> broadcast(std::span<T> data, int root) {
    return broadcast(data.data(), data.size(), DataTypeOf<T>(), root);
  }
};

// "rank 3" for messages about a lost world rank.
std::string DescribeRank(int world_rank);

// CPU training: the compute threads keep every core busy, and a collective overlapped with
// backward then progresses only when the scheduler happens to run the backend's threads.
// Lowers the scheduling priority of the calling thread by `nice` (and so of the threads it
// creates afterwards, e.g. the kernels' OpenMP team), so the communication threads, created
// earlier, run as soon as they have work. Call it once the process groups exist.
// `nice` 0 does nothing. Returns false (and changes nothing) when the system refuses.
bool YieldCoresToCommunication(int nice);

// TESSERA_COMPUTE_NICE (0..19; default 10): the `nice` for YieldCoresToCommunication.
// Throws CommConfigError naming the variable when it is not such an integer.
int ComputeNiceFromEnv();

}  // namespace tessera::comm
