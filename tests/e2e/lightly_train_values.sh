#!/usr/bin/env bash
# End-to-end tests of the LightlyTrain values `train` takes as LightlyTrain
# does: the command's name `pretrain` (LightlyTrain's since 0.13) and its
# nested command line arguments (trainer_args.max_steps=2, optim_args.lr,
# NAME=None for a None default,
# loader_args, transform_args; others refused); --epochs
# auto, the default (100 epochs; dinov2 and dinov31 the epochs of 125,000
# steps at the batch, as its get_epochs), seen through the resume check,
# which names the total it computed; --epochs 0, which writes the initial
# model's checkpoint and export and trains nothing (the export is the
# --checkpoint's weights, a --resume of it is a complete run); --num-workers
# 0 (nothing decoded ahead: the same batches, so the same weights, as one
# worker), for train and embed; --data with image files beside folders
# (LightlyTrain's list of "image directories and files"): trained on, and
# embedded under the path given; other files, and a file inside a listed
# folder, refused by name; its command line's data='["dir", "a.jpg"]'; --data-list, a file of entries one per line (a
# list longer than the 32 --data a command line takes); an empty --data
# folder is named before the default method's teacher would be fetched;
# random_flip's vertical_prob and random_rotation (vflip_p, rotate_*: their
# pixels are tests/test_augment_views.c's) train, and dinov31 refuses them;
# torchvision's model_args weights and timm's pretrained=True name timm's
# copies (the download: e2e/weights), and what they cannot be is refused.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init lightly_train_values

images="$work/images"
"$build/tests/e2e/make_images" "$images" 48 --corrupt 2 || fail "make_images"
# 50 files, batch 8: 6 steps per epoch.
settings=(--batch-size 8 --image-size 32 --threads 2 --method-arg hidden_dim=32
          --method-arg output_dim=16)
common=(--data "$images" "${settings[@]}")

# pretrain is train; LightlyTrain's nested arguments on its command line.
output=$("$bin" pretrain "${common[@]}" --num-workers 1 --method simclr --out "$work/pretrain" \
  trainer_args.max_steps=2 optim_args.lr=0.0123 loader_args.num_workers=5 \
  loader_args.shuffle=true method_args.temperature=0.3 embed_dim=None checkpoint=None \
  model_args=None callbacks=None loggers=null 2>&1) || fail "pretrain: $output"
[ -s "$work/pretrain/checkpoints/last.ckpt" ] || fail "pretrain wrote no checkpoint"
grep -q "length: 2 steps (--max-steps)" "$work/pretrain/train.log" ||
  fail "trainer_args.max_steps=2 was not --max-steps 2"
grep -q "base 0.0123 at batch 256" "$work/pretrain/train.log" ||
  fail "optim_args.lr=0.0123 was not --lr 0.0123"
# (NAME=None, LightlyTrain's spelling of a None default, is the default)
[ -s "$work/pretrain/metrics.jsonl" ] || fail "loggers=null was not the default loggers"
grep -q "method arg: temperature=0.3" "$work/pretrain/train.log" ||
  fail "method_args.temperature=0.3 was not --method-arg temperature=0.3"
expect_only 2 "optim_args.betas=1: LightlyTrain's optim_args here takes lr and weight_decay" -- \
  "$bin" train "${common[@]}" --out "$work/refused" optim_args.betas=1
expect_only 2 "loader_args.shuffle=false: taken only as loader_args.shuffle=true" -- \
  "$bin" train "${common[@]}" --out "$work/refused" loader_args.shuffle=false
expect_only 2 "--epochs given more than once" -- "$bin" train "${common[@]}" --out \
  "$work/refused" --epochs 2 trainer_args.max_epochs=3
expect 0 "usage: lightly-train-c train" -- "$bin" help pretrain

# --epochs auto, through the resume check of a one-step run.
auto_total() {
  local name=$1 expected=$2
  shift 2
  local out="$work/auto-$name"
  output=$("$bin" train "${common[@]}" --num-workers 1 --out "$out" --max-steps 1 "$@" 2>&1) ||
    fail "$name: $output"
  expect_only 2 "total_steps=1, this one $expected " -- "$bin" train "${common[@]}" \
    --num-workers 1 --out "$out" --resume "$@"
  expect_only 2 "total_steps=1, this one $expected " -- "$bin" train "${common[@]}" \
    --num-workers 1 --out "$out" --resume --epochs auto "$@"
}
auto_total simclr 600 --method simclr  # 100 epochs x 6 steps
# ceil(125000 x 8 / 50) = 20000 epochs x 6 steps
auto_total dinov2 120000 --method dinov2 --model vit_t16 --local-image-size 16 --local-views 2 \
  --method-arg bottleneck_dim=16
grep -q "length: 1 steps (--max-steps)" "$work/auto-simclr/train.log" ||
  fail "train.log lacks the run's length"
expect 2 "--epochs: must be between 0 and 1000000, got -2" -- "$bin" train "${common[@]}" \
  --out "$work/refused" --epochs -2

# --epochs 0: the initial model saved, nothing trained.
weights="$work/initial.safetensors"
"$build/tests/e2e/make_backbone" "$weights" resnet18 7 || fail "make_backbone"
zero="$work/zero"
output=$("$bin" train "${common[@]}" --num-workers 1 --method simclr --out "$zero" --epochs 0 \
  --checkpoint "$weights" 2>&1) || fail "--epochs 0: $output"
grep -q -- "--epochs 0: nothing trained; the initial model is saved" <<<"$output" ||
  fail "--epochs 0 did not say it trained nothing: $output"
grep -q "length: 0 epochs (--epochs)" "$zero/train.log" || fail "--epochs 0: length not logged"
[ -s "$zero/checkpoints/last.ckpt" ] || fail "--epochs 0 wrote no checkpoint"
ls "$zero/checkpoints" | grep -q "^epoch=" && fail "--epochs 0 wrote an epoch file"
grep -q train_loss "$zero/metrics.jsonl" && fail "--epochs 0 logged a training step"
"$build/tests/e2e/compare_weights" "$weights" "$zero/exported_models/exported_last.safetensors" \
  0 0 >/dev/null || fail "--epochs 0: the export is not the --checkpoint's weights"
expect 0 "was already complete \(step 0 of 0\)" -- "$bin" train "${common[@]}" --num-workers 1 \
  --method simclr --out "$zero" --epochs 0 --resume

# --num-workers 0: one worker's batches, so one worker's weights.
for workers in 0 1; do
  output=$("$bin" train "${common[@]}" --num-workers $workers --method simclr \
    --out "$work/workers$workers" --max-steps 7 2>&1) || fail "--num-workers $workers: $output"
done
grep -q "data workers: 0 (--num-workers): each batch is decoded when the step asks for it" \
  "$work/workers0/train.log" || fail "train.log does not name --num-workers 0"
"$build/tests/e2e/compare_weights" "$work/workers0/exported_models/exported_last.safetensors" \
  "$work/workers1/exported_models/exported_last.safetensors" 0 0 >/dev/null ||
  fail "--num-workers 0 trained other weights than --num-workers 1"
for workers in 0 2; do
  output=$("$bin" embed --data "$images" --checkpoint "$work/workers0/checkpoints/last.ckpt" \
    --out "$work/embed$workers.csv" --image-size 32 --batch-size 16 --num-workers $workers 2>&1) ||
    fail "embed --num-workers $workers: $output"
done
cmp -s "$work/embed0.csv" "$work/embed2.csv" || fail "embed --num-workers 0 wrote other rows"
expect 2 "--num-workers: must be between 0 and 1024, got -1" -- "$bin" embed --data "$images" \
  --checkpoint "$work/workers0/checkpoints/last.ckpt" --out "$work/refused.csv" --num-workers -1
# Image files among the --data entries.
folder=$(find "$images" -mindepth 1 -maxdepth 1 -type d | sort | head -n 1)
loose=$(find "$images" -name '*.jpg' ! -path "$folder/*" | sort | head -n 2)
mapfile -t loose <<<"$loose"
in_folder=$(find "$folder" -type f | wc -l)
output=$("$bin" train "${settings[@]}" --num-workers 1 --method simclr --out "$work/files" \
  --max-steps 1 --data "$folder" --data "${loose[0]}" --data "${loose[1]}" 2>&1) ||
  fail "train on files: $output"
grep -q "simclr, $((in_folder + 2)) images" "$work/files/train.log" ||
  fail "train on a folder and two files did not count $((in_folder + 2)) images"
output=$("$bin" embed --data "$folder" --data "${loose[1]}" --checkpoint \
  "$work/files/checkpoints/last.ckpt" --out "$work/files.csv" --image-size 32 2>&1) ||
  fail "embed of files: $output"
grep -q "^${loose[1]}," "$work/files.csv" || fail "embed does not name the file as given"
[ "$(wc -l <"$work/files.csv")" -eq $((in_folder + 2)) ] || fail "embed of files: row count"
# LightlyTrain's command line list, data='["dir", "a.jpg"]': the same entries.
output=$("$bin" embed "data=[\"$folder\", \"${loose[1]}\"]" --checkpoint \
  "$work/files/checkpoints/last.ckpt" --out "$work/json-list.csv" --image-size 32 2>&1) ||
  fail "embed of a JSON list: $output"
cmp -s "$work/files.csv" "$work/json-list.csv" || fail "embed of a JSON list: not the same rows"
expect_only 2 "--data \[dir\]: expected LightlyTrain's JSON list: a list of quoted paths" -- \
  "$bin" train "${common[@]}" --out "$work/refused" --data "[dir]"
printf 'not an image' >"$work/notes.txt"
expect_only 2 "data path '$work/notes.txt' is neither a folder nor an image file" -- "$bin" \
  train "${common[@]}" --out "$work/refused" --method simclr --data "$work/notes.txt"
expect_only 2 "lies inside '$images': read twice" -- "$bin" train "${common[@]}" \
  --out "$work/refused" --method simclr --data "${loose[0]}"
# --data-list: every image file of the folder, one per line, with a blank line.
find "$images" -type f \( -name '*.jpg' -o -name '*.png' \) | sort >"$work/list.txt"
listed=$(wc -l <"$work/list.txt")
[ "$listed" -gt 32 ] || fail "the list has $listed files, not more than --data takes"
echo >>"$work/list.txt"
output=$("$bin" train "${settings[@]}" --num-workers 1 --method simclr --out "$work/listed" \
  --max-steps 1 --data-list "$work/list.txt" 2>&1) || fail "train --data-list: $output"
grep -q "simclr, $listed images" "$work/listed/train.log" ||
  fail "train --data-list did not count $listed images"
output=$("$bin" embed --data-list "$work/list.txt" --checkpoint "$work/listed/checkpoints/last.ckpt" \
  --out "$work/listed.csv" --image-size 32 2>&1) || fail "embed --data-list: $output"
printf 'a.jpg\r\n' >"$work/crlf.txt"
expect_only 2 "--data-list $work/crlf.txt holds a carriage return" -- "$bin" train \
  "${settings[@]}" --out "$work/refused" --data-list "$work/crlf.txt"
printf '\n\n' >"$work/blank.txt"
expect_only 2 "--data-list $work/blank.txt names no folder or image" -- "$bin" embed \
  --data-list "$work/blank.txt" --checkpoint "$work/listed/checkpoints/last.ckpt" \
  --out "$work/refused.csv"
expect_only 2 "--data is required \\(or --data-list\\)" -- "$bin" train "${settings[@]}" --out "$work/refused"
# A method arg the method does not have is named before its teacher is fetched.
expect_only 2 "distillation: --method-arg: unknown key 'hidden_dim'" -- "$bin" train \
  "${common[@]}" --out "$work/refused"
# An empty folder is named before the default method's teacher is fetched.
mkdir "$work/empty"
expect_only 2 "data folder '$work/empty' is empty" -- "$bin" train --data "$work/empty" \
  --out "$work/refused"
# Vertical flips and rotations train (8-bit and float views); dinov31 refuses
# them. The float run spells them as LightlyTrain's command line does.
turns=(--transform vflip_p=0.5 --transform rotate_p=1 --transform rotate_min=-30
       --transform rotate_max=30)
lightly_turns=(transform_args.random_flip.vertical_prob=0.5 transform_args.random_rotation.prob=1
               transform_args.random_rotation.degrees=30)
for float in "" "--input-depth float"; do
  [ -n "$float" ] && turns=("${lightly_turns[@]}")
  # shellcheck disable=SC2086  # $float: no option, or one with its value
  output=$("$bin" train "${common[@]}" --num-workers 1 --method simclr --out "$work/turned$float" \
    --max-steps 2 "${turns[@]}" $float 2>&1) || fail "train with rotations $float: $output"
done
expect_only 2 "transform_args.color_jitter: give strength with the factors" -- "$bin" train \
  "${common[@]}" --out "$work/refused" transform_args.color_jitter.brightness=0.8
expect_only 2 "paka_num_local: method_args has 8, transform_args 4: LightlyTrain needs them equal" \
  -- "$bin" train "${common[@]}" --out "$work/refused" --method dinov31 --model vit_t16 \
  --method-arg paka_num_local=8 transform_args.paka_num_local=4
expect_only 2 "rotate_p with coupled views \(dinov31's PaKA" -- "$bin" train "${common[@]}" \
  --out "$work/refused" --method dinov31 --model vit_t16 --local-image-size 16 \
  --transform rotate_p=0.5
# --model-arg weights (torchvision's names) as weights by name; offline here.
expect 2 "timm/resnet50.tv2_in1k is not downloaded" -- "$bin" train "${common[@]}" \
  --out "$work/refused" --method simclr --model torchvision/resnet50 --model-arg weights=DEFAULT
expect 2 "timm/resnet34.tv_in1k is not downloaded" -- "$bin" train "${common[@]}" \
  --out "$work/refused" --method simclr --model resnet34 --model-arg weights=ResNet34_Weights.DEFAULT
expect_only 2 "weights=IMAGENET1K_V2: --model resnet18 has torchvision's IMAGENET1K_V1, DEFAULT" \
  -- "$bin" train "${common[@]}" --out "$work/refused" --model resnet18 \
  --model-arg weights=IMAGENET1K_V2
expect 2 "torchvision/convnext_tiny.IMAGENET1K_V1 is not downloaded" -- "$bin" train \
  "${common[@]}" --out "$work/refused" --method simclr --model torchvision/convnext_tiny --model-arg weights=DEFAULT
expect 2 "torchvision/shufflenet_v2_x1_0.IMAGENET1K_V1 is not downloaded" -- "$bin" train \
  "${common[@]}" --out "$work/refused" --method simclr --model torchvision/shufflenet_v2_x1_0 \
  --model-arg pretrained=True
expect_only 2 "weights=IMAGENET1K_V1: torchvision's weights are taken for its ResNets" -- \
  "$bin" train "${common[@]}" --out "$work/refused" --model timm/resnet50 \
  --model-arg weights=IMAGENET1K_V1
output=$("$bin" train "${common[@]}" --num-workers 1 --method simclr --out "$work/no-weights" \
  --epochs 0 --model-arg weights=None 2>&1) || fail "--model-arg weights=None: $output"
# timm's model_args pretrained=True: timm's default tag, or the name's
# (the download: e2e/weights); where timm has none, timm's note.
expect 2 "timm/convnext_tiny.in12k_ft_in1k is not downloaded" -- "$bin" train "${common[@]}" \
  --out "$work/refused" --method simclr --model timm/convnext_tiny --model-arg pretrained=True
expect 2 "timm/resnet50.a1h_in1k is not downloaded" -- "$bin" train "${common[@]}" \
  --out "$work/refused" --method simclr --model timm/resnet50.a1h_in1k --model-arg pretrained=true
expect 2 "timm has no pretrained weights for resnet200: random initialisation" -- \
  "$bin" train "${common[@]}" --out "$work/refused" --model timm/resnet200 \
  --model-arg pretrained=True --activation-checkpointing
expect_only 2 "pretrained=True: timm's models \(timm/...\) and torchvision's take it" -- \
  "$bin" train "${common[@]}" --out "$work/refused" --model vit_s14 --model-arg pretrained=True
expect_only 2 "pretrained=yes: expected True or False" -- "$bin" train "${common[@]}" \
  --out "$work/refused" --model timm/resnet18 --model-arg pretrained=yes
expect_only 2 "pretrained and --checkpoint $weights both give" -- "$bin" train "${common[@]}" \
  --out "$work/refused" --model timm/resnet18 --model-arg pretrained=True --checkpoint "$weights"
# Lightning's legacy precisions: 16 is 16-mixed (on the CPU: refused as such), bf16
# bf16-mixed; its pure 16-bit ones are refused saying why
expect_only 2 "--precision bf16-true: bf16 weights are not used here: bf16-mixed keeps fp32 weights" -- \
  "$bin" train "${common[@]}" --out "$work/refused" --method simclr trainer_args.precision=bf16-true
expect_only 2 "--precision 16-mixed needs a GPU" -- "$bin" train "${common[@]}" \
  --out "$work/refused" --method simclr precision=16 accelerator=cpu
expect_only 2 "--precision bf16-mixed needs a GPU; on the CPU embed runs in 32-true" -- \
  "$bin" embed --data tests/fixtures/photos --checkpoint "$weights" --out "$work/refused.npy" \
  --accelerator cpu precision=bf16
e2e_finish
