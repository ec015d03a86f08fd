#!/usr/bin/env bash
# End-to-end tests of depth and channels (docs/input-pipeline.md "Depth and
# channels"), on the committed fixtures of tests/fixtures/channels: a folder
# of 16-bit 4-band TIFFs (and one RGB PNG, skipped with its reason) trains 2
# steps with --num-channels 4, a ResNet and a ViT; embed reads the channels
# and the normalisation from the checkpoint, and the exported 4-channel
# state dict with --normalize; 3-channel initial weights are adapted (a line
# in train.log); ChannelDrop 4 -> 3 trains (distillation too); 16-bit grey PNGs train with
# --num-channels 1 (the RGB PNG among them becomes grey); 16-bit RGB takes
# the float path by itself, 8-bit JPEGs the 8-bit one; distillation refuses
# 4-channel views (one line, exit 2); bench-data skips the same file.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init channels
export OMP_WAIT_POLICY=PASSIVE  # see train.sh

fixtures=tests/fixtures/channels
bands="$work/bands" grey="$work/grey" rgb16="$work/rgb16"
mkdir -p "$bands" "$grey" "$rgb16"
for i in 1 2 3 4 5; do
  cp "$fixtures/bands4_u16.tif" "$bands/b$i.tif"
  cp "$fixtures/grey16.png" "$grey/g$i.png"
  cp "$fixtures/rgb16.png" "$rgb16/c$i.png"
done
cp "$fixtures/rgb8.png" "$bands/rgb8.png"  # 3 channels: cannot be read as 4
cp "$fixtures/rgb8.png" "$grey/rgb8.png"   # RGB to grey: read with 1
norm4=0.5,0.5,0.5,0.5:0.25,0.25,0.25,0.25
common=(--batch-size 4 --max-steps 2 --image-size 32 --num-workers 2 --threads 2
        --accelerator cpu --method simclr)

# --- 4 bands, 16 bit: a ResNet trains, the RGB PNG is skipped with the reason.
run="$work/r4"
out=$("$bin" train "${common[@]}" --data "$bands" --out "$run" --model resnet18 \
  --num-channels 4 --normalize "$norm4" 2>&1)
[ $? -eq 0 ] || fail "4-channel resnet18: $(printf '%s\n' "$out" | tail -n 5)"
printf '%s\n' "$out" | grep -q "skipping '.*rgb8.png': .*3 channel(s) (RGB) cannot be read as 4" ||
  fail "4-channel run: no skip line for rgb8.png: $out"
printf '%s\n' "$out" | grep -q -E "skipped files +1" || fail "4-channel run: skipped count: $out"
grep -q "input: 4 channel(s) from images of 4, float pixels (--input-depth auto), normalize $norm4" \
  "$run/train.log" || fail "4-channel run: no input line in train.log"

# --resume with other channels or normalisation is refused naming them; the
# same settings resume (the run is complete: its export is written again).
expect 2 "the interrupted run has input=channels=4/4 pixels=float normalize=$norm4 channel_drop=none, this one channels=4/4 pixels=float normalize=0.5,0.5,0.5,0.5:0.2,0.25,0.25,0.25" -- \
  "$bin" train "${common[@]}" --data "$bands" --out "$run" --model resnet18 --resume \
  --num-channels 4 --normalize 0.5,0.5,0.5,0.5:0.2,0.25,0.25,0.25
expect 2 "the interrupted run has input=channels=4/4 .*, this one channels=3/3 pixels=float normalize=0.485,0.456,0.406:0.229,0.224,0.225" -- \
  "$bin" train "${common[@]}" --data "$bands" --out "$run" --model resnet18 --resume
"$bin" train "${common[@]}" --data "$bands" --out "$run" --model resnet18 --resume \
  --num-channels 4 --normalize "$norm4" >/dev/null 2>&1 || fail "resume with the same input"

# embed: channels and normalisation from the checkpoint; the export needs
# --normalize (its state dict holds only the weights), the same rows then.
out=$("$bin" embed --data "$bands" --checkpoint "$run/checkpoints/last.ckpt" --out "$work/a.csv" \
  --image-size 32 --accelerator cpu --num-workers 2 2>&1)
[ $? -eq 0 ] || fail "embed 4-channel checkpoint: $out"
printf '%s\n' "$out" | grep -q "embedded 5 images x 512 dims" || fail "embed rows: $out"
printf '%s\n' "$out" | grep -q "skipped files: 1" || fail "embed skipped count: $out"
"$bin" export --checkpoint "$run/checkpoints/last.ckpt" --out "$work/r4.safetensors" >/dev/null ||
  fail "export 4-channel checkpoint"
expect 2 "the model takes 4 channel\(s\): give their mean and std with --normalize" -- \
  "$bin" embed --data "$bands" --checkpoint "$work/r4.safetensors" --out "$work/b.csv" \
  --image-size 32 --accelerator cpu
"$bin" embed --data "$bands" --checkpoint "$work/r4.safetensors" --out "$work/b.csv" \
  --image-size 32 --accelerator cpu --num-workers 2 --normalize "$norm4" >/dev/null 2>&1 ||
  fail "embed the 4-channel export"
cmp -s "$work/a.csv" "$work/b.csv" || fail "embed: the export's rows differ from the checkpoint's"
"$build/tests/e2e/compare_weights" "$run/exported_models/exported_last.safetensors" \
  "$work/r4.safetensors" 0 0 >/dev/null || fail "export differs from the run's exported backbone"

# 3-channel initial weights adapted to 4 (timm's rule), a line in train.log.
"$build/tests/e2e/make_backbone" "$work/r18.safetensors" resnet18 6 || fail "make_backbone"
run="$work/adapted"
out=$("$bin" train "${common[@]}" --data "$bands" --out "$run" --model resnet18 \
  --num-channels 4 --normalize "$norm4" --checkpoint "$work/r18.safetensors" 2>&1)
[ $? -eq 0 ] || fail "adapted run: $(printf '%s\n' "$out" | tail -n 5)"
grep -q "conv1.weight adapted from 3 to 4 input channels (timm's adapt_input_conv)" \
  "$run/train.log" || fail "adapted run: no adaptation line in train.log"

# A ViT with 4 channels, and ChannelDrop to 3.
out=$("$bin" train "${common[@]}" --data "$bands" --out "$work/vit" --model vit_t16 \
  --num-channels 4 --normalize "$norm4" 2>&1) || fail "4-channel vit_t16: $out"
"$bin" embed --data "$bands" --checkpoint "$work/vit/checkpoints/last.ckpt" --out "$work/v.csv" \
  --image-size 32 --accelerator cpu --num-workers 2 >/dev/null 2>&1 || fail "embed 4-channel vit"
out=$("$bin" train "${common[@]}" --data "$bands" --out "$work/drop" --model resnet18 \
  --num-channels 4 --channel-drop 3:1,1,1,0 --normalize 0.5,0.5,0.5:0.25,0.25,0.25 2>&1) ||
  fail "ChannelDrop run: $out"
grep -q "input: 3 channel(s) from images of 4, float pixels.*(ChannelDrop)" "$work/drop/train.log" ||
  fail "ChannelDrop run: input line"

# Distillation takes 4-band images once ChannelDrop brings the views to 3
# (a 3-channel ResNet teacher here).
out=$("$bin" train "${common[@]/simclr/distillation}" --data "$bands" --out "$work/distill" \
  --model resnet18 --num-channels 4 --channel-drop 3:1,1,1,0 \
  --normalize 0.5,0.5,0.5:0.25,0.25,0.25 --method-arg "teacher=$work/r18.safetensors" 2>&1) ||
  fail "distillation with ChannelDrop to 3: $(printf '%s\n' "$out" | tail -n 5)"

# --- 1 channel: 16-bit grey PNGs, the RGB PNG read as grey (not skipped).
out=$("$bin" train "${common[@]}" --data "$grey" --out "$work/g1" --model resnet18 \
  --num-channels 1 --normalize 0.5:0.25 2>&1)
[ $? -eq 0 ] || fail "1-channel run: $(printf '%s\n' "$out" | tail -n 5)"
printf '%s\n' "$out" | grep -q "skipping" && fail "1-channel run skipped a file: $out"
grep -q "input: 1 channel(s) from images of 1, float pixels" "$work/g1/train.log" ||
  fail "1-channel run: input line"

# --- 3 channels: 16-bit RGB takes the float path by itself, 8-bit the 8-bit one.
out=$("$bin" train "${common[@]}" --data "$rgb16" --out "$work/rgb16run" --model resnet18 2>&1) ||
  fail "16-bit RGB run: $out"
grep -q "input: 3 channel(s) from images of 3, float pixels (--input-depth auto), normalize 0.485" \
  "$work/rgb16run/train.log" || fail "16-bit RGB: not the float path"
"$build/tests/e2e/make_images" "$work/jpegs" 8 >/dev/null || fail "make_images"
"$bin" train "${common[@]}" --data "$work/jpegs" --out "$work/eight" --model resnet18 \
  >/dev/null 2>&1 || fail "8-bit run"
grep -q "input: 3 channel(s) from images of 3, 8-bit pixels" "$work/eight/train.log" ||
  fail "8-bit JPEGs: not the 8-bit path"

# --- refusals: one line, exit 2, nothing written.
out=$("$bin" train --data "$bands" --out "$work/refused" --model resnet18 --method distillation \
  --num-channels 4 --normalize "$norm4" 2>&1)
[ $? -eq 2 ] || fail "distillation with 4 channels: exit status"
[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "distillation refusal: more than one line: $out"
printf '%s\n' "$out" | grep -q "needs 3-channel views (its teacher takes RGB), these have 4" ||
  fail "distillation refusal: $out"
[ -e "$work/refused" ] && fail "distillation refusal wrote --out"
expect 2 "give their mean and std with --normalize" -- \
  "$bin" train --data "$bands" --out "$work/refused" --num-channels 4 --method simclr
expect 2 "--normalize 1,2:3: 2 mean\(s\) but 1 std\(s\)" -- \
  "$bin" train --data "$bands" --out "$work/refused" --normalize 1,2:3
expect 2 "--channel-drop has 3 weight\(s\), the images have 4" -- \
  "$bin" train --data "$bands" --out "$work/refused" --num-channels 4 --channel-drop 3:1,1,1 \
  --normalize 0.5,0.5,0.5:1,1,1
expect 2 "--input-depth 8 reads 8-bit RGB" -- \
  "$bin" train --data "$bands" --out "$work/refused" --num-channels 4 --normalize "$norm4" \
  --input-depth 8 --method simclr

# --- bench-data: the same skip.
out=$("$bin" bench-data --data "$bands" --num-channels 4 --batch-size 4 --steps 1 \
  --warmup-steps 0 --image-size 32 --num-workers 2 2>&1)
[ $? -eq 0 ] || fail "bench-data 4 channels: $out"
printf '%s\n' "$out" | grep -q "input: 4 channel(s), float pixels" || fail "bench-data input: $out"
printf '%s\n' "$out" | grep -q "skipped files: 1" || fail "bench-data skipped count: $out"

e2e_finish
