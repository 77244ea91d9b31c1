#!/usr/bin/env bash
# `kill -9` of rank 1 of two data-parallel ranks mid-run: rank 0 fails too (exit 6, the peer
# lost), the runner blames the killed rank's worker (not the consequence, however close the
# exits), restarts the gang, the new attempt resumes from the last checkpoint, and the run ends
# with exactly the final loss of an uninterrupted run.
source "$(dirname "$0")/lib.sh"

# 1000 steps (so the run cannot end between the poll and the kill), a checkpoint every 20: the
# kill lands after step 30, so attempt 1 resumes from a checkpoint at 20 or later.
ARGS=(run "$TINY" "${SMALL_DP[@]}" --set spec.trainer.schedule.steps=1000
      --set spec.trainer.checkpoint.everySteps=20)

"$TESSERA" "${ARGS[@]}" --workdir "$WORK/straight" --summary-json "$WORK/straight.json" \
  >"$WORK/straight.txt" 2>&1 || { cat "$WORK/straight.txt"; fail "the uninterrupted run failed"; }

"$TESSERA" "${ARGS[@]}" --workdir "$WORK/killed" --summary-json "$WORK/killed.json" \
  >"$WORK/killed.txt" 2>&1 &
runner=$!
wait_for 90 "the rank to pass step 30" step_at_least "$WORK/killed" 30
pid=$(json "$WORK/killed/status.json" '[r["pid"] for r in j["ranks"] if r["rank"] == 1][0]')
port=$(json "$WORK/killed/status.json" '[r["metricsPort"] for r in j["ranks"] if r["rank"] == 0][0]')
killed_at=$(progress_step "$port")
kill -9 "$pid"
echo "killed rank 1 (pid $pid) at step $killed_at"
rc=0
wait "$runner" || rc=$?
cat "$WORK/killed.txt"
[[ $rc == 0 ]] || fail "the interrupted run exited $rc"
assert_no_survivors "$WORK/killed"

[[ $(json "$WORK/killed.json" 'j["restarts"]') == 1 ]] || fail "want exactly one gang restart"
grep -q "worker-1 rank 1 (pid $pid) killed by signal 9" "$WORK/killed.txt" ||
  fail "the kill was not reported"
grep -q "^WorkerFailed: worker-1 failed with exit code 137 " "$WORK/killed.txt" ||
  fail "the event does not blame the killed rank's worker"
resumed=$(grep -o "resumed from [^ ]*step-[0-9]*" "$WORK/killed/logs/worker-0-rank-0.log" |
  grep -o "[0-9]*$" || true)
[[ -n $resumed ]] || fail "attempt 1 did not resume from a checkpoint"
((resumed >= 20 && resumed <= killed_at + 1)) ||
  fail "resumed from step $resumed, want a checkpoint in 20..$((killed_at + 1))"
echo "attempt 1 resumed from step $resumed"
a=$(json "$WORK/straight.json" 'repr(j["final_train_loss"])')
b=$(json "$WORK/killed.json" 'repr(j["final_train_loss"])')
va=$(json "$WORK/straight.json" 'repr(j["final_val_loss"])')
vb=$(json "$WORK/killed.json" 'repr(j["final_val_loss"])')
echo "final train loss: uninterrupted $a, killed and resumed $b; val $va vs $vb"
[[ $a == "$b" && $va == "$vb" ]] || fail "final losses differ"
echo PASS
