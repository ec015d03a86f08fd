#!/usr/bin/env bash
# Lightning's Trainer limits through `train` (src/cli/run_limits.h,
# docs/training.md "Time and batch limits"), 12 photos at batch 4 (3 batches
# an epoch):
# - --limit-train-batches 2 makes epochs of 2 steps (6 in 3 epochs, the
#   epoch file of the last named as such; a resume without it is refused
#   naming it); LightlyTrain's
#   trainer_args.limit_train_batches=0.5 with trainer_args.max_epochs=2 is
#   1 step an epoch (floor(1.5));
# - --max-time (LightlyTrain's trainer_args.max_time) stops a long run as
#   done: exit 0, the reason last, checkpoint, epoch file and export at the
#   stopping step; resumed with the same limit it trains nothing (the
#   training time is in the checkpoint, as Lightning's Timer state) and
#   leaves the checkpoint as it was; resumed with a longer one it trains on;
#   2 CPU ranks stop together on rank 0's clock (the decision travels in the
#   step records); --min-epochs / --min-steps (min_epochs, min_steps) hold
#   the stop back until they are reached;
# - trainer_args.fast_dev_run=True (5) trains 1 (3: one epoch) steps and
#   writes the checkpoint, the export and train.log alone;
# - trainer_args.gradient_clip_val clips a SimCLR step, not a DINO one
#   (LightlyTrain's DINO sets its own);
# - bad values exit 2 with one line.
set -u
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/mpi.bash"
e2e_init train_time_limits
mpi_require

base=(--data tests/fixtures/photos --batch-size 4 --image-size 32 --num-workers 1
  --model resnet18 --seed 5)
common=("${base[@]}" --method simclr --threads 2)

# `run NAME ARGS...`: a run into $work/NAME (unless ARGS name an --out) that
# must succeed; its output in $work/NAME.out.
run() {
  local name=$1 out=()
  shift
  [[ " $* " == *" --out "* ]] || out=(--out "$work/$name")
  "$bin" train "${common[@]}" "${out[@]}" "$@" >"$work/$name.out" 2>&1 ||
    fail "$name: exit $?: $(tail -n 3 "$work/$name.out")"
}
# The steps/epoch and steps of a run's train.log ("2 steps/epoch, 6 steps").
steps_of() { sed -n 's/.* \([0-9]* steps\/epoch, [0-9]* steps\), .*/\1/p' "$work/$1/train.log"; }

run limited --epochs 3 --limit-train-batches 2
[ "$(steps_of limited)" = "2 steps/epoch, 6 steps" ] || fail "limit 2: $(steps_of limited)"
[ "$(ls "$work/limited/checkpoints")" = "$(printf 'epoch=2-step=6.ckpt\nlast.ckpt')" ] ||
  fail "limit 2: checkpoints $(ls "$work/limited/checkpoints" | tr '\n' ' ')"
grep -q "epochs: 2 batches each (--limit-train-batches 2)" "$work/limited/train.log" ||
  fail "limit 2: train.log does not say the limit"
# The limit is the run's: --resume with another one (or none, the same
# steps) names it.
expect_only 2 "the interrupted run has limit_train_batches=2, this one all" -- \
  "$bin" train "${common[@]}" --out "$work/limited" --max-steps 6 --resume
"$bin" train "${common[@]}" --out "$work/fraction" trainer_args.max_epochs=2 \
  trainer_args.limit_train_batches=0.5 >"$work/fraction.out" 2>&1 ||
  fail "trainer_args.limit_train_batches=0.5: exit $?: $(tail -n 3 "$work/fraction.out")"
[ "$(steps_of fraction)" = "1 steps/epoch, 2 steps" ] || fail "limit 0.5: $(steps_of fraction)"

# A run of 1000 epochs stopped by its time limit, then resumed.
long=(--epochs 1000)
run timed "${long[@]}" trainer_args.max_time.seconds=1
last=$(tail -n 1 "$work/timed.out")
stopped=$(sed -n 's/^--max-time 0:00:00:01 reached after step \([0-9]*\) of 3000 (training time 0:00:0[0-9]:[0-9][0-9]): checkpoint and export written.*/\1/p' <<<"$last")
[ -n "$stopped" ] && [ "$stopped" -lt 3000 ] || fail "max_time 1 s: last line '$last'"
[ -f "$work/timed/exported_models/exported_last.safetensors" ] || fail "max_time: no export"
epoch_file="epoch=$(((stopped - 1) / 3))-step=$stopped.ckpt"
[ -f "$work/timed/checkpoints/$epoch_file" ] ||
  fail "max_time: no $epoch_file: $(ls "$work/timed/checkpoints" | tr '\n' ' ')"
before=$(cksum <"$work/timed/checkpoints/last.ckpt")
rm "$work/timed/exported_models/exported_last.safetensors"
run spent "${long[@]}" --max-time 00:00:00:01 --resume --out "$work/timed"
grep -q "^--max-time 0:00:00:01: the training time (0:00:0[0-9]:[0-9][0-9]) is spent before step $((stopped + 1)); nothing trained, the export written" \
  "$work/spent.out" || fail "resumed when spent: $(grep -- --max-time "$work/spent.out")"
[ "$(cksum <"$work/timed/checkpoints/last.ckpt")" = "$before" ] ||
  fail "resumed when spent: the checkpoint changed"
[ -f "$work/timed/exported_models/exported_last.safetensors" ] ||
  fail "resumed when spent: the export was not written again"
run longer "${long[@]}" --max-time seconds=4 --resume --out "$work/timed"
so_far=$(grep "time limit: --max-time 0:00:00:04" "$work/timed/train.log")
case $so_far in *"(training time so far 0:00:00:00)"* | "") fail "resumed: '$so_far'" ;; esac
again=$(tail -n 1 "$work/longer.out" | sed -n 's/^--max-time 0:00:00:04 reached after step \([0-9]*\) of 3000.*/\1/p')
[ -n "$again" ] && [ "$again" -gt "$stopped" ] ||
  fail "resumed with 4 s: '$(tail -n 1 "$work/longer.out")' (stopped at $stopped before)"

# Lightning's min_epochs / min_steps: a time limit spent at the start waits
# for them (Lightning's should_stop until _can_stop_early): 2 epochs; 4
# steps (min_epochs auto: 1, then mid-epoch, with that epoch's file); 2
# steps with min_epochs 0. train.log says the stop waited.
minimum() {  # minimum NAME STEPS EPOCH_FILE ARGS...
  local name=$1 steps=$2 epoch_file=$3
  shift 3
  run "$name" "${long[@]}" --max-time 0:00:00:00 "$@"
  tail -n 1 "$work/$name.out" | grep -q "^--max-time 0:00:00:00 reached after step $steps of 3000 " ||
    fail "$name: last line '$(tail -n 1 "$work/$name.out")'"
  [ "$(ls "$work/$name/checkpoints")" = "$(printf '%s\nlast.ckpt' "$epoch_file")" ] ||
    fail "$name: checkpoints $(ls "$work/$name/checkpoints" | tr '\n' ' ')"
  grep -q -- "--max-time spent at step 0, but --min-epochs .* are not reached: training on" \
    "$work/$name/train.log" || fail "$name: train.log does not say the stop waited"
}
minimum min_epochs 6 "epoch=1-step=6.ckpt" trainer_args.min_epochs=2
minimum min_steps 4 "epoch=1-step=4.ckpt" trainer_args.min_steps=4
minimum min_steps_only 2 "epoch=0-step=2.ckpt" --min-steps 2 --min-epochs 0

# Lightning's fast_dev_run: one epoch of at most N optimizer steps (5: the
# 3 batches there are), whatever --epochs says; no logs, no epoch file; the
# checkpoint and the export.
for dev in True:1 5:3; do
  run "fast$dev" --epochs 5 --callbacks early_stopping.patience=1 trainer_args.fast_dev_run="${dev%:*}"
  [ "$(steps_of "fast$dev")" = "${dev#*:} steps/epoch, ${dev#*:} steps" ] ||
    fail "fast_dev_run=${dev%:*}: $(steps_of "fast$dev")"
  [ "$(cd "$work/fast$dev" && find . -type f | sort | tr '\n' ' ')" = "./checkpoints/last.ckpt ./exported_models/exported_last.pt ./exported_models/exported_last.safetensors ./train.log " ] ||
    fail "fast_dev_run=${dev%:*} wrote: $(cd "$work/fast$dev" && find . -type f | sort | tr '\n' ' ')"
  grep -q "^fast_dev_run [15]: ${dev#*:} step(s), one epoch" "$work/fast$dev.out" ||
    fail "fast_dev_run=${dev%:*}: the console does not say it"
done

# Two CPU ranks (batch 2 each) stop together, exit 0.
OMP_WAIT_POLICY=PASSIVE mpi_run 2 "$bin" train "${base[@]}" --method simclr --threads 1 --out "$work/ranks" \
  "${long[@]}" --max-time seconds=2 >"$work/ranks.out" 2>&1 ||
  fail "2 ranks: exit $?: $(tail -n 3 "$work/ranks.out")"
grep -q "^--max-time 0:00:00:02 reached after step " "$work/ranks.out" ||
  fail "2 ranks: no time stop: $(tail -n 3 "$work/ranks.out")"

# Lightning's gradient_clip_val: a norm of 1e-12 changes a SimCLR step's
# export; DINO keeps its own clipping (3.0, as LightlyTrain's configure_
# gradient_clipping): the same export, byte for byte, and train.log says so.
for method in simclr dino; do
  for clip in auto 1e-12; do
    "$bin" train "${base[@]}" --threads 2 --method "$method" --max-steps 1 --out "$work/$method-$clip" \
      trainer_args.gradient_clip_val="$clip" >"$work/$method-$clip.out" 2>&1 ||
      fail "$method, clip $clip: exit $?: $(tail -n 3 "$work/$method-$clip.out")"
  done
  cmp -s "$work/$method-auto/exported_models/exported_last.safetensors" \
    "$work/$method-1e-12/exported_models/exported_last.safetensors"
  echo "$method $?" >>"$work/clip.txt"
done
[ "$(cat "$work/clip.txt")" = "$(printf 'simclr 1\ndino 0')" ] ||
  fail "gradient_clip_val 1e-12 (1: the export changed): $(tr '\n' ' ' <"$work/clip.txt")"
grep -q "grad clip 1e-12," "$work/simclr-1e-12/train.log" || fail "simclr: no 'grad clip 1e-12'"
grep -q -- "--gradient-clip-val 1e-12: not taken, dino clips at 3 as LightlyTrain's does" \
  "$work/dino-1e-12/train.log" || fail "dino: train.log does not say the clip value is not taken"

# Bad values: one line, exit 2.
expect_only 2 "--max-time 1:00:00: expected DD:HH:MM:SS" -- \
  "$bin" train "${common[@]}" --out "$work/bad" --max-time 1:00:00
expect_only 2 "--limit-train-batches 1.5: a fraction is from 0.0 to 1.0" -- \
  "$bin" train "${common[@]}" --out "$work/bad" trainer_args.limit_train_batches=1.5
expect_only 2 "--limit-train-batches 0.1 of 3 batches an epoch is less than one batch" -- \
  "$bin" train "${common[@]}" --out "$work/bad" --limit-train-batches 0.1
expect_only 2 "--fast-dev-run -1: expected true, false or a number of batches from 0" -- \
  "$bin" train "${common[@]}" --out "$work/bad" trainer_args.fast_dev_run=-1
[ -e "$work/bad" ] && fail "a refused run wrote $work/bad"
e2e_finish
