# Helpers for bash tests against the local control plane (the `cluster` ctest tier).
# Source it first thing:  source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
#
# Sourcing checks that the control plane is reachable (failing, never skipping, when it
# is not), creates a namespace of the test's own ($TEST_NAMESPACE, also kubectl's default
# for `kns`), and deletes it when the script exits. On failure it prints the namespace's
# objects and events to help find out why.
#
#   fail "message"                          print FAIL: message and exit 1
#   wait_for <timeout_s> <description> <command...>
#                                           run the command until it succeeds, or fail
#                                           naming what was awaited and its last output
#   expect_eq <expected> <actual> <what>    fail unless equal
#   kns <kubectl args...>                   kubectl in the test namespace
#   json_get <python expression on d>       read JSON on stdin, print the expression
#   on_exit "<command>"                     run a command at exit (before the namespace
#                                           is deleted), e.g. to delete a cluster-scoped
#                                           object the test created
# Not for: waiting on wall-clock time (there is no sleep helper on purpose).

set -euo pipefail

fail() {
  printf 'FAIL: %s\n' "$*" >&2
  exit 1
}

_lib_last_output=""
wait_for() {
  local timeout=$1 what=$2; shift 2
  local deadline=$((SECONDS + timeout))
  while true; do
    if _lib_last_output=$("$@" 2>&1); then
      return 0
    fi
    if [ $SECONDS -ge $deadline ]; then
      printf 'last output of `%s`:\n%s\n' "$*" "$_lib_last_output" >&2
      fail "timed out after ${timeout}s waiting for $what"
    fi
    sleep 0.5
  done
}

expect_eq() {
  local expected=$1 actual=$2 what=${3:-value}
  if [ "$expected" != "$actual" ]; then
    fail "$what: expected '$expected', got '$actual'"
  fi
  printf 'ok: %s = %s\n' "$what" "$actual"
}

kns() { kubectl --namespace "$TEST_NAMESPACE" "$@"; }

json_get() {
  /usr/bin/python3 -c 'import json, sys; d = json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"
}

_lib_exit_commands=()
on_exit() { _lib_exit_commands+=("$1"); }

# Reads NAME=value lines of scripts/versions.env into the environment (pins: one source).
load_versions() {
  # shellcheck disable=SC1091
  source "$TESSERA_SOURCE_DIR/scripts/versions.env"
}

_lib_cleanup() {
  local status=$? cmd
  set +e
  if [ $status -ne 0 ] && [ -n "${TEST_NAMESPACE:-}" ]; then
    printf '\n---- objects in namespace %s\n' "$TEST_NAMESPACE" >&2
    kubectl get --namespace "$TEST_NAMESPACE" all,configmaps -o wide >&2 2>&1
    printf -- '---- events\n' >&2
    kubectl get --namespace "$TEST_NAMESPACE" events --sort-by=.lastTimestamp >&2 2>&1
    printf -- '---- component logs: %s/logs\n' "${TESSERA_CLUSTER_DIR:-?}" >&2
  fi
  for cmd in "${_lib_exit_commands[@]}"; do
    eval "$cmd" >/dev/null 2>&1
  done
  if [ -n "${TEST_NAMESPACE:-}" ]; then
    kubectl delete namespace "$TEST_NAMESPACE" --wait=false >/dev/null 2>&1
  fi
  exit $status
}

_lib_require_cluster() {
  [ -n "${TESSERA_SOURCE_DIR:-}" ] || fail "TESSERA_SOURCE_DIR is not set; run this through ctest"
  command -v kubectl >/dev/null ||
    fail "kubectl not found on PATH ($TESSERA_SOURCE_DIR/.deps/bin): run scripts/setup.sh first"
  [ -n "${KUBECONFIG:-}" ] && [ -f "$KUBECONFIG" ] ||
    fail "no kubeconfig at '${KUBECONFIG:-}': the control plane is not up (see the cluster_up test; run scripts/setup.sh first)"
  kubectl get --raw /readyz >/dev/null 2>&1 ||
    fail "the apiserver in $KUBECONFIG does not answer /readyz (logs: ${TESSERA_CLUSTER_DIR:-?}/logs)"
}

# A namespace named after the test script plus a random suffix, deleted at exit.
_lib_create_namespace() {
  local base
  base=$(basename "$0" .sh | tr '_A-Z' '-a-z' | tr -cd 'a-z0-9-' | cut -c1-40)
  TEST_NAMESPACE="t-${base}-$(head -c4 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  kubectl create namespace "$TEST_NAMESPACE" >/dev/null
  kubectl label namespace "$TEST_NAMESPACE" tessera.dev/test=true >/dev/null
  # Pods are refused until the service-account controller has made `default`. Right after a
  # test restarted the apiserver, kube-controller-manager's watches may take a while to resume.
  wait_for 90 "service account default in $TEST_NAMESPACE" kns get serviceaccount default
  export TEST_NAMESPACE
}

trap _lib_cleanup EXIT
_lib_require_cluster
_lib_create_namespace
