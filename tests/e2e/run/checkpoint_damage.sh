#!/usr/bin/env bash
# Checkpoints as a failing machine or a killed runner leave them, with real ranks: whatever
# happens, the good checkpoints survive, the messages say what to do, and the run that follows
# the advice ends with exactly the final loss of an uninterrupted run.
#  - a second run without --resume says it removes the previous run's checkpoints;
#  - the newest checkpoint damaged (a truncated shard): refused, with the advice to move it aside
#    (not to start afresh, which deletes the older good one); moved aside, --resume continues
#    from the older one;
#  - an entry named like a checkpoint that is a symbolic link loop: not a checkpoint (it once
#    aborted every rank and tessera run itself, exit 134, no summary);
#  - tessera run killed by SIGKILL while its rank is still to checkpoint: the run directory stays
#    locked until that rank has exited (once a second run started at once, with or without
#    --resume, beside it), then --resume continues from the rank's last checkpoint.
source "$(dirname "$0")/lib.sh"

ARGS=(run "$TINY" "${SMALL[@]}" --set spec.trainer.schedule.steps=200
      --set spec.trainer.checkpoint.everySteps=50 --set spec.trainer.checkpoint.keep=10
      --set spec.runPolicy.backoffLimit=0)

"$TESSERA" "${ARGS[@]}" --workdir "$WORK/straight" --summary-json "$WORK/straight.json" \
  >"$WORK/straight.txt" 2>&1 || { cat "$WORK/straight.txt"; fail "the uninterrupted run failed"; }
want=$(json "$WORK/straight.json" 'repr(j["final_train_loss"])')

# Run again without --resume: a fresh start that says it removed the previous checkpoints.
cp -a "$WORK/straight" "$WORK/again"
"$TESSERA" "${ARGS[@]}" --workdir "$WORK/again" >"$WORK/again.txt" 2>&1 ||
  { cat "$WORK/again.txt"; fail "the second fresh run failed"; }
grep -q "^tessera run: $WORK/again/checkpoints: removed the previous run's 4 checkpoint(s), the newest step-200 (--resume continues from them instead)$" \
  "$WORK/again.txt" || { cat "$WORK/again.txt"; fail "a fresh start did not say it removed the checkpoints"; }
grep -q "resumed from" "$WORK/again/logs/worker-0-rank-0.log" && fail "a fresh start resumed"
rm -rf "$WORK/again"

# A run directory as the uninterrupted run left it after step 100: step-50 and step-100.
after_step_100() {
  cp -a "$WORK/straight" "$WORK/$1"
  rm -rf "$WORK/$1/checkpoints/step-150" "$WORK/$1/checkpoints/step-200"
}

# ---- The newest checkpoint damaged.
after_step_100 damaged
ckpt=$WORK/damaged/checkpoints
truncate -s 1000 "$ckpt/step-100/rank-00000.bin"
rc=0
"$TESSERA" "${ARGS[@]}" --workdir "$WORK/damaged" --resume >"$WORK/damaged.txt" 2>&1 || rc=$?
cat "$WORK/damaged.txt"
[[ $rc == 1 ]] || fail "resume from a damaged checkpoint: exit code $rc, want 1"
grep -q "exited with code 3" "$WORK/damaged.txt" || fail "the rank did not refuse the checkpoint"
grep -q "tessera-worker: $ckpt/step-100/rank-00000.bin: 1000 bytes, meta.json records [0-9]*; move $ckpt/step-100 aside to resume from an older one" \
  "$WORK/damaged.txt" || fail "the rank's line does not name the file and say to move it aside"
grep -q "^tessera run: exit code 3: .* a corrupt one: move the step directory a rank's line names aside and run with --resume again" \
  "$WORK/damaged.txt" || fail "the runner does not advise moving the damaged checkpoint aside"
[[ -d $ckpt/step-50 && -d $ckpt/step-100 ]] || fail "a refused resume deleted a checkpoint"
mv "$ckpt/step-100" "$WORK/damaged/step-100.bad"
"$TESSERA" "${ARGS[@]}" --workdir "$WORK/damaged" --resume --summary-json "$WORK/damaged.json" \
  >"$WORK/damaged2.txt" 2>&1 || { cat "$WORK/damaged2.txt"; fail "resume from step-50 failed"; }
grep -q "resumed from $ckpt/step-50 " "$WORK/damaged/logs/worker-0-rank-0.log" ||
  fail "did not resume from step-50"
[[ $(json "$WORK/damaged.json" 'repr(j["final_train_loss"])') == "$want" ]] ||
  fail "resumed from step-50: final loss differs from the uninterrupted run's $want"
assert_no_survivors "$WORK/damaged"

# ---- A symbolic link loop named like a newer checkpoint.
after_step_100 loop
ln -s step-300 "$WORK/loop/checkpoints/step-300"
rc=0
"$TESSERA" "${ARGS[@]}" --workdir "$WORK/loop" --resume --summary-json "$WORK/loop.json" \
  >"$WORK/loop.txt" 2>&1 || rc=$?
[[ $rc == 0 ]] || { cat "$WORK/loop.txt"; fail "a symbolic link loop in checkpoints/: exit code $rc"; }
grep -q "resumed from $WORK/loop/checkpoints/step-100 " "$WORK/loop/logs/worker-0-rank-0.log" ||
  fail "did not resume from step-100"
[[ $(json "$WORK/loop.json" 'repr(j["final_train_loss"])') == "$want" ]] ||
  fail "final loss differs from the uninterrupted run's $want"
[[ -L $WORK/loop/checkpoints/step-300 ]] || fail "the link was removed"
assert_no_survivors "$WORK/loop"

# ---- tessera run killed by SIGKILL while its rank is in a step it will finish and checkpoint
# (PR_SET_PDEATHSIG). Steps of about half a second, and the rank is stopped (SIGSTOP) as soon as
# the runner is dead (not before: a stopped process in a newly orphaned process group gets
# SIGHUP), so that the second runs start while it is still to write its checkpoint.
SLOW=(run "$TINY" "${SMALL[@]}" --set spec.trainer.batch.global=512
      --set spec.trainer.schedule.steps=20 --set spec.trainer.schedule.warmupSteps=2
      --set spec.trainer.checkpoint.everySteps=10 --set spec.runPolicy.backoffLimit=0)
"$TESSERA" "${SLOW[@]}" --workdir "$WORK/orphan" >"$WORK/orphan.txt" 2>&1 &
runner=$!
wait_for 90 "the rank to pass step 2" step_at_least "$WORK/orphan" 2
rank=$(json "$WORK/orphan/status.json" '[r["pid"] for r in j["ranks"] if r["rank"] == 0][0]')
kill -9 "$runner"
wait "$runner" || true  # dead and reaped: its rank's process group is orphaned already
kill -STOP "$rank" 2>/dev/null || true
trap 'kill -CONT "$rank" 2>/dev/null || true' EXIT  # a failing check leaves nothing stopped
state_of() { awk '{print $3}' "/proc/$1/stat" 2>/dev/null || echo gone; }
settled() { [[ $(state_of "$1") =~ ^(T|t|Z|gone)$ ]]; }
wait_for 10 "the rank to stop or exit" settled "$rank"
state=$(state_of "$rank")
if [[ $state != T ]] || grep -q "stopped by signal 15" "$WORK/orphan/logs/worker-0-rank-0.log"; then
  echo "SKIP: the rank finished its step before it could be stopped (state '$state')"
  exit 77
fi
for resume in --resume ""; do
  rc=0
  "$TESSERA" "${SLOW[@]}" --workdir "$WORK/orphan" $resume >"$WORK/second.txt" 2>&1 || rc=$?
  cat "$WORK/second.txt"
  [[ $rc == 2 ]] || fail "a run beside the killed run's rank ($resume): exit code $rc, want 2"
  grep -q "another tessera run is using this run directory" "$WORK/second.txt" ||
    fail "the refusal does not say the directory is in use"
done
kill -CONT "$rank"  # it finishes the step, checkpoints and stops
gone() { [[ $(state_of "$1") =~ ^(Z|gone)$ ]]; }
wait_for 60 "the orphaned rank to exit" gone "$rank"
stopped_at=$(grep -o "stopped by signal 15 at step [0-9]*" "$WORK/orphan/logs/worker-0-rank-0.log" |
  grep -o "[0-9]*$" || true)
[[ -n $stopped_at ]] || fail "the orphaned rank did not checkpoint and stop"
"$TESSERA" "${SLOW[@]}" --workdir "$WORK/orphan" --resume --summary-json "$WORK/orphan.json" \
  >"$WORK/third.txt" 2>&1 || { cat "$WORK/third.txt"; fail "--resume after the rank exited failed"; }
grep -q "resumed from $WORK/orphan/checkpoints/step-$stopped_at " \
  "$WORK/orphan/logs/worker-0-rank-0.log" || fail "did not resume from the rank's step-$stopped_at"
[[ $(json "$WORK/orphan.json" 'j["steps"]') == 20 && $(json "$WORK/orphan.json" 'j["restarts"]') == 0 ]] ||
  fail "the resumed run did not finish its 20 steps without a restart"
assert_no_survivors "$WORK/orphan"
echo PASS
