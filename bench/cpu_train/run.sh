#!/usr/bin/env bash
# bench/cpu_train/run.sh [BUILD_DIR]: CPU training throughput of Tessera against PyTorch.
#
# Trains the same GPT (4 layers, dModel 256, 4 heads, seqLen 128, vocab 256, batch 8, fp32,
# AdamW) with Tessera (cpu_train_bench from BUILD_DIR, default ./build) and with PyTorch
# (torch_gpt.py under /usr/bin/python3), with the same thread count, ROUNDS times each,
# alternating, and keeps each side's best round (the machine may be shared). Prints both
# lines and, last, `ratio=<tessera tokens/s / pytorch tokens/s> ...`.
#
# Environment: THREADS (default: nproc), STEPS (timed steps, default 20), WARMUP (3),
# ROUNDS (2), PYTHON (/usr/bin/python3). Both sides use the same OpenBLAS; when OpenBLAS
# does not recognise an AVX-512 CPU and falls back to its SSE3 kernels, OPENBLAS_CORETYPE
# is set to SkylakeX for both (say OPENBLAS_CORETYPE=... to choose yourself).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-build}"
bench="${build}/bin/cpu_train_bench"
python="${PYTHON:-/usr/bin/python3}"
threads="${THREADS:-$(nproc)}"
steps="${STEPS:-20}"
warmup="${WARMUP:-3}"
rounds="${ROUNDS:-2}"

if [[ ! -x "${bench}" ]]; then
  echo "run.sh: ${bench} not found; build it with: cmake --build ${build} --target cpu_train_bench" >&2
  exit 2
fi
if ! "${python}" -c 'import torch' 2>/dev/null; then
  echo "run.sh: ${python} cannot import torch; install python3-torch or set PYTHON" >&2
  exit 2
fi

core="$("${bench}" --steps 1 --warmup 0 --peak-n 0 --layers 1 --d-model 16 --heads 1 \
  --seq-len 8 --batch 1 | sed -n 's/.*openblas_core=\([^ ]*\).*/\1/p')"
if [[ -z "${OPENBLAS_CORETYPE:-}" && "${core,,}" == "prescott" ]] && grep -qw avx512f /proc/cpuinfo; then
  echo "note: OpenBLAS does not recognise this CPU (core ${core}); using OPENBLAS_CORETYPE=SkylakeX for both"
  export OPENBLAS_CORETYPE=SkylakeX
fi

args=(--layers 4 --d-model 256 --heads 4 --seq-len 128 --vocab 256 --batch 8
      --steps "${steps}" --warmup "${warmup}" --threads "${threads}")
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $2"; }
best_tessera="" best_torch=""
best_t=0 best_p=0
for ((r = 1; r <= rounds; r++)); do
  peak_n=2048
  t_line="$("${bench}" "${args[@]}" --peak-n "${peak_n}")"
  echo "round ${r}: ${t_line}"
  p_line="$(OMP_NUM_THREADS="${threads}" "${python}" "${here}/torch_gpt.py" "${args[@]}")"
  echo "round ${r}: ${p_line}"
  t="$(field tokens_per_s "${t_line}")"
  p="$(field tokens_per_s "${p_line}")"
  if awk -v a="${t}" -v b="${best_t}" 'BEGIN{exit !(a>b)}'; then best_t="${t}"; best_tessera="${t_line}"; fi
  if awk -v a="${p}" -v b="${best_p}" 'BEGIN{exit !(a>b)}'; then best_p="${p}"; best_torch="${p_line}"; fi
done

echo "best: ${best_tessera}"
echo "best: ${best_torch}"
awk -v t="${best_t}" -v p="${best_p}" -v th="${threads}" \
  -v g="$(field gflops "${best_tessera}")" -v pk="$(field sgemm_peak_gflops "${best_tessera}")" \
  'BEGIN{printf "ratio=%.3f tessera_tokens_per_s=%s pytorch_tokens_per_s=%s threads=%s tessera_gflops=%s sgemm_peak_gflops=%s fraction_of_peak=%.3f target=1.5\n", t/p, t, p, th, g, pk, (pk>0?g/pk:0)}'
