#!/usr/bin/env bash
# Unknown fields are refused, not silently dropped: `spec.replicas` is not a field.
source "$(dirname "$0")/common.sh"

job=$(sed 's/^spec:$/spec:\n  replicas: 3/' "$EXAMPLES/cpu-tiny.yaml")
grep -q 'replicas: 3' <<<"$job" || fail "could not insert spec.replicas"
if out=$(kns apply -f - <<<"$job" 2>&1); then
  fail "the apiserver accepted spec.replicas: $out"
fi
grep -q 'unknown field "spec.replicas"' <<<"$out" || fail "unexpected message: $out"
if kns get tj cpu-tiny >/dev/null 2>&1; then
  fail "the job was created despite the unknown field"
fi

rc=0
offline=$("$TESSERA" validate <(printf '%s\n' "$job") 2>&1) || rc=$?
expect_eq 1 "$rc" "tessera validate exit code"
grep -q ': spec.replicas: unknown field$' <<<"$offline" || fail "tessera validate said: $offline"
echo "ok: unknown field refused"
