"""Checks an ONNX model written by `lightly-train-c export --format onnx` (or
`embed --export-onnx`) against the real components: ONNX's own checker and
ONNX Runtime's CPU provider, whose embeddings of the same images must equal
the ones `lightly-train-c embed` wrote (tests/e2e/onnx.sh). Runs in the
test environment (build/test-venv: onnx, onnxruntime, numpy).

  check_onnx.py images DIR COUNT SIZE SEED
      writes COUNT random SIZE x SIZE RGB images as binary PPM files into
      DIR (noise over a gradient: no flat areas), named img_NNN.ppm.
  check_onnx.py compare MODEL.onnx DIR EMBEDDINGS.npy TOLERANCE [--fp16] [+ ...]
      for each model (several, separated by "+", share one start-up): the
      checker (full_check) passes; the model's input is "images" (batch,
      C, H, W) and its output "embeddings" (batch, D), float32 (or
      float16 with --fp16), the batch a named dimension; ONNX Runtime's
      embeddings of the images named in EMBEDDINGS.npy.filenames.txt,
      normalised with the model's image_normalize metadata as embed does
      ((v / 255 - mean) / std), equal EMBEDDINGS.npy row by row:
      max |onnx - ours| <= TOLERANCE * max |ours| for every row; the same
      holds for the first image run alone (the dynamic batch).

Prints the largest relative difference found; exits 1 with a message on
any failure."""

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime


def fail(message):
    print(f"check_onnx: FAIL: {message}")
    sys.exit(1)


def write_images(folder, count, size, seed):
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 160, size)
    for i in range(count):
        base = ramp[None, :, None] + ramp[::-1][:, None, None] * (i % 3) / 2
        pixels = np.clip(base + rng.uniform(0, 95, (size, size, 3)), 0, 255).astype(np.uint8)
        with open(folder / f"img_{i:03d}.ppm", "wb") as file:
            file.write(f"P6\n{size} {size}\n255\n".encode())
            file.write(pixels.tobytes())


def read_ppm(path):
    data = Path(path).read_bytes()
    fields, position = [], 0
    while len(fields) < 4:  # magic, width, height, maxval, separated by whitespace
        while data[position : position + 1].isspace():
            position += 1
        end = position
        while not data[end : end + 1].isspace():
            end += 1
        fields.append(data[position:end])
        position = end
    if fields[0] != b"P6" or fields[3] != b"255":
        fail(f"{path}: not an 8-bit binary PPM")
    width, height = int(fields[1]), int(fields[2])
    pixels = np.frombuffer(data[position + 1 :], dtype=np.uint8, count=width * height * 3)
    return pixels.reshape(height, width, 3)


def tensor_type(value):
    tensor = value.type.tensor_type
    dims = [d.dim_param if d.HasField("dim_param") else d.dim_value for d in tensor.shape.dim]
    return tensor.elem_type, dims


def check_signature(model, fp16):
    elem = onnx.TensorProto.FLOAT16 if fp16 else onnx.TensorProto.FLOAT
    graph = model.graph
    if [i.name for i in graph.input] != ["images"] or [o.name for o in graph.output] != [
        "embeddings"
    ]:
        fail(f"inputs {[i.name for i in graph.input]}, outputs {[o.name for o in graph.output]}")
    input_type, input_dims = tensor_type(graph.input[0])
    output_type, output_dims = tensor_type(graph.output[0])
    if input_type != elem or output_type != elem:
        fail(f"element types {input_type}, {output_type}, expected {elem}")
    if len(input_dims) != 4 or input_dims[0] != "batch" or input_dims[2] != input_dims[3]:
        fail(f"input shape {input_dims}, expected (batch, C, H, H)")
    if len(output_dims) != 2 or output_dims[0] != "batch":
        fail(f"output shape {output_dims}, expected (batch, D)")
    return input_dims, output_dims


def compare(model_path, folder, embeddings_path, tolerance, fp16):
    onnx.checker.check_model(model_path, full_check=True)  # the path: external data too
    model = onnx.load(model_path)
    input_dims, output_dims = check_signature(model, fp16)
    metadata = {p.key: p.value for p in model.metadata_props}
    normalize = json.loads(metadata["image_normalize"])
    mean = np.array(normalize["mean"], dtype=np.float32)
    std = np.array(normalize["std"], dtype=np.float32)
    ours = np.load(embeddings_path)
    names = Path(f"{embeddings_path}.filenames.txt").read_text().splitlines()
    if ours.shape != (len(names), output_dims[1]):
        fail(f"embeddings {ours.shape} for {len(names)} images of dimension {output_dims[1]}")
    images = []
    for name in names:
        pixels = read_ppm(Path(folder) / name).astype(np.float32)
        if pixels.shape != (input_dims[2], input_dims[3], input_dims[1]):
            fail(f"{name}: {pixels.shape} pixels, the model takes {input_dims[1:]}")
        images.append(((pixels / np.float32(255) - mean) / std).transpose(2, 0, 1))
    batch = np.stack(images).astype(np.float16 if fp16 else np.float32)
    session = onnxruntime.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    theirs = session.run(["embeddings"], {"images": batch})[0].astype(np.float32)
    alone = session.run(["embeddings"], {"images": batch[:1]})[0].astype(np.float32)
    worst = 0.0
    for label, rows, reference in (("batch", theirs, ours), ("alone", alone, ours[:1])):
        if rows.shape != reference.shape:
            fail(f"{label}: ONNX Runtime gave {rows.shape}, embed {reference.shape}")
        for i, (row, expected) in enumerate(zip(rows, reference)):
            scale = float(np.max(np.abs(expected)))
            relative = float(np.max(np.abs(row - expected))) / scale
            worst = max(worst, relative)
            if not np.isfinite(relative) or relative > tolerance:
                fail(f"{model_path}: {label} row {i} ({names[i]}): max |onnx - embed| = "
                     f"{relative:.3g} x max |embed| ({scale:.3g}), above {tolerance:g}")
    print(f"check_onnx: {Path(model_path).name}: {len(names)} images, largest difference "
          f"{worst:.3g} x max |embed| (tolerance {tolerance:g}), opset "
          f"{model.opset_import[0].version}, {len(model.graph.node)} nodes")


def main(argv):
    if len(argv) == 6 and argv[1] == "images":
        write_images(argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
        return
    groups, group = [], []
    for word in argv[2:] + ["+"]:
        if word != "+":
            group.append(word)
            continue
        if len(group) not in (4, 5) or group[4:] not in ([], ["--fp16"]):
            groups = []
            break
        groups.append(group)
        group = []
    if argv[1:2] != ["compare"] or not groups:
        print(__doc__)
        sys.exit(2)
    for model, folder, embeddings, tolerance, *fp16 in groups:
        compare(model, folder, embeddings, float(tolerance), fp16 == ["--fp16"])


if __name__ == "__main__":
    main(sys.argv)
