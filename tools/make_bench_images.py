#!/usr/bin/python3
"""Builds the input-pipeline benchmark folder: ImageNet-like images cut from
real photographs shipped in Debian packages.

    tools/make_bench_images.py --out DIR [--count 2000] [--seed 0] [--sources DIR ...]

Each output image is a random crop of a source photo, optionally mirrored,
resized so that sizes follow ImageNet's shape (long side mostly 500 px, short
side 333-500 px; 5% larger, up to 2000 px long side) and re-encoded like
ImageNet: baseline JPEG, quality 90, 4:2:0 chroma subsampling, ".JPEG"
extension. 2% are PNG and 2% lossy WebP so every decoder is exercised; 1% of
the JPEGs are greyscale. Images are spread over 10 class folders.

Deterministic: image i depends only on (seed, i) and the sorted source list.
Idempotent: a marker file, written first, records (count, seed, sources); if
it matches and every file exists nothing is done, missing files are made, and
a marker for other settings (or a non-empty folder without one) is an error. Files are written to a temporary name and
renamed, so an interrupted run never leaves a half-written image.

Default sources (Debian bookworm): lomiri-wallpapers-16.04 (14 photos,
2-16 Mpx, one non-photo excluded) and mate-backgrounds (12 nature photos,
1.3-4 Mpx). Needs Pillow (Debian: python3-pil).
"""
import argparse
import hashlib
import json
import multiprocessing
import os
import random
import sys
import time

from PIL import Image

SCRIPT_VERSION = 2
MARKER_NAME = ".bench-images.json"
CLASS_COUNT = 10
SOURCE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp")

# Photos from Debian packages (see module docstring); files that are missing
# are left out, so a machine with only one of the packages still works.
DEFAULT_SOURCE_DIRS = ["/usr/share/backgrounds", "/usr/share/backgrounds/mate/nature"]
DEFAULT_SOURCE_PACKAGES = ["lomiri-wallpapers-16.04", "mate-backgrounds"]
LOMIRI_PHOTOS = [
    "Bridge_by_Sander_Klootwijk.jpg", "Dragonfly_by_Bolly.jpg", "Picture_0B_by_freespace.jpg",
    "Picture_1A_by_freespace.jpg", "Wine_by_Jakkub_Mede.jpg", "aitzgorri_by_Aitzol_Berasategi.jpg",
    "analogpattern_by_Peter_Nerlich.jpg", "free_by_Peter_Nerlich.jpg",
    "friends_by_Aitzol_Berasategi.jpg", "greentock_by_Peter_Nerlich.jpg",
    "life_by_Aitzol_Berasategi.jpg", "picosdeeuropa_by_Aitzol_Berasategi.jpg",
    "seeding_by_Clements_Engelhardt.jpg", "sunset_by_Aitzol_Berasategi.jpg",
]  # umang_by_Abhishek_Mudgal.jpg is a colour gradient, not a photo: left out
MATE_NATURE_PHOTOS = [
    "Aqua.jpg", "Blinds.jpg", "Dune.jpg", "FreshFlower.jpg", "Garden.jpg", "GreenMeadow.jpg",
    "LadyBird.jpg", "RainDrops.jpg", "Storm.jpg", "TwoWings.jpg", "Wood.jpg", "YellowFlower.jpg",
]

# Output mix (fractions of all images).
LARGE_SHARE = 0.05
PNG_SHARE = 0.02
WEBP_SHARE = 0.02
GREY_JPEG_SHARE = 0.01
JPEG_QUALITY = 90
WEBP_QUALITY = 80


def default_sources():
    paths = [os.path.join(DEFAULT_SOURCE_DIRS[0], name) for name in LOMIRI_PHOTOS]
    paths += [os.path.join(DEFAULT_SOURCE_DIRS[1], name) for name in MATE_NATURE_PHOTOS]
    return [p for p in paths if os.path.isfile(p)]


def list_sources(dirs):
    found = []
    for top in dirs:
        if not os.path.isdir(top):
            sys.exit(f"make_bench_images: --sources {top}: not a directory")
        for root, _, files in os.walk(top, followlinks=True):
            found += [os.path.join(root, f) for f in files if f.lower().endswith(SOURCE_EXTENSIONS)]
    return sorted(found)


def image_rng(seed, index):
    # One generator per image, so any image can be remade alone.
    return random.Random(f"bench-image:{seed}:{index}")


def plan_image(seed, index, source_count):
    """Draws everything about image `index` except the crop position."""
    rng = image_rng(seed, index)
    plan = {"index": index, "source": rng.randrange(source_count)}
    if rng.random() < LARGE_SHARE:
        long_side = rng.randint(800, 2000)
    elif rng.random() < 0.8:
        long_side = 500  # ImageNet's most common long side
    else:
        long_side = rng.randint(350, 499)
    pick = rng.random()
    if pick < 0.55:
        aspect = 4 / 3
    elif pick < 0.80:
        aspect = 3 / 2
    elif pick < 0.85:
        aspect = 1.0
    else:
        aspect = rng.uniform(1.1, 1.8)
    short_side = max(1, round(long_side / aspect))
    portrait = rng.random() < 0.25
    plan["width"], plan["height"] = (short_side, long_side) if portrait else (long_side, short_side)
    plan["crop_side_fraction"] = rng.uniform(0.45, 1.0)  # of the largest crop with that aspect
    plan["crop_x"], plan["crop_y"] = rng.random(), rng.random()
    plan["mirror"] = rng.random() < 0.5
    pick = rng.random()
    if pick < PNG_SHARE:
        plan["format"] = "png"
    elif pick < PNG_SHARE + WEBP_SHARE:
        plan["format"] = "webp"
    elif pick < PNG_SHARE + WEBP_SHARE + GREY_JPEG_SHARE:
        plan["format"] = "jpeg-grey"
    else:
        plan["format"] = "jpeg"
    return plan


def output_path(out_dir, plan):
    extension = {"png": ".png", "webp": ".webp"}.get(plan["format"], ".JPEG")
    class_dir = f"class_{plan['index'] % CLASS_COUNT:02d}"
    return os.path.join(out_dir, class_dir, f"img_{plan['index']:06d}{extension}")


def render(source, plan):
    """Crops `source` (RGB) to the plan's aspect ratio and size."""
    target_w, target_h = plan["width"], plan["height"]
    src_w, src_h = source.size
    scale = min(src_w / target_w, src_h / target_h) * plan["crop_side_fraction"]
    crop_w = max(1, min(src_w, round(target_w * scale)))
    crop_h = max(1, min(src_h, round(target_h * scale)))
    left = round((src_w - crop_w) * plan["crop_x"])
    top = round((src_h - crop_h) * plan["crop_y"])
    image = source.crop((left, top, left + crop_w, top + crop_h))
    # reducing_gap: a fast integer box reduction first, then Lanczos; the
    # result is indistinguishable from a full Lanczos at these ratios.
    image = image.resize((target_w, target_h), Image.Resampling.LANCZOS, reducing_gap=3.0)
    if plan["mirror"]:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    image.info = {}  # no comment, EXIF or ICC profile carried over from the source
    return image


def save(image, plan, path):
    tmp_path = path + ".tmp"
    fmt = plan["format"]
    if fmt == "png":
        image.save(tmp_path, "PNG", compress_level=6)
    elif fmt == "webp":
        image.save(tmp_path, "WEBP", quality=WEBP_QUALITY, method=4)
    else:
        if fmt == "jpeg-grey":
            image = image.convert("L")
        # subsampling=2 is 4:2:0; baseline (not progressive), like ImageNet.
        image.save(tmp_path, "JPEG", quality=JPEG_QUALITY, subsampling=2, progressive=False,
                   optimize=False)
    os.replace(tmp_path, path)


def make_images_from_source(job):
    """Worker: decodes one source once and writes every missing image cut from it."""
    source_path, plans, out_dir = job
    with Image.open(source_path) as opened:
        source = opened.convert("RGB")
    for plan in plans:
        save(render(source, plan), plan, output_path(out_dir, plan))
    return len(plans)


def source_digest(sources):
    h = hashlib.sha256()
    for path in sources:
        h.update(os.path.basename(path).encode())
        h.update(str(os.path.getsize(path)).encode())
    return h.hexdigest()[:16]


def read_marker(out_dir):
    try:
        with open(os.path.join(out_dir, MARKER_NAME)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def write_marker(out_dir, settings):
    path = os.path.join(out_dir, MARKER_NAME)
    with open(path + ".tmp", "w") as f:
        json.dump(settings, f, indent=1)
    os.replace(path + ".tmp", path)


def print_summary(out_dir, plans, seconds, made):
    sizes = [os.path.getsize(output_path(out_dir, p)) for p in plans]
    formats = {}
    for p in plans:
        formats[p["format"]] = formats.get(p["format"], 0) + 1
    count = len(plans)
    mean_w = sum(p["width"] for p in plans) / count
    mean_h = sum(p["height"] for p in plans) / count
    mean_mpx = sum(p["width"] * p["height"] for p in plans) / count / 1e6
    print(f"bench images: {out_dir}: {count} images ({made} made now, {seconds:.1f} s), "
          f"{CLASS_COUNT} classes, formats {dict(sorted(formats.items()))}")
    print(f"  mean size {mean_w:.0f} x {mean_h:.0f} px ({mean_mpx:.3f} Mpx), "
          f"mean file {sum(sizes) / count / 1024:.1f} KiB, total {sum(sizes) / 1e6:.1f} MB")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="benchmark folder to create or complete")
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sources", nargs="+", metavar="DIR",
                        help="folders of source photos (default: the Debian packages' photos)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    if args.count < 1:
        sys.exit(f"make_bench_images: --count {args.count}: must be at least 1")

    sources = list_sources(args.sources) if args.sources else default_sources()
    if not sources:
        sys.exit("make_bench_images: no source photos found; install "
                 + " ".join(DEFAULT_SOURCE_PACKAGES) + " (apt-get) or pass --sources DIR")
    settings = {"version": SCRIPT_VERSION, "count": args.count, "seed": args.seed,
                "sources": len(sources), "source_digest": source_digest(sources)}
    marker = read_marker(args.out)
    if marker is not None and marker != settings:
        sys.exit(f"make_bench_images: {args.out} was made with {marker}, not {settings}; "
                 "delete it or choose another --out")
    if marker is None and os.path.isdir(args.out) and os.listdir(args.out):
        sys.exit(f"make_bench_images: {args.out} is not empty and has no {MARKER_NAME}; "
                 "choose an empty or new --out")
    # The marker goes first, so an interrupted run is completed, never mixed
    # with a run of other settings.
    os.makedirs(args.out, exist_ok=True)
    write_marker(args.out, settings)

    start = time.time()
    plans = [plan_image(args.seed, i, len(sources)) for i in range(args.count)]
    missing = [p for p in plans if not os.path.isfile(output_path(args.out, p))]
    if missing:
        for c in range(CLASS_COUNT):
            os.makedirs(os.path.join(args.out, f"class_{c:02d}"), exist_ok=True)
        by_source = {}
        for p in missing:
            by_source.setdefault(p["source"], []).append(p)
        # Largest groups first so the pool's workers finish together.
        jobs = sorted(((sources[s], group, args.out) for s, group in by_source.items()),
                      key=lambda job: -len(job[1]))
        with multiprocessing.Pool(max(1, args.jobs)) as pool:
            for _ in pool.imap_unordered(make_images_from_source, jobs):
                pass
    print_summary(args.out, plans, time.time() - start, len(missing))


if __name__ == "__main__":
    main()
