#!/usr/bin/env bash
# A node labelled tessera.dev/not-ready=true is seen NotReady (and the node lifecycle
# controller taints it); removing the label makes it Ready again. The test uses a node of
# its own, tainted so that no other test's pods land on it.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"

node="smoke-${TEST_NAMESPACE}"
on_exit "kubectl delete node $node --wait=false"
sed "s/@NAME@/$node/g" "$TESSERA_SOURCE_DIR/tests/cluster/kwok/node.yaml" |
  sed 's/^spec: {}$/spec:\n  taints:\n  - {key: tessera.dev\/smoke-test, value: "true", effect: NoSchedule}/' |
  kubectl apply -f -

ready() { [ "$(kubectl get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = "$1" ]; }
export -f ready
export node

wait_for 60 "node $node to become Ready" ready True
kubectl label node "$node" tessera.dev/not-ready=true
wait_for 60 "node $node to become NotReady" ready False
expect_eq KubeletNotReady "$(kubectl get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].reason}')" \
  "reason of Ready=False"
wait_for 60 "the node.kubernetes.io/not-ready taint on $node" \
  bash -c "kubectl get node $node -o jsonpath='{.spec.taints[*].key}' | grep -qw node.kubernetes.io/not-ready"

kubectl label node "$node" tessera.dev/not-ready-
wait_for 60 "node $node to become Ready again" ready True
