#!/usr/bin/env bash
# bench/gpu/bundle.sh [BUILD_DIR]: builds the GPU binaries on this development machine (the
# one scripts/setup.sh prepared) and packs them for bench/gpu/run.sh on a GPU machine, whose
# CUDA image has a driver, cuBLAS, NCCL and PyTorch but not the project's C++ libraries.
#
# Writes BUILD_DIR/bundle/tessera-gpu.tar.gz (BUILD_DIR defaults to build-gpu, configured
# here if needed): bin/ (gpu_model_test, gpu_smoke_test, comm_nccl_test, train_test,
# gpt_bench, flash_bench, tessera, tessera-worker, dp_overlap_bench, allreduce_bench, without
# debug sections), lib/ (every shared library they load except glibc, libstdc++/libgcc_s,
# the driver, cuBLAS(Lt) and NCCL, which the GPU machine has and which are too large to
# carry), BUILD_INFO. Then, with the device tool:
#   run(command="bash bench/gpu/run.sh", carry=["build-gpu/bundle"], timeout_s=540)
# Environment: JOBS (build parallelism, default 2).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build-gpu}
jobs=${JOBS:-2}
# The last two are CPU benchmarks (bench/dp_overlap, bench/allreduce), carried because a GPU
# machine has many more cores than the development machine (16 against 2 on the H200 here).
targets=(gpu_model_test gpu_smoke_test comm_nccl_test train_test gpt_bench flash_bench tessera
  tessera-worker dp_overlap_bench allreduce_bench)

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
# (grep reads the whole listing: with -q it may exit first, and pipefail would see cmake's SIGPIPE)
if ! cmake -N -LA "$build" 2>/dev/null | grep '^CMAKE_CUDA_COMPILER:[A-Z]*=.*nvcc' >/dev/null; then
  echo "bundle.sh: $build was configured without a CUDA compiler; run scripts/setup.sh (it installs the CUDA wheels into .deps/cuda) and configure again" >&2
  exit 2
fi
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for t in "${targets[@]}"; do
  path=""
  for d in "$build/tests" "$build/bin"; do
    [[ -x "$d/$t" ]] && path=$d/$t && break
  done
  [[ -n "$path" ]] || { echo "bundle.sh: $t was not built under $build" >&2; exit 1; }
  objcopy --strip-debug "$path" "$stage/bin/$t"
done

# Shared libraries the binaries load, except those the GPU machine must provide itself.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libgcc_s\.so|libstdc\+\+\.so|libcuda\.so|libcublas\.so|libcublasLt\.so|libnccl\.so|libnvidia)'
for b in "$stage"/bin/*; do
  ldd "$b" | awk '/=>/ && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ "$name" =~ $skip ]] && continue
  cp -L "$path" "$stage/lib/$name"
done

{
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "nvcc $("$(cmake -N -LA "$build" | sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p')" --version | tail -2 | head -1)"
  echo "cuda_architectures $(cmake -N -LA "$build" | sed -n 's/^CMAKE_CUDA_ARCHITECTURES:STRING=//p')"
} >"$stage/BUILD_INFO"

mkdir -p "$build/bundle"
tar -czf "$build/bundle/tessera-gpu.tar.gz" -C "$stage" .
echo "bundle: $build/bundle/tessera-gpu.tar.gz ($(du -h "$build/bundle/tessera-gpu.tar.gz" | cut -f1)):"
tar -tzvf "$build/bundle/tessera-gpu.tar.gz" | awk '{print "  " $3, $6}'
echo "run it on a GPU machine: bash bench/gpu/run.sh (device tool: carry [\"${build#"$root"/}/bundle\"])"
