# Helpers for the tests that train for real through the control plane. Source after
# tests/cluster/lib.sh and tests/cluster/controller/controller_lib.sh, with the path of
# tessera-node-agent as $1 of the test:
#
#   start_node_agent              registers Node $AGENT_NODE and runs its pods (stopped at exit)
#   apply_training_job <name> <steps> <checkpoint every> [seqLen]
#                                 a 2-worker data-parallel TrainingJob of the built-in trainer on
#                                 data/tinyshakespeare.txt (seqLen 32 unless given), pinned to
#                                 $AGENT_NODE; PROCS=<n> and PARALLELISM='{...}' in the
#                                 environment change procsPerWorker and spec.parallelism
#   worker_log <pod>              the container log of the pod's newest run on the agent
#   last_step_loss <pod> <steps>  the loss its log reports for step <steps> of <steps>, waiting
#                                 up to 30 s for the line (every rank logs the step's global
#                                 loss once its all-reduce is done; worker 0 may exit, and the
#                                 others be stopped, before they print anything later)
NODE_AGENT=${1:?usage: test.sh TESSERA_NODE_AGENT}
AGENT_NODE="agent-$TEST_NAMESPACE"
AGENT_WORK=$(mktemp -d)
AGENT_LOG="${TESSERA_CLUSTER_DIR:-$AGENT_WORK}/logs/node-agent-$TEST_NAMESPACE.log"

_agent_node_ready() {
  [ "$(kubectl get node "$AGENT_NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

start_node_agent() {
  mkdir -p "$(dirname "$AGENT_LOG")"
  "$NODE_AGENT" --node "$AGENT_NODE" --work-dir "$AGENT_WORK/pods" \
    --bin-dir "$TESSERA_BIN_DIR" >>"$AGENT_LOG" 2>&1 &
  AGENT_PID=$!
  on_exit "kill -TERM $AGENT_PID; wait $AGENT_PID; kubectl delete node $AGENT_NODE --ignore-not-found; rm -rf $AGENT_WORK"
  wait_for 60 "node $AGENT_NODE to be Ready" _agent_node_ready
}

# On failure, the agent's log too (then the controller's and the namespace's).
_agent_exit() {
  local status=$?
  set +e  # under -e, `(exit $status)` below would end the trap before the clean-up
  if [ $status -ne 0 ] && [ -f "$AGENT_LOG" ]; then
    printf -- '---- node agent log (last 40 lines of %s)\n' "$AGENT_LOG" >&2
    tail -n 40 "$AGENT_LOG" >&2
  fi
  (exit $status)
  _ctl_exit
}
trap _agent_exit EXIT

apply_training_job() {
  local name=$1 steps=$2 every=$3 seq_len=${4:-32} port parallelism=${PARALLELISM:-"{data: 2}"}
  port=$(_ctl_free_port)
  kns apply -f - <<YAML
apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata:
  name: $name
spec:
  workers: 2
  procsPerWorker: ${PROCS:-1}
  parallelism: $parallelism
  trainer:
    model: {layers: 2, dModel: 32, heads: 2, seqLen: $seq_len, vocab: 256}
    data: {path: $TESSERA_SOURCE_DIR/data/tinyshakespeare.txt}
    batch: {global: 8}
    optimizer: {lr: 3.0e-3}
    schedule: {steps: $steps, warmupSteps: 5}
    checkpoint: {dir: $AGENT_WORK/checkpoints/$name, everySteps: $every, keep: 2}
  metrics: {port: $port}
  runPolicy: {backoffLimit: 2}
  template:
    spec:
      terminationGracePeriodSeconds: 10
      nodeSelector: {tessera.dev/node-agent: "true"}
      tolerations:
      - {key: tessera.dev/node-agent, operator: Exists, effect: NoSchedule}
      containers:
      - name: worker
        image: tessera/worker:test
YAML
}

worker_log() {
  local dir
  dir=$(ls -td "$AGENT_WORK/pods/${TEST_NAMESPACE}_$1_"* 2>/dev/null | head -n 1)
  [ -n "$dir" ] && cat "$dir/container.log"
}

_agent_has_step() { worker_log "$1" | grep -q "step $2/$2 loss"; }
last_step_loss() {
  wait_for 30 "$1's log to reach step $2" _agent_has_step "$1" "$2"
  worker_log "$1" | sed -n "s|.*step $2/$2 loss \([0-9.]*\).*|\1|p" | tail -n 1
}
export -f worker_log _agent_has_step
