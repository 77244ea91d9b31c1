#!/usr/bin/env bash
# A worker whose node goes NotReady counts as failed once the pod's grace period has passed:
# its pod is force-deleted and the gang restarted (lastFailure NodeLost). The test pins the job
# to a node of its own (tainted so that no other test's pods land there) and breaks that node.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
source "$TESSERA_SOURCE_DIR/tests/cluster/controller/controller_lib.sh"

node="ctl-${TEST_NAMESPACE}"
on_exit "kubectl delete node $node --wait=false"
sed "s/@NAME@/$node/g" "$TESSERA_SOURCE_DIR/tests/cluster/kwok/node.yaml" |
  sed 's/^spec: {}$/spec:\n  taints:\n  - {key: tessera.dev\/controller-test, value: "true", effect: NoSchedule}/' |
  kubectl apply -f - >/dev/null
node_ready() { [ "$(kubectl get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = "$1" ]; }
wait_for 60 "node $node Ready" node_ready True

start_controller
kns apply -f - <<YAML
apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata:
  name: lost
spec:
  workers: 1
  runPolicy: {backoffLimit: 2}
  template:
    spec:
      terminationGracePeriodSeconds: 1
      nodeSelector: {kubernetes.io/hostname: $node}
      tolerations:
      - {key: tessera.dev/controller-test, operator: Exists, effect: NoSchedule}
      containers: [{name: worker, image: tessera/worker:test, command: [/bin/true]}]
YAML
wait_phase 60 lost Running
old_uid=$(kns get pod lost-worker-0 -o jsonpath='{.metadata.uid}')

kubectl label node "$node" tessera.dev/not-ready=true >/dev/null
wait_for 90 "the lost worker's pod force-deleted" bash -c \
  "[ \"\$(kubectl -n $TEST_NAMESPACE get pod lost-worker-0 -o jsonpath='{.metadata.uid}' 2>/dev/null)\" != $old_uid ]"
restarted() { [ "$(job_field lost '{.status.restarts}')" = 1 ]; }
wait_for 30 "restarts = 1" restarted
expect_eq NodeLost "$(job_field lost '{.status.lastFailure.reason}')" "lastFailure reason"
expect_eq lost-worker-0 "$(job_field lost '{.status.lastFailure.worker}')" "lastFailure worker"

# The node comes back: the new attempt runs there.
kubectl label node "$node" tessera.dev/not-ready- >/dev/null
wait_for 60 "node $node Ready again" node_ready True
wait_phase 120 lost Running
expect_eq 1 "$(kns get pod lost-worker-0 -o jsonpath='{.metadata.labels.tessera\.dev/attempt}')" \
  "attempt of the new pod"
