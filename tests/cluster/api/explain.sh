#!/usr/bin/env bash
# `kubectl explain` answers from the schema's descriptions.
source "$(dirname "$0")/common.sh"

# The apiserver publishes the CRD's OpenAPI asynchronously after it is Established.
wait_for 60 "kubectl explain trainingjob.spec.parallelism" \
  bash -c 'kubectl explain trainingjob.spec.parallelism | grep -q "How the ranks are arranged"'
out=$(kubectl explain trainingjob.spec.parallelism)
for text in "data	<integer>" "pipeline	<integer>" "tensor	<integer>" "zeroStage	<integer>" \
  "microBatches	<integer>" "schedule	<string>" "Tensor-parallel ranks" "enum: GPipe, 1F1B"; do
  grep -qF -- "$text" <<<"$out" || fail "kubectl explain lacks '$text':
$out"
done
out=$(kubectl explain tj.spec.trainer.model.preset)
grep -qF "gpt2-124m (12 layers" <<<"$out" || fail "explain preset: $out"
echo "ok: kubectl explain"
