#!/usr/bin/env bash
# suspend: true deletes the workers and keeps the job (Suspended); suspend: false starts a
# new attempt, whose pods follow a pod template changed in the same update.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
source "$TESSERA_SOURCE_DIR/tests/cluster/controller/controller_lib.sh"

start_controller
apply_job sus 2
wait_phase 60 sus Running
kns patch tj sus --type merge -p '{"spec":{"suspend":true}}'
wait_phase 60 sus Suspended
wait_for 60 "no pods while suspended" bash -c "[ \$(kubectl -n $TEST_NAMESPACE get pods -l tessera.dev/job-name=sus -o name | wc -l) -eq 0 ]"
expect_eq "True/Suspended" "$(condition sus Suspended)" "Suspended condition"
expect_eq 0 "$(job_field sus '{.status.restarts}')" "restarts (suspension is free)"

kns patch tj sus --type merge \
  -p '{"spec":{"suspend":false,"template":{"metadata":{"labels":{"pool":"b"}}}}}'
wait_phase 60 sus Running
expect_eq 2 "$(kns get pods -l tessera.dev/job-name=sus,tessera.dev/attempt=1,pool=b -o name | wc -l)" \
  "pods of the new attempt, with the template's new label"
expect_eq "False/Resumed" "$(condition sus Suspended)" "Suspended condition after resume"
expect_eq 2 "$(pod_count sus)" "pods of sus"
