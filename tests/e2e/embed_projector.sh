#!/usr/bin/env bash
# End-to-end test of `embed --format tensorboard` (src/embed/projector.h):
# the projector folder's four files for a generated folder (one corrupt file
# dropped), the tensor TSV equal to --format npy's floats to %.7g, the
# metadata's names in scan order with their folders, the sprite's size, and
# an existing projector refused without --overwrite. TensorBoard's own
# reader of these files: tools/check_projector.py (needs pip packages).
set -u
source "$(dirname "$0")/lib.bash"
e2e_init embed_projector

images="$work/images"
"$build/tests/e2e/make_images" "$images" 9 --corrupt 1 >/dev/null || fail "make_images"
embed=("$bin" embed --data "$images" --checkpoint tests/fixtures/pt/vit_dinov2.pt --image-size 16
       --batch-size 4 --num-workers 1)

out=$("${embed[@]}" --format tensorboard --out "$work/projector" 2>&1)
[ $? -eq 0 ] || fail "embed --format tensorboard: $out"
for pattern in "embedded 9 images x 32 dims" "as tensorboard to '$work/projector'" \
               "projector: 64 px thumbnails, 3 per row \(0 unreadable" \
               "view with: tensorboard --logdir '$work/projector'"; do
  printf '%s\n' "$out" | grep -q -E -- "$pattern" || fail "output lacks /$pattern/: $out"
done
for file in projector_config.pbtxt tensors.tsv metadata.tsv sprite.png; do
  [ -s "$work/projector/$file" ] || fail "no $file"
done
grep -q 'single_image_dim: 64' "$work/projector/projector_config.pbtxt" || fail "config's sprite"

(cd "$images" && find . -type f \( -name '*.jpg' -o -name '*.png' \) | sed 's|^\./||' |
  LC_ALL=C sort | grep -v '^corrupt/') >"$work/names.txt"
printf 'filename\tfolder\n' >"$work/expected_metadata.tsv"
awk '{ folder = $0; sub(/\/[^\/]*$/, "", folder); if (folder == $0) folder = "."
       printf "%s\t%s\n", $0, folder }' "$work/names.txt" >>"$work/expected_metadata.tsv"
cmp -s "$work/projector/metadata.tsv" "$work/expected_metadata.tsv" ||
  fail "metadata: $(diff "$work/projector/metadata.tsv" "$work/expected_metadata.tsv")"

# The sprite: 3 x 3 cells of 64 px (PNG IHDR width and height, big-endian).
[ "$(od -An -tu1 -j16 -N8 "$work/projector/sprite.png" | tr -s ' ')" = " 0 0 0 192 0 0 0 192" ] ||
  fail "sprite size: $(od -An -tu1 -j16 -N8 "$work/projector/sprite.png")"

"${embed[@]}" --out "$work/emb.npy" >/dev/null 2>&1 || fail "embed npy"
python3 - "$work/emb.npy" "$work/projector/tensors.tsv" <<'PY' || fail "tensors.tsv differs from the npy"
import struct, sys
data = open(sys.argv[1], "rb").read()
header = 10 + int.from_bytes(data[8:10], "little")
values = struct.unpack("<%df" % ((len(data) - header) // 4), data[header:])
rows = [line.split("\t") for line in open(sys.argv[2]).read().splitlines()]
assert len(rows) == 9 and all(len(row) == 32 for row in rows), "not 9 rows of 32"
text = [float(v) for row in rows for v in row]
worst = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(text, values))
assert worst <= 1e-6, worst
PY

expect 2 "already holds a projector \(projector_config.pbtxt\): pass --overwrite" -- \
  "${embed[@]}" --format tensorboard --out "$work/projector"
# A killed writer's temporary file inside the folder (its pid is gone) is
# removed by the next embed into it, which says so; a user's file stays.
dead_pid=$(sh -c 'echo $$')
touch "$work/projector/tensors.tsv.tmp.$dead_pid" "$work/projector/notes.txt.tmp.$dead_pid"
expect 0 "^removed 1 temporary file\(s\) left by a run killed while writing: .*tensors.tsv.tmp.$dead_pid" \
  -- "${embed[@]}" --format tensorboard --out "$work/projector" --overwrite
[ -e "$work/projector/tensors.tsv.tmp.$dead_pid" ] && fail "the projector's stale temporary file stayed"
[ -e "$work/projector/notes.txt.tmp.$dead_pid" ] || fail "a user's file was removed"
# In a run's plugin asset folder it belongs to the run's TensorBoard.
expect 0 "view with: tensorboard --logdir '$work/run'\$" -- \
  "${embed[@]}" --format tensorboard --out "$work/run/plugins/org_tensorflow_tensorboard_projector"
e2e_finish
