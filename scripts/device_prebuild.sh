#!/usr/bin/env bash
# Builds, on a machine without a GPU, everything scripts/device_check.sh runs on the GPU, so
# that the GPU's minutes go to measuring: train_gpt, the kernel test programs
# (build/test_*_cuda), the attention and vector-kernel benches (build/bench_attention_cuda,
# build/bench_vector_cuda) and llm.c's trainer
# (train_gpt2cu with and without cuDNN, dev/bench/llmc_side.sh), for sm_$GPU_ARCH [90], into
# .deps/prebuilt (git-ignored; carried to the GPU machine). device_check.sh uses them when
# their MANIFEST's source digest is the tree's and every one loads there; else it builds.
#
#   bash scripts/device_prebuild.sh          # here, with nvcc (no GPU needed)
#   bash scripts/device_prebuild.sh digest   # the tree's source digest (what MANIFEST records)
#
# The tree's sources are copied (tar keeps their times, so make rebuilds only what changed)
# into .deps/prebuild_tree and built there with its own build/, leaving this checkout's build/
# and its flavour alone, with the GPU machine in mind:
#   - GPU_ARCH=90 only (H100, H200);
#   - OPT with -march=$PREBUILD_MARCH [x86-64-v3: AVX2 and FMA, which any Hopper host has]
#     instead of -march=native, which would tie the binaries to this machine's processor;
#   - NO_MPI=1 unless PREBUILD_NO_MPI=0: the GPU image may have no MPI (ranks then meet over
#     TCP, scripts/launch_local.sh, as device_check.sh's own build without mpicc does).
# llm.c's trainer needs its sources in .deps/llmc (bash dev/bench/llmc_side.sh fetch, where the
# snapshot is); without them it is left out, said, and device_check.sh's d12 row for llm.c
# says it was not built.
# At the end: each binary's size, the folder's total, and what a device call carries with
# the command README's GPU section gives (the device tool's limit is 64 MiB for the working
# tree and the carried paths together).
# Exit status: 0; 1 when a build failed (the folder then holds no MANIFEST).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

# The digest of what the binaries are built from: every source, header, script and the
# Makefile, by content (with or without .git: a copy of the tree on the GPU machine may lack it).
digest() {
    find Makefile train_gpt.cu util comm kernels dataloader fsdp checkpoint model train dev/test dev/bench \
         -type f \( -name '*.c' -o -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name 'Makefile' \) 2>/dev/null |
        LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16
}
if [ "${1:-}" = digest ]; then digest; exit 0; fi
[ $# -eq 0 ] || { echo "usage: bash scripts/device_prebuild.sh [digest]" >&2; exit 2; }

GPU_ARCH=${GPU_ARCH:-90}
MARCH=${PREBUILD_MARCH:-x86-64-v3}
NO_MPI=${PREBUILD_NO_MPI:-1}
OUTD=$ROOT/.deps/prebuilt
TREE=$ROOT/.deps/prebuild_tree
die() { echo "device_prebuild: $*" >&2; exit 1; }
command -v nvcc > /dev/null || die "nvcc not found: nothing can be built for the GPU here"
[[ "$GPU_ARCH" =~ ^[0-9]+$ ]] || die "GPU_ARCH must be one architecture number, e.g. 90 (got '$GPU_ARCH')"
mkdir -p "$OUTD" "$TREE" || die "cannot create $OUTD and $TREE"
rm -f "$OUTD/MANIFEST"

# The sources, as make needs them (git's list where there is one, else the folders above).
if git rev-parse --git-dir > /dev/null 2>&1; then
    git ls-files -co --exclude-standard -z | grep -zv '^\.venv$' | tar -cf - --ignore-failed-read --null -T - 2> /dev/null | tar -xf - -C "$TREE" ||
        die "cannot copy the tree into $TREE"
else
    tar -cf - --exclude=build --exclude=.deps . | tar -xf - -C "$TREE" || die "cannot copy the tree into $TREE"
fi
KERNEL_TESTS=()
for src in dev/test/test_*_cuda.cu; do KERNEL_TESTS+=("build/$(basename "$src" .cu)"); done
TARGETS=(train_gpt "${KERNEL_TESTS[@]}" build/bench_attention_cuda build/bench_vector_cuda)
# --attention cudnn compiles the cudnn-frontend into train_gpt (and the test programs): its
# headers are .deps/cudnn_frontend's, which the copied tree lacks (.deps is git-ignored).
bash scripts/cudnn_frontend.sh || die "the cudnn-frontend headers could not be had (scripts/cudnn_frontend.sh): train_gpt would be built without --attention cudnn"
FE_INC=$ROOT/.deps/cudnn_frontend/include
t0=$SECONDS
echo "+ make -j$(nproc) GPU_ARCH=$GPU_ARCH NO_MPI=$NO_MPI OPT=\"-O3 -march=$MARCH -fno-math-errno\" ${TARGETS[*]} (in $TREE)"
if [ "$NO_MPI" = 1 ]; then mpi=(NO_MPI=1); else mpi=(); fi
make -C "$TREE" -j"$(nproc)" GPU_ARCH="$GPU_ARCH" "${mpi[@]}" OPT="-O3 -march=$MARCH -fno-math-errno" CUDNN_FE_INC="$FE_INC" "${TARGETS[@]}" \
    > "$OUTD/build.log" 2>&1 || die "make failed after $((SECONDS - t0)) s: $(grep -m3 -E 'error|\*\*\*' "$OUTD/build.log" | tr '\n' ' ' | cut -c1-300) (log: $OUTD/build.log)"
mkdir -p "$OUTD/build"
cp "$TREE/train_gpt" "$OUTD/" && for t in "${KERNEL_TESTS[@]}" build/bench_attention_cuda build/bench_vector_cuda; do cp "$TREE/$t" "$OUTD/build/" || exit 1; done ||
    die "cannot copy the binaries into $OUTD"
grep -q -- '-DFSDP_NO_CUDNN' "$OUTD/build.log" && die "train_gpt was built without cuDNN (no cudnn.h found: scripts/find_cudnn.sh include; log: $OUTD/build.log)"
echo "device_prebuild: ours built in $((SECONDS - t0)) s"

# llm.c's trainer, both builds (its own script says what it lacks); not again when both are
# there from the same snapshot and architecture (a stamp says which; minutes saved here).
llmc="llm.c: not built (no sources in .deps/llmc: bash dev/bench/llmc_side.sh fetch)"
if [ -f .deps/llmc/src/train_gpt2.cu ]; then
    stamp="$(cat .deps/llmc/COMMIT) sm_$GPU_ARCH"
    if [ -x "$OUTD/train_gpt2cu" ] && [ -x "$OUTD/train_gpt2cu_nocudnn" ] && [ "$(cat "$OUTD/.llmc_stamp" 2>/dev/null)" = "$stamp" ]; then
        llmc="llm.c $(cut -c1-12 .deps/llmc/COMMIT): train_gpt2cu, train_gpt2cu_nocudnn (as built before)"
    else
        t0=$SECONDS
        rm -f "$OUTD/.llmc_stamp"
        if LLMC_BIN=$OUTD GPU_ARCH=$GPU_ARCH bash dev/bench/llmc_side.sh build > "$OUTD/llmc_build.log" 2>&1; then
            llmc="llm.c $(cut -c1-12 .deps/llmc/COMMIT): train_gpt2cu, train_gpt2cu_nocudnn"
            echo "$stamp" > "$OUTD/.llmc_stamp"
        else
            llmc="llm.c: $(grep -m1 '^llmc_side: build: failed' "$OUTD/llmc_build.log" || tail -n 1 "$OUTD/llmc_build.log") (log: $OUTD/llmc_build.log)"
        fi
        echo "device_prebuild: llm.c built in $((SECONDS - t0)) s"
    fi
fi

{
    echo "digest $(digest)"
    echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' (+ local changes)')"
    echo "built $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname): sm_$GPU_ARCH, -march=$MARCH, NO_MPI=$NO_MPI, nvcc $(nvcc --version | grep -o 'release [0-9.]*' | cut -d' ' -f2)"
    echo "$llmc"
    (cd "$OUTD" && for f in train_gpt build/* train_gpt2cu train_gpt2cu_nocudnn; do [ -f "$f" ] && echo "binary $f $(stat -c %s "$f")"; done)
} > "$OUTD/MANIFEST.tmp" && mv "$OUTD/MANIFEST.tmp" "$OUTD/MANIFEST" || die "cannot write $OUTD/MANIFEST"
awk '$1 == "binary" { printf "  %-34s %6.1f MiB\n", $2, $3 / 1048576 }' "$OUTD/MANIFEST"
echo "device_prebuild: $(du -sb "$OUTD" | awk '{ printf "%.1f MiB", $1 / 1048576 }') in $OUTD ($(grep -c '^binary' "$OUTD/MANIFEST") binaries; $llmc)"
# What one device call carries: the tree (tracked and untracked-not-ignored files) and the paths README names.
tree=$(git ls-files -co --exclude-standard -z 2>/dev/null | xargs -0 du -cb 2>/dev/null | awk '$2 == "total" { s += $1 } END { print s + 0 }')
carry=0 absent=""
for p in .deps/prebuilt .deps/debs .deps/llmc .deps/cudnn_frontend data/tinyshakespeare; do
    if [ -e "$p" ]; then carry=$((carry + $(du -sb "$p" | cut -f1))); else absent+=" $p"; fi
done
awk -v t="$tree" -v c="$carry" -v a="$absent" 'BEGIN { printf "device_prebuild: a device call carries %.1f MiB (tree %.1f MiB + .deps/prebuilt, .deps/debs, .deps/llmc, .deps/cudnn_frontend, data/tinyshakespeare %.1f MiB) of the 64 MiB allowed%s\n", (t + c) / 1048576, t / 1048576, c / 1048576, a == "" ? "" : "; not here yet, not counted:" a }'
