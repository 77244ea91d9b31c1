#!/usr/bin/env bash
# The demo example (two data-parallel ranks) completes: exit 0, the summary JSON, every step
# trained, a final loss that shows learning, and no process left.
source "$(dirname "$0")/lib.sh"

rc=0
"$TESSERA" run "$TINY" --workdir "$WORK/run" \
  --summary-json "$WORK/summary.json" --sample 100 >"$WORK/out.txt" 2>&1 || rc=$?
cat "$WORK/out.txt"
[[ $rc == 0 ]] || fail "tessera run exited $rc"
assert_no_survivors "$WORK/run"

s=$WORK/summary.json
[[ $(json "$s" 'j["phase"]') == Succeeded ]] || fail "phase is not Succeeded"
[[ $(json "$s" 'j["steps"]') == 300 ]] || fail "steps: $(json "$s" 'j["steps"]'), want 300"
[[ $(json "$s" 'j["restarts"]') == 0 ]] || fail "unexpected restarts"
# ln(256) = 5.55 nats is a uniform guess over bytes; the character frequencies of the corpus
# alone give 3.31 and the best bigram table 2.45 (measured on data/tinyshakespeare.txt). A
# validation loss below 2.8 means the model predicts from context, far past frequencies (this
# machine: 2.52). The training loss is one batch of 16 sequences, so it gets a wider margin.
json "$s" 'j["final_val_loss"] < 2.8 and j["final_train_loss"] < 2.9' | grep -qx True ||
  fail "did not learn enough: train $(json "$s" 'j["final_train_loss"]'), val $(json "$s" 'j["final_val_loss"]')"
json "$s" 'j["tokens_per_second"] > 0' | grep -qx True || fail "no throughput reported"
[[ -d $(json "$s" 'j["checkpoint"]') ]] || fail "the final checkpoint is missing"
json "$s" 'len(j["sample"])' | grep -qx 100 || fail "no 100-byte sample"
grep -q "sample (100 bytes" "$WORK/out.txt" || fail "the sample was not printed"
echo PASS
