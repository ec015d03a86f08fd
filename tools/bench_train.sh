#!/usr/bin/env bash
# Training benchmarks, run by `make bench` as: tools/bench_train.sh BUILD_DIR [DATA_DIR]
# ResNet-18 and ResNet-50 at 64 px and 224 px, ViT-S/16 at 224 px, forward +
# backward + SGD step; then distillation: the eval forward of a DINOv2-shaped
# ViT-S/14 and ViT-B/14 teacher (random weights, 224 px, batch 32) and one
# `distillation` (v3) step of a ResNet-18 student with a ViT-S/14 teacher
# (224 px, batch 16):
# build/tools/bench_train_step (ours, cpu backend) next to the same step in
# PyTorch (tools/compare/pytorch_train_step.py) with the same threads, batch
# and resolution, alternating ROUNDS times. The PyTorch side is skipped when
# torch/torchvision are not importable by $PYTHON (default /usr/bin/python3);
# its ViTs are timm's when timm is importable (PYTHONPATH), else the
# script's own copy of the same architecture (RESULT says vit=). Debian's
# torch runs its Linear layers on the reference BLAS (BLAS_INFO=generic): set
# TORCH_BLAS_DIR to a folder holding OpenBLAS's libblas.so.3 to give PyTorch
# a fast GEMM (docs/performance.md). Environment: BENCH_THREADS (default:
# all cores), BENCH_ROUNDS (default 2).
set -u
BUILD=${1:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
THREADS=${BENCH_THREADS:-$(nproc)}
ROUNDS=${BENCH_ROUNDS:-2}
TOOLS_DIR=$(cd "$(dirname "$0")" && pwd)
have_torch=1
"$PYTHON" -c 'import torch, torchvision' 2>/dev/null || {
  have_torch=0
  echo "bench_train.sh: torch/torchvision not importable by $PYTHON; PyTorch side skipped"
}
echo "training step, $THREADS thread(s), $(lscpu | sed -n 's/^Model name:[[:space:]]*//p')"
# mode model(student) teacher image-size batch steps
for config in "step resnet18 - 64 32 5" "step resnet50 - 64 32 3" "step resnet18 - 224 16 3" \
              "step resnet50 - 224 16 2" "step vit_s16 - 224 16 3" \
              "teacher vit_s14 - 224 32 2" "teacher vit_b14 - 224 32 1" \
              "distillation resnet18 vit_s14 224 16 2"; do
  read -r mode model teacher size batch steps <<<"$config"
  teacher_args=()
  [ "$teacher" = - ] || teacher_args=(--teacher "$teacher")
  for round in $(seq "$ROUNDS"); do
    "$BUILD/tools/bench_train_step" --mode "$mode" --model "$model" "${teacher_args[@]}" \
      --image-size "$size" --batch-size "$batch" --steps "$steps" --warmup 1 \
      --threads "$THREADS" | grep '^RESULT'
    if [ "$have_torch" = 1 ]; then
      LD_LIBRARY_PATH=${TORCH_BLAS_DIR:-${LD_LIBRARY_PATH:-}} OPENBLAS_NUM_THREADS=$THREADS \
        "$PYTHON" "$TOOLS_DIR/compare/pytorch_train_step.py" --mode "$mode" --model "$model" \
        "${teacher_args[@]}" --image-size "$size" --batch-size "$batch" \
        --steps "$steps" --warmup 1 --threads "$THREADS" | grep '^RESULT'
    fi
  done
done

# The whole SimCLR training loop: `lightly-train-c train` (data workers, two
# views concatenated through the backbone, projection head 2048-128 with
# BatchNorm, NT-Xent, SGD, logging) next to the same loop in PyTorch
# (tools/compare/pytorch_simclr_train.py: DataLoader with torchvision
# transforms in worker processes). Both report source images/s over the steps
# after the first WARMUP, each step timed from waiting for its batch to the end
# of its optimizer step (ours: profiling/data_time + profiling/batch_time of
# metrics.jsonl). Same images (BENCH_DIR), threads, workers, batch and size.
DATA=${2:-$BUILD/bench-images}
WORKERS=${BENCH_WORKERS:-1}
WARMUP=2
if [ -d "$DATA" ]; then
  echo "SimCLR training loop, $THREADS thread(s), $WORKERS worker(s), data $DATA"
  run_dir=$(mktemp -d /tmp/ltc-bench-train-XXXXXX)
  trap 'rm -rf "$run_dir"' EXIT
  # model image-size batch steps
  for config in "resnet18 64 32 12" "resnet18 224 16 6"; do
    read -r model size batch steps <<<"$config"
    for round in $(seq "$ROUNDS"); do
      "$BUILD/lightly-train-c" train --data "$DATA" --out "$run_dir/run" --overwrite \
        --model "$model" --method simclr --image-size "$size" --batch-size "$batch" --max-steps "$steps" \
        --log-every 1 --num-workers "$WORKERS" --threads "$THREADS" >/dev/null 2>&1 ||
        { echo "bench_train.sh: train failed"; exit 1; }
      sed -n 's/.*"profiling\/batch_time": \([0-9.e+-]*\), "profiling\/data_time": \([0-9.e+-]*\).*/\1 \2/p' \
        "$run_dir/run/metrics.jsonl" |
        awk -v warmup="$WARMUP" -v batch="$batch" -v model="$model" -v size="$size" \
          -v workers="$WORKERS" -v threads="$THREADS" '
          NR > warmup { seconds += $1 + $2; steps++ }
          END { printf "RESULT tool=lightly-train-c model=%s image_size=%s batch=%s steps=%d workers=%s threads=%s images_per_s=%.1f\n",
                       model, size, batch, steps, workers, threads, batch * steps / seconds }'
      if [ "$have_torch" = 1 ]; then
        "$PYTHON" "$TOOLS_DIR/compare/pytorch_simclr_train.py" --data "$DATA" --model "$model" \
          --image-size "$size" --batch-size "$batch" --steps $((steps - WARMUP)) \
          --warmup "$WARMUP" --num-workers "$WORKERS" --threads "$THREADS" | grep '^RESULT'
      fi
    done
  done
else
  echo "bench_train.sh: $DATA missing (make bench creates it); SimCLR loop skipped"
fi
