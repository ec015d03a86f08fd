#!/usr/bin/env bash
# Checks every library lightly-train-c needs (pkg-config / headers). When one
# is missing: as root, installs the Debian packages with apt-get; otherwise
# prints the exact apt-get line and fails.
set -u

# pkg-config module (pc), header (hdr; for libraries without a .pc file),
# file (data sets used by the tests; C++ headers, which the C preprocessor
# cannot check) or Python module of python3 (py; the wheel's test,
# tests/e2e/wheel.sh) -> Debian package
checks=(
  "pc:libjpeg:libjpeg62-turbo-dev"
  "pc:libpng:libpng-dev"
  "pc:libwebp:libwebp-dev"
  "pc:libwebpdemux:libwebp-dev"
  "pc:libwebpmux:libwebp-dev"
  "pc:libprotobuf-c:libprotobuf-c-dev"
  "pc:zlib:zlib1g-dev"
  "pc:libdeflate:libdeflate-dev"
  "pc:libcurl:libcurl4-openssl-dev"
  "pc:libcrypto:libssl-dev"
  "pc:libzip:libzip-dev"
  "pc:libtiff-4:libtiff-dev"
  "pc:libgif:libgif-dev"
  "pc:libheif:libheif-dev"
  "pc:libavif:libavif-dev"
  "pc:libjxl:libjxl-dev"
  "pc:libexif:libexif-dev"
  "pc:stb:libstb-dev"
  "file:/usr/include/dcmtk/dcmdata/dctk.h:libdcmtk-dev"
  "pc:cmocka:libcmocka-dev"
  "hdr:oneapi/dnnl/dnnl.h:libdnnl-dev"
  "pc:ompi-c:libopenmpi-dev"
  "file:/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz:dataset-fashion-mnist"
  "py:venv:python3-venv"
  "py:numpy:python3-numpy"
)
tools=(
  "pkg-config:pkg-config"
  "protoc-c:protobuf-c-compiler"
  "mpirun:openmpi-bin"
  "xz:xz-utils"
  "python3:python3"
  "patchelf:patchelf"
  "readelf:binutils"
)

missing=()
for entry in "${tools[@]}"; do
  command -v "${entry%%:*}" >/dev/null 2>&1 || missing+=("${entry#*:}")
done
for entry in "${checks[@]}"; do
  IFS=: read -r kind name package <<<"$entry"
  if [ "$kind" = pc ]; then
    command -v pkg-config >/dev/null 2>&1 && pkg-config --exists "$name" && continue
  fi
  if [ "$kind" = hdr ]; then
    echo "#include <$name>" | "${CC:-cc}" -E -x c - >/dev/null 2>&1 && continue
  fi
  if [ "$kind" = file ]; then
    [ -f "$name" ] && continue
  fi
  if [ "$kind" = py ]; then
    # The python tests/e2e/wheel.sh uses: Debian's, where there is one.
    "$(command -v /usr/bin/python3 || command -v python3)" -c "import $name" >/dev/null 2>&1 && continue
  fi
  missing+=("$package")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all libraries found (libjpeg-turbo, libpng, libwebp, libtiff, giflib, libheif, libavif, libjxl, libexif, stb, DCMTK, protobuf-c, zlib, libdeflate, libcurl, libcrypto, libzip, cmocka, oneDNN, OpenMPI, Fashion-MNIST, python3 venv and numpy)"
  exit 0
fi

packages=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "deps: installing $packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq $packages >/dev/null || {
    echo "deps: apt-get install failed for: $packages" >&2
    exit 1
  }
  exit 0
fi
echo "deps: missing libraries; install them with:" >&2
echo "  sudo apt-get install -y $packages" >&2
exit 1
