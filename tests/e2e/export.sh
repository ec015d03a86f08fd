#!/usr/bin/env bash
# End-to-end tests of `lightly-train-c export`: a torchvision safetensors and
# checkpoints (from tests/e2e/make_checkpoint) exported to the same bytes as
# resnet_tool's resnet_save of the same model; the default part of a DINO
# checkpoint is its teacher; --overwrite; bad input exits 2 with one line; a
# killed export's temporary file is removed by the next one.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init export

# same FILE_A FILE_B WHAT: byte-identical files
same() { cmp -s "$1" "$2" || fail "$3: $1 and $2 differ"; }

# Sources: resnet18 initialised with seeds 1 and 2, and checkpoints holding
# the same models (student = seed 1, teacher = seed 2).
"$build/tools/resnet_tool" save --model 18 --seed 1 --out "$work/seed1.safetensors" >/dev/null ||
  fail "resnet_tool save seed 1"
"$build/tools/resnet_tool" save --model 18 --seed 2 --out "$work/seed2.safetensors" >/dev/null ||
  fail "resnet_tool save seed 2"
"$build/tests/e2e/make_checkpoint" "$work/dino.ckpt" --depth 18 --teacher --method dino \
  --export-part teacher_backbone || fail "make_checkpoint dino"
"$build/tests/e2e/make_checkpoint" "$work/simclr.ckpt" --depth 18 --method simclr ||
  fail "make_checkpoint simclr"

expect 0 "--checkpoint PATH" -- "$bin" export --help
expect 0 "export " -- "$bin" --help

# A torchvision safetensors exports to itself (load + save is the identity).
expect 0 "^exported backbone of resnet18 \(11176512 parameters\) from .*seed1.safetensors to .*out.safetensors$" \
  -- "$bin" export --checkpoint "$work/seed1.safetensors" --out "$work/out.safetensors"
same "$work/out.safetensors" "$work/seed1.safetensors" "safetensors export"
expect 2 "--out: '.*out.safetensors' exists \(pass --overwrite" \
  -- "$bin" export --checkpoint "$work/seed2.safetensors" --out "$work/out.safetensors"
same "$work/out.safetensors" "$work/seed1.safetensors" "refused export left the file"
# key=value spelling, replacing the file.
expect 0 "^exported backbone of resnet18" \
  -- "$bin" export checkpoint="$work/seed2.safetensors" out="$work/out.safetensors" overwrite=true
same "$work/out.safetensors" "$work/seed2.safetensors" "--overwrite"

# Checkpoints: the default part follows export_part (the DINO teacher).
expect 0 "^exported teacher_backbone of resnet18 .* to .*dino_default.safetensors$" \
  -- "$bin" export --checkpoint "$work/dino.ckpt" --out "$work/dino_default.safetensors"
same "$work/dino_default.safetensors" "$work/seed2.safetensors" "dino default part"
# LightlyTrain's part names (and key=value spelling) are the default part.
for part in model wrapped_model embedding_model; do
  expect 0 "^exported teacher_backbone of resnet18" -- "$bin" export checkpoint="$work/dino.ckpt" \
    part=$part out="$work/dino_$part.safetensors"
  same "$work/dino_$part.safetensors" "$work/seed2.safetensors" "dino part=$part"
done
expect 0 "^exported teacher_backbone of resnet18" \
  -- "$bin" export --checkpoint "$work/dino.ckpt" --part teacher --out "$work/dino_teacher.safetensors"
same "$work/dino_teacher.safetensors" "$work/seed2.safetensors" "dino --part teacher"
expect 0 "^exported backbone of resnet18" \
  -- "$bin" export --checkpoint "$work/dino.ckpt" --part student --out "$work/dino_student.safetensors" --format safetensors
same "$work/dino_student.safetensors" "$work/seed1.safetensors" "dino --part student"
expect 0 "^exported backbone of resnet18" \
  -- "$bin" export --checkpoint "$work/simclr.ckpt" --out "$work/simclr.safetensors"
same "$work/simclr.safetensors" "$work/seed1.safetensors" "simclr default part"

# Bad input: exit 2, one line naming the problem, nothing written.
expect 2 "no teacher backbone \(method simclr\)" \
  -- "$bin" export --checkpoint "$work/simclr.ckpt" --part teacher --out "$work/none1.safetensors"
expect 2 "part \"teacher\" needs a checkpoint" \
  -- "$bin" export --checkpoint "$work/seed1.safetensors" --part teacher --out "$work/none2.safetensors"
expect 2 "--part: expected one of backbone, teacher, student, got 'head'" \
  -- "$bin" export --checkpoint "$work/dino.ckpt" --part head --out "$work/none3.safetensors"
expect 2 "--format: expected one of auto, safetensors, onnx, torch, torch_model, got 'pickle'" \
  -- "$bin" export --checkpoint "$work/dino.ckpt" --format pickle --out "$work/none4.safetensors"
# An --out named for another format is refused before any work (torch.load
# would fail on the safetensors written), even with a missing --checkpoint.
for name in model.ckpt model.bin; do
  expect 2 "^lightly-train-c export: --out .*$name: export writes safetensors, which a \.[a-zA-Z]+ reader cannot read: name it \*\.safetensors$" \
    -- "$bin" export --checkpoint "$work/missing.ckpt" --out "$work/$name"
  [ -e "$work/$name" ] && fail "export wrote $work/$name"
done
expect 2 "^lightly-train-c export: --out .*torch.safetensors: export writes torch, which a \.safetensors reader cannot read: name it \*\.pt$" \
  -- "$bin" export --checkpoint "$work/dino.ckpt" --format torch --out "$work/torch.safetensors"
[ -e "$work/torch.safetensors" ] && fail "export wrote torch.safetensors"

# *.pt, *.pth (or --format torch): the state dict as torch.save writes it
# (LightlyTrain's exported_last.pt), read back to the safetensors' tensors;
# tests/test_pt_state_dict.c checks every family, tools/check_torch_export.py
# that torch.load and load_state_dict take it.
expect 0 "^exported teacher_backbone of resnet18 .* to .*dino.PTH$" \
  -- "$bin" export --checkpoint "$work/dino.ckpt" --out "$work/dino.PTH"
"$bin" export --checkpoint "$work/dino.PTH" --out "$work/dino_back.safetensors" >/dev/null 2>&1 ||
  fail "export of the .pth"
same "$work/dino_back.safetensors" "$work/seed2.safetensors" "the .pth read back"
# LightlyTrain's format names: torch_state_dict is torch, package_default auto.
expect 0 "to .*seed1.weights$" -- "$bin" export checkpoint="$work/seed1.safetensors" \
  out="$work/seed1.weights" format=torch_state_dict
"$bin" export --checkpoint "$work/seed1.weights" --out "$work/seed1_back.safetensors" >/dev/null 2>&1 ||
  fail "export of the torch_state_dict file"
same "$work/seed1_back.safetensors" "$work/seed1.safetensors" "format=torch_state_dict read back"
expect 0 "to .*seed1_default.safetensors$" -- "$bin" export checkpoint="$work/seed1.safetensors" \
  out="$work/seed1_default.safetensors" format=package_default
same "$work/seed1_default.safetensors" "$work/seed1.safetensors" "format=package_default"
# LightlyTrain's torch_model: the torchvision module itself (tests/
# test_torch_module_export.c checks its tree against torchvision's,
# tools/check_torch_export.py that torch.load runs it). It reads back
# as a checkpoint, to the same tensors; a ViT's is refused, as is an --out
# not named *.pt / *.pth.
expect 0 "to .*simclr_model.pt as a torchvision module" -- "$bin" export \
  checkpoint="$work/simclr.ckpt" out="$work/simclr_model.pt" format=torch_model part=embedding_model
"$bin" export --checkpoint "$work/simclr_model.pt" --out "$work/simclr_model_back.safetensors" \
  >/dev/null 2>&1 || fail "export of the torch_model file"
"$bin" export --checkpoint "$work/simclr.ckpt" --out "$work/simclr_direct.safetensors" \
  >/dev/null 2>&1 || fail "export of simclr.ckpt"
same "$work/simclr_model_back.safetensors" "$work/simclr_direct.safetensors" \
  "format=torch_model read back"
"$build/tests/e2e/make_backbone" "$work/vit.safetensors" vit_t14 1 >/dev/null || fail "make_backbone vit"
expect 2 "torch_model writes torchvision's ResNets, ShuffleNetV2s and ConvNeXts, not a ViT" \
  -- "$bin" export --checkpoint "$work/vit.safetensors" --out "$work/vit.pt" --format torch_model
[ -e "$work/vit.pt" ] && fail "a refused torch_model export wrote vit.pt"
expect 2 "name it \*.pt" -- "$bin" export --checkpoint "$work/simclr.ckpt" \
  --out "$work/simclr_model.safetensors" --format torch_model
expect 2 "missing.ckpt: cannot open: No such file or directory" \
  -- "$bin" export --checkpoint "$work/missing.ckpt" --out "$work/none5.safetensors"
echo "not a model" > "$work/notes.txt"
expect 2 "notes.txt: not weights: neither a safetensors file" \
  -- "$bin" export --checkpoint "$work/notes.txt" --out "$work/none6.safetensors"
head -c 1000 "$work/dino.ckpt" > "$work/truncated.ckpt"
expect 2 "truncated.ckpt: checkpoint tensors: header length" \
  -- "$bin" export --checkpoint "$work/truncated.ckpt" --out "$work/none7.safetensors"
expect 2 "--out is required" -- "$bin" export --checkpoint "$work/dino.ckpt"
expect 2 "--checkpoint is required" -- "$bin" export --out "$work/none8.safetensors"
for i in 1 2 3 4 5 6 7 8; do
  [ -e "$work/none$i.safetensors" ] && fail "a failed export wrote none$i.safetensors"
done
# An unwritable --out is bad input like any other path (exit 2, found before
# any work, the path named), as for train and embed.
expect 2 "--out: '.*notes.txt' is not a folder" \
  -- "$bin" export --checkpoint "$work/seed1.safetensors" --out "$work/notes.txt/x.safetensors"
[ -z "$(find "$work" -name '*.tmp.*')" ] || fail "a refused export left a temporary file"

# A killed export leaves its temporary file; the next export to the same
# --out removes it (and says so), and no other file that looks like one.
{ LTC_FAULT=kill-before-rename@1 "$bin" export --checkpoint "$work/seed1.safetensors" \
    --out "$work/killed.safetensors" >/dev/null 2>&1; } 2>/dev/null
[ -n "$(find "$work" -name 'killed.safetensors.tmp.*')" ] || fail "the killed export left no temporary file"
sh -c 'exit 0' & wait $!
dead=$!  # a process that has exited: its pid names no one
touch "$work/notes.txt.tmp.$dead"
expect 0 "^removed 1 temporary file\(s\) left by a run killed while writing: .*killed.safetensors.tmp" \
  -- "$bin" export --checkpoint "$work/seed1.safetensors" --out "$work/killed.safetensors"
[ -z "$(find "$work" -name 'killed.safetensors.tmp.*')" ] || fail "the next export kept the temporary file"
[ -e "$work/notes.txt.tmp.$dead" ] || fail "export removed a file it did not write"

e2e_finish
