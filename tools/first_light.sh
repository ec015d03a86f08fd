#!/usr/bin/env bash
# First light (issue 19): the one command a GPU session runs, from the folder
# `make first-light` builds (tools/make_first_light.sh), as run.sh there:
#
#   bash first-light/run.sh          ($OUT: where the results go; the device tool sets it)
#
# Parts, in order of value, each with a time budget; a part that overruns is
# cut (recorded as such) and the next one runs, and no part starts after the
# deadline (FIRST_LIGHT_SECONDS after the start, 400 by default: with the
# unpacking and the machine's start the command ends within 7 minutes):
#   versions  the GPU, driver, and the CUDA runtime, cuDNN, cuBLAS and NCCL
#             the program loaded (lightly-train-c --version, ldd), the pip
#             wheel's launcher finding them on its own, PyTorch's
#   paths     issue 32's new paths against ref first (FIRST_LIGHT_PATH_TESTS:
#             cuDNN's SDPA graphs, convolutions with BatchNorm statistics,
#             the multi-tensor optimizer update, activation checkpointing,
#             the optimizer update and a linear layer's and convolutions'
#             library calls and the staged uploads captured as CUDA graphs
#             and replayed, whole steps through step_graph_begin / end:
#             the GPU twins of their emulated tests; the depthwise kernels
#             of 2026-11-30 and the YOLO ops in fp16 and bf16, issue 34's;
#             DINOv31's combine_rows and cka_loss, ShuffleNetV2's
#             channel_shuffle)
#   targets   issue 32's targets (section 5), each fused path beside its
#             fallback in the same call and PyTorch beside both: SimCLR
#             ResNet-50 (eager, torch.compile last; ours also with its steps
#             as CUDA graphs), the ViT-B/14 teacher's forward (timm's SDPA),
#             distillation ResNet-50 <- ViT-B/14 (also as CUDA graphs), a
#             DINOv2 ViT-B/14 step (also as CUDA graphs and with activation
#             checkpointing),
#             DINO ResNet-50 multi-crop's memory; then issue 34's YOLO11s
#             student (distillation from a ViT-B/14, DINO) against the same
#             backbone in plain PyTorch (tools/compare/pytorch_yolo.py: the
#             node has no Ultralytics), and issue 35's ConvNeXt-T SimCLR
#             step and DINOv3 ConvNeXt-B teacher forward against PyTorch;
#             after torch.compile: a cut loses them first, a second command
#             runs them (FIRST_LIGHT_PARTS=targets
#             FIRST_LIGHT_TARGETS="yolo-distillation ... convnext-teacher")
# Then, where the deadline leaves time (else in a second command):
#   ops       every cuda op group against ref: all fp32 groups first, then
#             fp16 and bf16 (LTC_TEST_GROUPS), each binary's time
#   train     an NCCL world of one rank, op by op and as CUDA graphs with its
#             collectives (the same bytes); then
#             16-mixed on the real JPEGs: SimCLR (ResNet-50, 224 px, batch
#             256, 50 steps): losses finite and falling, the loss scale,
#             checkpoint and export; distillation from a ViT-B/14 teacher
#             (random weights: none can be carried) into a ResNet-50, 30
#             steps; embed on the GPU against the CPU; the export in
#             torchvision; a run killed after its checkpoint at step 25 and
#             resumed, against the uninterrupted one
#   bench     one SimCLR step against PyTorch (bench-gpu.sh, section step):
#             eager AMP channels-last, ours, then torch.compile (not in the
#             default list since the targets part measures it)
#   test-gpu  the rest of make test-gpu: run-gpu-tests.sh's runs, then the
#             unit binaries first light's ops part does not run
#             (test_staging, test_method_steps' cuda cases, side by side)
#   profile   where the step's time goes, kernel by kernel (profile-gpu.sh:
#             ncu over ours, torch.profiler over PyTorch's), in the time left
#             (after run 3 test-gpu is worth more: the profile ran then)
# Results, appended as they come: $OUT/first_light.jsonl (one JSON object per
# check), $OUT/first_light_summary.md (the same, readable),
# $OUT/first_light_console.log (this output) and $OUT/first_light_logs.tar.gz
# (every part's logs, repacked after each part).
#
# Every size is a variable (FIRST_LIGHT_*, below), so that make test runs
# this script from a copied folder at tiny sizes, on the CPU and the CUDA
# emulation (tests/e2e/first_light.sh).
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/first_light_lib.bash
. "$here/first_light_lib.bash"

# ---- the parts (each runs as `run.sh --part NAME` under timeout) ------------------

part_versions() {
    local smi version lib
    if smi=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap \
             --format=csv,noheader 2>&1); then
        record versions gpu info "$smi" "nvidia_smi=$(head -n 1 <<<"$smi" | tr -d ' ')"
    else
        record versions gpu skip "nvidia-smi: $(head -n 1 <<<"$smi")"
    fi
    version=$("$FL_BIN" --version 2>&1)
    echo "$version"
    record versions program info "$(head -n 1 <<<"$version")"
    record versions gpus "$(grep -q '^GPUs: [0-9]' <<<"$version" && echo pass || echo fail)" \
        "$(sed -n 's/^GPUs: //p' <<<"$version")"
    lib=$(sed -n 's/^GPU libraries: //p' <<<"$version")
    if grep -q '^GPU libraries unusable: ' <<<"$version"; then
        record versions gpu-libraries fail "$(sed -n 's/^GPU libraries unusable: //p' <<<"$version")" \
            "loaded=$lib"
    else
        record versions gpu-libraries pass "$lib"
    fi
    if grep -q '^NCCL unusable: ' <<<"$version"; then
        record versions nccl fail "$(sed -n 's/^NCCL unusable: //p' <<<"$version")"
    else
        record versions nccl pass "$(sed -n 's/^NCCL: //p' <<<"$version")"
    fi
    # What the dynamic loader resolves (a "not found" stops the program before main).
    local missing
    ldd "$FL_BIN" >"$FL_LOGS/versions/ldd.txt" 2>&1
    missing=$(grep 'not found' "$FL_LOGS/versions/ldd.txt" | awk '{ print $1 }' | paste -sd, -)
    if [ -n "$missing" ]; then
        record versions ldd fail "libraries not found: $missing"
    else
        record versions ldd pass "$(grep -cE '=> /' "$FL_LOGS/versions/ldd.txt") libraries resolved" \
            "cuda=$(grep -oE '(libcudart|libcudnn|libnccl)[^ ]* => [^ ]*' "$FL_LOGS/versions/ldd.txt" |
                    awk '{ print $3 }' | paste -sd, -)"
    fi
    # The pip wheel's way to CUDA (issue 23): its launcher's search of this
    # Python's NVIDIA packages, without our LD_LIBRARY_PATH.
    record_check versions wheel-launcher "the wheel's launcher finds CUDA's pip libraries" \
        timeout 60 "$FL_PYTHON" "$here/first_light_check.py" wheel-launcher "$FL_BIN" "$here/python"
    # PyTorch's view, for the comparisons of the bench part.
    record_check versions pytorch "PyTorch beside us ($FL_PYTHON)" \
        timeout 45 "$FL_PYTHON" "$here/first_light_check.py" torch-info
}

# One test binary, its groups chosen by LTC_TEST_GROUPS ($2: "" for all);
# the per-binary limit keeps one stuck binary from taking the part.
run_test_binary() {
    local name=$1 groups=$2 label=$3 allowed=$4 limit=${5:-$FIRST_LIGHT_TEST_LIMIT} log start status counts
    local part=${FL_TEST_PART:-ops}
    log="$FL_LOGS/$part/$name.$label.log"
    start=$(date +%s.%N)
    (cd "$FL_WORK/testdir" && LTC_TEST_GROUPS=$groups timeout -k 5 "$limit" \
        "$FL_BUNDLE/tests/$name") >"$log" 2>&1
    status=$?
    local seconds
    seconds=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    read -r passed failed skipped <<<"$(cmocka_counts "$log")"
    counts=(passed="$passed" failed="$failed" skipped="$skipped" seconds="$seconds" exit="$status")
    if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
        record "$part" "${name}[$label]" cut "over its ${limit}s limit" "${counts[@]}"
    elif [ "$status" -ne 0 ] || [ "$skipped" -gt "$allowed" ] || [ "$passed" -eq 0 ]; then
        record "$part" "${name}[$label]" fail "$(grep -E '^\[  FAILED  \] [a-z]|skipped:|error|matches no case' "$log" |
            head -n 4 | tr '\n' ' ')" "${counts[@]}"
    else
        record "$part" "${name}[$label]" pass "$passed tests" "${counts[@]}"
    fi
}

part_ops() {
    local name
    for name in $FIRST_LIGHT_OPS_FP32; do
        # test_backend_fast's cpu-only check (default threads) skips in each
        # cuda group; test_ranks' check of a machine without a GPU skips on one.
        run_test_binary "$name" cuda fp32 "$(case $name in test_backend_fast) echo 2 ;;
                                             test_ranks) echo 1 ;; *) echo 0 ;; esac)"
    done
    for name in $FIRST_LIGHT_OPS_16; do
        run_test_binary "$name" "cuda-fp16 cuda-bf16" 16bit \
            "$([ "$name" = test_backend_fast ] && echo 4 || echo 0)"
    done
}

# train_run NAME ARGS...: one `train` into $FL_WORK/train/NAME; its exit status.
train_run() {
    local name=$1
    shift
    "$FL_BIN" train --data "$FL_IMAGES" --out "$FL_WORK/train/$name" --log-every 1 \
        --accelerator "$FIRST_LIGHT_ACCELERATOR" --precision "$FIRST_LIGHT_PRECISION" "$@" \
        >"$FL_LOGS/train/$name.out" 2>&1
    local status=$?
    cp "$FL_WORK/train/$name/train.log" "$FL_WORK/train/$name/metrics.jsonl" "$FL_LOGS/train/" \
        2>/dev/null && mv "$FL_LOGS/train/train.log" "$FL_LOGS/train/$name.train.log" &&
        mv "$FL_LOGS/train/metrics.jsonl" "$FL_LOGS/train/$name.metrics.jsonl"
    return "$status"
}

# The new fused paths of issue 32 against ref, first: the GPU twins of the
# tests that checked them on the CUDA emulation. FIRST_LIGHT_PATH_TESTS:
# NAME:GROUPS:ALLOWED_SKIPS words (GROUPS comma-separated, empty: all;
# LTC_TEST_CUDA_ONLY=1 leaves the cpu and ref cases to make test).
part_paths() {
    local FL_TEST_PART=paths entry name groups allowed
    for entry in $FIRST_LIGHT_PATH_TESTS; do
        IFS=: read -r name groups allowed <<<"$entry"
        LTC_TEST_CUDA_ONLY=1 run_test_binary "$name" "${groups//,/ }" paths "${allowed:-0}"
    done
}

# One measured side of a target (bench_gpu_lib.bash measure_side): its
# figures as a record, and for ours the paths its plans took.
# target_side TARGET SIDE LABEL COMMAND...
target_side() {
    local target=$1 side=$2 label=$3 line="" log="$FL_LOGS/targets/$1.log" why
    shift 3
    echo "== $target $side: $*" >>"$log"
    if ! measure_side line "$@" >>"$log" 2>&1 || [ -z "$line" ]; then
        why=$(grep -o -m 1 -E "No module named '[a-z_]+'" "$work/pair.out")
        if [ -n "$why" ]; then
            record targets "$target-$side" skip "$label: $why"
        else
            record targets "$target-$side" fail "$label: $(tail -n 3 "$work/pair.out" | tr '\n' ' ' | cut -c1-300)"
        fi
        return 1
    fi
    local fields=(images_per_s="$(word_value images_per_s "$line")"
                  gpu_memory_mib="$(word_value gpu_memory_mib "$line")"
                  gpu_memory_source="$(word_value gpu_memory_source "$line")"
                  precision="$(word_value precision "$line")")
    [ "$(word_value peak_allocated_mib "$line")" != n/a ] &&
        fields+=(peak_allocated_mib="$(word_value peak_allocated_mib "$line")")
    [ "$(word_value mfu_pct "$line")" != n/a ] && fields+=(mfu_pct="$(word_value mfu_pct "$line")")
    [ "$(word_value vit "$line")" != n/a ] && fields+=(vit="$(word_value vit "$line")")
    local paths
    paths=$(sed -n 's/^paths: //p' "$work/pair.out" | head -n 1)
    [ -n "$paths" ] && fields+=(paths="$paths")
    record targets "$target-$side" info "$label" "${fields[@]}"
    echo "$line" >>"$log"
}

# The ratio record of a target: ours over each other side measured.
target_ratios() {
    local target=$1 label=$2 ours other pairs=() name rate memory
    ours=$(grep "\"check\": \"$target-ours\"" "$FL_RESULTS" | tail -n 1)
    [ -n "$ours" ] || return 0
    rate=$(sed -n 's/.*"images_per_s": \([0-9.]*\).*/\1/p' <<<"$ours")
    memory=$(sed -n 's/.*"gpu_memory_mib": \([0-9.]*\).*/\1/p' <<<"$ours")
    for name in eager compile pytorch fallback prologue dgrad graphs; do
        other=$(grep "\"check\": \"$target-$name\", \"status\": \"info\"" "$FL_RESULTS" | tail -n 1)
        [ -n "$other" ] || continue
        pairs+=("images_per_s_ours_over_$name=$(awk -v a="$rate" -v b="$(sed -n 's/.*"images_per_s": \([0-9.]*\).*/\1/p' <<<"$other")" \
            'BEGIN { if (a > 0 && b > 0) printf "%.3f", a / b; else print "n/a" }')")
        pairs+=("gpu_memory_ours_over_$name=$(awk -v a="$memory" -v b="$(sed -n 's/.*"gpu_memory_mib": \([0-9.]*\).*/\1/p' <<<"$other")" \
            'BEGIN { if (a > 0 && b > 0) printf "%.3f", a / b; else print "n/a" }')")
    done
    # MFU on PyTorch's FLOP count: eager's MFU x ours / eager's images/s
    local eager_mfu eager_rate
    other=$(grep "\"check\": \"$target-eager\", \"status\": \"info\"" "$FL_RESULTS" | tail -n 1)
    eager_mfu=$(sed -n 's/.*"mfu_pct": \([0-9.]*\).*/\1/p' <<<"$other")
    eager_rate=$(sed -n 's/.*"images_per_s": \([0-9.]*\).*/\1/p' <<<"$other")
    [ -n "$eager_mfu" ] && pairs+=("mfu_pct_ours=$(awk -v m="$eager_mfu" -v r="$rate" -v t="$eager_rate" \
        'BEGIN { if (t > 0) printf "%.1f", m * r / t; else print "n/a" }')")
    record targets "$target-ratio" info "$label" "${pairs[@]}"
}

# The benchmarks of issue 32's targets (section 5), on random batches on
# the GPU, each fused path beside its fallback in the same call, against
# PyTorch in the same call: SimCLR ResNet-50 (eager, torch.compile: the
# convolutions' fused BatchNorm statistics, the default, against
# LTC_CUDA_CONV_FUSION=off; the prologues, =prologue, and the data gradient
# through them, =dgrad, both asked for only since first light of 2026-11-30),
# the ViT-B/14 teacher's forward (timm with PyTorch's SDPA; cuDNN's SDPA
# against LTC_CUDA_ATTENTION=math), distillation ResNet-50 <- ViT-B/14 (both
# fused paths against both fallbacks), a DINOv2 ViT-B/14 step (against
# tools/compare/pytorch_dinov2.py; ours also as CUDA graphs and with
# --activation-checkpointing), DINO ResNet-50 multi-crop's memory (with
# =dgrad beside: in run 5 every fused path made DINO 1.53x its fallback), and
# issue 35's ConvNeXt figures: a SimCLR ConvNeXt-T step against PyTorch
# eager and a DINOv3 ConvNeXt-B teacher's forward against PyTorch; issue
# 34's YOLO11s student: distillation from a ViT-B/14 and DINO, against
# the same backbone in plain PyTorch.
# torch.compile last among issue 32's (its compilation is the longest), the
# YOLO and ConvNeXt targets after it.
part_targets() {
    # shellcheck source=tools/bench_gpu_lib.bash
    . "$FL_BUNDLE/tools/bench_gpu_lib.bash"  # measure_side and its helpers
    local device=$FIRST_LIGHT_BENCH_DEVICE work="$FL_WORK/targets" step_bin="$FL_BUNDLE/tools/bench_train_step"
    local torch_ssl="$FL_BUNDLE/tools/compare/pytorch_ssl_train.py"
    local torch_step="$FL_BUNDLE/tools/compare/pytorch_train_step.py" warm=$FIRST_LIGHT_TARGET_WARMUP
    local threads common model size batch steps teacher label
    mkdir -p "$work"
    threads=$(nproc)
    local torch_common=(--device "$device" --precision "$FIRST_LIGHT_PRECISION" --warmup "$warm"
                        --threads "$threads")
    local ours_common=(--backend "$device" --precision auto --warmup "$warm" --threads "$threads")
    # A method's step on $model, $size, $batch, $steps: PyTorch eager beside
    # ours, and their ratio. method_pair TARGET METHOD
    method_pair() {
        local label="$2 $model ${size}px batch $batch, $steps steps" prototypes=()
        [ "$2" = dino ] && prototypes=(--method-arg output_dim=65536)
        target_side "$1" eager "$label" "$FL_PYTHON" "$torch_ssl" --method "$2" --model "$model" \
            --image-size "$size" --batch-size "$batch" --channels-last --synthetic --steps "$steps" \
            --prototypes 65536 "${torch_common[@]}"
        target_side "$1" ours "$label" "$step_bin" --mode method --method "$2" --model "$model" \
            --image-size "$size" --batch-size "$batch" --steps "$steps" "${prototypes[@]}" "${ours_common[@]}"
        target_ratios "$1" "$label"
    }
    local target
    for target in $FIRST_LIGHT_TARGETS; do
        case $target in
        simclr | dino)
            read -r model size batch steps <<<"$([ "$target" = simclr ] && echo "$FIRST_LIGHT_TARGET_SIMCLR" || echo "$FIRST_LIGHT_TARGET_DINO")"
            label="$target $model ${size}px batch $batch, $steps steps"
            local torch_args=(--method "$target" --model "$model" --image-size "$size" --batch-size "$batch"
                              --channels-last --synthetic --steps "$steps" --prototypes 65536 "${torch_common[@]}")
            local ours_args=(--mode method --method "$target" --model "$model" --image-size "$size"
                             --batch-size "$batch" --steps "$steps" "${ours_common[@]}")
            [ "$target" = dino ] && ours_args+=(--method-arg output_dim=65536)
            target_side "$target" eager "$label" "$FL_PYTHON" "$torch_ssl" "${torch_args[@]}"
            target_side "$target" ours "$label" "$step_bin" "${ours_args[@]}"
            target_side "$target" fallback "$label, LTC_CUDA_CONV_FUSION=off" \
                env LTC_CUDA_CONV_FUSION=off "$step_bin" "${ours_args[@]}"
            target_side "$target" dgrad "$label, LTC_CUDA_CONV_FUSION=dgrad" \
                env LTC_CUDA_CONV_FUSION=dgrad "$step_bin" "${ours_args[@]}"
            [ "$target" = simclr ] && target_side "$target" prologue "$label, LTC_CUDA_CONV_FUSION=prologue" \
                env LTC_CUDA_CONV_FUSION=prologue "$step_bin" "${ours_args[@]}"
            [ "$target" = simclr ] && target_side "$target" graphs "$label, LTC_CUDA_GRAPHS=on" \
                env LTC_CUDA_GRAPHS=on "$step_bin" "${ours_args[@]}"
            target_ratios "$target" "$label" ;;
        teacher)
            read -r model size batch steps <<<"$FIRST_LIGHT_TARGET_TEACHER"
            label="teacher forward $model ${size}px batch $batch, $steps steps"
            common=(--mode teacher --model "$model" --image-size "$size" --batch-size "$batch" --steps "$steps")
            target_side teacher pytorch "$label" "$FL_PYTHON" "$torch_step" "${common[@]}" --channels-last 1 \
                "${torch_common[@]}"
            target_side teacher ours "$label" "$step_bin" "${common[@]}" "${ours_common[@]}"
            target_side teacher fallback "$label, LTC_CUDA_ATTENTION=math" \
                env LTC_CUDA_ATTENTION=math "$step_bin" "${common[@]}" "${ours_common[@]}"
            target_ratios teacher "$label" ;;
        distillation)
            read -r model teacher size batch steps <<<"$FIRST_LIGHT_TARGET_DISTILLATION"
            label="distillation $model <- $teacher ${size}px batch $batch, $steps steps"
            common=(--mode distillation --model "$model" --teacher "$teacher" --image-size "$size"
                    --batch-size "$batch" --steps "$steps")
            target_side distillation pytorch "$label" "$FL_PYTHON" "$torch_step" "${common[@]}" \
                --channels-last 1 "${torch_common[@]}"
            target_side distillation ours "$label" "$step_bin" "${common[@]}" "${ours_common[@]}"
            target_side distillation fallback "$label, LTC_CUDA_ATTENTION=math LTC_CUDA_CONV_FUSION=off" \
                env LTC_CUDA_ATTENTION=math LTC_CUDA_CONV_FUSION=off "$step_bin" "${common[@]}" "${ours_common[@]}"
            target_side distillation graphs "$label, LTC_CUDA_GRAPHS=on" \
                env LTC_CUDA_GRAPHS=on "$step_bin" "${common[@]}" "${ours_common[@]}"
            target_ratios distillation "$label" ;;
        dinov2)
            read -r model size batch steps <<<"$FIRST_LIGHT_TARGET_DINOV2"
            label="dinov2 $model ${size}px batch $batch, $steps steps"
            common=(--mode method --method dinov2 --model "$model" --image-size "$size" --batch-size "$batch"
                    --steps "$steps")
            target_side dinov2 eager "$label" "$FL_PYTHON" "$torch_ssl" --method dinov2 --model "$model" \
                --image-size "$size" --batch-size "$batch" --synthetic --steps "$steps" \
                --prototypes 65536 "${torch_common[@]}"
            target_side dinov2 ours "$label" "$step_bin" "${common[@]}" "${ours_common[@]}"
            target_side dinov2 fallback "$label, LTC_CUDA_ATTENTION=math" \
                env LTC_CUDA_ATTENTION=math "$step_bin" "${common[@]}" "${ours_common[@]}"
            target_side dinov2 graphs "$label, LTC_CUDA_GRAPHS=on" \
                env LTC_CUDA_GRAPHS=on "$step_bin" "${common[@]}" "${ours_common[@]}"
            target_side dinov2 checkpointing "$label, --activation-checkpointing" \
                "$step_bin" "${common[@]}" "${ours_common[@]}" --activation-checkpointing
            target_ratios dinov2 "$label" ;;
        convnext)
            read -r model size batch steps <<<"$FIRST_LIGHT_TARGET_CONVNEXT"
            method_pair convnext simclr ;;
        yolo-dino)
            read -r model size batch steps <<<"$FIRST_LIGHT_TARGET_YOLO_DINO"
            method_pair yolo-dino dino ;;
        yolo-distillation)
            read -r model teacher size batch steps <<<"$FIRST_LIGHT_TARGET_YOLO_DISTILLATION"
            label="distillation $model <- $teacher ${size}px batch $batch, $steps steps"
            common=(--mode distillation --model "$model" --teacher "$teacher" --image-size "$size"
                    --batch-size "$batch" --steps "$steps")
            target_side yolo-distillation pytorch "$label" "$FL_PYTHON" "$torch_step" "${common[@]}" \
                --channels-last 1 "${torch_common[@]}"
            target_side yolo-distillation ours "$label" "$step_bin" "${common[@]}" "${ours_common[@]}"
            target_ratios yolo-distillation "$label" ;;
        convnext-teacher)
            read -r model size batch steps <<<"$FIRST_LIGHT_TARGET_CONVNEXT_TEACHER"
            label="teacher forward $model ${size}px batch $batch, $steps steps"
            common=(--mode teacher --model "$model" --image-size "$size" --batch-size "$batch" --steps "$steps")
            target_side convnext-teacher pytorch "$label" "$FL_PYTHON" "$torch_step" "${common[@]}" \
                --channels-last 1 "${torch_common[@]}"
            target_side convnext-teacher ours "$label" "$step_bin" "${common[@]}" "${ours_common[@]}"
            target_ratios convnext-teacher "$label" ;;
        compile)
            read -r model size batch steps <<<"$FIRST_LIGHT_TARGET_SIMCLR"
            label="simclr $model ${size}px batch $batch, $steps steps"
            target_side simclr compile "$label, torch.compile" "$FL_PYTHON" "$torch_ssl" --method simclr \
                --model "$model" --image-size "$size" --batch-size "$batch" --channels-last --synthetic \
                --steps "$steps" --prototypes 65536 "${torch_common[@]}" --compile
            target_ratios simclr "$label" ;;
        esac
    done
}

# Checks of a finished run: backend, precision, scaler, losses, files.
check_run() {
    local name=$1 what=$2 dir="$FL_WORK/train/$1" log="$FL_WORK/train/$1/train.log"
    local backend
    backend=$(sed -n 's/.*workers, backend \([a-z]*\), precision \([0-9a-z-]*\).*/\1 \2/p' "$log" | head -n 1)
    record train "$name-setup" "$([ "$backend" = "$FL_EXPECT_BACKEND $FIRST_LIGHT_PRECISION" ] &&
        grep -q 'loss scaling: on' "$log" && echo pass || echo fail)" \
        "$what: backend and precision '$backend', $(grep -o 'loss scaling: [a-z]*' "$log" | head -n 1)" \
        "accelerator=$(sed -n 's/.*accelerator: //p' "$log" | head -n 1 | cut -c1-120)"
    record_check train "$name-losses" "$what: losses finite and falling, loss scale logged" \
        "$FL_PYTHON" "$here/first_light_check.py" losses "$dir/metrics.jsonl"
    local written=fail
    [ -s "$dir/checkpoints/last.ckpt" ] && [ -s "$dir/exported_models/exported_last.safetensors" ] &&
        written=pass
    record train "$name-files" "$written" "checkpoint and export written" \
        "checkpoint_mb=$(du -m "$dir/checkpoints/last.ckpt" 2>/dev/null | cut -f1)"
}

# One NCCL rank (torchrun's single process), op by op and as CUDA graphs
# with its collectives: the same checkpoint bytes, the graphs replayed
# (docs/distributed.md; two ranks ran only on the emulation: e2e/cuda_ranks).
train_graphs_nccl() {
    [ "$FIRST_LIGHT_ACCELERATOR" = gpu ] ||
        { record train graphs-nccl skip "needs the GPU (accelerator $FIRST_LIGHT_ACCELERATOR)"; return; }
    local what="SimCLR resnet18 64px batch 32, 5 steps, 1 NCCL rank" graphs on steps nccl same=0
    for graphs in off on; do
        LTC_CUDA_GRAPHS=$graphs RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=$((20000 + RANDOM % 20000)) train_run "graphs-nccl-$graphs" --method simclr \
            --model resnet18 --image-size 64 --batch-size 32 --max-steps 5 --seed 5 || {
            record train graphs-nccl fail "$what, LTC_CUDA_GRAPHS=$graphs: exit $?: $(tail -n 3 \
                "$FL_LOGS/train/graphs-nccl-$graphs.out" | tr '\n' ' ')"; return; }
    done
    on="$FL_WORK/train/graphs-nccl-on"
    steps=$(sed -n 's/.*cuda graphs: \([0-9]* step parts.*replayed\).*/\1/p' "$on/train.log" | tr ' ' '_')
    nccl=$(grep -c 'data parallel: 1 ranks (nccl' "$on/train.log")
    cmp -s "$FL_WORK/train/graphs-nccl-off/checkpoints/last.ckpt" "$on/checkpoints/last.ckpt" && same=1
    record train graphs-nccl "$([ "$same" = 1 ] && [ "$nccl" -ge 1 ] && [[ "$steps" == *_1_replayed ]] &&
        echo pass || echo fail)" "$what, op by op and as CUDA graphs: the same checkpoint bytes" \
        "same_bytes=$same nccl=$nccl steps=${steps:-none}"
}

part_train() {
    mkdir -p "$FL_WORK/train"
    train_graphs_nccl
    local common=(--method simclr --model "$FIRST_LIGHT_MODEL" --image-size "$FIRST_LIGHT_SIZE"
                  --batch-size "$FIRST_LIGHT_BATCH" --max-steps "$FIRST_LIGHT_STEPS" --seed 5)
    local what="SimCLR $FIRST_LIGHT_MODEL ${FIRST_LIGHT_SIZE}px batch $FIRST_LIGHT_BATCH, $FIRST_LIGHT_STEPS steps"
    if train_run simclr "${common[@]}"; then
        check_run simclr "$what"
    else
        record train simclr fail "$what: exit $?: $(tail -n 3 "$FL_LOGS/train/simclr.out" | tr '\n' ' ')"
    fi

    # Distillation from a freshly initialised ViT teacher (a DINOv2
    # checkpoint is 350 MB: too large to carry), LayerScale 0.1 so that its
    # tokens differ between images.
    local teacher="$FL_WORK/train/teacher.safetensors"
    what="distillation $FIRST_LIGHT_TEACHER (random weights) -> $FIRST_LIGHT_MODEL, batch $FIRST_LIGHT_DISTILL_BATCH, $FIRST_LIGHT_DISTILL_STEPS steps"
    if ! "$FL_BUNDLE/tests/e2e/make_backbone" "$teacher" "$FIRST_LIGHT_TEACHER" 7 "$FIRST_LIGHT_SIZE" 0.1 \
            >"$FL_LOGS/train/teacher.out" 2>&1; then
        record train distillation fail "make_backbone $FIRST_LIGHT_TEACHER: $(tail -n 2 "$FL_LOGS/train/teacher.out")"
    elif train_run distillation --method distillation --method-arg "teacher=$teacher" \
            --model "$FIRST_LIGHT_MODEL" --image-size "$FIRST_LIGHT_SIZE" \
            --batch-size "$FIRST_LIGHT_DISTILL_BATCH" --max-steps "$FIRST_LIGHT_DISTILL_STEPS" --seed 5; then
        check_run distillation "$what"
    else
        record train distillation fail "$what: $(tail -n 3 "$FL_LOGS/train/distillation.out" | tr '\n' ' ')"
    fi

    # embed on the GPU and on the CPU from the SimCLR export, the same images.
    local export="$FL_WORK/train/simclr/exported_models/exported_last.safetensors" side
    if [ -s "$export" ]; then
        mkdir -p "$FL_WORK/embed-images"
        find "$FL_IMAGES" -name '*.jpg' | sort | head -n "$FIRST_LIGHT_EMBED_IMAGES" |
            xargs -I{} ln -sf {} "$FL_WORK/embed-images/"
        for side in "$FIRST_LIGHT_EMBED_ACCELERATOR" cpu; do
            "$FL_BIN" embed --data "$FL_WORK/embed-images" --checkpoint "$export" --overwrite \
                --image-size "$FIRST_LIGHT_SIZE" --accelerator "$side" --out "$FL_WORK/embed-$side.npy" \
                >"$FL_LOGS/train/embed-$side.out" 2>&1 ||
                record train "embed-$side" fail "$(tail -n 2 "$FL_LOGS/train/embed-$side.out" | tr '\n' ' ')"
        done
        record_check train embed-gpu-vs-cpu \
            "embed of $FIRST_LIGHT_EMBED_IMAGES images on $FIRST_LIGHT_EMBED_ACCELERATOR against the CPU (bound: 16-bit)" \
            "$FL_PYTHON" "$here/first_light_check.py" npy "$FL_WORK/embed-$FIRST_LIGHT_EMBED_ACCELERATOR.npy" \
            "$FL_WORK/embed-cpu.npy" 1e-2
        # embed --precision bf16-mixed (LightlyTrain's embed precision; 2026-12-01,
        # emulation only: 0.006 of the norm there)
        "$FL_BIN" embed --data "$FL_WORK/embed-images" --checkpoint "$export" --overwrite \
            --image-size "$FIRST_LIGHT_SIZE" --accelerator "$FIRST_LIGHT_EMBED_ACCELERATOR" \
            --precision bf16-mixed --out "$FL_WORK/embed-bf16.npy" \
            >"$FL_LOGS/train/embed-bf16.out" 2>&1 ||
            record train embed-bf16 fail "$(tail -n 2 "$FL_LOGS/train/embed-bf16.out" | tr '\n' ' ')"
        record_check train embed-bf16-vs-cpu \
            "embed --precision bf16-mixed of $FIRST_LIGHT_EMBED_IMAGES images on $FIRST_LIGHT_EMBED_ACCELERATOR against the CPU (bound: bf16)" \
            "$FL_PYTHON" "$here/first_light_check.py" npy "$FL_WORK/embed-bf16.npy" \
            "$FL_WORK/embed-cpu.npy" 3e-2
        record_check train export-torchvision "the export loads into torchvision's $FIRST_LIGHT_MODEL" \
            "$FL_PYTHON" "$here/first_light_check.py" torch-load "$export" "$FIRST_LIGHT_MODEL"
        # The pip wheel's way (issue 23): its Python API and launcher, CUDA from pip.
        record_check train wheel-train \
            "lightly_train_c.train() through the wheel's launcher, 2 steps on $FIRST_LIGHT_ACCELERATOR" \
            timeout 120 "$FL_PYTHON" "$here/first_light_check.py" wheel-train "$FL_BIN" "$here/python" \
            "$FL_WORK/embed-images" "$FL_WORK/train/wheel" "$FIRST_LIGHT_ACCELERATOR"
    fi

    # Killed right after its checkpoint at step RESUME_AT, resumed: the
    # uninterrupted run's loss at that step and its final checkpoint.
    LTC_FAULT=kill-before-export@$FIRST_LIGHT_RESUME_AT train_run simclr-parts "${common[@]}"
    local killed=$?
    if [ "$killed" -ne 137 ]; then
        record train resume fail "the first part was not killed after its checkpoint at step $FIRST_LIGHT_RESUME_AT (exit $killed; checkpoints are written at epoch ends)"
        return
    fi
    if ! train_run simclr-parts "${common[@]}" --resume; then
        record train resume fail "the resumed run failed: $(tail -n 3 "$FL_LOGS/train/simclr-parts.out" | tr '\n' ' ')"
        return
    fi
    local step=$FIRST_LIGHT_RESUME_AT whole parts same
    whole=$(sed -n "s/^{\"step\": $step, \"train_loss\": \([^,}]*\).*/\1/p" "$FL_WORK/train/simclr/metrics.jsonl")
    parts=$(sed -n "s/^{\"step\": $step, \"train_loss\": \([^,}]*\).*/\1/p" "$FL_WORK/train/simclr-parts/metrics.jsonl")
    cmp -s "$FL_WORK/train/simclr/checkpoints/last.ckpt" "$FL_WORK/train/simclr-parts/checkpoints/last.ckpt"
    same=$?
    "$FL_BUNDLE/tests/e2e/compare_weights" "$FL_WORK/train/simclr/checkpoints/last.ckpt" \
        "$FL_WORK/train/simclr-parts/checkpoints/last.ckpt" 1e-6 1e-5 >"$FL_LOGS/train/resume-compare.out" 2>&1
    local close=$?
    record train resume "$([ "$same" -eq 0 ] && echo pass || echo fail)" \
        "killed after step $step and resumed: the final checkpoint $([ "$same" -eq 0 ] && echo is || echo is not) the uninterrupted run's, byte for byte" \
        "loss_at_resume_whole=${whole:-n/a}" "loss_at_resume_parts=${parts:-n/a}" \
        "within_1e-5=$([ "$close" -eq 0 ] && echo 1 || echo 0)" \
        "compare=$(tail -n 1 "$FL_LOGS/train/resume-compare.out" | tr ' ' '_' | cut -c1-160)"
}

part_bench() {
    local log="$FL_LOGS/bench/bench-gpu.log"
    BENCH_GPU_SECTIONS=step BENCH_GPU_STEP_CONFIGS="$FIRST_LIGHT_BENCH_CONFIG" \
        BENCH_GPU_DEVICE="$FIRST_LIGHT_BENCH_DEVICE" BENCH_GPU_PRECISION="$FIRST_LIGHT_PRECISION" \
        BENCH_GPU_WARMUP="$FIRST_LIGHT_BENCH_WARMUP" BENCH_GPU_COMPILE="$FIRST_LIGHT_BENCH_COMPILE" \
        PYTHON="$FL_PYTHON" bash "$FL_BUNDLE/bench-gpu.sh" >"$log" 2>&1 &
    local pid=$!
    # On a cut (TERM from the part's timeout), record what the log has so far.
    trap 'kill -TERM $pid 2>/dev/null; bench_results "$log" cut; exit 124' TERM
    wait "$pid"
    trap - TERM
    bench_results "$log" finished
}

# Records the RESULT lines of the step benchmark's log: PyTorch eager, ours
# (with an MFU on PyTorch's FLOP count: its mfu / its images/s x ours), compile.
bench_results() {
    local log=$1 how=$2 eager ours compiled side line
    eager=$(grep '^RESULT tool=pytorch .*compile=0' "$log" | tail -n 1)
    # shellcheck disable=SC2034  # ours and compiled: read through ${!side}
    ours=$(grep '^RESULT tool=lightly-train-c ' "$log" | tail -n 1)
    # shellcheck disable=SC2034
    compiled=$(grep '^RESULT tool=pytorch .*compile=1' "$log" | tail -n 1)
    for side in eager ours compiled; do
        line=${!side}
        local fields=(images_per_s="$(word_value images_per_s "$line")"
                      gpu_memory_mib="$(word_value gpu_memory_mib "$line")"
                      precision="$(word_value precision "$line")")
        if [ "$side" = ours ]; then
            local e_rate e_mfu
            e_rate=$(word_value images_per_s "$eager")
            e_mfu=$(word_value mfu_pct "$eager")
            fields+=(mfu_pct="$(awk -v m="$e_mfu" -v r="$(word_value images_per_s "$line")" -v t="$e_rate" \
                'BEGIN { if (m ~ /^[0-9.]+$/ && r ~ /^[0-9.]+$/ && t > 0) printf "%.1f", m * r / t; else print "n/a" }')")
        else
            fields+=(mfu_pct="$(word_value mfu_pct "$line")" peak_allocated_mib="$(word_value peak_allocated_mib "$line")")
        fi
        if [ -n "$line" ]; then
            record bench "step-$side" info "$FIRST_LIGHT_BENCH_CONFIG" "${fields[@]}"
        elif [ "$how" = cut ]; then
            record bench "step-$side" cut "not reached within the bench part's budget"
        else
            record bench "step-$side" skip "no RESULT line: $(grep -E '^[A-Za-z.]*(Error|error)' "$log" |
                head -n 1 | cut -c1-200)"
        fi
    done
    grep '^RESULT tool=ratio' "$log" | tail -n 1 | sed 's/^RESULT tool=ratio //' |
        { read -r ratio && record bench ratio info "$ratio"; }
}

# Where a step's time goes (profile-gpu.sh: ncu over our timed step, kernel
# by kernel, and torch.profiler over PyTorch's): the totals and each side's
# largest kernels as records; the whole listing is in the logs.
part_profile() {
    local log="$FL_LOGS/profile/profile-gpu.log" line tool
    PROFILE_GPU_CONFIG="$FIRST_LIGHT_PROFILE_CONFIG" PROFILE_GPU_STEPS=1 PROFILE_GPU_TOP=40 \
        PYTHON="$FL_PYTHON" bash "$FL_BUNDLE/profile-gpu.sh" >"$log" 2>&1
    local status=$?
    for tool in lightly-train-c pytorch; do
        line=$(grep "^PROFILE tool=$tool kernels=" "$log" | head -n 1)
        if [ -z "$line" ]; then
            # A node without Nsight Compute, a Python without PyTorch: nothing to profile with.
            local missing="no ncu (Nsight Compute) found" why
            [ "$tool" = pytorch ] && missing="No module named 'torch'"
            why=$(grep -o -m 1 -F "$missing" "$log")
            if [ -n "$why" ]; then
                record profile "$tool-total" skip "$why"
                continue
            fi
            record profile "$tool-total" fail "no profile of $tool (exit $status): $(grep -v '^PROFILE' "$log" | tail -n 2 | tr '\n' ' ')"
            continue
        fi
        record profile "$tool-total" info "$FIRST_LIGHT_PROFILE_CONFIG, one step" \
            "kernels=$(word_value kernels "$line")" "us_per_step=$(word_value us_per_step "$line")"
        grep "^PROFILE tool=$tool us_per_step=" "$log" | head -n "$FIRST_LIGHT_PROFILE_RECORDS" |
            while IFS= read -r line; do
                record profile "$tool-kernel" info "${line##*kernel=}" \
                    "us_per_step=$(word_value us_per_step "$line")" \
                    "calls_per_step=$(word_value calls_per_step "$line")" \
                    "share_pct=$(word_value share_pct "$line")"
            done
    done
}

# The whole-program runs first, alone on the GPU (train, embed, export under
# compute-sanitizer, NCCL, the loss scaler, resumes: their repeatability
# checks want cuDNN's timed algorithm choices undisturbed;
# FIRST_LIGHT_TESTGPU_RUNS=0 leaves them out), then the binaries side by
# side: test_method_steps' cuda cases (its cpu cases are make test's) in
# the sets of FIRST_LIGHT_STEP_SETS, each a STEP_CASES list, one process
# each. Its 22 cases take about 3 minutes one after another (run 3: 10 in
# 58 s, mostly ref on the CPU), over the part's time after the runs.
part_test_gpu() {
    local name set index
    if [ "$FIRST_LIGHT_TESTGPU_RUNS" = 1 ]; then
        (cd "$FL_WORK" && GPU_TESTS=runs bash "$FL_BUNDLE/run-gpu-tests.sh") >"$FL_LOGS/test-gpu/runs.log" 2>&1
        local status=$?
        record test-gpu runs "$([ $status -eq 0 ] && echo pass || echo fail)" \
            "run-gpu-tests.sh runs: $(tail -n 1 "$FL_LOGS/test-gpu/runs.log")" \
            "failures=$(grep -c '^FAIL' "$FL_LOGS/test-gpu/runs.log")"
    fi
    local FL_TEST_PART=test-gpu
    for name in $FIRST_LIGHT_TESTGPU_BINARIES; do
        if [ "$name" != test_method_steps ]; then
            run_test_binary "$name" "" all 0 "$FIRST_LIGHT_TESTGPU_LIMIT" &
            continue
        fi
        index=0
        for set in $FIRST_LIGHT_STEP_SETS; do
            index=$((index + 1))
            STEP_CASES=$set run_test_binary "$name" "" "cases$index" 0 "$FIRST_LIGHT_TESTGPU_LIMIT" &
        done
    done
    wait
}

# ---- the driver ------------------------------------------------------------------

if [ "${1:-}" = --part ]; then
    exec 2>&1
    case $2 in
    versions) part_versions ;; paths) part_paths ;; targets) part_targets ;; ops) part_ops ;;
    train) part_train ;; bench) part_bench ;; profile) part_profile ;; test-gpu) part_test_gpu ;;
    esac
    exit 0
fi

# Sizes and budgets (seconds); the defaults are the GPU run's. Since issue
# 32 the first command runs the new paths against ref and the targets'
# benchmarks (about 6 minutes); the older parts follow where time is left,
# else in a second command (docs/gpu.md, "Left for the next window").
: "${FIRST_LIGHT_SECONDS:=400}"
: "${FIRST_LIGHT_PARTS:=versions paths targets ops train test-gpu profile}"
: "${FIRST_LIGHT_BUDGETS:=versions=40 paths=90 targets=330 ops=100 train=170 bench=120 test-gpu=150 profile=120}"
: "${FIRST_LIGHT_ACCELERATOR:=gpu}" "${FIRST_LIGHT_PRECISION:=16-mixed}"
: "${FIRST_LIGHT_MODEL:=resnet50}" "${FIRST_LIGHT_SIZE:=224}" "${FIRST_LIGHT_BATCH:=256}"
# The resume kill fires right after a checkpoint, written at each epoch's
# end: 768 images at batch 256 are 3 steps an epoch, so a multiple of 3.
: "${FIRST_LIGHT_STEPS:=50}" "${FIRST_LIGHT_RESUME_AT:=24}"
: "${FIRST_LIGHT_TEACHER:=vit_b14}" "${FIRST_LIGHT_DISTILL_BATCH:=128}" "${FIRST_LIGHT_DISTILL_STEPS:=30}"
: "${FIRST_LIGHT_EMBED_IMAGES:=64}" "${FIRST_LIGHT_EMBED_ACCELERATOR:=$FIRST_LIGHT_ACCELERATOR}" "${FIRST_LIGHT_TEST_LIMIT:=60}"
: "${FIRST_LIGHT_OPS_FP32:=test_backend_fast test_resnet test_shufflenet test_backend_fast_norm test_backend_act_ops
test_backend_transformer_fast test_nonfinite test_loss_scaler test_backend_resize
test_backend_dinov2_ops test_backend_dinov3_ops test_backend_transfer test_ranks test_conv_algorithms
test_backend_depthwise_ops test_backend_yolo_ops}"
: "${FIRST_LIGHT_OPS_16:=test_backend_fast test_backend_act_ops test_backend_fast_norm
test_backend_transformer_fast test_backend_resize test_backend_dinov2_ops test_backend_dinov3_ops
test_backend_depthwise_ops test_backend_yolo_ops test_cuda_precision}"
: "${FIRST_LIGHT_TESTGPU_BINARIES:=test_staging test_method_steps}" "${FIRST_LIGHT_TESTGPU_LIMIT:=150}"
: "${FIRST_LIGHT_TESTGPU_RUNS:=1}"
# test_method_steps' cuda cases in four sets of about equal time (the 16-bit
# cases cost about twice an fp32 one: they compare with ref-16 and ref-32).
: "${FIRST_LIGHT_STEP_SETS:=*_cuda test_simclr_cuda_fp16,test_byol_cuda_fp16,test_dino_cuda_fp16,test_vicreg_cuda_fp16,test_barlowtwins_cuda_fp16 test_distillation*_cuda_fp16,test_dinov2_cuda_fp16,test_dinov31_cuda_fp16 *_cuda_bf16}"
: "${FIRST_LIGHT_BENCH_CONFIG:=simclr resnet50 224 256 30}" "${FIRST_LIGHT_BENCH_DEVICE:=cuda}"
: "${FIRST_LIGHT_BENCH_WARMUP:=10}" "${FIRST_LIGHT_BENCH_COMPILE:=1}"
: "${FIRST_LIGHT_PROFILE_CONFIG:=simclr resnet50 224 256}" "${FIRST_LIGHT_PROFILE_RECORDS:=12}"
: "${FIRST_LIGHT_PATH_TESTS:=test_backend_transformer_fast:cuda,cuda-fp16,cuda-bf16:0
test_conv_fusion:cuda,cuda-fp16,cuda-bf16:1 test_multi_tensor_update:cuda:0
test_vit_checkpointing::12 test_cuda_graph_update::0 test_cuda_graph_layers::0
test_cuda_graph_staging::0 test_cuda_graph_step::0
test_backend_depthwise_ops:cuda,cuda-fp16,cuda-bf16:0 test_backend_yolo_ops:cuda-fp16,cuda-bf16:0
test_cuda_memory::0 test_backend_paka_ops:cuda,cuda-fp16,cuda-bf16:0
test_backend_shuffle_ops:cuda,cuda-fp16,cuda-bf16:0 test_embed_head::8}"
# The targets in the order they run (compile: SimCLR's torch.compile side, last).
: "${FIRST_LIGHT_TARGETS:=simclr teacher distillation dinov2 dino compile yolo-distillation yolo-dino convnext convnext-teacher}"
: "${FIRST_LIGHT_TARGET_SIMCLR:=resnet50 224 256 30}" "${FIRST_LIGHT_TARGET_DINO:=resnet50 224 64 20}"
: "${FIRST_LIGHT_TARGET_TEACHER:=vit_b14 224 128 30}" "${FIRST_LIGHT_TARGET_DINOV2:=vit_b14 224 32 10}"
: "${FIRST_LIGHT_TARGET_CONVNEXT:=torchvision/convnext_tiny 224 128 20}"
: "${FIRST_LIGHT_TARGET_CONVNEXT_TEACHER:=dinov3/convnext-base 224 128 20}"
: "${FIRST_LIGHT_TARGET_YOLO_DISTILLATION:=ultralytics/yolo11s.yaml vit_b14 224 128 20}"
: "${FIRST_LIGHT_TARGET_YOLO_DINO:=ultralytics/yolo11s.yaml 224 64 20}"
: "${FIRST_LIGHT_TARGET_DISTILLATION:=resnet50 vit_b14 224 128 20}" "${FIRST_LIGHT_TARGET_WARMUP:=8}"
export "${!FIRST_LIGHT_@}"

FL_START=$(date +%s.%N)
out=${OUT:-$here/out}
mkdir -p "$out"
FL_RESULTS="$out/first_light.jsonl"
FL_SUMMARY="$out/first_light_summary.md"
FL_WORK=${FIRST_LIGHT_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/first-light-XXXXXX")}
FL_LOGS="$FL_WORK/logs"
FL_IMAGES="$FL_WORK/images"  # made below from the working tree's photographs
FL_EXPECT_BACKEND=$([ "$FIRST_LIGHT_ACCELERATOR" = gpu ] && echo cuda || echo cpu)
# The node's python3 holds PyTorch and its pip CUDA libraries.
FL_PYTHON=${PYTHON:-python3}
[ -z "${PYTHON:-}" ] && [ -x /opt/torch/.venv/bin/python3 ] && FL_PYTHON=/opt/torch/.venv/bin/python3
export FL_START FL_RESULTS FL_SUMMARY FL_WORK FL_LOGS FL_IMAGES FL_EXPECT_BACKEND FL_PYTHON
# Everything printed goes to the console log too; fd 3 is where records print.
exec > >(tee -a "$out/first_light_console.log") 2>&1
tee_pid=$!
exec 3>&1
{
    echo "# First light: $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n)"
    echo
    sed 's/^/    /' "$here/MANIFEST" 2>/dev/null
    echo
} >>"$FL_SUMMARY"

# Set-up: the bundle unpacked, CUDA's libraries from the Python's pip packages.
mkdir -p "$FL_LOGS"/{versions,paths,targets,ops,train,bench,profile,test-gpu} "$FL_WORK/testdir/tests"
if ! tar -xf "$here"/bundle.tar* -C "$FL_WORK" 2>"$FL_LOGS/untar.txt" &&
   ! "$FL_PYTHON" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
       "$(ls "$here"/bundle.tar*)" "$FL_WORK" 2>>"$FL_LOGS/untar.txt"; then
    record setup unpack fail "cannot unpack $(ls "$here"/bundle.tar*): $(tail -n 1 "$FL_LOGS/untar.txt")"
    exit 1
fi
FL_BUNDLE="$FL_WORK/bundle"
FL_BIN="$FL_BUNDLE/bin/lightly-train-c"
export FL_BUNDLE FL_BIN
# The test fixtures: make_first_light.sh leaves them out of the bundle, the
# working tree the device tool sends beside this folder has them.
if [ -d "$here/../tests/fixtures" ]; then
    ln -s "$(cd "$here/../tests/fixtures" && pwd)" "$FL_BUNDLE/tests/fixtures"
else
    record setup fixtures fail "no tests/fixtures beside $(basename "$here")/ (the working tree)" \
        "expected=$here/../tests/fixtures"
fi
ln -s "$FL_BUNDLE/tests/fixtures" "$FL_WORK/testdir/tests/fixtures"
# The JPEGs the train part reads, as make_first_light.sh asked (images.conf;
# the environment's FIRST_LIGHT_IMAGES / FIRST_LIGHT_SIDES first).
images_wanted=${FIRST_LIGHT_IMAGES:-} sides_wanted=${FIRST_LIGHT_SIDES:-}
# shellcheck source=/dev/null
[ -f "$here/images.conf" ] && . "$here/images.conf"
FIRST_LIGHT_IMAGES=${images_wanted:-${FIRST_LIGHT_IMAGES:-768}}
FIRST_LIGHT_SIDES=${sides_wanted:-${FIRST_LIGHT_SIDES:-288 480}}
read -r min_side max_side <<<"$FIRST_LIGHT_SIDES"
if ! "$FL_BUNDLE/tools/photo_crops" "$here/../tests/fixtures/photos" "$FL_IMAGES" \
        "$FIRST_LIGHT_IMAGES" "$min_side" "$max_side" >"$FL_LOGS/images.txt" 2>&1; then
    record setup images fail "photo_crops: $(tail -n 1 "$FL_LOGS/images.txt")"
fi
# shellcheck source=tools/bench_gpu_lib.bash
. "$FL_BUNDLE/tools/bench_gpu_lib.bash"
use_python_cuda_libraries "$FL_PYTHON"
record setup unpack pass "bundle unpacked in $FL_WORK" "images=$(find "$FL_IMAGES" -name '*.jpg' | wc -l)" \
    "image_sides=$min_side-$max_side" \
    "python=$FL_PYTHON" "library_path=${LD_LIBRARY_PATH:-none}"

# Every program of the bundle must find our libraries inside it: any other
# than those every Linux system has (tools/manylinux_libs.txt, what
# collect_libs.sh leaves out) and CUDA's, resolved elsewhere or not at all,
# fails on a node without our Debian packages.
outside=$(find "$FL_BUNDLE" -type f -perm -u+x | while IFS= read -r file; do
    head -c 4 "$file" | grep -q ELF || continue
    ldd "$file" 2>/dev/null | awk -v bundle="$FL_BUNDLE/" -v name="${file#"$FL_BUNDLE"/}" '
        FNR == NR { if ($0 !~ /^#/) system_library[$1] = 1; next }
        $2 == "=>" && !($1 in system_library) && $1 !~ /^(libcuda|libcudart|libcudnn|libcublas|libnccl|libnvrtc|libnvJitLink)/ &&
        index($3, bundle) != 1 { print name ": " $1 " => " $3 }' "$FL_BUNDLE/tools/manylinux_libs.txt" -
done)
if [ -n "$outside" ]; then
    record setup libraries fail "libraries not taken from the bundle: $(head -n 5 <<<"$outside" | paste -sd';' -)" \
        "count=$(wc -l <<<"$outside")"
else
    record setup libraries pass "every program of the bundle finds our libraries in it"
fi

# Packs the logs (every part's, the results so far) into one file of $OUT.
pack_logs() {
    tar -czf "$out/first_light_logs.tar.gz.tmp" -C "$FL_WORK" logs 2>/dev/null &&
        mv "$out/first_light_logs.tar.gz.tmp" "$out/first_light_logs.tar.gz"
}

# Kills what a part left running (its name in $1). A cut reaches only the
# part's process group: a nested `timeout` makes a group of its own, and a
# `train` that got SIGTERM in a long step finishes the step first. Such a
# process would hold the GPU through the next part (its figures) and keep
# the console's tee open past the end (seen: 2 minutes of an emulated
# `train` after the last record). Every process of a part carries its token
# in the environment, so the search finds them whatever their group.
kill_leftovers() {
    local token="FL_PART_TOKEN=$$-$1" environ pid pids=() names=()
    for environ in /proc/[0-9]*/environ; do
        pid=${environ#/proc/}
        pid=${pid%/environ}
        if grep -q -z -x -F "$token" "$environ" 2>/dev/null; then
            pids+=("$pid")
            names+=("$(tr -d '\n' <"/proc/$pid/comm" 2>/dev/null)")
        fi
    done
    [ ${#pids[@]} -eq 0 ] && return 0
    kill -KILL "${pids[@]}" 2>/dev/null
    record "$1" leftovers info "killed ${#pids[@]} processes still running after the part" \
        "names=$(printf '%s,' "${names[@]}" | sed 's/,$//')"
}

deadline=$((${FL_START%.*} + FIRST_LIGHT_SECONDS))
for part in $FIRST_LIGHT_PARTS; do
    budget=$(tr ' ' '\n' <<<"$FIRST_LIGHT_BUDGETS" | sed -n "s/^$part=//p")
    left=$((deadline - $(date +%s)))
    [ "${budget:-0}" -gt "$left" ] && budget=$left
    if [ "$budget" -lt 5 ]; then
        record "$part" part cut "not started: the deadline (${FIRST_LIGHT_SECONDS}s) has passed"
        continue
    fi
    started=$(date +%s.%N)
    echo "== $part (budget ${budget}s)"
    FL_PART_TOKEN="$$-$part" timeout -k 15 "$budget" bash "$here/$(basename "$0")" --part "$part" \
        >"$FL_LOGS/$part.log" 2>&1
    status=$?
    kill_leftovers "$part"
    seconds=$(awk -v s="$started" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    fails=$(grep -c "\"part\": \"$part\", \"check\": [^,]*, \"status\": \"fail\"" "$FL_RESULTS")
    if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
        record "$part" part cut "cut at its budget of ${budget}s" "seconds=$seconds" "failed_checks=$fails"
    else
        record "$part" part "$([ "$fails" -eq 0 ] && [ "$status" -eq 0 ] && echo pass || echo fail)" \
            "done" "seconds=$seconds" "failed_checks=$fails" "budget=$budget"
    fi
    pack_logs
done
record all total info "first light done" "seconds=$(elapsed)" \
    "passed=$(grep -c '"status": "pass"' "$FL_RESULTS")" "failed=$(grep -c '"status": "fail"' "$FL_RESULTS")" \
    "cut=$(grep -c '"status": "cut"' "$FL_RESULTS")"
pack_logs
[ -z "${FIRST_LIGHT_WORK:-}" ] && rm -rf "$FL_WORK"
# The console log complete before the device tool collects $OUT.
exec 1>&- 2>&- 3>&-
wait "$tee_pid" 2>/dev/null
exit 0
