#!/usr/bin/env bash
# `kubectl get tj` shows Phase, Ready, Workers, Step, Loss, Restarts and Age from the status the
# controller writes (written here by the test through the status subresource).
source "$(dirname "$0")/common.sh"

kns apply -f "$EXAMPLES/cpu-tiny.yaml" >/dev/null
# Not `| head -1`: head exits after one line, and a kubectl still writing the row then dies of
# SIGPIPE, which pipefail reports as a failure (a flake seen in CI).
header=$(kns get tj cpu-tiny | sed -n 1p)
expect_eq "NAME PHASE READY WORKERS STEP LOSS RESTARTS AGE" "$(tr -s ' ' <<<"$header")" "columns"

kns patch tj cpu-tiny --subresource=status --type=merge -p '{"status": {"phase": "Running",
  "workers": {"active": 2, "ready": 1}, "restarts": 1,
  "progress": {"step": 120, "totalSteps": 300, "loss": 2.31, "tokensPerSecond": 51200}}}' >/dev/null
row=$(kns get tj cpu-tiny --no-headers | tr -s ' ' | cut -d' ' -f1-7)
expect_eq "cpu-tiny Running 1 2 120 2.31 1" "$row" "row"

# The status subresource is the only way to write status: a spec write leaves it alone.
kns patch tj cpu-tiny --type=merge -p '{"status": {"phase": "Failed"}, "spec": {"suspend": true}}' >/dev/null
expect_eq Running "$(kns get tj cpu-tiny -o jsonpath='{.status.phase}')" "phase after a spec patch"
expect_eq 2 "$(kns get tj cpu-tiny -o jsonpath='{.metadata.generation}')" "generation after a spec patch"

# The status schema is enforced too.
if out=$(kns patch tj cpu-tiny --subresource=status --type=merge -p '{"status": {"phase": "Exploded"}}' 2>&1); then
  fail "status.phase Exploded accepted: $out"
fi
grep -qF "status.phase" <<<"$out" || fail "unexpected: $out"
echo "ok: columns"
