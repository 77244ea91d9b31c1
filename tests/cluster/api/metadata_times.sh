#!/usr/bin/env bash
# metadata.creationTimestamp and deletionTimestamp: what kubectl refuses (it decodes them with
# Go's time.Parse before sending), `tessera validate` refuses naming the field, and what it
# takes, both take. A sample of the table in tests/unit/api/validate_test.cpp, against the real one.
source "$(dirname "$0")/common.sh"

taken=("2026-12-07T10:00:00Z" "2026-12-07T10:00:00.5+01:00" "2026-12-07T1:00:00Z"
  "2026-12-07T10:00:00,5Z" "2026-12-07T10:00:00+24:00" "2024-02-29T10:00:00Z")
refused=("yesterday" "" "2026-12-07 10:00:00Z" "2026-12-07T10:00:00z" "2026-12-07T10:00:00"
  "2026-12-07T10:00:00+0100" "2026-02-30T10:00:00Z" "2026-12-07T24:00:00Z"
  "2026-12-07T10:00:00+25:00" "2023-02-29T10:00:00Z")

job_with() { # field value
  sed "s/^metadata:\$/metadata:\n  $1: \"$2\"/" "$EXAMPLES/cpu-tiny.yaml"
}

count=0
for field in creationTimestamp deletionTimestamp; do
  for t in "${taken[@]}"; do
    job=$(job_with "$field" "$t")
    grep -qF "$field: \"$t\"" <<<"$job" || fail "could not insert $field"
    out=$(kns create --dry-run=server -f - <<<"$job" 2>&1) || fail "kubectl refused $field \"$t\": $out"
    "$TESSERA" validate <(printf '%s\n' "$job") >/dev/null 2>&1 ||
      fail "tessera validate refused $field \"$t\", which kubectl took"
    count=$((count + 1))
  done
  for t in "${refused[@]}"; do
    job=$(job_with "$field" "$t")
    if out=$(kns create --dry-run=server -f - <<<"$job" 2>&1); then
      fail "kubectl took $field \"$t\": $out"
    fi
    grep -qF "parsing time" <<<"$out" || fail "kubectl refused $field \"$t\" for another reason: $out"
    rc=0
    offline=$("$TESSERA" validate <(printf '%s\n' "$job") 2>&1) || rc=$?
    expect_eq 1 "$rc" "tessera validate exit code for $field \"$t\""
    grep -qF "metadata.$field: must be an RFC 3339 time" <<<"$offline" ||
      fail "tessera validate said, for $field \"$t\": $offline"
    count=$((count + 1))
  done
done
echo "ok: $count metadata times read alike by kubectl and tessera validate"
