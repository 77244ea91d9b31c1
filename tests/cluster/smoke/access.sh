#!/usr/bin/env bash
# Authentication and RBAC: the admin is a client certificate in system:masters; a service
# account's token (signed with the service-account key pair) authenticates but is
# forbidden what RBAC does not grant, and allowed what a RoleBinding does; the
# controller manager's token controller fills a legacy token Secret.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"

whoami=$(kubectl auth whoami -o json)
expect_eq tessera-admin "$(json_get 'd["status"]["userInfo"]["username"]' <<<"$whoami")" "admin user"
expect_eq True "$(json_get '"system:masters" in d["status"]["userInfo"]["groups"]' <<<"$whoami")" \
  "admin is in system:masters"

kns create serviceaccount reader
token=$(kns create token reader --duration 10m)
[ -n "$token" ] || fail "no token issued for service account reader"
# The same server and CA, but only the token as credentials.
ca=$(mktemp)
on_exit "rm -f $ca"
kubectl config view --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d >"$ca"
server=$(kubectl config view --raw -o jsonpath='{.clusters[0].cluster.server}')
as_reader() {
  kubectl --kubeconfig /dev/null --server "$server" --certificate-authority "$ca" --token "$token" "$@"
}
expect_eq "system:serviceaccount:$TEST_NAMESPACE:reader" \
  "$(as_reader auth whoami -o jsonpath='{.status.userInfo.username}')" "token user"

if out=$(as_reader get configmaps -n "$TEST_NAMESPACE" 2>&1); then
  fail "reader listed configmaps without any role: $out"
fi
grep -q Forbidden <<<"$out" || fail "expected Forbidden for reader, got: $out"
echo "ok: reader is forbidden before the RoleBinding"

kns create role configmap-reader --verb=get,list --resource=configmaps
kns create rolebinding reader --role=configmap-reader --serviceaccount="$TEST_NAMESPACE:reader"
wait_for 30 "reader to be allowed to list configmaps" as_reader get configmaps -n "$TEST_NAMESPACE"
if as_reader get nodes >/dev/null 2>&1; then fail "reader may list nodes, which no role grants"; fi
echo "ok: RBAC grants exactly the RoleBinding"

kns apply -f - <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: reader-token
  annotations:
    kubernetes.io/service-account.name: reader
type: kubernetes.io/service-account-token
YAML
wait_for 30 "the token controller to fill secret reader-token" \
  bash -c '[ -n "$(kubectl -n "$TEST_NAMESPACE" get secret reader-token -o jsonpath={.data.token})" ]'
echo "ok: the token controller signed a token"
