#!/usr/bin/env bash
# Learning checks on real data, two stages on a subset of Fashion-MNIST, on
# CPU; each must raise the leave-one-out kNN top-1 of a ResNet-18 on held-out
# test images above that of the randomly initialised network (the step-0
# evaluation of the same run):
#   1. SimCLR trained briefly, by at least SIMCLR_MIN_GAIN points;
#   2. `--method distillation` (LightlyTrain's v3, LARS) of a new ResNet-18
#      student from stage 1's exported backbone as the teacher, by at least
#      DISTILL_MIN_GAIN points (docs/distillation.md, "Learning check").
# Skipped (exit 0) when the dataset package is absent (`make deps` installs
# it) and under sanitizer builds (far too slow for a training run).
set -u
source "$(dirname "$0")/lib.bash"
learning_require  # $tool: the Fashion-MNIST converter
e2e_init learning

# 100 images per class of the train split to train on, 200 per class of the
# test split for the kNN evaluation (28 x 28 grey PNG). 2000 test images, not
# 500: a top-1 near 70% measured on N images is uncertain by sqrt(0.21 / N),
# 2.0 points on 500 and 1.0 on 2000, and the gains are 3-5 points. On 500
# the measured gains spread from +1.6 to +6.4 over seeds and kernel sets and
# single evaluations moved 1-3 points from one epoch to the next; on 2000
# the trajectories rise nearly monotonically (figures below). The
# evaluation costs ~1 s of the run.
"$tool" --out "$work/train" --split train --per-class 100 >"$work/convert.log" 2>&1 &&
  "$tool" --out "$work/test" --split test --per-class 200 >>"$work/convert.log" 2>&1 ||
  { echo "FAIL: conversion: $(cat "$work/convert.log")"; exit 1; }

# SimCLR on ResNet-18 at 16 px, a small head, AdamW (effective lr 1e-3:
# --lr is scaled by batch/256), crops of at least 30% of the image, 30 epochs
# of 15 steps. One compute thread and one worker, so that the result does
# not depend on the core count; it does depend on the CPU's kernels (their
# rounding moves the trajectory), so the gains below are measured with
# several seeds and kernel sets. What did not learn within this budget
# (kNN top-1 lower than at random init after 5-10 epochs; PyTorch + lightly
# 1.6 with the same setup shows the same early drop): SGD at LightlyTrain's
# lr, and crops down to 8% of the image (LightlyTrain's default scale_min
# 0.08). 15 epochs (2026-11-27 to -29) were not enough: on an AVX-512 CPU
# seed 0 gained 0.4 points (67.2 -> 67.6) where AVX2 kernels gave +4.0.
start=$(date +%s)
OMP_WAIT_POLICY=PASSIVE "$bin" train --data "$work/train" --knn-data "$work/test" \
  --out "$work/run" --model resnet18 --method simclr \
  --method-arg hidden_dim=512 --method-arg output_dim=128 --transform scale_min=0.3 \
  --image-size 16 --batch-size 64 --epochs 30 --knn-every 30 --optim adamw --lr 4e-3 \
  --threads 1 --num-workers 1 --seed 0 >"$work/train.log" 2>&1 ||
  { echo "FAIL: train exited $?: $(tail -n 30 "$work/train.log")"; exit 1; }
seconds=$(($(date +%s) - start))

# The first and last knn/top1 values of a run's metrics.jsonl ({"step": N,
# "knn/top1": value}: the first is step 0, random init; the last the end of
# training) into $first and $last; fails the check when there are not both.
read_knn() {
  local metrics="$1/metrics.jsonl" values count
  values=$(sed -n 's/.*"knn\/top1": *\([-0-9.eE+]*\).*/\1/p' "$metrics" 2>/dev/null)
  count=$(printf '%s\n' "$values" | grep -c .)
  first='' last=''
  [ "$count" -ge 2 ] || { fail "expected >= 2 knn/top1 values in $metrics, found $count"; return 1; }
  grep -q '"step": 0, "knn/top1"' "$metrics" || { fail "no step-0 (random init) kNN value"; return 1; }
  first=$(printf '%s\n' "$values" | head -n 1)
  last=$(printf '%s\n' "$values" | tail -n 1)
}

# Prints the stage's figures and fails the check when the gain from $first
# to $last is below the margin: check_gain STAGE MIN_GAIN SECONDS LOG
check_gain() {
  local gain
  gain=$(awk -v a="$first" -v b="$last" 'BEGIN { printf "%.2f", 100 * (b - a) }')
  printf '%s kNN top-1: random init %.2f%%, after training %.2f%%, gain %s points (need >= %s), %d s\n' \
    "$1" "$(awk -v a="$first" 'BEGIN { print 100 * a }')" "$(awk -v b="$last" 'BEGIN { print 100 * b }')" \
    "$gain" "$2" "$3"
  if ! awk -v g="$gain" -v m="$2" 'BEGIN { exit !(g >= m) }'; then
    fail "$1 did not raise kNN top-1 by $2 points"
    grep -E "kNN|config" "$4"
  fi
}

# Measured with exactly this command, kNN top-1 random init -> after 30
# epochs on the 2000 test images (2-core AMD EPYC with AVX-512, 2026-12-02,
# AdamW in torch.optim.AdamW's operations and order, docs/performance.md;
# evaluations every 5 epochs in brackets):
#   seed 0, oneDNN's own kernels: 69.75 -> 73.15 (+3.40)
#     [68.45 68.45 72.05 71.65 73.00 73.15]
#   seed 1, the same: 70.55 -> 73.00 (+2.45) [70.40 70.95 72.65 72.50 72.65 73.00]
#   seed 0, oneDNN limited to AVX2 (an AVX2-only CPU's kernels):
#     69.75 -> 73.10 (+3.35) [68.75 71.75 72.70 72.45 73.15 73.10]
#   seed 0, as a CPU without AVX2 (LTC_SIMD=scalar, oneDNN limited to
#     SSE4.1): 69.75 -> 73.65 (+3.90) [69.40 70.75 72.55 72.65 73.65 73.65]
# With AdamW's earlier roundings the same four gained +4.95, +4.00, +4.65,
# +3.95 (division in double, until 2026-12-02; margin 2.0) and +4.95,
# +3.15, +3.90, +3.60 (the division alone in float, that morning; margin
# 1.5): a rounding moves these trajectories as a seed does. On the 500
# images before (50 per class), the same seeds and kernels gained +3.2,
# +3.6 (seed 2: +3.6) and +1.6 (scalar); 15 epochs were too few (one seed
# +0.4 on AVX-512); 20 epochs gained +2.7 and +3.45 on the 2000 (double
# division), +3.20 and +1.75 (float). The margin is half the smallest gain.
SIMCLR_MIN_GAIN=1.2
read_knn "$work/run" && check_gain simclr "$SIMCLR_MIN_GAIN" "$seconds" "$work/train.log"

# Stage 2: distillation (v3, its defaults: LARS 1.8 x sqrt(64 / 1536), queue
# 512 for 1000 images, mixup, one view with LightlyTrain's distillation
# transform) of a new ResNet-18 from stage 1's export, 20 epochs of 15 steps
# at the same 16 px, one thread and one worker. At 16 px both networks' last
# stage is 1 x 1, so the local (token-similarity) term is 0 and this checks
# the global term: the student learns the teacher's class-token similarities
# to the queue of teacher features.
teacher="$work/run/exported_models/exported_last.safetensors"
if [ -s "$teacher" ]; then
  start=$(date +%s)
  OMP_WAIT_POLICY=PASSIVE "$bin" train --data "$work/train" --knn-data "$work/test" \
    --out "$work/distill" --model resnet18 --method distillation \
    --method-arg "teacher=$teacher" --image-size 16 --batch-size 64 --epochs 20 \
    --knn-every 20 --threads 1 --num-workers 1 --seed 0 >"$work/distill.log" 2>&1 ||
    { echo "FAIL: distillation train exited $?: $(tail -n 30 "$work/distill.log")"; exit 1; }
  seconds=$(($(date +%s) - start))
  # Measured with exactly these commands (stage 1 at 30 epochs), kNN top-1
  # of the student on the 2000 test images at random init -> after 20
  # epochs (its teacher's), by --seed of both stages, 2-core AMD EPYC with
  # AVX-512, 2026-12-02 (evaluations every 5 epochs in brackets):
  #   seed 0, oneDNN's own kernels: 69.75 -> 73.25 (+3.50; 73.15)
  #     [71.10 72.90 73.40 73.25]
  #   seed 1, the same: 70.55 -> 72.55 (+2.00; 73.00) [70.55 71.90 72.50 72.55]
  #   seed 0, oneDNN limited to AVX2: 69.75 -> 72.95 (+3.20; 73.10)
  #     [68.60 72.95 72.20 72.95]
  #   seed 0, LTC_SIMD=scalar and SSE4.1: 69.75 -> 73.35 (+3.60; 73.65)
  #     [71.25 73.80 73.25 73.35]
  # (With AdamW's earlier roundings in stage 1: +3.50, +4.15, +4.35, +3.95,
  # margin 1.75; then +4.55, +3.85, +2.80, +3.05, margin 1.4.) The margin is
  # half the smallest gain. A 20-epoch teacher distilled for 10 epochs gained
  # only +1.9 and +1.2, and one distilled for 15 (seeds 0, 1, float division)
  # +3.75 and +2.20: the teacher has to have learned.
  DISTILL_MIN_GAIN=1.0
  read_knn "$work/distill" && check_gain distillation "$DISTILL_MIN_GAIN" "$seconds" "$work/distill.log"
else
  fail "stage 1 wrote no export to distil from: $teacher"
fi
e2e_finish
