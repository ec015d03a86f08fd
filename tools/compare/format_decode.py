#!/usr/bin/env python3
"""Per-format decode speed: the same images in every format lightly-train-c
reads, decoded whole by Pillow (pydicom for DICOM) here, and by
build/tools/bench_decode (--mode whole) for lightly-train-c; the figures of
docs/performance.md, "Formats".

    tools/compare/format_decode.py jpegs --out DIR [--count 240]
    tools/compare/format_decode.py make --source DIR --out DIR [--count 60]
    tools/compare/format_decode.py pillow --data DIR [--repeat 3]

jpegs: COUNT synthetic textured 500x375 JPEGs (q90; smooth colour fields at
  three scales plus noise, seeded) in three copies: DIR/plain (no EXIF),
  DIR/exif1 (an EXIF block: orientation 1, make, model, date) and
  DIR/exif6 (orientation 6): the files of performance.md's EXIF figures,
  and a --source for make.
make: the first COUNT JPEGs under --source (sorted), each written as
  FORMAT/NAME.EXT for PNG, WebP (lossy, quality 90), TIFF (LZW), BMP, PPM,
  GIF (256-colour palette), TGA, AVIF (quality 90), DICOM (RGB, uncompressed
  explicit VR) and the JPEG itself; one folder per format, so that
  bench_decode's per-format lines and this script's cover the same files.
pillow: every file under --data decoded REPEAT times on one thread:
  Image.open + convert("RGB") + load (pydicom: dcmread + pixel_array for
  .dcm), timed with time.thread_time() (this thread's CPU time); one line
  per format folder: RESULT format=F ms_per_image=... images_per_s=...
Needs numpy, Pillow (with AVIF), pydicom.
"""
import argparse
import io
import os
import sys
import time

import numpy as np
from PIL import Image

FORMATS = {  # folder: (extension, Pillow save arguments)
    "jpeg": ("jpg", None),
    "png": ("png", {"format": "PNG"}),
    "webp": ("webp", {"format": "WEBP", "quality": 90}),
    "tiff": ("tif", {"format": "TIFF", "compression": "tiff_lzw"}),
    "bmp": ("bmp", {"format": "BMP"}),
    "ppm": ("ppm", {"format": "PPM"}),
    "gif": ("gif", {"format": "GIF"}),
    "tga": ("tga", {"format": "TGA"}),
    "avif": ("avif", {"format": "AVIF", "quality": 90}),
    "dicom": ("dcm", None),
}


def dicom_bytes(rgb):
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds.file_meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.7"
    ds.file_meta.MediaStorageSOPInstanceUID = "1.2.3.4"
    ds.SOPClassUID, ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPClassUID, "1.2.3.4"
    ds.Rows, ds.Columns = rgb.shape[:2]
    ds.SamplesPerPixel, ds.PhotometricInterpretation, ds.PlanarConfiguration = 3, "RGB", 0
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    ds.PixelData = rgb.tobytes()
    buffer = io.BytesIO()
    ds.save_as(buffer, enforce_file_format=True)
    return buffer.getvalue()


def natural(rng, width, height):
    image = np.zeros((height, width, 3))
    for scale in (4, 16, 64):
        small = (rng.random((height // scale + 2, width // scale + 2, 3)) * 255).astype(np.uint8)
        resized = Image.fromarray(small).resize((width, height), Image.BICUBIC)
        image += np.asarray(resized, float) * (scale / 84)
    image += rng.normal(0, 8, image.shape)
    return Image.fromarray(np.clip(image, 0, 255).astype(np.uint8))


def jpegs(args):
    rng = np.random.default_rng(0)
    for folder in ("plain", "exif1", "exif6"):
        os.makedirs(os.path.join(args.out, folder), exist_ok=True)
    for i in range(args.count):
        image = natural(rng, 500, 375)
        image.save(os.path.join(args.out, "plain", f"{i:04d}.jpg"), quality=90)
        for orientation in (1, 6):
            exif = Image.Exif()
            exif[0x0112] = orientation
            exif[0x010F], exif[0x0110] = "Camera maker", "Model X"
            exif[0x0132], exif[0x0131] = "2024:01:01 10:00:00", "firmware 1.0"
            image.save(os.path.join(args.out, f"exif{orientation}", f"{i:04d}.jpg"), quality=90,
                       exif=exif.tobytes())
    print(f"{args.count} JPEGs x 3 in {args.out}")


def make(args):
    sources = sorted(os.path.join(root, name) for root, _, names in os.walk(args.source)
                     for name in names if name.lower().endswith((".jpg", ".jpeg")))[:args.count]
    if not sources:
        sys.exit(f"no JPEG under {args.source}")
    for folder, (extension, options) in FORMATS.items():
        os.makedirs(os.path.join(args.out, folder), exist_ok=True)
    for path in sources:
        stem = os.path.splitext(os.path.basename(path))[0]
        image = Image.open(path).convert("RGB")
        for folder, (extension, options) in FORMATS.items():
            target = os.path.join(args.out, folder, f"{stem}.{extension}")
            if folder == "jpeg":
                data = open(path, "rb").read()
            elif folder == "dicom":
                data = dicom_bytes(np.asarray(image))
            else:
                buffer = io.BytesIO()
                image.save(buffer, **options)
                data = buffer.getvalue()
            with open(target, "wb") as f:
                f.write(data)
    print(f"{len(sources)} images x {len(FORMATS)} formats in {args.out}")


def decode(path):
    if path.endswith(".dcm"):
        import pydicom
        return pydicom.dcmread(path).pixel_array
    with Image.open(path) as image:
        image = image.convert("RGB")
        image.load()
        return image


def pillow(args):
    for folder in sorted(os.listdir(args.data)):
        directory = os.path.join(args.data, folder)
        files = sorted(os.path.join(directory, name) for name in os.listdir(directory))
        data = [open(path, "rb").read() for path in files]  # warm the page cache
        del data
        start = time.thread_time()
        for _ in range(args.repeat):
            for path in files:
                decode(path)
        seconds = time.thread_time() - start
        count = len(files) * args.repeat
        print(f"RESULT format={folder} ms_per_image={1e3 * seconds / count:.3f} "
              f"images_per_s={count / seconds:.1f} decodes={count}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make_parser = commands.add_parser("make")
    make_parser.add_argument("--source", required=True)
    make_parser.add_argument("--out", required=True)
    make_parser.add_argument("--count", type=int, default=60)
    jpegs_parser = commands.add_parser("jpegs")
    jpegs_parser.add_argument("--out", required=True)
    jpegs_parser.add_argument("--count", type=int, default=240)
    pillow_parser = commands.add_parser("pillow")
    pillow_parser.add_argument("--data", required=True)
    pillow_parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    {"jpegs": jpegs, "make": make, "pillow": pillow}[args.command](args)


if __name__ == "__main__":
    main()
