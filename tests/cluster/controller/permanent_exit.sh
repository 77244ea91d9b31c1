#!/usr/bin/env bash
# An exit code listed in runPolicy.permanentExitCodes (default [2]) fails the job at once,
# without a restart.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
source "$TESSERA_SOURCE_DIR/tests/cluster/controller/controller_lib.sh"

start_controller
apply_job perm 2 "  runPolicy: {backoffLimit: 3}"
wait_phase 60 perm Running
kns label pod perm-worker-1 tessera.dev/fail-exit-code=2
wait_phase 60 perm Failed
expect_eq "True/PermanentExitCode" "$(condition perm Failed)" "Failed condition"
expect_eq 0 "$(job_field perm '{.status.restarts}')" "restarts"
expect_eq "PermanentExitCode 2 perm-worker-1" \
  "$(job_field perm '{.status.lastFailure.reason} {.status.lastFailure.exitCode} {.status.lastFailure.worker}')" \
  "lastFailure"
expect_eq 0 "$(kns get pods -l tessera.dev/job-name=perm,tessera.dev/attempt=1 -o name | wc -l)" \
  "pods of a second attempt"
