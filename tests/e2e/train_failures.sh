#!/usr/bin/env bash
# End-to-end tests of the failure policy (docs/training.md, "Failures"):
# nothing ends with status 0 and a wrong or stale result, nothing hangs, one
# rule for exit codes. Divergence (NaN gradients or weights, injected with
# LTC_FAULT) stops the run naming the step and keeps the last checkpoint;
# non-finite, damaged, out-of-range or non-regular input files are refused
# in one line; every output path is checked before training; a write
# failure's error comes last; a run killed before its first checkpoint
# points to --overwrite and its leftovers are removed; train, embed and
# bench-data skip the same damaged images for the same reasons, whatever
# came before them.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init failures
export OMP_WAIT_POLICY=PASSIVE  # see train.sh

images="$work/images"
"$build/tests/e2e/make_images" "$images" 48 || fail "make_images"
# Left out by the scan, and said so in train.log (checked on the first run).
printf '\377\330 a macOS resource fork' >"$images/._photo.jpg"
ln -s /nonexistent "$images/dangling.jpg"
plain=(--data "$images" --image-size 32 --num-workers 1 --threads 2 --batch-size 8)
common=("${plain[@]}" --method simclr --method-arg hidden_dim=64 --method-arg output_dim=32)

# One finished run (12 steps, checkpoints after steps 6 and 12) to start from.
"$bin" train "${common[@]}" --out "$work/good" --max-steps 12 >"$work/good.log" 2>&1 ||
  fail "reference run: $(tail -n 3 "$work/good.log")"
good_ckpt="$work/good/checkpoints/last.ckpt"
grep -q -F "; skipped 1 hidden entry (names starting with '.'); 1 entry could not be read: dangling.jpg (No such file or directory)" "$work/good/train.log" ||
  fail "train.log does not report the hidden file and the dangling link: $(grep dataset "$work/good/train.log")"
good_export="$work/good/exported_models/exported_last.safetensors"

# --- 1. Divergence: NaN gradients or weights stop the run (exit 1) at the
# step they appear, naming it; the checkpoint of the last epoch stays.
for fault in nan-gradient@8 nan-weight@9; do
  out="$work/${fault%@*}"
  cp -r "$work/good" "$out"
  before=$(cksum <"$out/checkpoints/last.ckpt")
  output=$(LTC_FAULT=$fault "$bin" train "${common[@]}" --out "$out" --max-steps 12 --overwrite 2>&1)
  status=$?
  [ "$status" -eq 1 ] || fail "$fault: exit $status, expected 1: $output"
  step=${fault#*@}
  last=$(printf '%s\n' "$output" | tail -n 1)
  printf '%s\n' "$last" | grep -q -E "^stopping: the (gradients|weights) of backbone hold NaN or infinite values.* at step $step .*the last good state, untouched, is in .*last.ckpt" ||
    fail "$fault: last line does not name the step and checkpoint: $last"
  # The checkpoint is the one of step 6 this run wrote, finite and loadable.
  "$bin" export --checkpoint "$out/checkpoints/last.ckpt" --out "$out/check.safetensors" >/dev/null 2>&1 ||
    fail "$fault: the checkpoint left behind does not export"
  [ "$(cksum <"$out/checkpoints/last.ckpt")" != "$before" ] ||
    fail "$fault: the run did not write its step-6 checkpoint before diverging"
done

# A crash of the program itself (abort() as step 8 starts, as glibc's heap
# checks end): the signal's own exit status, a report naming it with the
# stack (util/crash_report.h; not under the sanitizers, which report
# instead), and the step-6 checkpoint intact: --resume continues from it.
out="$work/crash"
output=$(LTC_FAULT=abort@8 "$bin" train "${common[@]}" --out "$out" --max-steps 12 2>&1)
status=$?
[ "$status" -eq 134 ] || fail "abort@8: exit $status, expected 134 (SIGABRT): $output"
if ! grep -qa __asan_init "$bin"; then
  printf '%s\n' "$output" | grep -q "^lightly-train-c: crashed with SIGABRT; the stack" ||
    fail "abort@8: no crash report: $output"
  printf '%s\n' "$output" | grep -q "lightly-train-c(+0x[0-9a-f]*)" ||
    fail "abort@8: the report has no stack frame of the program: $output"
fi
output=$("$bin" train "${common[@]}" --out "$out" --max-steps 12 --resume 2>&1) ||
  fail "resume after the crash: $output"
printf '%s\n' "$output" | grep -q "resuming from .* at step 6 of 12" ||
  fail "the crashed run did not leave its step-6 checkpoint: $output"

# --- 2. Files the run reads: a named pipe never blocks (timeout: a hang is a
# failure), a damaged checkpoint says so, NaN weights are refused by name.
mkfifo "$work/pipe.ckpt"
expect 2 "not a regular file \(a named pipe\)" -- timeout 20 "$bin" export --checkpoint "$work/pipe.ckpt" --out "$work/x.safetensors"
expect 2 "not a regular file \(a named pipe\)" -- timeout 20 "$bin" embed --data "$images" --checkpoint "$work/pipe.ckpt" --out "$work/x.npy"
expect 2 "not a regular file \(a named pipe\)" -- timeout 20 "$bin" train "${common[@]}" --out "$work/x" --checkpoint "$work/pipe.ckpt"
expect 2 "not a regular file \(a named pipe\)" -- timeout 20 "$bin" train "${plain[@]}" --out "$work/x" \
  --method distillation --method-arg teacher="$work/pipe.ckpt"
head -c 4096 "$good_ckpt" | tr 'L' 'X' >"$work/damaged.ckpt"
# The same words from every command that reads --checkpoint.
expect 2 "^lightly-train-c train: --checkpoint: .*damaged.ckpt: not a lightly-train-c checkpoint" -- \
  "$bin" train "${common[@]}" --out "$work/x" --checkpoint "$work/damaged.ckpt"
expect 2 "^lightly-train-c export: --checkpoint: .*damaged.ckpt: not a lightly-train-c checkpoint" -- \
  "$bin" export --checkpoint "$work/damaged.ckpt" --out "$work/x.safetensors"
expect 2 "^lightly-train-c embed: --checkpoint: .*damaged.ckpt: not a lightly-train-c checkpoint" -- \
  "$bin" embed --data "$images" --checkpoint "$work/damaged.ckpt" --out "$work/x.npy"
"$build/tests/e2e/edit_checkpoint" "$good_ckpt" "$work/nan.ckpt" --nan backbone.layer2.0.conv1.weight ||
  fail "edit_checkpoint --nan"
nan_message="\"backbone.layer2.0.conv1.weight\" holds 1 non-finite value"
expect 2 "$nan_message" -- "$bin" train "${common[@]}" --out "$work/x" --checkpoint "$work/nan.ckpt"
expect 2 "$nan_message" -- "$bin" export --checkpoint "$work/nan.ckpt" --out "$work/x.safetensors"
expect 2 "$nan_message" -- "$bin" embed --data "$images" --checkpoint "$work/nan.ckpt" --out "$work/x.npy"
expect 2 "$nan_message" -- "$bin" train "${plain[@]}" --out "$work/x" --method distillation \
  --method-arg teacher="$work/nan.ckpt"
# Data changed after it was written (one bit in the middle of the tensors):
# the CRC-32 the checkpoint and the export record refuses them, in one line
# naming the file; --resume neither falls back nor touches the checkpoint.
flip_data_bit() {  # FILE BLOB_OFFSET (16 in a checkpoint, 0 in a .safetensors)
  local header size offset byte
  header=$(od -An -tu8 -j "$2" -N8 "$1" | tr -d ' ')
  size=$(stat -c %s "$1")
  offset=$(((8 + $2 + header + size) / 2))
  byte=$(od -An -tu1 -j "$offset" -N1 "$1" | tr -d ' ')
  printf "\\$(printf %03o $((byte ^ 16)))" | dd of="$1" bs=1 seek="$offset" conv=notrunc status=none
}
damage="the tensor data is damaged \(CRC-32 [0-9a-f]{8} recorded, [0-9a-f]{8} read\): the file changed after it was written; use another copy$"
cp "$good_ckpt" "$work/flipped.ckpt"
cp "$good_export" "$work/flipped.safetensors"
flip_data_bit "$work/flipped.ckpt" 16
flip_data_bit "$work/flipped.safetensors" 0
cmp -s "$good_ckpt" "$work/flipped.ckpt" && fail "flip_data_bit changed nothing"
expect_only 2 "^lightly-train-c export: --checkpoint: $work/flipped.ckpt: $damage" -- \
  "$bin" export --checkpoint "$work/flipped.ckpt" --out "$work/x.safetensors"
expect_only 2 "^lightly-train-c embed: --checkpoint: $work/flipped.safetensors: $damage" -- \
  "$bin" embed --data "$images" --checkpoint "$work/flipped.safetensors" --out "$work/x.npy"
expect_only 2 "^lightly-train-c train: --checkpoint: $work/flipped.safetensors: $damage" -- \
  "$bin" train "${common[@]}" --out "$work/x" --checkpoint "$work/flipped.safetensors"
cp -r "$work/good" "$work/flipped-run"
cp "$work/flipped.ckpt" "$work/flipped-run/checkpoints/last.ckpt"
expect_only 2 "^lightly-train-c train: --resume: $work/flipped-run/checkpoints/last.ckpt: $damage" -- \
  "$bin" train "${common[@]}" --out "$work/flipped-run" --max-steps 12 --resume
cmp -s "$work/flipped.ckpt" "$work/flipped-run/checkpoints/last.ckpt" ||
  fail "--resume changed the damaged checkpoint"
# Metadata changed after it was written: normalize's 0.225 made 0.925 or
# one bit of a digit of it flipped, as an editor would (the header's CRC-32
# refuses them), channels and model rewritten with the CRC-32s recorded
# anew (checked against the weights). Each changed every embedding or was
# ignored, with exit 0.
header_damage="the checkpoint header is damaged \(CRC-32 [0-9a-f]{8} recorded, [0-9a-f]{8} read\): its tensor table or metadata changed after it was written; use another copy$"
edited() {  # NAME EDIT...: $work/NAME.ckpt, the good checkpoint edited
  "$build/tests/e2e/edit_checkpoint" "$good_ckpt" "$work/$1.ckpt" "${@:2}" || fail "edit_checkpoint ${*:2}"
}
edited normalize --raw-meta normalize=0.485,0.456,0.406:0.229,0.224,0.925
edited normalize_bit --flip-meta normalize
edited channels --meta channels=1
edited model --meta model=resnet50
expect_only 2 "^lightly-train-c export: --checkpoint: $work/normalize.ckpt: $header_damage" -- \
  "$bin" export --checkpoint "$work/normalize.ckpt" --out "$work/x.safetensors"
expect_only 2 "^lightly-train-c embed: --checkpoint: $work/normalize_bit.ckpt: $header_damage" -- \
  "$bin" embed --data "$images" --checkpoint "$work/normalize_bit.ckpt" --out "$work/x.npy"
expect_only 2 "^lightly-train-c embed: --checkpoint: $work/channels.ckpt: checkpoint metadata channels=1 disagrees with its weights, whose first layer takes 3 channel\(s\)$" -- \
  "$bin" embed --data "$images" --checkpoint "$work/channels.ckpt" --out "$work/x.npy"
expect_only 2 "^lightly-train-c export: --checkpoint: $work/model.ckpt: checkpoint metadata model=resnet50 disagrees with its weights: resnet50 does not match the file, which holds a resnet18$" -- \
  "$bin" export --checkpoint "$work/model.ckpt" --out "$work/x.safetensors"
[ -e "$work/x.safetensors" ] || [ -e "$work/x.npy" ] && fail "a refused export or embed wrote its --out"
[ -e "$work/x" ] && fail "a refused run created its --out folder"

# --- 3. --resume refuses checkpoints whose counters are out of range, not
# numbers or not what the others make them (6 steps per epoch: epoch 2 at
# step 12; simclr's groups trained in every step), a run on another number
# of ranks, and a non-finite optimizer state, before anything runs.
resume_refused() {  # PATTERN EDIT...
  local pattern=$1
  shift
  rm -rf "$work/edited"
  cp -r "$work/good" "$work/edited"
  "$build/tests/e2e/edit_checkpoint" "$good_ckpt" "$work/edited/checkpoints/last.ckpt" "$@" ||
    fail "edit_checkpoint $*"
  expect 2 "$pattern" -- "$bin" train "${common[@]}" --out "$work/edited" --max-steps 12 --resume
}
resume_refused "train.completed_steps = -3 is outside 0..12" --i64 train.completed_steps=-3
resume_refused "train.completed_steps = 99 is outside 0..12" --i64 train.completed_steps=99
resume_refused "metadata step=\"six\" is not an integer" --meta step=six
resume_refused "metadata epoch=-1 is outside" --meta epoch=-1
resume_refused "metadata epoch=1 disagrees with step 12: expected 2 \(6 steps per epoch\)" --meta epoch=1
resume_refused "optimizer.backbone.step_count = 13, expected 12 " --i64 optimizer.backbone.step_count=13
resume_refused "optimizer.projection_head.step_count = 11, expected 12 " \
  --i64 optimizer.projection_head.step_count=11
# A checkpoint of 2 ranks (4 images each) resumed by one process: the rank
# count is named, not the per-rank batch that follows from it.
resume_refused "the interrupted run has ranks=2, this one 1 " --meta run.ranks=2 --meta run.batch_size=4
resume_refused "optimizer.backbone.0.\*\" do not match the parameters: 1 holding NaN or inf: conv1.weight" \
  --nan optimizer.backbone.0.conv1.weight

# --- 4. Every output path is checked before any work (exit 2, in seconds):
# a file where a folder goes, a folder where a file goes, --out below a file.
mkdir -p "$work/layout1" "$work/layout2/checkpoints/last.ckpt"
: >"$work/layout1/checkpoints"
: >"$work/plain_file"
start=$SECONDS
expect 2 "checkpoints' exists and is not a folder" -- "$bin" train "${common[@]}" --out "$work/layout1" --overwrite
expect 2 "last.ckpt' is a folder" -- "$bin" train "${common[@]}" --out "$work/layout2" --overwrite
for command in "train ${common[*]}" "embed --data $images --checkpoint $good_export" \
               "export --checkpoint $good_ckpt"; do
  expect 2 "plain_file' is not a folder" -- "$bin" $command --out "$work/plain_file/out"
done
[ $((SECONDS - start)) -le 20 ] || fail "the output checks took $((SECONDS - start)) s"
expect 2 "--lr: must be between 0 and 1000, got -0.5" -- "$bin" train "${common[@]}" --out "$work/x" --lr -0.5
expect 2 "--weight-decay: must be between 0 and 10, got -1" -- "$bin" train "${common[@]}" --out "$work/x" --weight-decay -1
"$bin" --help | grep -q "Exit status: 0 done; 2 bad input" || fail "--help lacks the exit statuses"
"$bin" train --help | grep -q "130 / 143" || fail "train --help lacks the signal exit statuses"

# --- 5. A write failure (a file size limit standing in for a full disk):
# exit 1, and the error is the last line, after the summary.
output=$( (ulimit -f 4096; trap '' XFSZ; exec "$bin" train "${common[@]}" --out "$work/full" --max-steps 6) 2>&1)
status=$?
[ "$status" -eq 1 ] || fail "write failure: exit $status, expected 1: $output"
printf '%s\n' "$output" | tail -n 1 | grep -q "^error: could not write the checkpoint: .*File too large" ||
  fail "write failure: the last line is not the error: $(printf '%s\n' "$output" | tail -n 4)"
printf '%s\n' "$output" | grep -q "verdict" || fail "write failure: no summary before the error"
[ -z "$(find "$work/full" -name '*.tmp.*')" ] || fail "write failure left temporary files"
# The export's write failing (the second write, after the checkpoint's) is
# named as the export's.
output=$(LTC_FAULT=fail-write@2 "$bin" train "${common[@]}" --out "$work/noexport" --max-steps 6 2>&1)
[ $? -eq 1 ] || fail "export write failure: expected exit 1: $output"
printf '%s\n' "$output" | tail -n 1 |
  grep -q "^error: could not write the export: .*exported_last.safetensors.*No space left on device" ||
  fail "export write failure: the last line does not name the export: $(printf '%s\n' "$output" | tail -n 2)"
[ -e "$work/noexport/checkpoints/last.ckpt" ] || fail "export write failure: no checkpoint"
# So is the third, the export's torch.save twin (exported_last.pt).
output=$(LTC_FAULT=fail-write@3 "$bin" train "${common[@]}" --out "$work/nopt" --max-steps 6 2>&1)
[ $? -eq 1 ] || fail "export .pt write failure: expected exit 1: $output"
printf '%s\n' "$output" | tail -n 1 |
  grep -q "^error: could not write the export: .*exported_last.pt.*No space left on device" ||
  fail "export .pt write failure: the last line does not name it: $(printf '%s\n' "$output" | tail -n 2)"
[ -z "$(find "$work/nopt" -name '*.tmp.*')" ] || fail "export .pt write failure left temporary files"

# A signal as the command starts (before it parsed its options: the first
# milliseconds) is a stop, not a kill: handled before any work, the run
# stops before its first step and says how to go on. Into a new folder it
# keeps nothing (train.log and the rest it wrote made the same command
# need --overwrite), so the same command then runs; into a used one
# (--overwrite) the folder is left as it is.
output=$(LTC_FAULT=sigterm-at-start "$bin" train "${common[@]}" --out "$work/early-stop" --max-steps 6 2>&1)
[ $? -eq 143 ] || fail "SIGTERM at start: expected exit 143: $output"
printf '%s\n' "$output" | tail -n 1 |
  grep -q "^interrupted (SIGTERM) before step 1: nothing trained; nothing kept (what it wrote in --out is removed): start again with the same command$" ||
  fail "SIGTERM at start: the last line does not say what happened: $output"
[ -e "$work/early-stop" ] && fail "SIGTERM at start: the new --out was left: $(ls -A "$work/early-stop")"
"$bin" train "${common[@]}" --out "$work/early-stop" --max-steps 6 >"$work/again.log" 2>&1 ||
  fail "the same command after a stop at start: $(tail -n 2 "$work/again.log")"
cp -r "$work/good" "$work/early-used"
output=$(LTC_FAULT=sigterm-at-start "$bin" train "${common[@]}" --out "$work/early-used" --max-steps 6 --overwrite 2>&1)
[ $? -eq 143 ] || fail "SIGTERM at start with --overwrite: expected exit 143: $output"
printf '%s\n' "$output" | tail -n 1 |
  grep -q "^interrupted (SIGTERM) before step 1: nothing trained; no checkpoint written: start again with the same command plus --overwrite$" ||
  fail "SIGTERM at start with --overwrite: the last line does not say what happened: $output"
cmp -s "$work/early-used/checkpoints/last.ckpt" "$good_ckpt" ||
  fail "SIGTERM at start with --overwrite: the folder's checkpoint changed"

# --- 6. Killed before the first checkpoint (inside its write): the next run
# points to --overwrite, not --resume; with --overwrite the leftover
# temporary file is removed and said so in train.log (a user's file of the
# same shape stays).
{ LTC_FAULT=kill-before-rename@1 "$bin" train "${common[@]}" --out "$work/early" --max-steps 12 \
  >/dev/null 2>&1; } 2>/dev/null  # no "Killed" from the shell
status=$?
[ "$status" -eq 137 ] || fail "kill-before-rename: exit $status, expected 137"
leftover=$(find "$work/early" -name 'last.ckpt.tmp.*')
[ -n "$leftover" ] || fail "kill-before-rename left no temporary file"
output=$("$bin" train "${common[@]}" --out "$work/early" --max-steps 12 2>&1)
[ $? -eq 2 ] || fail "rerun after an early kill: expected exit 2: $output"
printf '%s\n' "$output" | grep -q "holds no checkpoint to resume from.*pass --overwrite" ||
  fail "rerun after an early kill: no --overwrite hint: $output"
printf '%s\n' "$output" | grep -q -- "--resume" && fail "rerun after an early kill suggests --resume: $output"
expect 2 "no checkpoint to resume from.*pass --overwrite instead" -- \
  "$bin" train "${common[@]}" --out "$work/early" --max-steps 12 --resume
# A user's file shaped like a temporary file of a dead process is not ours.
sh -c 'exit 0' & wait $!
dead=$!
touch "$work/early/checkpoints/notes.txt.tmp.$dead"
"$bin" train "${common[@]}" --out "$work/early" --max-steps 12 --overwrite >/dev/null 2>&1 ||
  fail "--overwrite after an early kill failed"
[ -e "$leftover" ] && fail "the temporary file of the killed run is still there"
[ -e "$work/early/checkpoints/notes.txt.tmp.$dead" ] || fail "train removed a file it did not write"
grep -q "removed 1 temporary file(s) left by a run killed while writing: .*last.ckpt.tmp" \
  "$work/early/train.log" || fail "train.log does not note the removed temporary file"

# --- 7. train, embed and bench-data skip the same damaged images, for the
# same reasons, whatever was decoded before them (another seed, another
# order): also when training crops never reach the damage (small crops,
# damage in the last rows): the first read of a file in a run checks all of
# it; and a JPEG without its quantization tables is unreadable after any
# other JPEG (a worker's decoder keeps no tables across files).
"$build/tests/e2e/make_images" "$work/damaged" 14 --damaged 2 --no-dqt 2 ||
  fail "make_images --damaged --no-dqt"
# 20 files, batch 4: one epoch reads every file once.
for seed in 0 7; do
  "$bin" train --data "$work/damaged" --image-size 32 --num-workers 1 --threads 2 --batch-size 4 \
    --method simclr --method-arg hidden_dim=64 --method-arg output_dim=32 --out "$work/damaged-run$seed" \
    --epochs 1 --seed $seed --transform scale_max=0.1 >"$work/damaged-train$seed.log" 2>&1 ||
    fail "train on damaged images (seed $seed)"
done
"$bin" embed --data "$work/damaged" --checkpoint "$work/damaged-run0/exported_models/exported_last.safetensors" \
  --image-size 32 --out "$work/damaged.npy" >"$work/damaged-embed.log" 2>&1 || fail "embed on damaged images"
"$bin" bench-data --data "$work/damaged" --image-size 32 --num-workers 1 --batch-size 4 \
  --steps 3 --warmup-steps 2 >"$work/damaged-bench.log" 2>&1 || fail "bench-data on damaged images"
skipped() { grep -o "skipping '.*" "$1" | LC_ALL=C sort; }
[ "$(skipped "$work/damaged-train0.log" | wc -l)" -eq 6 ] ||
  fail "train skipped $(skipped "$work/damaged-train0.log" | wc -l) files, expected the 6 damaged: $(skipped "$work/damaged-train0.log")"
grep -q "nodqt0.jpg': corrupt data: Quantization table 0x00 was not defined" "$work/damaged-embed.log" ||
  fail "embed does not skip a JPEG without DQT for its reason: $(skipped "$work/damaged-embed.log")"
for log in damaged-train7 damaged-embed damaged-bench; do
  [ "$(skipped "$work/damaged-train0.log")" = "$(skipped "$work/$log.log")" ] ||
    fail "train (seed 0) and $log skip differently:"$'\n'"$(skipped "$work/damaged-train0.log")"$'\n'"--"$'\n'"$(skipped "$work/$log.log")"
done

# A file output named with a trailing '/' (a folder that does not exist):
# refused before any work (it failed after the embeddings were computed).
expect 2 "ends with '/': a file name is needed" -- "$bin" export --checkpoint "$good_ckpt" --out "$work/expdir/"
expect 2 "ends with '/': a file name is needed" -- "$bin" embed --data "$images" --checkpoint "$good_export" \
  --image-size 32 --out "$work/embdir/"

# --- 8. A reader of the output that goes away does not kill the run: it
# ends as it would have, with its checkpoint (before: SIGPIPE, status 141,
# no checkpoint).
"$bin" train "${common[@]}" --out "$work/no-reader" --max-steps 2 2>&1 | true
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] || fail "train whose output reader left: exit $status, expected 0"
[ -s "$work/no-reader/checkpoints/last.ckpt" ] || fail "train whose output reader left wrote no checkpoint"

e2e_finish
