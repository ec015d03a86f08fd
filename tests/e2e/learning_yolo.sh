#!/usr/bin/env bash
# Learning check of a YOLO student (src/nn/yolo.h) on real data: SimCLR on
# Ultralytics' yolov8n (the backbone LightlyTrain trains) must raise the
# leave-one-out kNN top-1 of its pooled features on held-out Fashion-MNIST
# test images above that of the randomly initialised network (the step-0
# evaluation of the same run) by MIN_GAIN points, as
# learning_fashion_mnist.sh checks for a ResNet-18: 600 training images at
# 32 px, one compute thread and one worker (so the result does not depend
# on the core count), 100 epochs of 10 steps; the kNN on 2000 test images
# (200 per class). Skipped (exit 0) without the dataset package and under
# sanitizer builds.
#
# Random yolov8n features at 32 px are a strong kNN baseline on
# Fashion-MNIST (74-76%, where a random ResNet-18 at 16 px has 70%), and
# SimCLR first lowers them (to 68-71% after 20 epochs) before it passes
# them. Until 2026-12-01 this check ran 40 epochs and measured on 300 test
# images (30 per class), where a top-1 is uncertain by sqrt(0.2 / 300), 2.6
# points: it passed with +5.0 (seed 0), but on 2000 test images the same
# run ends at or below its random initialisation (seeds 0, 1: -1.15, -3.25),
# and so do 40 epochs with 1200 training images, batch 30, lr 1.5e-3 or
# 1.2e-2, no blur, scale_min 0.6, 16 or 64 px, and (16 px) distillation
# from the ResNet-18 learning check's teacher; BYOL fell to 44%, yolo11n
# to 58%. 100 epochs rise past it on every seed and kernel set measured
# (2-core AMD EPYC with AVX-512, 2026-12-01; kNN top-1 at epochs 0 / 20 /
# 40 / 60 / 80 / 100):
#   seed 0, oneDNN's own kernels: 75.70 / 70.95 / 73.70 / 74.90 / 76.55 / 76.90 (+1.20)
#   seed 1, the same:             74.60 / 69.40 / 74.45 / 74.95 / 75.75 / 75.75 (+1.15)
#   seed 2, the same:             74.20 / 68.20 / 72.65 / 75.70 / 76.65 / 76.45 (+2.25)
#   seed 0, oneDNN limited to AVX2: 75.70 / 71.00 / 74.45 / 76.50 / 78.20 / 76.90 (+1.20)
#   seed 0, LTC_SIMD=scalar, oneDNN SSE4.1 (a CPU without AVX2):
#                                 75.70 / 70.25 / 75.30 / 75.80 / 75.95 / 76.65 (+0.95)
# A step that does not learn stays near the 20-epoch dip, 5 points under.
# The margin is half the smallest gain. About 68 s of one core.
set -u
source "$(dirname "$0")/lib.bash"
MIN_GAIN=0.45
learning_require  # $tool: the Fashion-MNIST converter
e2e_init learning_yolo

"$tool" --out "$work/train" --split train --per-class 60 >"$work/convert.log" 2>&1 &&
  "$tool" --out "$work/test" --split test --per-class 200 >>"$work/convert.log" 2>&1 ||
  { echo "FAIL: conversion: $(cat "$work/convert.log")"; exit 1; }

start=$(date +%s)
OMP_WAIT_POLICY=PASSIVE "$bin" train --data "$work/train" --knn-data "$work/test" \
  --out "$work/run" --model ultralytics/yolov8n.yaml --method simclr \
  --method-arg hidden_dim=256 --method-arg output_dim=64 --transform scale_min=0.3 \
  --image-size 32 --batch-size 60 --epochs 100 --knn-every 100 --optim adamw --lr 4e-3 \
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
