#!/usr/bin/env bash
# Resume equivalence of `train`: a run killed with SIGKILL at several points
# and continued with --resume each time must end as the run that was never
# interrupted: the same train_loss and kNN value at every step, logged once
# per step in metrics.jsonl and in the TensorBoard events (the tail after a
# checkpoint is dropped on resume), byte-identical checkpoint and export,
# and no temporary file left. The kill points: at a random moment after a
# checkpoint, inside a checkpoint write (LTC_FAULT=kill-before-rename, its
# temporary file left behind), and between the final checkpoint and the
# final export (LTC_FAULT=kill-before-export: the resume of the complete run
# rewrites the stale export and runs the missing final kNN evaluation).
# SimCLR (optimizer state, lr schedule, data position, kNN) and DINO (EMA
# teacher, centre, momentum/temperature schedules, the frozen last layer
# thawing mid-run), and DINO on a RoPE ViT (per-batch RoPE rescale draws of
# the student and the EMA teacher).
set -u
source "$(dirname "$0")/lib.bash"
e2e_init resume
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=PASSIVE  # see train.sh: no spinning threads on a loaded machine

images="$work/images"
"$build/tests/e2e/make_images" "$images" 48 --corrupt 2 || fail "make_images"

# "STEP VALUE" per logged value of TAG in metrics.jsonl, in file order.
metric() {
  sed -n "s|^{\"step\": \([0-9]*\),.*\"$2\": \([^,}]*\).*|\1 \2|p" "$1"
}
# The same from every event file of a run folder, in step order.
events() {
  local file
  for file in "$1"/events.out.tfevents.*; do "$build/tests/e2e/read_events" "$file" "$2"; done |
    sort -n -s -k1,1
}

# killed NAME [ENV] -- train args...: a run of B that must die of SIGKILL.
killed() {
  local name=$1 fault=$2
  shift 3
  { env $fault "$bin" train "$@" >"$work/$name.log" 2>&1; } 2>/dev/null
  local status=$?
  [ "$status" -eq 137 ] || fail "$name: expected SIGKILL (137), got $status: $(tail -n 3 "$work/$name.log")"
}

# killed_randomly NAME OUT -- train args...: B resumed, then killed at a
# random moment once it has logged 1 to 3 steps after its checkpoint.
killed_randomly() {
  local name=$1 out=$2
  shift 3
  local log="$work/$name.log"
  "$bin" train "$@" >"$log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  local target=$((1 + RANDOM % 3)) resumed="" last
  for _ in $(seq 1200); do
    kill -0 "$pid" 2>/dev/null || break
    resumed=$(sed -n 's/.*resuming from .* at step \([0-9]*\) of.*/\1/p' "$log")
    last=$(tail -n 1 "$out/metrics.jsonl" 2>/dev/null | sed -n 's/^{"step": \([0-9]*\),.*/\1/p')
    [ -n "$resumed" ] && [ "${last:-0}" -ge $((resumed + target)) ] && break
    sleep 0.05
  done
  sleep "0.$((RANDOM % 3))$((RANDOM % 10))"
  kill -9 "$pid" 2>/dev/null
  { wait "$pid"; } 2>/dev/null
  local status=$?
  [ "$status" -eq 137 ] || fail "$name: was not killed (exit $status, finished too early?): $(tail -n 3 "$log")"
  echo "$name: resumed at step ${resumed:-?}, killed after logging step" \
    "$(tail -n 1 "$out/metrics.jsonl" | sed -n 's/^{"step": \([0-9]*\),.*/\1/p')"
}

# compare NAME STEPS A B [KNN_TAG]: B's outputs equal A's.
compare() {
  local name=$1 steps=$2 a=$3 b=$4 knn_tag=${5:-} tag
  for tag in train_loss $knn_tag; do
    [ -n "$(metric "$a/metrics.jsonl" "$tag")" ] || fail "$name: run A logged no $tag"
    [ "$(metric "$b/metrics.jsonl" "$tag")" = "$(metric "$a/metrics.jsonl" "$tag")" ] ||
      fail "$name: metrics.jsonl $tag differs:"$'\n'"A:"$'\n'"$(metric "$a/metrics.jsonl" "$tag")"$'\n'"B:"$'\n'"$(metric "$b/metrics.jsonl" "$tag")"
    [ "$(events "$b" "$tag")" = "$(events "$a" "$tag")" ] ||
      fail "$name: events $tag differ:"$'\n'"A:"$'\n'"$(events "$a" "$tag")"$'\n'"B:"$'\n'"$(events "$b" "$tag")"
  done
  [ "$(metric "$a/metrics.jsonl" train_loss | wc -l)" -eq "$steps" ] ||
    fail "$name: run A logged $(metric "$a/metrics.jsonl" train_loss | wc -l) steps, expected $steps"
  cmp -s "$a/exported_models/exported_last.safetensors" "$b/exported_models/exported_last.safetensors" ||
    fail "$name: exported_last.safetensors of A and B differ"
  cmp -s "$a/checkpoints/last.ckpt" "$b/checkpoints/last.ckpt" ||
    fail "$name: checkpoints/last.ckpt of A and B differ"
  local leftovers
  leftovers=$(find "$b" -name '*.tmp.*')
  [ -z "$leftovers" ] || fail "$name: temporary files left: $leftovers"
}

base=(--data "$images" --image-size 32 --batch-size 8 --num-workers 2 --threads 2 --log-every 1
      --method-arg hidden_dim=64 --method-arg output_dim=32)

# SimCLR: 3 epochs x 6 steps; checkpoints after steps 6, 12, 18; the atomic
# writes of a fresh run: checkpoint 6, export 6 (.safetensors, .pt),
# checkpoint 12 (the 4th), ...
simclr=("${base[@]}" --method simclr --epochs 3 --seed 7 --knn-data "$images")
a="$work/simclr-a" b="$work/simclr-b"
"$bin" train --out "$a" "${simclr[@]}" >"$work/simclr-a.log" 2>&1 || fail "simclr: run A: $(tail -n 3 "$work/simclr-a.log")"
killed simclr-b1 LTC_FAULT=kill-before-rename@4 -- --out "$b" "${simclr[@]}"
[ -n "$(find "$b/checkpoints" -name 'last.ckpt.tmp.*')" ] || fail "simclr: no temporary file after a kill inside the write"
killed_randomly simclr-b2 "$b" -- --out "$b" "${simclr[@]}" --resume
grep -q "resuming from .* at step 6 of 18" "$work/simclr-b2.log" || fail "simclr: B2 did not resume at step 6"
killed simclr-b3 LTC_FAULT=kill-before-export@18 -- --out "$b" "${simclr[@]}" --resume
output=$("$bin" train --out "$b" "${simclr[@]}" --resume 2>&1) || fail "simclr: the last resume failed: $output"
printf '%s\n' "$output" | grep -q "already complete (step 18 of 18): .*exported_last.safetensors written again from its checkpoint, and its final kNN evaluation run" ||
  fail "simclr: the resume of the complete run does not say what it did: $output"
compare simclr 18 "$a" "$b" knn/top1

# DINO: 2 epochs x 6 steps; the teacher temperature warms up over 8 steps and
# the last layer thaws after 4, so B resumes in the middle of both.
dino=("${base[@]}" --method dino --epochs 2 --seed 11 --local-image-size 16 --local-views 2
      --method-arg bottleneck_dim=16 --method-arg warmup_teacher_temp_steps=8
      --method-arg freeze_last_layer_steps=4)
a="$work/dino-a" b="$work/dino-b"
"$bin" train --out "$a" "${dino[@]}" >"$work/dino-a.log" 2>&1 || fail "dino: run A: $(tail -n 3 "$work/dino-a.log")"
killed dino-b1 LTC_FAULT=kill-before-rename@2 -- --out "$b" "${dino[@]}"  # the step-6 export
killed_randomly dino-b2 "$b" -- --out "$b" "${dino[@]}" --resume
killed dino-b3 LTC_FAULT=kill-before-export@12 -- --out "$b" "${dino[@]}" --resume
output=$("$bin" train --out "$b" "${dino[@]}" --resume 2>&1) || fail "dino: the last resume failed: $output"
printf '%s\n' "$output" | grep -q "already complete (step 12 of 12)" ||
  fail "dino: the resume of the complete run does not say so: $output"
compare dino 12 "$a" "$b"

# DINO on a ViT with DINOv3's RoPE: the student's and the EMA teacher's
# training forwards rescale the coordinates, drawn per batch (keyed by its
# index), so the resumed run draws what run A did (until 2026-11-28 the
# teacher counted its forwards from the process start and B differed).
dino_rope=(--data "$images" --image-size 32 --batch-size 8 --num-workers 2 --threads 2 --log-every 1
           --model dinov3/vitt16-notpretrained --method dino --epochs 2 --seed 5 --local-image-size 16
           --local-views 2 --method-arg hidden_dim=64 --method-arg output_dim=32
           --method-arg bottleneck_dim=16)
a="$work/dino-rope-a" b="$work/dino-rope-b"
"$bin" train --out "$a" "${dino_rope[@]}" >"$work/dino-rope-a.log" 2>&1 ||
  fail "dino-rope: run A: $(tail -n 3 "$work/dino-rope-a.log")"
killed dino-rope-b1 LTC_FAULT=kill-before-rename@2 -- --out "$b" "${dino_rope[@]}"
"$bin" train --out "$b" "${dino_rope[@]}" --resume >"$work/dino-rope-b2.log" 2>&1 ||
  fail "dino-rope: the resume failed: $(tail -n 3 "$work/dino-rope-b2.log")"
grep -q "resuming from .* at step 6 of 12" "$work/dino-rope-b2.log" ||
  fail "dino-rope: B did not resume at step 6: $(grep -i resum "$work/dino-rope-b2.log")"
compare dino-rope 12 "$a" "$b"

e2e_finish
