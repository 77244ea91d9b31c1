#!/usr/bin/env bash
# bench/gpu/run.sh: builds, checks and times everything GPU-related in one run on one GPU
# (an H200 here), in under 8 minutes:
#   1. the binaries: unpacked from the bundle that bench/gpu/bundle.sh made on a development
#      machine (build-gpu/bundle/tessera-gpu.tar.gz, carried along), or else configured and
#      built here (CUDA targets only, sm_90) when this machine has the project's libraries;
#   2. correctness: the Gpu* tests (each CUDA layer against the CPU reference, whole model,
#      20-step training run), the trainer in bf16 against the fp32 CPU trainer and its
#      checkpoint resume (GpuTrainerTest), the GPU smoke test, the NCCL tests (one rank + split
#      sub-group; wait_event ordering and the bucket reducer on device memory), and
#      `tessera run manifests/examples/gpu-tiny.yaml` for 100 steps;
#   3. speed: GPT-2 124M (seqLen 1024, bf16, batch $BATCH) tokens/s and MFU for Tessera
#      (gpt_bench) and for PyTorch with torch.compile (torch_gpt.py), same config and batch;
#   4. extras while the budget lasts: the attention kernels alone against PyTorch's
#      (flash_bench, sdpa_bench.py), Nsight Compute's detail of the mma.sync attention kernels
#      (flash-ncu.txt), per-kernel profiles, the CPU overlap benchmark.
# The last line is exactly `ratio=<tessera tokens/s ÷ pytorch tokens/s> mfu=<tessera MFU>`
# (targets: ratio >= 1.0, mfu >= 0.50). Raw output goes to $OUT (the device tool's folder
# that comes back; default bench/results/local-<time>): run.log (everything), tests.xml,
# summary.txt. Exit status: 0 all passed; 1 a test or a benchmark failed (the ratio line is
# still printed when both benchmarks ran); 2 no binaries; 3 no GPU.
#
# Environment: VARIANTS ("matmul flash flash-mma flash-mma2 flash-mma+gelu flash-mma+gelu+tune
# flash-mma2+gelu+tune": the configurations to time, an attention and optional +gelu / +tune
# each, the first for the ratio; ATTENTIONS, its older name, is read when VARIANTS is unset), BATCH (16), STEPS (20),
# WARMUP (3), PEAK_TFLOPS (the dense bf16 peak in TFLOP/s for MFU; by default from the GPU's
# name: 989 for an H100 SXM or H200, 835 H100 NVL, 756 H100 PCIe, 312 A100), BUDGET_S (470: the whole
# run's deadline), BUNDLE (path of the bundle),
# BIN_DIR (use these binaries instead), PYTHON (python3), JOBS (nproc), NCU (Nsight Compute's
# ncu: on PATH, else the newest under /opt/nvidia/nsight-compute), SKIP_TESTS=1,
# SKIP_TORCH=1, SKIP_EXTRAS=1 (none of the extras of 4.), FORCE_GPU_NAME (skip the
# GPU check: to test this script where there is none).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-$root/bench/results/local-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
log=$out/run.log
summary=$out/summary.txt
: >"$log"
: >"$summary"
deadline=$((SECONDS + ${BUDGET_S:-470}))
batch=${BATCH:-16}
steps=${STEPS:-20}
warmup=${WARMUP:-3}
peak=${PEAK_TFLOPS:-}  # from the GPU name below when unset
python=${PYTHON:-python3}
jobs=${JOBS:-$(nproc)}
orig_ld=${LD_LIBRARY_PATH:-}  # PyTorch runs with the machine's own libraries
failures=()

say() { echo "$*" | tee -a "$log" "$summary"; }
# Seconds left for a stage that wants `want`, keeping `reserve` for the stages after it.
budget() {
  local want=$1 reserve=$2 left=$((deadline - SECONDS - $2))
  ((left < want)) && want=$left
  ((want < 5)) && want=5
  echo "$want"
}
# run NAME TIMEOUT COMMAND...: runs it with a deadline, its output into the log and stdout
# (and into $stage_log, for the checks that follow).
stage_log=$(mktemp)
trap 'rm -f "$stage_log"' EXIT
run() {
  local name=$1 limit=$2
  shift 2
  echo "--- $name (limit ${limit}s): $*" | tee -a "$log"
  timeout --kill-after=10 "$limit" "$@" >"$stage_log" 2>&1
  local rc=$?
  tee -a "$log" <"$stage_log"
  ((rc == 124 || rc == 137)) && echo "--- $name: timed out after ${limit}s" | tee -a "$log"
  return "$rc"
}
# A GoogleTest run passed only if it ran every test: on a GPU machine a skip is a failure.
skipped() { grep -E '^\[  SKIPPED \] [0-9]+ tests?, listed below' "$stage_log" | grep -oE '[0-9]+' | head -1; }
gtest() {  # gtest NAME TIMEOUT BINARY ARGS...
  local name=$1
  if ! run "$@"; then
    failures+=("$name")
    say "tests: $name FAILED: $(grep -E '^\[  FAILED  \] [A-Za-z]' "$stage_log" | grep -v listed | sed 's/^\[  FAILED  \] //' | tr '\n' ' ')"
  elif [[ -n "$(skipped)" ]]; then
    failures+=("$name (skipped)")
    say "tests: $name: $(skipped) tests SKIPPED on a GPU machine (no device visible to CUDA?)"
  else
    say "tests: $name passed ($(grep -E '^\[  PASSED  \]' "$stage_log" | sed 's/^\[  PASSED  \] //'))"
  fi
}

say "run.sh: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"

# ---- 0. a GPU -------------------------------------------------------------------------
gpu_name=${FORCE_GPU_NAME:-}  # set only to exercise this script on a machine without a GPU
if [[ -z "$gpu_name" ]] && command -v nvidia-smi >/dev/null 2>&1; then
  gpu_name=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
fi
if [[ -z "$gpu_name" ]] && command -v "$python" >/dev/null 2>&1; then
  gpu_name=$(timeout 60 "$python" -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>/dev/null)
fi
if [[ -z "$gpu_name" ]]; then
  say "run.sh: no CUDA GPU visible (nvidia-smi and PyTorch found none): run this on a GPU machine, e.g. the device tool with command 'bash bench/gpu/run.sh' and carry ['build-gpu/bundle']"
  exit 3
fi
say "gpu: $gpu_name"
if [[ -z "$peak" ]]; then
  case "$gpu_name" in
    *H100*PCIe*) peak=756 ;;
    *H100*NVL*) peak=835 ;;
    *A100*) peak=312 ;;
    *) peak=989 ;;  # H100 SXM, H200
  esac
fi
say "peak: $peak TFLOP/s dense bf16 (PEAK_TFLOPS to change it), for MFU"
command -v nvcc >/dev/null 2>&1 && say "nvcc: $(nvcc --version | tail -2 | head -1)"

# ---- 1. binaries ----------------------------------------------------------------------
# Libraries too large to carry (cuBLASLt, NCCL) come from this machine: its CUDA toolkit or
# the NVIDIA wheels beside PyTorch.
find_lib() {
  local name=$1 dir paths=${LD_LIBRARY_PATH:-}
  for dir in ${paths//:/ } /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    /usr/lib/x86_64-linux-gnu; do
    [[ -e "$dir/$name" ]] && { echo "$dir"; return 0; }
  done
  local site
  site=$(timeout 30 "$python" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
  for dir in $site /usr/local /opt; do
    [[ -d "$dir" ]] || continue
    local hit
    hit=$(timeout 30 find "$dir" -name "$name" -print -quit 2>/dev/null)
    [[ -n "$hit" ]] && { dirname "$hit"; return 0; }
  done
  return 1
}
machine_libs=""
for lib in libcublasLt.so.13 libcublas.so.13 libnccl.so.2 libcudart.so.13; do
  if dir=$(find_lib "$lib"); then
    [[ ":$machine_libs:" == *":$dir:"* ]] || machine_libs=${machine_libs:+$machine_libs:}$dir
  else
    say "note: $lib not found on this machine"
  fi
done

bundle=${BUNDLE:-$root/build-gpu/bundle/tessera-gpu.tar.gz}
bin=""
if [[ -n "${BIN_DIR:-}" ]]; then
  bin=$BIN_DIR
  say "binaries: BIN_DIR=$bin"
elif [[ -f "$bundle" ]]; then
  unpack=/tmp/tessera-gpu
  rm -rf "$unpack" && mkdir -p "$unpack"
  if ! tar -xzf "$bundle" -C "$unpack"; then
    say "run.sh: cannot unpack $bundle"
    exit 2
  fi
  bin=$unpack/bin
  # The bundle's own libraries (the C++ dependencies, the CUDA runtime it was built with)
  # first, then this machine's cuBLASLt and NCCL.
  export LD_LIBRARY_PATH=$unpack/lib${machine_libs:+:$machine_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  say "binaries: bundle $bundle ($(cat "$unpack/BUILD_INFO" 2>/dev/null | tr '\n' ' '))"
else
  build=$root/build-gpu-device
  say "binaries: no bundle at $bundle; configuring and building in $build"
  cuda_args=(-DTESSERA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
  if [[ -x /usr/local/cuda/bin/nvcc ]]; then
    cuda_args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCUDAToolkit_ROOT=/usr/local/cuda)
  fi
  nccl_dir=$(find_lib libnccl.so.2) && cuda_args+=(-DNCCL_ROOT="$(dirname "$nccl_dir")")
  if ! run configure "$(budget 90 330)" cmake -S "$root" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}"; then
    say "run.sh: the CMake configure failed on this machine (see run.log; it needs the project's libraries, scripts/setup.sh): build the bundle on a development machine with 'bash bench/gpu/bundle.sh' and carry build-gpu/bundle"
    exit 2
  fi
  if ! run build "$(budget 240 240)" cmake --build "$build" -j "$jobs" --target gpu_model_test \
    gpu_smoke_test comm_nccl_test train_test gpt_bench flash_bench tessera tessera-worker; then
    say "run.sh: building the GPU targets failed (see run.log)"
    exit 2
  fi
  bin=$build/bin
  [[ -x "$build/tests/gpu_model_test" ]] && bin=$build/tests
  export LD_LIBRARY_PATH=${machine_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
exe() {  # path of a binary: bundle bin/, or a build tree's bin/ or tests/
  local name=$1
  for d in "$bin" "$bin/../bin" "$bin/../tests"; do
    [[ -x "$d/$name" ]] && { echo "$d/$name"; return 0; }
  done
  echo "$bin/$name"
}
for name in gpu_model_test gpu_smoke_test comm_nccl_test train_test gpt_bench tessera \
  tessera-worker; do
  [[ -x "$(exe "$name")" ]] || { say "run.sh: $name missing under $bin"; exit 2; }
done

# A probe: one training step of a tiny model (a kernel launch, cuBLASLt, the optimizer). The
# bundle's CUDA runtime may be newer than this driver accepts; then use the machine's.
probe=("$(exe gpt_bench)" --preset none --layers 1 --d-model 64 --heads 2 --seq-len 16 --vocab 64
  --batch 2 --steps 1 --warmup 0)
if ! run probe 60 "${probe[@]}"; then
  if [[ -n "$machine_libs" ]]; then
    say "note: the probe failed with the bundled CUDA runtime; retrying with this machine's ($machine_libs) first"
    export LD_LIBRARY_PATH=$machine_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    run probe-again 60 "${probe[@]}" || failures+=("the probe (a tiny training step)")
  else
    failures+=("the probe (a tiny training step)")
  fi
fi
say "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"

# ---- 2. correctness -------------------------------------------------------------------
if [[ "${SKIP_TESTS:-0}" != 1 ]]; then
  # The tests that run the mma.sync flash kernels (also the model with them and tuned products)
  # in processes of their own, one per version: a fault there (they are the newest kernels)
  # must not take the context of every other test with it.
  gtest "Gpu* tests" "$(budget 150 300)" "$(exe gpu_model_test)" \
    --gtest_filter='Gpu*:CudaLibraries.*:-*/Mma:*/Mma2:*FlashMma*:*SecondVersion*:*TunedProducts*' \
    --gtest_output="xml:$out/tests.xml"
  gtest "Gpu* tests of the mma.sync flash kernels" "$(budget 60 150)" "$(exe gpu_model_test)" \
    --gtest_filter='*/Mma:*FlashMma*:*TunedProducts*:-*FlashMma2*' --gtest_output="xml:$out/tests-mma.xml"
  gtest "Gpu* tests of the second mma.sync flash kernels" "$(budget 30 120)" \
    "$(exe gpu_model_test)" --gtest_filter='*/Mma2:*SecondVersion*:*FlashMma2*' --gtest_output="xml:$out/tests-mma2.xml"
  gtest "GpuTrainerTest (bf16 trainer vs fp32, resume)" "$(budget 90 240)" "$(exe train_test)" \
    --gtest_filter='GpuTrainerTest.*'
  gtest GpuSmoke 60 "$(exe gpu_smoke_test)"
  gtest "Nccl* (one rank + split sub-group, wait_event, bucket reducer)" 90 \
    "$(exe comm_nccl_test)" --gtest_filter='Nccl*'
  # The product path end to end: `tessera run` of the bf16 example (tessera-worker, the
  # trainer's GPU model, metrics, checkpoints), 100 steps.
  if run "tessera run gpu-tiny" "$(budget 90 200)" "$(exe tessera)" run \
    "$root/manifests/examples/gpu-tiny.yaml" --set spec.trainer.schedule.steps=100 \
    --set spec.trainer.data.path="$root/data/tinyshakespeare.txt" --workdir "$(mktemp -d)/gpu-tiny" \
    --worker-binary "$(exe tessera-worker)"; then
    say "run: gpu-tiny passed ($(grep -E 'train loss|val loss|tokens/s' "$stage_log" | tr -s ' ' | tr '\n' ';'))"
  else
    failures+=("tessera run gpu-tiny")
    say "run: gpu-tiny FAILED: $(tail -3 "$stage_log" | tr '\n' ' ')"
  fi
fi

# ---- 3. speed -------------------------------------------------------------------------
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $2" | head -1; }
common=(--batch "$batch" --steps "$steps" --warmup "$warmup" --peak-tflops "$peak")
t_line=""
t_lines=()
p_line=""
# Tessera once per variant in $VARIANTS: an attention (gpt_bench --attention), then "+gelu"
# (--gelu-fusion) and "+tune" (--gemm-tune 8) as wanted. The ratio line is the first variant's;
# the fastest is profiled below. A bundle whose gpt_bench lacks the flags runs once, as it is.
variants=("")
t_names=()
best_args=()
best_tps=0
best_name=""
bench_help=$("$(exe gpt_bench)" --help 2>&1)
if grep -q -- '--gelu-fusion' <<<"$bench_help"; then
  read -r -a variants <<<"${VARIANTS:-${ATTENTIONS:-matmul flash flash-mma flash-mma2 flash-mma+gelu flash-mma+gelu+tune flash-mma2+gelu+tune}}"
elif grep -q -- '--attention' <<<"$bench_help"; then
  read -r -a variants <<<"${ATTENTIONS:-matmul flash flash-mma}"
fi
for v in "${variants[@]}"; do
  extra=()
  if [[ -n "$v" ]]; then
    IFS=+ read -r -a parts <<<"$v"
    extra=(--attention "${parts[0]}")
    for part in "${parts[@]:1}"; do
      case $part in
        gelu) extra+=(--gelu-fusion) ;;
        tune) extra+=(--gemm-tune 8) ;;
        *) say "bench: variant $v: unknown part '$part' (gelu, tune)"; extra=(); break ;;
      esac
    done
    ((${#extra[@]} > 0)) || { failures+=("variant $v"); continue; }
  fi
  if run "tessera${v:+ ($v)}" "$(budget 60 200)" "$(exe gpt_bench)" --preset gpt2-124m \
    "${common[@]}" "${extra[@]}"; then
    line=$(grep '^tessera ' "$stage_log" | tail -1)
    say "$line"
    t_lines+=("$line")
    t_names+=("${v:-default}")
    [[ -z "$t_line" ]] && t_line=$line
    tps=$(field tokens_per_s "$line")
    if awk -v a="$tps" -v b="$best_tps" 'BEGIN{exit !(a > b)}'; then
      best_tps=$tps
      best_args=("${extra[@]}")
      best_name=${v:-default}
    fi
  else
    failures+=("the Tessera benchmark${v:+ ($v)}")
    say "bench: Tessera${v:+ ($v)} FAILED: $(tail -2 "$stage_log" | tr '\n' ' ')"
  fi
done
((${#t_lines[@]} > 1)) && say "bench: fastest variant: $best_name ($best_tps tokens/s)"
if [[ "${SKIP_TORCH:-0}" != 1 ]]; then
  run pytorch "$(budget 300 5)" env LD_LIBRARY_PATH="$orig_ld" PYTHONUNBUFFERED=1 "$python" "$root/bench/gpu/torch_gpt.py" \
    --layers 12 --d-model 768 --heads 12 --seq-len 1024 --vocab 50257 "${common[@]}"
  p_line=$(grep '^pytorch ' "$log" | tail -1)
  [[ -n "$p_line" ]] && say "$p_line" || { failures+=("the PyTorch benchmark"); say "bench: PyTorch FAILED (see run.log)"; }
fi

# ---- 4. extras, while the budget lasts (they do not change the exit status) ---------------
# The attention alone (flash_bench: matmul, mma, mma2, wmma; forward and backward TFLOP/s)
# against PyTorch's scaled_dot_product_attention on the same shape (sdpa_bench.py).
if [[ "${SKIP_EXTRAS:-0}" != 1 ]] && [[ -x "$(exe flash_bench)" ]] && ((deadline - SECONDS > 90)); then
  if run "flash kernels" "$(budget 45 45)" "$(exe flash_bench)"; then
    grep '^flash ' "$stage_log" | while read -r line; do say "$line"; done
  else
    say "extras: flash_bench failed: $(tail -2 "$stage_log" | tr '\n' ' ')"
  fi
  if [[ "${SKIP_TORCH:-0}" != 1 ]] && run sdpa "$(budget 60 30)" env LD_LIBRARY_PATH="$orig_ld" \
    "$python" "$root/bench/gpu/sdpa_bench.py"; then
    say "$(grep '^sdpa ' "$stage_log" | tail -1)"
  fi
fi
# Nsight Compute's detail of the mma.sync attention kernels (throughput, occupancy, warp
# stalls, shared-memory bank conflicts: what tuning them needs), into $out/flash-ncu.txt; its
# headline figures into the summary.
ncu=${NCU:-$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | sort -V | tail -1)}
if [[ "${SKIP_EXTRAS:-0}" != 1 ]] && [[ -x "$(exe flash_bench)" ]] && [[ -x "$ncu" ]] &&
  ((deadline - SECONDS > 150)); then
  if run "flash kernels, Nsight Compute" "$(budget 75 90)" "$ncu" --set full -k regex:FlashMma \
    --launch-count 10 "$(exe flash_bench)" --kernels "mma mma2" --iters 1; then
    cp "$stage_log" "$out/flash-ncu.txt"
    grep -E '^ *(FlashMma|void .*FlashMma)|^ +(Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy) ' \
      "$stage_log" | sed 's/^ */  /' >>"$summary"
  else
    say "extras: the Nsight Compute detail of the flash kernels did not finish (see run.log)"
  fi
fi
# The per-kernel profile of a Tessera step (bench/gpu/profile.sh, Nsight Compute): first of the
# fastest variant (its kernels' share of the step: what to work on next) into
# $out/profile-best/, then of the defaults into $out/profile/; then the CPU overlap benchmark
# on this machine's cores (docs/training.md).
if [[ "${SKIP_EXTRAS:-0}" != 1 ]] && ((${#best_args[@]} > 0)) && ((deadline - SECONDS > 90)); then
  run "profile (${best_args[*]})" "$(budget 60 20)" env OUT="$out/profile-best" BUNDLE="$bundle" \
    BENCH_ARGS="${best_args[*]}" bash "$root/bench/gpu/profile.sh" ||
    say "extras: the profile of the fastest variant did not finish (see run.log)"
  grep -E '^ +[0-9.]+ ms' "$stage_log" | head -12 >>"$summary"
fi
if [[ "${SKIP_EXTRAS:-0}" != 1 ]] && ((deadline - SECONDS > 90)); then
  run profile "$(budget 60 20)" env OUT="$out/profile" BUNDLE="$bundle" bash "$root/bench/gpu/profile.sh" ||
    say "extras: the profile did not finish (see run.log)"
  grep -E '^ +[0-9.]+ ms' "$stage_log" | head -12 >>"$summary"
fi
if [[ "${SKIP_EXTRAS:-0}" != 1 ]] && [[ -x "$(exe dp_overlap_bench)" ]]; then
  for r in 2 4; do
    ((deadline - SECONDS > 40)) || break
    run "dp_overlap $r ranks" "$(budget 30 5)" "$(exe dp_overlap_bench)" "$r" 12 128 0.5 30 &&
      say "dp_overlap $r ranks ($(nproc) cores): $(tail -2 "$stage_log" | tr '\n' ' ')"
  done
fi

say "elapsed: ${SECONDS}s"
if ((${#failures[@]} > 0)); then
  say "run.sh: FAILED: ${failures[*]}"
fi
if [[ -n "$t_line" && -n "$p_line" ]]; then
  p=$(field tokens_per_s "$p_line")
  # Each variant's ratio (for choosing the defaults), then the line of the first.
  for i in "${!t_lines[@]}"; do
    line=${t_lines[$i]}
    awk -v t="$(field tokens_per_s "$line")" -v p="$p" -v m="$(field mfu "$line")" -v a="${t_names[$i]}" \
      'BEGIN{printf "variant=%s ratio=%.3f mfu=%.3f\n", a, t/p, m}' | tee -a "$log" "$summary"
  done
  t=$(field tokens_per_s "$t_line")
  m=$(field mfu "$t_line")
  awk -v t="$t" -v p="$p" -v m="$m" 'BEGIN{printf "ratio=%.3f mfu=%.3f\n", t/p, m}' | tee -a "$log" "$summary"
fi
((${#failures[@]} == 0))
