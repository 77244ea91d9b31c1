#!/usr/bin/env bash
# The apiserver reports the Kubernetes version pinned in scripts/versions.env, both via
# `kubectl version` and the raw /version endpoint (helm and clients rely on it).
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
load_versions
[ -n "${KUBERNETES_VERSION:-}" ] || fail "KUBERNETES_VERSION is not set in scripts/versions.env"

server=$(kubectl version -o json | json_get 'd["serverVersion"]["gitVersion"]')
expect_eq "$KUBERNETES_VERSION" "$server" "kubectl version: serverVersion.gitVersion"

raw=$(kubectl get --raw /version | json_get 'd["gitVersion"]')
expect_eq "$KUBERNETES_VERSION" "$raw" "/version gitVersion"

client=$(kubectl version -o json | json_get 'd["clientVersion"]["gitVersion"]')
expect_eq "$KUBERNETES_VERSION" "$client" "kubectl client gitVersion"
