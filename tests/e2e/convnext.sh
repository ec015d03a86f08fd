#!/usr/bin/env bash
# End-to-end tests of the ConvNeXts through the commands: a DINOv3-named
# ConvNeXt-T student trained with SimCLR, resumed, exported (DINOv3's names
# with norms.3 as its state dict has them) and embedded (768 wide); its
# torchvision and timm namings written in their names (torchvision's
# without classifier.2); distillation from the small DINOv3 ConvNeXt of the
# fixtures as a .pth (DINOv3's release format, through the restricted
# unpickler) into a resnet18 (v3 and v2, whose teacher takes its last two
# stages), a ConvNeXt and a YOLO11 (v3); embed from that .pth; and weights by name from a stand-in for
# the Hugging Face Hub (fake_hub.py): dinov3/convnext-tiny is timm's copy
# (a file in timm's names) used as a DINOv3 ConvNeXt teacher, by embed and
# as --model (LightlyTrain's meaning: the pretrained weights), and a name
# whose file is another architecture is refused in one line.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init convnext
export OMP_WAIT_POLICY=PASSIVE
command -v python3 >/dev/null || { fail "python3 is missing (make deps)"; e2e_finish; }

images="$work/images"
"$build/tests/e2e/make_images" "$images" 12 >/dev/null || fail "make_images"
common=(--data "$images" --batch-size 4 --image-size 32 --num-workers 1 --threads 2)
names() { "$build/tools/safetensors_tool" list "$1" | sed -n 's/^tensor\t\([^\t]*\).*/\1/p'; }
# npy_shape FILE: the shape its .npy header declares, e.g. "(12, 768)".
npy_shape() { head -c 128 "$1" | LC_ALL=C sed -n "s/.*'shape': \(([0-9, ]*)\).*/\1/p"; }

# A DINOv3 ConvNeXt-T student, randomly initialised (LightlyTrain's
# -notpretrained, in its underscore spelling): SimCLR killed after its first
# epoch (step 3, before that epoch's export), resumed to step 6 (with the
# pretrained name: a resume downloads nothing, HF_HUB_OFFLINE is set), the
# export in DINOv3's names and embeddings of its 768 features.
run="$work/simclr"
{ LTC_FAULT=kill-before-export@3 "$bin" train "${common[@]}" --out "$run" \
  --model dinov3/convnext_tiny_notpretrained --method simclr --max-steps 6 >"$work/log" 2>&1; } \
  2>/dev/null
[ $? -eq 137 ] || fail "simclr on dinov3/convnext-tiny was not killed: $(tail -3 "$work/log")"
"$bin" train "${common[@]}" --out "$run" --model dinov3/convnext-tiny --method simclr \
  --max-steps 6 --resume >"$work/log" 2>&1 || fail "resume: $(tail -3 "$work/log")"
grep -q "resuming from .* at step 3 of 6" "$work/log" ||
  fail "the run did not resume at step 3: $(head -3 "$work/log")"
"$bin" export --checkpoint "$run/checkpoints/last.ckpt" --out "$work/dinov3.safetensors" \
  >"$work/log" 2>&1 || fail "export: $(cat "$work/log")"
exported=$(names "$work/dinov3.safetensors")
for name in downsample_layers.0.0.weight stages.2.8.pwconv1.weight stages.3.2.gamma norm.bias \
            norms.3.weight; do
  printf '%s\n' "$exported" | grep -qx "$name" || fail "the DINOv3 export has no $name"
done
[ "$(printf '%s\n' "$exported" | wc -l)" -eq 182 ] ||
  fail "the DINOv3 export has $(printf '%s\n' "$exported" | wc -l) tensors, DINOv3's 182"
"$bin" embed --data "$images" --checkpoint "$work/dinov3.safetensors" --image-size 32 \
  --out "$work/emb.npy" >"$work/log" 2>&1 || fail "embed: $(cat "$work/log")"
[ "$(npy_shape "$work/emb.npy")" = "(12, 768)" ] ||
  fail "embeddings are $(npy_shape "$work/emb.npy"), not (12, 768)"

# torchvision's and timm's namings are written in their own names.
for model in torchvision/convnext_tiny timm/convnext_tiny; do
  "$build/tests/e2e/make_backbone" "$work/${model%%/*}.safetensors" "$model" 3 ||
    fail "make_backbone $model"
done
names "$work/torchvision.safetensors" | grep -qx "features.7.2.layer_scale" ||
  fail "the torchvision export lacks features.7.2.layer_scale"
names "$work/torchvision.safetensors" | grep -q "^classifier.2" &&
  fail "the torchvision export holds a classifier"
names "$work/timm.safetensors" | grep -qx "head.norm.weight" || fail "the timm export lacks head.norm"

# Distillation from DINOv3's release format (.pth): v3 and v2 into a
# resnet18, v3 into a ConvNeXt and a YOLO11 (the teacher's map matched to
# each student's).
teacher="$(pwd)/tests/fixtures/convnext_dinov3.pth"
for student in resnet18:distillation resnet18:distillationv2 \
               dinov3/convnext-tiny-notpretrained:distillation \
               ultralytics/yolo11n.yaml:distillation; do
  model=${student%:*} method=${student##*:}
  out="$work/$method-$(printf '%s' "$model" | tr '/.' '__')"
  "$bin" train "${common[@]}" --out "$out" --model "$model" --method $method \
    --method-arg "teacher=$teacher" --max-steps 2 >"$work/log" 2>&1 ||
    fail "$method from $teacher into $model: $(tail -3 "$work/log")"
  grep -q '"step": 1, "train_loss"' "$out/metrics.jsonl" 2>/dev/null ||
    fail "$method into $model logged no second step"
done
"$bin" embed --data "$images" --checkpoint "$teacher" --image-size 32 --out "$work/t.npy" \
  >"$work/log" 2>&1 || fail "embed from the .pth: $(cat "$work/log")"
[ "$(npy_shape "$work/t.npy")" = "(12, 32)" ] ||
  fail "embeddings of the small DINOv3 ConvNeXt are $(npy_shape "$work/t.npy"), not (12, 32)"

# Weights by name: dinov3/convnext-tiny is timm's copy (timm's names, a
# stand-in here), loaded into a DINOv3 ConvNeXt.
hub="$work/hub"
mkdir -p "$hub/timm/convnext_tiny.dinov3_lvd1689m" "$hub/timm/convnext_small.dinov3_lvd1689m"
"$build/tests/e2e/make_backbone" "$hub/timm/convnext_tiny.dinov3_lvd1689m/model.safetensors" \
  timm/convnext_tiny 7 || fail "make_backbone timm/convnext_tiny"
"$build/tools/safetensors_tool" extract tests/fixtures/convnext.safetensors small/timm. \
  "$hub/timm/convnext_small.dinov3_lvd1689m/model.safetensors" >/dev/null ||
  fail "extract the small timm ConvNeXt"
unset HF_HUB_OFFLINE
python3 "$(dirname "$0")/fake_hub.py" "$hub" "$work/port" "$work/hub.log" &
hub_pid=$!
trap 'kill $hub_pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
export HF_ENDPOINT="http://127.0.0.1:$(cat "$work/port")"
"$bin" weights fetch dinov3/convnext_tiny >/dev/null 2>"$work/log" ||
  fail "weights fetch dinov3/convnext_tiny: $(cat "$work/log")"
"$bin" train "${common[@]}" --out "$work/by_name" --model resnet18 --method distillation \
  --method-arg teacher=dinov3/convnext-tiny --max-steps 1 >"$work/log" 2>&1 ||
  fail "distillation from dinov3/convnext-tiny: $(tail -3 "$work/log")"
"$bin" embed --data "$images" --checkpoint dinov3/convnext-tiny --image-size 32 \
  --out "$work/named.npy" >"$work/log" 2>&1 || fail "embed from the name: $(cat "$work/log")"
[ "$(npy_shape "$work/named.npy")" = "(12, 768)" ] ||
  fail "embeddings of dinov3/convnext-tiny are $(npy_shape "$work/named.npy"), not (12, 768)"
# LightlyTrain's name as --model starts from that name's weights, as
# --checkpoint NAME does; -notpretrained from a random initialisation.
for run in named:dinov3/convnext-tiny checkpoint:dinov3/convnext-tiny-notpretrained \
           random:dinov3/convnext-tiny-notpretrained; do
  extra=()
  [ "${run%%:*}" = checkpoint ] && extra=(--checkpoint dinov3/convnext-tiny)
  "$bin" train "${common[@]}" --out "$work/start-${run%%:*}" --model "${run#*:}" "${extra[@]}" \
    --method simclr --max-steps 1 --seed 4 >"$work/log" 2>&1 || fail "$run: $(tail -3 "$work/log")"
done
grep -q "initial weights: dinov3/convnext-tiny$" "$work/start-named/train.log" ||
  fail "train.log of --model dinov3/convnext-tiny names no initial weights"
grep -q "initial weights: none (a random initialisation, seed 4)" "$work/start-random/train.log" ||
  fail "train.log of the -notpretrained run does not say it is randomly initialised"
cmp -s "$work/start-named/exported_models/exported_last.safetensors" \
  "$work/start-checkpoint/exported_models/exported_last.safetensors" ||
  fail "--model dinov3/convnext-tiny did not start from the weights of that name"
cmp -s "$work/start-named/exported_models/exported_last.safetensors" \
  "$work/start-random/exported_models/exported_last.safetensors" &&
  fail "--model dinov3/convnext-tiny-notpretrained started from the pretrained weights"
"$bin" weights fetch dinov3/convnext-small >/dev/null 2>&1 || fail "weights fetch dinov3/convnext-small"
expect_only 2 "dinov3/convnext-small does not match the file: stage 0 has 3 blocks of width 96, the file's 1 of width 8" -- \
  "$bin" train "${common[@]}" --out "$work/refused" --model resnet18 --method distillation \
  --method-arg teacher=dinov3/convnext-small --max-steps 1
[ -e "$work/refused" ] && fail "the refused run wrote $work/refused"
e2e_finish
