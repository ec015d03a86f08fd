#!/usr/bin/env bash
# End-to-end test of 16-mixed and bf16-mixed training on the reference
# backend (`--backend ref`), which stores every activation rounded to the
# 16-bit dtype as the GPU will (docs/gpu.md, "The 16-bit storage"):
# - the first step's loss (before any update, from the same weights and
#   batch) is within 1% (fp16) and 5% (bf16) of 32-true's, and differs from
#   it (the rounding happened); measured 0.2% and 1.6% (2026-11-23);
# - 16-mixed turns the loss scaler on (train.log, loss_scale logged) and
#   bf16-mixed does not (as Lightning: bf16 needs no scaling);
# - the cpu backend refuses both with a one-line error, exit 2.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init train_precision
export OMP_WAIT_POLICY=PASSIVE  # see train.sh

images="$work/images"
"$build/tests/e2e/make_images" "$images" 16 >/dev/null || fail "make_images"
common=(--data "$images" --num-workers 1 --threads 2 --batch-size 8 --log-every 1 --image-size 32
        --method simclr --method-arg hidden_dim=64 --method-arg output_dim=32 --max-steps 2
        --backend ref)

first_loss() {
  sed -n 's|^{"step": 0,.*"train_loss": \([^,}]*\).*|\1|p' "$1/metrics.jsonl"
}

for precision in 32-true 16-mixed bf16-mixed; do
  "$bin" train "${common[@]}" --precision "$precision" --out "$work/$precision" \
    >"$work/$precision.log" 2>&1 ||
    fail "$precision: the run failed: $(tail -n 3 "$work/$precision.log")"
  grep -q "precision $precision" "$work/$precision/train.log" ||
    fail "$precision: train.log does not name the precision"
done

reference=$(first_loss "$work/32-true")
for case in "16-mixed 0.01" "bf16-mixed 0.05"; do
  set -- $case
  loss=$(first_loss "$work/$1")
  awk -v a="$loss" -v b="$reference" -v bound="$2" \
    'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(a != b && d < bound) }' ||
    fail "$1: step 0 loss $loss against 32-true's $reference: not within $2 relative (or equal)"
done

grep -q "loss scaling: on (start scale 65536" "$work/16-mixed/train.log" ||
  fail "16-mixed: the loss scaler is not on"
grep -q '"loss_scale"' "$work/16-mixed/metrics.jsonl" || fail "16-mixed: loss_scale not logged"
grep -q "loss scaling: on" "$work/bf16-mixed/train.log" && fail "bf16-mixed turned the scaler on"

for precision in 16-mixed bf16-mixed; do
  expect 2 "--precision $precision needs a GPU" -- "$bin" train --data "$images" \
    --out "$work/cpu-$precision" --precision "$precision" --max-steps 1 --method simclr
done

e2e_finish
