#!/usr/bin/env bash
# Every spec in invalid/ is refused by the apiserver with the expected field path in the
# message, and by `tessera validate` naming the same field with the same message. Each file
# says what it expects in its header:
#   # expect: <field path>
#   # message: <text both must contain>      (cross-field rules)
source "$(dirname "$0")/common.sh"

count=0
for f in "$(dirname "$0")"/invalid/*.yaml; do
  name=$(basename "$f")
  path=$(sed -n 's/^# expect: //p' "$f")
  message=$(sed -n 's/^# message: //p' "$f")
  [ -n "$path" ] || fail "$name has no '# expect:' line"

  if server=$(kns apply --dry-run=server -f "$f" 2>&1); then
    fail "the apiserver accepted $name: $server"
  fi
  grep -qF -- "$path" <<<"$server" || fail "$name: server message lacks '$path': $server"
  [ -z "$message" ] || grep -qF -- "$message" <<<"$server" ||
    fail "$name: server message lacks '$message': $server"

  rc=0
  offline=$("$TESSERA" validate "$f" 2>&1) || rc=$?
  expect_eq 1 "$rc" "$name: tessera validate exit code"
  grep -qF -- "$f: $path: $message" <<<"$offline" ||
    fail "$name: tessera validate lacks '$path: $message': $offline"
  count=$((count + 1))
done
[ "$count" -ge 20 ] || fail "expected at least 20 invalid specs, found $count"
echo "ok: $count invalid specs refused by both"
