// GptCuda in a build without CUDA: CreateGptCuda says so and returns null, so callers need
// no #ifdef. The methods exist only to link; no GptCuda object can be created here.
#include <stdexcept>

#include "worker/model/cuda/gpt_cuda.h"

namespace tessera::model {

struct GptCuda::Impl {};

namespace {
[[noreturn]] void NotBuilt() {
  throw std::logic_error("GptCuda: built without CUDA");
}
}  // namespace

GptCuda::GptCuda(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GptCuda::~GptCuda() = default;
const GptConfig& GptCuda::config() const {
  NotBuilt();
}
int64_t GptCuda::parameter_count() const {
  NotBuilt();
}
void GptCuda::InitParameters(uint64_t) {
  NotBuilt();
}
void GptCuda::SetParameters(std::span<const float>) {
  NotBuilt();
}
void GptCuda::GetParameters(std::span<float>) const {
  NotBuilt();
}
void GptCuda::GetGradients(std::span<float>) const {
  NotBuilt();
}
void GptCuda::GetOptimizerState(std::span<float>, std::span<float>) const {
  NotBuilt();
}
void GptCuda::SetOptimizerState(std::span<const float>, std::span<const float>, int64_t) {
  NotBuilt();
}
void GptCuda::Forward(std::span<const int32_t>, std::span<const int32_t>, int, int) {
  NotBuilt();
}
float GptCuda::Loss() {
  NotBuilt();
}
void GptCuda::GetLogits(std::span<float>) {
  NotBuilt();
}
void GptCuda::Backward(float, const GpuGradientsReadyFn&) {
  NotBuilt();
}
void GptCuda::ZeroGradients() {
  NotBuilt();
}
void GptCuda::Step(const GpuAdamWOptions&, float) {
  NotBuilt();
}
int64_t GptCuda::step_count() const {
  NotBuilt();
}
float GptCuda::GradNorm() {
  NotBuilt();
}
void GptCuda::Synchronize() {
  NotBuilt();
}
float* GptCuda::device_parameters() {
  NotBuilt();
}
float* GptCuda::device_gradients() {
  NotBuilt();
}
void* GptCuda::stream() {
  NotBuilt();
}
int64_t GptCuda::activation_bytes() const {
  NotBuilt();
}

bool GptCudaCompiled() {
  return false;
}

int CudaDeviceCount() {
  return 0;
}

std::optional<int64_t> CudaFreeMemory(int) {
  return std::nullopt;
}

std::unique_ptr<GptCuda> CreateGptCuda(const GptConfig&, const GptCudaOptions&,
                                       std::string* error) {
  if (error != nullptr)
    *error = "built without CUDA (configure with a CUDA toolkit and TESSERA_CUDA=AUTO or ON)";
  return nullptr;
}

}  // namespace tessera::model
