#!/usr/bin/env bash
# --metrics-port PORT: rank r serves /metrics and /progress on PORT + r, and a gang restart
# keeps those ports (so a Prometheus scrape config stays right). A port in use, or a range past
# 65535, is refused before anything starts, in one line naming the port.
source "$(dirname "$0")/lib.sh"

# Two consecutive ports free on every interface (the runner checks again).
base=$("$PY" "$(dirname "$0")/../../free_ports.py" 2)
[[ -n $base ]] || fail "found no two free consecutive ports"

# scrape PORT: rank's /metrics holds the training step gauge.
scrape() {
  "$PY" - "$1" <<'PYEOF'
import sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=2) as r:
    sys.exit(0 if b"\ntessera_train_step " in r.read() else 1)
PYEOF
}

# Port base + 1 (rank 1's) held by another listener.
"$PY" -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
open(sys.argv[2], "w").close()
time.sleep(120)' "$((base + 1))" "$WORK/holding" &
holder=$!
wait_for 20 "the listener on port $((base + 1))" test -e "$WORK/holding"
rc=0
"$TESSERA" run "$TINY" "${SMALL_DP[@]}" --metrics-port "$base" --workdir "$WORK/busy" \
  >"$WORK/busy.txt" 2>&1 || rc=$?
kill "$holder" && wait "$holder" || true
cat "$WORK/busy.txt"
[[ $rc == 2 ]] || fail "a port in use: exit code $rc, want 2"
grep -qx -- "tessera run: --metrics-port $base: port $((base + 1)) (rank 1) is in use; choose another port (the ranks take $base..$((base + 1))) or leave --metrics-port out" \
  "$WORK/busy.txt" || fail "no line naming the port in use"
[[ $(wc -l <"$WORK/busy.txt") == 1 ]] || fail "more than one line for a port in use"
[[ ! -e $WORK/busy ]] || fail "a refused run created its run directory"

rc=0
"$TESSERA" run "$TINY" --metrics-port 65535 --workdir "$WORK/past" >"$WORK/past.txt" 2>&1 || rc=$?
cat "$WORK/past.txt"
[[ $rc == 2 ]] || fail "a range past 65535: exit code $rc, want 2"
grep -q -- "--metrics-port 65535: the 2 rank(s) need ports 65535..65536, past 65535; choose a port of at most 65534" \
  "$WORK/past.txt" || fail "no line naming the range"

# ports RUN_DIR ATTEMPT: true once every rank of ATTEMPT runs; prints their ports by rank.
ports() {
  json "$1/status.json" '" ".join(str(r["metricsPort"]) for r in sorted(j["ranks"], key=lambda r: r["rank"])) if j["attempt"] == '"$2"' and len(j["ranks"]) == 2 and all(r["running"] and r["attempt"] == '"$2"' for r in j["ranks"]) else exit(1)'
}
# step_on PORT N: rank 0 answers /progress on PORT with step >= N.
step_on() {
  local step
  step=$(progress_step "$1")
  ((step >= $2))
}

# 1000 steps, so the run cannot end before the checks; a checkpoint every 20 to restart from.
"$TESSERA" run "$TINY" "${SMALL_DP[@]}" --set spec.trainer.schedule.steps=1000 \
  --set spec.trainer.checkpoint.everySteps=20 --metrics-port "$base" --workdir "$WORK/run" \
  >"$WORK/run.txt" 2>&1 &
runner=$!
wait_for 90 "rank 0 past step 3 on port $base" step_on "$base" 3
[[ $(ports "$WORK/run" 0) == "$base $((base + 1))" ]] ||
  fail "attempt 0's ports are $(ports "$WORK/run" 0), want $base $((base + 1))"
scrape "$base" || fail "rank 0 serves no tessera_train_step on port $base"
scrape "$((base + 1))" || fail "rank 1 serves no tessera_train_step on port $((base + 1))"
grep -q "rank 0 metrics on http://127.0.0.1:$base/metrics" "$WORK/run.txt" ||
  fail "the runner did not print rank 0's metrics address"

# A gang restart: the new attempt's ranks listen on the same ports.
kill -9 "$(json "$WORK/run/status.json" '[r["pid"] for r in j["ranks"] if r["rank"] == 1][0]')"
wait_for 120 "attempt 1 running" ports "$WORK/run" 1
[[ $(ports "$WORK/run" 1) == "$base $((base + 1))" ]] ||
  fail "attempt 1's ports are $(ports "$WORK/run" 1), want $base $((base + 1))"
wait_for 90 "attempt 1's rank 0 answering on port $base" step_on "$base" 1
scrape "$((base + 1))" || fail "attempt 1's rank 1 serves nothing on port $((base + 1))"

kill -INT "$runner"
rc=0
wait "$runner" || rc=$?
cat "$WORK/run.txt"
[[ $rc == 130 ]] || fail "exit code $rc after SIGINT, want 130"
[[ $(json "$WORK/run/status.json" 'j["restarts"]') == 1 ]] || fail "want exactly one gang restart"
assert_no_survivors "$WORK/run"
echo PASS
