#!/usr/bin/env bash
# End-to-end tests of the output paths a hostile user can hand the commands
# (docs/training.md, "Failures"): an --out that is a dangling or looping
# symbolic link is bad input (exit 2, one line, before any work), two runs
# never write into one --out at the same time (the second is refused, the
# first's files stay its own), and `embed` never writes its embeddings over
# the model file it reads.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init out_folder
export OMP_WAIT_POLICY=PASSIVE  # see train.sh

images="$work/images"
"$build/tests/e2e/make_images" "$images" 12 >/dev/null || fail "make_images"
# 12 images at batch 8: one step per epoch, so a checkpoint after every step.
common=(--data "$images" --image-size 32 --num-workers 1 --threads 1 --batch-size 8
  --method simclr --method-arg hidden_dim=64 --method-arg output_dim=32)

# expect_refused NAME PATTERN -- command...: exit 2, one line matching PATTERN.
expect_refused() {
  local name=$1 pattern=$2 output status
  shift 3
  output=$("$@" 2>&1)
  status=$?
  [ "$status" -eq 2 ] || fail "$name: exit $status, expected 2: $output"
  [ "$(printf '%s\n' "$output" | wc -l)" -eq 1 ] || fail "$name: more than one line: $output"
  printf '%s\n' "$output" | grep -q -E -- "$pattern" || fail "$name: output lacks /$pattern/: $output"
}

# --- 1. Symbolic links that lead nowhere: refused naming the link, exit 2,
# before the data is read (before: "a file is in the way", exit 1, after
# the work for embed).
ln -s "$work/missing-target" "$work/dangling"
ln -s "$work/loop-b" "$work/loop-a"
ln -s "$work/loop-a" "$work/loop-b"
expect_refused "train --out dangling" "--out: .*'$work/dangling' is a symbolic link to a missing target" -- \
  "$bin" train "${common[@]}" --out "$work/dangling" --max-steps 1
expect_refused "train --out dangling/sub" "--out: .*'$work/dangling' is a symbolic link to a missing target" -- \
  "$bin" train "${common[@]}" --out "$work/dangling/sub" --max-steps 1
expect_refused "train --out loop" "--out: .*'$work/loop-a' is a symbolic link that cannot be followed" -- \
  "$bin" train "${common[@]}" --out "$work/loop-a" --max-steps 1
[ -e "$work/missing-target" ] && fail "a refused run created the link's target"
# Inside --out: a dangling 'checkpoints' link.
mkdir "$work/inner"
ln -s "$work/missing-target" "$work/inner/checkpoints"
expect_refused "train --out with a dangling checkpoints link" "'$work/inner/checkpoints' is a symbolic link to a missing target" -- \
  "$bin" train "${common[@]}" --out "$work/inner" --overwrite --max-steps 1

# --- 2. Two runs, one --out. A runs; B, started while A trains (with
# --overwrite or --resume), and B started at the same instant as A are
# refused (exit 2): before, both ran and interleaved metrics.jsonl lines.
set -m  # background jobs keep SIGINT (a script's would ignore it)
"$bin" train "${common[@]}" --out "$work/a" --max-steps 200 >"$work/a.log" 2>&1 &
a_pid=$!
for _ in $(seq 600); do
  [ -s "$work/a/checkpoints/last.ckpt" ] && [ -s "$work/a/metrics.jsonl" ] && break
  kill -0 "$a_pid" 2>/dev/null || break
  sleep 0.05
done
a_events=$(ls "$work/a"/events.out.tfevents.* 2>/dev/null)
[ -n "$a_events" ] || fail "run A wrote no event file: $(tail -n 3 "$work/a.log")"
expect_refused "B without flags while A runs" "--out: '$work/a' is in use by another run" -- \
  timeout 60 "$bin" train "${common[@]}" --out "$work/a" --max-steps 200
expect_refused "B --overwrite while A runs" "--out: '$work/a' is in use by another run" -- \
  timeout 60 "$bin" train "${common[@]}" --out "$work/a" --max-steps 200 --overwrite
expect_refused "B --resume while A runs" "--out: '$work/a' is in use by another run" -- \
  timeout 60 "$bin" train "${common[@]}" --out "$work/a" --max-steps 200 --resume
[ "$(ls "$work/a"/events.out.tfevents.*)" = "$a_events" ] ||
  fail "a refused run touched A's event files: $(ls "$work/a")"
kill -INT "$a_pid"
wait "$a_pid"
status=$?
[ "$status" -eq 130 ] || fail "run A: exit $status after SIGINT, expected 130: $(tail -n 3 "$work/a.log")"
"$build/tests/e2e/read_events" "$a_events" train_loss >/dev/null ||
  fail "run A's event file does not read back"
# Every metrics.jsonl line is one whole record of one run.
if grep -v -E '^\{"step": [0-9]+, [^{]*\}$' "$work/a/metrics.jsonl" | grep -q .; then
  fail "metrics.jsonl holds mixed lines: $(grep -v -E '^\{"step": [0-9]+, [^{]*\}$' "$work/a/metrics.jsonl" | head -n 2)"
fi

# A's --out deleted and made again by run B while A trains: A stops at its
# next checkpoint (exit 1, naming the folder) instead of writing over B's
# (before: its checkpoint replaced B's last.ckpt).
"$bin" train "${common[@]}" --out "$work/gone" --max-steps 100000 >"$work/gone.log" 2>&1 &
gone_pid=$!
for _ in $(seq 600); do
  [ -s "$work/gone/checkpoints/last.ckpt" ] && break
  kill -0 "$gone_pid" 2>/dev/null || break
  sleep 0.05
done
rm -rf "$work/gone"
"$bin" train "${common[@]}" --out "$work/gone" --max-steps 1 --seed 9 >"$work/gone-b.log" 2>&1 ||
  fail "run B into A's deleted --out: $(tail -n 1 "$work/gone-b.log")"
cp "$work/gone/checkpoints/last.ckpt" "$work/gone-b.ckpt" 2>/dev/null
for _ in $(seq 600); do
  kill -0 "$gone_pid" 2>/dev/null || break
  sleep 0.05
done
if kill -0 "$gone_pid" 2>/dev/null; then
  kill -9 "$gone_pid"
  fail "run A went on for 30 s after its --out was replaced"
fi
wait "$gone_pid"
status=$?
[ "$status" -eq 1 ] || fail "run A with its --out replaced: exit $status, expected 1: $(tail -n 2 "$work/gone.log")"
grep -q -- "--out $work/gone was removed or replaced while this run wrote into it" "$work/gone.log" ||
  fail "run A with its --out replaced: no message naming it: $(grep -i -E "error|could not|cannot" "$work/gone.log" | head -n 3)"
cmp -s "$work/gone/checkpoints/last.ckpt" "$work/gone-b.ckpt" ||
  fail "run A wrote over run B's checkpoint"

# Started together into a new folder: one trains, the other is refused.
"$bin" train "${common[@]}" --out "$work/both" --max-steps 3 >"$work/both1.log" 2>&1 &
one=$!
"$bin" train "${common[@]}" --out "$work/both" --max-steps 3 >"$work/both2.log" 2>&1 &
two=$!
wait "$one"
one_status=$?
wait "$two"
two_status=$?
statuses=$(printf '%s\n' "$one_status" "$two_status" | sort | tr '\n' ' ')
[ "$statuses" = "0 2 " ] ||
  fail "two runs started together into one --out: exits $statuses, expected one 0 and one 2: $(tail -n 1 "$work/both1.log") / $(tail -n 1 "$work/both2.log")"
[ "$(grep -c . "$work/both/metrics.jsonl")" -eq 3 ] ||
  fail "two runs started together: metrics.jsonl has $(grep -c . "$work/both/metrics.jsonl") lines, expected 3"
set +m

# --- 3. embed --out naming the model it reads, even by another path or a
# hard link, is refused with --overwrite too: the checkpoint stays.
checkpoint="$work/both/checkpoints/last.ckpt"
before=$(cksum <"$checkpoint")
ln "$checkpoint" "$work/hard-link.ckpt"
for out in "$checkpoint" "$work/both/exported_models/../checkpoints/last.ckpt" "$work/hard-link.ckpt"; do
  expect_refused "embed --out $out" "--out .* is the --checkpoint file" -- \
    "$bin" embed --data "$images" --checkpoint "$checkpoint" --image-size 32 --out "$out" --overwrite
done
[ "$(cksum <"$checkpoint")" = "$before" ] || fail "embed wrote over its --checkpoint"

e2e_finish
