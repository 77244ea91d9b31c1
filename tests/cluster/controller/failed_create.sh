#!/usr/bin/env bash
# A create the apiserver refuses (here a ResourceQuota of one pod for a job of two) is a
# Warning event FailedCreate on the job carrying the apiserver's answer, recorded once while
# the refusals last, and the status says so (phase Pending, condition Created False with reason
# FailedCreate); once the quota is gone the retries go through and the job runs.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
source "$TESSERA_SOURCE_DIR/tests/cluster/controller/controller_lib.sh"

kns create quota one-pod --hard=pods=1
# The quota admits nothing until kube-controller-manager has computed its usage.
wait_for 60 "the quota's usage" bash -c \
  "[ -n \"\$(kubectl -n $TEST_NAMESPACE get resourcequota one-pod -o jsonpath='{.status.used.pods}')\" ]"

start_controller
apply_job capped 2

failed_creates() {
  kns get events.events.k8s.io -o json | json_get \
    'sum(1 for e in d["items"] if e["reason"] == "FailedCreate" and e["regarding"]["name"] == "capped")'
}
wait_for 60 "a FailedCreate event" bash -c "[ \"\$(kubectl -n $TEST_NAMESPACE get events.events.k8s.io \
  -o jsonpath='{.items[?(@.reason==\"FailedCreate\")].type}')\" = Warning ]"
note=$(kns get events.events.k8s.io -o jsonpath='{.items[?(@.reason=="FailedCreate")].note}')
echo "FailedCreate: $note"
grep -q "exceeded quota: one-pod" <<<"$note" || fail "the event does not carry the apiserver's answer"
expect_eq 1 "$(pod_count capped)" "pods while the quota allows one"

# The controller keeps retrying with back-off; the refusals stay one event.
sleep 5
expect_eq 1 "$(failed_creates)" "FailedCreate events after 5 s more of refusals"
expect_eq Pending "$(kns get tj capped -o jsonpath='{.status.phase}')" "phase while refused"
expect_eq False/FailedCreate "$(kns get tj capped \
  -o jsonpath='{.status.conditions[?(@.type=="Created")].status}/{.status.conditions[?(@.type=="Created")].reason}')" \
  "condition Created while refused"
kns get tj capped -o jsonpath='{.status.conditions[?(@.type=="Created")].message}' |
  grep -q "exceeded quota: one-pod" || fail "the condition does not carry the apiserver's answer"

kns delete resourcequota one-pod
wait_phase 120 capped Running
expect_eq 2 "$(pod_count capped)" "pods once the quota is gone"
expect_eq 1 "$(failed_creates)" "FailedCreate events after the creates worked"
expect_eq True/JobCreated "$(kns get tj capped \
  -o jsonpath='{.status.conditions[?(@.type=="Created")].status}/{.status.conditions[?(@.type=="Created")].reason}')" \
  "condition Created once the creates worked"
