#!/usr/bin/env bash
# End-to-end test of `train --method dinov31` (LightlyTrain's DINOv2 with
# the PaKA patch kernel alignment loss) on a ViT-Ti/16 and generated images:
# 64 px global views and their clean renders, 1 DINOv2 local view and 2
# PaKA local views of 32 px. The PaKA loss is logged, finite and in [0, 2];
# train.log lists the student_paka_head group; the export is the teacher's
# timm state dict without the PaKA heads; a run killed inside a checkpoint
# write and resumed ends byte-identical to one never interrupted (the PaKA
# heads and the tokens drawn when paka_max_tokens cuts the grid are in the
# state); bad PaKA arguments exit 2 with one line.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init train_dinov31
export OMP_WAIT_POLICY=PASSIVE

images="$work/images"
"$build/tests/e2e/make_images" "$images" 16 || fail "make_images"
base=(--data "$images" --model vit_t16 --method dinov31 --image-size 64
      --local-image-size 32 --batch-size 8 --num-workers 1 --threads 2
      --max-steps 4 --method-arg hidden_dim=64 --method-arg bottleneck_dim=16
      --method-arg output_dim=32)
common=("${base[@]}" --local-views 1 --method-arg paka_num_local=2 --method-arg paka_max_tokens=3)

a="$work/a"
output=$("$bin" train "${common[@]}" --out "$a" 2>&1) || fail "dinov31: train failed: $output"
grep -q "train: vit_t16, dinov31" "$a/train.log" || fail "train.log does not name dinov31"
grep -q "group student_paka_head: " "$a/train.log" ||
  fail "no student_paka_head group: $(grep group "$a/train.log")"
values=$(sed -n 's|.*"train_loss/paka_loss": \([^,}]*\).*|\1|p' "$a/metrics.jsonl")
[ "$(printf '%s\n' "$values" | wc -l)" -ge 2 ] || fail "paka_loss logged: '$values'"
for value in $values; do
  awk -v v="$value" 'BEGIN { exit !(v > 0 && v < 2) }' || fail "paka_loss '$value' not in (0, 2)"
done
listing=$("$build/tools/safetensors_tool" list "$a/exported_models/exported_last.safetensors" 2>&1)
printf '%s\n' "$listing" | grep -q -F "cls_token" || fail "export lacks cls_token: $listing"
printf '%s\n' "$listing" | grep -q "paka" && fail "the timm export holds a PaKA head"

b="$work/b"
{ env LTC_FAULT=kill-before-rename@2 "$bin" train "${common[@]}" --out "$b" >"$work/b1.log" 2>&1; } 2>/dev/null
[ $? -eq 137 ] || fail "dinov31: expected SIGKILL (137): $(tail -n 3 "$work/b1.log")"
output=$("$bin" train "${common[@]}" --out "$b" --resume 2>&1) || fail "dinov31: resume failed: $output"
printf '%s\n' "$output" | grep -q "resuming from" || fail "dinov31: did not resume: $output"
cmp -s "$a/checkpoints/last.ckpt" "$b/checkpoints/last.ckpt" ||
  fail "dinov31: the resumed run's checkpoint differs from the uninterrupted one"

expect 2 "paka_num_local=0: expected an integer in 1..20" -- \
  "$bin" train "${base[@]}" --out "$work/bad1" --method-arg paka_num_local=0
expect 2 "at most 24 views in all" -- \
  "$bin" train "${base[@]}" --out "$work/bad2" --local-views 12 --method-arg paka_num_local=9
expect 2 "paka_max_tokens=1: expected an integer in 2..1048576" -- \
  "$bin" train "${base[@]}" --out "$work/bad3" --method-arg paka_max_tokens=1
expect 2 "dinov31: needs a ViT" -- \
  "$bin" train --data "$images" --model resnet18 --method dinov31 --image-size 64 \
  --batch-size 8 --out "$work/bad4" --max-steps 1
e2e_finish
