#!/usr/bin/env python3
"""Writes the hand-made DICOM files of tests/fixtures/fuzz_findings that hide
a 2 GB+ element length where a length walk that reads the file otherwise
than DCMTK 3.6.7 does not look (src/decode/dicom_lengths.c). Each made DCMTK
ask for 2-3 GB before that walk read as DCMTK does:

    python3 tools/make_dicom_length_fixtures.py --out tests/fixtures/fuzz_findings

  dicom_implicit_sequence.dcm  implicit VR: a defined-length sequence (the
      dictionary says SQ) holding an undefined-length item whose element
      declares 0xB0000000 bytes; the walk skipped the sequence whole.
  dicom_un_undefined.dcm       explicit VR: an element of VR UN with an
      undefined length, whose item DCMTK reads as implicit VR little endian
      (CP-246); read as explicit, its element "UI" has a 32 kB length that
      fits, read as implicit 0x80004955 bytes.
  dicom_vr_not_letters.dcm     explicit VR: an element whose VR bytes are
      01 01; DCMTK gives such a VR a 2-byte length (0) and reads the next
      element, of 0xB0000000 bytes, where the walk took the 4 bytes after
      the tag for the length (257) and skipped past it.

Standard library only; each file also holds a small 8x8 image after the
hostile element, so that nothing else stops DCMTK first.
"""
import argparse
import os
import struct

LONG_VRS = {b"OB", b"OD", b"OF", b"OL", b"OV", b"OW", b"SQ", b"SV", b"UC", b"UN", b"UR", b"UT",
            b"UV"}
BIG = 0xB0000000
UNDEFINED = 0xFFFFFFFF


def explicit(group, element, vr, value, length=None):
    length = len(value) if length is None else length
    if vr in LONG_VRS:
        return struct.pack("<HH2sHI", group, element, vr, 0, length) + value
    return struct.pack("<HH2sH", group, element, vr, length) + value


def implicit(group, element, value, length=None):
    length = len(value) if length is None else length
    return struct.pack("<HHI", group, element, length) + value


def tag(group, element, length):
    return struct.pack("<HHI", group, element, length)


def uid(text):
    data = text.encode()
    return data + b"\0" * (len(data) % 2)


def meta(syntax):
    body = (explicit(2, 1, b"OB", b"\0\1") +
            explicit(2, 2, b"UI", uid("1.2.840.10008.5.1.4.1.1.7")) +
            explicit(2, 3, b"UI", uid("1.2.3.4")) + explicit(2, 0x10, b"UI", uid(syntax)))
    return b"\0" * 128 + b"DICM" + explicit(2, 0, b"UL", struct.pack("<I", len(body))) + body


def image(element):
    """An 8x8 8-bit MONOCHROME2 image, its elements made by element(group, number, vr, value)."""
    data = b""
    for number, value in [(2, 1), (0x10, 8), (0x11, 8), (0x100, 8), (0x101, 8), (0x102, 7),
                          (0x103, 0)]:
        data += element(0x28, number, b"US", struct.pack("<H", value))
    data += element(0x28, 4, b"CS", b"MONOCHROME2 ")
    return data + element(0x7FE0, 0x10, b"OW", bytes(64))


def implicit_image():
    return image(lambda group, number, vr, value: implicit(group, number, value))


def explicit_image():
    return image(explicit)


def files():
    item = (tag(0xFFFE, 0xE000, UNDEFINED) + implicit(0x0008, 0x1150, b"", BIG) + bytes(8) +
            tag(0xFFFE, 0xE00D, 0))
    yield ("dicom_implicit_sequence.dcm",
           meta("1.2.840.10008.1.2") + implicit(0x0008, 0x1115, item) + implicit_image())

    inner = struct.pack("<HH2sH", 0x0008, 0x1150, b"UI", 0x8000) + bytes(0x8000)
    item = tag(0xFFFE, 0xE000, UNDEFINED) + inner + tag(0xFFFE, 0xE00D, 0)
    yield ("dicom_un_undefined.dcm",
           meta("1.2.840.10008.1.2.1") + explicit(0x0009, 0x1010, b"UN", b"", UNDEFINED) + item +
           tag(0xFFFE, 0xE0DD, 0) + explicit_image())

    hidden = explicit(0x0009, 0x1011, b"UT", b"", BIG)
    yield ("dicom_vr_not_letters.dcm",
           meta("1.2.840.10008.1.2.1") + struct.pack("<HH", 0x0009, 0x0010) +
           b"\x01\x01\x00\x00" + hidden + bytes(257 - len(hidden)) + explicit_image())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    out = parser.parse_args().out
    os.makedirs(out, exist_ok=True)
    for name, data in files():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        print(name, len(data))


if __name__ == "__main__":
    main()
