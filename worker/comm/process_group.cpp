#include "worker/comm/process_group.h"

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

std::string DescribeRank(int world_rank) {
  return "rank " + std::to_string(world_rank);
}

}  // namespace tessera::comm
