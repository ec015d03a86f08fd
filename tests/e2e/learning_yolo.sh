#!/usr/bin/env bash
# Learning check of a YOLO student (src/nn/yolo.h) on real data: SimCLR on
# Ultralytics' yolov8n (the backbone LightlyTrain trains) must raise the
# leave-one-out kNN top-1 of its pooled features on held-out Fashion-MNIST
# test images above that of the randomly initialised network (the step-0
# evaluation of the same run) by MIN_GAIN points, as
# learning_fashion_mnist.sh checks for a ResNet-18, at a small cost: 600
# training images at 32 px, one compute thread and one worker (so the
# result does not depend on the core count), 40 epochs of 10 steps.
# Skipped (exit 0) without the dataset package and under sanitizer builds.
#
# Measured (2026-11-29, 2-core dev VM, AMD EPYC, AVX2): kNN top-1 at epochs
# 0 / 10 / 20 / 30 / 40: 67.33 / 62.67 / 64.67 / 69.67 / 71.67% (gain 4.33
# points), 21 s of CPU, 44 s wall beside other jobs. SimCLR first lowers it
# (as for the ResNet-18: random convolutional features are strong on
# Fashion-MNIST); 8-25 epochs ended at or below the start; DINO at 32 px
# went down to 39% in 20 epochs. On the AMD EPYC with AVX-512 (2026-12-01)
# seeds 0-2 gained +5.00, +3.33 and +6.33 at epoch 40. The trajectory is
# chaotic: one rounding changed in AdamW (its division in float, as
# PyTorch's) made seeds 0-4 gain +1.67, +5.00, +3.33, -3.67 and +8.33, so
# a CPU with other kernels runs another draw of it (docs/performance.md,
# "AdamW's update, vectorised"): a steadier measure is wanted.
set -u
source "$(dirname "$0")/lib.bash"
MIN_GAIN=2
learning_require  # $tool: the Fashion-MNIST converter
e2e_init learning_yolo

"$tool" --out "$work/train" --split train --per-class 60 >"$work/convert.log" 2>&1 &&
  "$tool" --out "$work/test" --split test --per-class 30 >>"$work/convert.log" 2>&1 ||
  { echo "FAIL: conversion: $(cat "$work/convert.log")"; exit 1; }

start=$(date +%s)
OMP_WAIT_POLICY=PASSIVE "$bin" train --data "$work/train" --knn-data "$work/test" \
  --out "$work/run" --model ultralytics/yolov8n.yaml --method simclr \
  --method-arg hidden_dim=256 --method-arg output_dim=64 --transform scale_min=0.3 \
  --image-size 32 --batch-size 60 --epochs 40 --knn-every 40 --optim adamw --lr 4e-3 \
  --threads 1 --num-workers 1 --seed 0 >"$work/train.log" 2>&1 ||
  { echo "FAIL: train exited $?: $(tail -n 30 "$work/train.log")"; exit 1; }
seconds=$(($(date +%s) - start))

values=$(sed -n 's/.*"knn\/top1": *\([-0-9.eE+]*\).*/\1/p' "$work/run/metrics.jsonl")
[ "$(printf '%s\n' "$values" | grep -c .)" -ge 2 ] || { echo "FAIL: fewer than 2 kNN values"; exit 1; }
grep -q '"step": 0, "knn/top1"' "$work/run/metrics.jsonl" || { echo "FAIL: no step-0 kNN value"; exit 1; }
first=$(printf '%s\n' "$values" | head -n 1)
last=$(printf '%s\n' "$values" | tail -n 1)
gain=$(awk -v a="$first" -v b="$last" 'BEGIN { printf "%.2f", 100 * (b - a) }')
printf 'yolov8n SimCLR kNN top-1: random init %.2f%%, after training %.2f%%, gain %s points (need >= %s), %d s\n' \
  "$(awk -v a="$first" 'BEGIN { print 100 * a }')" "$(awk -v b="$last" 'BEGIN { print 100 * b }')" \
  "$gain" "$MIN_GAIN" "$seconds"
awk -v g="$gain" -v m="$MIN_GAIN" 'BEGIN { exit !(g >= m) }' ||
  fail "SimCLR on yolov8n did not raise kNN top-1 by $MIN_GAIN points"
e2e_finish
