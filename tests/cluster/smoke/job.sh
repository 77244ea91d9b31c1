#!/usr/bin/env bash
# kube-controller-manager's job controller runs a Job on kwok nodes: an Indexed Job of 3
# pods that exit 0 completes; a Job whose pod exits 7 with backoffLimit 0 fails, and its
# pod's tracking finalizer does not keep it from being counted.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"

job() {  # <name> <completions> <exit code>
  cat <<YAML
apiVersion: batch/v1
kind: Job
metadata:
  name: $1
spec:
  completions: $2
  parallelism: $2
  completionMode: Indexed
  backoffLimit: 0
  template:
    metadata:
      labels:
        tessera.dev/fail-exit-code: "$3"
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: tessera/worker:smoke
YAML
}
job succeeds 3 0 | kns apply -f -
job fails 1 7 | kns apply -f -

condition() {  # <job> <type>: true when the condition is True
  [ "$(kns get job "$1" -o jsonpath="{.status.conditions[?(@.type==\"$2\")].status}")" = True ]
}
wait_for 90 "job succeeds to be Complete" condition succeeds Complete
expect_eq 3 "$(kns get job succeeds -o jsonpath='{.status.succeeded}')" "succeeded pods of job succeeds"
wait_for 90 "job fails to be Failed" condition fails Failed
expect_eq BackoffLimitExceeded \
  "$(kns get job fails -o jsonpath='{.status.conditions[?(@.type=="Failed")].reason}')" "reason job fails failed"
