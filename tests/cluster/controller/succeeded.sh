#!/usr/bin/env bash
# Worker 0 exiting 0 succeeds the job; with cleanPodPolicy Running the workers still running
# are deleted and worker 0's finished pod is kept.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
source "$TESSERA_SOURCE_DIR/tests/cluster/controller/controller_lib.sh"

start_controller
apply_job done 2
wait_phase 60 done Running
kns label pod done-worker-0 tessera.dev/fail-exit-code=0
wait_phase 60 done Succeeded
expect_eq "True/Succeeded" "$(condition done Succeeded)" "Succeeded condition"
[ -n "$(job_field done '{.status.completionTime}')" ] || fail "no completionTime"
wait_for 60 "worker 1 deleted (cleanPodPolicy Running)" bash -c \
  "! kubectl -n $TEST_NAMESPACE get pod done-worker-1 >/dev/null 2>&1"
expect_eq Succeeded "$(kns get pod done-worker-0 -o jsonpath='{.status.phase}')" "worker 0 kept"
kubectl wait -n "$TEST_NAMESPACE" --for=condition=Succeeded --timeout=10s tj/done >/dev/null ||
  fail "kubectl wait --for=condition=Succeeded does not see the job succeeded"
echo "ok: kubectl wait --for=condition=Succeeded"
