#!/usr/bin/env bash
# End-to-end tests of `train` (with `embed` and `export` on its outputs):
# every method trains a few steps and writes the output layout (with
# LightlyTrain's epoch=E-step=S.ckpt beside last.ckpt); the loss of
# a short SimCLR run goes down; the TensorBoard events (read back with our
# reader, and with tensorboard's when installed) and metrics.jsonl hold the
# logged steps; embed/export of the run agree; bad arguments exit 2; a
# non-finite loss stops the run without touching the checkpoint; SIGTERM and
# SIGINT stop with a checkpoint and --resume finishes the run; an --out
# with a space and a quote is named in the printed hint as a shell reads it. Resume
# equivalence (killed + resumed = uninterrupted) is tests/e2e/train_resume.sh.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init train
# 2 compute threads, and OpenMP threads that sleep instead of spinning while
# waiting: on a loaded 2-core machine spinning threads make a step ~10x slower.
export OMP_WAIT_POLICY=PASSIVE

images="$work/images"
"$build/tests/e2e/make_images" "$images" 48 --corrupt 2 || fail "make_images"
# Small and fast: 32 px views, tiny heads, 6 steps per epoch (50 files / 8).
base=(--image-size 32 --num-workers 1 --threads 2)
common=(--data "$images" --batch-size 8 "${base[@]}")
heads=(--method-arg hidden_dim=64 --method-arg output_dim=32)
dino_args=(--local-image-size 16 --local-views 2 --method-arg bottleneck_dim=16)

# The steps a run of STEPS steps logs with --log-every EVERY, one per line.
expected_steps() {
  local steps=$1 every=$2 s
  for ((s = 0; s < steps; s++)); do
    if ((s % every == 0 || s == steps - 1)); then echo "$s"; fi
  done
}

# train_ok NAME STEPS EVERY EXTRA_TAGS -- train args...: runs train into
# $work/NAME and checks the exit status, the output layout, the events
# (per-tag counts and the augmentation image at step 0) and metrics.jsonl.
# EXTRA_TAGS: the method's scalar tags beyond the common ones, the learning
# rates "lr-<Optimizer>/<group>" (one per parameter group) among them.
train_ok() {
  local name=$1 steps=$2 every=$3 extra_tags=$4
  shift 5
  local out="$work/$name"
  local output
  output=$("$bin" train "${common[@]}" --out "$out" --max-steps "$steps" --log-every "$every" \
    "$@" 2>&1)
  local status=$?
  if [ "$status" -ne 0 ]; then
    fail "$name: train exited $status: $output"
    return
  fi
  for file in checkpoints/last.ckpt exported_models/exported_last.safetensors \
              exported_models/exported_last.pt metrics.jsonl train.log; do
    [ -s "$out/$file" ] || fail "$name: $file missing or empty"
  done
  # LightlyTrain's copy of the last epoch's checkpoint (6 steps an epoch)
  local epochs=("$out"/checkpoints/epoch=*)
  [ "${#epochs[@]}" -eq 1 ] &&
    [ "${epochs[0]}" = "$out/checkpoints/epoch=$(((steps - 1) / 6))-step=$steps.ckpt" ] &&
    cmp -s "${epochs[0]}" "$out/checkpoints/last.ckpt" ||
    fail "$name: not one epoch=$(((steps - 1) / 6))-step=$steps.ckpt equal to last.ckpt: ${epochs[*]}"
  local events=("$out"/events.out.tfevents.*)
  if [ "${#events[@]}" -ne 1 ] || [ ! -f "${events[0]}" ]; then
    fail "$name: expected one event file, found: ${events[*]}"
    return
  fi
  local logged
  logged=$(expected_steps "$steps" "$every" | wc -l)
  local expected="image augmentations 1 0"
  for tag in train_loss profiling/batch_time profiling/data_time epoch images_per_second $extra_tags; do
    expected+=$'\n'"scalar $tag $logged"
  done
  local summary
  if ! summary=$("$build/tests/e2e/read_events" "${events[0]}" 2>&1); then
    fail "$name: read_events: $summary"
    return
  fi
  local got_tags
  got_tags=$(printf '%s\n' "$summary" | LC_ALL=C sort)
  [ "$got_tags" = "$(printf '%s\n' "$expected" | LC_ALL=C sort)" ] ||
    fail "$name: event tags/counts differ; expected:"$'\n'"$expected"$'\n'"read:"$'\n'"$summary"
  # metrics.jsonl: the same steps, and train_loss equal to the events' (as text).
  local metric_steps
  metric_steps=$(sed -n 's/^{"step": \([0-9]*\),.*/\1/p' "$out/metrics.jsonl")
  [ "$(wc -l <"$out/metrics.jsonl")" -eq "$logged" ] ||
    fail "$name: metrics.jsonl has $(wc -l <"$out/metrics.jsonl") lines, expected $logged"
  [ "$metric_steps" = "$(expected_steps "$steps" "$every")" ] ||
    fail "$name: metrics.jsonl steps: $(echo $metric_steps), expected $(echo $(expected_steps "$steps" "$every"))"
  local metric_losses event_losses
  metric_losses=$(sed -n 's/^{"step": \([0-9]*\), "train_loss": \([^,}]*\).*/\1 \2/p' "$out/metrics.jsonl")
  event_losses=$("$build/tests/e2e/read_events" "${events[0]}" train_loss)
  [ "$metric_losses" = "$event_losses" ] ||
    fail "$name: train_loss differs between metrics.jsonl and the events:"$'\n'"$metric_losses"$'\n'"$event_losses"
}

# --- 1./2. Every method. SimCLR first: 3 epochs with mild augmentations (the
# defaults are too strong for these synthetic patterns at 32 px: the loss
# rises there), its mean loss must drop from the first to the last epoch.
mild=(--transform jitter_p=0 --transform grey_p=0 --transform blur_p=0 --transform solarize_p=0
      --transform scale_min=0.5)
train_ok simclr 18 1 "lr-SGD/backbone lr-SGD/projection_head" -- --method simclr "${heads[@]}" --method-arg temperature=0.5 "${mild[@]}"
epoch_means=$(sed -n 's/^{"step": \([0-9]*\), "train_loss": \([^,}]*\),.*/\1 \2/p' "$work/simclr/metrics.jsonl" |
  awk '{ e = int($1 / 6); sum[e] += $2; n[e]++ } END { printf "%.6f %.6f", sum[0] / n[0], sum[2] / n[2] }')
# Measured with seeds 0-9: the last epoch's mean is 8-26% below the first's
# (with the default augmentations it rose 4-27% for seeds 0-2).
awk -v m="$epoch_means" 'BEGIN { split(m, v, " "); exit !(v[2] < v[1]) }' ||
  fail "simclr: mean loss of epoch 3 is not below epoch 1 (first, last: $epoch_means)"

# The compute threads wait passively unless the user chose otherwise: an
# unset OMP_WAIT_POLICY is set to PASSIVE before libgomp reads it (the
# program starts itself again), a value given is kept (util/thread_wait.h).
for policy in unset active; do
  if [ "$policy" = unset ]; then set_policy=(-u OMP_WAIT_POLICY) expected="PASSIVE (OMP_WAIT_POLICY=PASSIVE)"
  else set_policy=(OMP_WAIT_POLICY=active) expected="active (OMP_WAIT_POLICY=active)"; fi
  env "${set_policy[@]}" "$bin" train "${common[@]}" --out "$work/wait_$policy" --max-steps 1 \
    --method simclr "${heads[@]}" >/dev/null 2>&1 || fail "train with OMP_WAIT_POLICY $policy"
  grep -q -F "compute threads wait: $expected" "$work/wait_$policy/train.log" ||
    fail "OMP_WAIT_POLICY $policy: train.log lacks '$expected': $(grep "threads wait" "$work/wait_$policy/train.log")"
done

train_ok byol 5 3 "lr-LARS/backbone lr-LARS/projection_head lr-LARS/prediction_head schedule/momentum" -- --method byol "${heads[@]}"
train_ok dino 4 2 "lr-SGD/backbone lr-SGD/projection_head lr-SGD/last_layer schedule/momentum schedule/teacher_temp" -- --method dino "${heads[@]}" "${dino_args[@]}"
train_ok vicreg 3 1 "lr-LARS/backbone lr-LARS/projection_head" -- --method vicreg "${heads[@]}"
train_ok barlowtwins 3 2 "lr-LARS/backbone lr-LARS/projection_head" -- --method barlowtwins "${heads[@]}"
train_ok distillation 3 2 "lr-LARS/backbone lr-LARS/projection_head_global lr-LARS/projection_head_local train_loss/global_loss train_loss/local_loss" -- --method distillation \
  --method-arg teacher="$work/simclr/exported_models/exported_last.safetensors"

# --- 3. TensorBoard's own reader, when the package is there.
if python3 -c "import tensorboard" >/dev/null 2>&1; then
  for name in simclr dino; do
    output=$(python3 tools/compare/tensorboard_check.py "$work/$name" 2>&1) ||
      fail "tensorboard_check $name: $output"
  done
else
  echo "tensorboard check skipped (python package not importable)"
fi

# --- 4. embed from the checkpoint and from the export: the same rows, in scan order.
(cd "$images" && find . -type f \( -name '*.jpg' -o -name '*.png' \) | sed 's|^\./||' |
  LC_ALL=C sort | grep -v '^corrupt/') >"$work/expected_names.txt"
for name in simclr dino; do
  embed=(embed --data "$images" --image-size 32 --batch-size 16 --num-workers 1)
  "$bin" "${embed[@]}" --checkpoint "$work/$name/checkpoints/last.ckpt" --out "$work/$name-ckpt.npy" \
    >/dev/null 2>&1 || fail "$name: embed from last.ckpt"
  "$bin" "${embed[@]}" --checkpoint "$work/$name/exported_models/exported_last.safetensors" \
    --out "$work/$name-export.npy" >/dev/null 2>&1 || fail "$name: embed from the export"
  head -c 128 "$work/$name-ckpt.npy" | grep -a -q "'shape': (48, 512)" ||
    fail "$name: embedding shape is not (48, 512)"
  cmp -s "$work/$name-ckpt.npy" "$work/$name-export.npy" ||
    fail "$name: embeddings from last.ckpt and the exported backbone differ"
  cmp -s "$work/$name-ckpt.npy.filenames.txt" "$work/expected_names.txt" ||
    fail "$name: embedding file names are not the scan order"
done
# export: the default part of DINO is the teacher (= the run's export); the
# student differs; a SimCLR run has no teacher.
"$bin" export --checkpoint "$work/dino/checkpoints/last.ckpt" --out "$work/dino-default.safetensors" \
  >/dev/null 2>&1 || fail "dino: export default part"
"$bin" export --checkpoint "$work/dino/checkpoints/last.ckpt" --part student \
  --out "$work/dino-student.safetensors" >/dev/null 2>&1 || fail "dino: export --part student"
cmp -s "$work/dino-default.safetensors" "$work/dino/exported_models/exported_last.safetensors" ||
  fail "dino: export of the default part differs from the run's exported_last.safetensors"
cmp -s "$work/dino-default.safetensors" "$work/dino-student.safetensors" &&
  fail "dino: the student export equals the teacher export"
# LightlyTrain's exported_last.pt (torch.save's state dict) holds the same
# tensors as exported_last.safetensors: read back, exported the same bytes.
"$bin" export --checkpoint "$work/dino/exported_models/exported_last.pt" \
  --out "$work/dino-pt.safetensors" >/dev/null 2>&1 || fail "dino: export of exported_last.pt"
cmp -s "$work/dino-pt.safetensors" "$work/dino/exported_models/exported_last.safetensors" ||
  fail "dino: exported_last.pt does not hold exported_last.safetensors' tensors"
expect 2 "no teacher backbone" -- "$bin" export --checkpoint "$work/simclr/checkpoints/last.ckpt" --part teacher \
  --out "$work/simclr-teacher.safetensors"

# --- 5. Bad arguments: exit 2, one line naming the problem, nothing written.
mkdir -p "$work/empty"
expect 2 "is not empty: pass --overwrite" -- "$bin" train "${common[@]}" --method simclr --out "$work/simclr"
expect 2 "--checkpoint .*--resume.*cannot be combined" -- \
  "$bin" train "${common[@]}" --method simclr --out "$work/simclr" --resume --checkpoint "$work/simclr/checkpoints/last.ckpt"
expect 2 "--resume: no checkpoint to resume from" -- "$bin" train "${common[@]}" --method simclr --out "$work/empty" --resume
expect 2 "--method: expected one of .*got 'mae'" -- "$bin" train "${common[@]}" --out "$work/x" --method mae
expect 2 "--gradient-overlap: expected one of true, false, got 'yes'" -- \
  "$bin" train "${common[@]}" --method simclr --out "$work/x" --gradient-overlap yes
expect 2 "unknown key 'hiden_dim'" -- "$bin" train "${common[@]}" --method simclr --out "$work/x" --method-arg hiden_dim=8
# Method arguments outside their documented range (docs/training.md), and
# numbers that are not decimal: refused before training, naming the range.
expect 2 "^lightly-train-c train: simclr: --method-arg temperature=-1: expected a number in \[0.001, 100\]$" -- \
  "$bin" train "${common[@]}" --method simclr --out "$work/x" --method-arg temperature=-1
expect 2 "^lightly-train-c train: simclr: --method-arg temperature=nan: expected a number in \[0.001, 100\]$" -- \
  "$bin" train "${common[@]}" --method simclr --out "$work/x" --method-arg temperature=nan
expect 2 "^lightly-train-c train: byol: --method-arg momentum_start=5: expected a number in \[0, 1\]$" -- \
  "$bin" train "${common[@]}" --out "$work/x" --method byol --method-arg momentum_start=5
expect 2 "^lightly-train-c train: --lr: expected a decimal number or 'auto', got '0x10'$" -- \
  "$bin" train "${common[@]}" --method simclr --out "$work/x" --lr 0x10
# Without a teacher, distillation takes LightlyTrain's default (dinov3/vitb16),
# which is not downloaded here (offline: tests/e2e/lib.bash).
expect 2 "dinov3/vitb16 is not downloaded .*weights fetch dinov3/vitb16.*--method simclr" -- \
  "$bin" train "${common[@]}" --out "$work/x" --method distillation
expect 2 "--devices 2: no launcher started several processes; start one process per device with mpirun -np N" -- \
  "$bin" train --data "$images" "${base[@]}" --out "$work/x" --batch-size 3 --devices 2
expect 2 "--accelerator gpu" -- "$bin" train "${common[@]}" --method simclr --out "$work/x" --accelerator gpu
expect 2 "does not exist" -- "$bin" train --data "$work/missing" --out "$work/x"
expect 2 "--precision 16-mixed needs a GPU" -- "$bin" train "${common[@]}" --method simclr --out "$work/x" --precision 16-mixed
expect 2 "batch_size=8, this one 4" -- "$bin" train --data "$images" "${base[@]}" --out "$work/simclr" \
  --resume --max-steps 18 --log-every 1 --batch-size 4 --method simclr "${heads[@]}"
expect 2 "has lr=" -- "$bin" train --data "$images" "${base[@]}" --out "$work/simclr" \
  --resume --max-steps 18 --log-every 1 --batch-size 8 --lr 0.1 --method simclr "${heads[@]}"
[ -e "$work/x" ] && fail "a refused run created its --out folder"
# A batch larger than the dataset is reduced, with a warning.
"$build/tests/e2e/make_images" "$work/three" 3 >/dev/null || fail "make_images three"
expect 0 "warning: batch size 8 is larger than the dataset \(3 images\); using 3" -- \
  "$bin" train --data "$work/three" --batch-size 8 "${base[@]}" --out "$work/small" --max-steps 1 \
  --method simclr "${heads[@]}"
# With an error after it, the error is the only line (the warning waits
# until every check passed).
output=$("$bin" train --data "$work/three" --batch-size 8 "${base[@]}" --out "$work/small2" \
  --max-steps 1 --method simclr --method-arg temperature=0 2>&1)
[ $? -eq 2 ] && [ "$(printf '%s\n' "$output" | wc -l)" -eq 1 ] ||
  fail "a refused run on a small dataset printed more than its error: $output"

# --- 6. A non-finite loss or gradient stops the run (exit 1, the step named) and leaves
# the checkpoint and export in --out alone. --overwrite into the finished
# vicreg run: the largest invariance weight its range allows (1e6) makes
# the first updates blow the weights up, so a later step's gradients are
# NaN/inf.
before=$(cksum "$work/vicreg/checkpoints/last.ckpt" "$work/vicreg/exported_models/exported_last.safetensors")
output=$("$bin" train "${common[@]}" --out "$work/vicreg" --overwrite --max-steps 6 --method vicreg \
  "${heads[@]}" --method-arg lambda=1e6 2>&1)
status=$?
[ "$status" -eq 1 ] || fail "diverging run exited $status, expected 1: $output"
printf '%s\n' "$output" | tail -n 1 |
  grep -q -E "^stopping: (the loss is (NaN|infinite)|the gradients of [a-z_]+ hold NaN or infinite values) at step [0-9]+" ||
  fail "diverging run: the last line does not say what diverged at which step: $output"
after=$(cksum "$work/vicreg/checkpoints/last.ckpt" "$work/vicreg/exported_models/exported_last.safetensors")
[ "$before" = "$after" ] || fail "the diverging run changed the checkpoint or export"
leftovers=$(find "$work/vicreg" -name '*.tmp*')
[ -z "$leftovers" ] || fail "partial files left: $leftovers"

# --- 7. SIGTERM and SIGINT: the run stops after the current step with a
# checkpoint (exit 143 / 130) and says how to continue, last; --resume
# continues it.
term_args=(train "${common[@]}" --method simclr --out "$work/term" --max-steps 12 --log-every 1 "${heads[@]}")
# interrupt SIGNAL STEPS [--resume]: starts the run, sends SIGNAL once it has
# logged STEPS steps (so its handler is installed), checks the exit status and
# the message.
interrupt() {
  local signal=$1 lines=$2
  shift 2
  [ -f "$work/term/metrics.jsonl" ] && lines=$((lines + $(wc -l <"$work/term/metrics.jsonl")))
  "$bin" "${term_args[@]}" "$@" >"$work/term.log" 2>&1 &
  local pid=$!
  for _ in $(seq 300); do
    [ -f "$work/term/metrics.jsonl" ] && [ "$(wc -l <"$work/term/metrics.jsonl")" -ge "$lines" ] && break
    sleep 0.1
  done
  kill "-$signal" "$pid"
  wait "$pid"
  local status=$? expected=130
  [ "$signal" = TERM ] && expected=143  # 128 + the signal number
  [ "$status" -eq "$expected" ] || fail "$signal: exit $status, expected $expected: $(cat "$work/term.log")"
  # The way to continue is the last line, after the summary.
  tail -n 1 "$work/term.log" | grep -q -E "^interrupted \(SIG$signal\)" ||
    fail "$signal: the last line is not the interrupt message: $(tail -n 3 "$work/term.log")"
  grep -q -E "interrupted \(SIG$signal\) after step [0-9]+: checkpoint written.*--resume" "$work/term.log" ||
    fail "$signal: no message on how to resume: $(cat "$work/term.log")"
  [ -s "$work/term/checkpoints/last.ckpt" ] || fail "$signal: no checkpoint"
  interrupted_after=$(sed -n 's/.*interrupted (SIG[A-Z]*) after step \([0-9]*\):.*/\1/p' "$work/term.log")
}
interrupt TERM 3
interrupt INT 2 --resume
output=$("$bin" "${term_args[@]}" --resume 2>&1)
status=$?
[ "$status" -eq 0 ] || fail "--resume after SIGTERM and SIGINT exited $status: $output"
# It continues from the step the interrupted run saved.
printf '%s\n' "$output" | grep -q "resuming from .* at step $interrupted_after of 12" ||
  fail "--resume does not continue at step $interrupted_after: $output"
[ "$(tail -n 1 "$work/term/metrics.jsonl" | sed -n 's/^{"step": \([0-9]*\),.*/\1/p')" = 11 ] ||
  fail "--resume did not reach the last step: $(tail -n 1 "$work/term/metrics.jsonl")"

# An --out with a space, a quote and UTF-8: the logs are written there and
# the printed hint to view them pastes back into a shell (it was unquoted).
odd="$work/odd name's ü"
output=$("$bin" train "${common[@]}" --method simclr "${heads[@]}" --max-steps 1 --out "$odd" 2>&1) ||
  fail "--out with a space and a quote: $output"
[ -s "$odd/train.log" ] && ls "$odd"/events.out.tfevents.* >/dev/null 2>&1 ||
  fail "--out with a space and a quote: no train.log or events"
hint=$(printf '%s\n' "$output" | sed -n 's/^tensorboard --logdir //p')
[ "$(eval "printf '%s' $hint" 2>&1)" = "$odd" ] ||
  fail "the hint 'tensorboard --logdir $hint' does not name '$odd' in a shell"

e2e_finish
