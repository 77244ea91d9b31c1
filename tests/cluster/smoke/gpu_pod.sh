#!/usr/bin/env bash
# A Pod requesting nvidia.com/gpu: 1 is scheduled onto a kwok node and reaches Running
# (Ready, with a pod IP); a Pod requesting more GPUs than any node has stays Pending
# with the scheduler saying why, so the capacity is really enforced.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"

gpu_pod() {
  cat <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $1
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: tessera/worker:smoke
    resources:
      limits:
        nvidia.com/gpu: $2
YAML
}
gpu_pod one-gpu 1 | kns apply -f -
gpu_pod too-many 9 | kns apply -f -

wait_for 60 "pod one-gpu to be Running" \
  bash -c '[ "$(kubectl -n "$TEST_NAMESPACE" get pod one-gpu -o jsonpath={.status.phase})" = Running ]'
node=$(kns get pod one-gpu -o jsonpath='{.spec.nodeName}')
[ -n "$node" ] || fail "pod one-gpu is Running but has no node"
expect_eq fake "$(kubectl get node "$node" -o jsonpath='{.metadata.annotations.kwok\.x-k8s\.io/node}')" \
  "kwok annotation of node $node"
expect_eq True "$(kns get pod one-gpu -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" \
  "Ready condition of one-gpu"
expect_eq true "$(kns get pod one-gpu -o jsonpath='{.status.containerStatuses[0].ready}')" \
  "container ready"
ip=$(kns get pod one-gpu -o jsonpath='{.status.podIP}')
[ -n "$ip" ] || fail "pod one-gpu has no podIP"
echo "ok: one-gpu runs on $node with IP $ip"

wait_for 60 "the scheduler to report that too-many does not fit" \
  bash -c 'kubectl -n "$TEST_NAMESPACE" get pod too-many -o jsonpath="{.status.conditions[?(@.type==\"PodScheduled\")].message}" | grep -q "Insufficient nvidia.com/gpu"'
expect_eq Pending "$(kns get pod too-many -o jsonpath='{.status.phase}')" "phase of too-many"
expect_eq "" "$(kns get pod too-many -o jsonpath='{.spec.nodeName}')" "node of too-many"
