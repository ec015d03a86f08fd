# The step section of the GPU benchmark (issue 9), sourced by
# tools/bench_gpu.sh: one training step of SimCLR and DINO on random batches
# already on the device (the model-bound figure; no data loading), PyTorch
# eager, ours, then PyTorch torch.compile, in one command:
#   ours     bench_train_step --mode method --method M: the trainer's step
#            (forward, backward, heads, loss, gate, optimizer, EMA) on the
#            backend, --precision auto (16-mixed on the GPU);
#   pytorch  tools/compare/pytorch_ssl_train.py --synthetic: torchvision
#            ResNet or ConvNeXt, the same heads and losses, AMP,
#            channels-last; then the
#            same with --compile (skipped with BENCH_GPU_COMPILE=0).
# DINO's head gets 65536 prototypes on both sides. Each configuration ends
# with a line
#   RESULT tool=ratio what="..." ours_over_eager_images_per_s=R
#     ours_over_compile_images_per_s=R ours_over_eager_gpu_memory=M
# and the section with a table (the issue's targets: 1.5x eager, 1.2x
# compile, no more GPU memory).
#
# shellcheck disable=SC2154  # PYTHON, device, precision, warmup, ...: set by tools/bench_gpu.sh
# BENCH_GPU_STEP_CONFIGS ("method model size batch steps" per line) replaces
# the defaults below.
step_configs=${BENCH_GPU_STEP_CONFIGS:-"simclr resnet50 224 256 40
simclr resnet18 224 256 60
dino resnet50 224 64 30
simclr torchvision/convnext_tiny 224 128 30"}
step_compile=${BENCH_GPU_COMPILE:-1}
step_rows=()
step_prototypes=65536
while read -r method model size batch steps; do
    [ -n "$method" ] || continue
    label="$method step $model ${size}px batch $batch"
    echo "== $label"
    torch_args=(--method "$method" --model "$model" --image-size "$size" --batch-size "$batch"
                --device "$device" --precision "$precision" --channels-last --synthetic
                --steps "$steps" --warmup "$warmup" --threads "$step_threads"
                --prototypes "$step_prototypes")
    measure_side eager "$PYTHON" "$tools/compare/pytorch_ssl_train.py" "${torch_args[@]}"
    method_args=()
    [ "$method" = dino ] && method_args=(--method-arg output_dim="$step_prototypes")
    measure_side ours "$step_bin" --mode method --method "$method" --model "$model" \
        --image-size "$size" --batch-size "$batch" --steps "$steps" --warmup "$warmup" \
        --threads "$step_threads" --backend "$device" --precision auto "${method_args[@]}"
    # torch.compile last: its compilation takes the longest, and a run cut at
    # its time limit (tools/first_light.sh) has eager and ours already.
    compiled=""
    [ "$step_compile" = 1 ] &&
        measure_side compiled "$PYTHON" "$tools/compare/pytorch_ssl_train.py" "${torch_args[@]}" \
            --compile
    over_eager=$(ratio_of images_per_s "$ours" "$eager")
    over_compile=$(ratio_of images_per_s "$ours" "$compiled")
    memory=$(ratio_of gpu_memory_mib "$ours" "$eager")
    echo "RESULT tool=ratio what=\"$label\" ours_precision=$(result_field precision "$ours")" \
         "pytorch_precision=$(result_field precision "$eager")" \
         "ours_over_eager_images_per_s=$over_eager ours_over_compile_images_per_s=$over_compile" \
         "ours_over_eager_gpu_memory=$memory"
    row="| $label | $(result_field precision "$ours") | $(result_field images_per_s "$ours") |"
    row+=" $(result_field gpu_memory_mib "$ours") | $(result_field images_per_s "$eager") |"
    row+=" $(result_field gpu_memory_mib "$eager") | $(result_field images_per_s "$compiled") |"
    step_rows+=("$row $over_eager | $over_compile | $memory |")
done <<<"$step_configs"
if [ ${#step_rows[@]} -gt 0 ]; then
    echo "== training steps on random batches, $device, PyTorch $precision (GPU memory: nvidia-smi peak, MiB)"
    echo "| what | ours precision | ours images/s | ours MiB | eager images/s | eager MiB |" \
         "compile images/s | ours/eager | ours/compile | memory ours/eager |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${step_rows[@]}"
fi
