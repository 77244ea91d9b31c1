#!/usr/bin/env bash
# A worker process killed mid-run (kill -9, as the OOM killer or a lost machine would) ends the
# attempt: the controller restarts the whole gang, the new attempt resumes from the newest
# checkpoint rather than step 0, and the job still ends Succeeded with one restart.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
source "$TESSERA_SOURCE_DIR/tests/cluster/controller/controller_lib.sh"
source "$(dirname "$0")/agent_lib.sh"

start_node_agent
start_controller --progress-interval 0.5
apply_training_job gpt 2000 100

_past_first_checkpoint() { [ -f "$AGENT_WORK/checkpoints/gpt/step-100/meta.json" ]; }
wait_for 180 "the first checkpoint (step 100)" _past_first_checkpoint
# The container of worker 1 is process group <pid> on this machine.
pid=$(kns get pod gpt-worker-1 -o jsonpath='{.status.containerStatuses[0].containerID}')
pid=${pid#tessera-node-agent://}
[ -n "$pid" ] || fail "no container id for worker 1"
kill -KILL -- "-$pid"

wait_for 120 "a gang restart" bash -c \
  "[ \"\$(kubectl -n $TEST_NAMESPACE get tj gpt -o jsonpath='{.status.restarts}')\" = 1 ]"
wait_phase 300 gpt Succeeded
expect_eq 1 "$(job_field gpt '{.status.restarts}')" "restarts"
for i in 0 1; do
  log=$(worker_log "gpt-worker-$i")  # the newest attempt's
  gist="$(echo "$log" | grep -E "resumed|done|error|failed|lost|agent:" | tail -n 12)
checkpoints: $(ls "$AGENT_WORK/checkpoints/gpt" | tr '\n' ' ')"
  echo "$log" | grep -Eq "resumed from .*step-[1-9][0-9]*00 \(step [1-9]" ||
    fail "worker $i of attempt 1 did not resume from a checkpoint: $gist"
done
worker_log gpt-worker-0 | grep -q "done: 2000 steps" || fail "worker 0 did not finish"
expect_eq "$(last_step_loss gpt-worker-0 2000)" "$(last_step_loss gpt-worker-1 2000)" \
  "the two ranks' loss at step 2000"
echo "ok: worker killed -> gang restart -> resumed from a checkpoint -> Succeeded"
