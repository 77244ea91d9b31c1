#!/usr/bin/env bash
# charts/tessera on the local control plane: `helm install` (the controller pod Running on a
# kwok node, which runs no container), the ServiceAccount's RBAC as the API server enforces
# it for a TokenRequest token, `helm upgrade` with changed values, and `helm uninstall`
# leaving nothing of the release but the CRD its keep policy retains.
#
# The TrainingJob CRD is cluster-wide and other tests apply it too: the install takes
# ownership of it when it exists (--take-ownership) and the test never deletes it.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
command -v helm >/dev/null || fail "helm not found on PATH: run scripts/setup.sh first"
chart=$TESSERA_SOURCE_DIR/charts/tessera
work=$(mktemp -d)
on_exit "rm -rf $work"
export HELM_CACHE_HOME=$work/cache HELM_CONFIG_HOME=$work/config HELM_DATA_HOME=$work/data
release=tessera-$(head -c3 /dev/urandom | od -An -tx1 | tr -d ' \n')
on_exit "helm uninstall $release --namespace $TEST_NAMESPACE --wait --timeout 30s"
crd=trainingjobs.tessera.dev
sa=$release-controller
dashboards=$(ls "$chart/dashboards"/*.json | wc -l)

helm install "$release" "$chart" --namespace "$TEST_NAMESPACE" --take-ownership \
  --wait --timeout 90s >"$work/install.txt" 2>&1 || { cat "$work/install.txt"; fail "helm install"; }
echo "ok: helm install $release"
expect_eq deployed "$(helm status "$release" -n "$TEST_NAMESPACE" -o json | json_get 'd["info"]["status"]')" "release status"
expect_eq 1 "$(kns get deployment "$release-controller" -o jsonpath='{.status.readyReplicas}')" "controller replicas ready"
wait_for 30 "controller pod Running" bash -c \
  "kubectl -n $TEST_NAMESPACE get pods -l app.kubernetes.io/instance=$release,app.kubernetes.io/component=controller -o jsonpath='{.items[*].status.phase}' | grep -qx Running"
expect_eq "$sa" "$(kns get pods -l app.kubernetes.io/instance="$release" -o jsonpath='{.items[0].spec.serviceAccountName}')" "controller pod's ServiceAccount"
expect_eq "$dashboards" "$(kns get configmaps -l grafana_dashboard=1,app.kubernetes.io/instance="$release" -o name | wc -l)" "dashboard ConfigMaps"
expect_eq 1 "$(kns get service "$release-controller-metrics" -o jsonpath='{.spec.ports[?(@.name=="metrics")].port}' | grep -c 8080)" "metrics Service port"
expect_eq keep "$(kubectl get crd "$crd" -o jsonpath='{.metadata.annotations.helm\.sh/resource-policy}')" "CRD resource policy"
kubectl wait --for=condition=Established --timeout=30s "crd/$crd" >/dev/null

# What the ServiceAccount may do, asked of the API server with a token from the TokenRequest
# API (kubectl create token), not with the admin's impersonation.
token=$(kubectl create token "$sa" --namespace "$TEST_NAMESPACE" --duration 10m)
server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
ca=$work/ca.crt
kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d >"$ca"
as_sa() { kubectl --kubeconfig=/dev/null --server="$server" --certificate-authority="$ca" --token="$token" "$@"; }
expect_eq "system:serviceaccount:$TEST_NAMESPACE:$sa" "$(as_sa auth whoami -o jsonpath='{.status.userInfo.username}')" "token identity"
can() { local want=$1; shift; local got; got=$(as_sa auth can-i "$@" 2>/dev/null || true); expect_eq "$want" "$got" "can-i $*"; }
# Granted: every rule of manifests/rbac/ (the ClusterRole anywhere, the Role in the release
# namespace), one `can-i` per group, resource and verb.
# Rules for API groups this server does not serve (the optional PodGroup CRDs) cannot be asked
# about by name: kubectl cannot resolve the resource and answers no.
served=$(kubectl api-versions)
while read -r verb resource sub scope; do
  group=${resource#*.}
  if [[ $resource == *.* ]] && ! grep -q "^$group/" <<<"$served"; then
    echo "skip: can-i $verb $resource (API group $group not served here)"
    continue
  fi
  args=("$verb" "$resource")
  [ "$sub" = - ] || args+=("--subresource=$sub")
  case $scope in all) args+=(--all-namespaces) ;; release) args+=(-n "$TEST_NAMESPACE") ;; esac
  can yes "${args[@]}"
done < <(/usr/bin/python3 - "$TESSERA_SOURCE_DIR/manifests/rbac" <<'PY'
import os, sys, yaml
d = sys.argv[1]
for f in sorted(os.listdir(d)):
    for doc in yaml.safe_load_all(open(os.path.join(d, f))):
        if not doc or doc.get("kind") not in ("ClusterRole", "Role"):
            continue
        scope = "all" if doc["kind"] == "ClusterRole" else "release"
        for r in doc["rules"]:
            for g in r.get("apiGroups", [""]):
                for res in r.get("resources", []):
                    base, _, sub = res.partition("/")
                    name = base + ("." + g if g else "")
                    for v in r["verbs"]:
                        print(v, name, sub or "-", scope)
PY
)
# Refused: least privilege.
can no get secrets -n default
can no list secrets --all-namespaces
can no create leases.coordination.k8s.io -n default
can no delete nodes
can no create deployments.apps -n default
can no create clusterrolebindings.rbac.authorization.k8s.io
can no delete customresourcedefinitions.apiextensions.k8s.io
can no create pods --subresource=exec -n default
as_sa get trainingjobs.tessera.dev --all-namespaces >/dev/null || fail "the ServiceAccount cannot list TrainingJobs"
echo "ok: the ServiceAccount's token lists TrainingJobs cluster-wide"

# Upgrade: new controller flags, dashboards off.
helm upgrade "$release" "$chart" --namespace "$TEST_NAMESPACE" --reuse-values \
  --set controller.workers=8 --set dashboards.enabled=false --wait --timeout 90s >"$work/upgrade.txt" 2>&1 ||
  { cat "$work/upgrade.txt"; fail "helm upgrade"; }
expect_eq 2 "$(helm status "$release" -n "$TEST_NAMESPACE" -o json | json_get 'd["version"]')" "release revision after upgrade"
kns get deployment "$release-controller" -o jsonpath='{.spec.template.spec.containers[0].args}' | grep -- '--workers=8' >/dev/null ||
  fail "upgrade did not change the controller's --workers"
wait_for 60 "upgraded controller rolled out" kubectl -n "$TEST_NAMESPACE" rollout status "deployment/$release-controller" --timeout=5s
expect_eq 0 "$(kns get configmaps -l grafana_dashboard=1,app.kubernetes.io/instance="$release" -o name | wc -l)" "dashboard ConfigMaps after upgrade with dashboards off"
expect_eq keep "$(kubectl get crd "$crd" -o jsonpath='{.metadata.annotations.helm\.sh/resource-policy}')" "CRD resource policy after upgrade"

# Uninstall: nothing of the release is left but the CRD.
helm uninstall "$release" --namespace "$TEST_NAMESPACE" --wait --timeout 60s >"$work/uninstall.txt" 2>&1 ||
  { cat "$work/uninstall.txt"; fail "helm uninstall"; }
grep -q "$crd" "$work/uninstall.txt" || { cat "$work/uninstall.txt"; fail "helm uninstall did not report keeping the CRD"; }
leftovers() {
  local types
  types=$(kubectl api-resources --verbs=list --namespaced=true -o name | grep -v '^events' | paste -sd, -)
  kubectl get "$types" -n "$TEST_NAMESPACE" -l "app.kubernetes.io/instance=$release" -o name 2>/dev/null
  types=$(kubectl api-resources --verbs=list --namespaced=false -o name | paste -sd, -)
  kubectl get "$types" -l "app.kubernetes.io/instance=$release" -o name 2>/dev/null | grep -v "customresourcedefinition.apiextensions.k8s.io/$crd\$"
  kns get secrets -o name | grep "sh.helm.release.v1.$release" || true
}
no_leftovers() {
  local left
  left=$(leftovers)
  [ -z "$left" ] || { echo "$left"; return 1; }
}
wait_for 60 "no objects of $release left after helm uninstall" no_leftovers
kubectl get crd "$crd" >/dev/null || fail "helm uninstall deleted the CRD despite helm.sh/resource-policy: keep"
echo "ok: after uninstall only the CRD remains (keep)"
echo "PASS"
