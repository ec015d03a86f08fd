#!/usr/bin/env bash
# End-to-end tests of the ONNX export (export --format onnx, embed
# --export-onnx; docs/onnx.md) against the real components, ONNX's checker
# and ONNX Runtime's CPU provider in the test environment (LTC_TEST_PYTHON,
# build/test-venv; missing is a failure: make test makes it). For each
# model tools/check_onnx.py runs the checker (full_check) and ONNX
# Runtime on the images embed embedded, normalised with the model's
# metadata, and compares row by row with embed's .npy:
# - fp32 within 1e-5 x the row's largest |value| (measured: 3e-7 .. 1.4e-6);
# - fp16 (weights, activations, input and output) within 1e-2: float16
#   keeps 11 significant bits (a relative rounding of 4.9e-4 per value), and
#   the embedding has been rounded at the input, in every weight and
#   through the layers (measured: 8e-4 .. 2e-3 on the CPU provider, which
#   runs the float16 nodes it has no float16 kernel for in float32, casts
#   around them); a wrong graph is off by the values themselves (and is
#   caught at 1e-5 by its fp32 export first).
# Models: a ResNet-18 trained one step at 32 px (its running statistics
# moved; the export takes the training size from the checkpoint), a
# ResNet-50 at 64 px, DINOv2-style ViTs (vit_t14: class position, its
# positions resampled from a 4x4 to a 5x5 grid, mean pooling; vit_t14_reg4:
# registers, class token), DINOv3 ViTs (dinov3/vitt16: RoPE, registers,
# LayerScale, class token, also at opset 18 (GELU as its erf formula) and
# with external data; dinov3/vits16plus: SwiGLU), Ultralytics YOLOs at 64 px
# (yolov8n: C2f, SPPF; yolo11n: C3k2 with Bottlenecks and C3k, SPPF, C2PSA;
# yolo11m: C3k everywhere, 4 attention heads; yolo11n in fp16 too; yolo26n:
# SPPF without cv1's SiLU, with its shortcut; yolo11n-cls: C2PSA straight
# after C3k2, BatchNorm eps 1e-5; yolov5nu: C3 blocks, a 6x6 stem of
# padding 2; yolo12n: A2C2f's area attention (4 areas at P4), also
# calibrated; yolo12l: its gamma residual; yolov5n6u: the P6/64 stage;
# yolo26n-p6: a P6 stage, SPPF with an unactivated cv1 and no shortcut;
# yolov6n: ReLU, rows of Convs), their
# norms, biases and tokens random (make_backbone random-norms) so that a
# mixed-up parameter shows. With random running statistics a random YOLO's
# deep features are the same at every position (they shrink ~3x a conv),
# so its attention averages uniformly and a graph that swapped q and k
# would pass: a yolo11n whose statistics are fitted to images like these
# (make_backbone calibrated) checks the attention, within 1e-4: its
# activations are realistic, and float32 rounding between two correct
# implementations is ~1e-5 of its embedding there (measured: ours against
# ONNX Runtime 5e-6 .. 1.7e-5, ONNX Runtime with and without its graph
# optimisations against itself 5e-6 .. 1.7e-5), where q and k swapped
# are off by 0.45, the scale of head_dim by 0.076. ConvNeXt-Tiny at 64 px
# in torchvision's naming (the mean of the last stage) and DINOv3's (its
# final norm on every position, then the mean; fp16 too), random-norms
# drawing their layer scales in [0.2, 1]: at the initial 1e-6 a graph
# without any block's branch passes at 1e-5 (measured 2.4e-6).
# ShuffleNetV2 x0.5 (fp16 too) and x2.0 at 70 px (maps of 18, 9, 5 and 3:
# the shuffle's reshapes at odd sizes). Then bad
# input: exit 2, one line, nothing written.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init onnx
python=${LTC_TEST_PYTHON:-$build/test-venv/bin/python}
check="$(dirname "$0")/../../tools/check_onnx.py"
if ! "$python" -c "import onnx, onnxruntime, numpy" 2>/dev/null; then
  fail "the test environment's Python ($python) cannot import onnx, onnxruntime and numpy: make test makes it (tools/test_venv.sh)"
  e2e_finish
fi
make_backbone="$build/tests/e2e/make_backbone"

for size in 32 56 64 70; do
  "$python" "$check" images "$work/img$size" 5 "$size" "$size" || fail "images $size"
done

# ResNet-18 trained one step at 32 px: the default --image-size is the
# training size; --format auto is ONNX for *.onnx.
"$bin" train --data "$work/img32" --out "$work/run" --method simclr --model resnet18 \
  --image-size 32 --batch-size 5 --max-steps 1 --num-workers 1 --threads 2 >/dev/null 2>&1 ||
  fail "train resnet18"
ckpt="$work/run/checkpoints/last.ckpt"
expect_only 0 "^exported backbone of resnet18 \(11176512 parameters\) from .*last.ckpt to .*r18.onnx as ONNX \(opset 25, fp32, input images \(batch, 3, 32, 32\), output embeddings \(batch, 512\)\)$" \
  -- "$bin" export --checkpoint "$ckpt" --out "$work/r18.onnx"
expect 0 "as ONNX \(opset 25, fp16," \
  -- "$bin" export checkpoint="$ckpt" out="$work/r18_fp16.onnx" format=onnx precision=16-true
"$bin" embed --data "$work/img32" --checkpoint "$ckpt" --image-size 32 --out "$work/r18.npy" \
  >/dev/null || fail "embed resnet18"

# ResNet-50 through embed --export-onnx.
"$make_backbone" "$work/r50.safetensors" resnet50 4 224 - random-norms || fail "make_backbone r50"
expect 0 "^wrote the embedding model as ONNX \(opset 25, fp32, input images \(batch, 3, 64, 64\), output embeddings \(batch, 2048\)\) to '.*r50.onnx'$" \
  -- "$bin" embed --data "$work/img64" --checkpoint "$work/r50.safetensors" --image-size 64 \
  --out "$work/r50.npy" --export-onnx "$work/r50.onnx"

# DINOv2-style ViTs: positions made for 56 px (4 x 4 patches of 14).
"$make_backbone" "$work/vit.safetensors" vit_t14 5 56 0.5 random-norms || fail "make_backbone vit_t14"
expect 0 "input images \(batch, 3, 70, 70\), output embeddings \(batch, 192\)" \
  -- "$bin" export --checkpoint "$work/vit.safetensors" --out "$work/vit.onnx" --image-size 70
"$bin" embed --data "$work/img70" --checkpoint "$work/vit.safetensors" --image-size 70 \
  --out "$work/vit.npy" >/dev/null || fail "embed vit_t14"
"$make_backbone" "$work/reg.safetensors" vit_t14_reg4 6 56 0.5 random-norms ||
  fail "make_backbone vit_t14_reg4"
"$bin" embed --data "$work/img56" --checkpoint "$work/reg.safetensors" --image-size 56 \
  --vit-pool cls --out "$work/reg.npy" --export-onnx "$work/reg.onnx" >/dev/null ||
  fail "embed vit_t14_reg4"

# DINOv3 ViTs.
"$make_backbone" "$work/v3.safetensors" dinov3/vitt16 7 64 0.5 random-norms ||
  fail "make_backbone dinov3/vitt16"
for variant in "v3" "v3_fp16 --precision fp16" "v3_opset18 --opset 18" "v3_external --external-data"; do
  read -r name options <<<"$variant"
  # shellcheck disable=SC2086  # options: words
  "$bin" export --checkpoint "$work/v3.safetensors" --out "$work/$name.onnx" --image-size 64 \
    $options >/dev/null || fail "export $variant"
done
[ -s "$work/v3_external.onnx.data" ] || fail "--external-data wrote no v3_external.onnx.data"
[ "$(stat -c %s "$work/v3_external.onnx")" -lt 1000000 ] || fail "--external-data: weights inline"
"$bin" embed --data "$work/img64" --checkpoint "$work/v3.safetensors" --image-size 64 \
  --out "$work/v3.npy" >/dev/null || fail "embed dinov3/vitt16"
"$make_backbone" "$work/plus.safetensors" dinov3/vits16plus 8 32 0.5 random-norms ||
  fail "make_backbone dinov3/vits16plus"
"$bin" embed --data "$work/img32" --checkpoint "$work/plus.safetensors" --image-size 32 \
  --vit-pool mean --out "$work/plus.npy" --export-onnx "$work/plus.onnx" >/dev/null ||
  fail "embed dinov3/vits16plus"

# Ultralytics YOLOs (the part LightlyTrain trains, pooled).
for variant in "v8n yolov8n random-norms" "y11n yolo11n random-norms" "y11m yolo11m random-norms" \
  "y11c yolo11n calibrated" "y26n yolo26n random-norms" "y11cls yolo11n-cls random-norms" \
  "v5nu yolov5nu random-norms" "y12n yolo12n random-norms" "y12c yolo12n calibrated" \
  "y12l yolo12l random-norms" "v5p6 yolov5n6u.pt random-norms" "y26p6 yolo26n-p6 random-norms" \
  "v6n yolov6n random-norms"; do
  read -r name model norms <<<"$variant"
  [[ $model == *.pt ]] || model=$model.yaml  # yolov5n6u: no YAML of its name
  "$make_backbone" "$work/$name.safetensors" "ultralytics/$model" 9 64 - "$norms" ||
    fail "make_backbone $model $norms"
  "$bin" embed --data "$work/img64" --checkpoint "$work/$name.safetensors" --image-size 64 \
    --out "$work/$name.npy" --export-onnx "$work/$name.onnx" >/dev/null || fail "embed $model"
done
# ConvNeXts and ShuffleNetV2s (at 70 px: odd sizes after the first halvings).
for variant in "cnx torchvision/convnext_tiny" "cnx3 dinov3/convnext-tiny" \
  "sn torchvision/shufflenet_v2_x0_5" "sn2 torchvision/shufflenet_v2_x2_0"; do
  read -r name model <<<"$variant"
  "$make_backbone" "$work/$name.safetensors" "$model" 10 64 - random-norms ||
    fail "make_backbone $model"
  size=64
  [[ $model == *shufflenet* ]] && size=70
  "$bin" embed --data "$work/img$size" --checkpoint "$work/$name.safetensors" --image-size $size \
    --out "$work/$name.npy" --export-onnx "$work/$name.onnx" >/dev/null || fail "embed $model"
done
expect_only 0 "^exported backbone of dinov3/convnext-tiny \(27820128 parameters\) .* as ONNX \(opset 25, fp16, input images \(batch, 3, 64, 64\), output embeddings \(batch, 768\)\)$" \
  -- "$bin" export --checkpoint "$work/cnx3.safetensors" --out "$work/cnx3_fp16.onnx" \
  --precision fp16 --image-size 64
"$bin" export --checkpoint "$work/sn.safetensors" --out "$work/sn_fp16.onnx" --precision fp16 \
  --image-size 70 >/dev/null || fail "export shufflenet_v2_x0_5 in fp16"
expect_only 0 "^exported backbone of yolo11n \(1365472 parameters\) .* as ONNX \(opset 25, fp16, input images \(batch, 3, 64, 64\), output embeddings \(batch, 256\)\)$" \
  -- "$bin" export --checkpoint "$work/y11n.safetensors" --out "$work/y11n_fp16.onnx" --precision fp16 \
  --image-size 64

"$python" "$check" compare \
  "$work/r18.onnx" "$work/img32" "$work/r18.npy" 1e-5 + \
  "$work/r18_fp16.onnx" "$work/img32" "$work/r18.npy" 1e-2 --fp16 + \
  "$work/r50.onnx" "$work/img64" "$work/r50.npy" 1e-5 + \
  "$work/vit.onnx" "$work/img70" "$work/vit.npy" 1e-5 + \
  "$work/reg.onnx" "$work/img56" "$work/reg.npy" 1e-5 + \
  "$work/v3.onnx" "$work/img64" "$work/v3.npy" 1e-5 + \
  "$work/v3_fp16.onnx" "$work/img64" "$work/v3.npy" 1e-2 --fp16 + \
  "$work/v3_opset18.onnx" "$work/img64" "$work/v3.npy" 1e-5 + \
  "$work/v3_external.onnx" "$work/img64" "$work/v3.npy" 1e-5 + \
  "$work/plus.onnx" "$work/img32" "$work/plus.npy" 1e-5 + \
  "$work/v8n.onnx" "$work/img64" "$work/v8n.npy" 1e-5 + \
  "$work/y11n.onnx" "$work/img64" "$work/y11n.npy" 1e-5 + \
  "$work/y11m.onnx" "$work/img64" "$work/y11m.npy" 1e-5 + \
  "$work/y11n_fp16.onnx" "$work/img64" "$work/y11n.npy" 1e-2 --fp16 + \
  "$work/y11c.onnx" "$work/img64" "$work/y11c.npy" 1e-4 + \
  "$work/y26n.onnx" "$work/img64" "$work/y26n.npy" 1e-5 + \
  "$work/y11cls.onnx" "$work/img64" "$work/y11cls.npy" 1e-5 + \
  "$work/v5nu.onnx" "$work/img64" "$work/v5nu.npy" 1e-5 + \
  "$work/y12n.onnx" "$work/img64" "$work/y12n.npy" 1e-5 + \
  "$work/y12c.onnx" "$work/img64" "$work/y12c.npy" 1e-4 + \
  "$work/y12l.onnx" "$work/img64" "$work/y12l.npy" 1e-5 + \
  "$work/v5p6.onnx" "$work/img64" "$work/v5p6.npy" 1e-5 + \
  "$work/y26p6.onnx" "$work/img64" "$work/y26p6.npy" 1e-5 + \
  "$work/v6n.onnx" "$work/img64" "$work/v6n.npy" 1e-5 + \
  "$work/cnx.onnx" "$work/img64" "$work/cnx.npy" 1e-5 + \
  "$work/cnx3.onnx" "$work/img64" "$work/cnx3.npy" 1e-5 + \
  "$work/cnx3_fp16.onnx" "$work/img64" "$work/cnx3.npy" 1e-2 --fp16 + \
  "$work/sn.onnx" "$work/img70" "$work/sn.npy" 1e-5 + \
  "$work/sn2.onnx" "$work/img70" "$work/sn2.npy" 1e-5 + \
  "$work/sn_fp16.onnx" "$work/img70" "$work/sn.npy" 1e-2 --fp16 ||
  fail "ONNX Runtime differs from embed (above)"

# Bad input: exit 2, one line naming the problem, nothing written.
expect_only 2 "image size 60: dinov3/vitt16 takes a multiple of its patch size 16$" \
  -- "$bin" export --checkpoint "$work/v3.safetensors" --out "$work/bad1.onnx" --image-size 60
expect_only 2 "--normalize 0.5,0.5,0.5:0.2,0,0.2: std 2 is 0, must be positive$" \
  -- "$bin" export --checkpoint "$work/vit.safetensors" --out "$work/bad2.onnx" \
  --normalize 0.5,0.5,0.5:0.2,0,0.2
expect_only 2 "--opset: .*18" \
  -- "$bin" export --checkpoint "$work/v3.safetensors" --out "$work/bad3.onnx" --opset 17
expect_only 2 "--precision applies to --format onnx" \
  -- "$bin" export --checkpoint "$work/v3.safetensors" --out "$work/bad4.safetensors" --precision fp16
expect_only 2 "--out .*bad5.safetensors: export writes onnx, which a .safetensors reader cannot read: name it \*\.onnx$" \
  -- "$bin" export --checkpoint "$work/v3.safetensors" --out "$work/bad5.safetensors" --format onnx
expect_only 2 "--out: '.*v3.onnx' exists \(pass --overwrite" \
  -- "$bin" export --checkpoint "$work/v3.safetensors" --out "$work/v3.onnx"
expect_only 2 "--export-onnx: '.*v3.onnx' exists \(pass --overwrite" \
  -- "$bin" embed --data "$work/img64" --checkpoint "$work/v3.safetensors" --image-size 64 \
  --out "$work/bad6.npy" --export-onnx "$work/v3.onnx"
expect_only 2 "image size 16: torchvision/convnext_tiny takes images of at least 32 px$" \
  -- "$bin" export --checkpoint "$work/cnx.safetensors" --out "$work/bad7.onnx" --image-size 16
for i in 1 2 3 4 5 6 7; do
  for file in "$work"/bad$i.*; do [ -e "$file" ] && fail "a refused command wrote $file"; done
done
e2e_finish
