#!/usr/bin/env bash
# Learning check on real data: SimCLR trained briefly on CPU on a subset of
# Fashion-MNIST must raise the leave-one-out kNN top-1 of the backbone on
# held-out test images above that of the randomly initialised backbone (the
# step-0 evaluation of the same run) by at least MIN_GAIN_POINTS.
# Skipped (exit 0) when the dataset package is absent (`make deps` installs
# it) and under sanitizer builds (far too slow for a training run).
set -u
source "$(dirname "$0")/lib.bash"
tool="$build/tools/fashion_mnist_folder"
source_dir=/usr/share/datasets/fashion-mnist

if [ ! -f "$source_dir/train-images-idx3-ubyte.gz" ] || [ ! -f "$source_dir/t10k-images-idx3-ubyte.gz" ]; then
  echo "skipped: dataset-fashion-mnist not installed (make deps installs it)"
  exit 0
fi
if grep -qa __asan_init "$bin" 2>/dev/null; then
  echo "skipped: sanitizer build (a training run takes too long under ASan)"
  exit 0
fi
[ -x "$tool" ] || { echo "FAIL: $tool is not built (make tools)"; exit 1; }
e2e_init learning

# 100 images per class of the train split to train on, 50 per class of the
# test split for the kNN evaluation (28 x 28 grey PNG).
"$tool" --out "$work/train" --split train --per-class 100 >"$work/convert.log" 2>&1 &&
  "$tool" --out "$work/test" --split test --per-class 50 >>"$work/convert.log" 2>&1 ||
  { echo "FAIL: conversion: $(cat "$work/convert.log")"; exit 1; }

# SimCLR on ResNet-18 at 16 px, a small head, AdamW (effective lr 1e-3:
# --lr is scaled by batch/256), crops of at least 30% of the image, 30 epochs
# of 15 steps. One compute thread and one worker, so that the result does not
# depend on the core count. What did not learn within this budget (kNN top-1
# lower than at random init after 5-10 epochs; PyTorch + lightly 1.6 with the
# same setup shows the same early drop): SGD at LightlyTrain's lr, and crops
# down to 8% of the image (LightlyTrain's default scale_min 0.08).
start=$(date +%s)
OMP_WAIT_POLICY=PASSIVE "$bin" train --data "$work/train" --knn-data "$work/test" \
  --out "$work/run" --model resnet18 --method simclr \
  --method-arg hidden_dim=512 --method-arg output_dim=128 --transform scale_min=0.3 \
  --image-size 16 --batch-size 64 --epochs 30 --knn-every 30 --optim adamw --lr 4e-3 \
  --threads 1 --num-workers 1 --seed 0 >"$work/train.log" 2>&1 ||
  { echo "FAIL: train exited $?: $(tail -n 30 "$work/train.log")"; exit 1; }
seconds=$(($(date +%s) - start))

# knn/top1 lines of metrics.jsonl: {"step": N, "knn/top1": value}; the first
# is step 0 (random init), the last the end of training.
metrics="$work/run/metrics.jsonl"
values=$(sed -n 's/.*"knn\/top1": *\([-0-9.eE+]*\).*/\1/p' "$metrics" 2>/dev/null)
count=$(printf '%s\n' "$values" | grep -c .)
[ "$count" -ge 2 ] || { echo "FAIL: expected >= 2 knn/top1 values in $metrics, found $count"; exit 1; }
grep -q '"step": 0, "knn/top1"' "$metrics" || fail "no step-0 (random init) kNN value"
first=$(printf '%s\n' "$values" | head -n 1)
last=$(printf '%s\n' "$values" | tail -n 1)

# Measured with exactly this command on the 2-core dev VM (two runs at a time,
# ~150 s each), kNN top-1 random init -> after 30 epochs, by --seed:
#   0: 67.2 -> 71.8 (+4.6)   1: 68.2 -> 71.8 (+3.6)
#   2: 67.2 -> 71.8 (+4.6)   3: 66.6 -> 73.0 (+6.4)
# The margin is half the smallest gain. (Without scale_min=0.3 the gains were
# +4.2, +3.0, +2.4 and 0.0: not reliable.)
MIN_GAIN_POINTS=1.8
gain=$(awk -v a="$first" -v b="$last" 'BEGIN { printf "%.2f", 100 * (b - a) }')
printf 'kNN top-1: random init %.2f%%, after training %.2f%%, gain %s points (need >= %s), %d s\n' \
  "$(awk -v a="$first" 'BEGIN { print 100 * a }')" "$(awk -v b="$last" 'BEGIN { print 100 * b }')" \
  "$gain" "$MIN_GAIN_POINTS" "$seconds"
if ! awk -v g="$gain" -v m="$MIN_GAIN_POINTS" 'BEGIN { exit !(g >= m) }'; then
  fail "training did not raise kNN top-1 by $MIN_GAIN_POINTS points"
  grep -E "kNN|config" "$work/train.log"
fi
e2e_finish
