#!/usr/bin/env bash
# llm.c's own CUDA trainer (train_gpt2cu, github:karpathy/llm.c) beside train_gpt on the same
# GPU: its sources exported from a snapshot into a git-ignored folder (never committed), built
# as llm.c's Makefile builds train_gpt2cu, run on the d12 benchmark's shape and shard, and its
# per-step times turned into one RESULT line of dev/bench/torch_gpt2_fsdp2.py's form, which
# dev/bench/bench_gpu.sh reads into its d12 table.
#
#   bash dev/bench/llmc_side.sh fetch [GIT_DIR]   # where the snapshot is (the development machine)
#   bash dev/bench/llmc_side.sh build [cudnn|nocudnn|both]   # where nvcc is: sm_$GPU_ARCH binaries
#   bash dev/bench/llmc_side.sh run [LOG]          # on the GPU: prints the RESULT line
#
# fetch: `git archive` of train_gpt2.cu and llmc/ from GIT_DIR (a git directory of llm.c, e.g.
#   the one the session's fetch tool gives; default $LLMC_SNAPSHOT, else
#   /work/.mirror/karpathy+llm.c/repo) into .deps/llmc/src, its commit in .deps/llmc/COMMIT;
#   and, when .deps/cudnn_frontend/include lacks them, the cudnn-frontend headers (header-only,
#   what llm.c's cudnn_att.cpp compiles against, and our --attention cudnn too) through
#   scripts/cudnn_frontend.sh (PyPI's nvidia-cudnn-frontend wheel, the version train_gpt pins).
# build: nvcc as llm.c's Makefile builds train_gpt2cu (PRECISION=BF16: -DENABLE_BF16;
#   --use_fast_math -std=c++17 -O3; --generate-code for compute/sm_$GPU_ARCH [90]; cuBLAS and
#   cuBLASLt; NVML only where nvml.h is found, as llmc/mfu.h does; NVRTC for the cuDNN build, which
#   cudnn-frontend 1.x needs), single GPU (NO_MULTI_GPU=1,
#   NO_USE_MPI=1: no NCCL, no MPI):
#     cudnn   USE_CUDNN=1, llm.c's fastest configuration: llmc/cudnn_att.cpp against the
#             frontend headers, linked to libcudnn -> $LLMC_BIN/train_gpt2cu
#     nocudnn llm.c's own attention kernels -> $LLMC_BIN/train_gpt2cu_nocudnn
#   LLMC_BIN defaults to .deps/prebuilt (scripts/device_prebuild.sh's folder, carried to the GPU).
#   cuDNN's headers and library: the CUDA toolkit's, else a pip wheel's (nvidia-cudnn-cu13,
#   found through python3), else CUDNN_PATH.
# run: train_gpt2cu from scratch (-e d12), B=$LLMC_B [32], T=$LLMC_T [1024], total batch B*T (no
#   accumulation), LLMC_WARMUP [5] + LLMC_STEPS [20] steps on LLMC_DATA (the train shard, also
#   read by the untimed validation passes before step 1 and after the last), the
#   flags llm.c's own GPT-2 124M script uses where they bear on speed (-r 0: no recompute; -z 0
#   on one GPU), no sampling, checkpoints or HellaSwag. It is the cuDNN build when it loads
#   there (LD_LIBRARY_PATH gets the pip cuDNN's and NVRTC's lib folders and the toolkit's
#   lib64), else the build without cuDNN, which also runs when the cuDNN one fails; the
#   RESULT line's impl= says which, and why. The timed steps are those bench_gpu.sh times in
#   train_gpt: every step after the first (llm.c's own average skips the first too); each is
#   llm.c's printed per-step time (CUDA events around the step). MFU as bench_gpu.sh counts it:
#   tok/s x (6N + 6LCT) / LLMC_PEAK_TFLOPS [989], N llm.c's printed num_parameters.
#   LLMC_TIMEOUT [150] seconds; LLMC_ARGS: extra flags for train_gpt2cu. LOG [out/llmc_d12.log]
#   gets train_gpt2cu's output.
# Exit status: 0; 1 with one line on stderr naming what is missing or what failed; 124 timed out.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd) || exit 1
cd "$ROOT" || exit 1
LLMC_DIR=$ROOT/.deps/llmc
SRC=$LLMC_DIR/src
FRONTEND=$ROOT/.deps/cudnn_frontend/include
BIN=${LLMC_BIN:-$ROOT/.deps/prebuilt}
GPU_ARCH=${GPU_ARCH:-90}

die() { echo "llmc_side: $*" >&2; exit 1; }
posint() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "$1 must be a positive integer (got '$2')"; }

fetch() {
    local git_dir=${1:-${LLMC_SNAPSHOT:-/work/.mirror/karpathy+llm.c/repo}} commit
    commit=$(git --git-dir="$git_dir" rev-parse --verify -q 'HEAD^{commit}' 2>/dev/null) ||
        die "fetch: no llm.c snapshot at $git_dir (a git directory of github:karpathy/llm.c; name one as the argument or in LLMC_SNAPSHOT)"
    git --git-dir="$git_dir" cat-file -e "HEAD:train_gpt2.cu" 2>/dev/null && git --git-dir="$git_dir" cat-file -e "HEAD:llmc/cudnn_att.cpp" 2>/dev/null ||
        die "fetch: $git_dir at $commit has no train_gpt2.cu and llmc/cudnn_att.cpp: not llm.c"
    rm -rf "$SRC" && mkdir -p "$SRC" || die "fetch: cannot create $SRC"
    git --git-dir="$git_dir" archive HEAD train_gpt2.cu llmc | tar -x -C "$SRC" || die "fetch: git archive of $git_dir failed"
    echo "$commit $(git --git-dir="$git_dir" log -1 --format='%cs %s' HEAD)" > "$LLMC_DIR/COMMIT"
    echo "llmc_side: llm.c $commit: train_gpt2.cu and llmc/ ($(du -sh "$SRC" | cut -f1)) in $SRC"
    if [ -f "$FRONTEND/cudnn_frontend.h" ]; then
        echo "llmc_side: cudnn-frontend headers already in $FRONTEND"
        return 0
    fi
    bash "$ROOT/scripts/cudnn_frontend.sh" ||
        die "fetch: the cudnn-frontend headers could not be had (scripts/cudnn_frontend.sh); only 'build nocudnn' can run"
}

# cudnn_home: a folder with lib/libcudnn.so* (and, for a build, include/cudnn.h): CUDNN_PATH,
# the pip wheel's (nvidia-cudnn-cu13 or -cu12, found through python3), else nothing (the
# toolkit's or the system's own then).
cudnn_home() {
    local d
    for d in ${CUDNN_PATH:-} $(python3 -c 'import nvidia; print(" ".join(p + "/cudnn" for p in nvidia.__path__))' 2>/dev/null); do
        if compgen -G "$d/lib/libcudnn.so*" > /dev/null; then echo "$d"; return; fi
    done
}

build() {
    local which=${1:-both} nvcc flags libs home where inc=() lib=() built=0 failed=""
    case "$which" in cudnn|nocudnn|both) ;; *) die "build: want cudnn, nocudnn or both (got '$which')" ;; esac
    [ -f "$SRC/train_gpt2.cu" ] || die "build: no llm.c sources in $SRC (run: bash dev/bench/llmc_side.sh fetch)"
    nvcc=$(command -v nvcc) || die "build: nvcc not found"
    posint GPU_ARCH "$GPU_ARCH"
    mkdir -p "$BIN" || die "build: cannot create $BIN"
    # The flags of llm.c's Makefile for train_gpt2cu (PRECISION=BF16, GPU_COMPUTE_CAPABILITY=$GPU_ARCH).
    flags=(--threads=0 -t=0 --use_fast_math -std=c++17 -O3
           "--generate-code=arch=compute_$GPU_ARCH,code=[compute_$GPU_ARCH,sm_$GPU_ARCH]" -DENABLE_BF16)
    # CUDA 13 dropped cudaMemAdvise's int-device form, which llm.c's managed-memory fallback calls
    # (llmc/cuda_utils.cuh; a path taken only when cudaMalloc runs out): an overload with the old
    # signature, included before llm.c's sources, which stay as fetched.
    cat > "$BIN/.llmc_cuda13_compat.h" <<'EOF'
#include <cuda_runtime.h>
#if CUDART_VERSION >= 13000
static inline cudaError_t cudaMemAdvise(const void *p, size_t n, enum cudaMemoryAdvise advice, int device) {
    struct cudaMemLocation where;
    where.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    where.id = device == cudaCpuDeviceId ? 0 : device;
    return cudaMemAdvise(p, n, advice, where);
}
#endif
EOF
    flags+=(--pre-include "$BIN/.llmc_cuda13_compat.h")
    libs=(-lcublas -lcublasLt)
    # llmc/mfu.h uses NVML where nvml.h is found (and then needs libnvidia-ml, the driver's).
    if printf '#include <nvml.h>\n' | "$nvcc" -x cu -E - > /dev/null 2>&1; then libs+=(-lnvidia-ml); fi
    if [ "$which" != cudnn ]; then
        echo "+ nvcc ... train_gpt2.cu -> $BIN/train_gpt2cu_nocudnn"
        if (cd "$SRC" && "$nvcc" "${flags[@]}" train_gpt2.cu "${libs[@]}" -o "$BIN/train_gpt2cu_nocudnn"); then
            built=$((built + 1))
        else failed+=" nocudnn"; fi
    fi
    if [ "$which" != nocudnn ]; then
        if [ ! -f "$FRONTEND/cudnn_frontend.h" ]; then
            echo "llmc_side: build: no cudnn-frontend headers in $FRONTEND (run: bash dev/bench/llmc_side.sh fetch): the cuDNN build is not made" >&2
            failed+=" cudnn"
        else
            home=$(cudnn_home)
            where="the CUDA toolkit's"
            [ -n "$home" ] && [ -f "$home/include/cudnn.h" ] && inc=(-I"$home/include") && lib=(-L"$home/lib") && where=$home
            echo "+ nvcc ... -DENABLE_CUDNN llmc/cudnn_att.cpp train_gpt2.cu -lcudnn -> $BIN/train_gpt2cu (cuDNN: $where)"
            if (cd "$SRC" && "$nvcc" -c "${flags[@]}" -DENABLE_CUDNN llmc/cudnn_att.cpp -I"$FRONTEND" "${inc[@]}" -o "$BIN/.cudnn_att.o" &&
                "$nvcc" "${flags[@]}" -DENABLE_CUDNN train_gpt2.cu "$BIN/.cudnn_att.o" "${libs[@]}" "${lib[@]}" -lcudnn -lnvrtc \
                    -I"$FRONTEND" "${inc[@]}" -o "$BIN/train_gpt2cu"); then
                built=$((built + 1))
            else failed+=" cudnn"; fi
            rm -f "$BIN/.cudnn_att.o"
        fi
    fi
    rm -f "$BIN/.llmc_cuda13_compat.h"
    [ -f "$LLMC_DIR/COMMIT" ] && cp "$LLMC_DIR/COMMIT" "$BIN/train_gpt2cu.COMMIT"
    for f in "$BIN/train_gpt2cu" "$BIN/train_gpt2cu_nocudnn"; do
        [ -x "$f" ] && echo "llmc_side: $(basename "$f"): $(du -h "$f" | cut -f1), sm_$GPU_ARCH, llm.c $(cut -c1-12 "$LLMC_DIR/COMMIT" 2>/dev/null)"
    done
    [ -z "$failed" ] || die "build: failed:$failed ($built built)"
}

# loads BIN: BIN can be run and its libraries all resolve here (ldd finds no "not found"; a
# script, which ldd does not read, counts as loading).
loads() { [ -x "$1" ] && ! ldd "$1" 2>/dev/null | grep -q "not found"; }

run() {
    local log=${1:-out/llmc_d12.log} B=${LLMC_B:-32} T=${LLMC_T:-1024} steps=${LLMC_STEPS:-20} warmup=${LLMC_WARMUP:-5}
    local peak=${LLMC_PEAK_TFLOPS:-989} to=${LLMC_TIMEOUT:-150} data=${LLMC_DATA:-} home exe impl why="" rc n=0 ms tps nparams mfu mem work
    local extra=()
    posint LLMC_B "$B"; posint LLMC_T "$T"; posint LLMC_STEPS "$steps"; posint LLMC_TIMEOUT "$to"
    [[ "$warmup" =~ ^[0-9]+$ ]] || die "LLMC_WARMUP must be >= 0 (got '$warmup')"
    [[ "$peak" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "LLMC_PEAK_TFLOPS must be a number (got '$peak')"
    read -r -a extra <<< "${LLMC_ARGS:-}"
    if [ -z "$data" ]; then
        for f in ${FSDP_DATA:+"$FSDP_DATA/tinyshakespeare/tiny_shakespeare_train.bin"} data/tinyshakespeare/tiny_shakespeare_train.bin \
                 ../shared/data/tinyshakespeare/tiny_shakespeare_train.bin; do
            [ -f "$f" ] && { data=$f; break; }
        done
    fi
    [ -n "$data" ] && [ -f "$data" ] || die "run: no token shard (LLMC_DATA, \$FSDP_DATA/tinyshakespeare, data/tinyshakespeare): '${data}'"
    # llm.c reads our shards as they are: the same 256-int header (magic 20240520, version 1).
    [ "$(od -An -t d4 -N 8 "$data" | tr -s ' ' | sed 's/^ //')" = "20240520 1" ] ||
        die "run: $data is not a token shard (want the header 20240520, version 1)"
    data=$(cd "$(dirname "$data")" && pwd)/$(basename "$data")
    # libcudnn (and the NVRTC the cuDNN build links) where a GPU image keeps them: the pip
    # wheels' folders and the toolkit's beside nvcc, which need not be on the library path.
    home=$(cudnn_home)
    for d in ${home:+"$home/lib"} $(python3 -c 'import nvidia; print(" ".join(p + s for p in nvidia.__path__ for s in ("/cu13/lib", "/cuda_nvrtc/lib")))' 2>/dev/null) \
             "$(dirname "$(readlink -f "$(command -v nvcc || echo /nonexistent/bin/nvcc)")")/../lib64"; do
        [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    done
    [ -d "$BIN" ] && BIN=$(cd "$BIN" && pwd)  # the trainer runs from a folder of its own
    if loads "$BIN/train_gpt2cu"; then exe=$BIN/train_gpt2cu; impl=cudnn
    elif loads "$BIN/train_gpt2cu_nocudnn"; then
        exe=$BIN/train_gpt2cu_nocudnn; impl=nocudnn
        if [ -x "$BIN/train_gpt2cu" ]; then why="the cuDNN build does not load: $(ldd "$BIN/train_gpt2cu" 2>&1 | grep -m1 'not found' | tr -s ' \t' ' ')"
        else why="no cuDNN build in $BIN"; fi
    else
        die "run: no train_gpt2cu in $BIN that loads here (run: bash dev/bench/llmc_side.sh build; $(ldd "$BIN/train_gpt2cu_nocudnn" 2>&1 | grep -m1 'not found\|not a dynamic\|No such' | tr -s ' \t' ' '))"
    fi
    mkdir -p "$(dirname "$log")" || die "run: cannot create $(dirname "$log")"
    work=$(mktemp -d "${TMPDIR:-/tmp}/llmc_run.XXXXXX") || die "run: no temporary folder"
    # From an empty folder: llm.c looks for gpt2_tokenizer.bin there (only a warning without it).
    # The validation passes (before step 1, after the last; untimed) read the train shard too:
    # llm.c asserts that a shard holds more than B*T tokens, and Tiny Shakespeare's val shard
    # has exactly 32768, B*T at d12's B=32.
    local cmd=("$exe" -i "$data" -j "$data" -e d12 -b "$B" -t "$T" -d $((B * T)) -x $((warmup + steps))
               -v 1000000 -m 1 -s 0 -h 0 -n 0 -l 6e-4 -u 0 -r 0 -z 0 "${extra[@]}")
    echo "+ $(printf '%q ' "${cmd[@]}")" > "$log"
    (cd "$work" && timeout -k 5 "$to" "${cmd[@]}") >> "$log" 2>&1
    rc=$?
    if [ "$rc" != 0 ] && [ "$impl" = cudnn ] && [ "$rc" != 124 ] && [ "$rc" != 137 ] && loads "$BIN/train_gpt2cu_nocudnn"; then
        # A cuDNN that loads but cannot run the graph (another version, no engine for this GPU).
        why="the cuDNN build failed (exit $rc: $(grep -v '^\s*$' "$log" | tail -n 1 | cut -c1-120))"
        mv "$log" "${log%.log}_cudnn_failed.log"
        exe=$BIN/train_gpt2cu_nocudnn; impl=nocudnn; cmd[0]=$exe
        echo "+ $(printf '%q ' "${cmd[@]}")" > "$log"
        (cd "$work" && timeout -k 5 "$to" "${cmd[@]}") >> "$log" 2>&1
        rc=$?
    fi
    rm -rf "$work"
    case $rc in
        0) ;;
        124|137) echo "llmc_side: run: train_gpt2cu timed out after ${to}s (log: $log)" >&2; exit 124 ;;
        *) die "run: train_gpt2cu exit $rc: $(grep -v '^\s*$' "$log" | tail -n 1 | cut -c1-160) (log: $log)" ;;
    esac
    # "step    2/25 | loss ... | 123.45 ms | 40.1% bf16 MFU | 265000 tok/s": the ms of every step after the first.
    read -r n ms tps <<< "$(awk -F'|' -v bt=$((B * T)) '/^step +[0-9]+\/[0-9]+ \|/ { split($1, s, /[ \/]+/); if (s[2] + 0 < 2) next
                           for (i = 2; i <= NF; i++) if ($i ~ / ms *$/) { sum += $i + 0; n++ } }
                      END { if (n) printf "%d %.3f %.1f\n", n, sum / n, bt * 1000 / (sum / n) }' "$log")"
    [ "${n:-0}" -gt 0 ] || die "run: no step lines after the first in $log"
    [ "$n" = $((warmup + steps - 1)) ] || die "run: $n timed step lines in $log, want $((warmup + steps - 1))"
    nparams=$(sed -nE 's/^num_parameters: ([0-9]+) .*/\1/p' "$log" | head -n 1)
    mfu=$(awk -v tps="$tps" -v n="${nparams:-0}" -v t="$T" -v p="$peak" 'BEGIN { if (n > 0) printf "%.4f", tps * (6 * n + 6 * 12 * 768 * t) / (p * 1e12); else print "n/a" }')
    mem=$(sed -nE 's/^device memory usage: ([0-9]+) MiB .*/\1/p' "$log" | tail -n 1)
    mem=$(awk -v m="${mem:-}" 'BEGIN { if (m != "") printf "%.3f", m / 1024; else print "n/a" }')
    echo "RESULT framework=llm.c model=d12 B=$B T=$T tok_per_s=$tps mfu=$mfu step_ms=$ms steps=$n gpu_used_gib=$mem impl=train_gpt2cu-$impl commit=$(cut -c1-12 "$BIN/train_gpt2cu.COMMIT" 2>/dev/null || echo '?')"
    [ -n "$why" ] && echo "llmc_side: the build without cuDNN ran: $why"
    return 0
}

case "${1:-}" in
    fetch) shift; fetch "$@" ;;
    build) shift; build "$@" ;;
    run) shift; run "$@" ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
    *) echo "usage: bash dev/bench/llmc_side.sh fetch [GIT_DIR] | build [cudnn|nocudnn|both] | run [LOG]" >&2; exit 2 ;;
esac
