#!/usr/bin/env python3
"""Writes the image-format fixtures of tests/test_decode_formats.c: small files
in every format lightly-train-c reads, written by the reference Python
libraries (Pillow, tifffile, pydicom), each with the 8-bit RGB pixels those
libraries read from it, as a PNG, and a manifest that says what to compare.

    python3 tools/make_format_fixtures.py --out tests/fixtures/formats

Reference pixels, per format (docs/input-pipeline.md has the rules):
  - where Pillow reads the file and agrees with our rules: Pillow's
    Image.open(f).convert("RGB") (with ImageOps.exif_transpose first for
    the "ref" lines of oriented files, and without it for "noexif" lines:
    what Pillow and LightlyTrain give; Pillow applies a TIFF's orientation
    tag on load, so that one holds for both);
  - 16-bit, signed and float samples, where Pillow clips or cannot read:
    tifffile's / Pillow's / pydicom's raw samples mapped by our documented
    rule in numpy (16-bit: v >> 8; float: round(clip(v, 0, 1) * 255);
    signed: v + 2^(bits-1); DICOM: BitsStored bits, MONOCHROME1 and a
    negative RescaleSlope inverted, top 8 bits kept);
  - DICOM: pydicom's pixel_array (+ convert_color_space / apply_color_lut as
    LightlyTrain applies them).
Files our reader refuses are listed with the word the error must contain.

Manifest lines: FILE MODE EXPECTED MAX MEAN, where MODE is "ref" (the
decode equals the PNG EXPECTED within MAX per sample and MEAN on average),
"noexif" (the same with EXIF orientation off: --exif-orientation false) or
"error" (decode fails and the message contains EXPECTED, words joined by
'_').

Needs numpy, Pillow (with AVIF: 11.3 or later), pillow-heif, tifffile,
pydicom and avifenc (Debian's libavif-bin, for the AVIFs Pillow does not
write); the test needs none of them. Deterministic: the same versions write the same
bytes.
"""
import argparse
import io
import os
import struct
import subprocess
import tempfile

import numpy as np
import pydicom
import tifffile
from PIL import Image, ImageOps
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.encaps import encapsulate
from pydicom.pixels import apply_color_lut, apply_modality_lut, convert_color_space
from pydicom.uid import (ExplicitVRLittleEndian, JPEG2000Lossless, JPEGBaseline8Bit,
                         RLELossless, generate_uid)

WIDTH, HEIGHT = 24, 16


def pattern(width=WIDTH, height=HEIGHT, channels=3, seed=0, top=255):
    """Smooth ramps plus a little texture: lossless formats keep every value,
    and a misplaced row or column changes many of them."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    planes = []
    for c in range(channels):
        v = (x * (7 + 3 * c) + y * (5 + 2 * c) + 37 * c + 11 * seed) / (width * 7 + height * 5 + 90)
        v = (v + 0.15 * np.sin(x * 1.3 + y * 0.7 + c + seed)) % 1.0
        planes.append(np.round(v * top))
    return np.stack(planes, axis=-1) if channels > 1 else planes[0]


class Writer:
    def __init__(self, out):
        self.out = out
        self.lines = []
        os.makedirs(out, exist_ok=True)

    def file(self, name, data):
        with open(os.path.join(self.out, name), "wb") as f:
            f.write(data)

    def ref(self, name, data, rgb, max_diff=0, mean_diff=0.0, mode="ref"):
        """data: the fixture's bytes (None: already written); rgb: uint8 (H, W, 3)."""
        if data is not None:
            self.file(name, data)
        rgb = np.asarray(rgb)
        assert rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3, (name, rgb.shape)
        ref_name = name + (".noexif" if mode == "noexif" else "") + ".png"
        buffer = io.BytesIO()
        Image.fromarray(rgb, "RGB").save(buffer, "PNG", optimize=True)
        self.file(ref_name, buffer.getvalue())
        self.lines.append(f"{name} {mode} {ref_name} {max_diff} {mean_diff}")

    def error(self, name, data, words):
        self.file(name, data)
        self.lines.append(f"{name} error {words.replace(' ', '_')} 0 0")

    def finish(self):
        with open(os.path.join(self.out, "manifest.txt"), "w") as f:
            f.write("# written by tools/make_format_fixtures.py: FILE MODE EXPECTED MAX MEAN\n")
            f.write("\n".join(self.lines) + "\n")


def pillow_rgb(data, transpose=True):
    image = Image.open(io.BytesIO(data))
    if transpose:
        image = ImageOps.exif_transpose(image)
    return np.asarray(image.convert("RGB"))


def saved(image, fmt, **options):
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def grey_to_rgb(grey8):
    return np.repeat(np.asarray(grey8, np.uint8)[..., None], 3, axis=2)


def rule_u16(v):
    return (np.asarray(v, np.uint32) >> 8).astype(np.uint8)


def rule_float(v):
    return np.round(np.clip(np.asarray(v, np.float64), 0, 1) * 255).astype(np.uint8)


def tiff_bytes(array, **options):
    buffer = io.BytesIO()
    tifffile.imwrite(buffer, array, **options)
    return buffer.getvalue()


def write_tiff(w):
    rgb = pattern().astype(np.uint8)
    image = Image.fromarray(rgb)
    for compression in ["raw", "tiff_lzw", "tiff_adobe_deflate", "packbits", "zstd"]:
        data = saved(image, "TIFF", compression=compression)
        w.ref(f"rgb8_{compression}.tif", data, pillow_rgb(data))
    # JPEG in TIFF (YCbCr 4:2:0): libtiff + libjpeg on both sides.
    data = saved(image, "TIFF", compression="jpeg", quality=90)
    w.ref("rgb8_jpeg.tif", data, pillow_rgb(data), max_diff=2, mean_diff=0.5)
    # Grey, palette, bilevel (CCITT G4), CMYK, RGBA: Pillow's convert("RGB").
    grey = pattern(channels=1).astype(np.uint8)
    data = saved(Image.fromarray(grey), "TIFF", compression="tiff_lzw")
    w.ref("grey8_lzw.tif", data, pillow_rgb(data))
    palette = Image.fromarray(rgb).quantize(16)
    data = saved(palette, "TIFF")
    w.ref("palette8.tif", data, pillow_rgb(data))
    data = saved(Image.fromarray(grey > 128), "TIFF", compression="group4")
    w.ref("bilevel_g4.tif", data, pillow_rgb(data))
    cmyk = pattern(channels=4, seed=3).astype(np.uint8)
    data = saved(Image.fromarray(cmyk, "CMYK"), "TIFF")
    w.ref("cmyk8.tif", data, pillow_rgb(data))
    rgba = pattern(channels=4, seed=5).astype(np.uint8)
    data = saved(Image.fromarray(rgba, "RGBA"), "TIFF", compression="tiff_adobe_deflate")
    w.ref("rgba8_deflate.tif", data, pillow_rgb(data))
    # Orientation tag 274 (Pillow's exif_transpose reads it from a TIFF too).
    data = saved(image, "TIFF", tiffinfo={274: 6})
    w.ref("rgb8_orientation6.tif", data, pillow_rgb(data))
    w.ref("rgb8_orientation6.tif", None, pillow_rgb(data, transpose=False), mode="noexif")

    # tifffile: layouts, depths and band counts; references by our rules.
    big = pattern(40, 24, seed=1)
    grey16 = np.round(pattern(40, 24, channels=1, seed=2, top=65535)).astype(np.uint16)
    w.ref("grey16_tiles_zlib.tif",
          tiff_bytes(grey16, tile=(16, 16), compression="zlib"), grey_to_rgb(rule_u16(grey16)))
    rgb16 = np.round(pattern(40, 24, seed=4, top=65535)).astype(np.uint16)
    w.ref("rgb16_planar_strips.tif",
          tiff_bytes(np.moveaxis(rgb16, -1, 0), planarconfig="separate", rowsperstrip=5,
                     photometric="rgb"),
          rule_u16(rgb16))
    w.ref("rgb8_tiles_planar_lzma.tif",
          tiff_bytes(np.moveaxis(big.astype(np.uint8), -1, 0), tile=(16, 16),
                     planarconfig="separate", compression="lzma", photometric="rgb"),
          big.astype(np.uint8))
    floats = pattern(channels=1, seed=6, top=1.0) * 1.2 - 0.1  # some below 0, some above 1
    floats = floats.astype(np.float32)
    w.ref("grey_float32.tif", tiff_bytes(floats), grey_to_rgb(rule_float(floats)))
    w.ref("grey_float16.tif", tiff_bytes(floats.astype(np.float16)),
          grey_to_rgb(rule_float(floats.astype(np.float16).astype(np.float32))))
    w.ref("grey_float64_bigtiff.tif", tiff_bytes(floats.astype(np.float64), bigtiff=True),
          grey_to_rgb(rule_float(floats.astype(np.float64))))
    signed = (grey16.astype(np.int32) - 32768).astype(np.int16)
    w.ref("grey_int16.tif", tiff_bytes(signed), grey_to_rgb(rule_u16(grey16)))
    int8 = (grey.astype(np.int16) - 128).astype(np.int8)
    w.ref("grey_int8.tif", tiff_bytes(int8), grey_to_rgb(grey))
    white = tiff_bytes(grey, photometric="miniswhite")
    w.ref("grey8_miniswhite.tif", white, grey_to_rgb(255 - grey))
    # YCbCr without JPEG (tifffile writes it 4:4:4): libtiff's RGBA
    # interface (Pillow reads it through libtiff too).
    data = tiff_bytes(rgb, photometric="ycbcr")
    w.ref("ycbcr444.tif", data, pillow_rgb(data), max_diff=1, mean_diff=0.5)
    # Bands: 2 with alpha are grey + alpha; 5 have no colour meaning.
    grey_alpha = np.stack([grey, 255 - grey], axis=-1)
    w.ref("grey_alpha8.tif", tiff_bytes(grey_alpha, extrasamples=["unassalpha"],
                                        photometric="minisblack"), grey_to_rgb(grey))
    bands = np.round(pattern(channels=5, seed=7, top=65535)).astype(np.uint16)
    w.error("bands5_u16_planar.tif",
            tiff_bytes(bands.transpose(2, 0, 1), photometric="minisblack", planarconfig="separate"),
            "5 bands")
    # A second page is never read: the first decides.
    pages = io.BytesIO()
    with tifffile.TiffWriter(pages) as tif:
        tif.write(rgb, photometric="rgb")
        tif.write(255 - rgb, photometric="rgb")
    w.ref("two_pages.tif", pages.getvalue(), rgb)


def write_bmp_tga_pnm(w):
    rgb = pattern(seed=8).astype(np.uint8)
    grey = pattern(channels=1, seed=9).astype(np.uint8)
    for name, image in [("rgb24.bmp", Image.fromarray(rgb)), ("grey8.bmp", Image.fromarray(grey)),
                        ("bilevel1.bmp", Image.fromarray(grey > 100)),
                        ("palette8.bmp", Image.fromarray(rgb).quantize(32)),
                        ("rgba32.bmp", Image.fromarray(pattern(channels=4, seed=10).astype(np.uint8), "RGBA"))]:
        data = saved(image, "BMP")
        w.ref(name, data, pillow_rgb(data))
    data = saved(Image.fromarray(rgb), "TGA")
    w.ref("rgb24.tga", data, pillow_rgb(data))
    data = saved(Image.fromarray(rgb), "TGA", compression="tga_rle")
    w.ref("rgb24_rle.tga", data, pillow_rgb(data))
    data = saved(Image.fromarray(grey), "TGA")
    w.ref("grey8.tga", data, pillow_rgb(data))
    # Netpbm: binary from Pillow, ASCII written here (Pillow reads both).
    for name, image in [("rgb.ppm", Image.fromarray(rgb)), ("grey.pgm", Image.fromarray(grey)),
                        ("bilevel.pbm", Image.fromarray(grey > 100))]:
        data = saved(image, "PPM")
        w.ref(name, data, pillow_rgb(data))
    header = f"P3\n# a comment\n{WIDTH} {HEIGHT}\n255\n".encode()
    data = header + "\n".join(" ".join(str(v) for v in row.ravel()) for row in rgb).encode() + b"\n"
    w.ref("rgb_ascii.ppm", data, pillow_rgb(data))
    bits = (grey > 100).astype(np.uint8)
    data = f"P1\n{WIDTH} {HEIGHT}\n".encode() + "\n".join(
        "".join("0" if b else "1" for b in row) for row in bits).encode() + b"\n"
    w.ref("bilevel_ascii.pbm", data, pillow_rgb(data))
    small = (grey.astype(np.uint32) * 1000 // 255).astype(np.uint16)
    data = f"P2 {WIDTH} {HEIGHT} 1000\n".encode() + " ".join(str(v) for v in small.ravel()).encode()
    # maxval 1000: scaled to 16 bits (rounded), then the top 8 bits.
    scaled = (small.astype(np.uint64) * 2 * 65535 + 1000) // 2000
    w.ref("grey_maxval1000.pgm", data, grey_to_rgb(rule_u16(scaled)))
    grey16 = np.round(pattern(channels=1, seed=11, top=65535)).astype(np.uint16)
    data = f"P5\n{WIDTH} {HEIGHT}\n65535\n".encode() + grey16.astype(">u2").tobytes()
    w.ref("grey16.pgm", data, grey_to_rgb(rule_u16(grey16)))
    rgb16 = np.round(pattern(seed=12, top=65535)).astype(np.uint16)
    data = f"P6\n{WIDTH} {HEIGHT}\n65535\n".encode() + rgb16.astype(">u2").tobytes()
    # Pillow rounds v * 255 / 65535 here (and keeps the top byte of 16-bit
    # RGB PNG and TIFF): our rule keeps the top byte everywhere, at most 1 off.
    w.ref("rgb16.ppm", data, rule_u16(rgb16))
    assert np.abs(pillow_rgb(data).astype(int) - rule_u16(rgb16)).max() <= 1
    data = (f"P7\nWIDTH {WIDTH}\nHEIGHT {HEIGHT}\nDEPTH 4\nMAXVAL 255\nTUPLTYPE RGB_ALPHA\nENDHDR\n"
            .encode() + pattern(channels=4, seed=13).astype(np.uint8).tobytes())
    w.ref("rgba.pam", data, pattern(channels=4, seed=13).astype(np.uint8)[..., :3])


def gif_with_offset_frame(image, screen, left, top):
    """Pillow's GIF of `image`, then its logical screen made larger and the
    (only) frame moved: a first frame smaller than the screen."""
    data = bytearray(saved(image, "GIF"))
    struct.pack_into("<HH", data, 6, *screen)
    flags = data[10]
    offset = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    while data[offset] == 0x21:  # skip extensions
        offset += 2
        while data[offset]:
            offset += data[offset] + 1
        offset += 1
    assert data[offset] == 0x2C
    struct.pack_into("<HH", data, offset + 1, left, top)
    return bytes(data)


def write_gif(w):
    rgb = pattern(seed=14).astype(np.uint8)
    frame = Image.fromarray(rgb).quantize(64)
    data = saved(frame, "GIF")
    w.ref("palette64.gif", data, pillow_rgb(data))
    data = saved(frame, "GIF", interlace=True)
    w.ref("interlaced.gif", data, pillow_rgb(data))
    data = saved(frame, "GIF", transparency=5)
    w.ref("transparent.gif", data, pillow_rgb(data))
    second = Image.fromarray(255 - rgb).quantize(64)
    data = saved(frame, "GIF", save_all=True, append_images=[second], duration=100, loop=0)
    w.ref("animated.gif", data, pillow_rgb(data))
    small = Image.fromarray(pattern(10, 6, seed=15).astype(np.uint8)).quantize(16)
    data = gif_with_offset_frame(small, (WIDTH, HEIGHT), 7, 5)
    w.ref("offset_frame.gif", data, pillow_rgb(data))
    data = gif_with_offset_frame(small, (8, 4), 2, 1)  # frame reaches past the screen
    w.ref("frame_past_screen.gif", data, pillow_rgb(data))


# AVIF: odd sizes, so that the last chroma column and row of 4:2:0 stand
# alone. Pillow's pixels are matched exactly (tests/test_decode_formats.c):
# both sides convert with libavif and libyuv, and libyuv's SIMD code gives
# its C code's results on every CPU (its own tests require it).
AVIF_WIDTH, AVIF_HEIGHT = 27, 19
# Pillow's quality 95 is libavif's quantizer 3 ((100 - q) * 63 + 50) // 100.
AVIFENC_Q95 = ["--min", "3", "--max", "3", "--minalpha", "3", "--maxalpha", "3"]
EXIF_TRANSPOSE = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
                  4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE,
                  6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
                  8: Image.Transpose.ROTATE_90}


def avifenc(image, *options):
    """An AVIF written by libavif's own writer (avifenc of Debian's
    libavif-bin) from a PNG of `image`: what Pillow does not write (other
    matrices than BT.601, 10/12 bits, clap, irot and imir)."""
    with tempfile.TemporaryDirectory() as folder:
        source, target = os.path.join(folder, "in.png"), os.path.join(folder, "out.avif")
        image.save(source)
        subprocess.run(["avifenc", "--speed", "6", *options, source, target], check=True,
                       stdout=subprocess.DEVNULL)
        with open(target, "rb") as f:
            return f.read()


def write_avif(w):
    rgb = pattern(seed=16).astype(np.uint8)
    data = saved(Image.fromarray(rgb), "AVIF", quality=100, subsampling="4:4:4")
    w.ref("rgb.avif", data, pillow_rgb(data))
    # Quality 95 as Pillow writes it (BT.601, full range unless asked).
    rgb = Image.fromarray(pattern(AVIF_WIDTH, AVIF_HEIGHT, seed=23).astype(np.uint8))
    for subsampling in ["4:2:0", "4:2:2", "4:4:4"]:
        for colour_range in ["full", "limited"]:
            name = f"q95_{subsampling.replace(':', '')}_{colour_range}.avif"
            data = saved(rgb, "AVIF", quality=95, subsampling=subsampling, range=colour_range)
            w.ref(name, data, pillow_rgb(data))
    rgba = pattern(AVIF_WIDTH, AVIF_HEIGHT, channels=4, seed=24).astype(np.uint8)
    data = saved(Image.fromarray(rgba, "RGBA"), "AVIF", quality=95)
    w.ref("q95_rgba_420.avif", data, pillow_rgb(data))
    grey = pattern(AVIF_WIDTH, AVIF_HEIGHT, channels=1, seed=25).astype(np.uint8)
    data = saved(Image.fromarray(grey), "AVIF", quality=95, subsampling="4:0:0", range="limited")
    w.ref("q95_grey_limited.avif", data, pillow_rgb(data))
    # libavif's writer: BT.709 and BT.2020 matrices, 10 and 12 bits (Pillow
    # reads them at 8 bits), the identity matrix of lossless files.
    for name, options in [
            ("bt709_420_limited.avif", ["--yuv", "420", "--range", "l", "--cicp", "1/13/1"]),
            ("bt2020_444.avif", ["--yuv", "444", "--cicp", "9/13/9"]),
            ("d10_bt709_420.avif", ["--depth", "10", "--yuv", "420", "--cicp", "1/13/1"]),
            ("d10_444_limited.avif", ["--depth", "10", "--yuv", "444", "--range", "l"]),
            ("d12_422.avif", ["--depth", "12", "--yuv", "422"])]:
        data = avifenc(rgb, *AVIFENC_Q95, *options)
        w.ref(name, data, pillow_rgb(data))
    data = avifenc(rgb, "--lossless")
    w.ref("lossless_identity.avif", data, pillow_rgb(data))
    data = avifenc(Image.fromarray(rgba, "RGBA"), *AVIFENC_Q95, "--depth", "10", "--yuv", "420")
    w.ref("d10_rgba_420.avif", data, pillow_rgb(data))
    # clap (a crop, applied first), irot 90 degrees anticlockwise, imir left
    # and right: Pillow ignores clap and gives irot/imir as an EXIF
    # orientation, so the reference is its pixels cropped here, then turned
    # by that orientation; the same with EXIF orientation off (they are the
    # format's own).
    x, y, width, height = 4, 2, 18, 12
    data = avifenc(rgb, *AVIFENC_Q95, "--yuv", "420", "--crop", f"{x},{y},{width},{height}",
                   "--irot", "1", "--imir", "1")
    image = Image.open(io.BytesIO(data))
    orientation = image.getexif().get(0x0112, 1)
    assert orientation == 7, orientation
    cropped = Image.fromarray(np.asarray(image.convert("RGB"))[y:y + height, x:x + width])
    turned = np.asarray(cropped.transpose(EXIF_TRANSPOSE[orientation]))
    w.ref("clap_irot_imir.avif", data, turned)
    w.ref("clap_irot_imir.avif", None, turned, mode="noexif")


def write_heic(w):
    """HEIC (x265 through pillow-heif, the plugin Pillow users read HEIC
    with; it decodes with libheif 1.2x, we with Debian's libheif 1.15: both
    upsample 4:2:0 chroma nearest-neighbour, and round apart by a level)."""
    import pillow_heif
    pillow_heif.register_heif_opener()
    rgb = Image.fromarray(pattern(AVIF_WIDTH, AVIF_HEIGHT, seed=26).astype(np.uint8))
    for chroma in (420, 444):
        data = saved(rgb, "HEIF", quality=95, chroma=chroma)
        decoded = pillow_heif.open_heif(io.BytesIO(data), convert_hdr_to_8bit=True)
        w.ref(f"q95_{chroma}.heic", data, np.asarray(decoded.to_pillow().convert("RGB")),
              max_diff=1, mean_diff=0.1)


def dicom_bytes(array, photometric="MONOCHROME2", signed=False, bits_stored=None, rescale=None,
                syntax=ExplicitVRLittleEndian, planar=0, frames=1, encapsulated=None, palette=None):
    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = syntax
    ds.file_meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.7"  # secondary capture
    ds.file_meta.MediaStorageSOPInstanceUID = "1.2.3.4.5.6.7.8.9"
    ds.SOPClassUID = ds.file_meta.MediaStorageSOPClassUID
    ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID
    ds.Modality = "OT"
    shape = array.shape[1:] if frames > 1 else array.shape
    ds.Rows, ds.Columns = shape[0], shape[1]
    ds.SamplesPerPixel = 1 if len(shape) == 2 else shape[2]
    ds.PhotometricInterpretation = photometric
    if ds.SamplesPerPixel > 1:
        ds.PlanarConfiguration = planar
    if frames > 1:
        ds.NumberOfFrames = frames
    ds.BitsAllocated = array.dtype.itemsize * 8
    ds.BitsStored = bits_stored or ds.BitsAllocated
    ds.HighBit = ds.BitsStored - 1
    ds.PixelRepresentation = 1 if signed else 0
    if rescale:
        ds.RescaleSlope, ds.RescaleIntercept = rescale
    if palette is not None:
        for colour, values in zip(["Red", "Green", "Blue"], palette):
            setattr(ds, f"{colour}PaletteColorLookupTableDescriptor", [len(values), 0, 16])
            setattr(ds, f"{colour}PaletteColorLookupTableData", values.astype("<u2").tobytes())
    if encapsulated is not None:
        ds.PixelData = encapsulate([encapsulated])
    else:
        data = array if planar == 0 else np.ascontiguousarray(np.moveaxis(array, -1, 0))
        ds.PixelData = data.astype(data.dtype.newbyteorder("<")).tobytes()
        if syntax != ExplicitVRLittleEndian:
            ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
            ds.compress(syntax, generate_instance_uid=False)
    buffer = io.BytesIO()
    ds.save_as(buffer, enforce_file_format=True)
    return buffer.getvalue()


def dicom_pixels(data):
    return pydicom.dcmread(io.BytesIO(data)).pixel_array


def write_dicom(w):
    grey = pattern(channels=1, seed=17).astype(np.uint8)
    data = dicom_bytes(grey)
    assert np.array_equal(dicom_pixels(data), grey)
    w.ref("mono2_8bit.dcm", data, grey_to_rgb(grey))
    twelve = np.round(pattern(channels=1, seed=18, top=4095)).astype(np.uint16)
    data = dicom_bytes(twelve, bits_stored=12, rescale=(1.0, -1024.0))
    stored = dicom_pixels(data).astype(np.uint32)
    w.ref("mono2_12bit_rescale.dcm", data, grey_to_rgb(stored >> 4))
    data = dicom_bytes(twelve, photometric="MONOCHROME1", bits_stored=12)
    w.ref("mono1_12bit.dcm", data, grey_to_rgb((4095 - dicom_pixels(data).astype(np.uint32)) >> 4))
    # A negative slope inverts: pydicom's modality LUT (slope -1) gives -v,
    # whose range [-4095, 0] starts at 0 once offset by 4095.
    data = dicom_bytes(twelve, bits_stored=12, rescale=(-1.0, 0.0))
    ds = pydicom.dcmread(io.BytesIO(data))
    rescaled = apply_modality_lut(ds.pixel_array, ds)
    w.ref("mono2_12bit_negative_slope.dcm", data,
          grey_to_rgb((rescaled + 4095).astype(np.uint32) >> 4))
    signed = (np.round(pattern(channels=1, seed=19, top=65535)) - 32768).astype(np.int16)
    data = dicom_bytes(signed, signed=True, rescale=(0.5, 10.0))
    w.ref("mono2_int16.dcm", data,
          grey_to_rgb((dicom_pixels(data).astype(np.int32) + 32768).astype(np.uint32) >> 8))
    rgb = pattern(seed=20).astype(np.uint8)
    data = dicom_bytes(rgb, photometric="RGB")
    w.ref("rgb.dcm", data, dicom_pixels(data))
    data = dicom_bytes(rgb, photometric="RGB", planar=1)
    w.ref("rgb_planar.dcm", data, dicom_pixels(data))
    data = dicom_bytes(rgb, photometric="RGB", syntax=RLELossless)
    w.ref("rgb_rle.dcm", data, dicom_pixels(data))
    data = dicom_bytes(twelve, bits_stored=12, syntax=RLELossless)
    w.ref("mono2_12bit_rle.dcm", data, grey_to_rgb(dicom_pixels(data).astype(np.uint32) >> 4))
    ybr = pattern(seed=21).astype(np.uint8)  # stored as if YCbCr
    data = dicom_bytes(ybr, photometric="YBR_FULL")
    raw = pydicom.dcmread(io.BytesIO(data)).pixel_array  # pydicom 3 converts to RGB itself
    w.ref("ybr_full.dcm", data, raw)
    assert np.array_equal(raw, convert_color_space(ybr, "YBR_FULL", "RGB"))
    lut = [np.round(np.linspace(0, 65535, 256) ** p / 65535 ** (p - 1)).astype(np.uint16)
           for p in (1.0, 1.5, 2.0)]
    data = dicom_bytes(grey, photometric="PALETTE COLOR", palette=lut)
    ds = pydicom.dcmread(io.BytesIO(data))
    coloured = apply_color_lut(ds.pixel_array, ds)  # 16-bit RGB
    w.ref("palette.dcm", data, rule_u16(coloured))
    jpeg = saved(Image.fromarray(rgb), "JPEG", quality=95)
    data = dicom_bytes(rgb, photometric="YBR_FULL_422", syntax=JPEGBaseline8Bit, encapsulated=jpeg)
    w.ref("jpeg_baseline.dcm", data, pillow_rgb(jpeg), max_diff=2, mean_diff=0.5)
    # DCMTK in Debian has no JPEG 2000 codec: refused with the syntax named.
    j2k = saved(Image.fromarray(grey), "JPEG2000", irreversible=False, no_jp2=True)
    w.error("mono2_j2k.dcm", dicom_bytes(grey, syntax=JPEG2000Lossless, encapsulated=j2k),
            "JPEG 2000")
    frames = np.stack([grey, 255 - grey])
    w.error("two_frames.dcm", dicom_bytes(frames, frames=2), "2 frames")


def write_exif(w):
    """All 8 orientations in JPEG (Pillow writes the EXIF APP1), some in PNG
    (eXIf), WebP (EXIF chunk): references by ImageOps.exif_transpose."""
    rgb = pattern(seed=22).astype(np.uint8)
    image = Image.fromarray(rgb)
    for orientation in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = orientation
        data = saved(image, "JPEG", quality=95, exif=exif.tobytes())
        w.ref(f"orientation{orientation}.jpg", data, pillow_rgb(data))
        if orientation in (3, 6):
            w.ref(f"orientation{orientation}.jpg", None, pillow_rgb(data, False), mode="noexif")
    for orientation in (5, 8):
        exif = Image.Exif()
        exif[0x0112] = orientation
        data = saved(image, "PNG", exif=exif.tobytes())
        w.ref(f"orientation{orientation}.png", data, pillow_rgb(data))
        data = saved(image, "WEBP", lossless=True, exif=exif.tobytes())
        w.ref(f"orientation{orientation}.webp", data, pillow_rgb(data))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="tests/fixtures/formats")
    args = parser.parse_args()
    w = Writer(args.out)
    write_tiff(w)
    write_bmp_tga_pnm(w)
    write_gif(w)
    write_avif(w)
    write_heic(w)
    write_dicom(w)
    write_exif(w)
    w.finish()
    total = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print(f"{len(w.lines)} manifest lines, {len(os.listdir(args.out))} files, {total} bytes in {args.out}")


if __name__ == "__main__":
    main()
