#!/usr/bin/env bash
# `tessera plan`: the text and JSON plans of the examples agree with the job (ranks, workers,
# mesh, stages, batch split) and with each other; a job the trainer cannot build, an invalid
# field and a bad --output are one line each and exit 2, like `tessera run`; and `tessera run`
# refuses, before starting anything, ranks that together need more memory than any machine has.
source "$(dirname "$0")/lib.sh"

HYBRID=manifests/examples/cpu-hybrid.yaml  # 2 workers x 2 processes: pipeline 2 x tensor 2

"$TESSERA" plan "$HYBRID" >"$WORK/plan.txt" || fail "tessera plan exited $?"
cat "$WORK/plan.txt"
grep -q "^cpu-hybrid: 4 rank(s) = 2 worker(s) x 2 process(es); mesh data 1 x pipeline 2 x tensor 2$" \
  "$WORK/plan.txt" || fail "no ranks line"
grep -q "ideal bubble (p-1)/(m+p-1) = 0.200" "$WORK/plan.txt" || fail "no ideal bubble (p=2, m=4)"
grep -Eq "^ +1  2 \(0,1,0\)  3 \(0,1,1\)$" "$WORK/plan.txt" || fail "worker 1 does not hold ranks 2 and 3"

"$TESSERA" plan "$HYBRID" -o json >"$WORK/plan.json" || fail "tessera plan -o json exited $?"
p=$WORK/plan.json
[[ $(json "$p" 'j["ranks"]') == 4 ]] || fail "ranks"
[[ $(json "$p" '[(r["worker"], r["localRank"]) for r in j["placement"]]') == \
  "[(0, 0), (0, 1), (1, 0), (1, 1)]" ]] || fail "placement: $(json "$p" 'j["placement"]')"
[[ $(json "$p" '[(r["pipeline"], r["tensor"]) for r in j["placement"]]') == \
  "[(0, 0), (0, 1), (1, 0), (1, 1)]" ]] || fail "tensor is not the innermost dimension"
t='j["trainer"]'
[[ $(json "$p" "$t[\"batch\"][\"microBatch\"] * $t[\"batch\"][\"microBatches\"]") == 16 ]] ||
  fail "micro-batches do not make up the global batch of 16"
# The stages cover the 4 blocks in order; 1F1B keeps 2 micro-batches alive on the first stage.
[[ $(json "$p" "[(s[\"firstLayer\"], s[\"endLayer\"], s[\"inFlight\"]) for s in $t[\"stages\"]]") == \
  "[(0, 2, 2), (2, 4, 1)]" ]] || fail "stages: $(json "$p" "$t['stages']")"
json "$p" "abs(sum(s['costShare'] for s in $t['stages']) - 1) < 1e-9" | grep -qx True ||
  fail "the stages' shares of the work do not add up to 1"
json "$p" "$t['memory']['allRanks'] == 2 * sum(s['memory']['total'] for s in $t['stages'])" |
  grep -qx True || fail "allRanks is not every rank's memory (2 tensor ranks a stage)"
json "$p" "all(s['memory']['total'] == sum(s['memory'][k] for k in ('parameters', 'gradients', 'optimizer', 'activations', 'data')) for s in $t['stages'])" |
  grep -qx True || fail "a stage's total is not the sum of its parts"
# The corpus (a text file here) is held by every rank as 16-bit ids: 2 bytes a byte.
size=$(stat -c %s data/tinyshakespeare.txt)
[[ $(json "$p" "$t['data']['bytes']") == "$size" ]] || fail "data.bytes is not the corpus size"
json "$p" "all(s['memory']['data'] == 2 * $size for s in $t['stages'])" | grep -qx True ||
  fail "a rank's corpus ids are not 2 bytes a byte"
grep -q "held as .* of ids by every rank" "$WORK/plan.txt" || fail "no data line"
"$TESSERA" plan "$HYBRID" -o json --set spec.trainer.data.path=/no/such/corpus >"$WORK/nodata.json"
[[ $(json "$WORK/nodata.json" "$t['data']['bytes']") == None ]] || fail "a missing corpus has a size"
[[ $(json "$WORK/nodata.json" "$t['stages'][0]['memory']['data']") == 0 ]] ||
  fail "a missing corpus is counted"
# A worker pod holds its ranks' stages: worker 0 the two tensor ranks of stage 0.
json "$p" "$t['memory']['largestWorker'] == 2 * max(s['memory']['total'] for s in $t['stages'])" |
  grep -qx True || fail "largestWorker is not the larger pod's two ranks"
[[ $(json "$p" "$t['memory']['podLimit']") == None ]] || fail "a pod limit where none is set"
grep -q "the worker container sets no memory limit" "$WORK/plan.txt" || fail "no advice without a limit"
template() {  # template MEMORY_LIMIT: --set a worker container with that limit
  echo "spec.template={spec: {containers: [{name: worker, image: x, resources: {limits: {memory: $1}}}]}}"
}
"$TESSERA" plan "$HYBRID" --set "$(template 8Mi)" >"$WORK/low.txt"
grep -q "its memory limit 8Mi does NOT" "$WORK/low.txt" || fail "a too low limit: $(cat "$WORK/low.txt")"
"$TESSERA" plan "$HYBRID" -o json --set "$(template 1.5Gi)" >"$WORK/limit.json"
[[ $(json "$WORK/limit.json" "$t['memory']['podLimit']") == 1610612736 ]] || fail "podLimit of 1.5Gi"
# GPipe keeps all 4 micro-batches alive on every stage: more activations on the first.
"$TESSERA" plan "$HYBRID" -o json --set spec.parallelism.schedule=GPipe >"$WORK/gpipe.json"
json "$WORK/gpipe.json" "[s['inFlight'] for s in $t['stages']]" | grep -qx "\[4, 4\]" ||
  fail "GPipe in flight: $(json "$WORK/gpipe.json" "[s['inFlight'] for s in $t['stages']]")"

# Standard input, and a bring-your-own command (no trainer to plan).
"$TESSERA" plan - -o json <manifests/examples/byo-torchrun.yaml >"$WORK/byo.json" ||
  fail "tessera plan - exited $?"
[[ $(json "$WORK/byo.json" 'j["trainer"]') == None ]] || fail "a BYO job has a trainer plan"
json "$WORK/byo.json" 'j["command"][0]' | grep -qx python3 || fail "no command in the BYO plan"

# Errors: one line, exit 2.
expect_error() {  # expect_error PATTERN ARGS...
  local pattern=$1 rc=0
  shift
  "$TESSERA" plan "$@" >"$WORK/out" 2>"$WORK/err" || rc=$?
  [[ $rc == 2 ]] || fail "tessera plan $*: exit $rc, want 2"
  [[ $(wc -l <"$WORK/err") == 1 ]] || fail "tessera plan $*: not one line: $(cat "$WORK/err")"
  grep -q -- "$pattern" "$WORK/err" || fail "tessera plan $*: $(cat "$WORK/err")"
  [[ ! -s $WORK/out ]] || fail "tessera plan $*: printed a plan anyway"
}
expect_error "precision: bf16 (the GPU model) runs data parallelism only" \
  manifests/examples/hybrid-3d.yaml --set spec.gpusPerWorker=8 --set spec.trainer.precision=bf16 \
  --set spec.parallelism.zeroStage=0
expect_error "spec.trainer.batch.global: must be divisible by data x microBatches" "$HYBRID" \
  --set spec.parallelism.microBatches=3
expect_error "--output yaml: use text or json" "$HYBRID" -o yaml
expect_error "no-such.yaml" "$WORK/no-such.yaml"
expect_error "resources.limits.memory: '8GB' is not a quantity" "$HYBRID" --set "$(template 8GB)"

# tessera run: two ranks whose attention probabilities alone are terabytes are refused before
# any rank starts, naming the fields and the figures; no run directory is left behind.
rc=0
"$TESSERA" run "$TINY" --workdir "$WORK/big" --set spec.trainer.model.seqLen=65536 \
  2>"$WORK/err" || rc=$?
cat "$WORK/err"
[[ $rc == 2 ]] || fail "an oversized job: exit $rc, want 2"
grep -q "spec.trainer.batch.global, spec.trainer.model.seqLen: the 2 ranks need .* TiB together" \
  "$WORK/err" || fail "the oversized job's message"
[[ ! -e $WORK/big ]] || fail "the refused run created its directory"
assert_no_survivors "$WORK/big"
echo PASS
