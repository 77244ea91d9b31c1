#!/usr/bin/env bash
# helm (the pinned version) renders and installs a tiny throwaway chart against the
# local control plane, and uninstalls it.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
load_versions
command -v helm >/dev/null || fail "helm not found on PATH: run scripts/setup.sh first"

work=$(mktemp -d)
on_exit "rm -rf $work"
# Keep helm's caches and config out of the developer's home.
export HELM_CACHE_HOME=$work/cache HELM_CONFIG_HOME=$work/config HELM_DATA_HOME=$work/data

version=$(helm version --template '{{ .Version }}')
expect_eq "$HELM_VERSION" "$version" "helm version"

chart=$work/smoke
mkdir -p "$chart/templates"
cat >"$chart/Chart.yaml" <<YAML
apiVersion: v2
name: smoke
version: 0.1.0
YAML
cat >"$chart/values.yaml" <<YAML
greeting: hello
YAML
cat >"$chart/templates/configmap.yaml" <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-greeting
data:
  greeting: {{ .Values.greeting | quote }}
YAML

rendered=$(helm template demo "$chart" --set greeting=bonjour)
grep -q 'name: demo-greeting' <<<"$rendered" || fail "helm template: no demo-greeting in: $rendered"
grep -q 'greeting: "bonjour"' <<<"$rendered" || fail "helm template: value not applied in: $rendered"
echo "ok: helm template rendered the chart"

helm install demo "$chart" --namespace "$TEST_NAMESPACE" --set greeting=hallo --wait --timeout 60s
expect_eq hallo "$(kns get configmap demo-greeting -o jsonpath='{.data.greeting}')" "installed greeting"
helm uninstall demo --namespace "$TEST_NAMESPACE" --wait --timeout 60s
wait_for 30 "configmap demo-greeting to be removed by helm uninstall" \
  bash -c '! kubectl -n "$TEST_NAMESPACE" get configmap demo-greeting >/dev/null 2>&1'
