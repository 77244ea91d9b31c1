#!/usr/bin/env bash
# kube-apiserver restarted mid-job: the controller's watches fail, back off and resume (or
# relist); it then restarts the gang after a failure and finishes the job, and no job ever
# has more pods than workers (counted by label at every step). RUN_SERIAL: the restart
# disturbs every client.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
source "$TESSERA_SOURCE_DIR/tests/cluster/controller/controller_lib.sh"

start_controller
apply_job rs 3 "  runPolicy: {backoffLimit: 2}"
wait_phase 60 rs Running
expect_at_most_workers rs 3

"$TESSERA_SOURCE_DIR/scripts/cluster.sh" restart kube-apiserver >/dev/null
wait_for 60 "the apiserver back" kubectl get --raw /readyz
expect_at_most_workers rs 3
# The scheduler is not under test: its cache can come back corrupted from the outage (it logs
# "Scheduler cache is corrupted" when a relist races the gang's deletions and re-creations, and
# then leaves the new pods Pending), which would fail this and later tests for a reason that is
# not the controller's. A fresh scheduler starts from a clean list.
"$TESSERA_SOURCE_DIR/scripts/cluster.sh" restart kube-scheduler >/dev/null

kns label pod rs-worker-2 tessera.dev/fail-exit-code=4
restarted() {
  expect_at_most_workers rs 3 >/dev/null
  [ "$(job_field rs '{.status.restarts}')" = 1 ] && _ctl_phase_is rs Running &&
    [ "$(kns get pods -l tessera.dev/job-name=rs,tessera.dev/attempt=1 -o name | wc -l)" -eq 3 ]
}
wait_for 120 "the gang restarted after the apiserver came back" restarted
expect_at_most_workers rs 3

kns label pod rs-worker-0 tessera.dev/fail-exit-code=0
wait_phase 60 rs Succeeded
expect_at_most_workers rs 3
expect_eq "WorkerFailed 4" "$(job_field rs '{.status.lastFailure.reason} {.status.lastFailure.exitCode}')" \
  "lastFailure"
