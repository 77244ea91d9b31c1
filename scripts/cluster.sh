#!/usr/bin/env bash
# The local Kubernetes control plane for development and the `cluster` test tier:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (simulated GPU
# nodes), all from .deps/bin (built by scripts/setup.sh), on 127.0.0.1 and free ports.
#
#   scripts/cluster.sh up       start it; prints `export KUBECONFIG=...`
#   scripts/cluster.sh down     stop exactly what `up` started; keeps logs/
#   scripts/cluster.sh status   each component and whether it is running
#   scripts/cluster.sh stop|start|restart <component>
#                               one component (etcd, kube-apiserver, ...), same ports and
#                               data: for tests of clients surviving an outage
#
# Environment:
#   TESSERA_CLUSTER_DIR      state directory (default: <repo>/.cluster)
#   TESSERA_CLUSTER_NODES    simulated nodes (default 4)
#   TESSERA_CLUSTER_TIMEOUT  seconds `up` may wait for readiness (default 90)
#   TESSERA_DEPS_BIN         where the binaries are (default: <repo>/.deps/bin)
#
# Network rule: every component listens on and talks to 127.0.0.1 only. There is no
# kube-proxy; the service CIDR is configuration only; nodes advertise 127.0.0.1, so even
# `kubectl logs` (apiserver -> "kubelet") stays on loopback.
#
# Exit codes: 0 success, 1 a component failed or timed out, 2 setup missing or bad usage.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=$(realpath -m "${TESSERA_CLUSTER_DIR:-$REPO/.cluster}")
BIN=$(realpath -m "${TESSERA_DEPS_BIN:-$REPO/.deps/bin}")
NODES=${TESSERA_CLUSTER_NODES:-4}
TIMEOUT=${TESSERA_CLUSTER_TIMEOUT:-90}
KWOK_DIR=$REPO/tests/cluster/kwok

PKI=$STATE/pki
LOGS=$STATE/logs
PIDS=$STATE/pids
KUBECONFIG_FILE=$STATE/kubeconfig
# Start order; `down` stops them in reverse.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

log() { printf '[cluster %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'cluster.sh: %s\n' "$1" >&2; exit "${2:-1}"; }

usage() {
  sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# ------------------------------------------------------------------ processes

# The pid recorded for a component, or nothing.
recorded_pid() { awk -v n="$1" '$1 == n { print $2 }' "$PIDS" 2>/dev/null || true; }
recorded_exe() { awk -v n="$1" '$1 == n { print $3 }' "$PIDS" 2>/dev/null || true; }

# True while <pid> is alive and still runs <exe> (a reused pid or a zombie is not).
pid_runs() {
  local pid=$1 exe=$2 actual
  actual=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  [ "$actual" = "$exe" ] || [ "$actual" = "$exe (deleted)" ]
}

component_running() {
  local pid exe
  pid=$(recorded_pid "$1"); exe=$(recorded_exe "$1")
  [ -n "$pid" ] && [ -n "$exe" ] && pid_runs "$pid" "$exe"
}

# start <name> [VAR=value ...] -- <args...>: runs .deps/bin/<name> detached (own session,
# stdio to logs/<name>.log), records "name pid exe" in pids and the command line in
# cmd/<name> (one word a line: the environment, "--", the arguments) for `start <name>`.
start() {
  local name=$1; shift
  mkdir -p "$STATE/cmd"
  printf '%s\n' "$@" >"$STATE/cmd/$name"
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local exe
  exe=$(readlink -f "$BIN/$name")
  # 9>&- : the child must not inherit (and so hold) the state lock.
  # Started by its .deps/bin path (so `pgrep -f .deps/bin` finds it); the recorded exe is
  # the resolved file, which /proc/<pid>/exe names.
  env "${envs[@]}" setsid "$BIN/$name" "$@" </dev/null >>"$LOGS/$name.log" 2>&1 9>&- &
  local pid=$!
  if [ -f "$PIDS" ]; then
    awk -v n="$name" '$1 != n' "$PIDS" >"$PIDS.new"
    mv -f "$PIDS.new" "$PIDS"
  fi
  echo "$name $pid $exe" >>"$PIDS"
}

# stop_one <name> [grace_s]: TERM, then KILL after grace_s (default 15), and waits until
# it has exited. Only the recorded pid, and only while it still runs the recorded binary.
stop_one() {
  local name=$1 grace=${2:-15} pid exe deadline
  pid=$(recorded_pid "$name"); exe=$(recorded_exe "$name")
  [ -n "$pid" ] || return 0
  if ! pid_runs "$pid" "$exe"; then
    log "$name (pid $pid) is not running"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + grace))
  while pid_runs "$pid" "$exe" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
  if pid_runs "$pid" "$exe"; then
    log "$name (pid $pid) still runs ${grace}s after SIGTERM; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    while pid_runs "$pid" "$exe"; do sleep 0.1; done
  fi
  log "stopped $name (pid $pid)"
}

# Stops every recorded component, newest first.
stop_all() {
  [ -f "$PIDS" ] || return 0
  local i
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do stop_one "${COMPONENTS[$i]}"; done
}

# Removes everything in the state directory except logs/ (which also holds the lock).
clear_state() {
  [ -d "$STATE" ] || return 0
  find "$STATE" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} +
}

# ------------------------------------------------------------------ waiting

# Prints the last lines of a component's log, for a failure message.
show_log() {
  local f=$LOGS/$1.log
  [ -f "$f" ] || return 0
  printf -- '---- last lines of %s\n' "$f" >&2
  tail -n "${2:-25}" "$f" >&2
  printf -- '----\n' >&2
}

# wait_until <description> <component whose log explains a failure> <command...>:
# polls the command until it succeeds; fails on the overall deadline, or at once when a
# started component of WATCHED has exited.
WATCHED=("${COMPONENTS[@]}")
wait_until() {
  local what=$1 blame=$2; shift 2
  local name
  while ! "$@" >/dev/null 2>&1; do
    for name in "${WATCHED[@]}"; do
      if [ -n "$(recorded_pid "$name")" ] && ! component_running "$name"; then
        show_log "$name" 40
        fail_up "$name exited while waiting for $what (log: $LOGS/$name.log)"
      fi
    done
    if [ $SECONDS -ge "$UP_DEADLINE" ]; then
      show_log "$blame" 40
      if [ "$blame" = kube-apiserver ]; then
        printf -- '---- readiness checks not passing (%s/readyz?verbose)\n' "$API_URL" >&2
        curl -s --max-time 3 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
          "$API_URL/readyz?verbose" 2>&1 | grep -v ' ok$' >&2 || true
      fi
      fail_up "timed out after ${TIMEOUT}s waiting for $what (log: $LOGS/$blame.log)"
    fi
    sleep 0.25
  done
}

fail_up() {
  printf 'cluster.sh %s: %s\n' "$COMMAND" "$1" >&2
  if [ "$COMMAND" != up ]; then exit 1; fi
  log "stopping the components already started"
  stop_all
  clear_state
  # The free ports are released before the components bind them; if another process took
  # one in between, try once more with new ports.
  local name logs=()
  for name in "${COMPONENTS[@]}"; do logs+=("$LOGS/$name.log"); done
  if [ -z "${TESSERA_CLUSTER_RETRIED:-}" ] && grep -qs 'address already in use' "${logs[@]}"; then
    log "a chosen port was taken meanwhile; starting again with new ports"
    TESSERA_CLUSTER_RETRIED=1 exec "$0" up
  fi
  exit 1
}

# ------------------------------------------------------------------ certificates

new_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# sign <name> <subject> <extensions...>: key + certificate signed by the local CA.
sign() {
  local name=$1 subject=$2; shift 2
  new_key "$PKI/$name.key"
  openssl req -new -key "$PKI/$name.key" -subj "$subject" -out "$PKI/$name.csr" 2>/dev/null
  printf '%s\n' "$@" >"$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days 365 -sha256 \
    -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

make_pki() {
  mkdir -p "$PKI"
  new_key "$PKI/ca.key"
  openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=tessera-local-ca" -days 365 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "$PKI/ca.crt" 2>/dev/null
  local client=("keyUsage=critical,digitalSignature" "extendedKeyUsage=clientAuth")
  sign apiserver "/CN=kube-apiserver" "keyUsage=critical,digitalSignature" \
    "extendedKeyUsage=serverAuth" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:$SERVICE_IP"
  sign admin "/O=system:masters/CN=tessera-admin" "${client[@]}"
  sign controller-manager "/CN=system:kube-controller-manager" "${client[@]}"
  sign scheduler "/CN=system:kube-scheduler" "${client[@]}"
  sign kwok "/CN=tessera:kwok" "${client[@]}"
  # The identity the apiserver proxies aggregated API requests with (request headers);
  # controllers read the CA from kube-system/extension-apiserver-authentication.
  sign front-proxy-client "/CN=front-proxy-client" "${client[@]}"
  # Service-account tokens: the apiserver signs with the private key and verifies with
  # the public one; the controller manager signs tokens for its controllers.
  new_key "$PKI/sa.key"
  openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  chmod 600 "$PKI"/*.key
}

# write_kubeconfig <file> <user>: certificates embedded, so the file stands alone.
write_kubeconfig() {
  local file=$1 user=$2
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: tessera-local
  cluster:
    server: $API_URL
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$user.crt")
    client-key-data: $(base64 -w0 "$PKI/$user.key")
contexts:
- name: tessera-local
  context: {cluster: tessera-local, user: $user}
current-context: tessera-local
EOF
  chmod 600 "$file"
}

# ------------------------------------------------------------------ checks

free_ports() {
  # Binds <n> sockets to port 0 at once, so the ports are distinct, and prints them.
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

etcd_healthy() { curl -sf --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }
api_get() {
  curl -sf --max-time 3 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "$API_URL$1"
}
api_ready() { [ "$(api_get /readyz)" = ok ]; }
healthz() { [ "$(curl -sfk --max-time 2 "https://127.0.0.1:$1/healthz")" = ok ]; }
kubectl_() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" --request-timeout=5s "$@"; }

# True when exactly the expected number of simulated nodes report Ready=True.
nodes_ready() {
  local ready
  ready=$(kubectl_ get nodes -l tessera.dev/simulated=true \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' |
    grep -c '^True$')
  [ "$ready" -ge "$NODES" ]
}

# kwok acts for every simulated kubelet: it may touch nodes, pods, leases and events.
bind_kwok() {
  kubectl_ apply -f - <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: tessera-kwok
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "tessera:kwok"}
EOF
}

# Creates (or keeps) kwok-node-0 .. kwok-node-<NODES-1> from tests/cluster/kwok/node.yaml.
create_nodes() {
  local i
  for ((i = 0; i < NODES; i++)); do
    sed "s/@NAME@/kwok-node-$i/g" "$KWOK_DIR/node.yaml"
    echo "---"
  done | kubectl_ apply -f -
}

check_setup() {
  local b missing=()
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubectl; do
    [ -x "$BIN/$b" ] || missing+=("$b")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    die "missing in $BIN: ${missing[*]}; run scripts/setup.sh first (it builds the control plane)" 2
  fi
  for b in openssl curl python3 setsid; do
    command -v "$b" >/dev/null || die "'$b' is not installed; run scripts/setup.sh first" 2
  done
  case $NODES in '' | *[!0-9]* | 0) die "TESSERA_CLUSTER_NODES must be a positive number, got '$NODES'" 2 ;; esac
  case $TIMEOUT in '' | *[!0-9]* | 0) die "TESSERA_CLUSTER_TIMEOUT must be a positive number of seconds, got '$TIMEOUT'" 2 ;; esac
}

# ------------------------------------------------------------------ commands

all_running() {
  local name
  [ -f "$PIDS" ] || return 1
  for name in "${COMPONENTS[@]}"; do component_running "$name" || return 1; done
}

cmd_up() {
  check_setup
  mkdir -p "$STATE" "$LOGS"
  exec 9>"$LOGS/.lock"
  flock -w 120 9 || die "another cluster.sh holds $LOGS/.lock" 1

  if all_running; then
    echo "the control plane in $STATE is already running"
    echo "export KUBECONFIG=$KUBECONFIG_FILE"
    return 0
  fi
  if [ -f "$PIDS" ]; then
    log "found a partly running control plane in $STATE; stopping it and starting afresh"
    stop_all
  fi
  clear_state
  # Each start gets fresh logs; the previous run's stay beside them as <name>.previous.log.
  local name
  for name in "${COMPONENTS[@]}"; do
    if [ -f "$LOGS/$name.log" ]; then mv -f "$LOGS/$name.log" "$LOGS/$name.previous.log"; fi
  done
  UP_DEADLINE=$((SECONDS + TIMEOUT))

  trap 'fail_up "interrupted"' INT TERM
  read -r ETCD_PORT ETCD_PEER_PORT API_PORT KCM_PORT SCHED_PORT <<<"$(free_ports 5)"
  API_URL=https://127.0.0.1:$API_PORT
  SERVICE_CIDR=10.96.0.0/16
  SERVICE_IP=10.96.0.1
  cat >"$STATE/cluster.env" <<EOF
API_URL=$API_URL
ETCD_PORT=$ETCD_PORT
API_PORT=$API_PORT
CONTROLLER_MANAGER_PORT=$KCM_PORT
SCHEDULER_PORT=$SCHED_PORT
NODES=$NODES
EOF

  log "certificates"
  make_pki
  write_kubeconfig "$KUBECONFIG_FILE" admin
  mkdir -p "$STATE/kubeconfigs"
  for user in controller-manager scheduler kwok; do
    write_kubeconfig "$STATE/kubeconfigs/$user" "$user"
  done
  : >"$PIDS"

  log "etcd on 127.0.0.1:$ETCD_PORT"
  start etcd -- --name tessera --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "tessera=http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster-state new --unsafe-no-fsync --log-level warn
  wait_until "etcd to be healthy" etcd etcd_healthy

  log "kube-apiserver on $API_URL"
  start kube-apiserver -- \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
    --cert-dir "$STATE/apiserver" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --requestheader-client-ca-file "$PKI/ca.crt" \
    --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User \
    --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$PKI/front-proxy-client.crt" \
    --proxy-client-key-file "$PKI/front-proxy-client.key" \
    --authorization-mode RBAC \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" \
    --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --endpoint-reconciler-type none \
    --kubelet-preferred-address-types InternalIP \
    --allow-privileged=true --profiling=false
  wait_until "kube-apiserver to be ready ($API_URL/readyz)" kube-apiserver api_ready

  log "kube-controller-manager, kube-scheduler"
  start kube-controller-manager -- \
    --kubeconfig "$STATE/kubeconfigs/controller-manager" \
    --authentication-kubeconfig "$STATE/kubeconfigs/controller-manager" \
    --authorization-kubeconfig "$STATE/kubeconfigs/controller-manager" \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --cert-dir "$STATE/controller-manager" \
    --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --controllers '*' --profiling=false
  start kube-scheduler -- \
    --kubeconfig "$STATE/kubeconfigs/scheduler" \
    --authentication-kubeconfig "$STATE/kubeconfigs/scheduler" \
    --authorization-kubeconfig "$STATE/kubeconfigs/scheduler" \
    --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --cert-dir "$STATE/scheduler" \
    --leader-elect=false --profiling=false

  wait_until "kwok's role binding" kube-apiserver bind_kwok
  log "kwok managing $NODES simulated nodes"
  mkdir -p "$STATE/kwok-home"
  # HOME points kwok away from a developer's ~/.kwok/kwok.yaml: only our Stages apply.
  start kwok HOME="$STATE/kwok-home" -- \
    --kubeconfig "$STATE/kubeconfigs/kwok" --config "$KWOK_DIR/stages.yaml" \
    --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --node-ip 127.0.0.1 --cidr 10.244.0.0/16 --node-lease-duration-seconds 40
  wait_until "the simulated nodes to be created" kube-apiserver create_nodes

  wait_until "kube-controller-manager to be healthy" kube-controller-manager healthz "$KCM_PORT"
  wait_until "kube-scheduler to be healthy" kube-scheduler healthz "$SCHED_PORT"
  wait_until "$NODES simulated nodes to be Ready" kwok nodes_ready
  wait_until "the default service account" kube-controller-manager \
    kubectl_ get serviceaccount default -n default

  trap - INT TERM
  log "ready in ${SECONDS}s; logs in $LOGS"
  echo "export KUBECONFIG=$KUBECONFIG_FILE"
}

cmd_down() {
  if [ ! -d "$STATE" ]; then
    echo "no control plane in $STATE"
    return 0
  fi
  mkdir -p "$LOGS"
  exec 9>"$LOGS/.lock"
  flock -w 120 9 || die "another cluster.sh holds $LOGS/.lock" 1
  if [ ! -f "$PIDS" ]; then
    echo "no control plane running in $STATE"
  else
    stop_all
    echo "stopped the control plane in $STATE (logs kept in $LOGS)"
  fi
  clear_state
}

# Waits until a (re)started component serves again.
wait_component() {
  case $1 in
    etcd) wait_until "etcd to be healthy" etcd etcd_healthy ;;
    kube-apiserver) wait_until "kube-apiserver to be ready ($API_URL/readyz)" kube-apiserver api_ready ;;
    kube-controller-manager)
      wait_until "kube-controller-manager to be healthy" kube-controller-manager healthz "$KCM_PORT" ;;
    kube-scheduler) wait_until "kube-scheduler to be healthy" kube-scheduler healthz "$SCHED_PORT" ;;
    kwok) wait_until "$NODES simulated nodes to be Ready" kwok nodes_ready ;;
  esac
}

# stop|start|restart <component>: for tests of how clients survive a component's outage
# (the apiserver restarting, etcd unavailable, ...). `start` reuses the recorded command
# line, so ports, certificates and data stay the same.
cmd_component() {
  local action=$1 name=${2:-}
  case " ${COMPONENTS[*]} " in
    *" $name "*) ;;
    *) die "$action: unknown component '$name'; one of: ${COMPONENTS[*]}" 2 ;;
  esac
  [ -f "$PIDS" ] && [ -f "$STATE/cluster.env" ] || die "no control plane in $STATE; run scripts/cluster.sh up" 1
  mkdir -p "$LOGS"
  exec 9>"$LOGS/.lock"
  flock -w 120 9 || die "another cluster.sh holds $LOGS/.lock" 1
  # shellcheck disable=SC1091
  source "$STATE/cluster.env"
  KCM_PORT=$CONTROLLER_MANAGER_PORT SCHED_PORT=$SCHEDULER_PORT
  UP_DEADLINE=$((SECONDS + TIMEOUT))
  WATCHED=("$name")
  # A short grace: kube-apiserver lingers with watches open, and an outage is the point.
  if [ "$action" != start ]; then stop_one "$name" 5; fi
  if [ "$action" != stop ]; then
    if component_running "$name"; then
      echo "$name is already running (pid $(recorded_pid "$name"))"
      return 0
    fi
    local words=()
    mapfile -t words <"$STATE/cmd/$name"
    start "$name" "${words[@]}"
    wait_component "$name"
    log "started $name (pid $(recorded_pid "$name"))"
  fi
}

cmd_status() {
  local name pid state rc=0
  if [ ! -f "$PIDS" ]; then
    echo "no control plane in $STATE"
    return 1
  fi
  for name in "${COMPONENTS[@]}"; do
    pid=$(recorded_pid "$name")
    if [ -z "$pid" ]; then
      state="not started"; rc=1
    elif component_running "$name"; then
      state="running (pid $pid)"
    else
      state="stopped (was pid $pid)"; rc=1
    fi
    printf '%-24s %s\n' "$name" "$state"
  done
  if [ -f "$STATE/cluster.env" ]; then
    printf '%-24s %s\n' apiserver "$(sed -n 's/^API_URL=//p' "$STATE/cluster.env")"
  fi
  if [ $rc -eq 0 ] && [ -f "$KUBECONFIG_FILE" ]; then
    local nodes
    nodes=$(kubectl_ get nodes -l tessera.dev/simulated=true --no-headers 2>/dev/null |
      awk '{ n++ } $2 == "Ready" { r++ } END { printf "%d of %d Ready", r, n }') || nodes="unknown"
    printf '%-24s %s\n' "simulated nodes" "$nodes"
  fi
  printf '%-24s %s\n' kubeconfig "$KUBECONFIG_FILE" logs "$LOGS"
  return $rc
}

COMMAND=${1:-}
case $COMMAND in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  stop | start | restart) cmd_component "$COMMAND" "${2:-}" ;;
  -h | --help | help) usage ;;
  *) usage ;;
esac
