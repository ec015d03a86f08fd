#!/usr/bin/env bash
# End-to-end tests of the Ultralytics YOLO students (src/nn/yolo.h) through
# `train`, `embed` and `export`: every method one step on yolo11n (its
# backbone holds every block kind: C3k2 with C3k, SPPF, C2PSA), LightlyTrain's
# default `distillation` from a small random ViT teacher (make_backbone:
# nothing is downloaded) also on yolov8n; the export holds the whole
# detection model in Ultralytics' names, its neck and head exactly as
# initialised (as LightlyTrain's optimizer never sees them) and its
# backbone trained; `embed` reads it back (pooled features, 256 wide);
# a user's checkpoint of other than 80 classes trains, exports and resumes;
# YOLO26 (its SPPF with a shortcut, its end-to-end Detect head of 4 box
# outputs, one-to-one copies and no DFL) trains, exports and reads back, and
# so do its segmentation, pose, semantic segmentation and depth models and
# a classification model, and a YOLO-World model;
# a 4-channel YOLO is refused in one line (exit 2); YOLOv6 (Convs with
# ReLU) on 2 CPU ranks with synchronised BatchNorm: one step equals one
# process's (before 2026-11-30 the ranks' backward lost the ReLU mask of
# these units: 812 times the tensor's norm off).
set -u
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/mpi.bash"
e2e_init train_yolo
mpi_require
export OMP_WAIT_POLICY=PASSIVE

images="$work/images"
"$build/tests/e2e/make_images" "$images" 12 >/dev/null || fail "make_images"
"$build/tests/e2e/make_backbone" "$work/vit_t14.safetensors" vit_t14 5 56 ||
  fail "make_backbone vit_t14"
common=(--data "$images" --batch-size 4 --image-size 56 --num-workers 1 --threads 2 --seed 3)
teacher=(--method-arg "teacher=$work/vit_t14.safetensors")
tool="$build/tools/safetensors_tool"

# `run NAME MODEL METHOD STEPS [ARGS...]`: a finite train_loss in the last record.
run() {
  local name=$1 model=$2 method=$3 steps=$4
  shift 4
  local output
  output=$("$bin" train "${common[@]}" --out "$work/$name" --model "$model" --method "$method" \
    --max-steps "$steps" "$@" 2>&1) || { fail "$name: train failed: $output"; return; }
  local loss
  loss=$(tail -n 1 "$work/$name/metrics.jsonl" | sed -n 's|.*"train_loss": \([^,}]*\).*|\1|p')
  case $loss in ''|*nan*|*inf*|null) fail "$name: train_loss is '$loss'" ;; esac
}

# `has_entries FILE ENTRY...`: each "name<TAB>dtype<TAB>shape" is in the
# safetensors file's listing (the listing is left in $listing).
has_entries() {
  local file=$1 entry
  shift
  listing=$("$tool" list "$file")
  for entry in "$@"; do
    printf '%s\n' "$listing" | grep -q -F "$entry" || fail "$file lacks $entry"
  done
}

# `pt_reads_back NAME`: the run NAME's exported_last.pt, read by `export`,
# gives its exported_last.safetensors' tensors exactly.
pt_reads_back() {
  local exported="$work/$1/exported_models"
  "$bin" export --checkpoint "$exported/exported_last.pt" --out "$work/$1.back.safetensors" \
    >/dev/null 2>&1 &&
    "$build/tests/e2e/compare_weights" "$exported/exported_last.safetensors" \
      "$work/$1.back.safetensors" 0 0 >/dev/null ||
    fail "$1: exported_last.pt does not read back to its exported_last.safetensors"
}

for method in simclr dino byol vicreg barlowtwins; do
  run "$method" ultralytics/yolo11n.yaml "$method" 1
done
for method in distillation distillationv1 distillationv2; do
  run "$method" ultralytics/yolo11n.yaml "$method" 1 "${teacher[@]}"
done
run v8 ultralytics/yolov8n.yaml distillation 1 "${teacher[@]}"
grep -q "train: yolov8n, distillation" "$work/v8/train.log" || fail "train.log does not name yolov8n"
grep -q "base 1.8 at batch 1536, sqrt-scaled to batch 4), weight decay 1e-06" "$work/v8/train.log" ||
  fail "distillation into a YOLO is not LARS 1.8, wd 1e-6 (a convolutional student's defaults)"

# The export: the whole DetectionModel state dict, neck and head as
# initialised (their BatchNorms' num_batches_tracked 0: they never ran).
# Two runs of 1 and 2 steps from the same seed: the head and neck equal,
# the backbone not.
run steps2 ultralytics/yolov8n.yaml distillation 2 "${teacher[@]}"
one="$work/v8/exported_models/exported_last.safetensors"
two="$work/steps2/exported_models/exported_last.safetensors"
has_entries "$one" "model.0.conv.weight	F32	16,3,3,3" "model.22.dfl.conv.weight	F32	1,16,1,1" \
  "model.22.cv3.2.2.bias	F32	80"
for prefix in model.12. model.22.; do
  "$tool" extract "$one" "$prefix" "$work/one.st" >/dev/null && "$tool" extract "$two" "$prefix" "$work/two.st" >/dev/null ||
    fail "extract $prefix"
  "$build/tests/e2e/compare_weights" "$work/one.st" "$work/two.st" 0 0 >/dev/null ||
    fail "$prefix (neck / head) changed in training"
done
"$tool" extract "$one" model.0. "$work/one.st" >/dev/null && "$tool" extract "$two" model.0. "$work/two.st" >/dev/null
"$build/tests/e2e/compare_weights" "$work/one.st" "$work/two.st" 0 0 >/dev/null 2>&1 &&
  fail "the backbone's first conv did not train"

# exported_last.pt: Ultralytics' checkpoint (tests/test_ultralytics_export.c
# checks its structure, tools/check_ultralytics_export.py that Ultralytics
# loads and fine-tunes it); our reader takes it back to the same tensors.
[ -s "$work/v8/exported_models/exported_last.pt" ] || fail "no exported_last.pt"
pt_reads_back v8
"$bin" export --checkpoint "$one" --out "$work/again.pt" >/dev/null 2>&1 || fail "export --out .pt of a YOLO"
"$bin" export --checkpoint "$work/again.pt" --out "$work/again.safetensors" >/dev/null 2>&1 ||
  fail "export of the exported .pt failed"
"$build/tests/e2e/compare_weights" "$one" "$work/again.safetensors" 0 0 >/dev/null ||
  fail "export --out .pt of a YOLO does not read back to exported_last.safetensors"

# A user's fine-tuned checkpoint (a Detect head for the 3 classes of their
# dataset, not COCO's 80), in Ultralytics' .pt: the student takes its class
# count, trains, and exports the same head (exported_last.pt reads back to
# the safetensors); a resume (no --checkpoint then) builds the same model
# from the run's last.ckpt.
"$build/tests/e2e/make_backbone" "$work/nc3.safetensors" ultralytics/yolov8n.yaml 7 56 3 >/dev/null &&
  "$bin" export --checkpoint "$work/nc3.safetensors" --out "$work/nc3.pt" >/dev/null 2>&1 ||
  fail "a yolov8n .pt of 3 classes"
run nc3 ultralytics/yolov8n.yaml simclr 2 --checkpoint "$work/nc3.pt"
nc3="$work/nc3/exported_models/exported_last.safetensors"
"$tool" list "$nc3" | grep -q -F "model.22.cv3.2.2.bias	F32	3" ||
  fail "the export's head is not the checkpoint's, of 3 classes"
"$tool" extract "$nc3" model.22. "$work/one.st" >/dev/null &&
  "$tool" extract "$work/nc3.safetensors" model.22. "$work/two.st" >/dev/null &&
  "$build/tests/e2e/compare_weights" "$work/one.st" "$work/two.st" 0 0 >/dev/null ||
  fail "the 3-class head is not the checkpoint's"
pt_reads_back nc3
output=$("$bin" train "${common[@]}" --out "$work/nc3" --model ultralytics/yolov8n.yaml --method simclr \
  --max-steps 2 --resume 2>&1) || fail "resume of the 3-class run: $output"

# embed reads the export back: the pooled last backbone layer (yolov8n: 256).
output=$("$bin" embed --data "$images" --checkpoint "$one" --out "$work/emb.csv" --image-size 64 \
  --num-workers 1 2>&1) || fail "embed failed: $output"
header=$(head -n 1 "$work/emb.csv")
case $header in *embedding_255) ;; *) fail "embed: not 256 features: ${header: -40}" ;; esac

# YOLO26: the default method's one step, the export's end-to-end head, the
# .pt back to the safetensors, embed of the .pt (the pooled C2PSA: 256).
run y26 ultralytics/yolo26n.yaml distillation 1 "${teacher[@]}"
y26="$work/y26/exported_models/exported_last.safetensors"
has_entries "$y26" "model.23.cv2.0.2.weight	F32	4,16,1,1" "model.23.one2one_cv2.2.2.bias	F32	4" \
  "model.23.one2one_cv3.1.1.1.conv.weight	F32	80,80,1,1" "model.22.m.0.1.attn.pe.conv.weight	F32	128,1,3,3"
printf '%s\n' "$listing" | grep -q dfl && fail "the yolo26n export has a DFL conv"
pt_reads_back y26
output=$("$bin" embed --data "$images" --checkpoint "$work/y26/exported_models/exported_last.pt" \
  --out "$work/emb26.csv" --image-size 64 --num-workers 1 2>&1) || fail "embed of yolo26n failed: $output"
header=$(head -n 1 "$work/emb26.csv")
case $header in *embedding_255) ;; *) fail "embed yolo26n: not 256 features: ${header: -40}" ;; esac

# A segmentation model (yolo26n-seg: Segment26, its Proto26 prototypes with
# a ConvTranspose2d): trains the same backbone, exports its whole head,
# which reads back.
run seg ultralytics/yolo26n-seg.yaml simclr 1
seg="$work/seg/exported_models/exported_last.safetensors"
has_entries "$seg" "model.23.proto.upsample.weight	F32	64,64,2,2" "model.23.proto.semseg.2.bias	F32	80" \
  "model.23.one2one_cv4.2.2.weight	F32	32,32,1,1"
pt_reads_back seg

# A pose model (yolo26n-pose: Pose26, with its RealNVP flow model and
# keypoint heads) likewise.
run pose ultralytics/yolo26n-pose.yaml simclr 1
pose="$work/pose/exported_models/exported_last.safetensors"
has_entries "$pose" "model.23.flow_model.mask	F32	6,2" "model.23.cv4_kpts.2.weight	F32	51,85,1,1" \
  "model.23.one2one_cv4_sigma.0.bias	F32	34"
pt_reads_back pose

# YOLO26's semantic segmentation and depth models (SemanticSegment on the
# neck's P3 and P4; Depth on P3 ... P5 with its calibration buffers): the
# same backbone trains, the whole model exports and reads back.
run sem ultralytics/yolo26n-sem.yaml simclr 1
has_entries "$work/sem/exported_models/exported_last.safetensors" \
  "model.17.classifier.1.weight	F32	19,64,1,1" "model.17.aux_head.0.conv.weight	F32	64,128,3,3"
pt_reads_back sem
run depth ultralytics/yolo26n-depth.yaml simclr 1
has_entries "$work/depth/exported_models/exported_last.safetensors" "model.23.cal_b	F32	1" \
  "model.23.head.1.weight	F32	128,128,2,2" "model.23.proj.2.conv.weight	F32	256,256,1,1"
pt_reads_back depth

# YOLO-World (yolov8-world.yaml: a WorldModel, task detect): YOLOv8's
# backbone trains; the C2fAttn neck (gl from the 512-wide text embeddings),
# ImagePoolingAttn and WorldDetect (class stacks ending in 512 embeddings,
# ContrastiveHeads with a 0-d logit_scale) export and read back.
run world ultralytics/yolov8s-world.yaml simclr 1
has_entries "$work/world/exported_models/exported_last.safetensors" \
  "model.12.attn.gl.weight	F32	128,512" "model.16.projections.2.weight	F32	256,512,1,1" \
  "model.23.cv3.0.2.weight	F32	512,128,1,1" "model.23.cv4.2.logit_scale	F32		"
pt_reads_back world

# A classification model (yolo11n-cls: no SPPF, C2PSA at layer 9, then
# Classify) trains its layers 0-9 and exports its ImageNet-sized head.
run cls ultralytics/yolo11n-cls.yaml simclr 1
grep -q "train: yolo11n-cls, simclr" "$work/cls/train.log" || fail "train.log does not name yolo11n-cls"
has_entries "$work/cls/exported_models/exported_last.safetensors" \
  "model.10.linear.weight	F32	1000,1280" "model.9.cv2.conv.weight	F32	256,256,1,1"
pt_reads_back cls

# YOLOv5u (yolov5nu: C3 blocks, a 6x6 stem of padding 2, YOLOv8's Detect
# head): trains its layers 0-8 and exports the whole model, which reads back.
run v5 ultralytics/yolov5nu.yaml dino 1
grep -q "train: yolov5nu, dino" "$work/v5/train.log" || fail "train.log does not name yolov5nu"
has_entries "$work/v5/exported_models/exported_last.safetensors" \
  "model.0.conv.weight	F32	16,3,6,6" "model.8.cv3.conv.weight	F32	256,256,1,1" \
  "model.24.dfl.conv.weight	F32	1,16,1,1"
pt_reads_back v5

# YOLO12 (yolo12n: A2C2f with area attention in its layers 6 and 8, trained)
# likewise, and an image size whose P4 does not split into 4 areas refused.
run y12 ultralytics/yolo12n.yaml distillation 1 "${teacher[@]}"
has_entries "$work/y12/exported_models/exported_last.safetensors" \
  "model.6.m.1.1.attn.pe.conv.weight	F32	64,1,7,7" "model.11.m.0.m.1.cv2.conv.weight	F32	32,32,3,3"
pt_reads_back y12
expect_only 2 "area attention over 5x5 positions: 25 is not a multiple of its 4 areas" -- \
  "$bin" train --data "$images" --batch-size 4 --image-size 72 --num-workers 1 --threads 2 \
  --out "$work/y12_72" --model ultralytics/yolo12n.yaml --method simclr --max-steps 1

# 16-mixed, the GPU's default, on the ref backend (it stores activations in
# fp16 as the GPU does): the first loss within 1% of 32-true's. The convs'
# fp16 weight copy must follow the fp32 weights (it once stayed as
# allocated: every feature equal, SimCLR's loss stuck at ln(2 batch - 1)).
first_loss() { head -n 1 "$work/$1/metrics.jsonl" | sed -n 's|.*"train_loss": \([^,}]*\).*|\1|p'; }
for precision in 16-mixed 32-true; do
  run "ref_$precision" ultralytics/yolov8n.yaml simclr 1 --backend ref --precision "$precision"
done
awk -v a="$(first_loss ref_16-mixed)" -v b="$(first_loss ref_32-true)" \
  'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01 * b) }' ||
  fail "16-mixed's first loss $(first_loss ref_16-mixed) is not 32-true's $(first_loss ref_32-true)"

expect_only 2 "yolo11n takes 3 input channels, not 4" -- \
  "$bin" train "${common[@]}" --out "$work/four" --model ultralytics/yolo11n.yaml --method simclr \
  --num-channels 4 --normalize 0.5,0.5,0.5,0.5:0.2,0.2,0.2,0.2 --max-steps 1

# (the bound and floor of tests/e2e/shufflenet.sh's rank check; measured 0.0008 of it)
v6=(--data "$images" --batch-size 4 --image-size 64 --num-workers 1 --threads 1 --seed 3
    --model ultralytics/yolov6n.yaml --method simclr --method-arg hidden_dim=64
    --method-arg output_dim=32 --max-steps 1)
"$bin" train "${v6[@]}" --out "$work/v6-one" >"$work/log" 2>&1 || fail "yolov6n: $(tail -3 "$work/log")"
mpi_run 2 "$bin" train "${v6[@]}" --out "$work/v6-two" >"$work/log" 2>&1 ||
  fail "yolov6n on 2 ranks: $(tail -3 "$work/log")"
result=$("$build/tests/e2e/compare_weights" --norm --floor 3e-5 "$work/v6-two/checkpoints/last.ckpt" \
  "$work/v6-one/checkpoints/last.ckpt" 0.05) || fail "yolov6n: 2 ranks differ from one process: $result"
echo "yolov6n, 2 ranks against one process: $result"
e2e_finish
