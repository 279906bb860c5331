#!/usr/bin/env bash
# One command for a lent GPU machine, made to fit one 10-minute call: checks the GPU, builds
# (or takes the binaries built beforehand), tests and benchmarks train_gpt's cuda device beside
# llm.c's own trainer and PyTorch within DEVICE_CHECK_BUDGET seconds [540].
#
#   bash scripts/device_check.sh          # summary + logs in $OUT, else ./device_check_out
#
# Before the call, on the development machine (no GPU needed; README: GPU):
#   bash dev/bench/llmc_side.sh fetch      # llm.c's sources (a snapshot) and the cudnn-frontend headers
#   bash scripts/device_deps.sh fetch      # our libraries as .deb files, for an image without them
#   bash scripts/device_prebuild.sh        # every binary below for sm_90, into .deps/prebuilt (last:
#                                          # binaries of other sources are refused there)
#   mkdir -p data && cp -r ../shared/data/tinyshakespeare data/
# and the call (the device tool's run; the carried paths, with the tree, stay under 64 MiB:
# device_prebuild.sh prints their size):
#   command: bash scripts/device_check.sh
#   carry:   [".deps/prebuilt", ".deps/debs", ".deps/llmc", ".deps/cudnn_frontend", "data/tinyshakespeare"]
#   timeout_s: 600
#
# Parts, in order. Each runs under `timeout`: its own cap, cut so that it ends inside the
# budget with time left for the summary; what a part leaves running is killed after it, and
# a part that fails or times out is recorded and the next one still runs.
#   1. gpu               nvidia-smi; the CUDA version the driver supports against nvcc's release.
#                        No GPU visible: FAIL, and every later part is SKIPped at once.
#   2. build             the binaries of .deps/prebuilt (scripts/device_prebuild.sh) when their
#                        MANIFEST's source digest is this tree's and each one's libraries
#                        resolve here (ldd; NCCL from scripts/find_nccl.sh's folder if need be)
#                        and train_gpt --help runs: copied into place, nothing compiled; else
#                        (the reason said) make -j GPU_ARCH=90 WERROR= train_gpt build/test_*_cuda
#                        build/bench_attention_cuda build/bench_vector_cuda (WERROR= so that this machine's compiler
#                        warnings do not stop it); if that fails and there is an mpicc,
#                        build_nompi: the same with NO_MPI=1 (an MPI from a pip wheel may be
#                        unable to build). build_llmc, only when no prebuilt train_gpt2cu
#                        loads and .deps/llmc holds llm.c's sources: dev/bench/llmc_side.sh build.
#   3. test_*_cuda       each kernel test program (every kernel against its CPU twin), each
#                        under DEVICE_CHECK_TEST_TIMEOUT seconds [90].
#   4. bench_d48         train_gpt alone (dev/bench/bench_gpu.sh, BENCH_TORCH=0): d48 (1.5B),
#                        B=16 (8 if 16 runs out of GPU memory; said in the summary), T=1024, 10
#                        steps + 1 with --profile-step: tok/s and MFU (target >= 55%).
#   5. bench_d12         the d12 (124M) trio on the same GPU (bench_gpu.sh): train_gpt, llm.c's
#                        train_gpt2cu (cuDNN attention where it loads) and PyTorch FSDP2 with
#                        torch.compile max-autotune (else the fastest mode that compiled in the
#                        time left, named), B=32, T=1024, the same steps timed: targets train_gpt
#                        >= 1.2x llm.c's tok/s and >= 1.3x PyTorch's. For both benchmarks the
#                        summary has bench_gpu.sh's table and targets, the profile table and its
#                        largest row (the limiting phase).
#   5b. plan_d48, plan_d12  train_gpt --plan for each benchmark's flags on this GPU's profile: the
#                        planned ms/step beside the measured one, and a profile calibrated on the
#                        benchmark's profiled step (--calibrate-from; logs/plan_MODEL.prof and
#                        its figures in the summary).
#   6. attention_timing  build/bench_attention_cuda: forward and backward TFLOP/s of every
#                        attention implementation (flash, flash-pipelined, cublas, cudnn; one
#                        this build or machine lacks is "not available") at the d12 and d48
#                        training shapes, and the best fwd+bwd rate of each shape against the
#                        target (>= 280).
#   6b. vector_timing    build/bench_vector_cuda: each vector kernel family (embedding, LayerNorm
#                        (+ residual), cross-entropy, GELU, bias reduction) at the d12 and d48
#                        shapes, its time over the time its bytes (the planner's model) take at
#                        the measured cudaMemcpy bandwidth, against the target (<= 1.25). Capped
#                        at 30 s, taken from memcheck's share (the last parts share what is left).
#   7. e2e               dev/test/test_train_gpu.sh, the groups DEVICE_CHECK_GPU_TESTS names
#                        ["ref determinism resume offload fp16 llama eval tp": cuda vs cpu losses,
#                        bitwise repeat, resume, --offload optimizer bitwise, --param-dtype fp16
#                        vs cpu and an overflowing loss scale, the Llama shape, --eval-only and
#                        --generate of a cuda checkpoint against the cpu's, --tp 2 at np=2 and
#                        TP 2 x DP 2 at np=4 on the one GPU (staged) against np=1].
#   8. memcheck_*        compute-sanitizer --tool memcheck on test_attention_cuda and
#                        test_backend_cuda, sharing the time left; SKIP without compute-sanitizer.
# summary.txt (also printed) has one line per part, PASS/FAIL/SKIP/TIMEOUT, with its figures
# under it; every log is in logs.tar.gz beside it (the device tool brings back a few files
# only). Exit status 0 when no part failed or timed out.
#
# cuDNN: after part 1, scripts/find_cudnn.sh's environment (FSDP_CUDNN_LIB: PyTorch's pip wheel on
# the GPU machines) is exported to every part, so --attention auto picks cudnn where it loads
# and builds the graphs (each benchmark log's `attention:` line says which ran); the summary's
# `cudnn:` line says what was found.
# Data: Tiny Shakespeare from $FSDP_DATA, data/ or ../shared/data; without it, shards of random
# tokens (throughput does not depend on the text; the end-to-end checks compare runs).
# This script sources `scripts/device_deps.sh use` before it builds or checks the binaries.
# Environment: OUT, GPU_ARCH [90], DEVICE_CHECK_BUDGET [540], DEVICE_CHECK_TEST_TIMEOUT [90],
#   DEVICE_CHECK_GPU_TESTS, DEVICE_CHECK_MIN_PART [10] (a part with less time left than this
#   is skipped), DEVICE_CHECK_PREBUILT=0 (build even where prebuilt binaries would do),
#   FSDP_DATA, LLMC_BIN [.deps/prebuilt]; bench_gpu.sh's own variables pass through
#   (BENCH_B_D12 [32], BENCH_B_D48 [16 here], BENCH_STEPS, BENCH_TIMEOUT_TORCH, ...).
set -u
shopt -s nullglob
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
OUT_DIR=${OUT:-$ROOT/device_check_out}
LOGS=$OUT_DIR/logs
WORK=$OUT_DIR/work  # scratch (random shards, the end-to-end runs): deleted at the end
rm -rf "$LOGS" "$WORK"
mkdir -p "$LOGS" "$WORK" || exit 1
SUMMARY=$OUT_DIR/summary.txt
: >"$SUMMARY"
START=$(date +%s)
BUDGET=${DEVICE_CHECK_BUDGET:-540}
TEST_TIMEOUT=${DEVICE_CHECK_TEST_TIMEOUT:-90}
MIN_PART=${DEVICE_CHECK_MIN_PART:-10}
for v in BUDGET TEST_TIMEOUT MIN_PART; do
    [[ "${!v}" =~ ^[0-9]+$ ]] || { echo "device_check: $v must be a whole number of seconds (got '${!v}')" >&2; exit 2; }
done
GPU_ARCH=${GPU_ARCH:-90}
KILL_AFTER=5               # after a part's timeout, SIGKILL this much later
RESERVE=$((KILL_AFTER + 2))  # kept back from every part: its kill, the summary, the archive
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
FAILED=0
NO_GPU=""  # the reason every part after the first is skipped

elapsed() { echo $(( $(date +%s) - START )); }
left() { echo $(( BUDGET - $(elapsed) )); }
note() { echo "$*" | tee -a "$SUMMARY"; }
# indent: the lines read, shortened and indented, under their part's line.
indent() { cut -c1-300 | sed 's/^/        /' | tee -a "$SUMMARY"; }
# record STATUS NAME DETAIL: a part's line. FAIL and TIMEOUT make the exit status 1.
record() {
    note "$(printf '%-7s %s' "$1" "$2") ($3)"
    case $1 in FAIL|TIMEOUT) FAILED=1 ;; esac
}
# part_limit CAP: the timeout a part starting now gets.
part_limit() {
    local t=$(( $(left) - RESERVE ))
    [ "$t" -gt "$1" ] && t=$1
    echo "$t"
}
# end_leftovers TAG: kills what a part left running. The part's command and all it starts
# carry TAG in their environment; an inner `timeout` (bench_gpu.sh's, the end-to-end tests')
# puts its command in a process group of its own, out of reach of the part's timeout.
end_leftovers() {
    local pids
    pids=$(grep -lzxF "DEVICE_CHECK_PART=$1" /proc/[0-9]*/environ </dev/null 2>/dev/null | cut -d/ -f3)
    if [ -n "$pids" ]; then kill -KILL $pids 2>/dev/null; fi
    return 0
}
# run_part NAME CAP CMD...: CMD under a timeout of part_limit CAP, output in logs/NAME.log;
# sets RC (124: timed out), SECS and LIMIT. Returns 1, with NAME recorded as SKIP, when there
# is no GPU or the budget leaves it no time, or less than MIN_PART seconds.
run_part() {
    local name=$1 cap=$2 t0 tag="$1.$$"; shift 2
    if [ -n "$NO_GPU" ]; then record SKIP "$name" "$NO_GPU"; return 1; fi
    LIMIT=$(part_limit "$cap")
    # Not worth starting when the budget has cut it below MIN_PART (a cap chosen that short runs).
    if [ "$LIMIT" -le 0 ] || { [ "$LIMIT" -lt "$cap" ] && [ "$LIMIT" -lt "$MIN_PART" ]; }; then
        record SKIP "$name" "no time left: $(elapsed) s of $BUDGET s used"; return 1
    fi
    t0=$(date +%s)
    env DEVICE_CHECK_PART="$tag" timeout -k "$KILL_AFTER" "$LIMIT" "$@" >"$LOGS/$name.log" 2>&1
    RC=$?
    SECS=$(( $(date +%s) - t0 ))
    end_leftovers "$tag"
    [ "$RC" = 137 ] && RC=124  # killed after the timeout's SIGTERM went unheeded
    return 0
}
# verdict NAME [DETAIL]: PASS, TIMEOUT or FAIL from RC.
verdict() {
    local d=${2:+, $2}
    case $RC in
        0) record PASS "$1" "$SECS s$d" ;;
        124) record TIMEOUT "$1" "a time limit was hit: $SECS s of its $LIMIT s$d; log: logs/$1.log" ;;
        *) record FAIL "$1" "status $RC, $SECS s$d; log: logs/$1.log" ;;
    esac
}
# built NAME FILE: FILE can be run; else NAME is recorded as SKIP (without a GPU, run_part
# records the skip, with that reason).
built() {
    if [ -n "$NO_GPU" ] || [ -x "$2" ]; then return 0; fi
    record SKIP "$1" "$2 not built"
    return 1
}
# ver_ge A B: version A >= version B (major.minor)
ver_ge() { awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, "."); split(b, y, "."); exit !(x[1] > y[1] || (x[1] == y[1] && x[2] + 0 >= y[2] + 0)) }'; }
counts() { echo "$(grep -c '^ok - ' "$1") ok, $(grep -c '^not ok - ' "$1") not ok"; }
# judge NAME [DETAIL [all]]: the verdict of a program printing ok / not ok lines (logs/NAME.log):
# SKIP when it skipped itself (every ok line "ok - ... # skip REASON", none failed: no usable
# GPU), FAIL when a check failed even if it exited 0 (test_train_gpu.sh does), else from RC;
# the count of skipped checks beside the others; then its not ok lines (or all, with "all").
judge() {
    local log=$LOGS/$1.log skipped
    skipped=$(grep -c '^ok - .*# skip' "$log")
    if [ "$RC" = 0 ] && [ "$skipped" -gt 0 ] && ! grep -v '# skip' "$log" | grep -qE '^(not )?ok - '; then
        record SKIP "$1" "$(grep -m1 '^ok - .*# skip' "$log" | sed 's/.*# skip *//' | cut -c1-200)"
        return
    fi
    [ "$RC" = 0 ] && grep -q '^not ok - ' "$log" && RC=1
    verdict "$1" "${2:+$2: }$(counts "$log")$([ "$skipped" -gt 0 ] && echo " ($skipped of the ok skipped: $(grep -m1 '^ok - .*# skip' "$log" | sed 's/.*# skip *//' | cut -c1-80))")"
    if [ "${3:-}" = all ]; then grep -E '^(not )?ok - ' "$log" | indent; else grep '^not ok - ' "$log" | head -n 10 | indent; fi
}

note "fsdp.c device check, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), budget $BUDGET s"
rev=$(git rev-parse --short HEAD 2>/dev/null)  # a copy of the tree may come without .git
note "host: $(hostname), $(nproc) CPUs; git: ${rev:-?}${rev:+$(git diff --quiet 2>/dev/null || echo ' (+ local changes)')}"

# 1. The GPU and the toolkit. A binary from an nvcc newer than the driver's CUDA major version
# does not start; a newer minor version runs (minor-version compatibility) as long as nothing
# needs the driver to compile PTX, which sm_90 code does not.
smi=$(timeout 20 nvidia-smi 2>&1); smi_rc=$?
echo "$smi" >"$LOGS/nvidia-smi.log"
[ "$smi_rc" = 124 ] && smi="nvidia-smi did not answer within 20 s"  # a hung driver: ask no more
gpus=0
[ "$smi_rc" = 124 ] || gpus=$(timeout 20 nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$gpus" = 0 ]; then
    NO_GPU="no GPU visible"
    record FAIL gpu "no GPU visible: $(head -n 1 <<<"$smi" | cut -c1-200); the other parts are skipped"
else
    gpu=$(timeout 20 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -n 1)
    drv=$(grep -o 'CUDA Version: *[0-9.]*' <<<"$smi" | grep -o '[0-9.]*$')
    rel=$(timeout 20 nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | cut -d' ' -f2)
    what="$gpus GPU(s), $gpu; CUDA ${drv:-?} (driver), nvcc ${rel:-not found}${rel:+ ($(command -v nvcc))}"
    if [ -z "$rel" ]; then record FAIL gpu "$what: nothing can be built for the GPU"
    elif [ -z "$drv" ]; then record PASS gpu "$what: the driver's CUDA version not shown, not compared"
    elif ver_ge "$drv" "$rel"; then record PASS gpu "$what"
    elif [ "${drv%%.*}" = "${rel%%.*}" ]; then record PASS gpu "$what: nvcc is newer, runs by minor-version compatibility"
    else record FAIL gpu "$what: the driver is too old for nvcc's programs"; fi
fi

# cuDNN for --attention cudnn / auto (train_gpt reads FSDP_CUDNN_LIB; the frontend compiled
# into it loads its own CUDA runtime, CUDNN_FRONTEND_CUDART_LIB_NAME): scripts/find_cudnn.sh
# finds PyTorch's pip wheel on the GPU machines. Exported for every later part, so that the
# benchmarks' auto picks cudnn where it loads (their logs' `attention:` line says which ran)
# and the kernel tests and the attention bench time it.
if [ -z "$NO_GPU" ]; then
    if cudnn_env=$(bash scripts/find_cudnn.sh 2>"$LOGS/find_cudnn.log"); then
        for kv in $cudnn_env; do export "${kv?}"; done
        note "cudnn: $(echo $cudnn_env)"
    else
        note "cudnn: none ($(head -n 1 "$LOGS/find_cudnn.log" | cut -c1-200)): --attention auto runs flash"
    fi
fi

# Data: Tiny Shakespeare for the end-to-end tests and the benchmarks, else random tokens.
BENCH_SHARD=""
if [ -z "$NO_GPU" ]; then
    DATA=""
    for d in "${FSDP_DATA:-}" "$ROOT/data" "$ROOT/../shared/data" "$ROOT/shared/data"; do
        if [ -n "$d" ] && [ -f "$d/tinyshakespeare/tiny_shakespeare_train.bin" ] && [ -f "$d/tinyshakespeare/tiny_shakespeare_val.bin" ]; then
            DATA=$(cd "$d" && pwd); break
        fi
    done
    if [ -n "$DATA" ]; then
        note "data: $DATA/tinyshakespeare"
    else
        DATA=$WORK/data
        mkdir -p "$DATA/tinyshakespeare"
        note "data: Tiny Shakespeare not found (FSDP_DATA, data/, ../shared/data): random tokens in its place"
        python3 - "$DATA/tinyshakespeare" <<'PY'
import random, struct, sys
random.seed(0)
for name, n in (("train", 1 << 20), ("val", 1 << 16)):
    with open("%s/tiny_shakespeare_%s.bin" % (sys.argv[1], name), "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack("<%dH" % n, *[random.randrange(50257) for _ in range(n)]))
PY
    fi
    export FSDP_DATA=$DATA
    BENCH_SHARD=$DATA/tinyshakespeare/tiny_shakespeare_train.bin
fi

# 2. Build what the parts run. A GPU image may lack MPI (then the Makefile builds with NO_MPI=1
# and the tests start ranks with scripts/launch_local.sh) and our Debian libraries (then they
# come from the .deb files in .deps/debs, carried along: scripts/device_deps.sh).
KERNEL_TESTS=()
for src in dev/test/test_*_cuda.cu; do KERNEL_TESTS+=("$(basename "$src" .cu)"); done
TARGETS=(train_gpt "${KERNEL_TESTS[@]/#/build/}" build/bench_attention_cuda build/bench_vector_cuda)
PREBUILT=$ROOT/.deps/prebuilt
export LLMC_BIN=${LLMC_BIN:-$PREBUILT}  # llm.c's trainer, for bench_gpu.sh (dev/bench/llmc_side.sh)
if [ -z "$NO_GPU" ]; then
    if [ -f scripts/device_deps.sh ]; then
        source scripts/device_deps.sh use >"$LOGS/deps.log" 2>&1
        note "libraries: $(tail -n 1 "$LOGS/deps.log" | cut -c1-200)"
    fi
    note "mpi: $(command -v mpicc >/dev/null && echo "mpicc found: MPI build" || echo "no mpicc: NO_MPI build, ranks via scripts/launch_local.sh")"
    note "nccl: $(scripts/find_nccl.sh "$(command -v nvcc)" | grep . || echo "the CUDA toolkit's or the system's") (scripts/find_nccl.sh)"
    # CUPTI for --profile-step's launch counts: beside nvcc's toolkit, else a pip wheel's.
    if [ -z "${FSDP_CUPTI_LIB:-}" ]; then
        for f in "$(dirname "$(readlink -f "$(command -v nvcc || echo /nonexistent/bin/nvcc)")")"/../extras/CUPTI/lib64/libcupti.so* \
                 "$(python3 -c 'import nvidia.cuda_cupti as m; print(list(m.__path__)[0])' 2>/dev/null)"/lib/libcupti.so*; do
            [ -f "$f" ] && { export FSDP_CUPTI_LIB=$f; break; }
        done
    fi
    note "cupti: ${FSDP_CUPTI_LIB:-none found beside nvcc or in a pip wheel, train_gpt tries the library path}"
fi
build_errors() { grep -m5 -E 'error:|\*\*\*|not found' "$LOGS/$1.log" | indent; }
# unresolved BIN: the libraries BIN needs that ldd cannot find here (nothing for a script).
unresolved() { ldd "$1" 2>/dev/null | awk '/not found/ { print $1 }' | tr '\n' ' ' | sed 's/ $//'; }
# prebuilt_reason: why .deps/prebuilt cannot stand in for the build; nothing when it can.
prebuilt_reason() {
    local m=$PREBUILT/MANIFEST have want t miss
    [ "${DEVICE_CHECK_PREBUILT:-1}" = 0 ] && { echo "DEVICE_CHECK_PREBUILT=0"; return; }
    [ -f "$m" ] || { echo "no $m (bash scripts/device_prebuild.sh where nvcc is; carry .deps/prebuilt)"; return; }
    have=$(awk '$1 == "digest" { print $2 }' "$m")
    want=$(bash scripts/device_prebuild.sh digest)
    [ "$have" = "$want" ] || { echo "built from other sources (digest $have, this tree's $want)"; return; }
    for t in "${TARGETS[@]}"; do
        [ -x "$PREBUILT/$t" ] || { echo "$PREBUILT/$t missing"; return; }
        miss=$(unresolved "$PREBUILT/$t")
        [ -z "$miss" ] || { echo "$t: libraries not found here: $miss"; return; }
    done
    "$PREBUILT/train_gpt" --help > /dev/null 2>&1 || echo "$PREBUILT/train_gpt --help failed (status $?)"
}
# A prebuilt train_gpt linked to libnccl.so.2 finds it where scripts/find_nccl.sh says (a
# pip wheel's NCCL is on no library path).
if [ -z "$NO_GPU" ] && [ -x "$PREBUILT/train_gpt" ] && [[ " $(unresolved "$PREBUILT/train_gpt") " == *" libnccl.so.2 "* ]]; then
    nccl=$(scripts/find_nccl.sh "$(command -v nvcc)")
    [ -n "$nccl" ] && export LD_LIBRARY_PATH="$nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
WHY_BUILD=$([ -z "$NO_GPU" ] && prebuilt_reason)
if [ -z "$NO_GPU" ] && [ -z "$WHY_BUILD" ]; then
    t0=$(date +%s)
    copied=1
    mkdir -p build || copied=0
    for t in "${TARGETS[@]}"; do cp "$PREBUILT/$t" "$t" || copied=0; done
    if [ $copied = 1 ]; then
        record PASS build "prebuilt, $(( $(date +%s) - t0 )) s: ${#TARGETS[@]} binaries of .deps/prebuilt, their libraries found here; $(sed -n 's/^built //p' "$PREBUILT/MANIFEST" | cut -c1-160), $(sed -n 's/^commit //p' "$PREBUILT/MANIFEST")"
    else
        record FAIL build "prebuilt binaries could not be copied into place"
    fi
else
    [ -z "$NO_GPU" ] && note "prebuilt: not used: $WHY_BUILD; building"
    MAKE_ARGS=(-j"$(nproc)" GPU_ARCH="$GPU_ARCH" WERROR= "${TARGETS[@]}")
    if run_part build 240 make "${MAKE_ARGS[@]}"; then
        verdict build "make ${MAKE_ARGS[*]}"
        if [ "$RC" != 0 ]; then
            build_errors build
            # An mpicc that cannot build should not cost the whole check.
            if [ "$RC" != 124 ] && command -v mpicc >/dev/null && run_part build_nompi 200 make NO_MPI=1 "${MAKE_ARGS[@]}"; then
                verdict build_nompi "make NO_MPI=1: ranks via scripts/launch_local.sh"
                [ "$RC" = 0 ] || build_errors build_nompi
            fi
        fi
    fi
fi
# llm.c's trainer for the d12 trio: built here only when no prebuilt one loads and its sources came along.
if [ -z "$NO_GPU" ] && ! { [ -x "$LLMC_BIN/train_gpt2cu_nocudnn" ] && [ -z "$(unresolved "$LLMC_BIN/train_gpt2cu_nocudnn")" ]; } &&
   ! { [ -x "$LLMC_BIN/train_gpt2cu" ] && [ -z "$(unresolved "$LLMC_BIN/train_gpt2cu")" ]; }; then
    if [ -f .deps/llmc/src/train_gpt2.cu ]; then
        run_part build_llmc 200 bash dev/bench/llmc_side.sh build && verdict build_llmc "dev/bench/llmc_side.sh build into $LLMC_BIN"
    else
        note "llm.c: no train_gpt2cu in $LLMC_BIN that loads here and no sources in .deps/llmc (bash dev/bench/llmc_side.sh fetch): the d12 trio lacks it"
    fi
fi
if [ -x ./train_gpt ] && [ -z "$NO_GPU" ]; then
    libs=$(ldd ./train_gpt 2>/dev/null | grep -oE '(libnccl|libcublasLt|libmpi)[^ ]* => [^ ]*' | tr '\n' ' ')
    note "train_gpt loads: ${libs:-none of libnccl, libcublasLt, libmpi}"
fi

# 3. Kernel tests: each prints ok / not ok lines (and "# skip" when it finds no usable GPU).
for n in "${KERNEL_TESTS[@]}"; do
    built "$n" "build/$n" && run_part "$n" "$TEST_TIMEOUT" "build/$n" && judge "$n"
done

# 4, 5. Benchmarks (dev/bench/bench_gpu.sh). It gets BENCH_BUDGET inside the part's limit, so
# that its own run timeouts end it first and its table is always written.
[ -n "$BENCH_SHARD" ] && export BENCH_DATA=$BENCH_SHARD
# bench MODEL CAP VAR=VALUE...: bench_gpu.sh MODEL as part bench_MODEL, then its figures.
bench() {
    local m=$1 cap=$2 name=bench_$1 b; shift 2
    built "$name" ./train_gpt || return
    b=$(( $(part_limit "$cap") - RESERVE ))
    [ "$b" -lt 1 ] && b=1
    run_part "$name" "$cap" env BENCH_BUDGET="$b" "$@" bash dev/bench/bench_gpu.sh "$m" "$LOGS/$name" || return
    verdict "$name"
    local log=$LOGS/$name.log
    { grep -E '^  (train_gpt|llm\.c|pytorch): ' "$log"   # the figures (and notes) as they came
      sed -n '/^model  *B  *T  *implementation/,/^GPU mem:/p' "$log" | grep -v '^GPU mem:\|^$'  # table, targets, limiting phase
      awk '/^  profile of step/ { p = 1; print; next } p && /^    / { print; next } { p = 0 }' "$log"
    } | indent
}
bench d48 150 BENCH_TORCH=0 BENCH_B_D48="${BENCH_B_D48:-16}" BENCH_WARMUP=0 BENCH_STEPS=10
bench d12 300

# 5b. The planner against each benchmark (train_gpt --plan: no GPU work, well under a second):
# the step it plans for the benchmark's flags on this GPU's profile beside the measured one,
# and a profile calibrated on the benchmark's --profile-step table (--calibrate-from), kept
# in the summary (its lines) and as logs/plan_MODEL.prof.
case "${gpu:-}" in
    *H100*) SIM=h100 ;; *B200*) SIM=b200 ;; *A100*80*) SIM=a100-80 ;; *A100*) SIM=a100-40 ;; *) SIM=h200 ;;
esac
plan_vs() {
    local m=$1 name=plan_$1 clog=$LOGS/bench_$1/${1}_train_gpt.log b t measured planned
    if [ -n "$NO_GPU" ]; then record SKIP "$name" "$NO_GPU"; return; fi
    measured=$(grep -E '^average step [0-9.]+ ms' "$clog" 2>/dev/null | tail -n 1 | sed -E 's/^average step ([0-9.]+) ms.*/\1/')
    read -r b t <<<"$(grep -E '^\+ .*train_gpt --device cuda -m '"$m"' ' "$LOGS/bench_$m.log" 2>/dev/null | tail -n 1 |
                      sed -E 's/.* -b ([0-9]+) -t ([0-9]+) .*/\1 \2/')"
    if [ -z "$measured" ] || [ -z "$b" ] || [ -z "$t" ]; then record SKIP "$name" "no benchmark figures for $m"; return; fi
    built "$name" ./train_gpt || return
    run_part "$name" 30 bash -c "./train_gpt --plan -m $m -b $b -t $t --plan-world 1 --sim-device $SIM &&
        ./train_gpt --plan -m $m -b $b -t $t --plan-world 1 --sim-device $SIM --calibrate-from '$clog' > '$LOGS/$name.prof'" || return
    planned=$(sed -nE 's/^step ([0-9.]+) ms \|.*/\1/p' "$LOGS/$name.log" | tail -n 1)
    verdict "$name" "$m -b $b -t $t on $SIM: planned ${planned:-?} ms/step, measured $measured ms/step$(
        [ -n "$planned" ] && awk -v p="$planned" -v m="$measured" 'BEGIN { if (m > 0) printf " (planned / measured %.2f)", p / m }')"
    [ -f "$LOGS/$name.prof" ] && grep -E '^#   ' "$LOGS/$name.prof" | sed 's/^#   /calibration: /' | indent
}
plan_vs d48
plan_vs d12

# 6. Attention at the training shapes, every implementation (build/bench_attention_cuda).
if built attention_timing build/bench_attention_cuda && run_part attention_timing 90 build/bench_attention_cuda; then
    log=$LOGS/attention_timing.log
    verdict attention_timing "$(grep -c '^attention impl=.* fwd_ms=' "$log") timings, $(grep -c '^attention impl=.* not available' "$log") implementation(s) not available"
    { grep -E '^attention impl=[a-z0-9_-]+ (not available|FAILED)|^bench_attention_cuda: ' "$log" | sed 's/^attention impl=//'
      awk '/^attention impl=.* fwd_ms=/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
               printf "%-7s %s (B=%s NH=%s): forward %.3f ms %6.1f TFLOP/s | backward %.3f ms %6.1f TFLOP/s | fwd+bwd %6.1f TFLOP/s\n",
                      v["impl"], v["shape"], v["B"], v["NH"], v["fwd_ms"], v["fwd_tflops"], v["bwd_ms"], v["bwd_tflops"], v["fwdbwd_tflops"]
               s = v["shape"]; if (!(s in best)) order[n++] = s
               if (v["fwdbwd_tflops"] + 0 > best[s]) { best[s] = v["fwdbwd_tflops"] + 0; who[s] = v["impl"] } }
           END { for (i = 0; i < n; i++) { s = order[i]
                   printf "%s target (attention fwd+bwd >= 280 TFLOP/s): %s %.1f, %s\n", s, who[s], best[s], (best[s] >= 280) ? "met" : "NOT met" } }' "$log"
    } | indent
fi

# 6b. The vector kernels against the copy bandwidth (build/bench_vector_cuda): 30 s, out of
# memcheck's share of what is left (the d12 and d48 rows take a few seconds: 8 kernels x 2
# shapes x 23 calls of at most a few ms, and the buffers' fills).
if built vector_timing build/bench_vector_cuda && run_part vector_timing 30 build/bench_vector_cuda; then
    log=$LOGS/vector_timing.log
    verdict vector_timing "$(grep -c '^vector kernel=.* ratio=' "$log") rows, $(grep -c '^vector kernel=.* target=met$' "$log") within 1.25x of the copy bandwidth ($(sed -n 's/^vector copy_gbs=\([0-9.]*\) .*/\1/p' "$log") GB/s measured)"
    { grep -E '^bench_vector_cuda: ' "$log"
      awk '/^vector kernel=/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
               printf "%-26s %s: %10.3f MB %9.4f ms, at copy bw %9.4f ms, ratio %5.2f, target <= 1.25 %s\n",
                      v["kernel"], v["shape"], v["mb"], v["ms"], v["copy_ms"], v["ratio"], v["target"] == "met" ? "met" : "NOT met" }' "$log"
    } | indent
fi

# 7. End to end: train_gpt --device cuda on a small model (its runs' logs go to logs/e2e/). The
# cap is 170 s: tp's two runs (np=2 and np=4 sharing the GPU, 20 steps of the 2-layer model,
# estimated at 10 to 20 s together, mostly the ranks' start) came on top of 150 s; the time
# comes out of memcheck's, which shares what is left.
GPU_TESTS_RUN=${DEVICE_CHECK_GPU_TESTS:-ref determinism resume offload fp16 llama eval tp}
if built e2e ./train_gpt &&
   run_part e2e 170 env GPU_TESTS="$GPU_TESTS_RUN" GPU_TEST_RUN_TIMEOUT=60 GPU_TEST_LOGS="$LOGS/e2e" TEST_TMP="$WORK/e2e" \
       bash dev/test/test_train_gpu.sh; then
    judge e2e "GPU_TESTS=\"$GPU_TESTS_RUN\"" all
fi

# 8. compute-sanitizer's memcheck, on the time left (it slows kernels many times over). Memory
# errors only: API errors are not reported, since NCCL probes kernels that its build lacks for
# this GPU (20 cudaFuncGetAttributes errors per process on an H200) and our own calls are
# checked where they are made.
# On PATH, or beside nvcc (the toolkit's bin/ holds both; PATH may name only nvcc's link).
SANITIZER=$(command -v compute-sanitizer)
NVCC_DIR=$(dirname "$(readlink -f "$(command -v nvcc || echo /nonexistent/nvcc)")")
[ -z "$SANITIZER" ] && [ -x "$NVCC_DIR/compute-sanitizer" ] && SANITIZER=$NVCC_DIR/compute-sanitizer
MEMCHECK=(test_attention_cuda test_backend_cuda)
for i in "${!MEMCHECK[@]}"; do
    n=${MEMCHECK[$i]} name=memcheck_${MEMCHECK[$i]}
    if [ -z "$NO_GPU" ] && [ -z "$SANITIZER" ]; then record SKIP "$name" "compute-sanitizer not found"; continue; fi
    share=$(( ( $(left) - RESERVE ) / (${#MEMCHECK[@]} - i) ))  # the rest, shared with those still to run
    built "$name" "build/$n" && run_part "$name" "$share" "$SANITIZER" --tool memcheck --report-api-errors no --error-exitcode 86 "build/$n" || continue
    log=$LOGS/$name.log
    if grep -q 'Device not supported' "$log"; then
        record SKIP "$name" "compute-sanitizer: $(grep -m1 'Device not supported' "$log" | cut -c1-200)"
        continue
    fi
    errs=$(grep -o 'ERROR SUMMARY: [0-9]* error' "$log" | tail -n 1 | grep -o '[0-9][0-9]*')
    verdict "$name" "memcheck: ${errs:-no summary, ?} error(s); the program's own checks: $(counts "$log")"
    grep '^========= ' "$log" | grep -v 'COMPUTE-SANITIZER\|ERROR SUMMARY' | head -n 8 | indent
done

note "total $(elapsed) s of $BUDGET s; $([ $FAILED = 0 ] && echo 'no part failed or timed out' || echo 'SOME PARTS FAILED OR TIMED OUT')"
tar czf "$OUT_DIR/logs.tar.gz" -C "$OUT_DIR" logs && rm -rf "$LOGS"
rm -rf "$WORK"
exit $FAILED
