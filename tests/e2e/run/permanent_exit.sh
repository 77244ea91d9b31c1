#!/usr/bin/env bash
# A permanent exit code: one rank of a two-worker bring-your-own job exits 2 (in
# permanentExitCodes by default) while the other sleeps. The run stops at once, without a
# restart, with exit code 3 and a clear message, and the sleeping rank is stopped.
source "$(dirname "$0")/lib.sh"

cat >"$WORK/job.yaml" <<'YAML'
apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata: {name: permanent}
spec:
  workers: 2
  template:
    spec:
      containers:
      - name: worker
        command: [sh, -c, 'if [ "$RANK" = 1 ]; then echo "bad config on rank 1" >&2; exit 2; fi; sleep 300 & wait']
  runPolicy: {backoffLimit: 3}
YAML
rc=0
"$TESSERA" run "$WORK/job.yaml" --workdir "$WORK/run" --summary-json "$WORK/summary.json" \
  >"$WORK/out.txt" 2>&1 || rc=$?
cat "$WORK/out.txt"
[[ $rc == 3 ]] || fail "exit code $rc, want 3 (permanent exit code)"
assert_no_survivors "$WORK/run"
grep -q "PermanentExitCode: worker-1 failed with exit code 2" "$WORK/out.txt" ||
  fail "no clear PermanentExitCode message"
grep -q "bad config on rank 1" "$WORK/out.txt" || fail "the rank's last log lines were not shown"
[[ $(json "$WORK/summary.json" 'j["restarts"]') == 0 ]] || fail "a permanent failure restarted"
[[ $(json "$WORK/summary.json" 'j["phase"]') == Failed ]] || fail "phase is not Failed"

# The same exit code outside permanentExitCodes is retried up to backoffLimit, then exit 1.
rc=0
"$TESSERA" run "$WORK/job.yaml" --workdir "$WORK/run2" --summary-json "$WORK/summary2.json" \
  --set 'spec.runPolicy.permanentExitCodes=[]' --set spec.runPolicy.backoffLimit=1 \
  >"$WORK/out2.txt" 2>&1 || rc=$?
cat "$WORK/out2.txt"
[[ $rc == 1 ]] || fail "exit code $rc, want 1 (backoff limit)"
assert_no_survivors "$WORK/run2"
grep -q "BackoffLimitExceeded" "$WORK/out2.txt" || fail "no BackoffLimitExceeded message"
[[ $(json "$WORK/summary2.json" 'j["restarts"]') == 1 ]] || fail "want one restart"
# Two ranks a worker: log files are named by the global rank, and the failure line names the
# rank whose log it shows (rank 3 is worker 1's second rank).
cat >"$WORK/job2.yaml" <<'YAML'
apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata: {name: permanent-two}
spec:
  workers: 2
  procsPerWorker: 2
  template:
    spec:
      containers:
      - name: worker
        command: [sh, -c, 'echo "rank $RANK local $LOCAL_RANK"; if [ "$RANK" = 3 ]; then echo "bad config on rank 3" >&2; exit 2; fi; sleep 300 & wait']
YAML
rc=0
"$TESSERA" run "$WORK/job2.yaml" --workdir "$WORK/run3" >"$WORK/out3.txt" 2>&1 || rc=$?
cat "$WORK/out3.txt"
[[ $rc == 3 ]] || fail "exit code $rc, want 3 (permanent exit code)"
assert_no_survivors "$WORK/run3"
for r in 0 1 2 3; do
  w=$((r / 2))
  grep -q "^rank $r local $((r % 2))$" "$WORK/run3/logs/worker-$w-rank-$r.log" ||
    fail "logs/worker-$w-rank-$r.log does not hold rank $r's output"
done
[[ $(ls "$WORK/run3/logs" | wc -l) == 4 ]] || fail "want 4 logs, got: $(ls "$WORK/run3/logs")"
grep -q "^worker-1 rank 3 (pid [0-9]*) exited with code 2; last lines of $WORK/run3/logs/worker-1-rank-3.log:" \
  "$WORK/out3.txt" || fail "the failure line does not name rank 3 and its log"
grep -q "PermanentExitCode: worker-1 failed with exit code 2 (Error: rank 3 exited with code 2)" \
  "$WORK/out3.txt" || fail "the event does not name rank 3"
[[ $(json "$WORK/run3/status.json" '[r["log"] for r in j["ranks"] if r["rank"] == 3][0]') == \
  "$WORK/run3/logs/worker-1-rank-3.log" ]] || fail "status.json names another log for rank 3"
echo PASS
