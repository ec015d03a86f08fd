#!/usr/bin/env python3
"""make wheel: dist/lightly_train_c-VERSION-py3-none-manylinux_2_X_x86_64.whl.

    tools/make_wheel.py BUILD_DIR VERSION OUT_DIR

The wheel holds the Python package (python/lightly_train_c), the program
already built in BUILD_DIR (lightly_train_c/bin/lightly-train-c, debug
information stripped, run path $ORIGIN/../lib) and every library it loads
that a manylinux system does not provide (lightly_train_c/lib, collected by
tools/collect_libs.sh, the bundle's collector). cuDNN, cuBLAS, NCCL and
OpenMPI are opened at run time and come from the environment
(src/util/dynamic_library.h).

The platform tag is the one the contents satisfy, worked out here, not
assumed: every ELF file's needed libraries must be in the wheel or in the
manylinux list (tools/manylinux_libs.txt), and its symbol versions
(GLIBC_, GLIBCXX_, CXXABI_, GCC_) give the oldest manylinux_2_X policy that
has them all. Prints the tag and the limiting symbol versions. Standard
library only, plus binutils (readelf, strip) and patchelf.
"""

import base64
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NAME = "lightly_train_c"

# The newest symbol versions each manylinux_2_X policy allows on x86_64,
# from auditwheel 6's manylinux-policy.json (GLIBC is 2.X itself; 2.36 and
# later also allow GLIBC_ABI_DT_RELR). ZLIB_ is limited to 1.2.9 in all.
POLICIES = [
    (28, {"GLIBCXX": (3, 4, 24), "CXXABI": (1, 3, 11), "GCC": (7, 0, 0)}),
    (31, {"GLIBCXX": (3, 4, 28), "CXXABI": (1, 3, 12), "GCC": (7, 0, 0)}),
    (34, {"GLIBCXX": (3, 4, 29), "CXXABI": (1, 3, 13), "GCC": (7, 0, 0)}),
    (35, {"GLIBCXX": (3, 4, 30), "CXXABI": (1, 3, 13), "GCC": (12, 0, 0)}),
    (36, {"GLIBCXX": (3, 4, 30), "CXXABI": (1, 3, 13), "GCC": (12, 0, 0)}),
    (38, {"GLIBCXX": (3, 4, 30), "CXXABI": (1, 3, 13), "GCC": (12, 0, 0)}),
    (39, {"GLIBCXX": (3, 4, 33), "CXXABI": (1, 3, 15), "GCC": (14, 0, 0)}),
    (41, {"GLIBCXX": (3, 4, 33), "CXXABI": (1, 3, 15), "GCC": (14, 0, 0)}),
]
ZLIB_MAX = (1, 2, 9)

SUMMARY = ("Self-supervised pretraining of image backbones (SimCLR, DINO, DINOv2, "
           "distillation, ...) in one native program, with LightlyTrain's Python API")
REQUIRES = [
    # The program links the CUDA runtime statically and opens these by name
    # (the launcher puts their nvidia/*/lib folders on LD_LIBRARY_PATH).
    'nvidia-cudnn-cu13>=9; extra == "cuda"',
    'nvidia-cublas>=13,<14; extra == "cuda"',
    'nvidia-nccl-cu13>=2.18; extra == "cuda"',
    'numpy; extra == "numpy"',
]


def fail(message):
    sys.exit(f"make_wheel.py: {message}")


def run(*command):
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def is_elf(path):
    with open(path, "rb") as file:
        return file.read(4) == b"\x7fELF"


def version_tuple(text):
    return tuple(int(part) for part in text.split("."))


def elf_needs(path):
    """(needed sonames, {family: [version tuples]}) of one ELF file."""
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", run("readelf", "-dW", path))
    versions = {}
    # The versions it needs (not those it defines, listed before them).
    section = run("readelf", "-VW", path)
    start = section.find("Version needs section")
    needs = section[start:] if start >= 0 else ""
    for family, number in re.findall(r"Name: ([A-Z]+)_([0-9.]+)\s", needs):
        versions.setdefault(family, []).append(version_tuple(number))
    if "GLIBC_ABI_DT_RELR" in needs:
        versions.setdefault("GLIBC", []).append((2, 36))
    return needed, versions


def platform_tag(package_dir):
    """The manylinux tag the ELF files in package_dir satisfy, and a report."""
    system = {line.strip() for line in (HERE / "manylinux_libs.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    carried = {path.name for path in (package_dir / "lib").iterdir()}
    newest = {}
    for path in sorted(package_dir.rglob("*")):
        if not path.is_file() or not is_elf(path):
            continue
        needed, versions = elf_needs(path)
        for soname in needed:
            if soname not in carried and soname not in system:
                fail(f"{path.relative_to(package_dir)} needs {soname}, which is neither in "
                     "the wheel nor on every manylinux system")
        for family, found in versions.items():
            top = max(found)
            if top > newest.get(family, ((0,), ""))[0]:
                newest[family] = (top, path.name)
    glibc = newest.get("GLIBC", ((2, 17), ""))[0]
    if newest.get("ZLIB", ((0,), ""))[0] > ZLIB_MAX:
        fail(f"{newest['ZLIB'][1]} needs ZLIB_{'.'.join(map(str, newest['ZLIB'][0]))}")
    for minor, limits in POLICIES:
        if (2, minor) >= glibc[:2] and all(newest.get(family, ((0,), ""))[0] <= limit
                                           for family, limit in limits.items()):
            report = ", ".join(f"{family}_{'.'.join(map(str, top))} ({name})"
                               for family, (top, name) in sorted(newest.items()))
            return f"manylinux_2_{minor}_x86_64", report
    fail(f"no manylinux policy allows these symbol versions: {newest}")


def metadata(version):
    lines = ["Metadata-Version: 2.1", "Name: lightly-train-c", f"Version: {version}",
             f"Summary: {SUMMARY}", "Requires-Python: >=3.8", "Provides-Extra: cuda",
             "Provides-Extra: numpy"]
    lines += [f"Requires-Dist: {requirement}" for requirement in REQUIRES]
    lines += ["Description-Content-Type: text/markdown", ""]
    return "\n".join(lines) + (ROOT / "docs" / "python.md").read_text()


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_wheel(stage, dist_info, tag, out_dir, version):
    files = sorted(path for path in stage.rglob("*") if path.is_file())
    wheel = out_dir / f"{NAME}-{version}-py3-none-{tag}.whl"
    out_dir.mkdir(parents=True, exist_ok=True)
    temporary = wheel.with_name(wheel.name + f".tmp.{os.getpid()}")
    records = []
    # Deflate level 6: 13.3 MiB in 5.5 s on 2 cores; tests pass
    # LTC_WHEEL_COMPRESSION=1 (15.2 MiB, 1.8 s).
    level = int(os.environ.get("LTC_WHEEL_COMPRESSION", "6"))
    with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as archive:
        for path in files:
            name = path.relative_to(stage).as_posix()
            if name == f"{dist_info}/RECORD":
                continue
            data = path.read_bytes()
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            # The file type too: pip makes a file executable only when the
            # entry says it is a regular file with an x bit.
            mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data, compresslevel=level)
            records.append(record_line(name, data))
        records.append(f"{dist_info}/RECORD,,")
        info = zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = (stat.S_IFREG | 0o644) << 16
        archive.writestr(info, "\n".join(records) + "\n")
    os.replace(temporary, wheel)
    return wheel


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: make_wheel.py BUILD_DIR VERSION OUT_DIR")
    build, version, out_dir = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    program = build / "lightly-train-c"
    if not os.access(program, os.X_OK):
        fail(f"{program} is missing (run make first)")
    with tempfile.TemporaryDirectory(prefix="ltc-wheel-") as temporary:
        stage = Path(temporary)
        package = stage / NAME
        shutil.copytree(ROOT / "python" / NAME, package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        (package / "bin").mkdir()
        binary = package / "bin" / "lightly-train-c"
        run("strip", "--strip-debug", "-o", str(binary), str(program))
        run("patchelf", "--set-rpath", "$ORIGIN/../lib", str(binary))
        run(str(HERE / "collect_libs.sh"), str(package / "lib"), str(binary))
        tag, report = platform_tag(package)
        dist_info = f"{NAME}-{version}.dist-info"
        (stage / dist_info).mkdir()
        (stage / dist_info / "METADATA").write_text(metadata(version))
        (stage / dist_info / "WHEEL").write_text(
            "Wheel-Version: 1.0\nGenerator: lightly-train-c tools/make_wheel.py\n"
            f"Root-Is-Purelib: false\nTag: py3-none-{tag}\n")
        (stage / dist_info / "entry_points.txt").write_text(
            "[console_scripts]\nlightly-train-c = lightly_train_c.__main__:main\n")
        (stage / dist_info / "top_level.txt").write_text(f"{NAME}\n")
        wheel = write_wheel(stage, dist_info, tag, out_dir, version)
        libraries = sorted(path.name for path in (package / "lib").iterdir())
    size = wheel.stat().st_size / 2**20
    print(f"wheel: {wheel} ({size:.1f} MiB), {tag}: newest symbol versions {report}")
    print(f"  libraries carried ({len(libraries)}): {' '.join(libraries)}")


if __name__ == "__main__":
    main()
