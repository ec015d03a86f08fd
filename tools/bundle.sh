#!/usr/bin/env bash
# make bundle: a relocatable folder for GPU nodes that have the NVIDIA driver
# and a Python environment's CUDA libraries but none of our Debian packages
# (and no root). Run as: tools/bundle.sh BUILD_DIR OUT_DIR
#
#   OUT/bin/lightly-train-c       the program
#   OUT/lib/                      the libraries it needs that are not part of
#                                 the C runtime or of CUDA (oneDNN, libjpeg,
#                                 libpng, libwebp, protobuf-c, OpenMP, ...)
#   OUT/tests/                    the GPU test binaries, the e2e helpers
#                                 (make_images, compare_weights, make_backbone)
#                                 and the fixtures they read
#   OUT/run-gpu-tests.sh          the GPU checks (tests/run_gpu_tests.sh)
#   OUT/bench-gpu.sh, OUT/tools/  the GPU benchmark (tools/bench_gpu.sh): its
#                                 section files, bench_train_step and the
#                                 PyTorch scripts it runs beside ours
#   OUT/profile-gpu.sh            the per-kernel profile (tools/profile_gpu.sh)
#   OUT/README                    how to point the loader at CUDA
#
# Binaries find OUT/lib through their $ORIGIN/../lib run path (set at link
# time). cuDNN, cuBLAS, the CUDA runtime and NCCL are not copied (over 1 GB,
# and they must match the node's driver): they come from LD_LIBRARY_PATH,
# e.g. the nvidia/*/lib folders of a pip-installed PyTorch (see README).
set -eu

if [ $# -ne 2 ]; then
    echo "usage: $0 BUILD_DIR OUT_DIR" >&2
    exit 2
fi
build=$1
out=$2
here=$(cd "$(dirname "$0")/.." && pwd)

binaries=("$build/lightly-train-c")
for test in $(grep -v '^#' "$here/tests/gpu_tests.list"); do
    binaries+=("$build/tests/$test")
done
helpers=("$build/tests/e2e/make_images" "$build/tests/e2e/compare_weights"
         "$build/tests/e2e/make_backbone")
bench_tools=("$build/tools/bench_train_step")
for file in "${binaries[@]}" "${helpers[@]}" "${bench_tools[@]}"; do
    [ -x "$file" ] || { echo "bundle.sh: $file is missing (run make and make test first)" >&2; exit 1; }
done

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/tests/e2e" "$out/tests/fixtures"
cp "$build/lightly-train-c" "$out/bin/"
for file in "${binaries[@]:1}"; do cp "$file" "$out/tests/"; done
for file in "${helpers[@]}"; do cp "$file" "$out/tests/e2e/"; done
# The helpers' run path $ORIGIN/../lib is tests/lib from tests/e2e/.
ln -s ../lib "$out/tests/lib"
cp "$here/tests/e2e/resume_across.bash" "$out/tests/e2e/"
cp "$here"/tests/fixtures/*.safetensors "$out/tests/fixtures/"
cp "$here/tests/run_gpu_tests.sh" "$out/run-gpu-tests.sh"
cp "$here/tests/gpu_tests.list" "$out/tests/"
# The GPU benchmark and its PyTorch side (make bench-gpu).
mkdir -p "$out/tools/compare"
cp "$here/tools/bench_gpu.sh" "$out/bench-gpu.sh"
cp "$here/tools/profile_gpu.sh" "$out/profile-gpu.sh"
cp "$here/tools/bench_gpu_lib.bash" "$here/tools/bench_gpu_step.bash" \
    "$here/tools/bench_gpu_distillation.bash" "$here/tools/distillation_losses.py" \
    "$here/tools/manylinux_libs.txt" \
    "${bench_tools[@]}" "$out/tools/"
for script in pytorch_ssl_train pytorch_simclr_train pytorch_dinov2 torchvision_data \
              make_jpeg_folder pytorch_train_step pytorch_yolo ncu_kernels; do
    cp "$here/tools/compare/$script.py" "$out/tools/compare/"
done

# Every library the binaries load, except the C runtime's (every node has a
# compatible or newer one; tools/collect_libs.sh, shared with make wheel).
"$here/tools/collect_libs.sh" "$out/lib" "${binaries[@]}" "${helpers[@]}" "${bench_tools[@]}"

cat >"$out/README" <<'EOF'
lightly-train-c, relocatable bundle (make bundle)

bin/lightly-train-c finds its own libraries in lib/. CUDA's libraries (the
runtime, cuDNN 9, cuBLAS, NCCL, of the CUDA major version this was built
with) must be on LD_LIBRARY_PATH. With a pip-installed PyTorch for the same
CUDA major version:

    NV=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])')
    export LD_LIBRARY_PATH=$(ls -d "$NV"/*/lib | paste -sd:):$LD_LIBRARY_PATH
    bin/lightly-train-c train --data ./images --out out/run1

./run-gpu-tests.sh sets LD_LIBRARY_PATH that way and runs the GPU checks
(every op against the CPU reference, ResNet-18/50 against the PyTorch
fixtures, a short train + embed + export on the GPU, NCCL on one GPU).
./bench-gpu.sh runs the GPU benchmark next to the same recipes in PyTorch
(needs torch and torchvision in python3; see docs/performance.md), in four
sections that take longer together than a 10-minute slot, so one at a time:
BENCH_GPU_SECTIONS=step (SimCLR / DINO steps on random batches: ours,
PyTorch eager and torch.compile), train (the same end to end on JPEGs),
"teacher distillation" (ViT-S/14 and ViT-B/14 teacher forwards and
distillation steps).
./profile-gpu.sh prints where one SimCLR ResNet-50 step spends its GPU
time, kernel by kernel, ours (Nsight Compute, ncu) next to PyTorch's
(torch.profiler).
EOF
# One compressed file as well (about a sixth of the folder): what a copy to
# the GPU node carries when the transfer is limited. BUNDLE_TARBALL=0 leaves
# it out (make first-light packs the folder its own way).
if [ "${BUNDLE_TARBALL:-1}" = 1 ]; then
    tar -C "$(dirname "$out")" -cf - "$(basename "$out")" | xz -T0 -6 >"$out.tar.xz"
    echo "bundle: $out ($(du -sh "$out" | cut -f1)): $(ls "$out/lib" | wc -l) libraries; $out.tar.xz ($(du -sh "$out.tar.xz" | cut -f1))"
else
    echo "bundle: $out ($(du -sh "$out" | cut -f1)): $(ls "$out/lib" | wc -l) libraries"
fi
