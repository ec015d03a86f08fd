#!/usr/bin/env bash
# End-to-end tests of --embed-dim (LightlyTrain's embed_dim; the head's
# arithmetic is tests/test_embed_head.c): a SimCLR run with an embedding
# head logs it, checkpoints it and its optimizer state, exports the
# backbone without it (the same tensors as a run without one), and embed
# writes its width, also through the ONNX exports of embed and export
# (ONNX Runtime against embed's rows, tools/check_onnx.py, within 1e-5);
# DINO's default part is the teacher with the teacher's copy, --part
# student the student's.
# --resume with another --embed-dim is refused; the methods without an
# embedding model (distillation, dinov2) refuse it with one line, exit 2,
# nothing written.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init embed_dim
python=${LTC_TEST_PYTHON:-$build/test-venv/bin/python}
check="$(dirname "$0")/../../tools/check_onnx.py"

images="$work/images"
"$build/tests/e2e/make_images" "$images" 16 || fail "make_images"
common=(--data "$images" --batch-size 8 --image-size 32 --num-workers 1 --threads 2
        --method-arg hidden_dim=32 --method-arg output_dim=16)
names() { "$build/tools/safetensors_tool" list "$1" | sed -n 's/^tensor\t\([^\t]*\).*/\1/p'; }
# A checkpoint's tensor names: its header is JSON text.
checkpoint_has() { grep -a -q "\"$2\"" "$1"; }

run="$work/simclr"
output=$("$bin" train "${common[@]}" --method simclr --out "$run" --max-steps 2 --embed-dim 24 2>&1) ||
  fail "simclr --embed-dim 24: $output"
grep -q "embedding head: 512 features to 24" "$run/train.log" ||
  fail "train.log does not name the embedding head"
for name in embed_head.layers.0.weight embed_head.layers.0.bias \
  optimizer.embed_head.0.layers.0.weight; do
  checkpoint_has "$run/checkpoints/last.ckpt" "$name" || fail "the checkpoint lacks $name"
done
# The export is the backbone alone, as a run without the head exports it.
"$bin" train "${common[@]}" --method simclr --out "$work/plain" --max-steps 2 >/dev/null 2>&1 ||
  fail "simclr without --embed-dim"
[ "$(names "$run/exported_models/exported_last.safetensors")" = \
  "$(names "$work/plain/exported_models/exported_last.safetensors")" ] ||
  fail "the export's tensors differ from a run without an embedding head"

# embed writes the head's width; the ONNX export includes the head
# (check_onnx.py reads its own PPM images).
ppm="$work/ppm"
"$python" "$check" images "$ppm" 16 32 5 || fail "check_onnx.py images"
output=$("$bin" embed --checkpoint "$run/checkpoints/last.ckpt" --data "$ppm" \
  --out "$work/rows.npy" --format npy --image-size 32 --export-onnx "$work/model.onnx" 2>&1) ||
  fail "embed: $output"
printf '%s\n' "$output" | grep -q "embedding head (train's --embed-dim): 512 features to 24" ||
  fail "embed does not say it applies the embedding head: $output"
printf '%s\n' "$output" | grep -q "embedded 16 images x 24 dims" || fail "embed width: $output"
printf '%s\n' "$output" | grep -q "output embeddings (batch, 24)" || fail "ONNX width: $output"
# export's ONNX is the same embedding model (its state dict the backbone).
expect 0 "output embeddings \(batch, 24\)" -- "$bin" export --checkpoint \
  "$run/checkpoints/last.ckpt" --out "$work/export.onnx" --image-size 32
if "$python" -c "import onnx, onnxruntime, numpy" 2>/dev/null; then
  result=$("$python" "$check" compare "$work/model.onnx" "$ppm" "$work/rows.npy" 1e-5 \
    + "$work/export.onnx" "$ppm" "$work/rows.npy" 1e-5 2>&1) ||
    fail "ONNX Runtime against embed: $result"
else
  fail "the test environment's Python ($python) cannot import onnx and onnxruntime: make test makes it"
fi
# The exported backbone embeds to the backbone's width.
expect 0 "x 512 dims" -- "$bin" embed --checkpoint "$run/exported_models/exported_last.safetensors" \
  --data "$images" --out "$work/backbone.csv" --format csv --image-size 32

# DINO: the teacher's copy (the export part), and the student's.
dino="$work/dino"
output=$("$bin" train "${common[@]}" --method dino --out "$dino" --max-steps 2 --embed-dim 12 \
  --local-image-size 16 --local-views 2 --method-arg bottleneck_dim=8 2>&1) ||
  fail "dino --embed-dim 12: $output"
checkpoint_has "$dino/checkpoints/last.ckpt" teacher_embed_head.layers.0.weight ||
  fail "the DINO checkpoint lacks the teacher's embedding head"
for part in teacher student; do
  expect 0 "embedded 16 images x 12 dims" -- "$bin" embed --checkpoint \
    "$dino/checkpoints/last.ckpt" --part "$part" --data "$images" --out "$work/dino-$part.csv" \
    --format csv --image-size 32
done
cmp -s "$work/dino-teacher.csv" "$work/dino-student.csv" &&
  fail "DINO's teacher and student embeddings are the same after 2 steps"

# --resume with another width, or none, is refused (exit 2), naming it.
expect 2 "embed_dim=24, this one 8" -- "$bin" train "${common[@]}" --method simclr --out "$run" \
  --max-steps 2 --resume --embed-dim 8
expect 2 "embed_dim=24, this one 0" -- "$bin" train "${common[@]}" --method simclr --out "$run" \
  --max-steps 2 --resume
# The methods that read the backbone's features directly refuse it.
refuse_distillation "--embed-dim: --method distillation reads the backbone's features" \
  --embed-dim 16
expect_only 2 "--embed-dim: --method dinov2 reads" -- "$bin" train "${common[@]}" --model vit_t16 \
  --method dinov2 --out "$work/dinov2" --embed-dim 16 --max-steps 1
[ -e "$work/dinov2" ] && fail "the refused dinov2 run wrote its --out"
expect_only 2 "embed-dim" -- "$bin" train "${common[@]}" --method simclr --out "$work/negative" \
  --embed-dim -1
# 0 is no head (the default), for every method.
output=$("$bin" train "${common[@]}" --method simclr --out "$work/zero" --max-steps 1 --embed-dim 0 2>&1) ||
  fail "--embed-dim 0: $output"
grep -q "embedding head" "$work/zero/train.log" && fail "--embed-dim 0 made an embedding head"
e2e_finish
