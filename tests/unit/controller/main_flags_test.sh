#!/usr/bin/env bash
# tests/unit/controller/main_flags_test.sh CONTROLLER: tessera-controller's flags and start-up
# as docs/controller.md promises them. A value it refuses ends it with exit code 2 and one line
# naming the flag; a value it accepts gets it past the flag checks to the kubeconfig (here a
# file that does not exist: exit 2 and the kubeconfig's line). The start-up cases use a
# kubeconfig whose server refuses connections. Needs no API server.
set -euo pipefail
controller=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

missing=$work/no-such-kubeconfig
no_kubeconfig="E cannot read kubeconfig $missing (missing, unreadable or over 16 MiB); check --kubeconfig"

# run_controller FLAGS...: output (stdout and stderr, the log's timestamps cut) in $work/out,
# exit code in $rc.
run_controller() {
  rc=0
  "$controller" "$@" >"$work/raw" 2>&1 </dev/null || rc=$?
  sed -E -e 's/^[0-9-]+T[0-9:.]+Z //' -e 's/,"ts":"[^"]*"//' "$work/raw" >"$work/out"
}

# expect RC LINE FLAGS...: exit code RC and the output is exactly the one line LINE.
expect() {
  local want_rc=$1 want_line=$2
  shift 2
  run_controller --kubeconfig "$missing" "$@"
  [[ $rc == "$want_rc" && $(cat "$work/out") == "$want_line" ]] ||
    fail "tessera-controller $*: exit $rc, want $want_rc; output:
$(cat "$work/out")
want the one line:
$want_line"
}
accepted() { expect 2 "$no_kubeconfig" "$@"; }
refused() { expect 2 "$@"; }

# Each range's ends are accepted and the values just past them refused (docs: Flags).
accepted --workers 1
accepted --workers 256
refused "--workers: Value 0 not in range 1 to 256" --workers 0
refused "--workers: Value 257 not in range 1 to 256" --workers 257
accepted --qps 0.01
accepted --qps 1e6
refused "--qps: Value 0.009 not in range 0.010000 to 1000000.000000" --qps 0.009
refused "--qps: Value 1000001 not in range 0.010000 to 1000000.000000" --qps 1000001
refused "--qps: Value nan is not a number" --qps nan
accepted --burst 1
accepted --burst 100000
refused "--burst: Value 0 not in range 1 to 100000" --burst 0
refused "--burst: Value 100001 not in range 1 to 100000" --burst 100001
accepted --log-format text
refused "--log-format: xml not in {text,json}" --log-format xml
accepted --progress-polling pods
accepted --progress-polling loopback-only
accepted --progress-polling off
refused "--progress-polling: all not in {pods,loopback-only,off}" --progress-polling all
accepted --progress-interval 0.01
accepted --progress-interval 3600
refused "--progress-interval: Value 0.009 not in range 0.010000 to 3600.000000" --progress-interval 0.009
refused "--progress-interval: Value 3601 not in range 0.010000 to 3600.000000" --progress-interval 3601
refused "--progress-interval: Value nan is not a number" --progress-interval nan
accepted --pod-event-batch 0
accepted --pod-event-batch 60
refused "--pod-event-batch: Value -0.001 not in range 0.000000 to 60.000000" --pod-event-batch=-0.001
refused "--pod-event-batch: Value 60.001 not in range 0.000000 to 60.000000" --pod-event-batch 60.001
refused "--pod-event-batch: Value nan is not a number" --pod-event-batch nan
accepted --cache-sync-timeout 0.01
accepted --cache-sync-timeout 86400
refused "--cache-sync-timeout: Value 0.009 not in range 0.010000 to 86400.000000" --cache-sync-timeout 0.009
refused "--cache-sync-timeout: Value 86401 not in range 0.010000 to 86400.000000" --cache-sync-timeout 86401
refused "--cache-sync-timeout: Value nan is not a number" --cache-sync-timeout nan
for timing in lease-duration renew-deadline retry-period; do
  refused "--leader-election-$timing: Value 0.009 not in range 0.010000 to 3600.000000" \
    --leader-election-$timing 0.009
  refused "--leader-election-$timing: Value 3601 not in range 0.010000 to 3600.000000" \
    --leader-election-$timing 3601
  refused "--leader-election-$timing: Value nan is not a number" --leader-election-$timing nan
done
refused "The following argument was not expected: --bogus" --bogus

# Leader election: the defaults (15, 10, 2) hold; lease duration > renew deadline >
# 1.2 x retry period, each strictly; the timings are checked only with --leader-elect.
accepted --leader-elect
accepted --leader-elect --leader-election-lease-duration 3600 --leader-election-renew-deadline 3599.99
accepted --leader-elect --leader-election-lease-duration 0.03 --leader-election-renew-deadline 0.02 \
  --leader-election-retry-period 0.01
accepted --leader-elect --leader-election-renew-deadline 2.41 --leader-election-retry-period 2
refused "E --leader-election-renew-deadline 15 must be less than --leader-election-lease-duration 15" \
  --leader-elect --leader-election-renew-deadline 15
refused "E --leader-election-renew-deadline 10 must be less than --leader-election-lease-duration 9" \
  --leader-elect --leader-election-lease-duration 9
refused "E --leader-election-renew-deadline 2.4 must be more than 1.2 times --leader-election-retry-period 2 (2.4)" \
  --leader-elect --leader-election-renew-deadline 2.4 --leader-election-retry-period 2
refused "E --leader-election-renew-deadline 10 must be more than 1.2 times --leader-election-retry-period 9 (10.8)" \
  --leader-elect --leader-election-retry-period 9
refused "E leader election: the Lease namespace and name must be set" \
  --leader-elect --leader-election-namespace ""
refused "E leader election: the Lease namespace and name must be set" --leader-elect --leader-election-id ""
accepted --leader-election-renew-deadline 20 --leader-election-retry-period 100
accepted --leader-election-namespace ""

# Listen addresses: host:port, :port or 0; a numeric host must be an IPv4 address.
for flag in --metrics-bind-address --health-probe-bind-address; do
  accepted $flag 0
  accepted $flag :8080
  accepted $flag 127.0.0.1:9090
  accepted $flag localhost:9090
  # 999.0.0.1 listened on 231.0.0.1 (civetweb takes each number modulo 256).
  for bad in 8080 "" "127.0.0.1:" ":80a" localhost 999.0.0.1:80 1.2.3:80 1.2.3.4.5:80; do
    refused "E $flag $bad: expected host:port, :port or 0" $flag "$bad"
  done
done

# --log-format json: the refusal is one JSON object.
expect 2 '{"level":"error","msg":"cannot read kubeconfig '"$missing"' (missing, unreadable or over 16 MiB); check --kubeconfig"}' \
  --log-format json

# --help exits 0 and shows the defaults docs/controller.md lists; the Lease's namespace is
# $POD_NAMESPACE when set.
run_controller --help
[[ $rc == 0 ]] || fail "--help: exit $rc"
for default in "--workers INT:INT in [1 - 256]=4" "--metrics-bind-address TEXT=:8080" \
  "--health-probe-bind-address TEXT=:8081" "--qps FLOAT:FLOAT in [0.01 - 1e+06]=20" \
  "--burst INT:INT in [1 - 100000]=30" "--log-format TEXT:{text,json}=text" \
  "--progress-polling TEXT:{pods,loopback-only,off}=pods" \
  "--progress-interval FLOAT:FLOAT in [0.01 - 3600]=5" "--pod-event-batch FLOAT:FLOAT in [0 - 60]=1" \
  "--cache-sync-timeout FLOAT:FLOAT in [0.01 - 86400]=120" \
  "--leader-election-namespace TEXT=tessera-system" "--leader-election-id TEXT=tessera-controller" \
  "--leader-election-lease-duration FLOAT:FLOAT in [0.01 - 3600]=15" \
  "--leader-election-renew-deadline FLOAT:FLOAT in [0.01 - 3600]=10" \
  "--leader-election-retry-period FLOAT:FLOAT in [0.01 - 3600]=2"; do
  grep -qxF -- "  $default" "$work/out" || fail "--help does not show the default $default"
done
POD_NAMESPACE=training run_controller --help
grep -qxF -- "  --leader-election-namespace TEXT=training" "$work/out" ||
  fail "--help with POD_NAMESPACE=training: $(grep leader-election-namespace "$work/out")"
run_controller --version
[[ $rc == 0 && $(head -1 "$work/out") == "tessera "* ]] || fail "--version: exit $rc: $(cat "$work/out")"

# Start-up against a server that refuses connections (port 1).
cat >"$work/kubeconfig" <<'YAML'
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
YAML
offline=(--kubeconfig "$work/kubeconfig" --metrics-bind-address 0 --health-probe-bind-address 0)

# Caches that do not sync in time end it with exit 1 and a line naming the server, after
# the timeout (seconds) and not before.
start=$(date +%s%N)
run_controller "${offline[@]}" --cache-sync-timeout 0.6
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
[[ $rc == 1 ]] || fail "unsynced caches: exit $rc, want 1: $(cat "$work/out")"
((elapsed_ms >= 600)) || fail "unsynced caches: gave up after $elapsed_ms ms, before 0.6 s"
[[ $(tail -1 "$work/out") == "E caches did not sync within 0.6s: is http://127.0.0.1:1 reachable, is the TrainingJob CRD installed (manifests/crd/), and may this identity list and watch trainingjobs, pods and nodes (manifests/rbac/)?" ]] ||
  fail "unsynced caches: $(tail -1 "$work/out")"

run_controller --kubeconfig "$work/kubeconfig" --context nope
[[ $rc == 2 && $(cat "$work/out") == "E $work/kubeconfig: contexts: no context named \"nope\"" ]] ||
  fail "--context nope: exit $rc: $(cat "$work/out")"

# Two listeners on one port: the second cannot listen (exit 2).
port=$(python3 "$(dirname "$0")/../../free_ports.py" 1)
run_controller --kubeconfig "$work/kubeconfig" --metrics-bind-address "127.0.0.1:$port" \
  --health-probe-bind-address "127.0.0.1:$port"
[[ $rc == 2 && $(tail -1 "$work/out") == "E --health-probe-bind-address 127.0.0.1:$port: cannot listen ("* ]] ||
  fail "health port taken: exit $rc: $(cat "$work/out")"

# SIGTERM and SIGINT while the caches sync stop it with exit 0.
for signal in TERM INT; do
  rc=0
  (trap - INT; exec "$controller" "${offline[@]}" >"$work/raw" 2>&1 </dev/null) &
  pid=$!
  for _ in $(seq 100); do
    grep -q "watching all namespaces" "$work/raw" && break
    sleep 0.05
  done
  kill -$signal $pid
  wait $pid || rc=$?
  [[ $rc == 0 ]] || fail "SIG$signal: exit $rc, want 0: $(cat "$work/raw")"
  grep -q " I received SIG$signal; stopping$" "$work/raw" || fail "SIG$signal: $(cat "$work/raw")"
done
echo PASS
