#!/usr/bin/env bash
# End-to-end test of `train --method dinov2` on a ViT-Ti/16 and generated
# images (64 px global views with iBOT masks, 2 local views of 32 px, small
# heads): the outputs are there, the loss terms are logged and finite, the
# export is a timm state dict without the mask token, the parameter groups
# are LightlyTrain's (layer-wise lr decay, the patch embedding's multiplier,
# backbone and last layer frozen at lr 0 for their first steps), a run
# killed inside a checkpoint write and resumed ends byte-identical to one
# never interrupted (EMA teacher, both centers, mask token, masks keyed by
# step, AdamW's moments of the frozen groups, the last layer thawing at the
# resume point and the backbone after it), Sinkhorn-Knopp centring runs,
# and bad input is a one-line error with exit status 2.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init train_dinov2
export OMP_WAIT_POLICY=PASSIVE

images="$work/images"
"$build/tests/e2e/make_images" "$images" 16 || fail "make_images"
common=(--data "$images" --model vit_t16 --method dinov2 --image-size 64
        --local-image-size 32 --local-views 2 --batch-size 8 --num-workers 1 --threads 2
        --max-steps 4 --method-arg hidden_dim=64 --method-arg bottleneck_dim=16
        --method-arg output_dim=32 --method-arg student_freeze_last_layer_steps=2
        --method-arg student_freeze_backbone_steps=3)

a="$work/a"
output=$("$bin" train "${common[@]}" --out "$a" 2>&1) || fail "dinov2: train failed: $output"
for file in checkpoints/last.ckpt exported_models/exported_last.safetensors metrics.jsonl; do
  [ -s "$a/$file" ] || fail "dinov2: $file missing or empty"
done
grep -q "train: vit_t16, dinov2" "$a/train.log" || fail "train.log does not name dinov2"
for tag in train_loss train_loss/ibot_loss train_loss/koleo_loss schedule/teacher_temp; do
  value=$(sed -n "s|.*\"$tag\": \([^,}]*\).*|\1|p" "$a/metrics.jsonl" | tail -n 1)
  case $value in ''|*nan*|*inf*) fail "dinov2: $tag is '$value'" ;; esac
done
grep -q '"lr-AdamW/mask_token"' "$a/metrics.jsonl" || fail "no mask_token parameter group"
# vit_t16 has 12 blocks: the patch embedding's lr is 0.9^13 x 0.2 of the
# lr, the final norm's the lr itself
grep -q "group backbone: .* frozen for 3 steps (at lr 0), lr x 0.05084..1$" "$a/train.log" ||
  fail "backbone group: $(grep 'group backbone' "$a/train.log")"
grep -q "group last_layer: 544 parameters, frozen for 2 steps (at lr 0)" "$a/train.log" ||
  fail "last_layer group (weight_v 32 x 16 and a trained weight_g): $(grep 'group last_layer' "$a/train.log")"
backbone_lr=$(sed -n 's|.*"lr-AdamW/backbone": \([^,}]*\).*|\1|p' "$a/metrics.jsonl" | paste -sd' ')
case $backbone_lr in "0 0 "[1-9]*) ;; *) fail "backbone lr by step: '$backbone_lr' (0 while frozen)" ;; esac
listing=$("$build/tools/safetensors_tool" list "$a/exported_models/exported_last.safetensors" 2>&1)
printf '%s\n' "$listing" | grep -q -F "cls_token" || fail "export lacks cls_token: $listing"
printf '%s\n' "$listing" | grep -q "mask_token" && fail "the timm export holds the mask token"

# Killed inside its second atomic write, then resumed: the same run.
b="$work/b"
{ env LTC_FAULT=kill-before-rename@2 "$bin" train "${common[@]}" --out "$b" >"$work/b1.log" 2>&1; } 2>/dev/null
[ $? -eq 137 ] || fail "dinov2: expected SIGKILL (137): $(tail -n 3 "$work/b1.log")"
output=$("$bin" train "${common[@]}" --out "$b" --resume 2>&1) || fail "dinov2: resume failed: $output"
printf '%s\n' "$output" | grep -q "resuming from" || fail "dinov2: did not resume: $output"
cmp -s "$a/checkpoints/last.ckpt" "$b/checkpoints/last.ckpt" ||
  fail "dinov2: the resumed run's checkpoint differs from the uninterrupted one"
cmp -s "$a/exported_models/exported_last.safetensors" "$b/exported_models/exported_last.safetensors" ||
  fail "dinov2: the resumed run's export differs"

output=$("$bin" train "${common[@]}" --out "$work/sk" --method-arg center_method=sinkhorn_knopp \
  2>&1) || fail "dinov2 sinkhorn_knopp: train failed: $output"
value=$(sed -n 's|.*"train_loss": \([^,}]*\).*|\1|p' "$work/sk/metrics.jsonl" | tail -n 1)
case $value in ''|*nan*|*inf*) fail "dinov2 sinkhorn_knopp: train_loss '$value'" ;; esac

expect 2 "center_method=sinkhorn: expected softmax or sinkhorn_knopp" -- \
  "$bin" train "${common[@]}" --out "$work/bad1" --method-arg center_method=sinkhorn
expect 2 "mask_ratio_max=0.7: expected a number in \\[0, 0.5\\]" -- \
  "$bin" train "${common[@]}" --out "$work/bad2" --method-arg mask_ratio_max=0.7
expect 2 "unknown key 'teacher_temp'" -- \
  "$bin" train "${common[@]}" --out "$work/bad3" --method-arg teacher_temp=0.04
expect 2 "layerwise_decay=-1: expected a number in \\[0, 1\\]" -- \
  "$bin" train "${common[@]}" --out "$work/bad5" --method-arg layerwise_decay=-1
expect 2 "norm_last_layer=yes: expected true or false" -- \
  "$bin" train "${common[@]}" --out "$work/bad6" --method-arg norm_last_layer=yes
expect 2 "dinov2: needs a ViT" -- \
  "$bin" train --data "$images" --model resnet18 --method dinov2 --image-size 64 \
  --batch-size 8 --out "$work/bad4" --max-steps 1
e2e_finish
