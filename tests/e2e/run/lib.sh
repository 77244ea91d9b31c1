# Helpers shared by the `tessera run` end-to-end tests (sourced, not run).
# Each test gets: TESSERA (the binary), WORK (a fresh scratch directory), MARKER (a value put
# into the environment of every process the run starts, to find survivors).
set -euo pipefail

TESSERA=${1:?usage: test.sh TESSERA_BINARY SCRATCH_DIR}
WORK=${2:?usage: test.sh TESSERA_BINARY SCRATCH_DIR}
rm -rf "$WORK" && mkdir -p "$WORK"
MARKER="tessera-e2e-$(basename "$WORK")-$$-$RANDOM"
export TESSERA_E2E_MARKER=$MARKER
PY=/usr/bin/python3

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# json FILE EXPR: prints the Python expression EXPR evaluated with `j` = the JSON document.
json() {
  "$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND until it succeeds or the deadline
# passes (then fails the test naming DESCRIPTION).
wait_for() {
  local seconds=$1 what=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "timed out after ${seconds}s waiting for: $what"
    sleep 0.2
  done
}

# Prints the pids of processes (other than this shell) whose environment holds MARKER.
survivors() {
  "$PY" - "TESSERA_E2E_MARKER=$MARKER" "$$" <<'PYEOF'
import os, sys
marker, me = sys.argv[1].encode(), {sys.argv[2], str(os.getpid())}
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            if marker in f.read().split(b"\0") and pid not in me:
                print(pid)
    except OSError:
        pass
PYEOF
}

# Fails when any process started by the run is still alive (by environment marker and by the
# process groups recorded in the run directory's status.json).
assert_no_survivors() {
  local status=$1/status.json left
  left=$(survivors || true)
  [[ -z $left ]] || fail "processes survived the run: $(ps -o pid,pgid,cmd -p ${left//$'\n'/,})"
  if [[ -f $status ]]; then
    for pgid in $(json "$status" '" ".join(str(r["pid"]) for r in j["ranks"])'); do
      if kill -0 -- "-$pgid" 2>/dev/null; then fail "process group $pgid survived the run"; fi
    done
  fi
}

# progress_step PORT: rank 0's current step from /progress (fails when nothing answers).
progress_step() {
  "$PY" - "$1" <<'PYEOF'
import json, sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/progress", timeout=1) as r:
    print(json.load(r)["step"])
PYEOF
}

# step_at_least RUN_DIR N: true once rank 0 of the newest attempt reports step >= N.
step_at_least() {
  local port step
  port=$(json "$1/status.json" '[r["metricsPort"] for r in j["ranks"] if r["rank"] == 0 and r["running"]][0]')
  step=$(progress_step "$port")
  ((step >= $2))
}

# The tiny example: two data-parallel workers of one rank each.
TINY=manifests/examples/cpu-tiny.yaml
TINY_ONE_RANK=(--set spec.workers=1 --set spec.parallelism.data=1)
# Four times cheaper per step, for tests about restarts rather than learning: one rank, and
# the example's two data-parallel ranks.
CHEAP=(--set spec.trainer.model.seqLen=32 --set spec.trainer.batch.global=8)
SMALL=("${TINY_ONE_RANK[@]}" "${CHEAP[@]}")
SMALL_DP=("${CHEAP[@]}")
