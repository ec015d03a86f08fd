# The teacher and distillation sections of the GPU benchmark (issue 11),
# sourced by tools/bench_gpu.sh (which sets PYTHON, device, precision,
# warmup, sections, tools, step_bin and work, and sources
# tools/bench_gpu_lib.bash).
#
# teacher:      the eval forward (no gradients) of a frozen DINOv2-shaped ViT
#               or DINOv3 ConvNeXt as a distillation teacher runs it:
#               bench_train_step --mode teacher (ours, a frozen backbone
#               pooling its class token / its normalised last stage) next
#               to pytorch_train_step.py --mode teacher (under
#               torch.no_grad() and autocast: class token and patch tokens,
#               L2-normalised; the ConvNeXt's map and its mean), then
#               PyTorch's side again through torch.compile (its own table;
#               BENCH_GPU_COMPILE=0 leaves it out).
# distillation: one `distillation` (v3) step with LightlyTrain's defaults
#               (mixup, teacher, student, heads, queue 8192, the v3 loss,
#               clipping at norm 1, LARS at 1.8 x sqrt(batch / 1536)):
#               bench_train_step --mode distillation next to
#               pytorch_train_step.py --mode distillation (torchvision
#               student, channels-last, GradScaler for fp16).
# Random weights, and random batches made once on the device: the
# model-bound figure, no data loading. Ours: --backend cuda --precision auto
# (16-mixed where the cuda backend takes fp16 storage, else 32-true; the
# RESULT line says which). PyTorch: --precision $precision; its ViT is timm's
# when timm is importable, else the script's own (the same architecture and
# parameter names; RESULT says vit=timm|builtin). Each pair ends with a line
#   RESULT tool=ratio ... ours_over_pytorch_images_per_s=R ours_over_pytorch_gpu_memory=M
# and the section with a table of all pairs. GPU memory: the process's peak
# used memory as nvidia-smi samples it (CUDA context included, the same
# measure on both sides; gpu_memory_source=device where nvidia-smi lists no
# process ids (containers): the GPU's growth in memory.used instead; n/a
# without nvidia-smi or on the CPU), next to PyTorch's allocator peaks in
# its own line.
#
# shellcheck disable=SC2154  # device, tools, work, ...: set by tools/bench_gpu.sh
# BENCH_GPU_TEACHER_CONFIGS ("model size batch steps" per line) and
# BENCH_GPU_DISTILLATION_CONFIGS ("student teacher size batch steps") replace
# the defaults below (batch 128: LightlyTrain's default batch size).
teacher_configs=${BENCH_GPU_TEACHER_CONFIGS:-"vit_s14 224 128 50
vit_b14 224 128 30
dinov3/convnext-base 224 128 30"}
distillation_configs=${BENCH_GPU_DISTILLATION_CONFIGS:-"resnet18 vit_s14 224 128 30
resnet50 vit_s14 224 128 30
resnet18 vit_b14 224 128 30
resnet50 vit_b14 224 128 20
resnet50 dinov3/convnext-base 224 128 20"}
pair_rows=()  # one table row per measured pair
# The teacher forwards also against torch.compile (BENCH_GPU_COMPILE=0: not),
# in a table of their own.
teacher_compile=${BENCH_GPU_COMPILE:-1}
compile_rows=()

# Runs one pair: $1 the label, then the arguments both tools take.
run_pair() {
    local label=$1 ours torch
    shift
    echo "== $label"
    # A side that fails (out of memory, a missing package) leaves its fields
    # empty and the ratios n/a; the other side still runs.
    measure_side torch "$PYTHON" "$tools/compare/pytorch_train_step.py" "$@" \
        --device "$device" --precision "$precision" --channels-last 1 --warmup "$warmup" \
        --threads "$step_threads"
    measure_side ours "$step_bin" "$@" --backend "$device" --precision auto \
        --warmup "$warmup" --threads "$step_threads"
    local images memory
    images=$(ratio_of images_per_s "$ours" "$torch")
    memory=$(ratio_of gpu_memory_mib "$ours" "$torch")
    echo "RESULT tool=ratio what=\"$label\" ours_precision=$(result_field precision "$ours")" \
         "pytorch_precision=$(result_field precision "$torch")" \
         "ours_over_pytorch_images_per_s=$images ours_over_pytorch_gpu_memory=$memory"
    local row="| $label |" field
    for field in precision images_per_s gpu_memory_mib; do
        row+=" $(result_field "$field" "$ours") |"
    done
    local library  # whose ViT (timm, builtin) or ConvNeXt (timm, torchvision) PyTorch ran
    library=$(result_field vit "$torch")
    [ "$library" = - ] && library=$(result_field convnext "$torch")
    row+=" $(result_field precision "$torch") $library |"
    for field in images_per_s gpu_memory_mib; do
        row+=" $(result_field "$field" "$torch") |"
    done
    pair_rows+=("$row $images | $memory |")
    pair_ours=$ours
}

# The teacher pair's PyTorch side again through torch.compile ($1 the
# label, then the arguments both tools take), against pair_ours.
run_compiled_teacher() {
    local label=$1 compiled
    shift
    measure_side compiled "$PYTHON" "$tools/compare/pytorch_train_step.py" "$@" \
        --device "$device" --precision "$precision" --channels-last 1 --warmup "$warmup" \
        --threads "$step_threads" --compile
    local images
    images=$(ratio_of images_per_s "$pair_ours" "$compiled")
    echo "RESULT tool=ratio what=\"$label (torch.compile)\" ours_over_compile_images_per_s=$images"
    local row="| $label | $(result_field images_per_s "$pair_ours") |"
    compile_rows+=("$row $(result_field images_per_s "$compiled") | $images |")
}

if [[ " $sections " == *" teacher "* ]]; then
    while read -r model size batch steps; do
        [ -n "$model" ] || continue
        run_pair "teacher forward $model ${size}px batch $batch" --mode teacher --model "$model" \
            --image-size "$size" --batch-size "$batch" --steps "$steps"
        [ "$teacher_compile" = 1 ] &&
            run_compiled_teacher "teacher forward $model ${size}px batch $batch" --mode teacher \
                --model "$model" --image-size "$size" --batch-size "$batch" --steps "$steps"
    done <<<"$teacher_configs"
fi
if [[ " $sections " == *" distillation "* ]]; then
    while read -r student teacher size batch steps; do
        [ -n "$student" ] || continue
        run_pair "distillation step $student + $teacher ${size}px batch $batch" \
            --mode distillation --model "$student" --teacher "$teacher" \
            --image-size "$size" --batch-size "$batch" --steps "$steps"
    done <<<"$distillation_configs"
fi
if [ ${#pair_rows[@]} -gt 0 ]; then
    echo "== teacher and distillation, $device (GPU memory: nvidia-smi peak of each process, MiB)"
    echo "| what | ours precision | ours images/s | ours MiB | PyTorch precision, model |" \
         "PyTorch images/s | PyTorch MiB | images/s ours/PyTorch | memory ours/PyTorch |"
    echo "|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${pair_rows[@]}"
fi
if [ ${#compile_rows[@]} -gt 0 ]; then
    echo "== teacher forwards against torch.compile, $device"
    echo "| what | ours images/s | compile images/s | ours/compile |"
    echo "|---|---|---|---|"
    printf '%s\n' "${compile_rows[@]}"
fi
