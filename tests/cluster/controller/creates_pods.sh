#!/usr/bin/env bash
# The vertical slice: an applied TrainingJob yields its headless Service (and the Service's
# EndpointSlice once the workers have IPs), its rendezvous Secret and N worker pods with exactly the contract's environment, labels and owner; once kwok
# runs the pods the job is Running with its conditions. A job with the built-in trainer also
# gets its attempt's ConfigMap, mounted in every pod, and pods that run `tessera-worker agent`
# on it; deleting the job garbage-collects the ConfigMap. The controller runs as a user bound
# only to manifests/rbac/.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
source "$TESSERA_SOURCE_DIR/tests/cluster/controller/controller_lib.sh"

# Least privilege: the controller's identity may not read Secrets.
if kubectl --kubeconfig "$CONTROLLER_KUBECONFIG" get secrets -n "$TEST_NAMESPACE" >/dev/null 2>&1; then
  fail "the controller's identity can list secrets; manifests/rbac/ grants too much"
fi

start_controller
apply_job gpt 3 "  gpusPerWorker: 1
  parallelism: {data: 3}"
uid=$(job_field gpt '{.metadata.uid}')

wait_for 60 "3 pods of job gpt" bash -c "[ \$(kubectl -n $TEST_NAMESPACE get pods -l tessera.dev/job-name=gpt -o name | wc -l) -eq 3 ]"

# Service: headless, publishes not-ready addresses, owned by the job; no selector (the
# controller writes its EndpointSlice, checked below).
svc=$(kns get service gpt -o json)
expect_eq None "$(json_get 'd["spec"]["clusterIP"]' <<<"$svc")" "service clusterIP"
expect_eq True "$(json_get 'd["spec"]["publishNotReadyAddresses"]' <<<"$svc")" "publishNotReadyAddresses"
expect_eq None "$(json_get 'd["spec"].get("selector")' <<<"$svc")" "service selector"
expect_eq "$uid" "$(json_get 'd["metadata"]["ownerReferences"][0]["uid"]' <<<"$svc")" "service owner"

# Secret: a random token, owned by the job.
token=$(kns get secret gpt-rendezvous -o jsonpath='{.data.token}' | base64 -d)
expect_eq 64 "${#token}" "token length"
expect_eq "$uid" "$(kns get secret gpt-rendezvous -o jsonpath='{.metadata.ownerReferences[0].uid}')" "secret owner"

expected_env="TESSERA_JOB TESSERA_NAMESPACE TESSERA_ATTEMPT TESSERA_NODE_RANK TESSERA_NNODES TESSERA_PROCS_PER_NODE TESSERA_RDZV_ENDPOINT TESSERA_RDZV_TOKEN TESSERA_MESH TESSERA_METRICS_PORT TESSERA_CHECKPOINT_DIR MASTER_ADDR MASTER_PORT WORLD_SIZE NODE_RANK PET_NNODES PET_NPROC_PER_NODE PET_NODE_RANK PET_MASTER_ADDR PET_MASTER_PORT"
for i in 0 1 2; do
  pod=$(kns get pod "gpt-worker-$i" -o json)
  get() { json_get "$1" <<<"$pod"; }
  expect_eq "gpt" "$(get 'd["metadata"]["labels"]["tessera.dev/job-name"]')" "worker $i job label"
  expect_eq "$i" "$(get 'd["metadata"]["labels"]["tessera.dev/worker-index"]')" "worker $i index label"
  expect_eq "0" "$(get 'd["metadata"]["labels"]["tessera.dev/attempt"]')" "worker $i attempt label"
  expect_eq "tessera" "$(get 'd["metadata"]["labels"]["app.kubernetes.io/name"]')" "worker $i app label"
  expect_eq "$uid True TrainingJob" \
    "$(get '" ".join(str(d["metadata"]["ownerReferences"][0][k]) for k in ("uid", "controller", "kind"))')" \
    "worker $i owner"
  expect_eq "gpt-worker-$i gpt Never" \
    "$(get '" ".join(d["spec"][k] for k in ("hostname", "subdomain", "restartPolicy"))')" "worker $i pod spec"
  expect_eq "1" "$(get 'd["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"]')" "worker $i GPUs"
  expect_eq "$expected_env" "$(get '" ".join(e["name"] for e in d["spec"]["containers"][0]["env"])')" \
    "worker $i environment variables"
  env_of() { get "[e.get(\"value\") for e in d[\"spec\"][\"containers\"][0][\"env\"] if e[\"name\"] == \"$1\"][0]"; }
  expect_eq "$i" "$(env_of TESSERA_NODE_RANK)" "worker $i TESSERA_NODE_RANK"
  expect_eq "3" "$(env_of TESSERA_NNODES)" "worker $i TESSERA_NNODES"
  expect_eq "gpt-worker-0.gpt.$TEST_NAMESPACE.svc:29500" "$(env_of TESSERA_RDZV_ENDPOINT)" "worker $i endpoint"
  expect_eq "data=3,pipeline=1,tensor=1" "$(env_of TESSERA_MESH)" "worker $i mesh"
  expect_eq "3" "$(env_of WORLD_SIZE)" "worker $i WORLD_SIZE"
  expect_eq "gpt-rendezvous/token" \
    "$(get '[e["valueFrom"]["secretKeyRef"]["name"] + "/" + e["valueFrom"]["secretKeyRef"]["key"] for e in d["spec"]["containers"][0]["env"] if e["name"] == "TESSERA_RDZV_TOKEN"][0]')" \
    "worker $i token from the secret"
done

wait_phase 60 gpt Running
expect_eq "True/JobCreated" "$(condition gpt Created)" "Created condition"
expect_eq "True/AllWorkersRunning" "$(condition gpt Running)" "Running condition"
wait_for 30 "PodsReady" bash -c "[ \"\$(kubectl -n $TEST_NAMESPACE get tj gpt -o jsonpath='{.status.conditions[?(@.type==\"PodsReady\")].status}')\" = True ]"
expect_eq 3 "$(job_field gpt '{.status.workers.ready}')" "workers ready"
expect_eq 0 "$(job_field gpt '{.status.restarts}')" "restarts"
gen=$(job_field gpt '{.metadata.generation}')
expect_eq "$gen" "$(job_field gpt '{.status.observedGeneration}')" "observedGeneration"
expect_eq "$gen" "$(job_field gpt '{.status.conditions[?(@.type=="Running")].observedGeneration}')" \
  "Running condition observedGeneration"
[ -n "$(job_field gpt '{.status.startTime}')" ] || fail "no status.startTime"
expect_eq 3 "$(pod_count gpt)" "pods of gpt (no duplicates)"

# The Service's EndpointSlice: every worker's hostname at its pod's IP (what cluster DNS
# serves as gpt-worker-<i>.gpt.<namespace>.svc), written by the controller, owned by the job.
pods_addressed() {
  kns get pods -l tessera.dev/job-name="$1" \
    -o jsonpath='{range .items[*]}{.spec.hostname}={.status.podIP}={.metadata.uid}{"\n"}{end}' | sort
}
slice_endpoints() {
  kns get endpointslice "$1" \
    -o jsonpath='{range .endpoints[*]}{.hostname}={.addresses[0]}={.targetRef.uid}{"\n"}{end}' 2>/dev/null | sort
}
slice_matches_pods() {
  local want
  want=$(pods_addressed "$1")
  [ "$(wc -l <<<"$want")" -eq "$2" ] && ! grep -q '==' <<<"$want" && [ "$(slice_endpoints "$1")" = "$want" ]
}
wait_for 30 "EndpointSlice gpt to list the 3 workers at their IPs" slice_matches_pods gpt 3
slice=$(kns get endpointslice gpt -o json)
expect_eq "gpt tessera-controller.tessera.dev IPv4 $uid" \
  "$(json_get '" ".join([d["metadata"]["labels"]["kubernetes.io/service-name"], d["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"], d["addressType"], d["metadata"]["ownerReferences"][0]["uid"]])' <<<"$slice")" \
  "EndpointSlice labels, address type and owner"
expect_eq "rendezvous=29500" \
  "$(json_get '",".join(p["name"] + "=" + str(p["port"]) for p in d["ports"] if p["name"] == "rendezvous")' <<<"$slice")" \
  "EndpointSlice rendezvous port"
echo "ok: EndpointSlice gpt lists $(pods_addressed gpt | tr '\n' ' ')"

# Events recorded for the transitions, and the metrics served.
wait_for 30 "an AllWorkersRunning event" bash -c \
  "kubectl -n $TEST_NAMESPACE get events.events.k8s.io -o jsonpath='{.items[*].reason}' | grep -qw AllWorkersRunning"
metrics=$(curl -sf "http://127.0.0.1:$CONTROLLER_METRICS_PORT/metrics")
for m in tessera_controller_reconcile_total tessera_controller_reconcile_duration_seconds \
  tessera_controller_workqueue_depth tessera_controller_api_requests_total tessera_controller_leader \
  'tessera_jobs{phase="Running"} 1' tessera_job_startup_seconds_count; do
  grep -qF "$m" <<<"$metrics" || fail "metric $m missing from /metrics"
done
echo "ok: metrics served"

# A job running its own command gets no trainer ConfigMap and keeps its command.
expect_eq '["/bin/true"]' "$(kns get pod gpt-worker-0 -o jsonpath='{.spec.containers[0].command}')" \
  "own command kept"
expect_eq "" "$(kns get pod gpt-worker-0 -o jsonpath='{.spec.volumes[?(@.name=="tessera-config")].name}')" \
  "no trainer config volume on an own-command pod"
expect_eq 0 "$(kns get configmaps -l tessera.dev/job-name=gpt -o name | wc -l)" "ConfigMaps of job gpt"

# The built-in trainer: the ConfigMap of attempt 0, then pods running the agent on it.
kns apply -f - <<YAML
apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata:
  name: tiny
spec:
  workers: 2
  parallelism: {data: 2}
  trainer:
    model: {layers: 2, dModel: 64, heads: 4, seqLen: 64}
    data: {path: /data/tiny.txt}
    batch: {global: 16}
    schedule: {steps: 10}
  template:
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: worker
        image: tessera/worker:test
        args: [--threads, "1"]
YAML
tiny_uid=$(job_field tiny '{.metadata.uid}')
cm0="tiny-config-0-${tiny_uid:0:8}" cm1="tiny-config-1-${tiny_uid:0:8}"  # one per attempt and job
wait_for 60 "2 pods of job tiny" bash -c "[ \$(kubectl -n $TEST_NAMESPACE get pods -l tessera.dev/job-name=tiny -o name | wc -l) -eq 2 ]"
cm=$(kns get configmap "$cm0" -o json)
expect_eq "$tiny_uid True" \
  "$(json_get '" ".join(str(d["metadata"]["ownerReferences"][0][k]) for k in ("uid", "controller"))' <<<"$cm")" \
  "ConfigMap owner"
expect_eq "tiny 0" \
  "$(json_get 'd["metadata"]["labels"]["tessera.dev/job-name"] + " " + d["metadata"]["labels"]["tessera.dev/attempt"]' <<<"$cm")" \
  "ConfigMap labels"
# job.yaml is the job as a TrainingJob file: its trainer, no pod template.
job_yaml=$(json_get 'd["data"]["job.yaml"]' <<<"$cm")
expect_eq "TrainingJob tiny $TEST_NAMESPACE 2 /data/tiny.txt 10 False" \
  "$(/usr/bin/python3 -c 'import sys, yaml; d = yaml.safe_load(sys.stdin); s = d["spec"]; print(d["kind"], d["metadata"]["name"], d["metadata"]["namespace"], s["trainer"]["model"]["layers"], s["trainer"]["data"]["path"], s["trainer"]["schedule"]["steps"], "template" in s)' <<<"$job_yaml")" \
  "ConfigMap job.yaml"
for i in 0 1; do
  pod=$(kns get pod "tiny-worker-$i" -o json)
  get() { json_get "$1" <<<"$pod"; }
  expect_eq "tessera-worker agent --config /etc/tessera/job.yaml --threads 1" \
    "$(get '" ".join(d["spec"]["containers"][0]["command"] + d["spec"]["containers"][0]["args"])')" \
    "worker $i command and args"
  expect_eq "tessera-config /etc/tessera True" \
    "$(get '" ".join(str(m[k]) for m in d["spec"]["containers"][0]["volumeMounts"] if m["name"] == "tessera-config" for k in ("name", "mountPath", "readOnly"))')" \
    "worker $i config mount"
  expect_eq "$cm0" \
    "$(get '[v["configMap"]["name"] for v in d["spec"]["volumes"] if v["name"] == "tessera-config"][0]')" \
    "worker $i config volume"
done
wait_phase 60 tiny Running
printf -- '---- job.yaml of %s\n%s\n----\n' "$cm0" "$job_yaml"

# A gang restart: attempt 1 gets its own ConfigMap, and attempt 0's is deleted.
kns label pod tiny-worker-1 tessera.dev/fail-exit-code=3
tiny_attempt1() {
  [ "$(kns get pods -l tessera.dev/job-name=tiny,tessera.dev/attempt=1 -o name | wc -l)" -eq 2 ] &&
    [ "$(kns get pods -l tessera.dev/job-name=tiny,tessera.dev/attempt=0 -o name | wc -l)" -eq 0 ]
}
wait_for 60 "job tiny's gang replaced by attempt 1" tiny_attempt1
expect_eq "$cm1" \
  "$(kns get pod tiny-worker-0 -o jsonpath='{.spec.volumes[?(@.name=="tessera-config")].configMap.name}')" \
  "attempt 1 config volume"
expect_eq "configmap/$cm1" "$(kns get configmaps -l tessera.dev/job-name=tiny -o name)" \
  "ConfigMaps of job tiny after the restart"
# The new gang's pods (new uids, new IPs) replace the old ones in the EndpointSlice.
wait_for 60 "EndpointSlice tiny to list attempt 1's pods" slice_matches_pods tiny 2

# Deleting the job garbage-collects the ConfigMap and the EndpointSlice with the pods.
kns delete trainingjob tiny --wait=false >/dev/null
wait_for 90 "the garbage collector to delete ConfigMap $cm1" \
  bash -c "! kubectl -n $TEST_NAMESPACE get configmap $cm1 >/dev/null 2>&1"
wait_for 90 "the garbage collector to delete the pods of tiny" \
  bash -c "[ \$(kubectl -n $TEST_NAMESPACE get pods -l tessera.dev/job-name=tiny -o name | wc -l) -eq 0 ]"
wait_for 90 "the garbage collector to delete EndpointSlice tiny" \
  bash -c "! kubectl -n $TEST_NAMESPACE get endpointslice tiny >/dev/null 2>&1"
echo "ok: trainer ConfigMap, EndpointSlice and pods garbage-collected"
