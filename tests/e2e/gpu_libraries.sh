#!/usr/bin/env bash
# The GPU libraries the program loads (src/backend/cuda/cuda_libraries.c,
# comm_nccl_version): --version names their versions and files, and a
# cuDNN this build cannot use stops `train --accelerator gpu` with one line
# naming what was loaded and what is needed (exit 2), while `--accelerator
# auto` falls back to the CPU and says why in train.log. "Another" cuDNN is
# the CUDA emulation's, told to claim another version (LTC_EMU_CUDNN_*);
# the native build's --version reads the real libraries of this machine.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init gpu_libraries

emu_require
"$build/tools/photo_crops" tests/fixtures/photos "$work/images" 8 40 48 >/dev/null ||
  fail "photo_crops failed"
common=(--data "$work/images" --method simclr --model resnet18 --image-size 28 --batch-size 4 --max-steps 1
        --num-workers 1 --threads 2)

# The native build reads this machine's libraries (no GPU needed for that).
if "$bin" --version | grep -q 'CUDA: yes'; then
  expect 0 '^GPU libraries: .*cuDNN 9\.[0-9]+\.[0-9]+ for CUDA 13\.[0-9]+ \(/[^)]*libcudnn\.so\.9\); cuBLAS 13\.' \
    -- "$bin" --version
  expect 0 '^NCCL: NCCL 2\.[0-9]+\.[0-9]+ \(/[^)]*libnccl\.so\.2\)$' -- "$bin" --version
fi
expect 0 '^GPUs: 1$' -- "$emu" --version
"$emu" --version | grep -q 'unusable' && fail "the emulation's own versions called unusable"

# A cuDNN 9 built for CUDA 12 (same file name, libcudnn.so.9) and a cuDNN 8.
export LTC_EMU_CUDNN_CUDART=12080
expect 0 '^GPU libraries unusable: cuDNN 9\.[0-9.]+ for CUDA 12\.8 loaded \(.*\): this build needs a cuDNN 9 for CUDA 13 \(pip: nvidia-cudnn-cu13\)$' \
  -- "$emu" --version
output=$("$emu" train "${common[@]}" --accelerator gpu --out "$work/refused" 2>&1)
status=$?
[ "$status" -eq 2 ] || fail "train --accelerator gpu with a CUDA 12 cuDNN exited $status: $output"
[ "$(printf '%s\n' "$output" | wc -l)" -eq 1 ] || fail "more than one line: $output"
grep -q -- '--accelerator gpu: no usable GPU: cuDNN .* for CUDA 12.8 loaded .*needs a cuDNN 9 for CUDA 13' <<<"$output" ||
  fail "the line does not name the cuDNN loaded and the one needed: $output"
"$emu" train "${common[@]}" --accelerator auto --out "$work/fallback" >"$work/fallback.out" 2>&1 ||
  fail "--accelerator auto did not fall back: $(tail -n 3 "$work/fallback.out")"
grep -q 'accelerator: cpu (--accelerator auto: cuDNN .* for CUDA 12\.8 loaded' "$work/fallback/train.log" ||
  fail "train.log does not say why the GPU was not used: $(grep accelerator "$work/fallback/train.log")"
grep -q 'GPU libraries: .*(unusable: cuDNN' "$work/fallback/train.log" ||
  fail "train.log lacks the GPU libraries line"
unset LTC_EMU_CUDNN_CUDART
LTC_EMU_CUDNN_VERSION=81000 expect 2 'cuDNN 8\.10\.0 loaded \(.*\): this build needs cuDNN 9 \(built with 9\.' \
  -- "$emu" train "${common[@]}" --accelerator gpu --out "$work/refused8"
e2e_finish
