#!/usr/bin/env bash
# What an update may change (docs/api.md, "Changing a job"): the trainer, the layout and the
# per-job objects' fields are refused at the field that changed; runPolicy, suspend and
# scheduling.startupTimeoutSeconds are accepted at any time; the pod template only while the
# stored job is suspended, which includes the update that resumes it. Status writes go on.
source "$(dirname "$0")/common.sh"

kns apply -f "$EXAMPLES/cpu-tiny.yaml" >/dev/null || fail "could not create cpu-tiny"

# patch_ok PATCH: the apiserver accepts the merge patch.
patch_ok() {
  local out
  out=$(kns patch tj cpu-tiny --type=merge -p "$1" 2>&1) || fail "refused $1: $out"
}
# patch_refused PATCH FIELD: the apiserver refuses the merge patch, naming FIELD with the
# rule's message, and the stored spec stays as it was.
patch_refused() {
  local before out after
  before=$(kns get tj cpu-tiny -o jsonpath='{.spec}')
  if out=$(kns patch tj cpu-tiny --type=merge -p "$1" 2>&1); then
    fail "accepted $1"
  fi
  grep -qF "$2: Invalid value: $3" <<<"$out" || fail "$1: expected '$2: ... $3', got: $out"
  after=$(kns get tj cpu-tiny -o jsonpath='{.spec}')
  [[ "$after" == "$before" ]] || fail "the spec changed after the refused patch $1: $after"
}

fixed="cannot change once the job exists: delete the job and create it again"
patch_refused '{"spec":{"workers":3,"parallelism":{"data":3}}}' spec.workers "$fixed"
patch_refused '{"spec":{"gpusPerWorker":1}}' spec.gpusPerWorker "$fixed"
patch_refused '{"spec":{"procsPerWorker":2,"parallelism":{"data":4}}}' spec.procsPerWorker "$fixed"
patch_refused '{"spec":{"parallelism":{"bucketMiB":5}}}' spec.parallelism "$fixed"
patch_refused '{"spec":{"trainer":{"schedule":{"steps":301}}}}' spec.trainer "$fixed"
patch_refused '{"spec":{"metrics":{"port":9500}}}' spec.metrics "$fixed"
patch_refused '{"spec":{"scheduling":{"priorityClassName":"high"}}}' spec.scheduling \
  "only startupTimeoutSeconds can change once the job exists"
suspended_only="can change only while the job is suspended"
patch_refused '{"spec":{"template":{"spec":{"nodeSelector":{"pool":"a"}}}}}' spec.template \
  "$suspended_only"

# Dropping procsPerWorker, or writing it back, keeps its value (1 on CPU): no change.
patch_ok '{"spec":{"procsPerWorker":null}}'
expect_eq "" "$(kns get tj cpu-tiny -o jsonpath='{.spec.procsPerWorker}')" "procsPerWorker dropped"
patch_ok '{"spec":{"procsPerWorker":1}}'
patch_ok '{"spec":{"runPolicy":{"backoffLimit":5,"progressDeadlineSeconds":60}}}'
patch_ok '{"spec":{"scheduling":{"startupTimeoutSeconds":60}}}'
patch_ok '{"spec":{"suspend":true}}'
patch_ok '{"spec":{"template":{"spec":{"nodeSelector":{"pool":"a"}}}}}'
# One update changes the template and resumes the job (a queueing system's admission).
patch_ok '{"spec":{"suspend":false,"template":{"spec":{"nodeSelector":{"pool":"b"}}}}}'
expect_eq '{"pool":"b"}' "$(kns get tj cpu-tiny -o jsonpath='{.spec.template.spec.nodeSelector}')" \
  "nodeSelector after resuming"
expect_eq 5 "$(kns get tj cpu-tiny -o jsonpath='{.spec.runPolicy.backoffLimit}')" "backoffLimit"
patch_refused '{"spec":{"template":{"spec":{"nodeSelector":{"pool":"c"}}}}}' spec.template \
  "$suspended_only"
# The trainer stays fixed while suspended too: a checkpoint resumes only with the same one.
patch_ok '{"spec":{"suspend":true}}'
patch_refused '{"spec":{"trainer":{"optimizer":{"lr":0.002}}}}' spec.trainer "$fixed"

kns patch tj cpu-tiny --subresource=status --type=merge -p '{"status":{"phase":"Suspended"}}' \
  >/dev/null || fail "the status subresource refused a write"
kns delete tj cpu-tiny --wait=false >/dev/null
echo "ok: updates change only what a running job can follow"
