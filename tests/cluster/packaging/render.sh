#!/usr/bin/env bash
# charts/tessera: `helm lint --strict`; the default rendering equals manifests/ (CRD body,
# RBAC rules, controller Deployment, Service, ServiceAccount) and meets the restricted Pod
# Security Standard; the default and the all-features renderings pass
# `kubectl apply --dry-run=server` (strict field validation) on the local control plane;
# values.schema.json refuses bad values naming the key.
#
# The ServiceMonitor and PodMonitor need monitoring.coreos.com: monitoring-crds.yaml stands in
# for the Prometheus Operator's CRDs. They are created when absent and left for the rest of
# the run (another test may be using them); the control plane is thrown away afterwards.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
command -v helm >/dev/null || fail "helm not found on PATH: run scripts/setup.sh first"
here=$TESSERA_SOURCE_DIR/tests/cluster/packaging
chart=$TESSERA_SOURCE_DIR/charts/tessera
work=$(mktemp -d)
on_exit "rm -rf $work"
export HELM_CACHE_HOME=$work/cache HELM_CONFIG_HOME=$work/config HELM_DATA_HOME=$work/data

helm lint --strict "$chart" >"$work/lint.txt" 2>&1 || { cat "$work/lint.txt"; fail "helm lint --strict charts/tessera"; }
grep -q '0 chart(s) failed' "$work/lint.txt" || { cat "$work/lint.txt"; fail "helm lint reported failures"; }
echo "ok: helm lint --strict"
helm lint --strict "$chart" -f "$here/all-features-values.yaml" >"$work/lint2.txt" 2>&1 ||
  { cat "$work/lint2.txt"; fail "helm lint --strict with all-features values"; }
echo "ok: helm lint --strict with all-features values"

# The packaged chart (what a chart repository serves) renders exactly what the directory does.
helm package "$chart" --destination "$work/pkg" >/dev/null
expect_eq "$(helm template t "$chart" | sha256sum)" "$(helm template t "$work"/pkg/tessera-*.tgz | sha256sum)" \
  "rendering of the packaged chart (sha256)"

# The default rendering, named as manifests/ names things, is manifests/.
helm template tessera "$chart" --namespace tessera-system >"$work/manifests-like.yaml"
/usr/bin/python3 "$here/packaging_check.py" rendered "$work/manifests-like.yaml"
/usr/bin/python3 "$here/packaging_check.py" restricted "$work/manifests-like.yaml"
/usr/bin/python3 "$here/packaging_check.py" wiring "$work/manifests-like.yaml"

# Server-side dry runs in the test's namespace: every object must be accepted as written.
server_dry_run() {
  local file=$1 what=$2
  kubectl apply --dry-run=server --validate=strict -f "$file" >"$work/apply.txt" 2>&1 ||
    { cat "$work/apply.txt"; fail "kubectl apply --dry-run=server refused the $what rendering"; }
  local kinds
  kinds=$(grep -c '(server dry run)' "$work/apply.txt")
  expect_eq "$(grep -c '^kind:' "$file")" "$kinds" "objects accepted by the server ($what)"
}
helm template t "$chart" --namespace "$TEST_NAMESPACE" >"$work/default.yaml"
server_dry_run "$work/default.yaml" default
for kind in CustomResourceDefinition ServiceAccount ClusterRole ClusterRoleBinding Role RoleBinding Service Deployment ConfigMap; do
  grep -q "^kind: $kind\$" "$work/default.yaml" || fail "default rendering has no $kind"
done
for kind in ServiceMonitor PodMonitor; do
  if grep -q "^kind: $kind\$" "$work/default.yaml"; then fail "default rendering has a $kind (off by default)"; fi
done
echo "ok: default rendering has the expected kinds"

for crd in servicemonitors podmonitors; do
  kubectl get crd "$crd.monitoring.coreos.com" >/dev/null 2>&1 ||
    kubectl create -f <(/usr/bin/python3 -c '
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d["metadata"]["name"].startswith(sys.argv[2] + "."):
        print(yaml.safe_dump(d))' "$here/monitoring-crds.yaml" "$crd") 2>/dev/null || true
done
wait_for 30 "monitoring.coreos.com CRDs established" \
  kubectl wait --for=condition=Established --timeout=5s \
  crd/servicemonitors.monitoring.coreos.com crd/podmonitors.monitoring.coreos.com
helm template t "$chart" --namespace "$TEST_NAMESPACE" -f "$here/all-features-values.yaml" >"$work/all.yaml"
server_dry_run "$work/all.yaml" all-features
/usr/bin/python3 "$here/packaging_check.py" restricted "$work/all.yaml"
/usr/bin/python3 "$here/packaging_check.py" wiring "$work/all.yaml"
# A ServiceMonitor in the monitoring stack's namespace still finds the release's Service.
helm template t "$chart" --namespace "$TEST_NAMESPACE" -f "$here/all-features-values.yaml" \
  --set metrics.serviceMonitor.namespace=monitoring >"$work/monitor-elsewhere.yaml"
/usr/bin/python3 "$here/packaging_check.py" wiring "$work/monitor-elsewhere.yaml"
all_json=$(/usr/bin/python3 -c 'import json, sys, yaml
print(json.dumps({"items": [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]}))' "$work/all.yaml")
expect_eq kube-prometheus-stack "$(json_get '[i for i in d["items"] if i["kind"]=="ServiceMonitor"][0]["metadata"]["labels"]["release"]' <<<"$all_json")" "ServiceMonitor release label"
expect_eq kube-prometheus-stack "$(json_get '[i for i in d["items"] if i["kind"]=="PodMonitor"][0]["metadata"]["labels"]["release"]' <<<"$all_json")" "PodMonitor release label"
expect_eq "['--leader-elect', '--metrics-bind-address=:9090', '--health-probe-bind-address=:9091', '--workers=8', '--qps=20.5', '--burst=40', '--log-format=text', '--progress-polling=off', '--namespace=team-a', '-v', '-v', '--progress-interval=10']" \
  "$(json_get '[i for i in d["items"] if i["kind"]=="Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["args"]' <<<"$all_json")" \
  "controller args with all features"
expect_eq 2 "$(json_get 'len([i for i in d["items"] if i["kind"]=="ConfigMap" and i["metadata"]["labels"].get("grafana_dashboard")=="1"])' <<<"$all_json")" \
  "dashboard ConfigMaps labelled grafana_dashboard=1"
expect_eq "15s 5s" "$(json_get '" ".join(v for i in d["items"] if i["kind"]=="ServiceMonitor" for e in i["spec"]["endpoints"] for v in (e["interval"], e["scrapeTimeout"]))' <<<"$all_json")" \
  "ServiceMonitor interval and scrapeTimeout"
expect_eq "{'any': True}" "$(json_get '[i for i in d["items"] if i["kind"]=="PodMonitor"][0]["spec"]["namespaceSelector"]' <<<"$all_json")" \
  "PodMonitor namespaceSelector (metrics.podMonitor.namespaceSelector)"
expect_eq "10s 5s" "$(json_get '" ".join(v for i in d["items"] if i["kind"]=="PodMonitor" for e in i["spec"]["podMetricsEndpoints"] for v in (e["interval"], e["scrapeTimeout"]))' <<<"$all_json")" \
  "PodMonitor interval and scrapeTimeout"
expect_eq 2 "$(helm template t "$chart" --set dashboards.label=tessera_dashboard --set dashboards.labelValue=yes |
  /usr/bin/python3 -c 'import sys, yaml
print(len([d for d in yaml.safe_load_all(sys.stdin) if d and d["kind"] == "ConfigMap" and d["metadata"]["labels"].get("tessera_dashboard") == "yes"]))')" \
  "dashboard ConfigMaps labelled dashboards.label=dashboards.labelValue"

# An image digest replaces the tag: repository@digest.
digest=sha256:$(printf '%064d' 0 | tr 0 a)
expect_eq "tessera/controller@$digest" "$(helm template t "$chart" --set controller.image.digest="$digest" |
  /usr/bin/python3 -c 'import sys, yaml
print([d for d in yaml.safe_load_all(sys.stdin) if d and d["kind"] == "Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["image"])')" \
  "controller image with a digest"

# values.schema.json and the templates refuse bad values with the key's name.
refuses() {
  local want=$1; shift
  if helm template t "$chart" "$@" >"$work/bad.txt" 2>&1; then fail "helm template $* was accepted"; fi
  grep -q -- "$want" "$work/bad.txt" || { cat "$work/bad.txt"; fail "helm template $*: message lacks '$want'"; }
  echo "ok: refused $* ($want)"
}
refuses "additional properties 'replica' not allowed" --set controller.replica=2
refuses "/controller/workers" --set controller.workers=0
refuses "/controller/logFormat" --set controller.logFormat=xml
refuses "/metrics/serviceMonitor/interval" --set metrics.serviceMonitor.interval=soon
refuses "/metrics/podMonitor/scrapeTimeout" --set metrics.podMonitor.scrapeTimeout=10sec
refuses "/controller/image/digest" --set controller.image.digest=latest
refuses "needs controller.leaderElection.enabled" --set controller.replicas=2 --set controller.leaderElection.enabled=false
refuses "serviceAccount.name is required" --set serviceAccount.create=false
refuses "needs metrics.service.enabled" --set metrics.serviceMonitor.enabled=true --set metrics.service.enabled=false
echo "PASS"
