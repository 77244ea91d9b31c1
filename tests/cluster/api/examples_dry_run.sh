#!/usr/bin/env bash
# Every example passes `kubectl apply --dry-run=server` (schema, defaults and CEL rules) and
# `tessera validate`.
source "$(dirname "$0")/common.sh"

count=0
for f in "$EXAMPLES"/*.yaml; do
  out=$(kns apply --dry-run=server -f "$f" 2>&1) || fail "server refused $(basename "$f"): $out"
  grep -q "created (server dry run)" <<<"$out" || fail "unexpected: $out"
  "$TESSERA" validate "$f" || fail "tessera validate refused $(basename "$f")"
  count=$((count + 1))
done
[ "$count" -ge 6 ] || fail "expected at least 6 examples, found $count"

# The apiserver fills the schema's defaults as `tessera validate` assumes them.
applied=$(kns apply --dry-run=server -o json -f "$EXAMPLES/cpu-tiny.yaml")
expect_eq 1F1B "$(json_get 'd["spec"]["parallelism"]["schedule"]' <<<"$applied")" "default schedule"
expect_eq "[2]" "$(json_get 'd["spec"]["runPolicy"]["permanentExitCodes"]' <<<"$applied")" "default permanentExitCodes"
expect_eq 300 "$(json_get 'd["spec"]["scheduling"]["startupTimeoutSeconds"]' <<<"$applied")" "default startupTimeoutSeconds"
expect_eq 0.95 "$(json_get 'd["spec"]["trainer"]["optimizer"]["beta2"]' <<<"$applied")" "default beta2"
echo "ok: $count examples accepted"
