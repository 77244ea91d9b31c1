#!/usr/bin/env bash
# Gang schedulers: with scheduling.schedulerName volcano or scheduler-plugins the controller
# creates the job's PodGroup (minMember = workers, owned by the job) before its pods, and the
# pods carry the scheduler's name and the group annotation (Volcano) or label
# (scheduler-plugins). While the PodGroup CRD is not installed the job waits with condition
# Created False (PodGroupUnavailable) and no pods; once the CRD appears the job goes on. Each
# CRD here is a minimal one with an open schema, installed by the test and removed at exit.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
source "$TESSERA_SOURCE_DIR/tests/cluster/controller/controller_lib.sh"

VOLCANO=scheduling.volcano.sh
PLUGINS=scheduling.x-k8s.io

remove_crds() {
  kubectl delete crd "podgroups.$VOLCANO" "podgroups.$PLUGINS" --ignore-not-found --wait=true >/dev/null
}
not_served() { ! kubectl get --raw "/apis/$1" >/dev/null 2>&1; }
install_crd() {  # <group> <version>
  kubectl apply -f - >/dev/null <<YAML
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: podgroups.$1
spec:
  group: $1
  scope: Namespaced
  names: {kind: PodGroup, listKind: PodGroupList, plural: podgroups, singular: podgroup}
  versions:
  - name: $2
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
YAML
  wait_for 60 "the PodGroup CRD of $1 to be established" \
    kubectl wait --for=condition=Established --timeout=5s "crd/podgroups.$1"
}
on_exit remove_crds
remove_crds
wait_for 60 "$VOLCANO and $PLUGINS no longer served" bash -c \
  "! kubectl get --raw /apis/$VOLCANO/v1beta1 && ! kubectl get --raw /apis/$PLUGINS/v1alpha1"

start_controller

# --- Volcano, first without its CRD.
apply_job vc 3 "  scheduling: {schedulerName: volcano, queue: research}"
uid=$(job_field vc '{.metadata.uid}')
wait_for 60 "condition Created False/PodGroupUnavailable" bash -c \
  "[ \"\$(kubectl -n $TEST_NAMESPACE get tj vc -o jsonpath='{.status.conditions[?(@.type==\"Created\")].status}/{.status.conditions[?(@.type==\"Created\")].reason}')\" = False/PodGroupUnavailable ]"
expect_eq Pending "$(job_field vc '{.status.phase}')" "phase while the CRD is missing"
case "$(job_field vc '{.status.conditions[?(@.type=="Created")].message}')" in
  *"volcano"*"podgroups.$VOLCANO/v1beta1"*) ;;
  *) fail "Created message does not name the scheduler and the missing resource: $(job_field vc '{.status.conditions[?(@.type=="Created")].message}')" ;;
esac
wait_for 30 "a PodGroupUnavailable event" bash -c \
  "kubectl -n $TEST_NAMESPACE get events.events.k8s.io -o jsonpath='{.items[*].reason}' | grep -qw PodGroupUnavailable"
expect_eq 0 "$(pod_count vc)" "pods while the CRD is missing"
kill -0 "$CONTROLLER_PID" 2>/dev/null || fail "the controller exited"

install_crd $VOLCANO v1beta1
wait_for 60 "3 pods of vc once the CRD is served" bash -c "[ \$(kubectl -n $TEST_NAMESPACE get pods -l tessera.dev/job-name=vc -o name | wc -l) -eq 3 ]"
pg=$(kns get "podgroups.$VOLCANO" vc -o json)
expect_eq "$VOLCANO/v1beta1 3 research" \
  "$(json_get '" ".join(str(x) for x in (d["apiVersion"], d["spec"]["minMember"], d["spec"]["queue"]))' <<<"$pg")" \
  "Volcano PodGroup apiVersion, minMember, queue"
expect_eq "$uid True TrainingJob" \
  "$(json_get '" ".join(str(d["metadata"]["ownerReferences"][0][k]) for k in ("uid", "controller", "kind"))' <<<"$pg")" \
  "Volcano PodGroup owner"
# Created before the pods (creation times have whole seconds: not after any of them).
first_pod=$(kns get pods -l tessera.dev/job-name=vc -o jsonpath='{range .items[*]}{.metadata.creationTimestamp}{"\n"}{end}' | sort | head -1)
pg_created=$(json_get 'd["metadata"]["creationTimestamp"]' <<<"$pg")
[[ ! "$pg_created" > "$first_pod" ]] || fail "PodGroup created at $pg_created, after the first pod ($first_pod)"
for i in 0 1 2; do
  expect_eq "volcano vc" \
    "$(kns get pod "vc-worker-$i" -o jsonpath='{.spec.schedulerName} {.metadata.annotations.scheduling\.k8s\.io/group-name}')" \
    "vc-worker-$i schedulerName and group annotation"
done
wait_for 30 "condition Created True/JobCreated" bash -c \
  "[ \"\$(kubectl -n $TEST_NAMESPACE get tj vc -o jsonpath='{.status.conditions[?(@.type==\"Created\")].status}/{.status.conditions[?(@.type==\"Created\")].reason}')\" = True/JobCreated ]"
expect_eq Starting "$(job_field vc '{.status.phase}')" "phase with pods waiting for Volcano"

# Deleting the job garbage-collects its PodGroup.
kns delete tj vc --wait=false >/dev/null
wait_for 60 "the PodGroup vc garbage-collected" bash -c \
  "! kubectl -n $TEST_NAMESPACE get podgroups.$VOLCANO vc >/dev/null 2>&1"

# --- scheduler-plugins, first without its CRD.
apply_job sp 2 "  scheduling: {schedulerName: scheduler-plugins, startupTimeoutSeconds: 120}"
wait_for 60 "condition Created False/PodGroupUnavailable of sp" bash -c \
  "[ \"\$(kubectl -n $TEST_NAMESPACE get tj sp -o jsonpath='{.status.conditions[?(@.type==\"Created\")].status}/{.status.conditions[?(@.type==\"Created\")].reason}')\" = False/PodGroupUnavailable ]"
expect_eq 0 "$(pod_count sp)" "pods of sp while the CRD is missing"

install_crd $PLUGINS v1alpha1
wait_for 60 "2 pods of sp once the CRD is served" bash -c "[ \$(kubectl -n $TEST_NAMESPACE get pods -l tessera.dev/job-name=sp -o name | wc -l) -eq 2 ]"
expect_eq "$PLUGINS/v1alpha1 2 120 $(job_field sp '{.metadata.uid}')" \
  "$(kns get "podgroups.$PLUGINS" sp -o jsonpath='{.apiVersion} {.spec.minMember} {.spec.scheduleTimeoutSeconds} {.metadata.ownerReferences[0].uid}')" \
  "scheduler-plugins PodGroup apiVersion, minMember, scheduleTimeoutSeconds, owner"
for i in 0 1; do
  expect_eq "scheduler-plugins-scheduler sp" \
    "$(kns get pod "sp-worker-$i" -o jsonpath='{.spec.schedulerName} {.metadata.labels.scheduling\.x-k8s\.io/pod-group}')" \
    "sp-worker-$i schedulerName and pod-group label"
done

# scheduler-plugins installed as the default scheduler: the template's schedulerName is kept,
# so kube-scheduler places the pods and the job runs.
kns apply -f - >/dev/null <<YAML
apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata: {name: spd}
spec:
  workers: 2
  scheduling: {schedulerName: scheduler-plugins}
  template:
    spec:
      schedulerName: default-scheduler
      terminationGracePeriodSeconds: 1
      containers: [{name: worker, image: tessera/worker:test, command: [/bin/true]}]
YAML
wait_phase 60 spd Running
expect_eq "default-scheduler spd" \
  "$(kns get pod spd-worker-0 -o jsonpath='{.spec.schedulerName} {.metadata.labels.scheduling\.x-k8s\.io/pod-group}')" \
  "spd-worker-0 keeps the template's schedulerName"
expect_eq 2 "$(kns get "podgroups.$PLUGINS" spd -o jsonpath='{.spec.minMember}')" "PodGroup spd minMember"
expect_at_most_workers sp 2
expect_at_most_workers spd 2

# Least privilege (asked once both CRDs are served, so kubectl can resolve the resource):
# PodGroups are only created.
can() { kubectl --kubeconfig "$CONTROLLER_KUBECONFIG" auth can-i "$1" "podgroups.$2" -n "$TEST_NAMESPACE" 2>/dev/null || true; }
for g in $VOLCANO $PLUGINS; do
  expect_eq yes "$(can create "$g")" "the controller may create podgroups.$g"
  expect_eq no "$(can get "$g")" "the controller may get podgroups.$g"
  expect_eq no "$(can delete "$g")" "the controller may delete podgroups.$g"
done
