#!/usr/bin/env bash
# A crash inside a decoder library skips the file, never the run
# (docs/input-pipeline.md, "Decoder processes"), in a folder of 24 images:
# - the two fuzzed files that crashed the program (issue 33): a HEIF grid
#   listed among its own tiles (libheif 1.15 recursed until the stack ran
#   out) and a 16-bit PGM taken for a TGA (stb_image read past its buffer).
#   bench-data, embed and train skip both, each named once with the reason
#   of the check made before the library (their crashes would read
#   "decoder crashed"), and count them;
# - the next unknown bug, injected: LTC_FAULT=decoder-crash@I makes the
#   decoder process die of SIGSEGV on image I (scan order). bench-data,
#   embed (its row left out) and train name that file once, count it as
#   skipped and finish; so do train and embed on 2 MPI ranks, where each
#   rank names the crashed files it read.
set -u
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/mpi.bash"
e2e_init decoder_crashes
mpi_require
export OMP_WAIT_POLICY=PASSIVE  # see train.sh

images="$work/images"
"$build/tests/e2e/make_images" "$images" 24 >/dev/null || fail "make_images"
cp tests/fixtures/fuzz_findings/heif_grid_of_itself.heic \
  tests/fixtures/fuzz_findings/pgm16_taken_for_tga.tga "$images/" || fail "copying the files"
"$build/tools/resnet_tool" save --model 18 --seed 5 --out "$work/r18.safetensors" >/dev/null ||
  fail "resnet_tool save"
# The dataset in scan order (bytewise order of the relative paths).
mapfile -t files < <(cd "$images" && find . -type f ! -name '*.txt' | sed 's|^\./||' | LC_ALL=C sort)
[ "${#files[@]}" -eq 26 ] || fail "expected 26 files, found ${#files[@]}"

heif="skipping '$images/heif_grid_of_itself.heic': corrupt data: HEIF: the 'dimg' references of item 2 (417 items) do not match their box's size (14 bytes)"
tga="skipping '$images/pgm16_taken_for_tga.tga': unsupported format: unknown magic bytes"
crash() { printf "skipping '%s': decoder crashed: its process died of SIGSEGV (signal 11) on this file" "$images/${files[$1]}"; }

# expect_once NAME OUTPUT LINE...: each LINE (a fixed string) in exactly one
# line of OUTPUT.
expect_once() {
  local name=$1 output=$2 line count
  shift 2
  for line in "$@"; do
    count=$(printf '%s\n' "$output" | grep -c -F -- "$line")
    [ "$count" -eq 1 ] || fail "$name: '$line' printed $count times: $output"
  done
}

embed=(embed --data "$images" --checkpoint "$work/r18.safetensors" --image-size 32 --batch-size 4
       --num-workers 2)
train=(train --data "$images" --method simclr --image-size 32 --num-workers 2 --threads 1
       --method-arg hidden_dim=32 --method-arg output_dim=16 --seed 3)
bench=(bench-data --data "$images" --image-size 32 --num-workers 2 --steps 2 --warmup-steps 1)

# --- the two files: refused before their libraries see them.
output=$("$bin" "${bench[@]}" --batch-size 26 2>&1) || fail "bench-data exited $?: $output"
expect_once bench-data "$output" "$heif" "$tga" "skipped files: 2 "
output=$("$bin" "${embed[@]}" --out "$work/emb.csv" 2>&1) || fail "embed exited $?: $output"
expect_once embed "$output" "$heif" "$tga" "skipped files: 2 (rows dropped)"
[ "$(tail -n +2 "$work/emb.csv" | wc -l)" -eq 24 ] || fail "embed: not 24 rows"
output=$("$bin" "${train[@]}" --out "$work/train" --batch-size 13 --max-steps 2 2>&1) ||
  fail "train exited $?: $(printf '%s\n' "$output" | tail -n 5)"
expect_once train "$output" "$heif" "$tga"
printf '%s\n' "$output" | grep -q -E "skipped files +2$" || fail "train: not 2 skipped files: $output"

# --- an injected crash on image 6, one process.
output=$(LTC_FAULT=decoder-crash@6 "$bin" "${bench[@]}" --batch-size 26 2>&1) ||
  fail "bench-data with a crash exited $?: $output"
expect_once "bench-data with a crash" "$output" "$(crash 6)" "skipped files: 3 "
output=$(LTC_FAULT=decoder-crash@6 "$bin" "${embed[@]}" --out "$work/crash.csv" 2>&1) ||
  fail "embed with a crash exited $?: $output"
expect_once "embed with a crash" "$output" "$(crash 6)" "skipped files: 3 (rows dropped)"
[ "$(tail -n +2 "$work/crash.csv" | wc -l)" -eq 23 ] || fail "embed with a crash: not 23 rows"
grep -q "^${files[6]}," "$work/crash.csv" && fail "embed with a crash: a row for ${files[6]}"
grep -v "^${files[6]}," "$work/emb.csv" | cmp -s - "$work/crash.csv" ||
  fail "embed with a crash: the other rows changed"
output=$(LTC_FAULT=decoder-crash@6 "$bin" "${train[@]}" --out "$work/crash" --batch-size 13 \
  --max-steps 2 2>&1) || fail "train with a crash exited $?: $(printf '%s\n' "$output" | tail -n 5)"
expect_once "train with a crash" "$output" "$(crash 6)"
printf '%s\n' "$output" | grep -q -E "skipped files +3$" || fail "train with a crash: not 3 skipped: $output"
[ -s "$work/crash/exported_models/exported_last.safetensors" ] || fail "train with a crash: no export"

# --- 2 ranks. embed: rounds of one batch of 4 per rank, so image 1 is rank
# 0's and image 5 rank 1's; the rows are those of one process.
output=$(LTC_FAULT=decoder-crash@1,decoder-crash@5 mpi_run 2 "$bin" "${embed[@]}" \
  --out "$work/ranks.csv" 2>&1) || fail "embed on 2 ranks exited $?: $output"
expect_once "embed on 2 ranks" "$output" "warning: $(crash 1)" "rank 1: warning: $(crash 5)" \
  "skipped files: 4 (rows dropped)"
grep -v -e "^${files[1]}," -e "^${files[5]}," "$work/emb.csv" | cmp -s - "$work/ranks.csv" ||
  fail "embed on 2 ranks: not the rows of one process without images 1 and 5"
# train: 8 of the 26 images crash their decoder; over 2 epochs of 13
# images per rank each rank reads some of them (seed 3): every rank names
# each crashed file it read once, and the run ends with its export.
faults=decoder-crash@0,decoder-crash@3,decoder-crash@7,decoder-crash@10,decoder-crash@12
faults=$faults,decoder-crash@15,decoder-crash@18,decoder-crash@21
output=$(LTC_FAULT=$faults mpi_run 2 "$bin" "${train[@]}" --out "$work/ranks" --batch-size 12 \
  --max-steps 4 2>&1) || fail "train on 2 ranks exited $?: $(printf '%s\n' "$output" | tail -n 5)"
for rank in 0 1; do
  prefix="warning: "
  [ "$rank" -eq 1 ] && prefix="rank 1: warning: "
  lines=$(printf '%s\n' "$output" | grep -F -- "${prefix}skipping '$images/" |
    { [ "$rank" -eq 0 ] && grep -v "^rank " || cat; } | grep -F "decoder crashed")
  [ -n "$lines" ] || fail "train on 2 ranks: rank $rank named no crashed file: $output"
  [ "$(printf '%s\n' "$lines" | sort | uniq -d)" = "" ] ||
    fail "train on 2 ranks: rank $rank named a file twice: $lines"
done
[ -s "$work/ranks/exported_models/exported_last.safetensors" ] || fail "train on 2 ranks: no export"

e2e_finish
