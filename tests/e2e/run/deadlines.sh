#!/usr/bin/env bash
# Deadlines: activeDeadlineSeconds fails a job that runs too long (exit 1, DeadlineExceeded);
# progressDeadlineSeconds restarts the gang when rank 0's step stops changing (a stopped rank
# stands in for a hung collective), and the restarted gang finishes.
source "$(dirname "$0")/lib.sh"

cat >"$WORK/sleep.yaml" <<'YAML'
apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata: {name: sleeper}
spec:
  workers: 2
  template:
    spec:
      containers:
      - name: worker
        command: [sleep, "300"]
  runPolicy: {activeDeadlineSeconds: 2}
YAML
rc=0
"$TESSERA" run "$WORK/sleep.yaml" --workdir "$WORK/active" --grace-period 1 \
  --summary-json "$WORK/active.json" >"$WORK/active.txt" 2>&1 || rc=$?
cat "$WORK/active.txt"
[[ $rc == 1 ]] || fail "activeDeadlineSeconds: exit code $rc, want 1"
assert_no_survivors "$WORK/active"
[[ $(json "$WORK/active.json" 'j["reason"]') == DeadlineExceeded ]] || fail "reason is not DeadlineExceeded"

ARGS=(run "$TINY" "${SMALL[@]}" --set spec.trainer.schedule.steps=400
      --set spec.trainer.checkpoint.everySteps=5 --set spec.runPolicy.progressDeadlineSeconds=8
      --grace-period 1 --workdir "$WORK/progress" --summary-json "$WORK/progress.json")
"$TESSERA" "${ARGS[@]}" >"$WORK/progress.txt" 2>&1 &
runner=$!
wait_for 90 "the rank to pass step 5" step_at_least "$WORK/progress" 5
# The progress deadline runs from the runner's first report of a step, so stop the rank only
# once the runner has seen one (its first "step N/M" line); on an idle machine the rank can pass
# step 5 before the runner's first one-second poll. 400 steps keep the run going for seconds
# even there (40 finished in about one second).
wait_for 90 "the runner to report a step" grep -q "^step [0-9]*/" "$WORK/progress.txt"
pid=$(json "$WORK/progress/status.json" '[r["pid"] for r in j["ranks"] if r["rank"] == 0][0]')
kill -STOP "$pid"
echo "stopped rank 0 (pid $pid)"
rc=0
wait "$runner" || rc=$?
cat "$WORK/progress.txt"
[[ $rc == 0 ]] || fail "progress deadline: exit code $rc, want 0 after a restart"
assert_no_survivors "$WORK/progress"
grep -q "ProgressDeadlineExceeded: no new training step for 8s" "$WORK/progress.txt" ||
  fail "no ProgressDeadlineExceeded restart"
[[ $(json "$WORK/progress.json" 'j["restarts"]') == 1 ]] || fail "want one restart"
[[ $(json "$WORK/progress.json" 'j["steps"]') == 400 ]] || fail "the restarted gang did not finish"
echo PASS
