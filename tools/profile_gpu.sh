#!/usr/bin/env bash
# Where a GPU training step spends its time, kernel by kernel, ours next to
# PyTorch's (issue 9: the per-kernel profile behind docs/performance.md's
# plan for the next round):
#   tools/profile_gpu.sh [BUILD_DIR]        (in a bundle: profile-gpu.sh)
# ours     Nsight Compute (ncu) over bench_train_step --mode method, only
#          the kernels of its timed steps (the NVTX range "timed"), one
#          metric: gpu__time_duration.sum; tools/compare/ncu_kernels.py sums
#          it per kernel. ncu runs each kernel alone, so the sum is the
#          kernels' time without overlap or launch gaps: compare it with the
#          step time of `bench-gpu.sh` (section step) to see the idle time.
# pytorch  tools/compare/pytorch_ssl_train.py --synthetic --profile: the
#          kernels torch.profiler saw during its timed steps.
# Both print "PROFILE tool=... us_per_step=... calls_per_step=... share_pct=...
# kernel=NAME" lines, largest first, after a total line.
#
# Environment: PROFILE_GPU_CONFIG ("method model size batch", default
# "simclr resnet50 224 256"), PROFILE_GPU_STEPS (2 profiled steps after 3
# warm-up ones), PROFILE_GPU_TOP (30 lines per side), PYTHON (python3), NCU
# (found on PATH, under CUDA_HOME or /opt/nvidia/nsight-compute).
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ -x "$here/bin/lightly-train-c" ]; then  # inside a bundle
    tools="$here/tools"; step_bin="$here/tools/bench_train_step"
else
    build=${1:-build}; tools="$here"; step_bin="$build/tools/bench_train_step"
fi
PYTHON=${PYTHON:-python3}
read -r method model size batch <<<"${PROFILE_GPU_CONFIG:-simclr resnet50 224 256}"
steps=${PROFILE_GPU_STEPS:-2}
top=${PROFILE_GPU_TOP:-30}
device=cuda
work=$(mktemp -d /tmp/ltc-profile-gpu-XXXXXX)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tools/bench_gpu_lib.bash
. "$tools/bench_gpu_lib.bash"
use_python_cuda_libraries "$PYTHON"

ncu=${NCU:-$(command -v ncu || ls -d "${CUDA_HOME:-/usr/local/cuda}"/bin/ncu \
    /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)}
method_args=()
[ "$method" = dino ] && method_args=(--method-arg output_dim=65536)
echo "== $method $model ${size}px batch $batch: $steps profiled steps"
status=0
if [ -z "$ncu" ]; then
    echo "ours: no ncu (Nsight Compute) found: set NCU" >&2
    status=1
elif ! "$ncu" --nvtx --nvtx-include "timed/" --metrics gpu__time_duration.sum \
        --clock-control none --csv --page raw --print-units base --log-file "$work/ours.csv" \
        "$step_bin" --mode method --method "$method" --model "$model" --image-size "$size" \
        --batch-size "$batch" --steps "$steps" --warmup 3 --backend cuda --precision auto \
        "${method_args[@]}" >"$work/ours.out" 2>&1; then
    echo "ours: ncu failed:"; tail -n 15 "$work/ours.out"
    status=1
else
    grep -E '^(backend|RESULT)' "$work/ours.out"
    "$PYTHON" "$tools/compare/ncu_kernels.py" "$work/ours.csv" --steps "$steps" --top "$top" ||
        status=1
fi
"$PYTHON" "$tools/compare/pytorch_ssl_train.py" --method "$method" --model "$model" \
    --image-size "$size" --batch-size "$batch" --device cuda --precision 16-mixed \
    --channels-last --synthetic --steps "$steps" --warmup 5 --prototypes 65536 \
    --profile --profile-top "$top" | grep -E '^(RESULT|PROFILE)' || status=1
exit "$status"
