#include "worker/parallel/tensor/tensor_parallel.h"

#include <chrono>

namespace tessera::parallel {

model::TensorSumFn MakeTensorSum(std::shared_ptr<comm::ProcessGroup> group,
                                 TensorCommStats* stats) {
  return [group = std::move(group), stats](float* data, int64_t count) {
    const auto start = std::chrono::steady_clock::now();
    group
        ->all_reduce(data, static_cast<size_t>(count), comm::DataType::kFloat32,
                     comm::ReduceOp::kSum)
        ->wait();
    if (stats != nullptr) {
      stats->seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      stats->bytes += static_cast<double>(count) * sizeof(float);
      stats->calls++;
    }
  };
}

}  // namespace tessera::parallel
