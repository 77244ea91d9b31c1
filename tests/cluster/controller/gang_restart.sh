#!/usr/bin/env bash
# A failed worker fails its whole attempt: the gang is replaced (restarts = 1, lastFailure with
# the reason and exit code); a failure with no restarts left fails the job
# (BackoffLimitExceeded). Never more pods than workers, counted by label at every step.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
source "$TESSERA_SOURCE_DIR/tests/cluster/controller/controller_lib.sh"

start_controller
apply_job gang 3 "  runPolicy: {backoffLimit: 1}"
wait_phase 60 gang Running
expect_at_most_workers gang 3

# kwok fails a pod carrying the label with that exit code.
kns label pod gang-worker-1 tessera.dev/fail-exit-code=3
attempt1() {
  [ "$(kns get pods -l tessera.dev/job-name=gang,tessera.dev/attempt=1 -o name | wc -l)" -eq 3 ] &&
    [ "$(kns get pods -l tessera.dev/job-name=gang,tessera.dev/attempt=0 -o name | wc -l)" -eq 0 ]
}
wait_for 60 "the whole gang replaced by attempt 1" attempt1
expect_at_most_workers gang 3
wait_phase 60 gang Running
expect_eq 1 "$(job_field gang '{.status.restarts}')" "restarts"
expect_eq "WorkerFailed 3 gang-worker-1" \
  "$(job_field gang '{.status.lastFailure.reason} {.status.lastFailure.exitCode} {.status.lastFailure.worker}')" \
  "lastFailure"
expect_eq 1 "$(kns get pod gang-worker-0 -o jsonpath='{.spec.containers[0].env[?(@.name=="TESSERA_ATTEMPT")].value}')" \
  "TESSERA_ATTEMPT of the new gang"
expect_at_most_workers gang 3

# No restart left: the next failure fails the job.
kns label pod gang-worker-2 tessera.dev/fail-exit-code=5
wait_phase 60 gang Failed
expect_eq "True/BackoffLimitExceeded" "$(condition gang Failed)" "Failed condition"
expect_eq "WorkerFailed 5" "$(job_field gang '{.status.lastFailure.reason} {.status.lastFailure.exitCode}')" \
  "lastFailure after the second failure"
expect_eq 1 "$(job_field gang '{.status.restarts}')" "restarts after failing"
[ -n "$(job_field gang '{.status.completionTime}')" ] || fail "no completionTime on a failed job"
# cleanPodPolicy Running: the workers still running are deleted, the failed one stays.
wait_for 60 "running workers cleaned up" bash -c \
  "[ -z \"\$(kubectl -n $TEST_NAMESPACE get pods -l tessera.dev/job-name=gang --field-selector=status.phase=Running -o name)\" ]"
expect_at_most_workers gang 3
