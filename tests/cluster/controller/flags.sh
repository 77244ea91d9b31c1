#!/usr/bin/env bash
# tests/cluster/controller/flags.sh CONTROLLER: tessera-controller's refusals of flag values,
# before it reads a kubeconfig or reaches a server: exit 2 and one line naming the flags and
# what to do. Needs no cluster (label e2e).
set -euo pipefail
controller=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_refused PATTERN FLAGS...: exit 2, and the first line of the output matches PATTERN.
expect_refused() {
  local pattern=$1 rc=0
  shift
  "$controller" "$@" >"$work/out" 2>&1 </dev/null || rc=$?
  [[ $rc == 2 ]] || fail "tessera-controller $*: exit $rc, want 2: $(cat "$work/out")"
  head -1 "$work/out" | grep -q -- "$pattern" || fail "tessera-controller $*: $(cat "$work/out")"
  echo "ok: $* -> $(head -1 "$work/out")"
}
expect_one_line() {
  [[ $(wc -l <"$work/out") == 1 ]] || fail "not one line: $(cat "$work/out")"
}
# --version parses every flag first, then prints and exits 0.
expect_accepted() {
  "$controller" "$@" --version >"$work/out" 2>&1 </dev/null ||
    fail "tessera-controller $* --version: exit $?: $(cat "$work/out")"
  echo "ok: $* accepted"
}

expect_refused "--leader-election-renew-deadline 20 must be less than --leader-election-lease-duration 15" \
  --leader-elect --leader-election-renew-deadline 20
expect_one_line
expect_refused "--leader-election-renew-deadline 2 must be more than 1.2 times --leader-election-retry-period 2" \
  --leader-elect --leader-election-renew-deadline 2 --leader-election-lease-duration 3
expect_one_line
# Timings are checked only with --leader-elect; without it they are not used.
expect_accepted --leader-election-renew-deadline 20
expect_refused "qps" --qps 0
expect_refused "qps" --qps 2e6
expect_accepted --qps 0.01
expect_accepted --qps 1e6
expect_accepted --cache-sync-timeout 0.5
expect_refused "cache-sync-timeout" --cache-sync-timeout 0.001
expect_refused "pod-event-batch" --pod-event-batch 61
echo "PASS"
