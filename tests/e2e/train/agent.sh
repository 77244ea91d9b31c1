#!/usr/bin/env bash
# `tessera-worker agent`, the pod's entry point: it starts TESSERA_PROCS_PER_NODE ranks with
# RANK/LOCAL_RANK, they train data-parallel to the end (exit 0); and when one rank fails the
# agent stops the other and exits with the failed rank's code, leaving no process behind.
set -euo pipefail
WORKER=${1:?usage: agent.sh TESSERA_WORKER SOURCE_DIR SCRATCH}
SRC=${2:?}
WORK=${3:?}
rm -rf "$WORK" && mkdir -p "$WORK"
fail() { echo "FAIL: $*" >&2; exit 1; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$WORK/t.yaml" <<YAML
model: {layers: 2, dModel: 32, heads: 2, seqLen: 32, vocab: 256}
data: {path: $SRC/data/tinyshakespeare.txt}
batch: {global: 8, microBatches: 2}
schedule: {steps: 30, warmupSteps: 2, evalEvery: 0, evalBatches: 1}
checkpoint: {dir: $WORK/ckpt, everySteps: 0, keep: 1}
metrics: {port: -1}
YAML
export TESSERA_RDZV_ENDPOINT=127.0.0.1:$port TESSERA_RDZV_TOKEN=agent-e2e TESSERA_COMM_HOST=127.0.0.1
export WORLD_SIZE=2 TESSERA_NODE_RANK=0 TESSERA_PROCS_PER_NODE=2 TESSERA_MESH=data=2,pipeline=1,tensor=1

: >"$WORK/termination-log"  # the kubelet's empty terminationMessagePath file
rc=0
TESSERA_TERMINATION_MESSAGE_PATH=$WORK/termination-log \
  "$WORKER" agent --config "$WORK/t.yaml" --threads 1 >"$WORK/train.txt" 2>&1 || rc=$?
cat "$WORK/train.txt"
[[ $rc == 0 ]] || fail "the agent exited $rc"
[[ $(grep -c "started rank" "$WORK/train.txt") == 2 ]] || fail "want two ranks started"
[[ $(grep -c "done: 30 steps" "$WORK/train.txt") == 2 ]] || fail "both ranks must finish"
[[ -f $WORK/ckpt/step-30/meta.json ]] || fail "no final checkpoint"
grep -q '"worldSize": 2' "$WORK/ckpt/step-30/meta.json" || fail "the checkpoint is not 2-rank"
# The pod's termination message is rank 0's final progress alone (no failure): the controller
# reads it into status.progress.
progress=$(sed -n 's/^final progress: //p' "$WORK/termination-log")
[[ $progress == *'"step":30,'* && $progress == *'"totalSteps":30,'* ]] ||
  fail "termination message: '$(cat "$WORK/termination-log")'"
[[ $(wc -l <"$WORK/termination-log") == 0 ]] || fail "more than the progress line"
# Rank 0's store sees every rank's connections close, its own too, and ends without waiting.
! grep -q "still connected" "$WORK/train.txt" || fail "the store waited for connected ranks"

marker="agent-e2e-$$-$RANDOM"
rc=0
: >"$WORK/termination-log"  # the kubelet's empty terminationMessagePath file
AGENT_E2E_MARKER=$marker TESSERA_TERMINATION_MESSAGE_PATH=$WORK/termination-log \
  "$WORKER" agent --grace 5 -- sh -c \
  'if [ "$LOCAL_RANK" = 1 ]; then sleep 0.5; exit 7; fi; exec sleep 600' \
  >"$WORK/fail.txt" 2>&1 || rc=$?
cat "$WORK/fail.txt"
[[ $rc == 7 ]] || fail "the agent exited $rc, want rank 1's code 7"
grep -q "rank 1 (pid [0-9]*) exited with code 7; stopping the other ranks" "$WORK/fail.txt" ||
  fail "the failure was not reported"
# The pod's termination message says which rank failed (the command said nothing itself).
[[ $(cat "$WORK/termination-log") == "rank 1 exited with code 7" ]] ||
  fail "termination message: '$(cat "$WORK/termination-log")'"
# A rank that states its reason keeps it there: a configuration the trainer refuses.
: >"$WORK/termination-log"
rc=0
TESSERA_TERMINATION_MESSAGE_PATH=$WORK/termination-log "$WORKER" agent --config "$WORK/t.yaml" \
  --set model.seqLen=65536 --threads 1 >"$WORK/bad.txt" 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "a refused configuration: the agent exited $rc, want 2"
grep -q "^batch.global, model.seqLen: this rank needs at least" "$WORK/termination-log" ||
  fail "termination message: '$(cat "$WORK/termination-log")'"
# A pod whose ranks fit one by one but not together: the agent refuses it before starting any
# (each rank checks only its own share). Sized from this machine: a rank of about 2 GiB (one
# sequence of 8192 tokens), and enough of them for 1.3 times the memory available.
cat >"$WORK/pod.yaml" <<YAML
apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata: {name: pod-memory}
spec:
  workers: 1
  procsPerWorker: 2
  parallelism: {data: 2}
  trainer:
    model: {layers: 2, dModel: 32, heads: 4, seqLen: 8192, vocab: 256}
    data: {path: $SRC/data/tinyshakespeare.txt}
    batch: {global: 2}
    schedule: {steps: 2}
YAML
read -r rank_bytes available < <("$(dirname "$WORKER")/tessera" plan "$WORK/pod.yaml" -o json |
  python3 -c 'import json, sys; m = json.load(sys.stdin)["trainer"]["memory"]; print(m["largestRank"], m["available"] or 0)')
ranks=$(python3 -c "import math; print(math.ceil(1.3 * $available / $rank_bytes))")
if (( available == 0 || ranks > 64 || 2 * rank_bytes > available )); then
  echo "skipping the pod memory case: ${available} bytes available, ranks of ${rank_bytes}"
else
  : >"$WORK/termination-log"
  rc=0
  TESSERA_TERMINATION_MESSAGE_PATH=$WORK/termination-log WORLD_SIZE=$ranks \
    TESSERA_PROCS_PER_NODE=$ranks TESSERA_MESH=data=$ranks,pipeline=1,tensor=1 \
    "$WORKER" agent --config "$WORK/pod.yaml" --set batch.global=$ranks --threads 1 \
    >"$WORK/pod.txt" 2>&1 || rc=$?
  cat "$WORK/pod.txt"
  [[ $rc == 2 ]] || fail "a pod too big for the memory: the agent exited $rc, want 2"
  grep -q "^batch.global, model.seqLen: the $ranks ranks of this pod (ranks 0 to $((ranks - 1))) need" \
    "$WORK/termination-log" || fail "termination message: '$(cat "$WORK/termination-log")'"
  ! grep -q "started rank" "$WORK/pod.txt" || fail "ranks were started"
fi
left=$(grep -l "AGENT_E2E_MARKER=$marker" /proc/[0-9]*/environ 2>/dev/null || true)
[[ -z $left ]] || fail "processes survived the agent: $left"
echo PASS
