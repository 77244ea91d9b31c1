// A SIMT emulator for kernels written against worker/model/cuda/warp_mma.cuh: it runs every
// thread of a block as a host thread and implements the tessera::warp_emu functions that header
// calls when compiled with TESSERA_WARP_EMULATION, so tensor-core kernels can be tested on a CPU.
// It checks the kernel's use of warp operations and barriers; performs each cp.async at the wait
// that must complete its group (the latest a device may), so reading a tile before waiting for
// it reads stale data; and reports races between warps on shared memory for the accesses made
// through primitives (ldmatrix reads; Store32, Zero16 and cp.async writes), not plain pointer
// accesses. It does not model timing, memory coalescing, bank conflicts, register limits, or
// global-memory bounds (use AddressSanitizer).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>

namespace tessera::warp_emu {

struct LaunchConfig {
  unsigned grid_x = 1, grid_y = 1;
  unsigned threads = 32;    // per block: a multiple of 32, at most 1024
  size_t shared_bytes = 0;  // dynamic shared memory per block
  // How long a thread waits at a barrier for the others before the launch fails. A kernel that
  // deadlocks on its own (a warp spinning forever) is reported after this, not hung.
  std::chrono::milliseconds barrier_timeout{30000};
};

// Runs body once for every thread of every block. Blocks run one after another, y-major then x
// ((0,0), (1,0), ... (0,1), ...); the threads of one block run concurrently as host threads
// (the same config.threads host threads for every block of the launch), and
// within body ThreadIdx(), BlockIdxX(), SharedMemory() and the other primitives refer to them.
// Each block's shared memory (128-byte aligned, exactly shared_bytes long) starts filled with
// 0xFF bytes, so a read of what the kernel never wrote sees bf16/fp32 NaN.
//
// Throws std::runtime_error, after every thread of the block has finished and without running
// later blocks, when a thread's body throws (the message includes what() of the exception),
// when a warp operation or barrier is misused (lanes of one warp in different operations, a warp
// operation after a lane of the warp returned, a bad ldmatrix address or shuffle mask), or when a
// barrier is not reached by all of its threads within barrier_timeout. The message names the
// block (x, y), the thread (warp, lane) and the operations. Throws std::invalid_argument for a
// bad config. The body must be safe to call from many threads at once; Launch itself may be
// called from several host threads (each launch has its own blocks).
void Launch(const LaunchConfig& config, const std::function<void()>& body);

}  // namespace tessera::warp_emu
