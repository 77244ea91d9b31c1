#!/usr/bin/env bash
# Ctrl-C: the rank checkpoints and stops, the run exits 130, status.json says Interrupted,
# nothing is left, and --resume continues from that checkpoint to the end; --resume after a
# configuration change says what to do locally. Then the errors that stop a run before it
# starts.
source "$(dirname "$0")/lib.sh"

ARGS=(run "$TINY" "${SMALL[@]}" --set spec.trainer.schedule.steps=200
      --set spec.trainer.checkpoint.everySteps=1000 --workdir "$WORK/run")
"$TESSERA" "${ARGS[@]}" --summary-json "$WORK/int.json" >"$WORK/int.txt" 2>&1 &
runner=$!
wait_for 90 "the rank to pass step 10" step_at_least "$WORK/run" 10
kill -INT "$runner"
rc=0
wait "$runner" || rc=$?
cat "$WORK/int.txt"
[[ $rc == 130 ]] || fail "exit code $rc after SIGINT, want 130"
assert_no_survivors "$WORK/run"
# status.json ends as the summary does, not Running.
[[ $(json "$WORK/run/status.json" 'j["phase"]') == Interrupted ]] ||
  fail "status.json phase $(json "$WORK/run/status.json" 'j["phase"]') after SIGINT, want Interrupted"
[[ $(json "$WORK/int.json" 'j["phase"]') == Interrupted ]] || fail "the summary is not Interrupted"
# everySteps is 1000: a checkpoint below step 200 can only come from the stop request.
ckpt=$(json "$WORK/int.json" 'j["checkpoint"]')
[[ $ckpt =~ step-([0-9]+)$ ]] || fail "no checkpoint written on SIGINT ($ckpt)"
step=${BASH_REMATCH[1]}
((step >= 10 && step < 200)) || fail "checkpoint at step $step, want 10..199"

"$TESSERA" "${ARGS[@]}" --resume --summary-json "$WORK/resumed.json" >"$WORK/resumed.txt" 2>&1 ||
  { cat "$WORK/resumed.txt"; fail "the resumed run failed"; }
grep -q "resumed from .*step-$step" "$WORK/run/logs/worker-0-rank-0.log" ||
  fail "--resume did not continue from step-$step"
[[ $(json "$WORK/resumed.json" 'j["steps"]') == 200 ]] || fail "the resumed run did not finish"
assert_no_survivors "$WORK/run"
[[ $(json "$WORK/run/status.json" 'j["phase"]') == Succeeded ]] || fail "status.json is not Succeeded"

# --resume with another configuration: the rank refuses the checkpoint (exit 3) with the
# trainer's advice about checkpoint.dir, which tessera run replaces; the runner says what works
# here, naming its checkpoint directory.
rc=0
"$TESSERA" "${ARGS[@]}" --resume --set spec.trainer.optimizer.lr=0.002 \
  --set spec.runPolicy.backoffLimit=0 >"$WORK/changed.txt" 2>&1 || rc=$?
cat "$WORK/changed.txt"
[[ $rc == 1 ]] || fail "resume after a configuration change: exit code $rc, want 1"
grep -q "exited with code 3" "$WORK/changed.txt" || fail "the rank did not refuse the checkpoint"
[[ $(grep -c "^tessera run: exit code 3: a checkpoint in $WORK/run/checkpoints is corrupt or from another job or configuration; .* run without --resume .* or pass another --workdir" "$WORK/changed.txt") == 1 ]] ||
  fail "no single line of local advice naming $WORK/run/checkpoints"
assert_no_survivors "$WORK/run"

# An invalid file: the `tessera validate` lines, exit 2, nothing started.
rc=0
"$TESSERA" run "$TINY" --set spec.parallelism.tensor=3 --workdir "$WORK/bad" \
  >"$WORK/bad.txt" 2>&1 || rc=$?
cat "$WORK/bad.txt"
[[ $rc == 2 ]] || fail "invalid job: exit code $rc, want 2"
"$TESSERA" validate <("$PY" - <<'PYEOF'
import sys
text = open("manifests/examples/cpu-tiny.yaml").read()
print(text.replace("data: 2\n", "data: 2\n    tensor: 3\n", 1))
PYEOF
) | sed 's/^[^:]*: //' >"$WORK/validate.txt" || true
sed 's/^[^:]*: //' "$WORK/bad.txt" >"$WORK/bad-stripped.txt"
[[ -s $WORK/validate.txt ]] || fail "tessera validate found nothing to compare with"
diff "$WORK/validate.txt" "$WORK/bad-stripped.txt" || fail "messages differ from tessera validate"
[[ ! -e $WORK/bad ]] || fail "an invalid job created its run directory"

# The two workers as pipeline stages of the built-in trainer run to the end.
"$TESSERA" run "$TINY" "${CHEAP[@]}" --set spec.parallelism.pipeline=2 \
  --set spec.parallelism.data=1 --set spec.parallelism.microBatches=4 \
  --set spec.trainer.schedule.steps=20 --set spec.trainer.schedule.warmupSteps=5 \
  --workdir "$WORK/pipeline" \
  --summary-json "$WORK/pipeline.json" >"$WORK/pipeline.txt" 2>&1 ||
  { cat "$WORK/pipeline.txt"; fail "the pipeline-parallel run failed"; }
[[ $(json "$WORK/pipeline.json" 'j["steps"]') == 20 ]] || fail "the pipeline run did not finish"
grep -q "mesh data=1,pipeline=2,tensor=1: rank 1 is data 0 pipeline 1" \
  "$WORK/pipeline/logs/worker-1-rank-1.log" || fail "rank 1 is not the second stage"

# More stages than blocks: refused before anything starts, naming the field.
rc=0
"$TESSERA" run "$TINY" --set spec.parallelism.pipeline=2 --set spec.parallelism.data=1 \
  --set spec.trainer.model.layers=1 --workdir "$WORK/stages" >"$WORK/stages.txt" 2>&1 || rc=$?
cat "$WORK/stages.txt"
[[ $rc == 2 ]] || fail "more stages than blocks: exit code $rc, want 2"
[[ $(wc -l <"$WORK/stages.txt") == 1 ]] || fail "want one line"
grep -q "spec.parallelism.pipeline: pipeline stages must not outnumber" "$WORK/stages.txt" ||
  fail "the field is not named"
[[ ! -e $WORK/stages ]] || fail "a refused job created its run directory"

# bf16 is the GPU model: more ranks than this machine has GPUs is refused before anything
# starts (this machine may have none).
gpus=$(ls /dev | grep -cE '^nvidia[0-9]+$' || true)
rc=0
"$TESSERA" run "$TINY" --set spec.gpusPerWorker=1 --set spec.trainer.precision=bf16 \
  --set spec.workers=$((gpus + 1)) --set spec.parallelism.data=$((gpus + 1)) \
  --workdir "$WORK/bf16" >"$WORK/bf16.txt" 2>&1 || rc=$?
cat "$WORK/bf16.txt"
[[ $rc == 2 ]] || fail "bf16 on too few GPUs: exit code $rc, want 2"
grep -q "spec.trainer.precision: bf16 needs a GPU per rank: $((gpus + 1)) rank(s), and this machine has $gpus " \
  "$WORK/bf16.txt" || fail "the field and the GPU count are not named"
[[ ! -e $WORK/bf16 ]] || fail "a refused job created its run directory"

# A bring-your-own command that is not there is the job's mistake, said once before any rank
# starts (not exit code 127 from every rank and a gang restart after each).
cat >"$WORK/byo-missing.yaml" <<'YAML'
apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata: {name: byo-missing}
spec:
  workers: 2
  template:
    spec:
      containers:
      - {name: sidecar, image: x}
      - {name: worker, image: x, command: [./no-such-trainer.sh, --epochs, "1"]}
YAML
rc=0
"$TESSERA" run "$WORK/byo-missing.yaml" --workdir "$WORK/byo-missing" >"$WORK/byo.txt" 2>&1 || rc=$?
cat "$WORK/byo.txt"
[[ $rc == 2 ]] || fail "missing command: exit code $rc, want 2"
[[ $(wc -l <"$WORK/byo.txt") == 1 ]] || fail "want one line"
grep -q "spec.template.spec.containers\[1\].command\[0\]: ./no-such-trainer.sh: no such file" \
  "$WORK/byo.txt" || fail "the field and the command are not named"
[[ ! -e $WORK/byo-missing ]] || fail "a refused job created its run directory"

# A summary that could not be written is said before training, not after it.
rc=0
"$TESSERA" run "$TINY" --summary-json "$WORK/no-such-dir/summary.json" --workdir "$WORK/summary" \
  >"$WORK/summary.txt" 2>&1 || rc=$?
cat "$WORK/summary.txt"
[[ $rc == 2 ]] || fail "unwritable summary: exit code $rc, want 2"
grep -q "^tessera run: --summary-json $WORK/no-such-dir/summary.json: the directory $WORK/no-such-dir does not exist" \
  "$WORK/summary.txt" || fail "the option and directory are not named"
[[ ! -e $WORK/summary ]] || fail "a refused job created its run directory"

# A tessera-worker that is not there: the line names where the path came from.
rc=0
TESSERA_WORKER_BINARY=$WORK/no-such-worker "$TESSERA" run "$TINY" --workdir "$WORK/noworker" \
  >"$WORK/noworker.txt" 2>&1 || rc=$?
cat "$WORK/noworker.txt"
[[ $rc == 2 && $(wc -l <"$WORK/noworker.txt") == 1 ]] || fail "missing worker: exit $rc, want 2 and one line"
grep -q "^tessera run: $WORK/no-such-worker (from TESSERA_WORKER_BINARY): tessera-worker not found" \
  "$WORK/noworker.txt" || fail "the variable is not named"
"$TESSERA" run --help | grep -q -- '--worker-binary.*default: \$TESSERA_WORKER_BINARY, else' ||
  fail "tessera run --help does not name TESSERA_WORKER_BINARY"

# The pod's agent runs the built-in trainer (--config) or your own command, not both: giving
# both is refused in one line instead of silently ignoring --config.
rc=0
"$(dirname "$TESSERA")/tessera-worker" agent --config "$WORK/t.yaml" -- sh -c 'exit 0' \
  >"$WORK/agent.txt" 2>&1 || rc=$?
cat "$WORK/agent.txt"
[[ $rc == 2 && $(wc -l <"$WORK/agent.txt") == 1 ]] || fail "agent --config with a command: exit $rc, want 2 and one line"
grep -q -- "--config $WORK/t.yaml and a command after -- (sh) both given; choose one" \
  "$WORK/agent.txt" || fail "the agent's line does not name both"

rc=0
"$TESSERA" run "$WORK/does-not-exist.yaml" >"$WORK/missing.txt" 2>&1 || rc=$?
[[ $rc == 2 ]] && grep -q "does-not-exist.yaml: cannot read" "$WORK/missing.txt" ||
  fail "missing file: exit $rc, $(cat "$WORK/missing.txt")"
# A bad command line ends as other bad input does: exit 2, the parser's line naming the option.
for args in "--metrics-port 0" "--grace-period -1" "--no-such-option" ""; do
  rc=0
  # shellcheck disable=SC2086 # the options are split on purpose
  "$TESSERA" run $args ${args:+"$TINY"} >"$WORK/usage.txt" 2>&1 || rc=$?
  cat "$WORK/usage.txt"
  [[ $rc == 2 ]] || fail "tessera run $args: exit code $rc, want 2"
  want=${args%% *}
  [[ $(wc -l <"$WORK/usage.txt") == 1 ]] || fail "tessera run $args: more than one line"
  grep -q -- "^tessera run: .*${want:-FILE is required}.* (see tessera run --help)$" "$WORK/usage.txt" ||
    fail "tessera run $args: no line naming ${want:-FILE} and tessera run --help"
done
"$TESSERA" run --help >/dev/null || fail "tessera run --help did not exit 0"

echo PASS
