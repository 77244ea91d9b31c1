# Shared by the api cluster tests: sources tests/cluster/lib.sh (namespace, helpers) and makes
# sure the committed CRD is applied and Established. Applying is idempotent, so tests running
# in parallel may all do it; none deletes the CRD (other tests use it too).
# shellcheck disable=SC1091
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"

CRD_FILE=$TESSERA_SOURCE_DIR/manifests/crd/trainingjobs.tessera.dev.yaml
TESSERA=$TESSERA_BIN_DIR/tessera
EXAMPLES=$TESSERA_SOURCE_DIR/manifests/examples
[ -x "$TESSERA" ] || fail "no tessera binary at $TESSERA: build the tessera target"

# Server-side apply: the CRD is too big for the last-applied annotation of client-side apply
# to stay comfortable, and several tests may apply it at once.
kubectl apply --server-side --force-conflicts --field-manager=tessera-api-tests -f "$CRD_FILE" >/dev/null ||
  fail "the apiserver refused $CRD_FILE"
kubectl wait --for=condition=Established --timeout=60s crd/trainingjobs.tessera.dev >/dev/null ||
  fail "CRD trainingjobs.tessera.dev not Established within 60s"
# Discovery (and so `kubectl get tj`) can lag behind Established by a moment.
wait_for 30 "trainingjobs in API discovery" kubectl get trainingjobs --namespace "$TEST_NAMESPACE"
