#!/usr/bin/env bash
# Training steps as CUDA graphs (LTC_CUDA_GRAPHS=on; docs/gpu.md "CUDA
# graphs") on the CUDA emulation: a run whose steps are captured and
# replayed ends with the same checkpoint and logged losses, byte for byte,
# as the same run op by op, for SimCLR on a ShuffleNetV2 x0.5 (convolutions,
# depthwise ones too, with BatchNorm, the channel shuffle, SGD; until
# 2026-12-01 a ResNet-18, whose 11M parameters' per-element kernels made
# each emulated run 7.8 s against 2.9 s) and for distillation, the default
# method, into a ViT-T/14 from that network (a frozen teacher, attention, mixup with a staged
# permutation and a per-step weight, AdamW; 2 micro-batches a step, a graph
# each) and for DINOv2 on a ViT-T/14 (iBOT masks of a new masked count every
# step in padded patch rows, local views, softmax centres with
# the patch center's per-step 1 / count) and for DINOv31 (DINOv2 plus the
# PaKA alignment's sparse rows, built on the host and staged every step), in
# bf16-mixed (in 16-mixed a tiny run's first steps overflow and the loss
# scaler skips them, so their learning rates would not matter). train.log
# says how the steps ran. A bad value exits 2; runs that cannot be captured
# say why in train.log. The captured SimCLR run (its first two steps op by
# op) once more in the emulation's other orders (LTC_EMU_STREAMS=compute-at-once, tests/
# cuda_emu/emu_streams.cpp: the compute stream runs its work at once, the
# copy stream's waits; LTC_EMU_BLOCK_ORDER=reverse: each launch's blocks
# last to first): the same bytes, so no step reads a batch, a staged input
# or a step record before the copy that writes it has run, nor (the default
# schedule) does a copy overwrite what a queued step reads, and no kernel's
# result depends on the order of its blocks.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init cuda_graphs

emu_require
common=(--data tests/fixtures/photos --batch-size 2 --max-steps 5 --num-workers 1
  --accelerator gpu --precision bf16-mixed --seed 3)
convnet=(--model torchvision/shufflenet_v2_x0_5 --image-size 16 --method simclr)
vit=(--model vit_t14 --image-size 28)

# Runs "$emu" train with LTC_CUDA_GRAPHS=$2 into $work/$1 (LTC_EMU_STREAMS
# as set by the caller).
run() {
  local name=$1 graphs=$2
  shift 2
  LTC_CUDA_GRAPHS=$graphs "$emu" train "${common[@]}" --out "$work/$name" "$@" \
    >"$work/$name.out" 2>&1 || fail "$name: exit $?: $(tail -n 3 "$work/$name.out")"
}

same_run() {
  local a=$1 b=$2
  cmp -s "$work/$a/checkpoints/last.ckpt" "$work/$b/checkpoints/last.ckpt" ||
    fail "$a and $b: the checkpoints differ"
  diff <(grep -o '"train_loss": [^,]*' "$work/$a/metrics.jsonl") \
    <(grep -o '"train_loss": [^,]*' "$work/$b/metrics.jsonl") >/dev/null ||
    fail "$a and $b: the logged losses differ"
}

# 5 steps of one kind: the first of each half of the per-step parameter
# block op by op, the second captured, the rest replayed.
counts='cuda graphs: 2 step parts op by op, 2 captured, 1 replayed$'
run simclr_off off "${convnet[@]}"
run simclr_on on "${convnet[@]}"
grep -q 'cuda graphs: on (LTC_CUDA_GRAPHS=on)' "$work/simclr_on/train.log" ||
  fail "train.log does not say the graphs are on: $(grep 'cuda graphs' "$work/simclr_on/train.log")"
grep -q "$counts" "$work/simclr_on/train.log" ||
  fail "simclr: not the expected steps: $(grep 'cuda graphs' "$work/simclr_on/train.log")"
grep -q 'cuda graphs: off (LTC_CUDA_GRAPHS=on captures' "$work/simclr_off/train.log" ||
  fail "train.log does not say the graphs are off: $(grep 'cuda graphs' "$work/simclr_off/train.log")"
same_run simclr_on simclr_off
# (its first two steps run op by op in that order too)
LTC_EMU_STREAMS=compute-at-once LTC_EMU_BLOCK_ORDER=reverse run simclr_on_other on "${convnet[@]}"
same_run simclr_on_other simclr_off

teacher="$work/simclr_off/exported_models/exported_last.safetensors"
# With 2 micro-batches a step, 10 parts of two kinds (the first part of a
# step takes one half of the block, the second the other).
vit+=(--method-arg teacher="$teacher" --accumulate-grad-batches 2)
run distillation_off off "${vit[@]}"
run distillation_on on "${vit[@]}"
grep -q 'cuda graphs: 2 step parts op by op, 2 captured, 6 replayed$' "$work/distillation_on/train.log" ||
  fail "distillation: not the expected steps: $(grep 'cuda graphs' "$work/distillation_on/train.log")"
same_run distillation_on distillation_off

# DINOv2: the masked count changes every step, the padded rows do not (a small head)
dinov2=(--model vit_t14 --image-size 28 --method dinov2 --local-views 2 --local-image-size 28
  --method-arg hidden_dim=32 --method-arg bottleneck_dim=16 --method-arg output_dim=64)
run dinov2_off off "${dinov2[@]}"
run dinov2_on on "${dinov2[@]}"
grep -q "$counts" "$work/dinov2_on/train.log" ||
  fail "dinov2: not the expected steps: $(grep 'cuda graphs' "$work/dinov2_on/train.log")"
same_run dinov2_on dinov2_off

# DINOv31: the alignment of new crops every step, uploaded in the same sizes
dinov31=(--model vit_t14 --image-size 28 --method dinov31 --local-views 1 --local-image-size 28
  --method-arg hidden_dim=32 --method-arg bottleneck_dim=16 --method-arg output_dim=64
  --method-arg paka_num_local=2)
run dinov31_off off "${dinov31[@]}"
run dinov31_on on "${dinov31[@]}"
grep -q "$counts" "$work/dinov31_on/train.log" ||
  fail "dinov31: not the expected steps: $(grep 'cuda graphs' "$work/dinov31_on/train.log")"
same_run dinov31_on dinov31_off

expect_only 2 'LTC_CUDA_GRAPHS=yes: expected on or off' -- env LTC_CUDA_GRAPHS=yes \
  "$emu" train "${common[@]}" "${convnet[@]}" --out "$work/bad"
# The CPU backend runs ops as they are called: nothing to capture, and said so.
LTC_CUDA_GRAPHS=on "$bin" train --data tests/fixtures/photos --model vit_t14 --image-size 28 \
  --batch-size 2 --max-steps 1 --num-workers 1 --method simclr --accelerator cpu \
  --out "$work/cpu" >"$work/cpu.out" 2>&1 || fail "a cpu run with LTC_CUDA_GRAPHS=on failed: $(tail -n 2 "$work/cpu.out")"
grep -q 'cuda graphs: off (LTC_CUDA_GRAPHS=on, but this backend runs ops as they are called)' \
  "$work/cpu/train.log" || fail "cpu: $(grep 'cuda graphs' "$work/cpu/train.log")"
e2e_finish
