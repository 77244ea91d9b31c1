#!/usr/bin/env bash
# `kubectl apply` of a TrainingJob trains for real and ends Succeeded: tessera-controller
# creates the gang, tessera-node-agent runs each pod's `tessera-worker agent` as a process, the
# two ranks rendezvous through worker 0 and train data-parallel to the last step, the
# controller reads rank 0's progress into the status (polled, then the final step from worker
# 0's termination message), and both pods' logs end with the same final step. Nothing here is simulated but the kubelet. Then a job the API accepts but the
# trainer cannot run (sequences whose attention alone needs terabytes) fails at once with
# PermanentExitCode, and the rank's own one-line reason is in the job's status: written to the
# container's termination message, carried by the pod's status to the controller.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
source "$TESSERA_SOURCE_DIR/tests/cluster/controller/controller_lib.sh"
source "$(dirname "$0")/agent_lib.sh"

start_node_agent
start_controller --progress-interval 0.5
apply_training_job gpt 200 100

wait_phase 120 gpt Running
# Progress from rank 0's /progress, while it trains.
wait_for 120 "status.progress.step above 0" \
  bash -c "[ \"\$(kubectl -n $TEST_NAMESPACE get tj gpt -o jsonpath='{.status.progress.step}')\" -gt 0 ]"
wait_phase 240 gpt Succeeded

expect_eq "True/Succeeded" "$(condition gpt Succeeded)" "Succeeded condition"
expect_eq 200 "$(job_field gpt '{.status.progress.totalSteps}')" "totalSteps"
# The step reached, whatever the last poll saw: rank 0's progress as it ended, from the last
# line of worker 0's termination message.
expect_eq 200 "$(job_field gpt '{.status.progress.step}')" "status.progress.step"
said=$(kns get pod gpt-worker-0 -o jsonpath='{.status.containerStatuses[0].state.terminated.message}')
[[ $said == 'final progress: {'*'"step":200,'* ]] || fail "worker 0's termination message: $said"
expect_eq 0 "$(job_field gpt '{.status.restarts}')" "restarts"
for i in 0 1; do
  worker_log "gpt-worker-$i" | grep -q "joined the world group: rank $i of 2" ||
    fail "worker $i did not join the 2-rank world: $(worker_log "gpt-worker-$i" | tail -n 5)"
done
worker_log gpt-worker-0 | grep -q "done: 200 steps" || fail "worker 0 did not finish"
# Both ranks trained every step together: they report the same global loss for the last.
loss=$(last_step_loss gpt-worker-0 200)
[ -n "$loss" ] || fail "no loss for step 200"
expect_eq "$loss" "$(last_step_loss gpt-worker-1 200)" "the two ranks' loss at step 200"
[ -f "$AGENT_WORK/checkpoints/gpt/step-200/meta.json" ] || fail "no final checkpoint"
echo "ok: kubectl apply -> trained 200 steps on 2 ranks -> Succeeded (final loss $loss)"

# Model parallelism through the same path: 2 pods x 2 ranks as pipeline 2 x tensor 2, the
# ranks of a pod one pipeline stage split over two tensor-parallel ranks (tensor innermost).
PROCS=2 PARALLELISM="{data: 1, pipeline: 2, tensor: 2, microBatches: 2}" \
  apply_training_job hybrid 100 50
wait_phase 240 hybrid Succeeded
worker_log hybrid-worker-0 | grep -q "rank 0 is data 0 pipeline 0 tensor 0; stages \[0,1) \[1,2)" ||
  fail "worker 0's ranks are not stage 0: $(worker_log hybrid-worker-0 | grep mesh)"
worker_log hybrid-worker-1 | grep -q "rank 3 is data 0 pipeline 1 tensor 1" ||
  fail "worker 1's ranks are not stage 1: $(worker_log hybrid-worker-1 | grep mesh)"
expect_eq "$(last_step_loss hybrid-worker-0 100)" "$(last_step_loss hybrid-worker-1 100)" \
  "the two pipeline stages' loss at step 100"
echo "ok: pipeline 2 x tensor 2 over 2 pods of 2 ranks -> Succeeded"

apply_training_job huge 10 10 65536
wait_phase 120 huge Failed
expect_eq "True/PermanentExitCode" "$(condition huge Failed)" "Failed condition"
expect_eq 2 "$(job_field huge '{.status.lastFailure.exitCode}')" "lastFailure.exitCode"
message=$(job_field huge '{.status.lastFailure.message}')
case "$message" in
  *"batch.global, model.seqLen: this rank needs at least"*) ;;
  *) fail "lastFailure.message does not carry the rank's reason: $message" ;;
esac
kns get events --field-selector involvedObject.name=huge -o jsonpath='{.items[*].message}' |
  grep -q "this rank needs at least" || fail "no event carries the rank's reason"
echo "ok: the trainer's refusal is in status.lastFailure.message: $message"
