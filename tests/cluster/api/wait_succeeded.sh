#!/usr/bin/env bash
# `kubectl wait --for=condition=Succeeded tj/NAME` returns once the status says so.
source "$(dirname "$0")/common.sh"

kns apply -f "$EXAMPLES/cpu-tiny.yaml" >/dev/null
# Nothing Succeeded yet: a short wait times out.
if kns wait --for=condition=Succeeded tj/cpu-tiny --timeout=2s >/dev/null 2>&1; then
  fail "kubectl wait returned before the condition was written"
fi

log=$(mktemp)
on_exit "rm -f $log"
kns wait --for=condition=Succeeded tj/cpu-tiny --timeout=60s >"$log" 2>&1 &
waiter=$!
on_exit "kill $waiter"
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
kns patch tj cpu-tiny --subresource=status --type=merge -p "{\"status\": {\"phase\": \"Succeeded\",
  \"completionTime\": \"$now\", \"conditions\": [
  {\"type\": \"Running\", \"status\": \"False\", \"reason\": \"Completed\", \"lastTransitionTime\": \"$now\"},
  {\"type\": \"Succeeded\", \"status\": \"True\", \"reason\": \"Completed\", \"message\": \"worker 0 exited 0\",
   \"lastTransitionTime\": \"$now\", \"observedGeneration\": 1}]}}" >/dev/null
wait $waiter || fail "kubectl wait failed: $(cat "$log")"
grep -q "condition met" "$log" || fail "unexpected: $(cat "$log")"
expect_eq Succeeded "$(kns get tj cpu-tiny -o jsonpath='{.status.phase}')" "phase"
echo "ok: kubectl wait"
