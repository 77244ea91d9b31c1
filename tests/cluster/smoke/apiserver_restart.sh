#!/usr/bin/env bash
# `scripts/cluster.sh restart kube-apiserver` brings the apiserver back on the same port
# with the same data, and the other components reconnect: objects made before survive,
# and a pod created afterwards is still scheduled and run by kwok. (RUN_SERIAL: the
# outage would disturb tests running beside it.)
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"

kns create configmap before --from-literal=made=before-restart
"$TESSERA_SOURCE_DIR/scripts/cluster.sh" restart kube-apiserver
expect_eq before-restart "$(kns get configmap before -o jsonpath='{.data.made}')" "configmap made before the restart"

kns apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: after-restart
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: tessera/worker:smoke
YAML
wait_for 90 "pod after-restart to be Running (scheduler and kwok reconnected)" \
  bash -c '[ "$(kubectl -n "$TEST_NAMESPACE" get pod after-restart -o jsonpath={.status.phase})" = Running ]'
# Leave the control plane as the next test expects it: kube-controller-manager's controllers
# watching again, which a new namespace getting its `default` service account shows.
probe="t-after-restart-$(head -c4 /dev/urandom | od -An -tx1 | tr -d ' \n')"
kubectl create namespace "$probe" >/dev/null
on_exit "kubectl delete namespace $probe --wait=false"
wait_for 120 "kube-controller-manager to make namespace $probe's service account" \
  kubectl -n "$probe" get serviceaccount default
"$TESSERA_SOURCE_DIR/scripts/cluster.sh" status
