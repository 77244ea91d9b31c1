#!/usr/bin/env bash
# `tessera validate FILE...`: exit 0 when all valid, 1 when any is invalid (one
# `file: field: message` line per error), 2 when a file is unreadable or not YAML.
# `tessera crd` prints the committed CRD.
set -euo pipefail
tessera=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

expect_rc() {  # expect_rc <rc> <command...>; output in $tmp/out
  local want=$1; shift
  local rc=0
  "$@" >"$tmp/out" 2>&1 || rc=$?
  [ "$rc" = "$want" ] || { cat "$tmp/out" >&2; fail "$* exited $rc, expected $want"; }
}

expect_rc 0 "$tessera" validate "$src"/manifests/examples/*.yaml
[ ! -s "$tmp/out" ] || fail "valid examples printed output: $(cat "$tmp/out")"

cat >"$tmp/bad.yaml" <<'YAML'
apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata: {name: bad}
spec:
  workers: 3
  parallelism: {tensor: 3}
  trainer:
    model: {layers: 2, dModel: 64, heads: 4, seqLen: 64}
    data: {path: d.txt}
    batch: {global: 16}
    schedule: {steps: 10, warmupSteps: 11}
YAML
expect_rc 1 "$tessera" validate "$src/manifests/examples/cpu-tiny.yaml" "$tmp/bad.yaml"
grep -qx "$tmp/bad.yaml: spec.parallelism.tensor: tensor must divide spec.trainer.model.heads (3 does not divide 4)" "$tmp/out" ||
  fail "no tensor line: $(cat "$tmp/out")"
grep -qx "$tmp/bad.yaml: spec.trainer.schedule.warmupSteps: warmupSteps must not exceed steps (11 > 10)" "$tmp/out" ||
  fail "no warmup line: $(cat "$tmp/out")"
[ "$(wc -l <"$tmp/out")" = 2 ] || fail "expected 2 lines: $(cat "$tmp/out")"

printf 'spec: [unclosed\n' >"$tmp/broken.yaml"
expect_rc 2 "$tessera" validate "$tmp/bad.yaml" "$tmp/broken.yaml"
grep -q "^$tmp/broken.yaml: not valid YAML: line " "$tmp/out" || fail "no syntax line: $(cat "$tmp/out")"
expect_rc 2 "$tessera" validate "$tmp/missing.yaml"
grep -qx "$tmp/missing.yaml: cannot read the file: No such file or directory" "$tmp/out" ||
  fail "no unreadable line: $(cat "$tmp/out")"
expect_rc 2 "$tessera" validate "$tmp"
grep -qx "$tmp: is a directory; name a YAML file" "$tmp/out" || fail "no directory line: $(cat "$tmp/out")"

# An endless input is refused at 16 MiB, not read forever (a file and standard input).
expect_rc 2 timeout 60 "$tessera" validate /dev/zero
grep -qx "/dev/zero: larger than 16 MiB; a job file is a few KiB (is this the right file?)" "$tmp/out" ||
  fail "no size line: $(cat "$tmp/out")"
rc=0
timeout 60 "$tessera" validate - </dev/zero >"$tmp/out" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "validate - </dev/zero exited $rc: $(cat "$tmp/out")"
grep -qx -- "-: larger than 16 MiB; a job file is a few KiB (is this the right file?)" "$tmp/out" ||
  fail "no size line for stdin: $(cat "$tmp/out")"

# `-` reads standard input, as kubectl's -f - does.
rc=0
"$tessera" validate - <"$tmp/bad.yaml" >"$tmp/out" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "validate - exited $rc: $(cat "$tmp/out")"
grep -qx -- "-: spec.parallelism.tensor: tensor must divide spec.trainer.model.heads (3 does not divide 4)" "$tmp/out" ||
  fail "no tensor line for stdin: $(cat "$tmp/out")"

# A file of several documents names the document of each line (`file#2`); a file without
# a document is unreadable (2), and stays so whatever the files after it hold.
{ cat "$src/manifests/examples/cpu-tiny.yaml"; echo "---"; cat "$tmp/bad.yaml"; } >"$tmp/two.yaml"
expect_rc 1 "$tessera" validate "$tmp/two.yaml"
grep -qx "$tmp/two.yaml#2: spec.trainer.schedule.warmupSteps: warmupSteps must not exceed steps (11 > 10)" "$tmp/out" ||
  fail "no line naming the second document: $(cat "$tmp/out")"
printf '# nothing here\n' >"$tmp/empty.yaml"
expect_rc 2 "$tessera" validate "$tmp/empty.yaml" "$tmp/bad.yaml"
grep -qx "$tmp/empty.yaml: no TrainingJob in the file" "$tmp/out" || fail "no empty-file line: $(cat "$tmp/out")"

expect_rc 0 "$tessera" crd
cmp -s "$tmp/out" "$src/manifests/crd/trainingjobs.tessera.dev.yaml" ||
  fail "tessera crd differs from manifests/crd/trainingjobs.tessera.dev.yaml"
echo "ok"
