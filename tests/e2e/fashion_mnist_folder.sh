#!/usr/bin/env bash
# End-to-end test of tools/fashion_mnist_folder: bad usage and a missing
# dataset fail with a clear message; 20 images per class of the test split
# become 200 PNG files in 10 class folders that our scan and decoder read.
# Skipped (exit 0) when the dataset package is absent (`make deps` installs it).
set -u
source "$(dirname "$0")/lib.bash"
e2e_init fmnist
tool="$build/tools/fashion_mnist_folder"
source_dir=/usr/share/datasets/fashion-mnist

[ -x "$tool" ] || { echo "FAIL: $tool is not built (make tools)"; exit 1; }

expect 2 "--out is required" -- "$tool"
expect 2 "--split: expected train or test, got 'val'" -- "$tool" --out "$work/x" --split val
expect 2 "--per-class: expected an integer" -- "$tool" --out "$work/x" --per-class -1
expect 2 "apt-get install dataset-fashion-mnist" -- "$tool" --out "$work/x" --source "$work/missing"
# A file that is not IDX: the magic number is checked.
mkdir -p "$work/bad"
printf 'not an idx file at all' | gzip >"$work/bad/t10k-images-idx3-ubyte.gz"
printf 'not an idx file at all' | gzip >"$work/bad/t10k-labels-idx1-ubyte.gz"
expect 2 "not an IDX file" -- "$tool" --out "$work/x" --source "$work/bad" --split test

if [ ! -f "$source_dir/t10k-images-idx3-ubyte.gz" ]; then
  echo "skipped: dataset-fashion-mnist is not installed (make deps installs it)"
  [ "$failures" -eq 0 ] || exit 1
  exit 0
fi

out=$("$tool" --out "$work/fmnist" --split test --per-class 20 2>&1)
status=$?
[ "$status" -eq 0 ] || fail "conversion exited $status: $out"
printf '%s\n' "$out" | grep -q "wrote 200 images (28 x 28 grey PNG) of the test split" ||
  fail "conversion summary: $out"
folders=$(find "$work/fmnist" -mindepth 1 -maxdepth 1 -type d | wc -l)
[ "$folders" -eq 10 ] || fail "expected 10 class folders, found $folders"
for class in t-shirt_top trouser pullover dress coat sandal shirt sneaker bag ankle_boot; do
  count=$(find "$work/fmnist/$class" -name 'test_*.png' 2>/dev/null | wc -l)
  [ "$count" -eq 20 ] || fail "class $class: expected 20 files, found $count"
done
# The first test image is an ankle boot (label 9), kept under its file index.
[ -f "$work/fmnist/ankle_boot/test_00000.png" ] || fail "missing ankle_boot/test_00000.png"

# Our scan finds all 200 and our decoder reads them (no skipped files).
out=$("$bin" bench-data --data "$work/fmnist" --batch-size 8 --num-workers 1 --image-size 32 \
  --steps 2 --warmup-steps 0 2>&1)
status=$?
[ "$status" -eq 0 ] || fail "bench-data exited $status: $out"
printf '%s\n' "$out" | grep -q "dataset: 200 images" || fail "bench-data did not list 200 images: $out"
if printf '%s\n' "$out" | grep -q "warning: skipping"; then fail "bench-data skipped files: $out"; fi

e2e_finish
