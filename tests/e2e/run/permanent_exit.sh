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
echo PASS
