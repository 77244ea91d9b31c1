#!/usr/bin/env bash
# manifests/ (the kustomize base): `kubectl kustomize manifests/` renders the CRD, RBAC and
# controller objects, and `kubectl apply --dry-run=server` accepts all of them. The base's
# objects live in namespace tessera-system, which a dry run cannot create before using it,
# so the server check applies the base through an overlay that moves it into this test's
# namespace (exactly what a user's overlay does); the base itself is checked as rendered.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
work=$(mktemp -d)
on_exit "rm -rf $work"

kubectl kustomize "$TESSERA_SOURCE_DIR/manifests" >"$work/base.yaml" ||
  fail "kubectl kustomize manifests/ failed"
kinds=$(grep '^kind:' "$work/base.yaml" | sort | tr '\n' ' ')
expect_eq "kind: ClusterRole kind: ClusterRoleBinding kind: CustomResourceDefinition kind: Deployment kind: Namespace kind: Role kind: RoleBinding kind: Service kind: ServiceAccount " \
  "$kinds" "kinds in kubectl kustomize manifests/"
# Its Service, probes and bindings reach the controller (as in the chart's rendering).
/usr/bin/python3 "$TESSERA_SOURCE_DIR/tests/cluster/packaging/packaging_check.py" wiring "$work/base.yaml"
expect_eq restricted "$(/usr/bin/python3 -c 'import sys, yaml
print([d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Namespace"][0]["metadata"]["labels"].get("pod-security.kubernetes.io/enforce"))' "$work/base.yaml")" \
  "Pod Security Standard enforced in tessera-system"
# The cluster-scoped part applies as it is.
/usr/bin/python3 - "$work/base.yaml" >"$work/cluster-scoped.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
print(yaml.safe_dump_all([d for d in docs if d["kind"] in
      ("CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Namespace")]))
PY
kubectl apply --dry-run=server --validate=strict -f "$work/cluster-scoped.yaml" ||
  fail "kubectl apply --dry-run=server refused the cluster-scoped objects of manifests/"

mkdir -p "$work/overlay"
base=$(/usr/bin/python3 -c 'import os, sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' \
  "$TESSERA_SOURCE_DIR/manifests" "$work/overlay")
cat >"$work/overlay/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: $TEST_NAMESPACE
resources:
  - $base
YAML
kubectl kustomize "$work/overlay" >"$work/overlay.yaml"
# The bindings follow the ServiceAccount into the overlay's namespace.
subjects=$(/usr/bin/python3 -c 'import sys, yaml
print(" ".join(sorted({s["namespace"] for d in yaml.safe_load_all(open(sys.argv[1])) if d
      and d["kind"].endswith("Binding") for s in d["subjects"]})))' "$work/overlay.yaml")
expect_eq "$TEST_NAMESPACE" "$subjects" "namespace of the bindings' subjects after the overlay"
kubectl apply --dry-run=server --validate=strict -f "$work/overlay.yaml" >"$work/apply.txt" 2>&1 ||
  { cat "$work/apply.txt"; fail "kubectl apply --dry-run=server refused manifests/ (via the overlay)"; }
cat "$work/apply.txt"
expect_eq "$(grep -c '^kind:' "$work/overlay.yaml")" "$(grep -c '(server dry run)' "$work/apply.txt")" \
  "objects of manifests/ accepted by the server"
echo "PASS"
