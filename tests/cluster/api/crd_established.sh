#!/usr/bin/env bash
# The committed CRD is accepted by the apiserver (structural schema, CEL cost within budget),
# becomes Established with its names accepted, and is what `tessera crd` prints.
source "$(dirname "$0")/common.sh"

crd=$(kubectl get crd trainingjobs.tessera.dev -o json)
expect_eq True "$(json_get '[c["status"] for c in d["status"]["conditions"] if c["type"] == "Established"][0]' <<<"$crd")" "Established"
expect_eq True "$(json_get '[c["status"] for c in d["status"]["conditions"] if c["type"] == "NamesAccepted"][0]' <<<"$crd")" "NamesAccepted"
expect_eq "['tj']" "$(json_get 'd["status"]["acceptedNames"]["shortNames"]' <<<"$crd")" "short names"
expect_eq "['tessera']" "$(json_get 'd["status"]["acceptedNames"]["categories"]' <<<"$crd")" "categories"
expect_eq "{}" "$(json_get 'd["spec"]["versions"][0]["subresources"]["status"]' <<<"$crd")" "status subresource"

"$TESSERA" crd | cmp -s - "$CRD_FILE" || fail "tessera crd differs from $CRD_FILE"
kubectl api-resources --api-group=tessera.dev --no-headers | grep -E '^trainingjobs +tj +tessera.dev/v1alpha1 +true +TrainingJob' >/dev/null ||
  fail "api-resources: $(kubectl api-resources --api-group=tessera.dev)"
echo "ok: CRD established"
