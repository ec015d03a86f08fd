#!/usr/bin/env bash
# End-to-end tests of `embed`: a generated folder (nested folders, one corrupt
# file) embedded with a ResNet-18 safetensors from resnet_tool into every
# format; row counts = images - corrupt, filenames in sorted scan order, the
# same numbers in every format, identical output for 1 and 3 workers, a kill
# inside the npy pair's write, the usage errors (exit 2), and what the scan
# left out (a named pipe, another file) said as train says it.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init embed

images="$work/images"
"$build/tests/e2e/make_images" "$images" 12 --corrupt 1 || fail "make_images"
mkdir -p "$images/class1/deep/er"
cp "$images/class0/image0000.jpg" "$images/class1/deep/er/copy.jpg"
"$build/tools/resnet_tool" save --model 18 --seed 3 --out "$work/r18.safetensors" >/dev/null ||
  fail "resnet_tool save"

# The scan order (bytewise sorted relative paths) without the corrupt file.
(cd "$images" && find . -type f \( -name '*.jpg' -o -name '*.png' \) | sed 's|^\./||' |
  LC_ALL=C sort | grep -v '^corrupt/') >"$work/expected_names.txt"
expected_rows=$(wc -l <"$work/expected_names.txt")
[ "$expected_rows" -eq 13 ] || fail "expected 13 readable images, found $expected_rows"

common=(--data "$images" --checkpoint "$work/r18.safetensors" --image-size 32 --batch-size 5)

out=$("$bin" embed "${common[@]}" --num-workers 1 --out "$work/emb.npy" 2>&1)
[ $? -eq 0 ] || fail "embed npy exited non-zero: $out"
for pattern in "embedded 13 images x 512 dims" "as npy to '$work/emb.npy'" "images/s" \
               "skipped files: 1 \(rows dropped\)" "warning: skipping '.*broken0.jpg'"; do
  printf '%s\n' "$out" | grep -q -E -- "$pattern" || fail "embed output lacks /$pattern/: $out"
done
head -c 128 "$work/emb.npy" | grep -a -q "'shape': (13, 512)" || fail "npy header shape"
cmp -s "$work/emb.npy.filenames.txt" "$work/expected_names.txt" ||
  fail "npy filenames differ from the scan order: $(diff "$work/emb.npy.filenames.txt" "$work/expected_names.txt")"

# An existing --out is refused without --overwrite; with it, 3 workers give
# the same bytes as 1 (key=value spelling too).
expect 2 "exists \(pass --overwrite" -- "$bin" embed "${common[@]}" --out "$work/emb.npy"
cp "$work/emb.npy" "$work/emb1.npy"
"$bin" embed data="$images" checkpoint="$work/r18.safetensors" image_size=32 batch_size=5 \
  num_workers=3 out="$work/emb.npy" overwrite=true >/dev/null 2>&1 || fail "embed --overwrite, 3 workers"
cmp -s "$work/emb.npy" "$work/emb1.npy" || fail "1 and 3 workers give different embeddings"

"$bin" embed "${common[@]}" --out "$work/emb.csv" >/dev/null 2>&1 || fail "embed csv"
"$bin" embed "${common[@]}" --out "$work/emb_lightly.csv" --format lightly_csv >/dev/null 2>&1 ||
  fail "embed lightly_csv"
"$bin" embed "${common[@]}" --out "$work/emb.safetensors" >/dev/null 2>&1 || fail "embed safetensors"
"$bin" embed "${common[@]}" --out "$work/emb.pth" >/dev/null 2>&1 || fail "embed torch (from .pth)"
[ "$(head -n 1 "$work/emb.csv" | cut -d, -f1-2)" = "filename,embedding_0" ] || fail "csv header"
[ "$(head -n 1 "$work/emb.csv" | tr ',' '\n' | tail -n 1)" = "embedding_511" ] || fail "csv header end"
[ "$(head -n 1 "$work/emb_lightly.csv" | cut -d, -f1-2)" = "filenames,embedding_0" ] ||
  fail "lightly_csv header"
[ "$(head -n 1 "$work/emb_lightly.csv" | tr ',' '\n' | tail -n 1)" = "labels" ] ||
  fail "lightly_csv header end"
tail -n +2 "$work/emb.csv" | cut -d, -f1 | cmp -s - "$work/expected_names.txt" || fail "csv filenames"
tail -n +2 "$work/emb_lightly.csv" | cut -d, -f1 | cmp -s - "$work/expected_names.txt" ||
  fail "lightly_csv filenames"
[ "$(tail -n +2 "$work/emb_lightly.csv" | awk -F, '{ print $NF }' | sort -u)" = "0" ] ||
  fail "lightly_csv labels"

# The same float32 values in every format (python3 stdlib only).
if command -v python3 >/dev/null; then
  python3 - "$work" <<'EOF' || fail "formats disagree"
import csv, json, struct, sys
work = sys.argv[1]
raw = open(f"{work}/emb.npy", "rb").read()
start = 10 + struct.unpack("<H", raw[8:10])[0]
npy = struct.unpack(f"<{13 * 512}f", raw[start:])
names = open(f"{work}/expected_names.txt").read().split("\n")[:-1]
for path, skip_last in ((f"{work}/emb.csv", 0), (f"{work}/emb_lightly.csv", 1)):
    rows = list(csv.reader(open(path, newline="")))[1:]
    assert [r[0] for r in rows] == names, path
    values = [struct.unpack("<f", struct.pack("<f", float(v)))[0]
              for r in rows for v in r[1:len(r) - skip_last]]
    assert tuple(values) == npy, f"{path}: values differ from the npy"
st = open(f"{work}/emb.safetensors", "rb").read()
n = struct.unpack("<Q", st[:8])[0]
header = json.loads(st[8:8 + n])
info = header["embeddings"]
assert info["dtype"] == "F32" and info["shape"] == [13, 512], info
begin, end = info["data_offsets"]
assert struct.unpack(f"<{13 * 512}f", st[8 + n + begin:8 + n + end]) == npy
assert json.loads(header["__metadata__"]["filenames"]) == names
# LightlyTrain's torch format through CPython's own unpickler (torch.load's
# globals stood in for: no torch here).
import collections, io, pickle, zipfile
def rebuild(storage, offset, shape, stride, requires_grad, hooks):
    return dict(storage=storage, offset=offset, shape=shape, stride=stride)
class Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        return {("torch._utils", "_rebuild_tensor_v2"): rebuild,
                ("torch", "FloatStorage"): "FloatStorage",
                ("collections", "OrderedDict"): collections.OrderedDict}[(module, name)]
    def persistent_load(self, pid):
        kind, storage_type, key, location, numel = pid
        assert (kind, storage_type, location) == ("storage", "FloatStorage", "cpu"), pid
        return key, numel
archive = zipfile.ZipFile(f"{work}/emb.pth")
saved = Unpickler(io.BytesIO(archive.read("embeddings/data.pkl"))).load()
assert list(saved) == ["filenames", "embeddings"] and saved["filenames"] == names
tensor = saved["embeddings"]
key, numel = tensor["storage"]
assert (tensor["shape"], tensor["stride"], tensor["offset"], numel) == ((13, 512), (512, 1), 0, 13 * 512)
assert struct.unpack(f"<{13 * 512}f", archive.read(f"embeddings/data/{key}")) == npy
assert archive.read("embeddings/byteorder") == b"little"
EOF
fi

# A kill inside the npy write (here after the names are renamed into place,
# write step 6 of 7: util/fault.h) leaves no .npy beside other names: the
# old .npy is gone first. The next embed into the same --out removes the
# killed run's temporary file, says so, and writes a matching pair.
cp "$work/emb1.npy" "$work/pair.npy"
printf 'old.jpg\n' >"$work/pair.npy.filenames.txt"
{ LTC_FAULT=kill-in-write@6 "$bin" embed "${common[@]}" --out "$work/pair.npy" --overwrite \
    >/dev/null 2>&1; } 2>/dev/null
[ ! -e "$work/pair.npy" ] || fail "a kill between the renames left a .npy beside new names"
cmp -s "$work/pair.npy.filenames.txt" "$work/expected_names.txt" || fail "the names were not renamed first"
[ -n "$(find "$work" -name 'pair.npy.tmp.*')" ] || fail "the killed embed left no temporary .npy"
expect 0 "^removed 1 temporary file\(s\) left by a run killed while writing: .*pair.npy.tmp" \
  -- "$bin" embed "${common[@]}" --out "$work/pair.npy"
[ -z "$(find "$work" -name '*.tmp.*')" ] || fail "the next embed kept temporary files"
cmp -s "$work/pair.npy" "$work/emb1.npy" || fail "the rerun's .npy differs"

# Usage errors: exit 2 with the reason.
expect 2 "--data is required" -- "$bin" embed --checkpoint "$work/r18.safetensors" --out "$work/x.npy"
expect 2 "--format: expected one of .*got 'parquet'" -- \
  "$bin" embed "${common[@]}" --out "$work/x.npy" --format parquet
expect 2 "--accelerator gpu: (no usable GPU|backend .cuda.: this build has no CUDA)" -- \
  "$bin" embed "${common[@]}" --out "$work/x.npy" --accelerator gpu
expect 2 "does not exist" -- "$bin" embed "${common[@]}" --out "$work/missing/x.npy"
expect 2 "--checkpoint" -- "$bin" embed --data "$images" --checkpoint "$work/emb.csv" --out "$work/x.npy"
[ ! -e "$work/x.npy" ] || fail "a failed embed left $work/x.npy"

# What the scan leaves out is said as train says it: a named pipe (even one
# named .jpg) is never opened and is counted (embed said nothing of it) and
# so is another kind of file.
mkdir -p "$work/with_pipe"
cp "$images/class0/image0000.jpg" "$work/with_pipe/"
mkfifo "$work/with_pipe/pipe.jpg"
echo notes >"$work/with_pipe/notes.txt"
expect 0 "^dataset: skipped 1 other file: 1 \.txt; skipped 1 entry that is not a regular file \(named pipes, sockets or devices\)$" -- \
  timeout 60 "$bin" embed --data "$work/with_pipe" --checkpoint "$work/r18.safetensors" \
  --image-size 32 --out "$work/pipe.npy"

e2e_finish
