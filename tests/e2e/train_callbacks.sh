#!/usr/bin/env bash
# LightlyTrain's callbacks through `train --callbacks` (src/cli/callbacks.h,
# docs/training.md "Checkpoints, exports and early stopping"), 12 photos at
# batch 4 (3 steps an epoch):
# - model_checkpoint.every_n_epochs=2 with save_top_k=-1 keeps the epoch
#   files of epochs 2, 4 and 6 (E 1, 3, 5), model_export.every_n_epochs=3
#   exports at epochs 3 and 6, as train.log says; learning_rate_monitor=null
#   logs no lr-* scalar (the default logs one);
# - every_n_train_steps=5 checkpoints mid-epoch (steps 5, 10 and the last,
#   12), save_top_k=0 keeps no epoch file, model_export=null exports at the
#   end only;
# - early_stopping.patience=2 at lr 0 (the loss only moves with the views)
#   ends the run early with exit 0, its checkpoint and export written and
#   the reason last; killed right after an epoch-end checkpoint and resumed,
#   it stops at the same step with the same best loss (the patience count
#   is in the checkpoint: counted afresh it would stop later); with
#   trainer_args.min_steps two steps later the stop waits for them and
#   ends the run mid-epoch; 2 CPU ranks stop together (the decision is
#   agreed);
# - device_stats_monitor logs the CPU's use, memory and swap with every
#   logged step (only when named);
# - model_checkpoint.monitor=train_loss keeps the epoch files of the
#   save_top_k lowest epoch-end losses (mode=max: highest), also across a
#   kill and --resume;
# - LightlyTrain's other model_checkpoint settings at what they do here
#   (verbose, dirpath=None, monitor=None, ...) are taken;
# - bad entries exit 2 with one line (an unknown callback, a key, a monitor,
#   model_checkpoint=null, save_top_k=2 without a monitor, epochs and steps
#   together); LightlyTrain's nested
#   spelling callbacks.model_checkpoint.every_n_epochs=2 is the same entry.
set -u
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/mpi.bash"
e2e_init train_callbacks
mpi_require

base=(--data tests/fixtures/photos --batch-size 4 --image-size 32 --num-workers 1
  --model resnet18 --method simclr --seed 5)
common=("${base[@]}" --threads 2)

# `run NAME ARGS...`: a run that must succeed; its output in $work/NAME.out.
run() {
  local name=$1
  shift
  "$bin" train "${common[@]}" --out "$work/$name" "$@" >"$work/$name.out" 2>&1 ||
    fail "$name: exit $?: $(tail -n 3 "$work/$name.out")"
}

# `files NAME`: the epoch files of run NAME, space-separated, sorted.
files() { (cd "$work/$1/checkpoints" && ls epoch=*.ckpt 2>/dev/null | sort | tr '\n' ' '); }
# `writes NAME`: train.log's "step S: wrote ..." lines, one per line, without the time.
writes() { sed -n 's/^[0-9-]* [0-9:]* \(step [0-9]*: wrote .*\)$/\1/p' "$work/$1/train.log"; }

run epochs --epochs 6 --callbacks model_checkpoint.every_n_epochs=2 \
  --callbacks model_checkpoint.save_top_k=-1 --callbacks model_export.every_n_epochs=3 \
  --callbacks learning_rate_monitor=null
[ "$(files epochs)" = "epoch=1-step=6.ckpt epoch=3-step=12.ckpt epoch=5-step=18.ckpt " ] ||
  fail "every_n_epochs=2, save_top_k=-1: epoch files $(files epochs)"
expected='step 6: wrote the checkpoint with its epoch file
step 9: wrote the export
step 12: wrote the checkpoint with its epoch file
step 18: wrote the checkpoint with its epoch file and the export'
[ "$(writes epochs)" = "$expected" ] || fail "every_n_epochs=2, export every 3: $(writes epochs)"
grep -q '"lr-' "$work/epochs/metrics.jsonl" && fail "learning_rate_monitor=null still logs lr-*"
grep -q 'DeviceStatsMonitor' "$work/epochs/metrics.jsonl" && fail "device stats logged unasked"

# (with LightlyTrain's other model_checkpoint settings at what they do here: taken, no effect)
run steps --epochs 4 --callbacks model_checkpoint.every_n_train_steps=5 \
  --callbacks model_checkpoint.save_top_k=0 --callbacks model_export=null \
  callbacks.model_checkpoint.verbose=true callbacks.model_checkpoint.dirpath=None \
  callbacks.model_checkpoint.monitor=None callbacks.model_checkpoint.save_weights_only=false \
  callbacks.device_stats_monitor.cpu_stats=None
# device_stats_monitor on the CPU: the CPU's use, memory and swap in percent
# with every logged step (psutil's three of Lightning's DeviceStatsMonitor).
stats=$(grep -c '"DeviceStatsMonitor.on_train_batch_end/cpu_percent": [0-9.e+-]*, "DeviceStatsMonitor.on_train_batch_end/cpu_vm_percent": [0-9.e+-]*, "DeviceStatsMonitor.on_train_batch_end/cpu_swap_percent": [0-9.e+-]*}' "$work/steps/metrics.jsonl")
[ "$stats" = "$(grep -c '"train_loss"' "$work/steps/metrics.jsonl")" ] && [ "$stats" -gt 0 ] ||
  fail "device_stats_monitor: $stats of the logged steps carry the CPU's scalars"
awk -F'cpu_vm_percent": ' 'NF > 1 { split($2, v, /[,}]/); if (!(v[1] > 0 && v[1] <= 100)) bad = 1 }
  END { exit bad }' "$work/steps/metrics.jsonl" || fail "device_stats_monitor: a cpu_vm_percent out of (0, 100]"
[ -z "$(files steps)" ] || fail "save_top_k=0 kept $(files steps)"
expected='step 5: wrote the checkpoint
step 10: wrote the checkpoint
step 12: wrote the checkpoint and the export'
[ "$(writes steps)" = "$expected" ] || fail "every_n_train_steps=5, no export: $(writes steps)"
grep -q '"lr-SGD/backbone"' "$work/steps/metrics.jsonl" || fail "the default logs no lr-SGD/backbone"

# Early stopping: at lr 0 the weights stay, the loss follows the views alone.
patience=(--epochs 40 --lr 0 --callbacks early_stopping.patience=2)
run patience "${patience[@]}"
last=$(tail -n 1 "$work/patience.out")
case $last in "early stopping after epoch "*) ;; *) fail "patience: last line '$last'" ;; esac
stopped=$(writes patience | tail -n 1 | sed -n 's/^step \([0-9]*\): wrote the checkpoint.* and the export$/\1/p')
[ -n "$stopped" ] && [ "$stopped" -lt 120 ] || fail "patience: no early stop written ($(writes patience | tail -n 1))"
[ -f "$work/patience/exported_models/exported_last.safetensors" ] || fail "patience: no export"
# Killed right after the checkpoint of the epoch before the stop, then resumed.
before=$((stopped - 3))
{ env LTC_FAULT="kill-before-export@$before" "$bin" train "${common[@]}" --out "$work/resumed" \
  "${patience[@]}" >"$work/resumed.out" 2>&1; } 2>/dev/null  # (no "Killed" notice)
[ $? -eq 137 ] || fail "the kill at step $before did not happen: $(tail -n 2 "$work/resumed.out")"
run resumed "${patience[@]}" --resume
[ "$(tail -n 1 "$work/resumed.out")" = "$last" ] ||
  fail "resumed: '$(tail -n 1 "$work/resumed.out")', uninterrupted: '$last'"
# --min-steps (Lightning's min_steps) two steps past that epoch end: the
# stop waits for it, then ends the run mid-epoch with that epoch's file.
run min_steps "${patience[@]}" trainer_args.min_steps=$((stopped + 2))
[ "$(writes min_steps | tail -n 1)" = "step $((stopped + 2)): wrote the checkpoint with its epoch file and the export" ] ||
  fail "min_steps: $(writes min_steps | tail -n 1)"
grep -q "^early stopping after epoch $((stopped / 3 + 1)) (step $((stopped + 2)) of 120)" \
  "$work/min_steps.out" || fail "min_steps: last line '$(tail -n 1 "$work/min_steps.out")'"
grep -q "early stopping asked at step $stopped, but --min-epochs 1 / --min-steps $((stopped + 2))" \
  "$work/min_steps/train.log" || fail "min_steps: train.log does not say the stop waited"
# Two CPU ranks (batch 2 each): they stop together, after the same epoch end.
OMP_WAIT_POLICY=PASSIVE mpi_run 2 "$bin" train "${base[@]}" --threads 1 --out "$work/ranks" \
  "${patience[@]}" >"$work/ranks.out" 2>&1 || fail "2 ranks: exit $?: $(tail -n 3 "$work/ranks.out")"
# (LeakSanitizer's report of OpenMPI's suppressions may follow it under ASan)
grep -q "^early stopping after epoch " "$work/ranks.out" ||
  fail "2 ranks: no early stop: $(tail -n 3 "$work/ranks.out")"

# model_checkpoint.monitor=train_loss: the epoch files of the save_top_k
# best epoch-end losses (metrics.jsonl's "step": S - 1 for S steps done; of
# equal ones the earlier), as train.log says; not the first K nor the last
# K here (seed 5: K=3 keeps epochs 1, 2 and 6, mode=max K=1 epoch 5).
monitor=(--epochs 6 --log-every 1 --callbacks model_checkpoint.monitor=train_loss)
# best NAME K [max]: the epoch files of the K best epoch ends of run NAME, sorted.
best() {
  sed -n 's/^{"step": \([0-9]*\), "train_loss": \([^,}]*\).*/\1 \2/p' "$work/$1/metrics.jsonl" |
    awk '($1 + 1) % 3 == 0 { print $2, $1 + 1 }' | sort -s -g -k1,1 ${3:+-r} |
    head -n "$2" | awk '{ printf "epoch=%d-step=%d.ckpt\n", $2 / 3 - 1, $2 }' | sort | tr '\n' ' '
}
run monitor "${monitor[@]}" --callbacks model_checkpoint.save_top_k=3
[ "$(files monitor)" = "$(best monitor 3)" ] ||
  fail "monitor, save_top_k=3: epoch files $(files monitor), the 3 lowest losses: $(best monitor 3)"
[ "$(best monitor 3)" != "epoch=0-step=3.ckpt epoch=1-step=6.ckpt epoch=2-step=9.ckpt " ] &&
  [ "$(best monitor 3)" != "epoch=3-step=12.ckpt epoch=4-step=15.ckpt epoch=5-step=18.ckpt " ] ||
  fail "monitor: the 3 lowest losses are the first or last 3 epochs: the check cannot tell"
grep -q "step 18: train_loss [0-9.e+-]* is \(not \)\?among the 3 lowest" \
  "$work/monitor/train.log" ||
  fail "monitor: train.log does not say what step 18's epoch file became"
# Killed right after epoch 4's checkpoint (before its epoch file), then
# resumed: the same files (the list is in the checkpoint; counted afresh the
# resumed run would keep three more beside the first ones).
{ env LTC_FAULT="kill-before-export@12" "$bin" train "${common[@]}" --out "$work/monitor_resumed" \
  "${monitor[@]}" --callbacks model_checkpoint.save_top_k=3 >"$work/monitor_resumed.out" 2>&1
} 2>/dev/null
[ $? -eq 137 ] || fail "monitor: the kill at step 12 did not happen"
run monitor_resumed "${monitor[@]}" --callbacks model_checkpoint.save_top_k=3 --resume
[ "$(files monitor_resumed)" = "$(files monitor)" ] ||
  fail "monitor, resumed: epoch files $(files monitor_resumed), uninterrupted: $(files monitor)"
run monitor_max "${monitor[@]}" --callbacks model_checkpoint.mode=max
[ "$(files monitor_max)" = "$(best monitor_max 1 max)" ] ||
  fail "monitor, mode=max: epoch files $(files monitor_max), the highest: $(best monitor_max 1 max)"

# Bad entries: one line, exit 2, nothing trained.
expect_only 2 "--callbacks device_stats: the callbacks are model_checkpoint, model_export, early_stopping, learning_rate_monitor and device_stats_monitor" -- \
  "$bin" train "${common[@]}" --out "$work/bad" --callbacks device_stats
expect_only 2 "--callbacks model_checkpoint.dirpath=x: dirpath is null here: checkpoints go to --out/checkpoints" -- \
  "$bin" train "${common[@]}" --out "$work/bad" --callbacks model_checkpoint.dirpath=x
expect_only 2 "--callbacks model_checkpoint.top=3: model_checkpoint's settings here are every_n_epochs" -- \
  "$bin" train "${common[@]}" --out "$work/bad" --callbacks model_checkpoint.top=3
expect_only 2 "--callbacks early_stopping.monitor=val_loss: the monitored metric is train_loss" -- \
  "$bin" train "${common[@]}" --out "$work/bad" --callbacks early_stopping.monitor=val_loss
expect_only 2 "--callbacks model_checkpoint=null: checkpoints/last.ckpt is what --resume" -- \
  "$bin" train "${common[@]}" --out "$work/bad" --callbacks model_checkpoint=null
expect_only 2 "--callbacks model_checkpoint.save_top_k=2: without a monitor save_top_k is 1" -- \
  "$bin" train "${common[@]}" --out "$work/bad" --callbacks model_checkpoint.save_top_k=2
expect_only 2 "checkpoints go by epochs or by steps, not both" -- \
  "$bin" train "${common[@]}" --out "$work/bad" callbacks.model_checkpoint.every_n_epochs=2 \
  --callbacks model_checkpoint.every_n_train_steps=3
[ -e "$work/bad" ] && fail "a refused run wrote $work/bad"
e2e_finish
