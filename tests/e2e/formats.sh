#!/usr/bin/env bash
# End-to-end tests of the image formats through the commands: a folder of
# every fixture in tests/fixtures/formats (TIFF, GIF, BMP, PNM, TGA, AVIF, HEIC,
# DICOM, JPEG/PNG/WebP with EXIF orientation) and files no decoder takes.
# bench-data reads them all, skips the refused ones (one warning each, with
# the reason) and prints a line per format; embed writes a row per readable
# file, and --exif-orientation false changes exactly the rows of files whose
# EXIF orientation is not 1 (a TIFF's own orientation tag holds either way);
# a short train run skips the same files; --max-pixels refuses large images
# in every command.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init formats
export OMP_WAIT_POLICY=PASSIVE  # see train.sh

fixtures=tests/fixtures/formats
images="$work/images"
mkdir -p "$images"
# Every fixture file once (a file has a "noexif" line besides its "ref" one).
awk '$1 !~ /^#/ { print $1 }' "$fixtures/manifest.txt" | sort -u | while read -r name; do
  cp "$fixtures/$name" "$images/" || exit 1
done || fail "copying the fixtures"
refused=$(awk '$2 == "error"' "$fixtures/manifest.txt" | wc -l)
total=$(find "$images" -type f | wc -l)
readable=$((total - refused))
[ "$refused" -ge 3 ] && [ "$readable" -ge 60 ] || fail "fixtures: $readable readable, $refused refused"

# --- bench-data: every format read, the refused ones skipped with reasons
# (one batch is the whole folder: every file is read).
out=$("$bin" bench-data --data "$images" --batch-size "$total" --steps 2 --warmup-steps 1 \
  --image-size 48 --num-workers 2 2>&1)
[ $? -eq 0 ] || fail "bench-data exited non-zero: $out"
for pattern in "skipped files: $refused " "5 bands without colour meaning" "DICOM with 2 frames" \
               "transfer syntax JPEG 2000" \
               "format (JPEG|PNG|WebP|TIFF|GIF|BMP|PNM|TGA|HEIF|DICOM): [0-9]+ images, [0-9.]+ images/s per worker"; do
  printf '%s\n' "$out" | grep -q -E -- "$pattern" || fail "bench-data output lacks /$pattern/: $out"
done
for format in TIFF GIF BMP PNM TGA HEIF DICOM; do
  printf '%s\n' "$out" | grep -q "^format $format: " || fail "bench-data has no line for $format"
done

# --- embed, with EXIF orientation applied (default) and not.
"$build/tools/resnet_tool" save --model 18 --seed 5 --out "$work/r18.safetensors" >/dev/null ||
  fail "resnet_tool save"
common=(--data "$images" --checkpoint "$work/r18.safetensors" --image-size 32 --batch-size 8
        --num-workers 2)
out=$("$bin" embed "${common[@]}" --out "$work/on.csv" 2>&1)
[ $? -eq 0 ] || fail "embed exited non-zero: $out"
printf '%s\n' "$out" | grep -q "skipped files: $refused " || fail "embed skipped other files: $out"
[ "$(tail -n +2 "$work/on.csv" | wc -l)" -eq "$readable" ] || fail "embed rows != $readable"
"$bin" embed "${common[@]}" --exif-orientation false --out "$work/off.csv" >/dev/null 2>&1 ||
  fail "embed --exif-orientation false"
row() { grep "^$2," "$1" | cut -d, -f2-; }
for name in orientation1.jpg rgb8_orientation6.tif rgb8_raw.tif mono2_8bit.dcm rgb.avif; do
  [ "$(row "$work/on.csv" "$name")" = "$(row "$work/off.csv" "$name")" ] ||
    fail "$name: its row changed with --exif-orientation false"
done
for name in orientation3.jpg orientation6.jpg orientation8.jpg orientation5.png orientation8.webp; do
  [ -n "$(row "$work/on.csv" "$name")" ] || fail "$name: no row"
  [ "$(row "$work/on.csv" "$name")" != "$(row "$work/off.csv" "$name")" ] ||
    fail "$name: --exif-orientation false did not change its row"
done
expect 2 "exif-orientation" -- "$bin" embed "${common[@]}" --exif-orientation sideways --out "$work/x.csv"

# --- --max-pixels: the fewest pixels any fixture decodes to is 6 (a 24 x 16
# JPEG at 1/8 scale; 300 let JPEGs at reduced scale and the small GIFs
# through, and the run failed only while random substitution missed them):
# 5 refuses every image.
expect 1 "no readable image|image too large" -- "$bin" bench-data --data "$images" --batch-size 4 \
  --steps 1 --image-size 32 --num-workers 1 --max-pixels 5

# --- a short training run over every format skips the same files.
out=$("$bin" train --data "$images" --method simclr --out "$work/run" --image-size 32 --batch-size 8 \
  --num-workers 2 --threads 2 --max-steps 2 --method-arg hidden_dim=32 \
  --method-arg output_dim=16 --exif-orientation false --max-pixels 100000 2>&1)
[ $? -eq 0 ] || fail "train exited non-zero: $(printf '%s\n' "$out" | tail -n 5)"
expect 2 "max-pixels" -- "$bin" train --data "$images" --out "$work/bad" --max-pixels 0

e2e_finish
