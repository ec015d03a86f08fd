#!/usr/bin/env bash
# Copies every shared library the given programs load into LIB_DIR, except
# those every Linux system has (the C runtime and the rest of the manylinux
# policy's list, tools/manylinux_libs.txt), for the relocatable bundle
# (tools/bundle.sh) and the pip wheel (tools/make_wheel.py).
# Run as: tools/collect_libs.sh LIB_DIR PROGRAM...
#
# The list comes from the programs' own dependencies (ldd: direct and
# indirect), so a library a new feature links is carried without edits
# here. Each copy gets the run path $ORIGIN, so the libraries find each
# other in LIB_DIR (a run path is not inherited: libdnnl's libgomp or
# libtiff's libjbig is looked up with libdnnl's or libtiff's own). The
# programs themselves find LIB_DIR through their $ORIGIN/../lib run path.
#
# Libraries opened at run time (cuDNN, cuBLAS, NCCL, OpenMPI) are not
# dependencies and are not copied: they come from the machine
# (util/dynamic_library.h).
set -eu

if [ $# -lt 2 ]; then
    echo "usage: $0 LIB_DIR PROGRAM..." >&2
    exit 2
fi
lib_dir=$1
shift
command -v patchelf >/dev/null || { echo "collect_libs.sh: patchelf is missing (make deps)" >&2; exit 1; }

# Not copied: the libraries every manylinux system has (tools/manylinux_libs.txt),
# and CUDA's, in case a program was linked with them.
here=$(cd "$(dirname "$0")" && pwd)
system_libs=$(grep -v '^#' "$here/manylinux_libs.txt")
cuda='^(libcuda|libcudart|libcudnn|libcublas|libnccl|libnvrtc|libnvJitLink)'

mkdir -p "$lib_dir"
missing=$(ldd "$@" | grep "not found" || true)
if [ -n "$missing" ]; then
    echo "collect_libs.sh: unresolved libraries:" >&2
    echo "$missing" >&2
    exit 1
fi
ldd "$@" | awk '/=> \// { print $1, $3 }' | sort -u |
    while read -r name path; do
        if ! printf '%s\n' "$system_libs" | grep -qxF "$name" &&
            ! printf '%s\n' "$name" | grep -Eq "$cuda"; then
            cp -L "$path" "$lib_dir/$name"
            chmod u+w "$lib_dir/$name"
            patchelf --set-rpath '$ORIGIN' "$lib_dir/$name"
        fi
    done
