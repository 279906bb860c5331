#!/usr/bin/env bash
# The cuda training path end to end on the CPU: train_gpt.cu with its CUDA device
# (fsdp/backend_cuda.cuh, kernels/*.cuh), unchanged, built with g++ for the emulator of
# dev/cuda_emu (see dev/cuda_emu/emu.h) and run as `--device cuda --comm mpi` against the real
# cpu ./train_gpt: a logic check of the GPU schedule (kernel arguments, buffer offsets,
# bf16 <-> fp32 staging, the staged MPI collectives, checkpoint I/O from device memory), NOT a
# GPU result. Every line says "[cpu emulation]"; dev/test/test_gpu.sh is the GPU version.
# A scaled-down dev/test/test_gpu.sh: GPT-2 with 2 layers, 128 channels, 2 heads (head size
# 64: flash attention applies), 2 sequences of 32 tokens per step, 4 steps, seed 7, Tiny
# Shakespeare; every cuda run uses --comm mpi (the emulator has no NCCL):
#   - cuda vs cpu from the same initial weights: losses within 2% (observed max 5e-5
#     relative: the emulator's mma and cuBLASLt sum exactly, so this mostly measures bf16);
#   - two identical cuda runs: bitwise equal losses and the same sample (nearly trivial under
#     the sequential emulator: it catches host-side nondeterminism only);
#   - save at step 2 + resume == 4 uninterrupted steps, bitwise; the cuda checkpoint resumed
#     by the cpu ./train_gpt within 2%;
#   - np=2 ranks (collectives staged through pinned host memory over MPI) vs np=1 within 1e-2,
#     also with --reduce-dtype fp32 and as HSDP (2 replicas); 2 micro-steps with
#     --no-grad-sync-until-last vs 1 within 1e-2;
#   - --attention cublas vs flash within 2%; sampling and validation run on cuda;
#   - --comm nccl is refused with a clear message (include/nccl.h only compiles);
#   - self-check: a mutant whose staged all-gather copies back only the first rank's slice
#     must fail the np=2 comparison.
# Any "EMU:" line (an emulator abort: barrier misuse, out-of-bounds write, bad cuBLASLt
# call...), a non-zero exit or a cuda run without emulated kernels fails the run's checks.
# Builds with g++ into build/emu/ (no Makefile rule; reused while the inputs are unchanged),
# linked with the library objects `make` built in build/. About 50-70 s on 2 cores, 10-20 s
# more when train_gpt.cu or the emulator changed (two builds: train_gpt and the mutant).
set -u
cd "$(dirname "$0")/../.."
export FSDP_DATA="${FSDP_DATA:-$(cd .. && pwd)/shared/data}"  # as run_tests.sh
source dev/test/lib.sh
if [ -n "${TEST_TMP:-}" ]; then TMP=$TEST_TMP; else TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT; fi
source dev/cuda_emu/build.sh
start=$(date +%s)
PY=${PYTHON:-python3}
[ -x "$PY" ] || PY=python3

for tool in g++ python3 mpicxx mpirun; do
    if ! command -v $tool >/dev/null; then
        echo "ok - $TAG train_gpt --device cuda # skip $tool not found"
        exit 0
    fi
done
# The library objects, as the Makefile's LIB_OBJS (plain C, the same for both devices).
LIB_OBJS=()
for src in kernels/*.c fsdp/*.c dataloader/*.c checkpoint/*.c model/*.c; do LIB_OBJS+=("build/${src%.c}.o"); done
for f in ./train_gpt "${LIB_OBJS[@]}"; do
    if [ ! -f "$f" ]; then
        echo "not ok - $TAG train_gpt --device cuda: $f is missing (run make)"
        exit 1
    fi
done
if [ ! -f "$TRAIN_SHARD" ] || [ ! -f "$VAL_SHARD" ]; then
    echo "not ok - $TAG train_gpt --device cuda: no Tiny Shakespeare shards in $FSDP_DATA/tinyshakespeare"
    exit 1
fi

# ----------------------------------------------------------------------------
# Build (the runtime objects with the same commands as test_cuda_emu.sh, so either script
# reuses the other's)


CUDA_SRCS=(train_gpt.cu kernels/*.cuh fsdp/*.cuh)
mkdir -p $B
if ! python3 $E/transform.py $B/train_src "${CUDA_SRCS[@]}" 2>"$TMP/transform.err"; then
    echo "not ok - $TAG transform.py failed on train_gpt.cu: $(tr '\n' ' ' <"$TMP/transform.err" | cut -c1-400)"
    exit 1
fi
if ! build_runtime; then
    exit 1
fi
# build_train SRCDIR OUT: train_gpt.cu (transformed in SRCDIR) for the emulator.
build_train() {
    build "$2" "$1"/train_gpt.cu "$1"/kernels/*.cuh "$1"/fsdp/*.cuh "${HDRS[@]}" \
            $(ls kernels/*.h fsdp/*.h dataloader/*.h checkpoint/*.h model/*.h) $B/emu.o $B/cublaslt.o "${LIB_OBJS[@]}" -- \
        g++ -std=gnu++17 -O2 -w -D__CUDACC__ -I$E/include $(mpicxx --showme:compile) -DOMPI_SKIP_MPICXX \
            -I"$1" -I. -I$BLAS_INC -fopenmp -x c++ "$1"/train_gpt.cu -x none $B/emu.o $B/cublaslt.o \
            "${LIB_OBJS[@]}" -o "$2" $(mpicxx --showme:link) -L$BLAS_DIR -Wl,-rpath,$BLAS_DIR -lopenblas \
            -lzstd -lpcre2-8 -lcjson -lxxhash -lpthread -lm
}

# The mutant for the self-check at the end: the staged (--comm mpi) all-gather copies only
# the first rank's slice of the gathered unit back to the device.
M=$B/train_mutant
rm -rf $M/orig
mkdir -p $M/orig/kernels $M/orig/fsdp
cp train_gpt.cu $M/orig/ && cp kernels/*.cuh $M/orig/kernels/ && cp fsdp/*.cuh $M/orig/fsdp/
mutant_ok=1
python3 - fsdp/backend_cuda.cuh $M/orig/fsdp/backend_cuda.cuh <<'PYEOF' || mutant_ok=0
import re, sys
src = open(sys.argv[1]).read()
new, k = re.subn(r'(\bs->bytes\s*=\s*)W\s*\*\s*(shard_bytes\s*;)', r'\1\2', src)
if k != 1:
    sys.exit(1)
open(sys.argv[2], 'w').write(new)
PYEOF
if [ $mutant_ok = 1 ]; then
    (cd $M/orig && python3 ../../../../$E/transform.py ../src "${CUDA_SRCS[@]}") || mutant_ok=3
fi
[ $mutant_ok = 1 ] && { build_train $M/src $M/train_gpt || mutant_ok=2; } &
mbuild=$!
EXE=$B/train_gpt
if ! build_train $B/train_src $EXE; then
    build_failed "train_gpt.cu for the emulator" $EXE
    wait $mbuild
    exit 1
fi
wait $mbuild
[ $mutant_ok = 1 ] && [ ! -x $M/train_gpt ] && mutant_ok=2
built=$(date +%s)

# ----------------------------------------------------------------------------
# Runs

common=(--layers 2 --channels 128 --heads 2 --max-seq 32 -t 32 -x 4 -l 1e-3 -u 2 --seed 7
        -v 4 --val-steps 1 -i "$TRAIN_SHARD" -j "$VAL_SHARD" --threads 1)
# run NAME NP EXE ARGS...: one job, output in $TMP/NAME.log, metrics in $TMP/NAME/metrics.jsonl
# (unless ARGS give another -o); its exit status in $TMP/NAME.rc.
run() {
    local name=$1 np=$2 exe=$3; shift 3
    (timeout -k 5 300 env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
        mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
        "$exe" "${common[@]}" "$@" >"$TMP/$name.log" 2>&1; echo $? >"$TMP/$name.rc") 2>/dev/null
}
cuda() { local name=$1 np=$2; shift 2; run "$name" "$np" "$EXE" --device cuda --comm mpi "$@"; }
cpu() { local name=$1 np=$2; shift 2; run "$name" "$np" ./train_gpt --device cpu "$@"; }

# Two lanes at a time (2 cores): each run is one process except cuda_np2.
( cuda cuda_ref 1 -b 2 -s 4 -g 8 -o "$TMP/cuda_ref"
  cuda cuda_save 1 -b 2 -o "$TMP/cuda_split" --ckpt-every 2 --stop-at-step 2
  cuda cuda_resume 1 -b 2 -o "$TMP/cuda_split" --ckpt-every 2 --resume auto ) &
lane=$!
cpu cpu_ref 1 -b 2 -o "$TMP/cpu_ref"
cuda cuda_again 1 -b 2 -s 4 -g 8 -o "$TMP/cuda_again"
cuda cuda_cublas 1 -b 2 --attention cublas -o "$TMP/cuda_cublas"
cuda cuda_accum 1 -b 1 -d 64 --no-grad-sync-until-last -o "$TMP/cuda_accum"
wait $lane
cuda cuda_np2 2 -b 1 -d 64 -o "$TMP/cuda_np2"
cuda cuda_np2_fp32 2 -b 1 -d 64 --reduce-dtype fp32 -o "$TMP/cuda_np2_fp32"
cuda cuda_hsdp 2 -b 1 -d 64 --shard-group-size 1 -o "$TMP/cuda_hsdp"
[ $mutant_ok = 1 ] && run mutant_np2 2 $M/train_gpt --device cuda --comm mpi -b 1 -d 64 -o "$TMP/mutant_np2"
ck="$TMP/cuda_split/ckpt/step_00000002"
[ -f "$ck/manifest.json" ] && cpu cpu_from_cuda 1 -b 2 -o "$TMP/cpu_from_cuda" --resume "$ck"

# ----------------------------------------------------------------------------
# Report

# good NAME...: each run exited 0 and printed no emulator message; else one "not ok" (for the
# first bad run) and status 1.
good() {
    local name rc emu
    for name in "$@"; do
        rc=$(cat "$TMP/$name.rc" 2>/dev/null || echo "missing")
        emu=$(grep -E '^EMU: ' "$TMP/$name.log" 2>/dev/null | head -3 | tr '\n' ' ' | cut -c1-400)
        if [ "$rc" != 0 ] || [ -n "$emu" ]; then
            [ -z "$emu" ] && emu=$(grep -v '^# cuda_emu' "$TMP/$name.log" 2>/dev/null | tail -n 3 | tr '\n' ' ' | cut -c1-400)
            [ "$rc" = 124 ] || [ "$rc" = 137 ] && emu="timed out; $emu"
            not_ok "$TAG run $name failed (status $rc): $emu"
            return 1
        fi
        if [[ $name == cuda* ]] && ! grep -q '^# cuda_emu: [1-9]' "$TMP/$name.log"; then
            not_ok "$TAG run $name: no kernel ran under the emulator (no '# cuda_emu: N launches' line)"
            return 1
        fi
    done
}
compare() { "$PY" dev/test/compare_losses.py "$TAG $1" "${@:2}"; }

if good cuda_ref; then
    grep -q '^sample (step 4)' "$TMP/cuda_ref.log" && ok "$TAG sampling on cuda" || not_ok "$TAG sampling on cuda: no sample printed"
    grep -q '^val loss' "$TMP/cuda_ref.log" && ok "$TAG validation on cuda" || not_ok "$TAG validation on cuda: no val loss printed"
    grep -m1 '^# cuda_emu' "$TMP/cuda_ref.log"
    grep -m1 '^peak GPU memory' "$TMP/cuda_ref.log" | sed 's/^/# /'
fi
good cpu_ref cuda_ref && compare "train_gpt --device cuda vs cpu, 4 steps from the same init (within 2%)" \
    "$TMP/cpu_ref/metrics.jsonl" "$TMP/cuda_ref/metrics.jsonl" --rtol 0.02
sample() {  # the text of the sample between its two "---" lines
    awk '/^sample \(step 4\):/ {s = 1; next} s == 1 && /^---$/ {s = 2; next} s == 2 && /^---$/ {exit} s == 2' "$TMP/$1.log"
}
if good cuda_ref cuda_again; then
    if [ -z "$(sample cuda_ref)" ] || [ "$(sample cuda_ref)" != "$(sample cuda_again)" ]; then
        not_ok "$TAG two identical cuda runs: the samples differ (or are missing)"
    else
        compare "two identical cuda runs: bitwise equal losses (and the same sample)" \
            "$TMP/cuda_ref/metrics.jsonl" "$TMP/cuda_again/metrics.jsonl" --exact
    fi
fi
good cuda_ref cuda_save cuda_resume && compare "cuda: save at step 2 + resume == uninterrupted (bitwise)" \
    "$TMP/cuda_ref/metrics.jsonl" "$TMP/cuda_split/metrics.jsonl" --exact --from-step 3
if good cuda_save; then
    if [ ! -f "$ck/manifest.json" ]; then
        not_ok "$TAG cuda checkpoint resumed on the cpu: no checkpoint $ck"
    else
        good cuda_ref cpu_from_cuda && compare "cuda checkpoint (step 2) resumed by the cpu train_gpt (within 2%)" \
            "$TMP/cuda_ref/metrics.jsonl" "$TMP/cpu_from_cuda/metrics.jsonl" --rtol 0.02 --from-step 3
    fi
fi
good cuda_ref cuda_np2 && compare "cuda np=2 with --comm mpi vs np=1 (within 1e-2)" \
    "$TMP/cuda_ref/metrics.jsonl" "$TMP/cuda_np2/metrics.jsonl" --rtol 0.01
good cuda_ref cuda_np2_fp32 && compare "cuda np=2 with --reduce-dtype fp32 vs np=1 (within 1e-2)" \
    "$TMP/cuda_ref/metrics.jsonl" "$TMP/cuda_np2_fp32/metrics.jsonl" --rtol 0.01
good cuda_ref cuda_hsdp && compare "cuda np=2 HSDP (2 replicas of 1-rank shard groups) vs np=1 (within 1e-2)" \
    "$TMP/cuda_ref/metrics.jsonl" "$TMP/cuda_hsdp/metrics.jsonl" --rtol 0.01
good cuda_ref cuda_accum && compare "cuda 2 micro-steps with --no-grad-sync-until-last vs 1 (within 1e-2)" \
    "$TMP/cuda_ref/metrics.jsonl" "$TMP/cuda_accum/metrics.jsonl" --rtol 0.01
good cuda_ref cuda_cublas && compare "cuda --attention cublas vs flash (within 2%)" \
    "$TMP/cuda_ref/metrics.jsonl" "$TMP/cuda_cublas/metrics.jsonl" --rtol 0.02
expect_error "$TAG --comm nccl is refused (no NCCL under the emulator)" 'NCCL is not emulated' \
    timeout -k 5 120 "$EXE" "${common[@]}" --device cuda --comm nccl -b 2 -x 1 -v 0

m="self-check: with the staged all-gather copying back one slice only, np=2 differs from np=1"
case $mutant_ok in
    0) not_ok "$TAG $m: found no 's->bytes = W * shard_bytes;' in fsdp/backend_cuda.cuh to mutate; update dev/test/test_gpu_emu.sh" ;;
    2) build_failed "the mutant train_gpt" $M/train_gpt ;;
    3) not_ok "$TAG $m: transform.py failed on the mutant" ;;
    *) if [ "$(cat "$TMP/mutant_np2.rc" 2>/dev/null)" != 0 ]; then
           not_ok "$TAG $m: the mutant run failed (status $(cat "$TMP/mutant_np2.rc" 2>/dev/null)): $(tail -n 2 "$TMP/mutant_np2.log" | tr '\n' ' ' | cut -c1-300)"
       elif good cuda_ref >/dev/null; then
           if r=$(compare x "$TMP/cuda_ref/metrics.jsonl" "$TMP/mutant_np2/metrics.jsonl" --rtol 0.01); then
               not_ok "$TAG $m: the mutant matched np=1 (${r#"ok - $TAG x "})"
           else
               ok "$TAG $m (${r#"not ok - $TAG x: "})"
           fi
       fi ;;
esac
echo "# cpu emulation: $(( $(date +%s) - start ))s ($(( built - start ))s building)"
exit 0
