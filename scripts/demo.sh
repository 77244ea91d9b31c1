#!/usr/bin/env bash
# `make demo`: trains the tiny GPT of manifests/examples/cpu-tiny.yaml on Shakespeare with
# `tessera run` (about a minute or two on 2 CPU cores), then prints a sample of its text.
#   BUILD_DIR=build-foo scripts/demo.sh     use another build directory
#   DEMO_WORKERS=2 scripts/demo.sh          run the example's own two data-parallel workers
#                                           (needs multi-rank support in the built-in trainer)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD_DIR=${BUILD_DIR:-build}
TESSERA=${TESSERA:-$BUILD_DIR/bin/tessera}
JOB=manifests/examples/cpu-tiny.yaml
if [[ ! -x $TESSERA ]]; then
  echo "demo: $TESSERA is not built; run 'make build' first" >&2
  exit 2
fi

# The built-in trainer of this build trains one rank; the example asks for two data-parallel
# workers, so the demo runs it as one (same global batch, same learning curve).
DEMO_WORKERS=${DEMO_WORKERS:-1}
args=(--set "spec.workers=$DEMO_WORKERS" --set "spec.parallelism.data=$DEMO_WORKERS")

start=$SECONDS
"$TESSERA" run "$JOB" "${args[@]}" --summary-json runs/cpu-tiny-summary.json \
  --sample 300 --prompt $'ROMEO:\n' "$@"
echo
echo "demo: finished in $((SECONDS - start)) s; summary in runs/cpu-tiny-summary.json"
