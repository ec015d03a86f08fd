#!/usr/bin/env bash
# The GPU benchmark's step, teacher and distillation sections
# (tools/bench_gpu.sh, tools/bench_gpu_step.bash,
# tools/bench_gpu_distillation.bash) run end to end on the CPU at tiny sizes
# (BENCH_GPU_DEVICE=cpu): every pair prints our RESULT line with the
# precision the tool ran, the PyTorch line when torch and torchvision are
# importable (else its failure, and ours still runs), the ratio line and the
# closing table. Not a timing test: only the lines and their fields are
# checked; ConvNeXts too (a SimCLR ConvNeXt-T step, distillation from a
# DINOv3 ConvNeXt teacher, its forward also against torch.compile). Also
# bench_train_step's --precision: a 16-mixed distillation step on the ref
# backend (fp16 storage emulated, loss scale 65536), refusals.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init bench_gpu_cpu

step_bin="$build/tools/bench_train_step"
python=${PYTHON:-/usr/bin/python3}
have_torch=0
"$python" -c 'import torch, torchvision' 2>/dev/null && have_torch=1

output=$(BENCH_GPU_DEVICE=cpu BENCH_GPU_PRECISION=32-true BENCH_GPU_WARMUP=1 \
  BENCH_GPU_SECTIONS="step teacher distillation" \
  BENCH_GPU_STEP_CONFIGS=$'simclr resnet18 28 2 1\nsimclr torchvision/convnext_tiny 32 2 1' \
  BENCH_GPU_COMPILE=0 BENCH_GPU_TEACHER_CONFIGS="vit_t14 28 2 1" \
  BENCH_GPU_DISTILLATION_CONFIGS=$'resnet18 vit_t14 28 2 1\nresnet18 dinov3/convnext-tiny 32 2 1' \
  PYTHON="$python" tools/bench_gpu.sh "$build" 2>&1) || fail "bench_gpu.sh exited $?: $output"
echo "$output"

# has PATTERN WHAT: a line of the output matches PATTERN.
has() { grep -q -E -- "$1" <<<"$output" || fail "$2: no line matching /$1/"; }
number='[0-9]+\.[0-9]+'
has "^RESULT tool=lightly-train-c mode=teacher model=vit_t14 backend=cpu precision=32-true image_size=28 batch=2 .* images_per_s=$number .* gpu_memory_mib=n/a gpu_memory_source=none$" \
  "our teacher line"
has "^RESULT tool=lightly-train-c mode=distillation model=resnet18 teacher=vit_t14 backend=cpu precision=32-true image_size=28 batch=2 .* images_per_s=$number .* gpu_memory_mib=n/a gpu_memory_source=none$" \
  "our distillation line"
has "^RESULT tool=lightly-train-c mode=method method=simclr model=resnet18 backend=cpu precision=32-true image_size=28 batch=2 .* images_per_s=$number .* gpu_memory_mib=n/a gpu_memory_source=none$" \
  "our SimCLR step line"
has '^backend cpu, precision 32-true$' "our header"
has "^RESULT tool=lightly-train-c mode=method method=simclr model=torchvision/convnext_tiny backend=cpu precision=32-true image_size=32 batch=2 .* images_per_s=$number " \
  "our ConvNeXt SimCLR step line"
has "^RESULT tool=lightly-train-c mode=distillation model=resnet18 teacher=dinov3/convnext-tiny backend=cpu precision=32-true image_size=32 batch=2 .* images_per_s=$number " \
  "our distillation line with a DINOv3 ConvNeXt teacher"
if [ "$have_torch" = 1 ]; then
  has "^RESULT tool=pytorch mode=teacher model=vit_t14 device=cpu precision=32-true vit=(timm|builtin) image_size=28 batch=2 .* images_per_s=$number .*gpu_memory_mib=n/a gpu_memory_source=none$" \
    "PyTorch teacher line"
  has "^RESULT tool=pytorch mode=distillation model=resnet18 teacher=vit_t14 device=cpu precision=32-true vit=(timm|builtin) .* images_per_s=$number " \
    "PyTorch distillation line"
  has "^RESULT tool=ratio what=\"teacher forward vit_t14 28px batch 2\" ours_precision=32-true pytorch_precision=32-true ours_over_pytorch_images_per_s=$number ours_over_pytorch_gpu_memory=n/a$" \
    "teacher ratio"
  has "^RESULT tool=ratio what=\"distillation step resnet18 \+ vit_t14 28px batch 2\" .* ours_over_pytorch_images_per_s=$number " \
    "distillation ratio"
  has "^RESULT tool=pytorch method=simclr model=resnet18 device=cpu precision=32-true channels_last=1 compile=0 synthetic=1 image_size=28 batch=2 .* images_per_s=$number " \
    "PyTorch SimCLR step line"
  has "^RESULT tool=ratio what=\"simclr step resnet18 28px batch 2\" ours_precision=32-true pytorch_precision=32-true ours_over_eager_images_per_s=$number ours_over_compile_images_per_s=n/a ours_over_eager_gpu_memory=n/a$" \
    "step ratio"
  has "^\| simclr step resnet18 28px batch 2 \| 32-true \| $number \| n/a \| $number \| n/a \| - \| $number \| n/a \| n/a \|$" \
    "step table row"
  has "^\| distillation step resnet18 \+ vit_t14 28px batch 2 \| 32-true \| $number \| n/a \| 32-true (timm|builtin) \| $number \| n/a \| $number \| n/a \|$" \
    "table row"
  has "^RESULT tool=pytorch method=simclr model=torchvision/convnext_tiny device=cpu precision=32-true .* images_per_s=$number " \
    "PyTorch ConvNeXt SimCLR step line"
  has "^\| distillation step resnet18 \+ dinov3/convnext-tiny 32px batch 2 \| 32-true \| $number \| n/a \| 32-true (timm|torchvision) \| $number \| n/a \| $number \| n/a \|$" \
    "table row of the DINOv3 ConvNeXt teacher"
else
  echo "torch/torchvision not importable by $python: the PyTorch side is expected to fail"
  has "^failed: $python .*pytorch_train_step.py --mode teacher" "PyTorch failure line"
  has "^RESULT tool=ratio what=\"teacher forward vit_t14 28px batch 2\" .* ours_over_pytorch_images_per_s=n/a " \
    "ratio without PyTorch"
fi
has '^\| what \| ours precision \| ours images/s \|' "table header"
[ "$(grep -c '^RESULT tool=ratio' <<<"$output")" -eq 5 ] || fail "expected 5 ratio lines"

expect 2 "unknown section 'gpu'" -- env BENCH_GPU_SECTIONS="teacher gpu" tools/bench_gpu.sh "$build"

# A DINOv3 ConvNeXt teacher's forward, against torch.compile too
# (BENCH_GPU_COMPILE=1): our line, the compile ratio line and its own
# table (n/a where torch is not importable).
compiled=$(BENCH_GPU_DEVICE=cpu BENCH_GPU_PRECISION=32-true BENCH_GPU_WARMUP=1 \
  BENCH_GPU_SECTIONS=teacher BENCH_GPU_COMPILE=1 BENCH_GPU_TEACHER_CONFIGS="dinov3/convnext-tiny 32 2 1" \
  PYTHON="$python" tools/bench_gpu.sh "$build" 2>&1) || fail "bench_gpu.sh (compile) exited $?: $compiled"
grep -q -E "^RESULT tool=ratio what=\"teacher forward dinov3/convnext-tiny 32px batch 2 \(torch.compile\)\" ours_over_compile_images_per_s=([0-9.]+|n/a)$" <<<"$compiled" ||
  fail "no compile ratio line: $compiled"
grep -q '^| what | ours images/s | compile images/s | ours/compile |$' <<<"$compiled" ||
  fail "no compile table: $compiled"
grep -q -E "^RESULT tool=lightly-train-c mode=teacher model=dinov3/convnext-tiny backend=cpu precision=32-true image_size=32 batch=2 .* images_per_s=$number " <<<"$compiled" ||
  fail "no DINOv3 ConvNeXt teacher line: $compiled"
if [ "$have_torch" = 1 ]; then
  grep -q -E "^RESULT tool=pytorch mode=teacher model=dinov3/convnext-tiny compile=1 device=cpu precision=32-true convnext=(timm|torchvision) image_size=32 batch=2 .* images_per_s=$number " <<<"$compiled" ||
    fail "no compiled PyTorch teacher line: $compiled"
fi

# tools/profile_gpu.sh's reading of an ncu CSV (ncu itself needs a GPU):
# per-kernel sums over a sample in ncu's raw format (a banner line, the
# header, the units row, thousands separators, template kernels).
profile=$("$python" tools/compare/ncu_kernels.py tests/fixtures/ncu_raw_sample.csv --steps 2 --top 3) ||
  fail "ncu_kernels.py exited $?"
expected="PROFILE tool=lightly-train-c kernels=3 us_per_step=150.0
PROFILE tool=lightly-train-c us_per_step=125.0 calls_per_step=0.5 share_pct=83.3 kernel=sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_nhwckrsc_nhwc
PROFILE tool=lightly-train-c us_per_step=20.0 calls_per_step=0.5 share_pct=13.3 kernel=batchnorm_stats<__nv_bfloat16, 4>
PROFILE tool=lightly-train-c us_per_step=5.0 calls_per_step=1 share_pct=3.3 kernel=relu_kernel<__half>"
[ "$profile" = "$expected" ] || fail "ncu_kernels.py: got
$profile
expected
$expected"

# The 16-bit path of the tool (activations stored as fp16 by the ref backend).
expect 0 "^RESULT tool=lightly-train-c mode=distillation model=resnet18 teacher=vit_t14 backend=ref precision=16-mixed .* update_s=$number " \
  -- "$step_bin" --mode distillation --model resnet18 --teacher vit_t14 --backend ref \
  --precision 16-mixed --image-size 28 --batch-size 2 --steps 1 --warmup 0 --threads 1
# --mode method: any method's step, with its --method-arg keys checked.
expect 0 "^RESULT tool=lightly-train-c mode=method method=dino model=resnet18 backend=cpu precision=32-true image_size=28 batch=2 .* update_s=$number " \
  -- "$step_bin" --mode method --method dino --method-arg output_dim=256 --model resnet18 \
  --image-size 28 --batch-size 2 --steps 1 --warmup 0 --threads 1
expect 1 "^bench_train_step: simclr: --method-arg: unknown key 'prototypes'" \
  -- "$step_bin" --mode method --method simclr --method-arg prototypes=256 --image-size 28
expect 1 "^bench_train_step: --precision bf16-mixed: " \
  -- "$step_bin" --mode teacher --model vit_t14 --precision bf16-mixed --image-size 28
expect 2 "bad argument '--precision'" -- "$step_bin" --precision fp16
e2e_finish
