#!/usr/bin/env bash
# GPU training benchmark (make bench-gpu; in a bundle: bench-gpu.sh):
#   tools/bench_gpu.sh [BUILD_DIR] [DATA_DIR]
# Four sections (BENCH_GPU_SECTIONS, default "step train teacher
# distillation"), each ours next to PyTorch in one command on one GPU. The
# whole benchmark takes longer than a 10-minute slot: run the sections in
# separate commands there.
#
# step (tools/bench_gpu_step.bash): one SimCLR / DINO training step on
# random batches already on the GPU (BENCH_GPU_STEP_CONFIGS), ours
# (bench_train_step --mode method) next to PyTorch eager and torch.compile
# (BENCH_GPU_COMPILE=0 leaves compile out): the model-bound figure.
#
# train: for each configuration (BENCH_GPU_CONFIGS):
#   ours     lightly-train-c train --accelerator gpu on DATA_DIR: images/s and
#            data wait % from metrics.jsonl (profiling/batch_time and
#            data_time of the steps after WARMUP), peak GPU memory of the
#            process sampled with nvidia-smi;
#   pytorch  tools/compare/pytorch_ssl_train.py: the same recipe with
#            torchvision, AMP and channels-last, on the same images and on
#            synthetic batches already on the GPU (for the FLOPs).
# Model FLOPs per image come from the PyTorch run (hooks on every conv and
# linear layer, the same architecture), so ours get an MFU on the same scale.
# DATA_DIR defaults to BUILD/bench-images; when it is missing,
# tools/compare/make_jpeg_folder.py writes 2048 ImageNet-sized JPEGs there.
#
# teacher and distillation (issue 11; tools/bench_gpu_distillation.bash): the
# eval forward of a ViT-S/14, ViT-B/14 and DINOv3 ConvNeXt-B teacher (also
# against torch.compile), and one distillation (v3) step of a ResNet-18/50
# student with such a teacher, on random weights and
# random batches already on the GPU: bench_train_step --backend cuda
# --precision auto next to tools/compare/pytorch_train_step.py --device cuda
# (AMP, channels-last); both peak GPU memories sampled with nvidia-smi.
#
# Environment: PYTHON (python3), BENCH_GPU_CONFIGS ("method model size batch
# steps" per line), BENCH_GPU_TEACHER_CONFIGS ("model size batch steps"),
# BENCH_GPU_DISTILLATION_CONFIGS ("student teacher size batch steps"),
# BENCH_GPU_DEVICE (cuda; cpu only to test this script: tests/e2e/bench_gpu_cpu.sh),
# BENCH_GPU_PRECISION (16-mixed, the PyTorch side; ours runs --precision auto
# and each line says what it ran), BENCH_GPU_WARMUP (10 untimed steps first).
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ -x "$here/bin/lightly-train-c" ]; then  # inside a bundle
    bin="$here/bin/lightly-train-c"; tools="$here/tools"; default_data="$here/bench-images"
    step_bin="$here/tools/bench_train_step"
else
    build=${1:-build}; bin="$build/lightly-train-c"; tools="$here"
    default_data="$build/bench-images"; step_bin="$build/tools/bench_train_step"
fi
data=${2:-$default_data}
PYTHON=${PYTHON:-python3}
device=${BENCH_GPU_DEVICE:-cuda}
precision=${BENCH_GPU_PRECISION:-16-mixed}
configs=${BENCH_GPU_CONFIGS:-"simclr resnet50 224 256 40
simclr resnet18 224 256 60
dino resnet50 224 64 30"}
warmup=${BENCH_GPU_WARMUP:-10}
sections=${BENCH_GPU_SECTIONS:-"step train teacher distillation"}
for section in $sections; do
    case $section in step | train | teacher | distillation) ;;
    *) echo "bench_gpu.sh: unknown section '$section' in BENCH_GPU_SECTIONS (step, train, teacher, distillation)" >&2
       exit 2 ;;
    esac
done
prototypes=65536
work=$(mktemp -d /tmp/ltc-bench-gpu-XXXXXX)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tools/bench_gpu_lib.bash
. "$tools/bench_gpu_lib.bash"
use_python_cuda_libraries "$PYTHON"
workers=$(( $(nproc) - 1 ))
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "cpu: $(nproc) cores, $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'); data workers: $workers"
if [[ " $sections " == *" train "* ]] && [ ! -d "$data" ]; then
    echo "writing 2048 JPEGs to $data (tools/compare/make_jpeg_folder.py)"
    "$PYTHON" "$tools/compare/make_jpeg_folder.py" --out "$data" --count 2048 || exit 1
fi


# images/s and data wait % of the steps after the warm-up, from metrics.jsonl.
our_rates() {
    "$PYTHON" - "$1" "$2" "$3" <<'EOF'
import json, sys
path, warmup, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
steps = [json.loads(line) for line in open(path)]
steps = [s for s in steps if "profiling/batch_time" in s][warmup:]
compute = sum(s["profiling/batch_time"] for s in steps)
wait = sum(s["profiling/data_time"] for s in steps)
print(f"{batch * len(steps) / (compute + wait):.1f} {100 * wait / (compute + wait):.1f} {len(steps)}")
EOF
}

if [[ " $sections " == *" step "* ]]; then
    # shellcheck source=tools/bench_gpu_step.bash
    . "$tools/bench_gpu_step.bash"
fi

[[ " $sections " == *" train "* ]] || configs=""
while read -r method model size batch steps; do
    [ -n "$method" ] || continue
    echo "== $method $model ${size}px batch $batch"
    torch_common=(--method "$method" --model "$model" --image-size "$size" --batch-size "$batch"
                  --device "$device" --precision "$precision" --channels-last
                  --steps "$steps" --warmup "$warmup" --num-workers "$workers"
                  --prototypes "$prototypes")
    synthetic=$("$PYTHON" "$tools/compare/pytorch_ssl_train.py" "${torch_common[@]}" --synthetic |
                grep '^RESULT')
    echo "$synthetic"
    "$PYTHON" "$tools/compare/pytorch_ssl_train.py" "${torch_common[@]}" --data "$data" | grep '^RESULT'
    gflops=$(sed -n 's/.*gflops_per_image=\([0-9.]*\).*/\1/p' <<<"$synthetic")
    mfu_peak=$(sed -n 's/.*mfu_pct=\([0-9.]*\).*/\1/p' <<<"$synthetic")
    method_args=()  # DINO's head at ImageNet scale (ours picks by dataset size)
    [ "$method" = dino ] && method_args=(--method-arg output_dim="$prototypes")
    "$bin" train --data "$data" --out "$work/run" --overwrite --method "$method" --model "$model" \
        --image-size "$size" --batch-size "$batch" --max-steps $((warmup + steps)) --log-every 1 \
        "${method_args[@]}" \
        --accelerator "$( [ "$device" = cuda ] && echo gpu || echo cpu )" >"$work/train.out" 2>&1 &
    pid=$!
    memory="0 none"
    command -v nvidia-smi >/dev/null && memory=$(sample_memory "$pid")
    read -r memory memory_source <<<"$memory"
    if ! wait "$pid"; then
        echo "ours: train failed:"; tail -n 15 "$work/train.out"; continue
    fi
    read -r rate wait_pct counted <<<"$(our_rates "$work/run/metrics.jsonl" "$warmup" "$batch")"
    our_precision=$(sed -n 's/.*precision \([0-9a-z-]*\).*/\1/p' "$work/run/train.log" | head -n 1)
    # Our MFU on the PyTorch run's scale: its mfu / its rate x our rate.
    torch_rate=$(sed -n 's/.*images_per_s=\([0-9.]*\).*/\1/p' <<<"$synthetic")
    mfu=$(awk -v m="$mfu_peak" -v r="$rate" -v t="$torch_rate" 'BEGIN { printf "%.1f", (t > 0 ? m * r / t : 0) }')
    echo "RESULT tool=lightly-train-c method=$method model=$model device=$device" \
         "precision=$our_precision image_size=$size batch=$batch steps=$counted images_per_s=$rate" \
         "data_wait_pct=$wait_pct gflops_per_image=$gflops mfu_pct=$mfu gpu_memory_mib=$memory" \
         "gpu_memory_source=$memory_source"
done <<<"$configs"

# The teacher and distillation sections.
# shellcheck source=tools/bench_gpu_distillation.bash
. "$tools/bench_gpu_distillation.bash"
