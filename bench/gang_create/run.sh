#!/usr/bin/env bash
# bench/gang_create/run.sh [BUILD_DIR]: how fast a 64-worker gang's pods are created by
# tessera-controller, against kube-controller-manager's Job controller creating a
# 64-completion Indexed Job, on the same local control plane in one run (DESIGN.md §10,
# target ratio <= 0.8).
#
# Starts a control plane of its own (scripts/cluster.sh, state in BUILD_DIR/bench-gang-cluster,
# one simulated node: the pods stay Pending on purpose), installs the TrainingJob CRD, runs
# BUILD_DIR/bin/tessera-controller, then measure.py times ROUNDS rounds of each, alternating:
# from the POST of the TrainingJob / Job to the watch showing all WORKERS pods. Prints every
# round, the medians and, last, `ratio=<median tessera ÷ median job controller>`. Stops
# everything it started.
#
# Both controllers always run at the same client-side limits, QPS and BURST: by default 20 and
# 30, the defaults of both (tessera-controller --qps/--burst, kube-controller-manager
# --kube-api-qps/--kube-api-burst). Other values are given to both: kube-controller-manager is
# restarted with them (its recorded command line, scripts/cluster.sh cmd/, plus the two flags).
# At the defaults both are bound by the token bucket: 64 creates cannot take less than
# (64 - 30) / 20 = 1.7 s whoever sends them; with limits that do not bind (QPS=1000
# BURST=2000) the figures compare how each controller issues its creates.
#
# Environment: WORKERS (64), ROUNDS (5), QPS (20), BURST (30), IDLE (0: seconds every measured
# round waits before its POST; 65 lets tessera-controller's idle connections close, as between
# jobs on a quiet cluster), PYTHON (/usr/bin/python3),
# CONTROLLER_FLAGS (extra tessera-controller flags; the ratio is then no longer at equal
# settings). Needs scripts/setup.sh's .deps/bin and
# `cmake --build BUILD_DIR --target tessera-controller`.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(realpath -m "${1:-$root/build}")
python=${PYTHON:-/usr/bin/python3}
controller=$build/bin/tessera-controller
qps=${QPS:-20} burst=${BURST:-30}
case "$qps$burst" in *[!0-9]* | '') echo "run.sh: QPS and BURST must be whole numbers, got QPS='$qps' BURST='$burst'" >&2; exit 2 ;; esac
[ -x "$controller" ] || {
  echo "run.sh: $controller not found; build it: cmake --build $build --target tessera-controller" >&2
  exit 2
}
export TESSERA_CLUSTER_DIR=$build/bench-gang-cluster TESSERA_CLUSTER_NODES=1
export PATH=$root/.deps/bin:$PATH KUBECONFIG=$TESSERA_CLUSTER_DIR/kubeconfig

pid=""
cleanup() {
  set +e
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
  "$root/scripts/cluster.sh" down >/dev/null 2>&1
}
trap cleanup EXIT
"$root/scripts/cluster.sh" up >/dev/null
if [ "$qps/$burst" != 20/30 ]; then
  printf '%s\n' --kube-api-qps "$qps" --kube-api-burst "$burst" \
    >>"$TESSERA_CLUSTER_DIR/cmd/kube-controller-manager"
  # Its restart has failed now and then (silently, before this said so): say so, and try again.
  restart_log=$TESSERA_CLUSTER_DIR/logs/kcm-restart.log
  restart_kcm() { "$root/scripts/cluster.sh" restart kube-controller-manager >>"$restart_log" 2>&1; }
  restart_kcm || { echo "run.sh: restarting kube-controller-manager failed; once more (see $restart_log)" >&2 && sleep 2 && restart_kcm; } || {
    echo "run.sh: kube-controller-manager did not restart twice; see $restart_log" >&2
    exit 1
  }
  kcm=$(awk '$1 == "kube-controller-manager" { print $2 }' "$TESSERA_CLUSTER_DIR/pids")
  tr '\0' ' ' <"/proc/$kcm/cmdline" | grep -q -- "--kube-api-qps $qps --kube-api-burst $burst" || {
    echo "run.sh: kube-controller-manager did not restart with --kube-api-qps $qps --kube-api-burst $burst" >&2
    exit 1
  }
fi
kubectl apply -f "$root/manifests/crd/trainingjobs.tessera.dev.yaml" >/dev/null
kubectl wait --for=condition=Established --timeout=60s crd/trainingjobs.tessera.dev >/dev/null

port() { "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
health=$(port)
"$controller" --kubeconfig "$KUBECONFIG" --progress-polling off --metrics-bind-address 0 \
  --health-probe-bind-address "127.0.0.1:$health" --qps "$qps" --burst "$burst" ${CONTROLLER_FLAGS:-} >"$TESSERA_CLUSTER_DIR/logs/tessera-controller.log" 2>&1 &
pid=$!
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$health/readyz" >/dev/null && break
  sleep 0.5
done
curl -sf "http://127.0.0.1:$health/readyz" >/dev/null || {
  echo "run.sh: tessera-controller did not become ready (log: $TESSERA_CLUSTER_DIR/logs/tessera-controller.log)" >&2
  exit 1
}
echo "control plane: $(kubectl version -o json | "$python" -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])');" \
  "client limits of both controllers: qps $qps burst $burst${CONTROLLER_FLAGS:+; extra tessera-controller flags: $CONTROLLER_FLAGS}"
"$python" "$root/bench/gang_create/measure.py" --kubeconfig "$KUBECONFIG" \
  --workers "${WORKERS:-64}" --rounds "${ROUNDS:-5}" --idle "${IDLE:-0}"
