#!/usr/bin/env bash
# bench/gpu/profile.sh: where one GPT-2 124M training step's GPU time goes, kernel by kernel,
# on a GPU machine with Nsight Compute (ncu). Unpacks the bundle of bench/gpu/bundle.sh as
# run.sh does, profiles a gpt_bench run of three steps (one warm-up, one timed, one timed phase
# by phase: every kernel runs three times) and writes $OUT/kernels.csv (ncu's per-kernel
# summary: launches and mean duration), then prints the kernels sorted by total time.
# Environment: BUNDLE (build-gpu/bundle/tessera-gpu.tar.gz), BATCH (16), ATTENTION (matmul),
# BENCH_ARGS (more gpt_bench flags, e.g. "--attention flash-mma --gelu-fusion"), NCU (ncu on PATH, else the newest under /opt/nvidia/nsight-compute).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-$root/bench/results/profile-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
bundle=${BUNDLE:-$root/build-gpu/bundle/tessera-gpu.tar.gz}
ncu=${NCU:-$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | sort -V | tail -1)}
[[ -x "$ncu" ]] || { echo "profile.sh: no ncu found" >&2; exit 3; }
unpack=/tmp/tessera-gpu-profile
rm -rf "$unpack" && mkdir -p "$unpack" && tar -xzf "$bundle" -C "$unpack" || exit 2
machine=""
for lib in libcublasLt.so.13 libnccl.so.2; do
  for dir in /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu \
    $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    hit=$(find "$dir" -name "$lib" -print -quit 2>/dev/null)
    [[ -n "$hit" ]] && { machine=${machine:+$machine:}$(dirname "$hit"); break; }
  done
done
export LD_LIBRARY_PATH=$unpack/lib${machine:+:$machine}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
bench=("$unpack/bin/gpt_bench" --preset gpt2-124m --batch "${BATCH:-16}" --steps 1 --warmup 1)
[[ -n "${ATTENTION:-}" ]] && bench+=(--attention "$ATTENTION")
read -r -a bench_args <<<"${BENCH_ARGS:-}"
bench+=("${bench_args[@]}")
"${bench[@]}" | tee "$out/bench.txt"
per_step=$("$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --print-summary \
  per-kernel --target-processes all "${bench[@]}" 2>"$out/ncu.err" | tee "$out/kernels.csv" | wc -l)
echo "profile.sh: $per_step lines in kernels.csv"
python3 - "$out/kernels.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
head = rows[0]
ki, ni, mi = head.index("Kernel Name"), head.index("Invocations"), head.index("Metric Name")
ui, ai = head.index("Metric Unit"), head.index("Average")
agg = {}
for r in rows[1:]:
    if r[mi] != "gpu__time_duration.sum":
        continue
    scale = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0,
             "s": 1e3, "second": 1e3}[r[ui]]
    n = int(r[ni]); avg = float(r[ai].replace(",", "")) * scale
    name = r[ki][:90]
    c, t = agg.get(name, (0, 0.0))
    agg[name] = (c + n, t + n * avg)
total = sum(t for _, t in agg.values())
print(f"total kernel time {total:.2f} ms over 3 steps (a third is one step)")
for name, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:40]:
    print(f"{t:9.3f} ms {100*t/total:5.1f}% {c:5d}x  {name}")
PY
