#!/usr/bin/env python3
"""Writes two grid images made from a HEIF file of one item (a HEIC: the
format that libheif decodes for us; AVIF goes through libavif): its coded
image becomes the single tile of a 1x1 'grid' item, the primary image, whose
'ispe' is the tile's.

    python3 tools/make_heif_grid_fixtures.py tests/fixtures/heif_grid/rgb64.heic \\
        tests/fixtures/heif_grid/output_larger_than_ispe.heic \\
        tests/fixtures/heif_grid/grid_1x1.heic \\
        tests/fixtures/heif_grid/output_within_limit_larger_than_ispe.heic

  output_larger_than_ispe.heic: the grid's own data declares an
      output of 30000 x 30000 pixels. libheif 1.15 allocates the grid's
      output from that declaration (decode_full_grid_image: three planes of
      900 MB) although the handle, and so our pixel limit, says 64 x 64.
  grid_1x1.heic: the same grid declaring the tile's size: a valid file,
      which must decode to the source's pixels.
  output_within_limit_larger_than_ispe.heic: the grid declares 4000 x 4000,
      within the default pixel limit (Pillow's 89 Mpx) that the canvas check
      reads the declaration against, but not the 64 x 64 its header says.

rgb64.heic, the source, is a 64 x 64 gradient (no 'clap', so the tile is
the whole image) written once with pillow-heif 1.8.1 (x265):
    Image.fromarray(np.stack([x * 4, y * 4, (x + y) * 2], -1).astype(np.uint8))
        .save("rgb64.heic", quality=95)   # x, y = np.meshgrid(range(64), range(64))
Standard library only: the source's boxes are rewritten, not re-encoded.
"""
import struct
import sys


def box(kind, body):
    return struct.pack(">I4s", 8 + len(body), kind) + body


def full_box(kind, version, flags, body):
    return box(kind, struct.pack(">I", version << 24 | flags) + body)


def children(data, start, end):
    """{type: (start, size)} of the boxes in data[start:end] (32-bit sizes)."""
    found = {}
    while start < end:
        size, kind = struct.unpack(">I4s", data[start:start + 8])
        found[kind] = (start, size)
        start += size
    return found


def grid_file(source, output_width, output_height):
    top = children(source, 0, len(source))
    meta_start, meta_size = top[b"meta"]
    meta = children(source, meta_start + 12, meta_start + meta_size)
    mdat_start, mdat_size = top[b"mdat"]
    tile = source[mdat_start + 8:mdat_start + mdat_size]
    ftyp = source[top[b"ftyp"][0]:top[b"ftyp"][0] + top[b"ftyp"][1]]
    hdlr = source[meta[b"hdlr"][0]:meta[b"hdlr"][0] + meta[b"hdlr"][1]]
    iinf_start, iinf_size = meta[b"iinf"]
    infe_tile = source[iinf_start + 14:iinf_start + iinf_size]  # after version, flags, count
    iprp_start, iprp_size = meta[b"iprp"]
    iprp = children(source, iprp_start + 8, iprp_start + iprp_size)
    ipco = source[iprp[b"ipco"][0]:iprp[b"ipco"][0] + iprp[b"ipco"][1]]
    ipma_start = iprp[b"ipma"][0]
    tile_associations = source[ipma_start + 16:ipma_start + iprp[b"ipma"][1]]  # item 1's
    properties = children(source, iprp[b"ipco"][0] + 8, iprp[b"ipco"][0] + iprp[b"ipco"][1])
    order = sorted(properties, key=lambda kind: properties[kind][0])
    ispe_index = order.index(b"ispe") + 1  # 1-based, as ipma counts
    ispe_start = properties[b"ispe"][0]
    tile_width, tile_height = struct.unpack(">II", source[ispe_start + 12:ispe_start + 20])
    output_width = output_width or tile_width
    output_height = output_height or tile_height

    grid = struct.pack(">BBBBHH", 0, 0, 0, 0, output_width, output_height)  # 1 x 1, 16-bit
    pitm = full_box(b"pitm", 0, 0, struct.pack(">H", 2))
    infe_grid = full_box(b"infe", 2, 0, struct.pack(">HH4s", 2, 0, b"grid") + b"\0")
    iinf = full_box(b"iinf", 0, 0, struct.pack(">H", 2) + infe_tile + infe_grid)
    iref = full_box(b"iref", 0, 0, box(b"dimg", struct.pack(">HHH", 2, 1, 1)))
    ipma = full_box(b"ipma", 0, 0, struct.pack(">I", 2) + tile_associations +
                    struct.pack(">HBB", 2, 1, ispe_index))  # the grid: the tile's ispe
    iprp_new = box(b"iprp", ipco + ipma)

    def iloc(tile_offset):
        return full_box(b"iloc", 0, 0, struct.pack(">BBH", 0x44, 0x00, 2) +
                        struct.pack(">HHHII", 1, 0, 1, tile_offset, len(tile)) +
                        struct.pack(">HHHII", 2, 0, 1, tile_offset + len(tile), len(grid)))

    def meta_box(tile_offset):
        return full_box(b"meta", 0, 0, hdlr + pitm + iloc(tile_offset) + iinf + iref + iprp_new)

    tile_offset = len(ftyp) + len(meta_box(0)) + 8  # the mdat's header
    return ftyp + meta_box(tile_offset) + box(b"mdat", tile + grid)


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    source = open(sys.argv[1], "rb").read()
    for path, size in ((sys.argv[2], (30000, 30000)), (sys.argv[3], (0, 0)),  # 0: the tile's
                       (sys.argv[4], (4000, 4000))):
        data = grid_file(source, *size)
        with open(path, "wb") as out:
            out.write(data)
        print(path, len(data))


if __name__ == "__main__":
    main()
