#!/usr/bin/env bash
# The byo-torchrun example: an unmodified PyTorch DDP script (gloo, init_method env://) trains
# on two workers with the torchrun environment tessera run provides.
source "$(dirname "$0")/lib.sh"

if ! "$PY" -c 'import torch, torch.distributed' 2>/dev/null; then
  echo "SKIP: PyTorch is not importable by $PY"
  exit 77
fi
# The example's command is `python3`: make that the interpreter that has torch.
mkdir -p "$WORK/bin"
ln -s "$PY" "$WORK/bin/python3"
rc=0
PATH="$WORK/bin:$PATH" "$TESSERA" run manifests/examples/byo-torchrun.yaml --workdir "$WORK/run" \
  --summary-json "$WORK/summary.json" >"$WORK/out.txt" 2>&1 || rc=$?
cat "$WORK/out.txt"
cat "$WORK"/run/logs/*.log
[[ $rc == 0 ]] || fail "tessera run exited $rc"
assert_no_survivors "$WORK/run"
grep -q "done: world 2" "$WORK/run/logs/worker-0-rank-0.log" || fail "rank 0 did not finish DDP"
[[ $(json "$WORK/summary.json" 'j["phase"]') == Succeeded ]] || fail "phase is not Succeeded"
echo PASS
