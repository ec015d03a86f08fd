#!/usr/bin/env bash
# End-to-end tests of ViT backbones through the commands: `train --model
# vit_t16` with SimCLR and with DINO (local views resample the position
# grid; with --activation-checkpointing the same weights), embed from the
# checkpoint and from the export (mean-pooled patch
# tokens and the class token), export as a timm state dict, a ViT teacher
# for distillation, and the one-line refusals of sizes that are not
# multiples of the patch size.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init train_vit
export OMP_WAIT_POLICY=PASSIVE

images="$work/images"
"$build/tests/e2e/make_images" "$images" 24 || fail "make_images"
small=(--data "$images" --batch-size 8 --num-workers 1 --threads 2
       --method-arg hidden_dim=64 --method-arg output_dim=32)
common=("${small[@]}" --image-size 32)

run="$work/simclr"
output=$("$bin" train "${common[@]}" --out "$run" --model vit_t16 --method simclr \
  --max-steps 3 2>&1) || fail "simclr vit_t16: train failed: $output"
for file in checkpoints/last.ckpt exported_models/exported_last.safetensors metrics.jsonl; do
  [ -s "$run/$file" ] || fail "simclr vit_t16: $file missing or empty"
done
grep -q "train: vit_t16, simclr" "$run/train.log" || fail "train.log does not name vit_t16"
loss=$(sed -n 's/.*"train_loss": \([^,]*\),.*/\1/p' "$run/metrics.jsonl" | tail -n 1)
case $loss in ''|*nan*|*inf*) fail "simclr vit_t16: train_loss '$loss'" ;; esac

# embed: 192-dimensional ViT-Ti features from the checkpoint and the export,
# at embed's default 224 px and at 48 px: both resample the 2 x 2 position grid.
expect 0 "embedded 24 images x 192 dims \(vit_t16, 224 px" -- \
  "$bin" embed --data "$images" --checkpoint "$run/checkpoints/last.ckpt" --out "$work/mean.npy"
expect 0 "embedded 24 images x 192 dims \(vit_t16, 48 px" -- \
  "$bin" embed --data "$images" --checkpoint "$run/exported_models/exported_last.safetensors" \
  --out "$work/cls.npy" --image-size 48 --vit-pool cls
[ -s "$work/mean.npy" ] && [ -s "$work/cls.npy" ] || fail "embed wrote no file"
cmp -s "$work/mean.npy" "$work/cls.npy" && fail "mean and cls pooling gave the same embeddings"
expect 2 "40 px is not a positive multiple of the patch size 16" -- \
  "$bin" embed --data "$images" --checkpoint "$run/checkpoints/last.ckpt" --out "$work/x.npy" \
  --image-size 40

# export: timm's names and OIHW patch embedding; reloads for embed.
expect 0 "exported backbone of vit_t16 \(5492160 parameters\)" -- \
  "$bin" export --checkpoint "$run/checkpoints/last.ckpt" --out "$work/vit.safetensors"
listing=$("$build/tools/safetensors_tool" list "$work/vit.safetensors" 2>&1)
for tensor in "cls_token	F32	1,1,192" "pos_embed	F32	1,5,192" \
              "patch_embed.proj.weight	F32	192,3,16,16" "blocks.11.ls2.gamma	F32	192" \
              "norm.bias	F32	192"; do
  printf '%s\n' "$listing" | grep -q -F "$tensor" || fail "export lacks '$tensor'"
done

# Distillation from the exported ViT into a resnet18.
output=$("$bin" train --data "$images" --batch-size 8 --image-size 32 --num-workers 1 \
  --threads 2 --out "$work/distill" --model resnet18 --method distillation \
  --method-arg "teacher=$work/vit.safetensors" --max-steps 2 2>&1) ||
  fail "distillation from a ViT teacher failed: $output"

# --checkpoint with the export (2 x 2 position grid) into a 48 px run (3 x 3):
# the grid is resized at load, as LightlyTrain does; a ResNet file is refused.
output=$("$bin" train "${small[@]}" --image-size 48 --out "$work/init" --model vit_t16 \
  --method simclr --checkpoint "$work/vit.safetensors" --max-steps 1 2>&1) ||
  fail "--checkpoint with another grid: $output"
expect 2 "not part of vit_t16|is missing|not a ViT|no ViT" -- \
  "$bin" train "${common[@]}" --out "$work/bad" --model vit_t16 --method simclr \
  --checkpoint "$work/distill/exported_models/exported_last.safetensors" --max-steps 1

# DINO: 32 px global views on the 2 x 2 position grid, 16 px local views resampled to 1 x 1.
output=$("$bin" train "${common[@]}" --out "$work/dino" --model vit_t16 --method dino \
  --local-image-size 16 --local-views 2 --method-arg bottleneck_dim=16 --max-steps 2 2>&1) ||
  fail "dino vit_t16: train failed: $output"
[ -s "$work/dino/exported_models/exported_last.safetensors" ] || fail "dino vit_t16: no export"
# --activation-checkpointing: the same run with blocks recomputed in the
# backward (LightlyTrain's spelling, every_n_blocks=5: blocks 0, 5 and 10 of
# the 12) ends with the same weights, byte for byte; a ResNet is refused.
output=$("$bin" train "${common[@]}" --out "$work/dino-recompute" --model vit_t16 --method dino \
  --local-image-size 16 --local-views 2 --method-arg bottleneck_dim=16 --max-steps 2 \
  activation_checkpoint_args.enabled=true activation_checkpoint_args.every_n_blocks=5 2>&1) ||
  fail "dino vit_t16 --activation-checkpointing: $output"
grep -q "activation checkpointing: on (blocks 0, 5, 10, ... recomputed" "$work/dino-recompute/train.log" ||
  fail "train.log does not say activation checkpointing is on every 5 blocks"
cmp -s "$work/dino/exported_models/exported_last.safetensors" \
  "$work/dino-recompute/exported_models/exported_last.safetensors" ||
  fail "--activation-checkpointing changed the trained weights"
expect_only 2 "^lightly-train-c train: --activation-checkpointing applies to ViT models only \(--model resnet18 is a ResNet\)$" -- \
  "$bin" train "${common[@]}" --out "$work/bad" --model resnet18 --method simclr --max-steps 1 \
  --activation-checkpointing
# (the kind named as it is: once every non-ViT was called a ResNet)
expect_only 2 "^lightly-train-c train: --activation-checkpointing applies to ViT models only \(--model torchvision/convnext_tiny is a ConvNeXt\)$" -- \
  "$bin" train "${common[@]}" --out "$work/bad" --model torchvision/convnext_tiny --method simclr \
  --max-steps 1 --activation-checkpointing
expect 2 "local views of 24 px: vit_t16 needs a multiple of its patch size 16" -- \
  "$bin" train "${common[@]}" --out "$work/bad" --model vit_t16 --method dino \
  --local-image-size 24 --max-steps 1
# the nearest multiple (14) is below the smallest view allowed (16): the advice is one that runs
expect 2 "local views of 16 px: vit_t14 needs a multiple of its patch size 14 \(e.g. 28 px\)" -- \
  "$bin" train --data "$images" --out "$work/bad" --model vit_t14 --image-size 28 --method dino \
  --local-image-size 16 --max-steps 1
expect 2 "image size 40 is not a multiple of the patch size 14" -- \
  "$bin" train --data "$images" --out "$work/bad" --model vit_s14 --image-size 40 --max-steps 1 \
  --method simclr

# timm's names as LightlyTrain takes them: a plain ViT (no LayerScale) trains
# with DINO's local views (its positions resampled), resumes, and
# exports without ls1 / ls2 (tools/check_torch_export.py loads such an export
# into timm; tests/test_vit.c holds the parameter counts)
run="$work/timm"
output=$("$bin" train "${common[@]}" --out "$run" --model timm/vit_tiny_patch16_224 --method dino \
  --local-image-size 16 --max-steps 2 2>&1) || fail "timm/vit_tiny_patch16_224: train failed: $output"
grep -q "train: timm/vit_tiny_patch16_224, dino" "$run/train.log" ||
  fail "train.log does not name timm/vit_tiny_patch16_224"
output=$("$bin" train "${common[@]}" --out "$run" --model timm/vit_tiny_patch16_224 --method dino \
  --local-image-size 16 --max-steps 2 --resume 2>&1) || fail "timm/vit_tiny_patch16_224: resume failed: $output"
names=$(grep -a -o '"blocks\.[0-9]*\.[a-z0-9_.]*"' "$run/exported_models/exported_last.safetensors")
grep -q 'blocks\.0\.attn\.qkv\.weight' <<<"$names" || fail "the export has no blocks.0.attn.qkv.weight"
! grep -q 'ls1' <<<"$names" || fail "a timm plain ViT's export has LayerScale"
expect 2 "image size 40 is not a multiple of the patch size 16" -- \
  "$bin" train --data "$images" --out "$work/bad" --model timm/vit_base_patch16_224 --image-size 40 \
  --max-steps 1 --method simclr

e2e_finish
