#!/usr/bin/env bash
# One command for a GPU machine: build, GPU tests, GPU benchmarks, in under 8 minutes.
#
#   bash scripts/device_check.sh          # summary + logs in $OUT, else ./device_check_out
#
# Parts, in order, each under `timeout` (capped by what is left of the time budget); a part
# that fails or times out is recorded and the next one still runs:
#   1. make -j16 GPU_ARCH=90 all                     (GPU_ARCH overrides: "80 90", ...)
#   2. build/test_*_cuda                             every kernel against its CPU twin
#   3. dev/bench/bench_gpu.sh d12 (124M, T=1024)   train_gpt vs PyTorch FSDP2: tok/s, MFU, memory
#   4. dev/test/test_train_gpu.sh                    train_gpt --device cuda end to end
#   5. dev/bench/bench_gpu.sh d48 (1.5B, T=1024), if time is left
# (The d12 benchmark comes before the end-to-end tests so that a slow machine still measures
# the d12 target; the tests' many short runs would otherwise eat its time.)
# Ends with summary.txt (also printed): one line per part, PASS/FAIL/TIMEOUT/SKIP, and the
# benchmark figures; every log is in logs.tar.gz beside it. Exit status 0 when every part that ran passed.
# Before calling it on a machine without network, run `bash scripts/device_deps.sh fetch` here
# and carry .deps (and data/tinyshakespeare) with the call.
# Environment: OUT (output folder), GPU_ARCH [90], DEVICE_CHECK_BUDGET seconds [470],
#   FSDP_DATA (where tinyshakespeare/ is); dev/bench/bench_gpu.sh's own variables pass through
#   (BENCH_B_D12 [32], BENCH_B_D48 [8] micro-batches, BENCH_STEPS, BENCH_TIMEOUT_TORCH, ...).
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT_DIR=${OUT:-$ROOT/device_check_out}
LOGS=$OUT_DIR/logs
mkdir -p "$LOGS"
SUMMARY=$OUT_DIR/summary.txt
: >"$SUMMARY"
START=$(date +%s)
BUDGET=${DEVICE_CHECK_BUDGET:-470}
GPU_ARCH=${GPU_ARCH:-90}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
FAILED=0

elapsed() { echo $(( $(date +%s) - START )); }
left() { echo $(( BUDGET - $(elapsed) )); }
note() { echo "$*" | tee -a "$SUMMARY"; }

# part NAME CAP CMD...: runs CMD with a timeout of min(CAP, time left - 5 s), output in
# logs/NAME.log; records PASS / FAIL (status) / TIMEOUT / SKIP (no time left). Returns CMD's status.
part() {
    local name=$1 cap=$2; shift 2
    local t=$(( $(left) - 5 ))
    [ "$t" -gt "$cap" ] && t=$cap
    if [ "$t" -lt 20 ]; then note "SKIP    $name (no time left: $(elapsed) s of $BUDGET s used)"; return 99; fi
    local t0=$(date +%s) rc
    timeout -k 10 "$t" "$@" >"$LOGS/$name.log" 2>&1; rc=$?
    local secs=$(( $(date +%s) - t0 ))
    if [ $rc -eq 0 ]; then note "PASS    $name (${secs} s)"
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then note "TIMEOUT $name (after ${t} s; log: logs/$name.log)"; FAILED=1
    else note "FAIL    $name (status $rc, ${secs} s; log: logs/$name.log)"; FAILED=1; fi
    return $rc
}

note "fsdp.c device check, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), budget ${BUDGET} s"
note "host: $(hostname), $(nproc) CPUs; git: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (+ local changes)')"
note "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -n 2 | tr '\n' ';')"
note "nvcc: $(nvcc --version 2>/dev/null | grep -m1 -o 'release [0-9.]*' || echo 'not found')"

# Data: Tiny Shakespeare for the tests (and the benchmarks). Looked for in $FSDP_DATA,
# data/, ../shared/data; without it the tests cannot run, and the benchmarks use a shard of
# random tokens (throughput does not depend on the text).
DATA=""
for d in "${FSDP_DATA:-}" "$ROOT/data" "$ROOT/../shared/data" "$ROOT/shared/data"; do
    if [ -n "$d" ] && [ -f "$d/tinyshakespeare/tiny_shakespeare_train.bin" ] && [ -f "$d/tinyshakespeare/tiny_shakespeare_val.bin" ]; then
        DATA=$(cd "$d" && pwd); break
    fi
done
if [ -n "$DATA" ]; then
    note "data: $DATA/tinyshakespeare"
    BENCH_SHARD=$DATA/tinyshakespeare/tiny_shakespeare_train.bin
else
    note "data: Tiny Shakespeare not found (FSDP_DATA, data/, ../shared/data): GPU end-to-end tests will fail; benchmarks use random tokens"
    BENCH_SHARD=$OUT_DIR/random_tokens.bin
    python3 - "$BENCH_SHARD" <<'PY'
import random, struct, sys
n = 1 << 20
random.seed(0)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *[random.randrange(50257) for _ in range(n)]))
PY
fi
export FSDP_DATA=${DATA:-$OUT_DIR/no_data}

# 1. Build. A GPU image may lack MPI (then the Makefile builds with NO_MPI=1 and the tests start
# ranks with scripts/launch_local.sh) and our Debian libraries (then they come from the .deb
# files in .deps/debs, carried along: scripts/device_deps.sh).
if [ -f scripts/device_deps.sh ]; then
    source scripts/device_deps.sh use >"$LOGS/deps.log" 2>&1 || true
    note "libraries: $(tail -n 1 "$LOGS/deps.log" | cut -c1-200)"
fi
note "mpi: $(command -v mpicc >/dev/null && echo "mpicc found: MPI build" || echo "no mpicc: NO_MPI build, ranks via scripts/launch_local.sh")"
note "nccl: $(scripts/find_nccl.sh "$(command -v nvcc)" | grep . || echo "the CUDA toolkit's or the system's") (scripts/find_nccl.sh)"
if ! part build 260 make -j16 GPU_ARCH="$GPU_ARCH" all; then
    grep -m5 -E 'error:|\*\*\*|not found' "$LOGS/build.log" | cut -c1-300 | tee -a "$SUMMARY"
    # An mpicc that cannot build (an incomplete MPI, e.g. from a pip wheel) should not cost
    # the whole check: the build without MPI needs none of it.
    if command -v mpicc >/dev/null && part build_nompi 200 make -j16 GPU_ARCH="$GPU_ARCH" NO_MPI=1 all; then
        note "built without MPI instead (make NO_MPI=1): ranks via scripts/launch_local.sh"
    else
        note "build failed: the remaining parts use whatever binaries exist"
        [ -f "$LOGS/build_nompi.log" ] && grep -m5 -E 'error:|\*\*\*|not found' "$LOGS/build_nompi.log" | cut -c1-300 | tee -a "$SUMMARY"
    fi
fi
[ -x ./train_gpt ] && note "train_gpt loads: $(ldd ./train_gpt | grep -oE '(libnccl|libcublasLt|libmpi)[^ ]* => [^ ]*' | tr '\n' ' ')"

# 2. Kernel tests (each prints ok / not ok lines).
shopt -s nullglob
for bin in build/test_*_cuda; do
    name=$(basename "$bin")
    part "$name" 100 "$bin"
    note "        $(grep -c '^ok - ' "$LOGS/$name.log") ok, $(grep -c '^not ok - ' "$LOGS/$name.log") not ok"
    grep '^not ok - ' "$LOGS/$name.log" | head -n 10 | cut -c1-300 | sed 's/^/        /' | tee -a "$SUMMARY"
done

# 3, 5. Benchmarks against PyTorch FSDP2 on the same GPU and batch (dev/bench/bench_gpu.sh:
# train_gpt's tok/s, MFU and memory, the baseline's, the ratio and the issue's targets).
export BENCH_DATA=$BENCH_SHARD
# bench_summary LOG: the benchmark's table and verdicts (or, when it was cut short, the
# figures it said on the way), and train_gpt's step profile.
bench_summary() {
    { if grep -q '^model  *B  *T  *implementation' "$1"; then
          sed -n '/^model  *B  *T  *implementation/,/^GPU mem:/p' "$1" | grep -v '^GPU mem:'
      else
          grep -E '^  (train_gpt|pytorch)[: ]' "$1"
      fi
      sed -n '/^  profile of step/,/^  train_gpt\|^+ /p' "$1" | grep -v '^  train_gpt\|^+ '
    } | cut -c1-300 | sed 's/^/        /' | tee -a "$SUMMARY"
}
part bench_d12 240 bash dev/bench/bench_gpu.sh d12 "$LOGS/bench"
bench_summary "$LOGS/bench_d12.log"

# 4. End-to-end GPU tests (its runs' logs go to logs/gpu_e2e/).
export GPU_TEST_LOGS=$LOGS/gpu_e2e
export TEST_TMP=$OUT_DIR/tmp_gpu_e2e
rm -rf "$TEST_TMP"; mkdir -p "$TEST_TMP"
part test_train_gpu 200 bash dev/test/test_train_gpu.sh
if grep -q '^not ok - ' "$LOGS/test_train_gpu.log"; then FAILED=1; fi
note "        $(grep -c '^ok - ' "$LOGS/test_train_gpu.log") ok, $(grep -c '^not ok - ' "$LOGS/test_train_gpu.log") not ok"
grep -E '^(not )?ok - ' "$LOGS/test_train_gpu.log" | cut -c1-300 | sed 's/^/        /' | tee -a "$SUMMARY"

if [ "$(left)" -gt 120 ]; then
    part bench_d48 $(( $(left) - 10 )) bash dev/bench/bench_gpu.sh d48 "$LOGS/bench"
    bench_summary "$LOGS/bench_d48.log"
else
    note "SKIP    bench_d48 (only $(left) s left)"
fi

note "total $(elapsed) s; $([ $FAILED = 0 ] && echo 'every part that ran passed' || echo 'SOME PARTS FAILED')"
# The device tool brings back at most 8 files, 2 folders deep: everything else in one archive.
tar czf "$OUT_DIR/logs.tar.gz" -C "$OUT_DIR" logs && rm -rf "$LOGS" "$OUT_DIR/tmp_gpu_e2e"
exit $FAILED
