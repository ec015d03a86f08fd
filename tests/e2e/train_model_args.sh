#!/usr/bin/env bash
# LightlyTrain's model_args through `train --model-arg` (and its nested
# spelling model_args.KEY=VALUE; nn/backbone.h backbone_spec_apply_arg):
# - drop_path_rate on a ViT: 0 gives the run without it byte for byte, 0.4
#   another first loss (the blocks' stochastic depth draws in training);
#   train.log names the argument;
# - stochastic_depth_prob on torchvision's ConvNeXt (its default 0.1: 0
#   changes the run) and drop_path_rate on timm's (default 0);
# - zero_init_residual=true on a ResNet-18: each block's last BatchNorm
#   starts at weight 0 (a 1-step run at lr 0 exports it unchanged), where
#   torchvision's default starts it at 1;
# - a key no model takes, one the model does not take, or a bad value:
#   exit 2 with one line naming it, nothing written.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init train_model_args

common=(--data tests/fixtures/photos --batch-size 4 --num-workers 1 --threads 2 --method simclr
  --seed 4)
tool="$build/tools/safetensors_tool"

run() {  # 2 steps unless --max-steps follows
  local name=$1
  shift
  "$bin" train "${common[@]}" --max-steps "${steps:-2}" --out "$work/$name" "$@" >"$work/$name.out" 2>&1 ||
    fail "$name: exit $?: $(tail -n 3 "$work/$name.out")"
}
first_loss() { head -n 1 "$work/$1/metrics.jsonl" | sed -n 's|.*"train_loss": \([^,}]*\).*|\1|p'; }
same() { cmp -s "$work/$1/exported_models/exported_last.safetensors" "$work/$2/exported_models/exported_last.safetensors"; }

vit=(--model vit_t14 --image-size 28)
run vit "${vit[@]}"
run vit_0 "${vit[@]}" model_args.drop_path_rate=0
run vit_4 "${vit[@]}" --model-arg drop_path_rate=0.4
same vit vit_0 || fail "drop_path_rate=0 differs from the run without it"
[ "$(first_loss vit)" != "$(first_loss vit_4)" ] || fail "drop_path_rate=0.4 left the first loss $(first_loss vit)"
grep -q "model arg: drop_path_rate=0.4" "$work/vit_4/train.log" || fail "train.log does not name the model arg"

run tv --model torchvision/convnext_tiny --image-size 32
run tv_0 --model torchvision/convnext_tiny --image-size 32 --model-arg stochastic_depth_prob=0
same tv tv_0 && fail "stochastic_depth_prob=0 is torchvision's default run (0.1) byte for byte"
run timm --model timm/convnext_tiny --image-size 32
run timm_0 --model timm/convnext_tiny --image-size 32 --model-arg drop_path_rate=0
run timm_3 --model timm/convnext_tiny --image-size 32 --model-arg drop_path_rate=0.3
same timm timm_0 || fail "timm/convnext_tiny: drop_path_rate=0 differs from its default"
same timm timm_3 && fail "timm/convnext_tiny: drop_path_rate=0.3 changed nothing"

# ResNet-18's layer1.0.bn2.weight (64 floats) after a step at lr 0: all 0 with
# zero_init_residual=true, torchvision's 1 without.
zero_bytes() {  # the nonzero bytes of the tensor's data (offsets: after the 8 + header bytes)
  local file="$work/$1/exported_models/exported_last.safetensors" row header
  row=$("$tool" list "$file" | awk -F'\t' '$2 == "layer1.0.bn2.weight"')
  [ -n "$row" ] || { echo "no layer1.0.bn2.weight"; return; }
  header=$(od -An -t u8 -N8 "$file" | tr -d ' ')
  tail -c +$((8 + header + $(cut -f5 <<<"$row") + 1)) "$file" | head -c "$(cut -f6 <<<"$row")" |
    tr -d '\000' | wc -c
}
steps=1 run resnet --model resnet18 --image-size 32 --lr 0
steps=1 run resnet_zero --model resnet18 --image-size 32 --lr 0 --model-arg zero_init_residual=true
[ "$(zero_bytes resnet_zero)" = 0 ] || fail "zero_init_residual=true: layer1.0.bn2.weight is not 0"
[ "$(zero_bytes resnet)" != 0 ] || fail "resnet18's default layer1.0.bn2.weight is 0"

expect_only 2 "--model resnet18: --model-arg drop_path_rate=0.1: drop_path_rate applies to ViTs and ConvNeXts" -- \
  "$bin" train "${common[@]}" --out "$work/bad" --model resnet18 --model-arg drop_path_rate=0.1
expect_only 2 "--model-arg drop_path_rate=0.1: torchvision's ConvNeXts take stochastic_depth_prob" -- \
  "$bin" train "${common[@]}" --out "$work/bad" --model torchvision/convnext_tiny model_args.drop_path_rate=0.1
expect_only 2 "--model-arg img_size=64: the model arguments here are drop_path_rate" -- \
  "$bin" train "${common[@]}" --out "$work/bad" --model vit_t14 --model-arg img_size=64
expect_only 2 "--model-arg drop_path_rate=1: expected a rate in \[0, 1\)" -- \
  "$bin" train "${common[@]}" --out "$work/bad" --model vit_t14 --model-arg drop_path_rate=1
[ -e "$work/bad" ] && fail "a refused run wrote $work/bad"
e2e_finish
