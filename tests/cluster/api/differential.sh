#!/usr/bin/env bash
# `tessera validate` against the apiserver on 300 mutants of manifests/examples (a fixed seed,
# so the same 300 every run): each is accepted by both or refused by both at the same field.
# `differential.py --all` runs every mutant (about 2,800) for an audit.
source "$(dirname "$0")/common.sh"

python3 "$(dirname "$0")/differential.py" --tessera "$TESSERA" --kubectl kubectl \
  --namespace "$TEST_NAMESPACE" --limit 300 --seed 20261207 ||
  fail "tessera validate and the apiserver disagree (lines above)"
