#!/usr/bin/env bash
# End-to-end tests of PyTorch .pt files on the command line (the reader:
# tests/test_pt_reader.c): embed with a DINOv2-layout .pt (as LightlyTrain
# exports one) gives the same bytes as with its safetensors twin; export
# turns it into safetensors; train's --checkpoint reads a .pt and names its
# tensors when they do not fit; damaged and hostile files are one line and
# exit 2.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init weights_pt

fixtures=tests/fixtures/pt
images="$work/images"
"$build/tests/e2e/make_images" "$images" 6 >/dev/null || fail "make_images"
embed=("$bin" embed --data "$images" --image-size 16 --batch-size 3 --num-workers 1)

"${embed[@]}" --checkpoint "$fixtures/vit_dinov2.pt" --out "$work/pt.npy" >/dev/null 2>&1 ||
  fail "embed with vit_dinov2.pt"
"${embed[@]}" --checkpoint "$fixtures/vit_dinov2.safetensors" --out "$work/twin.npy" \
  >/dev/null 2>&1 || fail "embed with vit_dinov2.safetensors"
cmp -s "$work/pt.npy" "$work/twin.npy" || fail "the .pt and its safetensors twin embed differently"

"$bin" export --checkpoint "$fixtures/vit_dinov2.pt" --out "$work/vit.safetensors" >/dev/null 2>&1 ||
  fail "export of vit_dinov2.pt"
"${embed[@]}" --checkpoint "$work/vit.safetensors" --out "$work/export.npy" >/dev/null 2>&1 ||
  fail "embed with the export of the .pt"
cmp -s "$work/pt.npy" "$work/export.npy" || fail "the .pt's export embeds differently"

# train reads the .pt as initial weights: mixed.pt's tensors are no ResNet.
# The option is named once ("train: --checkpoint: PATH: ...", was
# "--checkpoint: --checkpoint PATH: ...").
expect 2 "train: --checkpoint: [^ ]*mixed.pt: resnet18: weights do not match the model: .*unexpected: conv.weight, half" -- \
  "$bin" train --data "$images" --method simclr --model resnet18 --checkpoint "$fixtures/mixed.pt" \
  --out "$work/run" --max-steps 1
[ -e "$work/run" ] && fail "the refused run wrote $work/run"
expect 2 "^lightly-train-c train: --checkpoint: $work/nope.safetensors: cannot open" -- \
  "$bin" train --data "$images" --method simclr --model resnet18 \
  --checkpoint "$work/nope.safetensors" --out "$work/run" --max-steps 1

# A known name's cached file must hold the name's model: a ResNet-18 put
# in the cache as dinov2/vitb14's file is refused (was embedded as it was).
cached="$work/cache/models/hub/models--timm--vit_base_patch14_reg4_dinov2.lvd142m/main"
mkdir -p "$cached"
cp "$fixtures/resnet18_expanded.pt" "$cached/model.safetensors"
expect 2 "dinov2/vitb14.*vit_b14_reg4 does not match the file, which holds a resnet18" -- \
  env LIGHTLY_TRAIN_CACHE_DIR="$work/cache" HF_HOME="$work/hf" HF_HUB_OFFLINE=1 \
  "${embed[@]}" --checkpoint dinov2/vitb14 --out "$work/named.npy"
[ -e "$work/named.npy" ] && fail "embed wrote $work/named.npy"

: >"$work/empty.pt"
expect_only 2 "^lightly-train-c export: --checkpoint: $work/empty.pt: an empty file \(0 bytes\), not weights" -- \
  "$bin" export --checkpoint "$work/empty.pt" --out "$work/x.safetensors"
printf '\200\004\225\015\000\000\000\000\000\000\000}\224\214\001w\224G?\370\000\000\000\000\000\000s.' >"$work/pickle.pt"
expect_only 2 "^lightly-train-c embed: --checkpoint: $work/pickle.pt: a bare pickle \(pickle.dump\), not a PyTorch file" -- \
  "${embed[@]}" --checkpoint "$work/pickle.pt" --out "$work/x.npy"
head -c 3000 "$fixtures/vit_dinov2.pt" >"$work/truncated.pt"
expect 2 "truncated.pt: zip: " -- "${embed[@]}" --checkpoint "$work/truncated.pt" --out "$work/x.npy"
# A pickle that calls os.system: refused by name, nothing runs.
{
  printf '\200\002\212\012\154\374\234\106\371\040\152\250\120\031\056'  # magic number
  printf '\200\002M\351\003.'                                             # protocol 1001
  printf '\200\002}X\015\000\000\000little_endian\210s.'                  # sys_info
  printf '\200\002cposix\nsystem\nX\007\000\000\000touch x\205R.'         # os.system("touch x")
} >"$work/hostile.pt"
program=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
expect 2 "global posix.system is not allowed" -- \
  env -C "$work" "$program" embed --data "$images" --checkpoint hostile.pt --out x.npy
[ -e "$work/x" ] && fail "the hostile pickle ran"
e2e_finish
