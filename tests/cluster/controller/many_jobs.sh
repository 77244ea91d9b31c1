#!/usr/bin/env bash
# 24 jobs created at once: every one reconciled to Running, and never a pod more than its
# workers (counted by label while they start and at the end).
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
source "$TESSERA_SOURCE_DIR/tests/cluster/controller/controller_lib.sh"

start_controller --workers 4
jobs=24
docs=""
for i in $(seq 1 $jobs); do
  docs+="---
apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata: {name: many-$i}
spec:
  workers: 2
  template:
    spec:
      terminationGracePeriodSeconds: 1
      containers: [{name: worker, image: tessera/worker:test, command: [/bin/true]}]
"
done
kns apply -f - <<<"$docs" >/dev/null

per_job_ok() {
  # pod count per job label must never exceed 2
  kns get pods -o jsonpath='{range .items[*]}{.metadata.labels.tessera\.dev/job-name}{"\n"}{end}' |
    sort | uniq -c | awk '$1 > 2 { bad = 1 } END { exit bad }'
}
all_running() {
  per_job_ok || fail "a job has more pods than workers"
  [ "$(kns get tj -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c '^Running$')" -eq $jobs ]
}
wait_for 180 "all $jobs jobs Running" all_running
per_job_ok || fail "a job has more pods than workers"
expect_eq $((jobs * 2)) "$(kns get pods -l tessera.dev/job-name -o name | wc -l)" "pods of all jobs"
