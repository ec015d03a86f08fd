#!/usr/bin/env bash
# End-to-end tests of torchvision's ShuffleNetV2 through the commands
# (LightlyTrain's torchvision/shufflenet_v2_x0_5 ... _x2_0): a SimCLR run
# killed after its first epoch and resumed, its export in torchvision's
# names (no fc) with the .pt beside it, embed of its 1024 features; DINO with
# local views (two input sizes); distillation, the default method, from a
# ResNet-18 teacher (the student's conv5 map read by the loss); two CPU
# ranks with synchronised BatchNorm against one process; a size that does
# not exist refused with exit 2.
set -u
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/mpi.bash"
e2e_init shufflenet
mpi_require
export OMP_WAIT_POLICY=PASSIVE

images="$work/images"
"$build/tests/e2e/make_images" "$images" 12 >/dev/null || fail "make_images"
common=(--data "$images" --batch-size 4 --image-size 64 --num-workers 1 --threads 2)
model=(--model torchvision/shufflenet_v2_x0_5)
names() { "$build/tools/safetensors_tool" list "$1" | sed -n 's/^tensor\t\([^\t]*\).*/\1/p'; }
npy_shape() { head -c 128 "$1" | LC_ALL=C sed -n "s/.*'shape': \(([0-9, ]*)\).*/\1/p"; }

# SimCLR, killed at step 3 (before the first epoch's export), resumed to step 6.
run="$work/simclr"
{ LTC_FAULT=kill-before-export@3 "$bin" train "${common[@]}" "${model[@]}" --out "$run" \
  --method simclr --max-steps 6 >"$work/log" 2>&1; } 2>/dev/null
[ $? -eq 137 ] || fail "simclr was not killed: $(tail -3 "$work/log")"
"$bin" train "${common[@]}" "${model[@]}" --out "$run" --method simclr --max-steps 6 --resume \
  >"$work/log" 2>&1 || fail "resume: $(tail -3 "$work/log")"
grep -q "resuming from .* at step 3 of 6" "$work/log" ||
  fail "the run did not resume at step 3: $(head -3 "$work/log")"
grep -q "train: torchvision/shufflenet_v2_x0_5, simclr" "$run/train.log" ||
  fail "train.log does not name the model: $(grep '^.\{20\}train:' "$run/train.log")"
export="$run/exported_models/exported_last.safetensors"
keys=$(names "$export")
for key in conv1.0.weight conv1.1.num_batches_tracked stage2.0.branch1.0.weight \
  stage2.0.branch2.3.weight stage3.7.branch2.6.running_var conv5.1.bias; do
  grep -qx "$key" <<<"$keys" || fail "the export lacks $key"
done
grep -q '^fc\.' <<<"$keys" && fail "the export holds fc"
[ -s "$run/exported_models/exported_last.pt" ] || fail "no exported_last.pt"
"$bin" embed --data "$images" --checkpoint "$export" --out "$work/embed.npy" --image-size 64 \
  >"$work/log" 2>&1 || fail "embed: $(tail -3 "$work/log")"
[ "$(npy_shape "$work/embed.npy")" = "(12, 1024)" ] ||
  fail "embeddings of shape $(npy_shape "$work/embed.npy"), not (12, 1024)"

# DINO with two local views of 32 px: a second input slot.
"$bin" train "${common[@]}" "${model[@]}" --out "$work/dino" --method dino --local-views 2 \
  --local-image-size 32 --method-arg hidden_dim=64 --method-arg bottleneck_dim=16 \
  --method-arg output_dim=32 --max-steps 2 >"$work/log" 2>&1 || fail "dino: $(tail -3 "$work/log")"

# Distillation (the default method) from a ResNet-18 teacher.
"$build/tests/e2e/make_backbone" "$work/teacher.safetensors" resnet18 5 64 ||
  fail "make_backbone resnet18"
for version in distillation distillationv1; do
  "$bin" train "${common[@]}" "${model[@]}" --out "$work/$version" --method "$version" \
    --method-arg teacher="$work/teacher.safetensors" --max-steps 2 >"$work/log" 2>&1 ||
    fail "$version: $(tail -3 "$work/log")"
  grep -q '"train_loss": ' "$work/$version/metrics.jsonl" || fail "$version logged no loss"
done

# Two CPU ranks with synchronised BatchNorm: one step equals one process's
# (the bound of train_ranks.sh for a model with kinks, plus a floor of 3e-5
# per element for what is rounding noise around 0: the running means of the
# norms after a bias-free 1x1 of a normalised map, and the bias gradients of
# the norms after a depthwise conv, whose shift the next norm removes; the
# worst of those measured 0.17 of the bound). Not vacuous: 2 ranks without
# synchronised BatchNorm miss it by far (35-fold measured).
one=(--data "$images" --batch-size 4 --image-size 64 --num-workers 1 --threads 1 --seed 3
     "${model[@]}" --method simclr --method-arg hidden_dim=64 --method-arg output_dim=32
     --max-steps 1)
"$bin" train "${one[@]}" --out "$work/one" >"$work/log" 2>&1 || fail "one process: $(tail -3 "$work/log")"
mpi_run 2 "$bin" train "${one[@]}" --out "$work/two" >"$work/log" 2>&1 ||
  fail "2 ranks: $(tail -3 "$work/log")"
grep -q "BatchNorm synchronised" "$work/two/train.log" || fail "2 ranks: BatchNorm not synchronised"
result=$("$build/tests/e2e/compare_weights" --norm --floor 3e-5 "$work/two/checkpoints/last.ckpt" \
  "$work/one/checkpoints/last.ckpt" 0.05) || fail "2 ranks differ from one process: $result"
echo "2 ranks against one process: $result"
mpi_run 2 "$bin" train "${one[@]}" --out "$work/unsynced" --sync-batchnorm false >"$work/log" 2>&1 ||
  fail "2 ranks without sync BatchNorm: $(tail -3 "$work/log")"
"$build/tests/e2e/compare_weights" --norm --floor 3e-5 "$work/unsynced/checkpoints/last.ckpt" \
  "$work/one/checkpoints/last.ckpt" 0.05 >/dev/null &&
  fail "2 ranks without sync BatchNorm match one process: the check cannot fail"

expect 2 "--model: expected one of .* got 'torchvision/shufflenet_v2_x3_0'" -- \
  "$bin" train "${common[@]}" --model torchvision/shufflenet_v2_x3_0 --out "$work/bad"
e2e_finish
