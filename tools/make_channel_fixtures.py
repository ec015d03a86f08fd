#!/usr/bin/env python3
"""Writes the depth-and-channel fixtures of tests/test_decode_channels.c: small
16-bit, float and multi-band images (PNG, TIFF, JPEG, PPM, DICOM) and the
float32 values our deep path must read from them with N channels
(decode.h samples_to_float, docs/input-pipeline.md "Depth and channels"),
computed here in numpy from the raw samples that Pillow, tifffile and
pydicom read:

    python3 tools/make_channel_fixtures.py --out tests/fixtures/channels

Rules the references follow: 8-bit v / 255, 16-bit v / 65535 (DICOM: v /
(2^BitsStored - 1), MONOCHROME1 inverted), float as stored (NaN -> 0);
channels as stored when their count is N, else grey repeated, RGB to grey
with 0.299 R + 0.587 G + 0.114 B, CMYK to RGB as (1 - C)(1 - K).
Where Pillow's own conversion is the reference (convert("L") of 8-bit RGB,
a grey JPEG), its 8-bit output / 255 is compared within half a level.

references.safetensors holds one F32 (H, W, N) tensor per "FILE@N", plus
"grey16.png@pillow_rgb": Pillow's convert("RGB") of the 16-bit grey PNG
(it clips every value above 255, the reason for this path).
manifest.txt lines: FILE N ref TENSOR MAX_DIFF, or FILE N error WORD (the
decode or conversion fails with a message containing WORD, '_' for spaces).

A 32-bit BMP with an alpha mask (BITMAPV5HEADER, written here: Pillow reads
it as RGBA but writes none) gives its 4 channels; Pillow's own 32-bit BMP
(no mask, the fourth byte reserved, which Pillow ignores) the 4 bytes it
stores, as stb_image reads them. 10/12-bit AVIFs of the format fixtures:
imagecodecs' avif_decode (libavif's conversion at the image's depth) over
2^bits - 1.

Needs numpy, Pillow, tifffile, pydicom, imagecodecs and safetensors; the
test needs none of them.
"""
import argparse
import io
import os
import struct
import zlib

import imagecodecs
import numpy as np
import pydicom
import tifffile
from PIL import Image
from safetensors.numpy import save_file

WIDTH, HEIGHT = 20, 12
LUMA = np.array([0.299, 0.587, 0.114])


def pattern(channels, seed, top):
    """Ramps with texture, different per channel."""
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float64)
    planes = []
    for c in range(channels):
        v = (x * (5 + 3 * c) + y * (7 + 2 * c) + 29 * c + 13 * seed) / (WIDTH * 5 + HEIGHT * 7 + 60)
        v = (v + 0.2 * np.sin(x * 1.1 + y * 0.9 + c + seed)) % 1.0
        planes.append(np.round(v * top))
    return np.stack(planes, axis=-1)


def png16(samples):
    """A 16-bit PNG (grey: (H, W, 1), RGB: 3, RGBA: 4) written by hand:
    Pillow writes no 16-bit colour PNG."""
    height, width, channels = samples.shape
    colour_type = {1: 0, 2: 4, 3: 2, 4: 6}[channels]
    raw = b"".join(b"\0" + samples[y].astype(">u2").tobytes() for y in range(height))

    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body +
                struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))
    header = struct.pack(">IIBBBBB", width, height, 16, colour_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) +
            chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def tiff_bytes(array, **options):
    buffer = io.BytesIO()
    tifffile.imwrite(buffer, array, **options)
    return buffer.getvalue()


def saved(image, fmt, **options):
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def luma(rgb):
    return (np.asarray(rgb, np.float64) @ LUMA)[..., None]


class Writer:
    def __init__(self, out):
        self.out = out
        self.lines = []
        self.tensors = {}
        os.makedirs(out, exist_ok=True)

    def file(self, name, data):
        with open(os.path.join(self.out, name), "wb") as f:
            f.write(data)

    def ref(self, name, channels, values, max_diff=1e-6):
        key = f"{name}@{channels}"
        values = np.asarray(values, np.float32)
        assert values.shape == (HEIGHT, WIDTH, channels) or values.shape[2] == channels, key
        self.tensors[key] = np.ascontiguousarray(values)
        self.lines.append(f"{name} {channels} ref {key} {max_diff:g}")

    def error(self, name, channels, word):
        self.lines.append(f"{name} {channels} error {word.replace(' ', '_')}")

    def finish(self):
        save_file(self.tensors, os.path.join(self.out, "references.safetensors"))
        with open(os.path.join(self.out, "manifest.txt"), "w") as f:
            f.write("# written by tools/make_channel_fixtures.py: FILE N ref TENSOR MAX_DIFF | "
                    "FILE N error WORD\n")
            f.write("\n".join(self.lines) + "\n")


def write_png(w):
    grey16 = pattern(1, 1, 65535).astype(np.uint16)
    grey16[0, :4, 0] = [256, 1000, 40000, 65535]  # above 255: Pillow's convert("RGB") clips these
    data = saved(Image.fromarray(grey16[..., 0]), "PNG")
    assert Image.open(io.BytesIO(data)).mode == "I;16"
    w.file("grey16.png", data)
    values = grey16 / 65535.0
    w.ref("grey16.png", 1, values)
    w.ref("grey16.png", 3, np.repeat(values, 3, axis=2))
    pillow = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), np.float32) / 255
    assert (pillow[grey16[..., 0] > 255] == 1.0).all()
    w.tensors["grey16.png@pillow_rgb"] = pillow

    rgb16 = pattern(3, 2, 65535).astype(np.uint16)
    w.file("rgb16.png", png16(rgb16))
    w.ref("rgb16.png", 3, rgb16 / 65535.0)
    w.ref("rgb16.png", 1, luma(rgb16 / 65535.0))
    w.error("rgb16.png", 4, "cannot be read as 4")
    rgba16 = pattern(4, 3, 65535).astype(np.uint16)
    w.file("rgba16.png", png16(rgba16))
    w.ref("rgba16.png", 4, rgba16 / 65535.0)  # as stored, alpha included
    w.ref("rgba16.png", 3, rgba16[..., :3] / 65535.0)

    rgb8 = pattern(3, 4, 255).astype(np.uint8)
    data = saved(Image.fromarray(rgb8), "PNG")
    w.file("rgb8.png", data)
    w.ref("rgb8.png", 3, rgb8 / 255.0)
    pillow_l = np.asarray(Image.open(io.BytesIO(data)).convert("L"), np.float64)[..., None]
    assert np.abs(pillow_l - luma(rgb8)).max() <= 0.5 + 1e-9  # Pillow rounds our formula
    w.ref("rgb8.png", 1, pillow_l / 255.0, max_diff=0.5 / 255 + 1e-6)
    w.error("rgb8.png", 2, "cannot be read as 2")


def write_jpeg(w):
    grey = pattern(1, 5, 255).astype(np.uint8)[..., 0]
    data = saved(Image.fromarray(grey), "JPEG", quality=95)
    w.file("grey8.jpg", data)
    decoded = np.asarray(Image.open(io.BytesIO(data)), np.float64)[..., None] / 255
    # Pillow's libjpeg-turbo and Debian's may round the IDCT differently.
    w.ref("grey8.jpg", 1, decoded, max_diff=1.0 / 255 + 1e-6)
    w.ref("grey8.jpg", 4, np.repeat(decoded, 4, axis=2), max_diff=1.0 / 255 + 1e-6)


def write_tiff(w):
    grey16 = pattern(1, 6, 65535).astype(np.uint16)
    w.file("grey16.tif", tiff_bytes(grey16[..., 0]))
    w.ref("grey16.tif", 1, grey16 / 65535.0)
    rgb16 = pattern(3, 7, 65535).astype(np.uint16)
    w.file("rgb16.tif", tiff_bytes(rgb16, photometric="rgb"))
    w.ref("rgb16.tif", 3, rgb16 / 65535.0)
    w.ref("rgb16.tif", 1, luma(rgb16 / 65535.0))
    bands4 = pattern(4, 8, 65535).astype(np.uint16)
    w.file("bands4_u16.tif", tiff_bytes(bands4, photometric="minisblack", planarconfig="contig"))
    w.ref("bands4_u16.tif", 4, bands4 / 65535.0)
    w.error("bands4_u16.tif", 3, "4 channel(s) (bands")
    bands5 = pattern(5, 9, 65535).astype(np.uint16)
    w.file("bands5_u16_planar.tif", tiff_bytes(bands5.transpose(2, 0, 1), photometric="minisblack",
                                               planarconfig="separate"))
    w.ref("bands5_u16_planar.tif", 5, bands5 / 65535.0)
    w.error("bands5_u16_planar.tif", 1, "5 channel(s)")
    floats = (pattern(3, 10, 1.0) * 1.5 - 0.25).astype(np.float32)  # below 0 and above 1 kept
    floats[1, 2, 0] = np.nan
    w.file("rgb_f32.tif", tiff_bytes(floats, photometric="rgb"))
    kept = np.nan_to_num(floats, nan=0.0)
    w.ref("rgb_f32.tif", 3, kept)
    w.ref("rgb_f32.tif", 1, luma(kept), max_diff=1e-5)
    cmyk = pattern(4, 11, 255).astype(np.uint8)
    w.file("cmyk8.tif", saved(Image.fromarray(cmyk, "CMYK"), "TIFF"))
    w.ref("cmyk8.tif", 4, cmyk / 255.0)
    inks = cmyk / 255.0
    w.ref("cmyk8.tif", 3, (1 - inks[..., :3]) * (1 - inks[..., 3:]), max_diff=1e-5)


def write_others(w):
    rgb16 = pattern(3, 12, 65535).astype(np.uint16)
    w.file("rgb16.ppm", b"P6\n%d %d\n65535\n" % (WIDTH, HEIGHT) + rgb16.astype(">u2").tobytes())
    w.ref("rgb16.ppm", 3, rgb16 / 65535.0)
    # 12-bit MONOCHROME1 DICOM (from the format fixtures): pydicom's samples,
    # inverted so that white is high, over 2^12 - 1.
    path = os.path.join(os.path.dirname(w.out), "formats", "mono1_12bit.dcm")
    dataset = pydicom.dcmread(path)
    assert dataset.PhotometricInterpretation == "MONOCHROME1" and dataset.BitsStored == 12
    top = 2 ** 12 - 1
    values = (top - dataset.pixel_array.astype(np.float64)) / top
    w.ref("../formats/mono1_12bit.dcm", 1, values[..., None])


def bmp_v5_rgba(rgba):
    """A 32-bit BMP with a BITMAPV5HEADER whose bit fields name an alpha
    mask, as GIMP and ImageMagick write RGBA: bottom-up BGRA rows."""
    height, width, _ = rgba.shape
    pixels = np.ascontiguousarray(rgba[::-1][..., [2, 1, 0, 3]]).astype(np.uint8).tobytes()
    header = struct.pack("<IiiHHIIiiII", 124, width, height, 1, 32, 3, len(pixels), 2835, 2835,
                         0, 0)
    header += struct.pack("<IIII", 0x00FF0000, 0x0000FF00, 0x000000FF, 0xFF000000)
    header += struct.pack("<I", 0x73524742) + bytes(36 + 12)  # sRGB; no end points, gamma
    header += struct.pack("<IIII", 4, 0, 0, 0)  # rendering intent: images; no profile
    assert len(header) == 124
    offset = 14 + len(header)
    return b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset) + header + pixels


def bmp_stored_bgra(data):
    """The 4 bytes a pixel of an uncompressed bottom-up 32-bit BMP stores, as RGBA."""
    (offset,) = struct.unpack_from("<I", data, 10)
    width, height = struct.unpack_from("<ii", data, 18)
    rows = np.frombuffer(data, np.uint8, width * height * 4, offset).reshape(height, width, 4)
    return rows[::-1][..., [2, 1, 0, 3]]


def write_bmp(w):
    rgba = pattern(4, 13, 255).astype(np.uint8)
    data = bmp_v5_rgba(rgba)
    image = Image.open(io.BytesIO(data))
    assert image.mode == "RGBA" and np.array_equal(np.asarray(image), rgba)
    w.file("rgba32_v5.bmp", data)
    w.ref("rgba32_v5.bmp", 4, rgba / 255.0)
    w.ref("rgba32_v5.bmp", 3, rgba[..., :3] / 255.0)
    with open(os.path.join(os.path.dirname(w.out), "formats", "rgba32.bmp"), "rb") as f:
        data = f.read()
    assert Image.open(io.BytesIO(data)).mode == "RGB"  # Pillow ignores the fourth byte
    stored = bmp_stored_bgra(data)
    assert len(np.unique(stored[..., 3])) > 1
    w.ref("../formats/rgba32.bmp", 4, stored / 255.0)


def write_deep_avif(w):
    formats = os.path.join(os.path.dirname(w.out), "formats")
    for name, channels in [("d10_bt709_420.avif", 3), ("d10_rgba_420.avif", 4),
                           ("d10_rgba_420.avif", 3), ("d12_422.avif", 3)]:
        with open(os.path.join(formats, name), "rb") as f:
            decoded = imagecodecs.avif_decode(f.read())
        assert decoded.dtype == np.uint16, name
        top = 2 ** (10 if name.startswith("d10") else 12) - 1
        w.ref("../formats/" + name, channels, decoded[..., :channels] / top)

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="tests/fixtures/channels")
    args = parser.parse_args()
    w = Writer(args.out)
    write_png(w)
    write_jpeg(w)
    write_tiff(w)
    write_others(w)
    write_deep_avif(w)
    write_bmp(w)
    w.finish()


if __name__ == "__main__":
    main()
