#!/usr/bin/env bash
# Two controllers with --leader-elect: only the Lease holder acts (tessera_controller_leader
# is 1 on it, 0 on the other). Killed without releasing the Lease, the other takes over within
# the lease duration + 5 s and reconciles a new job.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
source "$TESSERA_SOURCE_DIR/tests/cluster/controller/controller_lib.sh"

# The leader-election Role of manifests/rbac/, in this test's namespace.
sed "s/namespace: tessera-system/namespace: $TEST_NAMESPACE/" \
  "$TESSERA_SOURCE_DIR/manifests/rbac/leader_election_role.yaml" | kubectl apply -f - >/dev/null
kns create rolebinding ctl-leader --role=tessera-controller-leader-election \
  --user="$CONTROLLER_USER" >/dev/null

election=(--leader-elect --leader-election-namespace "$TEST_NAMESPACE"
  --leader-election-lease-duration 4 --leader-election-renew-deadline 3
  --leader-election-retry-period 1)
start_controller "${election[@]}"
pid_a=$CONTROLLER_PID metrics_a=$CONTROLLER_METRICS_PORT
start_controller "${election[@]}"
pid_b=$CONTROLLER_PID metrics_b=$CONTROLLER_METRICS_PORT

holder() { kns get lease tessera-controller -o jsonpath='{.spec.holderIdentity}' 2>/dev/null; }
has_holder() { [ -n "$(holder)" ]; }
wait_for 30 "a leader" has_holder
leader_pid=$(holder); leader_pid=${leader_pid##*_}
case "$leader_pid" in
  "$pid_a") follower_pid=$pid_b leader_metrics=$metrics_a follower_metrics=$metrics_b ;;
  "$pid_b") follower_pid=$pid_a leader_metrics=$metrics_b follower_metrics=$metrics_a ;;
  *) fail "lease holder $(holder) is neither controller ($pid_a, $pid_b)" ;;
esac
gauge() { curl -sf "http://127.0.0.1:$1/metrics" | awk '$1 == "tessera_controller_leader" { print $2 }'; }
leader_is() { [ "$(gauge "$1")" = "$2" ]; }
wait_for 20 "leader gauge 1 on the leader" leader_is "$leader_metrics" 1
expect_eq 0 "$(gauge "$follower_metrics")" "leader gauge on the follower"

apply_job first 2
wait_phase 60 first Running
expect_eq 2 "$(pod_count first)" "pods of the first job"

# Kill the leader without letting it release the Lease.
kill -KILL "$leader_pid"
started=$SECONDS
new_holder() { local h; h=$(holder); [ "${h##*_}" = "$follower_pid" ]; }
wait_for 9 "the follower to take the lease (lease duration 4 s + 5 s)" new_holder
echo "ok: took over after $((SECONDS - started)) s"
apply_job second 2
wait_phase 60 second Running
expect_eq 2 "$(pod_count second)" "pods of the second job"
expect_eq 2 "$(pod_count first)" "pods of the first job after the takeover"
