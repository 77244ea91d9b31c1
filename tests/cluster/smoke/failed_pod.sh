#!/usr/bin/env bash
# A pod labelled tessera.dev/fail-exit-code=<N> runs, then ends with its container
# terminated with exit code N: phase Failed, or Succeeded for 0.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"

# name  exit code  expected phase
cases=(
  "exit-1 1 Failed"
  "exit-42 42 Failed"
  "exit-137 137 Failed"
  "exit-0 0 Succeeded"
)
for c in "${cases[@]}"; do
  read -r name code _ <<<"$c"
  kns apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $name
  labels:
    tessera.dev/fail-exit-code: "$code"
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: tessera/worker:smoke
YAML
done
for c in "${cases[@]}"; do
  read -r name code phase <<<"$c"
  wait_for 60 "pod $name to end $phase" \
    bash -c "[ \"\$(kubectl -n \"\$TEST_NAMESPACE\" get pod $name -o jsonpath={.status.phase})\" = $phase ]"
  expect_eq "$code" "$(kns get pod "$name" -o jsonpath='{.status.containerStatuses[0].state.terminated.exitCode}')" \
    "exit code of $name"
  started=$(kns get pod "$name" -o jsonpath='{.status.startTime}')
  [ -n "$started" ] || fail "pod $name never started (no startTime): it should run before it exits"
done
