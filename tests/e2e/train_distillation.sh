#!/usr/bin/env bash
# End-to-end tests of LightlyTrain's distillation methods through `train`:
# a small random ViT teacher file (vit_t14, made by make_backbone: nothing
# is downloaded) distilled into a resnet18 with `distillation` (v3: LARS
# for a convolutional student, global and local losses logged, the queue in
# the checkpoint and the teacher not), `distillationv1` and `distillationv2`;
# a ResNet teacher into a ViT student (AdamW); teacher_arch; LightlyTrain's
# teacher_weights (the same run as the file as teacher); `distillation`
# on 2 CPU ranks (mpirun; the queue and the mixup are per rank, as
# LightlyTrain's per device, so no equivalence with one process is asked);
# and the one-line refusals, exit status 2 and nothing written, of a bad,
# missing or mismatching teacher file.
set -u
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/mpi.bash"
e2e_init train_distillation
mpi_require
export OMP_WAIT_POLICY=PASSIVE

images="$work/images"
"$build/tests/e2e/make_images" "$images" 24 >/dev/null || fail "make_images"
"$build/tests/e2e/make_backbone" "$work/vit_t14.safetensors" vit_t14 5 56 ||
  fail "make_backbone vit_t14"
"$build/tests/e2e/make_backbone" "$work/resnet18.safetensors" resnet18 6 ||
  fail "make_backbone resnet18"
common=(--data "$images" --batch-size 8 --image-size 56 --num-workers 1 --threads 2)

# `distillation` (v3), LightlyTrain's default, into a resnet18.
run="$work/v3"
output=$("$bin" train "${common[@]}" --out "$run" --model resnet18 --method distillation \
  --method-arg "teacher=$work/vit_t14.safetensors" --max-steps 3 2>&1) ||
  fail "distillation: train failed: $output"
for file in checkpoints/last.ckpt exported_models/exported_last.safetensors metrics.jsonl \
            train.log; do
  [ -s "$run/$file" ] || fail "distillation: $file missing or empty"
done
ls "$run"/events.out.tfevents.* >/dev/null 2>&1 || fail "distillation: no TensorBoard events"
last=$(tail -n 1 "$run/metrics.jsonl")
for tag in train_loss train_loss/global_loss train_loss/local_loss lr-LARS/projection_head_local; do
  value=$(printf '%s\n' "$last" | sed -n "s|.*\"$tag\": \([^,}]*\).*|\1|p")
  case $value in ''|*nan*|*inf*|null) fail "distillation: $tag is '$value' in $last" ;; esac
done
grep -q "train: resnet18, distillation" "$run/train.log" || fail "train.log does not name the method"
grep -q "base 1.8 at batch 1536, sqrt-scaled to batch 8), weight decay 1e-06" "$run/train.log" ||
  fail "distillation: not LARS 1.8 x sqrt(8 / 1536), wd 1e-6: $(grep config: "$run/train.log")"
grep -q "grad clip 1," "$run/train.log" || fail "distillation: gradient clipping is not 1.0"
# The checkpoint's tensor names: the queue, the heads, no teacher.
grep -a -q "distillation.teacher_queue" "$run/checkpoints/last.ckpt" ||
  fail "the checkpoint has no teacher queue"
grep -a -q "projection_head_local.layers.0.weight" "$run/checkpoints/last.ckpt" ||
  fail "the checkpoint has no local projection head"
grep -a -q "teacher_backbone" "$run/checkpoints/last.ckpt" && fail "the checkpoint holds the teacher"
listing=$("$build/tools/safetensors_tool" list "$run/exported_models/exported_last.safetensors")
printf '%s\n' "$listing" | grep -q -F "conv1.weight	F32	64,3,7,7" ||
  fail "the export is not the resnet18 student"
printf '%s\n' "$listing" | grep -q -E "cls_token|projection_head" && fail "the export holds more than the student"

# distillationv1 (global) and distillationv2 (the teacher's last two blocks).
for method in distillationv1 distillationv2; do
  output=$("$bin" train "${common[@]}" --out "$work/$method" --model resnet18 --method "$method" \
    --method-arg "teacher=$work/vit_t14.safetensors" --max-steps 2 2>&1) ||
    fail "$method: train failed: $output"
  [ -s "$work/$method/exported_models/exported_last.safetensors" ] || fail "$method: no export"
  loss=$(sed -n 's/.*"train_loss": \([^,]*\),.*/\1/p' "$work/$method/metrics.jsonl" | tail -n 1)
  case $loss in ''|*nan*|*inf*) fail "$method: train_loss '$loss'" ;; esac
done
grep -q "base 9 at batch 1536" "$work/distillationv2/train.log" || fail "distillationv2: not LARS 9.0"

# A ResNet teacher into a ViT student (AdamW, weight decay 0.04), by
# LightlyTrain's other name; teacher_arch agreeing with the file.
output=$("$bin" train "${common[@]}" --out "$work/vit_student" --model vit_t14 \
  --method distillationv3 --method-arg "teacher=$work/resnet18.safetensors" \
  --method-arg teacher_arch=resnet18 --max-steps 2 2>&1) ||
  fail "ResNet teacher, ViT student: train failed: $output"
grep -q '"lr-AdamW/backbone"' "$work/vit_student/metrics.jsonl" || fail "ViT student: not AdamW"
grep -q "weight decay 0.04" "$work/vit_student/train.log" || fail "ViT student: weight decay not 0.04"

# Data parallel: 2 ranks of 4 images, only rank 0 writes.
mpi_run 2 "$bin" train --data "$images" --batch-size 8 --image-size 56 --num-workers 1 \
  --threads 1 --out "$work/ranks" --model resnet18 \
  --method distillation --method-arg "teacher=$work/vit_t14.safetensors" --max-steps 2 \
  >"$work/ranks.log" 2>&1 || fail "distillation on 2 ranks failed: $(tail -n 20 "$work/ranks.log")"
grep -q "data parallel: 2 ranks (mpi, 2 per node), global batch 8 = 4 per rank" \
  "$work/ranks/train.log" || fail "2 ranks: train.log does not say so"
[ "$(grep -c '"train_loss/local_loss": [0-9]' "$work/ranks/metrics.jsonl")" -eq 2 ] ||
  fail "2 ranks: not two logged steps with a local loss: $(cat "$work/ranks/metrics.jsonl")"
[ -s "$work/ranks/exported_models/exported_last.safetensors" ] || fail "2 ranks: no export"

# LightlyTrain's teacher_weights: the teacher named (an architecture), its
# weights from the file: the same run as teacher=FILE, to the last bit.
output=$("$bin" train "${common[@]}" --out "$work/v3-weights" --model resnet18 \
  --method distillation --method-arg teacher=vit_t14 \
  --method-arg "teacher_weights=$work/vit_t14.safetensors" --max-steps 3 2>&1) ||
  fail "teacher_weights: train failed: $output"
"$build/tests/e2e/compare_weights" "$work/v3/exported_models/exported_last.safetensors" \
  "$work/v3-weights/exported_models/exported_last.safetensors" 0 0 >/dev/null ||
  fail "teacher=vit_t14 teacher_weights=FILE did not train as teacher=FILE"
refuse_distillation "teacher_weights=$work/none.pt: no such file" \
  --method-arg "teacher_weights=$work/none.pt"

# Refusals: one line, exit status 2, nothing written.
printf 'not a safetensors file\n' >"$work/bad.safetensors"
refuse_distillation "teacher: .*bad.safetensors: " --method-arg "teacher=$work/bad.safetensors"
refuse_distillation "teacher: .*missing.safetensors: cannot open" \
  --method-arg "teacher=$work/missing.safetensors"
refuse_distillation "vit_s14 does not match the file: width 384, the file's 192" \
  --method-arg "teacher=$work/vit_t14.safetensors" --method-arg teacher_arch=vit_s14
# No teacher: LightlyTrain's default, dinov3/vitb16, not downloaded here
# (the tests run offline, lib.bash).
refuse_distillation "dinov3/vitb16 is not downloaded .*weights fetch dinov3/vitb16.*--method simclr"
refuse_distillation "queue_size=99 must be smaller than the dataset \(24 images\)" \
  --method-arg "teacher=$work/vit_t14.safetensors" --method-arg queue_size=99

e2e_finish
