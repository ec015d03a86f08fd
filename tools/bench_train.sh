#!/usr/bin/env bash
# Training-step benchmark, run by `make bench` as: tools/bench_train.sh BUILD_DIR
# ResNet-18 and ResNet-50, forward + backward + SGD step, at 64 px and 224 px:
# build/tools/bench_train_step (ours, cpu backend) next to the same step in
# PyTorch (tools/compare/pytorch_train_step.py) with the same threads, batch
# and resolution, alternating ROUNDS times. The PyTorch side is skipped when
# torch/torchvision are not importable by $PYTHON (default /usr/bin/python3).
# Environment: BENCH_THREADS (default: all cores), BENCH_ROUNDS (default 2).
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
# model image-size batch steps
for config in "18 64 32 5" "50 64 32 3" "18 224 16 3" "50 224 16 2"; do
  read -r depth size batch steps <<<"$config"
  for round in $(seq "$ROUNDS"); do
    "$BUILD/tools/bench_train_step" --model "$depth" --image-size "$size" --batch-size "$batch" \
      --steps "$steps" --warmup 1 --threads "$THREADS" | grep '^RESULT'
    if [ "$have_torch" = 1 ]; then
      "$PYTHON" "$TOOLS_DIR/compare/pytorch_train_step.py" --model "resnet$depth" \
        --image-size "$size" --batch-size "$batch" --steps "$steps" --warmup 1 \
        --threads "$THREADS" | grep '^RESULT'
    fi
  done
done
