#include "worker/comm/process_group.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <cmath>
#include <cstdlib>

namespace tessera::comm {

size_t ElementSize(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return 4;
    case DataType::kFloat64:
      return 8;
    case DataType::kInt32:
      return 4;
    case DataType::kInt64:
      return 8;
    case DataType::kUInt8:
      return 1;
    case DataType::kBFloat16:
      return 2;
  }
  return 0;
}

const char* ToString(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kUInt8:
      return "uint8";
    case DataType::kBFloat16:
      return "bfloat16";
  }
  return "unknown";
}

const char* ToString(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
  }
  return "unknown";
}

CommOptions CommOptions::FromEnv() {
  CommOptions o;
  const char* t = std::getenv("TESSERA_COMM_TIMEOUT");
  if (t == nullptr || *t == '\0')
    return o;
  char* end = nullptr;
  const double seconds = std::strtod(t, &end);
  if (end == t || *end != '\0' || !std::isfinite(seconds) || seconds <= 0 || seconds > 1e7) {
    throw CommConfigError(std::string("TESSERA_COMM_TIMEOUT=") + t +
                          ": expected a positive number of seconds (default 60)");
  }
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
  return o;
}

void ProcessGroup::wait_event(void*) {
  throw CommError("group " + name() + " (" + backend() +
                  "): works on host memory and cannot wait for a device event");
}

std::string DescribeRank(int world_rank) {
  return "rank " + std::to_string(world_rank);
}

bool YieldCoresToCommunication(int nice) {
  if (nice == 0)
    return true;
  // On Linux a priority set with the thread id applies to that thread only (and is inherited
  // by the threads it creates).
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  errno = 0;
  const int current = ::getpriority(PRIO_PROCESS, tid);
  if (current == -1 && errno != 0)
    return false;
  return ::setpriority(PRIO_PROCESS, tid, std::min(19, current + nice)) == 0;
}

int ComputeNiceFromEnv() {
  const char* v = std::getenv("TESSERA_COMPUTE_NICE");
  if (v == nullptr || *v == '\0')
    return 10;
  char* end = nullptr;
  const long nice = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || nice < 0 || nice > 19) {
    throw CommConfigError(std::string("TESSERA_COMPUTE_NICE=") + v +
                          ": expected an integer from 0 (off) to 19 (default 10)");
  }
  return static_cast<int>(nice);
}

}  // namespace tessera::comm
