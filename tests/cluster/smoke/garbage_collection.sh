#!/usr/bin/env bash
# Deleting an owner garbage-collects its dependent (kube-controller-manager's garbage
# collector), while an object without that owner survives.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"

kns create configmap owner --from-literal=role=owner
uid=$(kns get configmap owner -o jsonpath='{.metadata.uid}')
[ -n "$uid" ] || fail "configmap owner has no uid"
kns apply -f - <<YAML
apiVersion: v1
kind: ConfigMap
metadata:
  name: dependent
  ownerReferences:
  - apiVersion: v1
    kind: ConfigMap
    name: owner
    uid: $uid
data:
  role: dependent
YAML
kns create configmap bystander --from-literal=role=bystander

kns delete configmap owner
wait_for 60 "configmap dependent to be garbage-collected" \
  bash -c '! kubectl -n "$TEST_NAMESPACE" get configmap dependent >/dev/null 2>&1'
kns get configmap bystander >/dev/null || fail "configmap bystander (no owner) was deleted too"
echo "ok: the dependent was collected, the bystander kept"
