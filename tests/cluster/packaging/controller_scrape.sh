#!/usr/bin/env bash
# The chart's identity at work: after `helm install`, tessera-controller runs (on this
# machine, as kwok runs no containers) with a TokenRequest token of the chart's
# ServiceAccount, and so only with the chart's RBAC; it reconciles an example job
# (manifests/examples/cpu-tiny.yaml) to Running, and says whose pod holds a worker's name
# (which it reads: GET pods). `promtool check metrics` is clean on its /metrics, and a real
# Prometheus scraping it (loopback) answers every panel query of the "Tessera / Jobs"
# dashboard with at least one series; empty panels are listed by title.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
command -v helm >/dev/null || fail "helm not found on PATH: run scripts/setup.sh first"
command -v prometheus >/dev/null || fail "prometheus not found: install Debian's prometheus package"
controller=$TESSERA_BIN_DIR/tessera-controller
[ -x "$controller" ] || fail "no $controller: build the tessera-controller target"
chart=$TESSERA_SOURCE_DIR/charts/tessera
work=$(mktemp -d)
on_exit "rm -rf $work"
export HELM_CACHE_HOME=$work/cache HELM_CONFIG_HOME=$work/config HELM_DATA_HOME=$work/data
release=tessera-$(head -c3 /dev/urandom | od -An -tx1 | tr -d ' \n')
sa=$release-controller
free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
http_get() { /usr/bin/python3 -c 'import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode(), end="")' "$1"; }

helm install "$release" "$chart" --namespace "$TEST_NAMESPACE" --take-ownership \
  --set dashboards.enabled=false --wait --timeout 90s >"$work/install.txt" 2>&1 ||
  { cat "$work/install.txt"; fail "helm install"; }
on_exit "helm uninstall $release --namespace $TEST_NAMESPACE --wait --timeout 30s"
kubectl wait --for=condition=Established --timeout=30s crd/trainingjobs.tessera.dev >/dev/null

# A kubeconfig holding only a bound token of the chart's ServiceAccount.
token=$(kubectl create token "$sa" --namespace "$TEST_NAMESPACE" --duration 30m)
server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
ca=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
cat >"$work/kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "$server", certificate-authority-data: "$ca"}}]
users: [{name: $sa, user: {token: "$token"}}]
contexts: [{name: local, context: {cluster: local, user: $sa, namespace: $TEST_NAMESPACE}}]
current-context: local
YAML
expect_eq "system:serviceaccount:$TEST_NAMESPACE:$sa" \
  "$(kubectl --kubeconfig "$work/kubeconfig" auth whoami -o jsonpath='{.status.userInfo.username}')" "controller identity"

# The Deployment's flags, with loopback addresses (and without --leader-elect when this
# build's controller does not have it yet).
mport=$(free_port); hport=$(free_port)
args=(--kubeconfig "$work/kubeconfig" --namespace "$TEST_NAMESPACE"
      --metrics-bind-address="127.0.0.1:$mport" --health-probe-bind-address="127.0.0.1:$hport"
      --progress-polling=off --log-format=json)
if "$controller" --help 2>&1 | grep -- '--leader-elect' >/dev/null; then args+=(--leader-elect); fi
log=${TESSERA_CLUSTER_DIR:-$work}/logs/packaging-controller-$TEST_NAMESPACE.log
mkdir -p "$(dirname "$log")"
POD_NAMESPACE=$TEST_NAMESPACE POD_NAME=$release-local "$controller" "${args[@]}" >"$log" 2>&1 &
controller_pid=$!
on_exit "kill $controller_pid; wait $controller_pid"
wait_for 60 "the controller's /readyz" http_get "http://127.0.0.1:$hport/readyz" ||
  { cat "$log"; fail "controller not ready"; }
echo "ok: tessera-controller ready as $sa (${args[*]: -1})"

kns apply -f "$TESSERA_SOURCE_DIR/manifests/examples/cpu-tiny.yaml" >/dev/null
wait_for 90 "cpu-tiny Running with its workers" bash -c \
  "[ \"\$(kubectl -n $TEST_NAMESPACE get tj cpu-tiny -o jsonpath='{.status.phase}')\" = Running ]" ||
  { tail -20 "$log"; fail "cpu-tiny did not reach Running"; }
expect_eq 2 "$(kns get pods -l tessera.dev/job-name=cpu-tiny -o name | wc -l)" "cpu-tiny worker pods"
if grep -q '"code":403\|forbidden' "$log"; then
  grep -m3 '403\|forbidden' "$log"; fail "the controller was refused something by RBAC"
fi
echo "ok: the controller reconciled cpu-tiny to Running with the chart's RBAC"
# A worker's pod name held by a pod the job does not own: the controller's create is refused
# (already exists), it reads that pod (GET pods, which the chart's RBAC must grant) and says
# in the job's Created condition whose pod it is.
kns apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: held-worker-1}
spec: {containers: [{name: c, image: example.com/not-a-worker}]}
YAML
/usr/bin/python3 -c 'import sys, yaml
job = yaml.safe_load(open(sys.argv[1])); job["metadata"]["name"] = "held"
print(yaml.safe_dump(job))' "$TESSERA_SOURCE_DIR/manifests/examples/cpu-tiny.yaml" | kns apply -f - >/dev/null
created() { kns get tj held -o jsonpath="{.status.conditions[?(@.type==\"Created\")].$1}"; }
failed_create() { [ "$(created reason)" = FailedCreate ]; }
wait_for 60 "job held's Created condition FailedCreate" failed_create
message=$(created message)
[[ $message == *"create pod $TEST_NAMESPACE/held-worker-1: one of that name exists that this job does not own (its controller: no controller)"* ]] ||
  fail "job held's Created condition: '$message' (want: one of that name exists that this job does not own)"
echo "ok: the controller says whose pod holds a worker's name: $message"
if [[ " ${args[*]} " == *" --leader-elect "* ]]; then
  # The Lease is in the release namespace ($POD_NAMESPACE), where the chart's Role allows it.
  holder=$(kns get lease tessera-controller -o jsonpath='{.spec.holderIdentity}')
  [ -n "$holder" ] || fail "no holder of Lease tessera-controller in $TEST_NAMESPACE"
  echo "ok: Lease tessera-controller in $TEST_NAMESPACE held by $holder"
fi

http_get "http://127.0.0.1:$mport/metrics" >"$work/metrics.txt"
if ! promtool check metrics <"$work/metrics.txt" >"$work/promtool.txt" 2>&1 || [ -s "$work/promtool.txt" ]; then
  cat "$work/promtool.txt"; fail "promtool check metrics reported problems on the controller's /metrics"
fi
echo "ok: promtool check metrics is clean on the controller's /metrics"

pport=$(free_port)
cat >"$work/prometheus.yml" <<YAML
global: {scrape_interval: 1s, scrape_timeout: 1s}
scrape_configs:
  - job_name: tessera-controller
    static_configs:
      - targets: ["127.0.0.1:$mport"]
        labels: {namespace: $TEST_NAMESPACE, pod: $release-local}
YAML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$pport" --log.level=warn >"$work/prometheus.log" 2>&1 &
prometheus_pid=$!
on_exit "kill $prometheus_pid; wait $prometheus_pid"
api="http://127.0.0.1:$pport/api/v1"
wait_for 60 "Prometheus ready on 127.0.0.1:$pport" http_get "http://127.0.0.1:$pport/-/ready"
scraped() {
  http_get "$api/query?query=count_over_time(tessera_controller_leader%5B1m%5D)%20%3E%3D%205" |
    /usr/bin/python3 -c 'import json, sys; sys.exit(0 if json.load(sys.stdin)["data"]["result"] else 1)'
}
wait_for 60 "5 scrapes of the controller" scraped
/usr/bin/python3 - "$TESSERA_SOURCE_DIR/dashboards/tessera-jobs.json" "$api" <<'PY'
import json, sys, urllib.parse, urllib.request
board, api = sys.argv[1:3]
empty, checked = [], 0
for panel in json.load(open(board))["panels"]:
    for t in panel.get("targets", []):
        q = t["expr"].replace("$__rate_interval", "30s").replace("$namespace", ".*")
        reply = json.load(urllib.request.urlopen(api + "/query?" + urllib.parse.urlencode({"query": q}), timeout=10))
        checked += 1
        if reply.get("status") == "success" and reply["data"]["result"]:
            print(f"ok: panel {panel['title']!r} ({t['refId']}): {len(reply['data']['result'])} series")
        else:
            empty.append(f"{panel['title']} ({t['refId']}: {t['expr']})")
for e in empty:
    print(f"FAIL: empty panel: {e}")
print(f"{checked} queries; {len(empty)} empty")
sys.exit(1 if empty else 0)
PY
echo "PASS"
