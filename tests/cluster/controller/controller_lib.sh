# Helpers for the controller's cluster tests. Source after tests/cluster/lib.sh:
#   source "$TESSERA_SOURCE_DIR/tests/cluster/controller/controller_lib.sh"
#
# Sourcing installs the TrainingJob CRD (manifests/crd/) and the controller's ClusterRole
# (manifests/rbac/), and makes an identity for this test: a client certificate signed by the
# cluster CA for user tessera-controller-<namespace> (not in system:masters), bound to that
# ClusterRole only, in $CONTROLLER_KUBECONFIG. So a permission the controller needs but
# manifests/rbac/ lacks fails the test.
#
#   start_controller [flags...]   tessera-controller as that user, watching $TEST_NAMESPACE,
#                                 in the background; killed at exit; waits for /readyz
#   apply_job <name> <workers> [extra spec YAML lines, indented two spaces]
#   job_field <name> <jsonpath>   e.g. job_field j '{.status.phase}'
#   wait_phase <timeout> <name> <phase>
#   pod_count <job>               pods labelled tessera.dev/job-name=<job>
#   expect_at_most_workers <job> <n>   fail when more than n pods carry the job's label
#   condition <name> <type>       "status/reason" of the job's condition <type>

CONTROLLER_WORK=$(mktemp -d)
CONTROLLER_USER="tessera-controller-$TEST_NAMESPACE"
CONTROLLER_KUBECONFIG="$CONTROLLER_WORK/kubeconfig"
CONTROLLER_LOG="${TESSERA_CLUSTER_DIR:-$CONTROLLER_WORK}/logs/controller-$TEST_NAMESPACE.log"
CONTROLLER_PIDS=()

# Retries a command a few times: parallel tests apply the same cluster-wide objects.
_ctl_retry() {
  local i
  for i in 1 2 3 4 5; do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  "$@"
}

_ctl_install() {
  _ctl_retry kubectl apply -f "$TESSERA_SOURCE_DIR/manifests/crd/trainingjobs.tessera.dev.yaml"
  wait_for 60 "the TrainingJob CRD to be established" \
    kubectl wait --for=condition=Established --timeout=5s crd/trainingjobs.tessera.dev
  _ctl_retry kubectl apply -f "$TESSERA_SOURCE_DIR/manifests/rbac/role.yaml"
}

_ctl_identity() {
  local pki="$TESSERA_CLUSTER_DIR/pki" server
  [ -f "$pki/ca.key" ] || fail "no cluster CA key at $pki/ca.key"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$CONTROLLER_WORK/user.key" 2>/dev/null
  openssl req -new -key "$CONTROLLER_WORK/user.key" -subj "/CN=$CONTROLLER_USER" \
    -out "$CONTROLLER_WORK/user.csr" 2>/dev/null
  printf 'keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n' >"$CONTROLLER_WORK/user.ext"
  openssl x509 -req -in "$CONTROLLER_WORK/user.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days 1 -sha256 -extfile "$CONTROLLER_WORK/user.ext" \
    -out "$CONTROLLER_WORK/user.crt" 2>/dev/null || fail "could not sign a client certificate"
  server=$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
  cat >"$CONTROLLER_KUBECONFIG" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: $CONTROLLER_USER
  user:
    client-certificate-data: $(base64 -w0 "$CONTROLLER_WORK/user.crt")
    client-key-data: $(base64 -w0 "$CONTROLLER_WORK/user.key")
contexts:
- name: local
  context: {cluster: local, user: $CONTROLLER_USER, namespace: $TEST_NAMESPACE}
current-context: local
YAML
  kubectl create clusterrolebinding "$CONTROLLER_USER" --clusterrole=tessera-controller \
    --user="$CONTROLLER_USER" >/dev/null
  on_exit "kubectl delete clusterrolebinding $CONTROLLER_USER"
  local groups
  groups=$(kubectl --kubeconfig "$CONTROLLER_KUBECONFIG" auth whoami -o jsonpath='{.status.userInfo.groups}')
  case "$groups" in *system:masters*) fail "the controller's test identity is in system:masters" ;; esac
}

_ctl_free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Starts the controller; sets CONTROLLER_PID, CONTROLLER_METRICS_PORT, CONTROLLER_HEALTH_PORT.
start_controller() {
  CONTROLLER_METRICS_PORT=$(_ctl_free_port)
  CONTROLLER_HEALTH_PORT=$(_ctl_free_port)
  mkdir -p "$(dirname "$CONTROLLER_LOG")"
  # Simulated pods have fake IPs: never poll them (--progress-polling=loopback-only).
  "$TESSERA_BIN_DIR/tessera-controller" --kubeconfig "$CONTROLLER_KUBECONFIG" \
    --namespace "$TEST_NAMESPACE" \
    --metrics-bind-address "127.0.0.1:$CONTROLLER_METRICS_PORT" \
    --health-probe-bind-address "127.0.0.1:$CONTROLLER_HEALTH_PORT" \
    --progress-polling=loopback-only -v "$@" >>"$CONTROLLER_LOG" 2>&1 &
  CONTROLLER_PID=$!
  CONTROLLER_PIDS+=("$CONTROLLER_PID")
  wait_for 60 "the controller's /readyz" curl -sf "http://127.0.0.1:$CONTROLLER_HEALTH_PORT/readyz"
}

stop_controller() {  # <pid>: SIGTERM, then wait for it to exit
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || return 0
  wait "$pid" 2>/dev/null || true
}

apply_job() {
  local name=$1 workers=$2 extra=${3:-}
  kns apply -f - <<YAML
apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata:
  name: $name
spec:
  workers: $workers
$extra
  template:
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: worker
        image: tessera/worker:test
        command: ["/bin/true"]
YAML
}

job_field() { kns get trainingjob "$1" -o jsonpath="$2"; }

_ctl_phase_is() { [ "$(job_field "$1" '{.status.phase}')" = "$2" ]; }
wait_phase() { wait_for "$1" "job $2 to be $3" _ctl_phase_is "$2" "$3"; }

pod_count() { kns get pods -l "tessera.dev/job-name=$1" -o name | wc -l; }

expect_at_most_workers() {
  local n
  n=$(pod_count "$1")
  [ "$n" -le "$2" ] || fail "job $1 has $n pods, more than its $2 workers"
}

condition() {
  job_field "$1" "{.status.conditions[?(@.type==\"$2\")].status}/{.status.conditions[?(@.type==\"$2\")].reason}"
}

_ctl_exit() {
  local status=$? pid
  set +e
  for pid in "${CONTROLLER_PIDS[@]}"; do stop_controller "$pid"; done
  if [ $status -ne 0 ] && [ -f "$CONTROLLER_LOG" ]; then
    printf -- '---- controller log (last 60 lines of %s)\n' "$CONTROLLER_LOG" >&2
    tail -n 60 "$CONTROLLER_LOG" >&2
  fi
  rm -rf "$CONTROLLER_WORK"
  (exit $status)
  _lib_cleanup
}
trap _ctl_exit EXIT

export -f _ctl_phase_is job_field kns
_ctl_install
_ctl_identity
