#!/usr/bin/env bash
# End-to-end tests of DINOv3 ViTs through the CLI, with tiny DINOv3 weights
# taken out of the parity fixture (tests/fixtures/dinov3.safetensors:
# width 32, 2 blocks, patch 8, 4 registers, RoPE; nothing is downloaded)
# in DINOv3's own naming (rope_embed.periods, storage_tokens, a key bias
# masked by qkv.bias_mask) and in transformers' DINOv3ViTModel naming:
# - a teacher for `distillation` (v3) into a resnet18, and for
#   `distillationv2` into a dinov3/vitt16 student, whose export is in timm's
#   Eva naming (vit_tiny_patch16_dinov3_qkvb), embeds as its checkpoint and
#   serves as a new run's --checkpoint;
# - `embed` of the files (the class token by default, as LightlyTrain's
#   DINOv3 wrapper pools);
# - `export` of a transformers file in timm's names, which embeds exactly
#   as the file it came from;
# - resume equality of a dinov3/vitt16 run (its training forwards draw RoPE
#   rescales);
# - the one-line refusal (exit 2, nothing written) of a teacher_arch that
#   does not match a DINOv3 file, and of --model dinov3/vitt16 (LightlyTrain
#   starts it from weights of its own: the student here is
#   dinov3/vitt16-notpretrained).
set -u
source "$(dirname "$0")/lib.bash"
e2e_init train_dinov3
export OMP_WAIT_POLICY=PASSIVE

fixture=tests/fixtures/dinov3.safetensors
images="$work/images"
"$build/tests/e2e/make_images" "$images" 24 >/dev/null || fail "make_images"
"$build/tools/safetensors_tool" extract "$fixture" gelu/dinov3. "$work/dinov3.safetensors" ||
  fail "extract the DINOv3-named model"
"$build/tools/safetensors_tool" extract "$fixture" swiglu/hf. "$work/hf.safetensors" ||
  fail "extract the transformers-named model"
common=(--data "$images" --batch-size 8 --image-size 64 --num-workers 1 --threads 2)

# `distillation` (v3) from the DINOv3 teacher into a resnet18.
output=$("$bin" train "${common[@]}" --out "$work/v3" --model resnet18 --method distillation \
  --method-arg "teacher=$work/dinov3.safetensors" --max-steps 2 2>&1) ||
  fail "distillation from a DINOv3 teacher: train failed: $output"
last=$(tail -n 1 "$work/v3/metrics.jsonl" 2>/dev/null)
for tag in train_loss train_loss/global_loss train_loss/local_loss; do
  value=$(printf '%s\n' "$last" | sed -n "s|.*\"$tag\": \([^,}]*\).*|\1|p")
  case $value in ''|*nan*|*inf*|null) fail "DINOv3 teacher: $tag is '$value' in $last" ;; esac
done

# `distillationv2` (the teacher's last two blocks) into a DINOv3 student.
run="$work/student"
output=$("$bin" train "${common[@]}" --out "$run" --model dinov3/vitt16-notpretrained \
  --method distillationv2 --method-arg "teacher=$work/dinov3.safetensors" --max-steps 2 2>&1) ||
  fail "dinov3/vitt16 student: train failed: $output"
grep -q "train: dinov3/vitt16, distillationv2" "$run/train.log" ||
  fail "train.log does not name the dinov3/vitt16 student"
loss=$(sed -n 's/.*"train_loss": \([^,]*\),.*/\1/p' "$run/metrics.jsonl" | tail -n 1)
case $loss in ''|*nan*|*inf*) fail "dinov3/vitt16 student: train_loss '$loss'" ;; esac
listing=$("$build/tools/safetensors_tool" list "$run/exported_models/exported_last.safetensors")
for line in "blocks.11.gamma_1	F32	192" "blocks.0.attn.q_bias	F32	192" \
            "blocks.0.attn.qkv.weight	F32	576,192" "reg_token	F32	1,4,192" \
            "metadata	timm_model	vit_tiny_patch16_dinov3_qkvb" "metadata	pool	cls"; do
  printf '%s\n' "$listing" | grep -q -F "$line" || fail "the student's export lacks '$line'"
done
printf '%s\n' "$listing" | grep -q -E "pos_embed|qkv.bias|ls1.gamma" &&
  fail "the student's export is not in timm's Eva names"
expect 0 "embedded 24 images x 192 dims \(dinov3/vitt16, 64 px" -- \
  "$bin" embed --data "$images" --checkpoint "$run/checkpoints/last.ckpt" --out "$work/ckpt.npy" \
  --image-size 64
expect 0 "embedded 24 images x 192 dims \(dinov3/vitt16, 64 px" -- \
  "$bin" embed --data "$images" --checkpoint "$run/exported_models/exported_last.safetensors" \
  --out "$work/export.npy" --image-size 64
cmp -s "$work/ckpt.npy" "$work/export.npy" || fail "the student's checkpoint and export embed apart"
# The export as a new run's initial weights (--checkpoint reads timm's Eva names).
output=$("$bin" train "${common[@]}" --out "$work/init" --model dinov3/vitt16-notpretrained --method simclr \
  --checkpoint "$run/exported_models/exported_last.safetensors" --max-steps 1 2>&1) ||
  fail "dinov3/vitt16 from the export's weights: train failed: $output"

# Resume: a dinov3/vitt16 run killed after its first epoch's checkpoint and
# resumed ends byte for byte as the run that was not (the RoPE rescale
# draws are keyed by the batch, not by what the process has counted).
simclr=(--data "$images" --batch-size 8 --image-size 32 --num-workers 1 --threads 2
        --model dinov3/vitt16-notpretrained --method simclr --epochs 2)
"$bin" train "${simclr[@]}" --out "$work/whole" >/dev/null 2>&1 || fail "dinov3/vitt16 simclr run"
{ LTC_FAULT=kill-before-export@3 "$bin" train "${simclr[@]}" --out "$work/cut" >/dev/null 2>&1; } \
  2>/dev/null
[ $? -eq 137 ] || fail "the run with LTC_FAULT=kill-before-export@3 was not killed"
"$bin" train "${simclr[@]}" --out "$work/cut" --resume >/dev/null 2>&1 || fail "resume failed"
for file in checkpoints/last.ckpt exported_models/exported_last.safetensors; do
  cmp -s "$work/whole/$file" "$work/cut/$file" || fail "resumed run: $file differs"
done

# embed: the class token by default, the patch mean on request.
expect 0 "embedded 24 images x 32 dims \(dinov3_d32_l2_p8, 56 px" -- \
  "$bin" embed --data "$images" --checkpoint "$work/dinov3.safetensors" --out "$work/cls.npy" \
  --image-size 56
expect 0 "embedded 24 images x 32 dims" -- \
  "$bin" embed --data "$images" --checkpoint "$work/dinov3.safetensors" --out "$work/cls2.npy" \
  --image-size 56 --vit-pool cls
expect 0 "embedded 24 images x 32 dims" -- \
  "$bin" embed --data "$images" --checkpoint "$work/dinov3.safetensors" --out "$work/mean.npy" \
  --image-size 56 --vit-pool mean
cmp -s "$work/cls.npy" "$work/cls2.npy" || fail "embed's default pooling of DINOv3 is not cls"
cmp -s "$work/cls.npy" "$work/mean.npy" && fail "mean and cls pooling gave the same embeddings"

# export: a transformers DINOv3ViTModel file (SwiGLU) in timm's Eva names.
expect 0 "exported backbone of dinov3_d32_l2_p8" -- \
  "$bin" export --checkpoint "$work/hf.safetensors" --out "$work/eva.safetensors"
listing=$("$build/tools/safetensors_tool" list "$work/eva.safetensors")
for line in "blocks.1.mlp.fc1_g.weight	F32	48,32" "blocks.1.mlp.fc1_x.bias	F32	48" \
            "blocks.1.gamma_2	F32	32" "patch_embed.proj.weight	F32	32,3,8,8"; do
  printf '%s\n' "$listing" | grep -q -F "$line" || fail "the Eva export lacks '$line'"
done
for checkpoint in hf eva; do
  "$bin" embed --data "$images" --checkpoint "$work/$checkpoint.safetensors" \
    --out "$work/$checkpoint.npy" --image-size 48 >/dev/null 2>&1 || fail "embed $checkpoint"
done
cmp -s "$work/hf.npy" "$work/eva.npy" || fail "the Eva export embeds apart from its source"

# Refusals: one line, exit status 2, nothing written.
refuse_distillation "dinov3/vits16 does not match the file: width 384, the file's 32" \
  --method-arg "teacher=$work/dinov3.safetensors" --method-arg teacher_arch=dinov3/vits16

# LightlyTrain's dinov3/vitt16 starts from its own distilled weights, which
# are not downloadable here: refused in one line naming -notpretrained.
expect_only 2 "^lightly-train-c train: --model dinov3/vitt16: LightlyTrain starts it from its own distilled weights \(dinov3_vitt16_distillationv2.pth\), .* --model dinov3/vitt16-notpretrained starts from a random initialisation" -- \
  "$bin" train "${common[@]}" --out "$work/vitt16" --model dinov3/vitt16 --method simclr
[ -e "$work/vitt16" ] && fail "the refused run wrote $work/vitt16"
# So are its other weights of the same architectures (EUPE's, LingBot's).
expect_only 2 "^lightly-train-c train: --model dinov3/convnext_tiny_eupe: LightlyTrain's EUPE weights of dinov3/convnext-tiny are not downloadable by name here; --model dinov3/convnext-tiny-notpretrained" -- \
  "$bin" train "${common[@]}" --out "$work/eupe" --model dinov3/convnext_tiny_eupe --method simclr
[ -e "$work/eupe" ] && fail "the refused run wrote $work/eupe"

e2e_finish
