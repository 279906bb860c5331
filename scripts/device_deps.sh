# The libraries train_gpt builds against besides CUDA (zstd, PCRE2, cJSON, xxHash, OpenBLAS),
# for a machine that has CUDA but not these packages and cannot download them (the lent GPU
# machine: no network, an image without them). MPI is not among them: without mpicc the
# Makefile builds with NO_MPI=1 and ranks meet over TCP (scripts/launch_local.sh).
#
#   bash scripts/device_deps.sh fetch    # where apt works: Debian's .deb files into .deps/debs
#                                        # and the cudnn-frontend headers (scripts/cudnn_frontend.sh)
#                                        # (git-ignored; carry .deps to the other machine)
#   source scripts/device_deps.sh use    # there, before make: when the system lacks a header
#                                        # or library, unpacks the .debs into .deps/root and
#                                        # points CPATH, LIBRARY_PATH and LD_LIBRARY_PATH at it
#
# `use` says what it did on one line and changes nothing when the system has everything.
# The packages are Debian 12's (glibc 2.36): they run on any newer glibc (Ubuntu 24.04: 2.39).
DEVICE_DEPS_PACKAGES=(libzstd-dev libzstd1 libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0
    libpcre2-posix3 libcjson-dev libcjson1 libxxhash-dev libxxhash0 libopenblas-openmp-dev
    libopenblas0-openmp libopenblas-dev libopenblas0 libgfortran5 libquadmath0)

device_deps_root() { (cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd); }

# 0 when the C compiler finds every header and library the Makefile names.
device_deps_present() {
    local cc=${CC_PROBE:-cc} blas_inc=/usr/include/x86_64-linux-gnu/openblas-openmp
    local blas_dir=/usr/lib/x86_64-linux-gnu/openblas-openmp
    printf '#include <zstd.h>\n#define PCRE2_CODE_UNIT_WIDTH 8\n#include <pcre2.h>\n#include <cjson/cJSON.h>\n#include <xxhash.h>\n#include <cblas.h>\nint main(void) { return 0; }\n' |
        "$cc" -x c - -I"$blas_inc" -L"$blas_dir" -lzstd -lpcre2-8 -lcjson -lxxhash -lopenblas -o /dev/null 2>/dev/null
}

device_deps_fetch() {
    local dir
    dir="$(device_deps_root)/.deps/debs"
    mkdir -p "$dir" || return 1
    (cd "$dir" && apt-get download "${DEVICE_DEPS_PACKAGES[@]}") || { echo "device_deps: apt-get download failed" >&2; return 1; }
    echo "device_deps: $(ls "$dir"/*.deb | wc -l) packages, $(du -sh "$dir" | cut -f1) in $dir"
    # The cudnn-frontend's headers (--attention cudnn) travel in .deps too.
    bash "$(device_deps_root)/scripts/cudnn_frontend.sh"
}

device_deps_use() {
    local top root debs lib
    top=$(device_deps_root)
    root=$top/.deps/root
    if device_deps_present; then
        echo "device_deps: the system has every library train_gpt needs"
        return 0
    fi
    debs=("$top"/.deps/debs/*.deb)
    if [ ! -f "${debs[0]}" ]; then
        echo "device_deps: the system lacks zstd/PCRE2/cJSON/xxHash/OpenBLAS headers or libraries and $top/.deps/debs holds no packages (run 'bash scripts/device_deps.sh fetch' where apt works, and carry .deps)" >&2
        return 1
    fi
    rm -rf "$root" && mkdir -p "$root" || return 1
    for f in "${debs[@]}"; do
        dpkg-deb -x "$f" "$root" || { echo "device_deps: cannot unpack $f" >&2; return 1; }
    done
    lib=$root/usr/lib/x86_64-linux-gnu
    export CPATH="$root/usr/include:$root/usr/include/x86_64-linux-gnu/openblas-openmp${CPATH:+:$CPATH}"
    export LIBRARY_PATH="$lib:$lib/openblas-openmp${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export LD_LIBRARY_PATH="$lib:$lib/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if device_deps_present; then
        echo "device_deps: using ${#debs[@]} unpacked packages in $root (CPATH, LIBRARY_PATH, LD_LIBRARY_PATH)"
    else
        echo "device_deps: unpacked ${#debs[@]} packages in $root but a header or library is still missing" >&2
        return 1
    fi
}

case "${1:-}" in
    fetch) device_deps_fetch ;;
    use) device_deps_use ;;
    *) echo "usage: bash scripts/device_deps.sh fetch | source scripts/device_deps.sh use" >&2; false ;;
esac
