#!/usr/bin/env bash
# End-to-end tests of the step record and the loss scaler in `train`
# (docs/gpu.md "Mixed precision"), on the cpu backend with the test-only
# LTC_TEST_LOSS_SCALER (16-mixed, which turns the scaler on, runs on the GPU
# or, slowly, on the ref backend: tests/e2e/train_precision.sh):
# - scaling by a power of two is exact in fp32, so a run with the scaler
#   logs the same loss at every step as one without, and ends with the same
#   weights (methods with a single loss, several terms, local views,
#   accumulation, AdamW), and logs loss_scale;
# - an injected NaN gradient is skipped, halves the scale and the run goes
#   on (GradScaler); the skip is in train.log and loss_scale drops;
# - NaN gradients at every step stop the run once the scale is down to 1,
#   with the message, exit 1 and the last checkpoint untouched;
# - killed after a checkpoint and resumed, the scale, its growth count and
#   AdamW's count of applied steps continue: the same run as uninterrupted;
# - a bad LTC_TEST_LOSS_SCALER is a one-line error, exit 2.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init train_loss_scaling
export OMP_WAIT_POLICY=PASSIVE  # see train.sh

images="$work/images"
"$build/tests/e2e/make_images" "$images" 24 >/dev/null || fail "make_images"
common=(--data "$images" --num-workers 1 --threads 2 --batch-size 8 --log-every 1
        --method-arg hidden_dim=64 --method-arg output_dim=32)

# "STEP VALUE" per logged value of TAG in metrics.jsonl.
metric() {
  sed -n "s|^{\"step\": \([0-9]*\),.*\"$2\": \([^,}]*\).*|\1 \2|p" "$1"
}

# --- 1. With and without the scaler: the same losses and weights.
scaled_run() {  # NAME -- train args...
  local name=$1
  shift 2
  "$bin" train "${common[@]}" --out "$work/$name-plain" "$@" >"$work/$name-plain.log" 2>&1 ||
    fail "$name: plain run failed: $(tail -n 3 "$work/$name-plain.log")"
  LTC_TEST_LOSS_SCALER=65536:1000 "$bin" train "${common[@]}" --out "$work/$name-scaled" "$@" \
    >"$work/$name-scaled.log" 2>&1 ||
    fail "$name: scaled run failed: $(tail -n 3 "$work/$name-scaled.log")"
  local plain scaled
  plain=$(metric "$work/$name-plain/metrics.jsonl" train_loss)
  scaled=$(metric "$work/$name-scaled/metrics.jsonl" train_loss)
  [ -n "$plain" ] && [ "$plain" = "$scaled" ] ||
    fail "$name: train_loss with the scaler differs:"$'\n'"$plain"$'\n'"scaled:"$'\n'"$scaled"
  "$build/tests/e2e/compare_weights" "$work/$name-plain/exported_models/exported_last.safetensors" \
    "$work/$name-scaled/exported_models/exported_last.safetensors" 1e-38 0 >/dev/null ||
    fail "$name: the weights trained with the scaler differ"
  [ "$(metric "$work/$name-scaled/metrics.jsonl" loss_scale | tail -n 1)" = "5 65536" ] ||
    fail "$name: loss_scale is not logged as 65536: $(metric "$work/$name-scaled/metrics.jsonl" loss_scale)"
  grep -q "loss scaling: on (LTC_TEST_LOSS_SCALER" "$work/$name-scaled/train.log" ||
    fail "$name: train.log does not say the scaler is on"
  grep -q '"loss_scale"' "$work/$name-plain/metrics.jsonl" && fail "$name: a plain run logs loss_scale"
}
scaled_run simclr -- --image-size 32 --method simclr --max-steps 6 --accumulate-grad-batches 2
scaled_run vicreg -- --image-size 32 --method vicreg --max-steps 6 --optim adamw
scaled_run dino -- --image-size 32 --method dino --max-steps 6 --local-image-size 16 \
  --local-views 2 --method-arg bottleneck_dim=16
scaled_run dinov2 -- --model vit_t16 --method dinov2 --image-size 64 --local-image-size 32 \
  --local-views 2 --max-steps 6 --method-arg bottleneck_dim=16

# --- 2. A NaN gradient at step 3: skipped, the scale halved, the run finishes.
skip="$work/skip"
LTC_FAULT=nan-gradient@3 LTC_TEST_LOSS_SCALER=1024:2 "$bin" train "${common[@]}" \
  --image-size 32 --method simclr --max-steps 6 --out "$skip" >"$work/skip.log" 2>&1 ||
  fail "skip: the run did not finish: $(tail -n 3 "$work/skip.log")"
grep -q "step 3: NaN or infinite gradients at loss scale 2048: update skipped" "$skip/train.log" ||
  fail "skip: train.log does not report the skipped step: $(grep -i skip "$skip/train.log")"
# The scale each step used: 1024 doubles after 2 good steps; step 3's
# NaN halves it back.
scales=$(metric "$skip/metrics.jsonl" loss_scale | tr '\n' ' ')
[ "$scales" = "0 1024 1 1024 2 2048 3 2048 4 1024 5 1024 " ] ||
  fail "skip: the loss scale per step is not GradScaler's: $scales"

# --- 3. NaN gradients at every step: the scale falls to 1 and the run stops.
cp -r "$skip" "$work/collapse"
before=$(cksum <"$work/collapse/checkpoints/last.ckpt")
output=$(LTC_FAULT=nan-gradient LTC_TEST_LOSS_SCALER=4:2000 "$bin" train "${common[@]}" \
  --image-size 32 --method simclr --max-steps 6 --out "$work/collapse" --overwrite 2>&1)
status=$?
[ "$status" -eq 1 ] || fail "collapse: exit $status, expected 1: $output"
printf '%s\n' "$output" | tail -n 1 | grep -q -E "^stopping: the gradients of backbone hold NaN or infinite values with the loss scale down to 1 at step 2 .*the last good state, untouched, is in .*last.ckpt" ||
  fail "collapse: the last line does not say why and where: $(printf '%s\n' "$output" | tail -n 1)"
[ "$(cksum <"$work/collapse/checkpoints/last.ckpt")" = "$before" ] ||
  fail "collapse: the checkpoint changed"

# --- 4. Killed after its first checkpoint (step 3 of 6) and resumed: the
# scale, the growth count and AdamW's applied steps continue exactly.
resume_args=("${common[@]}" --image-size 32 --method simclr --optim adamw --max-steps 6)
LTC_FAULT=nan-gradient@1 LTC_TEST_LOSS_SCALER=1024:2 "$bin" train "${resume_args[@]}" \
  --out "$work/whole" >"$work/whole.log" 2>&1 || fail "resume: the uninterrupted run failed"
# 24 images / batch 8: an epoch of 3 steps, a checkpoint after step 3.
{ LTC_FAULT=nan-gradient@1,kill-before-export@3 LTC_TEST_LOSS_SCALER=1024:2 "$bin" train "${resume_args[@]}" \
  --out "$work/parts" >"$work/parts1.log" 2>&1; } 2>/dev/null
[ $? -eq 137 ] || fail "resume: the first part was not killed: $(tail -n 3 "$work/parts1.log")"
# nan-gradient@1 lies before the checkpoint: the resumed part injects nothing.
LTC_FAULT=nan-gradient@1 LTC_TEST_LOSS_SCALER=1024:2 "$bin" train "${resume_args[@]}" \
  --out "$work/parts" --resume >"$work/parts2.log" 2>&1 ||
  fail "resume: the resumed part failed: $(tail -n 3 "$work/parts2.log")"
for tag in train_loss loss_scale; do
  [ "$(metric "$work/parts/metrics.jsonl" $tag)" = "$(metric "$work/whole/metrics.jsonl" $tag)" ] ||
    fail "resume: $tag differs from the uninterrupted run"
done
"$build/tests/e2e/compare_weights" "$work/whole/checkpoints/last.ckpt" \
  "$work/parts/checkpoints/last.ckpt" 1e-38 0 >/dev/null ||
  fail "resume: the final checkpoint differs from the uninterrupted run's"
grep -a -q "loss_scaler.growth_tracker" "$work/whole/checkpoints/last.ckpt" ||
  fail "resume: the checkpoint holds no loss scaler state"

# --- 5. Bad values of the test switch.
for value in 0:5 abc 1024:0 1024:x; do
  expect 2 "LTC_TEST_LOSS_SCALER=$value: expected" -- env LTC_TEST_LOSS_SCALER=$value \
    "$bin" train "${common[@]}" --image-size 32 --method simclr --out "$work/bad" --max-steps 1
done

e2e_finish
