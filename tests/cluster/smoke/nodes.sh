#!/usr/bin/env bash
# At least 4 simulated nodes are Ready, each with allocatable nvidia.com/gpu 8, cpu 64,
# memory 512Gi and pods 110, and each is managed by kwok.
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"

want='8 64 512Gi 110 True fake'
rows=$(kubectl get nodes -l tessera.dev/simulated=true -o jsonpath='{range .items[*]}{.metadata.name} {.status.allocatable.nvidia\.com/gpu} {.status.allocatable.cpu} {.status.allocatable.memory} {.status.allocatable.pods} {.status.conditions[?(@.type=="Ready")].status} {.metadata.annotations.kwok\.x-k8s\.io/node}{"\n"}{end}')
printf '%s\n' "$rows"
good=$(printf '%s\n' "$rows" | awk -v want="$want" '{ n = $1; $1 = ""; sub(/^ /, "") } $0 == want { c++ } END { print c + 0 }')
[ "$good" -ge 4 ] || fail "expected >= 4 Ready kwok nodes with allocatable '$want' (gpu cpu memory pods ready annotation), found $good"
echo "ok: $good nodes Ready with 8 allocatable GPUs"
