// Device primitives for hand-written kernels (flash_mma_kernels.cuh, layer_kernels.cuh): the PTX
// instructions mma.sync m16n8k16 (bf16 in, fp32 accumulate) and ldmatrix, plus the other things
// such a kernel touches (thread geometry, barriers, shuffles, atomics, 16-byte accesses, bf16
// conversion, the float functions).
//
// Two implementations of one contract. Compiled by nvcc for a device, each is the instruction.
// Compiled as host C++ with TESSERA_WARP_EMULATION defined, each calls tessera::warp_emu, a
// SIMT emulator (tests/unit/gpu_emulation) that runs every thread of a block as a host thread
// and performs the warp-wide operations with the element layouts of the PTX ISA; so the
// kernels' indexing, masking and softmax run in CI, where there is no GPU.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16", floating point types), with
// g = lane / 4 and t = lane % 4:
//   A (16x16, row-major), 4 registers of 2 bf16 (low half = lower column):
//     a[0] = A[g][2t..2t+1]    a[1] = A[g+8][2t..2t+1]
//     a[2] = A[g][2t+8..+9]    a[3] = A[g+8][2t+8..+9]
//   B (16x8, k x n), 2 registers:  b[0] = B[2t..2t+1][g]   b[1] = B[2t+8..+9][g]
//   C, D (16x8 fp32):  d[0], d[1] = D[g][2t], D[g][2t+1];  d[2], d[3] = D[g+8][2t], D[g+8][2t+1]
// ldmatrix .x4: lanes 8i..8i+7 give the addresses of the 8 rows (8 consecutive bf16, 16 bytes,
// 16-byte aligned, in shared memory) of matrix i; register i of every lane receives matrix i:
//   plain:  r[i] = M_i[g][2t..2t+1]        .trans:  r[i] = (M_i[2t][g], M_i[2t+1][g])
#pragma once

#include <cstdint>

#if defined(TESSERA_WARP_EMULATION)
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#define TESSERA_DEVICE inline
#define TESSERA_HOST_DEVICE
#define TESSERA_KERNEL(threads, min_blocks) void
#define TESSERA_KERNEL_MAX_THREADS(threads) void
#define TESSERA_GLOBAL void
#define TESSERA_UNROLL

namespace tessera::warp_emu {
// Thread geometry of the calling (emulated) thread.
unsigned ThreadIdx();
unsigned BlockDimX();
unsigned BlockIdxX();
unsigned BlockIdxY();
unsigned GridDimX();
// The block's dynamic shared memory (128-byte aligned, its size given at launch).
unsigned char* SharedMemory();
void SyncThreads();
void SyncWarp();
float ShflXor(float value, int lane_mask);
void Mma16816(float d[4], const uint32_t a[4], const uint32_t b[2]);
void LdMatrixX4(uint32_t r[4], const void* row_address, bool trans);
void AtomicAdd(float* address, float value);
// cp.async of the calling thread: queued, grouped at commit, performed at the wait.
void CpAsync16(void* shared_dst, const void* global_src);
// A store of `bytes` at address by the calling thread, about to be made: checked for a race
// with other warps' accesses since the last SyncThreads when it falls in shared memory.
void NoteStore(const void* address, unsigned bytes);
void CpAsyncCommit();
void CpAsyncWait(int pending);
}  // namespace tessera::warp_emu

#else
#include <cuda_bf16.h>
#define TESSERA_DEVICE __device__ __forceinline__
#define TESSERA_HOST_DEVICE __host__ __device__
#define TESSERA_KERNEL(threads, min_blocks) __global__ void __launch_bounds__(threads, min_blocks)
// Only the block size bound: a minimum of blocks per SM, even 1, changes register allocation.
#define TESSERA_KERNEL_MAX_THREADS(threads) __global__ void __launch_bounds__(threads)
#define TESSERA_GLOBAL __global__ void
// Before a loop over a register array: unrolled, its indices are constants, and the array stays
// in registers (a runtime index puts it in local memory).
#define TESSERA_UNROLL _Pragma("unroll")
#endif

namespace tessera::model::cuda::warp {

// bf16 values as kernels in this style store them: the bits, 2 bytes.
using Bf16Bits = uint16_t;

constexpr int kWarpSize = 32;

#if defined(TESSERA_WARP_EMULATION)

// A device faults on a misaligned vector access; the emulation says so (the exception ends the
// emulated launch with this message).
TESSERA_DEVICE void CheckAligned(const void* address, unsigned bytes, const char* what) {
  if (reinterpret_cast<uintptr_t>(address) % bytes != 0) {
    throw std::runtime_error(std::string(what) + ": address not " + std::to_string(bytes) +
                             "-byte aligned");
  }
}
TESSERA_DEVICE unsigned ThreadIdx() {
  return warp_emu::ThreadIdx();
}
TESSERA_DEVICE unsigned BlockDimX() {
  return warp_emu::BlockDimX();
}
TESSERA_DEVICE unsigned BlockIdxX() {
  return warp_emu::BlockIdxX();
}
TESSERA_DEVICE unsigned BlockIdxY() {
  return warp_emu::BlockIdxY();
}
TESSERA_DEVICE unsigned GridDimX() {
  return warp_emu::GridDimX();
}
TESSERA_DEVICE unsigned char* SharedMemory() {
  return warp_emu::SharedMemory();
}
TESSERA_DEVICE void SyncThreads() {
  warp_emu::SyncThreads();
}
TESSERA_DEVICE void SyncWarp() {
  warp_emu::SyncWarp();
}
TESSERA_DEVICE float ShflXor(float value, int lane_mask) {
  return warp_emu::ShflXor(value, lane_mask);
}
// d += a * b (A 16x16, B 16x8, D 16x8), layouts above.
TESSERA_DEVICE void Mma16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  warp_emu::Mma16816(d, a, b);
}
TESSERA_DEVICE void LdMatrixX4(uint32_t r[4], const void* row_address) {
  warp_emu::LdMatrixX4(r, row_address, false);
}
TESSERA_DEVICE void LdMatrixX4Trans(uint32_t r[4], const void* row_address) {
  warp_emu::LdMatrixX4(r, row_address, true);
}
TESSERA_DEVICE void AtomicAdd(float* address, float value) {
  warp_emu::AtomicAdd(address, value);
}
// address 8-byte aligned; adds value0 to address[0] and value1 to address[1].
TESSERA_DEVICE void AtomicAdd2(float* address, float value0, float value1) {
  CheckAligned(address, 8, "AtomicAdd2");
  warp_emu::AtomicAdd(address, value0);
  warp_emu::AtomicAdd(address + 1, value1);
}
// 16 zero bytes at dst (16-byte aligned).
TESSERA_DEVICE void Zero16(void* dst) {
  CheckAligned(dst, 16, "Zero16");
  warp_emu::NoteStore(dst, 16);
  std::memset(dst, 0, 16);
}
// The emulator defers each copy to the CpAsyncWait that must complete its group (the latest a
// device may perform it), so a kernel that reads a tile before waiting for it reads stale data.
TESSERA_DEVICE void CpAsync16(void* shared_dst, const void* global_src) {
  CheckAligned(shared_dst, 16, "CpAsync16 destination");
  CheckAligned(global_src, 16, "CpAsync16 source");
  warp_emu::CpAsync16(shared_dst, global_src);
}
TESSERA_DEVICE void CpAsyncCommit() {
  warp_emu::CpAsyncCommit();
}
template <int kPending>
TESSERA_DEVICE void CpAsyncWait() {
  warp_emu::CpAsyncWait(kPending);
}
TESSERA_DEVICE void Store32(void* dst, uint32_t value) {
  CheckAligned(dst, 4, "Store32");
  warp_emu::NoteStore(dst, 4);
  std::memcpy(dst, &value, 4);
}
// 16 bytes from src to dst in one access; both 16-byte aligned.
TESSERA_DEVICE void Copy16(void* dst, const void* src) {
  CheckAligned(dst, 16, "Copy16 destination");
  CheckAligned(src, 16, "Copy16 source");
  std::memcpy(dst, src, 16);
}
// Round to nearest even, as __float2bfloat16_rn (NaN stays a NaN).
TESSERA_DEVICE Bf16Bits FloatToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if (std::isnan(value))
    return static_cast<Bf16Bits>((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<Bf16Bits>(bits >> 16);
}
TESSERA_DEVICE float Bf16ToFloat(Bf16Bits value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result;
  std::memcpy(&result, &bits, 4);
  return result;
}
TESSERA_DEVICE float Exp2(float x) {
  return std::exp2(x);
}
TESSERA_DEVICE float Max(float a, float b) {
  return std::fmax(a, b);
}
TESSERA_DEVICE float Log2(float x) {
  return std::log2(x);
}
TESSERA_DEVICE float Exp(float x) {
  return std::exp(x);
}
TESSERA_DEVICE float Log(float x) {
  return std::log(x);
}
TESSERA_DEVICE float Tanh(float x) {
  return std::tanh(x);
}
TESSERA_DEVICE float Sqrt(float x) {
  return std::sqrt(x);
}
TESSERA_DEVICE double Sqrt(double x) {
  return std::sqrt(x);
}
TESSERA_DEVICE float Rsqrt(float x) {
  return 1.0f / std::sqrt(x);
}

#else  // nvcc, device code

TESSERA_DEVICE unsigned ThreadIdx() {
  return threadIdx.x;
}
TESSERA_DEVICE unsigned BlockDimX() {
  return blockDim.x;
}
TESSERA_DEVICE unsigned BlockIdxX() {
  return blockIdx.x;
}
TESSERA_DEVICE unsigned BlockIdxY() {
  return blockIdx.y;
}
TESSERA_DEVICE unsigned GridDimX() {
  return gridDim.x;
}
TESSERA_DEVICE unsigned char* SharedMemory() {
  extern __shared__ __align__(128) unsigned char tessera_warp_shared[];
  return tessera_warp_shared;
}
TESSERA_DEVICE void SyncThreads() {
  __syncthreads();
}
TESSERA_DEVICE void SyncWarp() {
  __syncwarp();
}
TESSERA_DEVICE float ShflXor(float value, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, value, lane_mask);
}
TESSERA_DEVICE void Mma16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();  // bf16 mma needs sm_80; the host refuses such devices before launching
#endif
}
TESSERA_DEVICE void LdMatrixX4(uint32_t r[4], const void* row_address) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
TESSERA_DEVICE void LdMatrixX4Trans(uint32_t r[4], const void* row_address) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
TESSERA_DEVICE void AtomicAdd(float* address, float value) {
  atomicAdd(address, value);
}
TESSERA_DEVICE void AtomicAdd2(float* address, float value0, float value1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(address), make_float2(value0, value1));
#else
  atomicAdd(address, value0);
  atomicAdd(address + 1, value1);
#endif
}
TESSERA_DEVICE void Zero16(void* dst) {
  *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
}
// 16 bytes from global to shared memory without passing through registers (cp.async, sm_80;
// .cg: not cached in L1). Issued copies form a group at CpAsyncCommit; CpAsyncWait<n> waits
// until at most n of the most recent groups are still in flight (then a barrier makes the
// other threads' copies visible).
TESSERA_DEVICE void CpAsync16(void* shared_dst, const void* global_src) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global_src));
}
TESSERA_DEVICE void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
TESSERA_DEVICE void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
TESSERA_DEVICE void Store32(void* dst, uint32_t value) {
  *reinterpret_cast<uint32_t*>(dst) = value;
}
TESSERA_DEVICE void Copy16(void* dst, const void* src) {
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
}
TESSERA_DEVICE Bf16Bits FloatToBf16(float value) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(value));
}
TESSERA_DEVICE float Bf16ToFloat(Bf16Bits value) {
  return __bfloat162float(__ushort_as_bfloat16(value));
}
TESSERA_DEVICE float Exp2(float x) {
  return exp2f(x);
}
TESSERA_DEVICE float Max(float a, float b) {
  return fmaxf(a, b);
}
TESSERA_DEVICE float Log2(float x) {
  return log2f(x);
}
// Not the fast-math intrinsics (__expf, ...): the CPU reference's accuracy.
TESSERA_DEVICE float Exp(float x) {
  return expf(x);
}
TESSERA_DEVICE float Log(float x) {
  return logf(x);
}
TESSERA_DEVICE float Tanh(float x) {
  return tanhf(x);
}
TESSERA_DEVICE float Sqrt(float x) {
  return sqrtf(x);
}
TESSERA_DEVICE double Sqrt(double x) {
  return sqrt(x);
}
TESSERA_DEVICE float Rsqrt(float x) {
  return rsqrtf(x);
}

#endif

// Two floats as the bf16 pair of an A or B register: lo in the low half (the lower column).
TESSERA_DEVICE uint32_t PackBf16x2(float lo, float hi) {
  return static_cast<uint32_t>(FloatToBf16(lo)) | (static_cast<uint32_t>(FloatToBf16(hi)) << 16);
}

}  // namespace tessera::model::cuda::warp
