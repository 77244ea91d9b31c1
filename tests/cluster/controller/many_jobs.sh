#!/usr/bin/env bash
# 100 jobs created at once (one apply): every one reconciled to Running, and no duplicate pods:
# never more pods than workers per job (counted by label while they start and at the end), and
# every pod name held by one pod only over the whole run (a watch records the uid of every pod
# that ever existed, so a pod deleted and created again would show as a second uid).
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
source "$TESSERA_SOURCE_DIR/tests/cluster/controller/controller_lib.sh"

jobs=100
workers=2

# Every pod that ever exists in the namespace, from before the first is created.
seen="$CONTROLLER_WORK/pods-seen"
kubectl get pods -n "$TEST_NAMESPACE" --watch --output-watch-events \
  -o jsonpath='{.type} {.object.metadata.name} {.object.metadata.uid}{"\n"}' >"$seen" 2>/dev/null &
watcher=$!
on_exit "kill $watcher"

start_controller --workers 4 --qps 50 --burst 100
docs=""
for i in $(seq 1 $jobs); do
  docs+="---
apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata: {name: many-$i}
spec:
  workers: $workers
  template:
    spec:
      terminationGracePeriodSeconds: 1
      containers: [{name: worker, image: tessera/worker:test, command: [/bin/true]}]
"
done
kns apply -f - <<<"$docs" >/dev/null

per_job_ok() {
  # pod count per job label must never exceed the workers
  kns get pods -o jsonpath='{range .items[*]}{.metadata.labels.tessera\.dev/job-name}{"\n"}{end}' |
    sort | uniq -c | awk -v n=$workers '$1 > n { bad = 1 } END { exit bad }'
}
all_running() {
  per_job_ok || fail "a job has more pods than workers"
  [ "$(kns get tj -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c '^Running$')" -eq $jobs ]
}
wait_for 220 "all $jobs jobs Running" all_running
per_job_ok || fail "a job has more pods than workers"
expect_eq $((jobs * workers)) "$(kns get pods -l tessera.dev/job-name -o name | wc -l)" "pods of all jobs"
expect_eq "0" "$(kns get pods -l tessera.dev/job-name -o jsonpath='{range .items[*]}{.metadata.labels.tessera\.dev/attempt}{"\n"}{end}' | sort -u)" \
  "attempt of every pod"
expect_eq "0" "$(kns get tj -o jsonpath='{range .items[*]}{.status.restarts}{"\n"}{end}' | sort -u)" \
  "restarts of every job"

# The watch saw each pod name with exactly one uid.
wait_for 30 "the watch to have seen all $((jobs * workers)) pods" bash -c \
  "[ \$(awk '{ print \$2 }' '$seen' | sort -u | wc -l) -ge $((jobs * workers)) ]"
expect_eq $((jobs * workers)) "$(awk '{ print $2 }' "$seen" | sort -u | wc -l)" "pod names ever seen"
expect_eq $((jobs * workers)) "$(awk '{ print $2, $3 }' "$seen" | sort -u | wc -l)" \
  "distinct pods ever created (a duplicate would add a second uid to a name)"
