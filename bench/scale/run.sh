#!/usr/bin/env bash
# bench/scale/run.sh [--full] [BUILD_DIR]: many TrainingJobs at once on many simulated nodes
# (DESIGN.md §10: 1000 jobs x 8 workers on 500 nodes, within 1.2x of the API server's own write
# rate, controller RSS <= 64 MiB).
#
# The default is a tenth of that, 100 jobs x 8 workers on 50 kwok nodes, because the whole
# control plane (etcd, kube-apiserver, scheduler, kwok) and the controller share this
# 2-core development machine; --full (or JOBS=1000 NODES=500) runs the full size.
#
# Starts a control plane of its own (scripts/cluster.sh, state in BUILD_DIR/bench-scale-cluster,
# NODES simulated nodes), installs the TrainingJob CRD, runs BUILD_DIR/bin/tessera-controller
# with its client limit raised (--qps 1000 --burst 2000, so the API server, not the client, is
# the bottleneck, as for the peer) and -v, then measure.py times:
#   peer     JOBS*WORKERS bare pods POSTed by 16 parallel clients -> all Running;
#   tessera  JOBS TrainingJobs POSTed the same way -> every pod Running and every job Running.
# Then it prints the controller's peak RSS (VmHWM), the p50/p99/max reconcile time (from its
# -v log, one line per reconcile) and its reconcile histogram's count, and, last,
# `ratio=<tessera time to all Running ÷ peer time to all Running>`.
#
# Environment: JOBS (100), WORKERS (8), NODES (50), THREADS (16), CONTROLLER_FLAGS (extra
# flags), PYTHON (/usr/bin/python3). Needs scripts/setup.sh's .deps/bin and
# `cmake --build BUILD_DIR --target tessera-controller`.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
jobs=${JOBS:-100} nodes=${NODES:-50}
if [ "${1:-}" = --full ]; then
  jobs=${JOBS:-1000} nodes=${NODES:-500}
  shift
fi
workers=${WORKERS:-8}
build=$(realpath -m "${1:-$root/build}")
python=${PYTHON:-/usr/bin/python3}
controller=$build/bin/tessera-controller
[ -x "$controller" ] || {
  echo "run.sh: $controller not found; build it: cmake --build $build --target tessera-controller" >&2
  exit 2
}
export TESSERA_CLUSTER_DIR=$build/bench-scale-cluster TESSERA_CLUSTER_NODES=$nodes
export TESSERA_CLUSTER_TIMEOUT=${TESSERA_CLUSTER_TIMEOUT:-300}
export PATH=$root/.deps/bin:$PATH KUBECONFIG=$TESSERA_CLUSTER_DIR/kubeconfig

pid=""
cleanup() {
  set +e
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
  "$root/scripts/cluster.sh" down >/dev/null 2>&1
}
trap cleanup EXIT
"$root/scripts/cluster.sh" up >/dev/null
kubectl apply -f "$root/manifests/crd/trainingjobs.tessera.dev.yaml" >/dev/null
kubectl wait --for=condition=Established --timeout=60s crd/trainingjobs.tessera.dev >/dev/null

port() { "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
health=$(port) metrics=$(port)
log=$TESSERA_CLUSTER_DIR/logs/tessera-controller.log
flags=(--qps 1000 --burst 2000 ${CONTROLLER_FLAGS:-})
"$controller" --kubeconfig "$KUBECONFIG" --progress-polling off -v "${flags[@]}" \
  --metrics-bind-address "127.0.0.1:$metrics" --health-probe-bind-address "127.0.0.1:$health" \
  >"$log" 2>&1 &
pid=$!
for _ in $(seq 1 240); do
  curl -sf "http://127.0.0.1:$health/readyz" >/dev/null && break
  sleep 0.5
done
curl -sf "http://127.0.0.1:$health/readyz" >/dev/null || {
  echo "run.sh: tessera-controller did not become ready (log: $log)" >&2
  exit 1
}
echo "jobs=$jobs workers=$workers nodes=$nodes controller flags: ${flags[*]}"
out=$("$python" "$root/bench/scale/measure.py" --kubeconfig "$KUBECONFIG" --jobs "$jobs" \
  --workers "$workers" --threads "${THREADS:-16}" --leave-tessera | tee /dev/stderr)

rss_kib=$(awk '$1 == "VmHWM:" { print $2 }' "/proc/$pid/status")
# CPU seconds the controller used (user + system, fields 14 and 15 of /proc/PID/stat, in clock
# ticks): on this machine it shares the cores with the control plane it drives.
cpu_s=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.1f", ($14 + $15) / hz }' "/proc/$pid/stat")
count=$(curl -sf "http://127.0.0.1:$metrics/metrics" |
  awk '$1 == "tessera_controller_reconcile_duration_seconds_count" { print $2 }')
# Reconcile times of the run, in ms, from lines "reconcile <key>: <result> in <ms> ms".
sed -n 's/.* D reconcile [^ ]* [a-z]* in \([0-9.]*\) ms$/\1/p' "$log" | sort -n |
  awk -v rss="$rss_kib" -v count="$count" -v cpu="$cpu_s" '
    { t[NR] = $1 }
    END {
      if (NR == 0) { print "no reconcile lines in the controller log"; exit 1 }
      p50 = t[int(0.50 * (NR - 1)) + 1]; p99 = t[int(0.99 * (NR - 1)) + 1]
      printf "controller peak_rss_mib=%.1f cpu_s=%s reconciles=%d (histogram count %s) reconcile_p50_ms=%.2f reconcile_p99_ms=%.2f reconcile_max_ms=%.2f\n",
        rss / 1024, cpu, NR, count, p50, p99, t[NR]
    }'
grep '^ratio=' <<<"$out" | tail -1
