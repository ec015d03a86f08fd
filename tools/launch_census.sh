#!/usr/bin/env bash
# What one training step queues on the GPU, counted without a GPU: the CUDA
# emulation's program (build/emu/lightly-train-c) trains two and then three
# steps with its operation log on (LTC_EMU_LAUNCH_LOG, tests/cuda_emu/
# emu_log.h), and the difference is one steady step: kernel launches by
# site, cuDNN convolutions, cuBLAS products, copies and memsets. The counts
# do not depend on the image size or the batch, so the runs are tiny; the
# GPU's own time per launch is what a profile (tools/profile_gpu.sh) adds.
#   tools/launch_census.sh [METHOD [MODEL]]      (default: simclr resnet50)
# Environment: LTC_BUILD (build), CENSUS_TOP (25 sites listed), CENSUS_SIZE
# (32: the image size; a ViT's must be a multiple of its patch).
# Prints "CENSUS total=N kernel=N cudnn=N cublas=N copy=N memset=N
# host_wait=N", then the busiest sites, "COUNT KIND SITE". total counts the
# operations queued; host_wait the calls that may make the host wait for
# the device (synchronisations, blocking copies, allocations and frees).
set -eu
method=${1:-simclr}
model=${2:-resnet50}
build=${LTC_BUILD:-build}
program="$build/emu/lightly-train-c"
[ -x "$program" ] || { echo "launch_census: no CUDA emulation build at $program (make)" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/ltc-launch-census-XXXXXX)
trap 'rm -rf "$work"' EXIT

# 40 images at batch 4: ten steps an epoch, so steps 2 and 3 end no epoch
# (no checkpoint, no logging) and the difference is a plain step.
"$build/tools/photo_crops" "$here/../tests/fixtures/photos" "$work/images" 40 40 48 >/dev/null
for steps in 2 3; do
    if ! LTC_EMU_LAUNCH_LOG="$work/log$steps" LIGHTLY_TRAIN_CACHE_DIR="$work/cache" \
        "$program" train --data "$work/images" --method "$method" --model "$model" \
        --image-size "${CENSUS_SIZE:-32}" --batch-size 4 --max-steps "$steps" --num-workers 1 \
        --accelerator gpu --out "$work/out$steps" >"$work/train$steps.out" 2>&1; then
        echo "launch_census: the $steps-step run failed:" >&2
        tail -n 5 "$work/train$steps.out" >&2
        exit 1
    fi
done
# A line per site: its count in the 3-step run less that in the 2-step run.
sort "$work/log3" | uniq -c >"$work/counts3"
sort "$work/log2" | uniq -c >"$work/counts2"
awk 'NR == FNR { two[substr($0, index($0, $2))] = $1; next }
     { site = substr($0, index($0, $2)); n = $1 - two[site]; if (n > 0) print n, site }' \
    "$work/counts2" "$work/counts3" | sort -k1,1nr -k2 >"$work/step"
awk '{ kind[$2] += $1; if ($2 != "host-wait") total += $1 }
     END { printf "CENSUS method='"$method"' model='"$model"' total=%d kernel=%d cudnn=%d cublas=%d copy=%d memset=%d host_wait=%d\n",
           total, kind["kernel"], kind["cudnn"], kind["cublas"], kind["copy"], kind["memset"], kind["host-wait"] }' \
    "$work/step"
head -n "${CENSUS_TOP:-25}" "$work/step"
