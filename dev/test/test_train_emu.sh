#!/usr/bin/env bash
# run_tests: cores 1.8, 558 s
# The cuda training path end to end on the CPU: train_gpt.cu with its CUDA device
# (fsdp/backend_cuda.cuh, kernels/*.cuh), unchanged, built with g++ for the emulator of
# dev/cuda_emu (see dev/cuda_emu/emu.h) and run as `--device cuda --comm mpi` against the real
# cpu ./train_gpt: a logic check of the GPU schedule (kernel arguments, buffer offsets,
# bf16 <-> fp32 staging, the staged MPI collectives, checkpoint I/O from device memory), NOT a
# GPU result. Every line says "[cpu emulation]"; dev/test/test_train_gpu.sh is the GPU version.
# A scaled-down dev/test/test_train_gpu.sh: GPT-2 with 2 layers, 128 channels, 2 heads (head size
# 64: flash attention applies), 2 sequences of 32 tokens per step, 4 steps, seed 7, Tiny
# Shakespeare; the cuda runs use --comm mpi (staged) unless named nccl_* (--comm nccl: the NCCL
# path on its comm stream, through the emulator's NCCL, dev/cuda_emu/nccl.cpp):
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
#   - --attention flash-pipelined (kernels/cuda_attention_flash_pipelined.cuh) for GPT-2 and
#     the Llama (GQA) vs cpu and flash within 2%, the run saying it was requested (at T = 32
#     one key tile: its losses are flash's; the kernel test covers several tiles);
#   - --attention cudnn through the fake cuDNN (dev/cuda_emu/cudnn.cpp, FSDP_CUDNN_LIB) for
#     GPT-2 and the Llama (GQA) vs cpu and flash within 2%; auto picks it where it loads and
#     says so; with the library missing or refusing the graphs (EMU_CUDNN_REFUSE=1) auto falls
#     back to flash saying why, and an explicit cudnn ends the run with that reason (every
#     other run is pointed at a missing library, so auto keeps flash there);
#   - --gelu-fusion 0 (the GELU kernels) vs the cuBLASLt GELU epilogues within 1e-2; with
#     EMU_CUBLASLT_NO_GELU=1 (no algorithm for those epilogues) the run says so for the forward
#     and the backward and equals --gelu-fusion 0 bitwise; with EMU_CUBLASLT_NO_BGRAD=1 (no
#     algorithm for the bias-gradient epilogue) the run says so once per shape (4) and trains
#     within 1e-2 of the epilogue's run, the bias gradients from the reduction kernels;
#   - --profile-step's launch counts: per GPT-2 block forward 7.5, backward 16.0 (the final
#     LayerNorm's share included);
#   - --plan's kernel launches per model phase and direction equal the profiled step's (GPT-2
#     at W=1 and 2, --attention cublas, --gelu-fusion 0, the Llama: --profile-step 3 on
#     nccl_again, nccl_np2, cuda_cublas, cuda_gelu0, llama_again);
#   - the NCCL shim's own self-test (dev/cuda_emu/nccl_selftest.cpp: 3 forked ranks);
#   - dev/test/test_backend_cuda.cu (every backend member against host computations, an
#     event-ordering stress test) at 1 rank, 2 ranks staged, 2 ranks NCCL with HSDP;
#   - --comm nccl: np=1 vs cpu within 2%; two identical runs bitwise equal; save + resume
#     bitwise; np=2 (EMU_DEVICE_COUNT=2: one emulated GPU per rank) vs np=1 within 1e-2 and vs
#     the staged --comm mpi np=2 bitwise (at W=2 both round the same fp32 sum once);
#     --reduce-dtype fp32 and HSDP (two communicators) at np=2 vs np=1 within 1e-2; without
#     EMU_DEVICE_COUNT, np=2 is refused (two ranks on one GPU); rank 1 stalled at step 2
#     (FSDP_TEST_STALL, --comm-timeout 4; the shim's own watchdog off, as NCCL has none) ends
#     the job with rank 0's "did not complete within --comm-timeout 4" error, no hang: its
#     first host wait after the stalled collectives is the model's stream sync, which must
#     keep the deadline; no /dev/shm/emu_nccl.* segment is left behind;
#   - Llama 3's shape (--arch llama3, one kv head for two query heads): cuda vs cpu within 2%,
#     two runs, save + resume and --offload optimizer bitwise, --recompute full and selective bitwise, --attention
#     cublas within 2%, --comm nccl np=2 vs np=1 within 1e-2;
#   - --eval-only (a multiple-choice set) and --generate of a cuda checkpoint: the predictions
#     the cpu makes of the same checkpoint (bf16 losses within 0.05), staged np=1 and NCCL np=2,
#     the same greedy text on both;
#   - --param-dtype fp16: at least as close to the cpu run as bf16 (both within 2%), the same
#     engine budget, the scale on every step line; a first scale of 2^24 overflows (skipped,
#     halved, weights untouched, not a bad step); --loss-scale-window 1 doubles it per clean
#     step; save + resume bitwise with the scaler in the manifest; np=2 NCCL vs np=1 within
#     1e-2 and bitwise the staged path; resumed from a bf16 checkpoint; on an sm_75 GPU
#     (EMU_SM=75) bf16 and --attention flash refused, fp16 trains with the cuBLAS attention;
#   - --tp 2 (#33) at test_tp.sh's shape (4 heads of 16, 12 x 16 tokens per step): staged and
#     NCCL (the TP communicator on the compute stream, the backward's dX reduce-scatters on a TP
#     stream across the weight-gradient GEMMs) vs the cpu's np=1 within 2%, NCCL == staged
#     bitwise, that overlap in order on each rank (FSDP_TEST_TP_TRACE, dev/test/tp_trace_order.py)
#     for GPT-2 and Llama, and a run ended by the NCCL shim (a communicator's collectives out of
#     order) when compute does not wait for the started reduce-scatter or its stream does not
#     wait for compute (two mutants); TP 2 x DP 2 (np=4) and Llama's GQA vs the cpu within 2%,
#     the TP 2 x DP 2 run's --save-model byte-identical to `ckpt export --llmc` of its last
#     checkpoint;
#     the replicated tensors' master, m, v and bf16 shard bitwise equal on both TP ranks at
#     every step (FSDP_TEST_TP_REPLICAS), which a mutant leaving rank 1's replicated gradients
#     unsummed must fail; TP 2 x HSDP (np=4, staged) vs the cpu; at --lr 0 the bf16 parameters
#     of TP 2 and TP 1 bitwise equal per global element at steps 1-2 (stochastic rounding keyed
#     by the global element, FSDP_TEST_PARAM16); --offload optimizer at TP 2 bitwise the GPU's
#     optimizer (losses, norms, val losses), its replicated tensors bitwise equal on both TP
#     ranks; step 1's norm at TP 2 (all four) that of TP 1 within 1e-3, which a mutant
#     counting the replicated tensors twice must leave;
#   - self-checks, each a fault in fsdp/backend_cuda.cuh (one build holds them all, a run
#     switches one on with FSDP_MUTANT) that must change the
#     np=2 losses: the staged all-gather copies back only the first rank's slice; the bf16
#     ncclReduceScatter passes recvcount n / 2; and, caught only because the emulator's streams
#     run asynchronously in a random interleaving (dev/cuda_emu/emu.h), compute does not wait
#     for a collective's "done" event, or the comm stream does not wait for compute's "ready".
# The emulator's streams are asynchronous (EMU_SEED picks the interleaving, default 1).
# Any "EMU:" line (an emulator abort: barrier misuse, out-of-bounds write, bad cuBLASLt
# call...), a non-zero exit or a cuda run without emulated kernels fails the run's checks.
# Builds with g++ into build/emu/ (no Makefile rule; reused while the inputs are unchanged),
# linked with the library objects `make` built in build/ (EMU_BUILD=DIR builds elsewhere).
# About 8-10 min on 2 cores, 2 min more when train_gpt.cu or the emulator changed (builds:
# train_gpt, and one copy holding every mutant's fault, each switched on by FSDP_MUTANT).
set -u
cd "$(dirname "$0")/../.."
export FSDP_DATA="${FSDP_DATA:-$(cd .. && pwd)/shared/data}"  # as run_tests.sh
source dev/test/lib.sh
if [ -n "${TEST_TMP:-}" ]; then TMP=$TEST_TMP; else TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT; fi
source dev/cuda_emu/build.sh
start=$(date +%s)
# auto must not pick up a cuDNN installed on this machine: the runs that use one say so.
export FSDP_CUDNN_LIB=$PWD/$B/no_cudnn/libcudnn_graph.so.9
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
for src in util/*.c comm/*.c kernels/*.c fsdp/*.c dataloader/*.c checkpoint/*.c model/*.c train/*.c; do LIB_OBJS+=("build/${src%.c}.o"); done
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
# Build (the runtime objects with the same commands as test_kernels_emu.sh, so either script
# reuses the other's)


CUDA_SRCS=(train_gpt.cu kernels/*.cuh fsdp/*.cuh train/*.cuh)
mkdir -p $B
if ! python3 $E/transform.py $B/train_src "${CUDA_SRCS[@]}" 2>"$TMP/transform.err"; then
    echo "not ok - $TAG transform.py failed on train_gpt.cu: $(tr '\n' ' ' <"$TMP/transform.err" | cut -c1-400)"
    exit 1
fi
if ! build_runtime || ! build_cudnn; then
    exit 1
fi
# build_train SRCDIR OUT: train_gpt.cu (transformed in SRCDIR) for the emulator.
build_train() {
    build "$2" "$1"/train_gpt.cu "$1"/kernels/*.cuh "$1"/fsdp/*.cuh "$1"/train/*.cuh "${HDRS[@]}" \
            $(ls util/*.h comm/*.h kernels/*.h fsdp/*.h dataloader/*.h checkpoint/*.h model/*.h train/*.h) "${RUNTIME_OBJS[@]}" "${LIB_OBJS[@]}" \
            $B/cuda_attention_cudnn.o -- \
        g++ -std=gnu++17 -O2 -w -D__CUDACC__ -I$E/include $(mpicxx --showme:compile) -DOMPI_SKIP_MPICXX \
            -I"$1" -I. -I$BLAS_INC -fopenmp -x c++ "$1"/train_gpt.cu -x none "${RUNTIME_OBJS[@]}" \
            "${LIB_OBJS[@]}" "${CUDNN_OBJS[@]}" -o "$2" $(mpicxx --showme:link) -L$BLAS_DIR -Wl,-rpath,$BLAS_DIR -lopenblas \
            -lzstd -lpcre2-8 -lcjson -lxxhash -lpthread -lm
}

# Mutants for the self-checks at the end: faults in fsdp/backend_cuda.cuh, all in ONE copy built
# like train_gpt (one build instead of one per fault), each fault guarded by
# fsdp_mutant("NAME"), so a run has it only with FSDP_MUTANT=NAME in its environment.
# make_mutant NAME REGEX REPLACEMENT: the regex must match the source exactly once (the
# replacement names its guard); mut_ok[NAME] is 1 (built), 0 (no match: the script needs
# updating), 2 (build failed) or 3 (transform failed). finish_mutants transforms the copy and
# starts its build in the background ($MUT_EXE).
declare -A mut_ok
MUT_DIR=$B/mutants MUT_EXE=$B/mutants/train_gpt
rm -rf "$MUT_DIR/orig" && mkdir -p "$MUT_DIR/orig/kernels" "$MUT_DIR/orig/fsdp" "$MUT_DIR/orig/train"
cp train_gpt.cu "$MUT_DIR/orig/" && cp kernels/*.cuh "$MUT_DIR/orig/kernels/" && cp fsdp/*.cuh "$MUT_DIR/orig/fsdp/" &&
    cp train/*.cuh "$MUT_DIR/orig/train/"
make_mutant() {
    mut_ok[$1]=1
    python3 - fsdp/backend_cuda.cuh "$MUT_DIR/orig/fsdp/backend_cuda.cuh" "$2" "$3" <<'PYEOF' || mut_ok[$1]=0
import re, sys
k = len(re.findall(sys.argv[3], open(sys.argv[1]).read()))  # once in the real source
new, n = re.subn(sys.argv[3], sys.argv[4], open(sys.argv[2]).read())
if k != 1 or n != 1:
    sys.exit(1)
open(sys.argv[2], 'w').write(new)
PYEOF
}
finish_mutants() {
    # The guard, inside the header's include guard (after its #define).
    python3 - "$MUT_DIR/orig/fsdp/backend_cuda.cuh" <<'PYEOF'
import sys
path = sys.argv[1]
text = open(path).read()
at = text.index('#define FSDP_BACKEND_CUDA_CUH\n') + len('#define FSDP_BACKEND_CUDA_CUH\n')
guard = ('#include <stdlib.h>\n#include <string.h>\n'
         'static inline int fsdp_mutant(const char* name) { const char* m = getenv("FSDP_MUTANT"); return m && !strcmp(m, name); }\n')
open(path, 'w').write(text[:at] + guard + text[at:])
PYEOF
    local name
    if ! (cd "$MUT_DIR/orig" && python3 ../../../../$E/transform.py ../src "${CUDA_SRCS[@]}"); then
        for name in "${!mut_ok[@]}"; do [ ${mut_ok[$name]} = 1 ] && mut_ok[$name]=3; done
        return
    fi
    build_train "$MUT_DIR/src" "$MUT_EXE" &
    mut_pid=$!
}
# staged: the all-gather copies back only the first rank's slice of the gathered unit.
make_mutant staged_gather '(\bs->bytes\s*=\s*)W\s*\*\s*(shard_bytes\s*;)' '\1(fsdp_mutant("staged_gather") ? 1 : W) * \2'
# nccl: the 16-bit reduce-scatter passes recvcount n / 2 (a valid call, so the shim cannot
# refuse it: each rank reduces the wrong elements and half its shard stays stale).
make_mutant nccl_count '(ncclReduceScatter\(\s*g\s*,\s*shard_out\s*,\s*)n(\s*,\s*cb_nccl16\(c\))' '\1(fsdp_mutant("nccl_count") ? n / 2 : n)\2'
# nccl, stream ordering (CUDA_NOTES arrows 1/3'): compute does not wait for the collective.
make_mutant nccl_no_done_wait '(CB_CUDA\(c, cudaStreamWaitEvent\(c->compute, s->done, 0\)\);)' 'if (!fsdp_mutant("nccl_no_done_wait")) \1'
# nccl, stream ordering (arrows 2/3/5): the comm stream does not wait for compute.
make_mutant nccl_no_handoff '(CB_CUDA\(c, cudaStreamWaitEvent\(c->comm, ev, 0\)\);)' 'if (!fsdp_mutant("nccl_no_handoff")) \1'
# staged, tensor parallel: TP rank 1 keeps its own share of the replicated tensors' gradients
# (the all-reduce runs, its sum is not copied back there).
make_mutant tp_unsummed '(\n\s*)(cb_tp_unstage16\(c, buf,)' '\1if (!fsdp_mutant("tp_unsummed") || c->pg->tp_rank == 0) \2'
# tensor parallel: every fold counts its squares, so TP rank 1 counts the replicated tensors too.
make_mutant tp_norm_twice 'double\* sumsq = sum_squares \? c->d_sumsq : NULL;' 'double* sumsq = sum_squares || fsdp_mutant("tp_norm_twice") ? c->d_sumsq : NULL;'
# nccl, tensor parallel, the backward's started reduce-scatter (TpComm.reduce_scatter_start):
# compute does not wait for it at the wait, or its TP stream does not wait for compute's dX GEMM.
make_mutant tp_no_wait 'if \(ticket\) (CB_CUDA\(c, cudaStreamWaitEvent\(c->compute, c->tp_done, 0\)\);)' 'if (ticket && !fsdp_mutant("tp_no_wait")) \1'
make_mutant tp_no_ready '(CB_CUDA\(c, cudaStreamWaitEvent\(c->tp_stream, c->tp_ready, 0\)\);)' 'if (!fsdp_mutant("tp_no_ready")) \1'
mut_pid=""
finish_mutants
# The NCCL shim's self-test (plain host code: no transform).
SELF=$B/nccl_selftest
build $SELF $E/nccl_selftest.cpp "${HDRS[@]}" "${RUNTIME_OBJS[@]}" -- \
    "${CXX_EMU[@]}" $E/nccl_selftest.cpp "${RUNTIME_OBJS[@]}" -o $SELF -lpthread &
sbuild=$!
# dev/test/test_backend_cuda.cu (the GPU test of every backend member, with its event-ordering
# stress test), transformed and built like train_gpt.
BACKEND=$B/test_backend_cuda
if python3 $E/transform.py $B/backend_src dev/test/test_backend_cuda.cu kernels/*.cuh fsdp/*.cuh 2>"$TMP/backend_transform.err"; then
    build $BACKEND $B/backend_src/dev/test/test_backend_cuda.cu $B/backend_src/kernels/*.cuh $B/backend_src/fsdp/*.cuh \
            "${HDRS[@]}" $(ls util/*.h comm/*.h kernels/*.h fsdp/*.h) "${RUNTIME_OBJS[@]}" "${LIB_OBJS[@]}" $B/cuda_attention_cudnn.o -- \
        g++ -std=gnu++17 -O2 -w -D__CUDACC__ -I$E/include $(mpicxx --showme:compile) -DOMPI_SKIP_MPICXX \
            -I$B/backend_src -I. -I$BLAS_INC -fopenmp -x c++ $B/backend_src/dev/test/test_backend_cuda.cu -x none \
            "${RUNTIME_OBJS[@]}" "${LIB_OBJS[@]}" "${CUDNN_OBJS[@]}" -o $BACKEND $(mpicxx --showme:link) -L$BLAS_DIR -Wl,-rpath,$BLAS_DIR \
            -lopenblas -lzstd -lpcre2-8 -lcjson -lxxhash -lpthread -lm &
    bbuild=$!
else
    not_ok "$TAG transform.py failed on dev/test/test_backend_cuda.cu: $(tr '\n' ' ' <"$TMP/backend_transform.err" | cut -c1-300)"
    bbuild=""
fi
EXE=$B/train_gpt
if ! build_train $B/train_src $EXE; then
    build_failed "train_gpt.cu for the emulator" $EXE
    wait
    exit 1
fi
if [ -n "$mut_pid" ] && ! { wait $mut_pid && [ -x $MUT_EXE ]; }; then
    for name in "${!mut_ok[@]}"; do [ ${mut_ok[$name]} = 1 ] && mut_ok[$name]=2; done
fi
wait $sbuild || build_failed "dev/cuda_emu/nccl_selftest.cpp" $SELF
[ -n "$bbuild" ] && { wait $bbuild || build_failed "dev/test/test_backend_cuda.cu" $BACKEND; }
built=$(date +%s)

# ----------------------------------------------------------------------------
# Runs

common=(--layers 2 --channels 128 --heads 2 --max-seq 32 -t 32 -x 4 -l 1e-3 -u 2 --seed 7
        -v 4 --val-steps 1 -i "$TRAIN_SHARD" -j "$VAL_SHARD" --threads 1)
# run NAME NP EXE ARGS...: one job, output in $TMP/NAME.log, metrics in $TMP/NAME/metrics.jsonl
# (unless ARGS give another -o); its exit status in $TMP/NAME.rc.
run() {
    local name=$1 np=$2 exe=$3; shift 3
    (timeout -k 5 "${RUN_TIMEOUT:-300}" env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
        mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
        "$exe" "${common[@]}" "$@" >"$TMP/$name.log" 2>&1; echo $? >"$TMP/$name.rc") 2>/dev/null
}
cuda() { local name=$1 np=$2; shift 2; run "$name" "$np" "$EXE" --device cuda --comm mpi "$@"; }
# nccl NAME NP ARGS...: --comm nccl, one emulated GPU per rank.
nccl() {
    local name=$1 np=$2; shift 2
    EMU_DEVICE_COUNT=$np run "$name" "$np" "$EXE" --device cuda --comm nccl "$@"
}
cpu() { local name=$1 np=$2; shift 2; run "$name" "$np" ./train_gpt --device cpu "$@"; }

# The runs share the two cores through a pool of two tokens: `job NP CMD...` starts CMD (a run)
# in the background once NP tokens are free (np 4 takes both: its processes share the cores);
# `jobs_wait` waits for every job started (before runs that read another's checkpoint). Only
# this shell takes tokens, so two jobs cannot each hold half of what both need. Runs that
# depend on each other (a save, then its resume) go in one job, in order. A third lane of
# light jobs outside the pool: the shim's self-test, the refused run, the stalled run (mostly
# waiting).
mkfifo "$TMP/pool" && exec 3<>"$TMP/pool" && rm "$TMP/pool"
printf xx >&3
job_pids=()
job() {
    local np=$1; shift
    [ "$np" -gt 2 ] && np=2
    read -r -N "$np" -u 3 _
    ( "$@"; printf '%.*s' "$np" xx >&3 ) &
    job_pids+=($!)
}
jobs_wait() { wait "${job_pids[@]}"; job_pids=(); }
touch "$TMP/shm_marker"
( [ -x $SELF ] && timeout -k 5 120 $SELF >"$TMP/nccl_selftest.log" 2>&1; echo $? >"$TMP/nccl_selftest.rc"
  # The backend test: 1 rank (nccl and staged paths), 2 ranks staged, 2 ranks nccl + HSDP.
  if [ -x $BACKEND ]; then
      for cfg in "w1 1" "w2_staged 2" "w2_nccl 2 2"; do
          set -- $cfg
          (cd "$TMP" && timeout -k 5 200 env OMP_NUM_THREADS=1 ${3:+EMU_DEVICE_COUNT=$3} \
              mpirun --allow-run-as-root --oversubscribe --bind-to none -np $2 $OLDPWD/$BACKEND \
              >"$TMP/backend_$1.log" 2>&1; echo $? >"$TMP/backend_$1.rc")
      done
  fi
  run nccl_refused 2 "$EXE" --device cuda --comm nccl -b 1 -d 64 -x 1 -v 0 -o "$TMP/nccl_refused"
  FSDP_TEST_STALL=1:2 RUN_TIMEOUT=90 nccl nccl_stall 2 -b 1 -d 64 --comm-timeout 4 -o "$TMP/nccl_stall"
) &
lane3=$!
# Saves and their resumes (the checkpoints of step 2 are read again after jobs_wait below).
cuda_split() {
    cuda cuda_save 1 -b 2 -o "$TMP/cuda_split" --ckpt-every 2 --stop-at-step 2
    cuda cuda_resume 1 -b 2 -o "$TMP/cuda_split" --ckpt-every 2 --resume auto
}
nccl_split() {
    nccl nccl_save 1 -b 2 -o "$TMP/nccl_split" --ckpt-every 2 --stop-at-step 2
    nccl nccl_resume 1 -b 2 -o "$TMP/nccl_split" --ckpt-every 2 --resume auto
}
job 1 cuda_split
job 1 nccl_split
job 1 cuda cuda_ref 1 -b 2 -s 4 -g 8 -o "$TMP/cuda_ref"
job 1 nccl nccl_ref 1 -b 2 -s 4 -g 8 -o "$TMP/nccl_ref"
# The step's decision on the device: a NaN loss at step 2, a NaN gradient at step 4 skip those
# updates (AdamW reads the skip flag; the weights stay finite); at steps 2 and 3 with
# --max-bad-steps 2 the run stops before step 4's update.
FSDP_TEST_NAN_LOSS_STEPS=2 FSDP_TEST_NAN_GRAD_STEPS=4 job 1 nccl nccl_nan 1 -b 2 -o "$TMP/nccl_nan"
FSDP_TEST_NAN_LOSS_STEPS=2,3 job 1 nccl nccl_nan_stop 1 -b 2 --max-bad-steps 2 -o "$TMP/nccl_nan_stop"
job 1 cpu cpu_ref 1 -b 2 -o "$TMP/cpu_ref"
job 1 cuda cuda_again 1 -b 2 -s 4 -g 8 -o "$TMP/cuda_again"
job 1 cuda cuda_cublas 1 -b 2 --attention cublas -o "$TMP/cuda_cublas" --profile-step 3
job 1 cuda cuda_pipelined 1 -b 2 --attention flash-pipelined -o "$TMP/cuda_pipelined" --profile-step 3
job 1 cuda cuda_accum 1 -b 1 -d 64 --no-grad-sync-until-last -o "$TMP/cuda_accum"
job 1 cuda cuda_gelu0 1 -b 2 --gelu-fusion 0 -o "$TMP/cuda_gelu0" --profile-step 3
EMU_CUBLASLT_NO_GELU=1 job 1 cuda cuda_no_gelu_epilogue 1 -b 2 -o "$TMP/cuda_no_gelu_epilogue"
EMU_CUBLASLT_NO_BGRAD=1 job 1 cuda cuda_no_bgrad_epilogue 1 -b 2 -o "$TMP/cuda_no_bgrad_epilogue"
job 1 cuda cuda_recompute_full 1 -b 2 --recompute full -o "$TMP/cuda_recompute_full"
job 1 cuda cuda_recompute_sel 1 -b 2 --gelu-fusion 0 --recompute selective -o "$TMP/cuda_recompute_sel"
# cuBLASLt's candidates per shape: the heuristic's first slower, the second faster with other
# bits, the third faster than the first with its bits
# but 1 ms slower than the second (so that "fastest" takes the second by construction, not by
# timing noise between two undelayed candidates).
EMU_CUBLASLT_ALGOS=ok:3,ulp,ok:1 job 1 cuda cuda_tune_exact 1 -b 2 -s 4 -g 8 --matmul-autotune 1 -o "$TMP/cuda_tune_exact"
EMU_CUBLASLT_ALGOS=ok:3,ulp,ok:1 job 1 cuda cuda_tune_fastest 1 -b 2 -s 4 -g 8 --matmul-autotune 2 -o "$TMP/cuda_tune_fastest"
job 1 nccl nccl_again 1 -b 2 -s 4 -g 8 -o "$TMP/nccl_again" --profile-step 3
# Llama 3's shape at the same size (RMSNorm, RoPE, one kv head for the two query heads,
# SwiGLU of 320, an untied head).
llama=(--arch llama3 --kv-heads 1 --ffn-dim 320)
job 1 cpu llama_cpu 1 -b 2 "${llama[@]}" -o "$TMP/llama_cpu"
job 1 cuda llama_cuda 1 -b 2 -s 4 -g 8 "${llama[@]}" -o "$TMP/llama_cuda"
job 1 cuda llama_again 1 -b 2 -s 4 -g 8 "${llama[@]}" -o "$TMP/llama_again" --profile-step 3
llama_split() {
    cuda llama_save 1 -b 2 "${llama[@]}" -o "$TMP/llama_split" --ckpt-every 2 --stop-at-step 2
    cuda llama_resume 1 -b 2 "${llama[@]}" -o "$TMP/llama_split" --ckpt-every 2 --resume auto
}
job 1 llama_split
job 1 cuda llama_recompute_full 1 -b 2 "${llama[@]}" --recompute full -o "$TMP/llama_recompute_full"
job 1 cuda llama_recompute_sel 1 -b 2 "${llama[@]}" --recompute selective -o "$TMP/llama_recompute_sel"
job 1 cuda llama_cublas 1 -b 2 "${llama[@]}" --attention cublas -o "$TMP/llama_cublas"
job 1 cuda llama_pipelined 1 -b 2 "${llama[@]}" --attention flash-pipelined -o "$TMP/llama_pipelined"
job 1 cuda llama_offload 1 -b 2 -s 4 -g 8 "${llama[@]}" --offload optimizer -o "$TMP/llama_offload"
# --attention cudnn through the fake cuDNN (dev/cuda_emu/cudnn.cpp, found via FSDP_CUDNN_LIB;
# every other run is pointed at a file that does not exist, so auto keeps flash there): GPT-2
# and Llama's GQA against the cpu and flash; auto picks it where it loads; missing or refusing
# (EMU_CUDNN_REFUSE=1: no engine), auto falls back saying why and an explicit cudnn ends the run.
if [ -z "$CUDNN_FAKE_WHY" ]; then
    FSDP_CUDNN_LIB=$FAKE_CUDNN CUDNN_FRONTEND_CUDART_LIB_NAME=$FAKE_CUDART \
        job 1 cuda cuda_cudnn 1 -b 2 -s 4 -g 8 --attention cudnn -o "$TMP/cuda_cudnn"
    FSDP_CUDNN_LIB=$FAKE_CUDNN CUDNN_FRONTEND_CUDART_LIB_NAME=$FAKE_CUDART \
        job 1 cuda llama_cudnn 1 -b 2 "${llama[@]}" --attention cudnn -o "$TMP/llama_cudnn"
    FSDP_CUDNN_LIB=$FAKE_CUDNN CUDNN_FRONTEND_CUDART_LIB_NAME=$FAKE_CUDART \
        job 1 cuda cudnn_auto 1 -b 2 -x 1 -v 0 -o "$TMP/cudnn_auto"
    job 1 cuda cudnn_missing 1 -b 2 -x 1 -v 0 --attention cudnn -o "$TMP/cudnn_missing"
    EMU_CUDNN_REFUSE=1 FSDP_CUDNN_LIB=$FAKE_CUDNN CUDNN_FRONTEND_CUDART_LIB_NAME=$FAKE_CUDART \
        job 1 cuda cudnn_refuse_auto 1 -b 2 -x 1 -v 0 -o "$TMP/cudnn_refuse_auto"
    EMU_CUDNN_REFUSE=1 FSDP_CUDNN_LIB=$FAKE_CUDNN CUDNN_FRONTEND_CUDART_LIB_NAME=$FAKE_CUDART \
        job 1 cuda cudnn_refuse 1 -b 2 -x 1 -v 0 --attention cudnn -o "$TMP/cudnn_refuse"
fi
jobs_wait
# Evaluation (--eval-only) and --generate of cuda_save's step-2 checkpoint, on the cpu, the
# staged cuda path and NCCL at np=2 (a small eval set: the emulator is slow; its 12-token rows
# run as forwards of 4 x 16, not the micro-batch's 2 x 32).
"$PY" dev/test/eval_reference.py make-evalset "$VAL_SHARD" "$TMP/ev.bin" --examples 8 --context 8 --completion 4 \
    --seed 5 >"$TMP/ev.log" 2>&1
infer=(--resume "$TMP/cuda_split/ckpt/step_00000002" --eval-only --eval-data "$TMP/ev.bin" --generate "ROMEO:" -g 8 --top-k 1)
job 1 cpu cpu_infer 1 -b 2 "${infer[@]}" --eval-log "$TMP/cpu_infer.jsonl"
job 1 cuda cuda_infer 1 -b 2 "${infer[@]}" --eval-log "$TMP/cuda_infer.jsonl"
job 2 nccl nccl_infer 2 -b 2 "${infer[@]}" --eval-log "$TMP/nccl_infer.jsonl"
job 2 cuda cuda_np2 2 -b 1 -d 64 -o "$TMP/cuda_np2"
job 2 cuda cuda_np2_fp32 2 -b 1 -d 64 --reduce-dtype fp32 -o "$TMP/cuda_np2_fp32"
job 2 cuda cuda_hsdp 2 -b 1 -d 64 --shard-group-size 1 -o "$TMP/cuda_hsdp"
job 2 cuda cuda_np2_full 2 -b 1 -d 64 --recompute full -o "$TMP/cuda_np2_full"
[ ${mut_ok[staged_gather]} = 1 ] && FSDP_MUTANT=staged_gather job 2 run mutant_staged_gather 2 $MUT_EXE --device cuda --comm mpi -b 1 -d 64 -o "$TMP/mutant_staged_gather"
job 2 nccl nccl_np2 2 -b 1 -d 64 -o "$TMP/nccl_np2" --profile-step 3
job 2 nccl llama_np2 2 -b 1 -d 64 "${llama[@]}" -o "$TMP/llama_np2"
job 2 nccl nccl_np2_fp32 2 -b 1 -d 64 --reduce-dtype fp32 -o "$TMP/nccl_np2_fp32"
job 2 nccl nccl_hsdp 2 -b 1 -d 64 --shard-group-size 1 -o "$TMP/nccl_hsdp"
for name in nccl_count nccl_no_done_wait nccl_no_handoff; do
    [ ${mut_ok[$name]} = 1 ] && FSDP_MUTANT=$name EMU_DEVICE_COUNT=2 job 2 run mutant_$name 2 $MUT_EXE --device cuda --comm nccl -b 1 -d 64 -o "$TMP/mutant_$name"
done
# --offload optimizer: AdamW on the host worker, the same arithmetic and rounding bits as the
# GPU kernel, so bitwise the runs above (staged and NCCL, W=1 where the slot itself is copied,
# W=2 where the reduce-scatter output is; HSDP; micro-steps; sampling; NaN hooks), and resumable
# across offload on and off (the checkpoint files are the same).
job 1 nccl nccl_offload 1 -b 2 -s 4 -g 8 --offload optimizer -o "$TMP/nccl_offload" --profile-step 3
job 1 cuda cuda_offload 1 -b 2 -s 4 -g 8 --offload optimizer -o "$TMP/cuda_offload"
job 1 cuda cuda_accum_offload 1 -b 1 -d 64 --no-grad-sync-until-last --offload optimizer -o "$TMP/cuda_accum_offload"
job 1 nccl nccl_micro 1 -b 1 -d 64 -o "$TMP/nccl_micro"
job 1 nccl nccl_micro_offload 1 -b 1 -d 64 --offload optimizer -o "$TMP/nccl_micro_offload"
FSDP_TEST_NAN_LOSS_STEPS=2 FSDP_TEST_NAN_GRAD_STEPS=4 job 1 nccl nccl_nan_offload 1 -b 2 --offload optimizer -o "$TMP/nccl_nan_offload"
job 2 cuda cuda_np2_offload 2 -b 1 -d 64 --offload optimizer -o "$TMP/cuda_np2_offload"
job 2 nccl nccl_np2_offload 2 -b 1 -d 64 --offload optimizer -o "$TMP/nccl_np2_offload" --profile-step 3
ck="$TMP/nccl_split/ckpt/step_00000002"
[ -f "$ck/manifest.json" ] && job 1 nccl nccl_resume_offload 1 -b 2 --offload optimizer --resume "$ck" -o "$TMP/nccl_resume_offload"
offload_split() {
    nccl nccl_save_offload 1 -b 2 --offload optimizer -o "$TMP/nccl_split_offload" --ckpt-every 2 --stop-at-step 2
    nccl nccl_resume_from_offload 1 -b 2 -o "$TMP/nccl_split_offload" --ckpt-every 2 --resume auto
}
job 1 offload_split
job 2 cuda cuda_hsdp_offload 2 -b 1 -d 64 --shard-group-size 1 --offload optimizer -o "$TMP/cuda_hsdp_offload"
job 2 nccl nccl_hsdp_offload 2 -b 1 -d 64 --shard-group-size 1 --offload optimizer -o "$TMP/nccl_hsdp_offload"
# --param-dtype fp16 (dynamic loss scaling): against bf16 and the cpu; a first scale of 2^24
# that overflows (halved and skipped each step, not counted as bad steps); a scale doubled
# after every clean step (--loss-scale-window 1) until it overflows; the scaler's state
# through a checkpoint; W=2, NCCL and staged; an fp16 run resumed from a bf16 checkpoint.
job 1 nccl nccl_fp16 1 -b 2 -s 4 -g 8 --param-dtype fp16 -o "$TMP/nccl_fp16"
job 1 nccl nccl_fp16_overflow 1 -b 2 --param-dtype fp16 --loss-scale 16777216 --max-bad-steps 2 -o "$TMP/nccl_fp16_overflow"
job 1 nccl nccl_fp16_grow 1 -b 2 --param-dtype fp16 --loss-scale-window 1 -o "$TMP/nccl_fp16_grow"
fp16_split() {
    nccl nccl_fp16_save 1 -b 2 --param-dtype fp16 --loss-scale-window 1 -o "$TMP/nccl_fp16_split" --ckpt-every 2 --stop-at-step 2
    nccl nccl_fp16_resume 1 -b 2 --param-dtype fp16 --loss-scale-window 1 -o "$TMP/nccl_fp16_split" --ckpt-every 2 --resume auto
}
job 1 fp16_split
job 2 nccl nccl_fp16_np2 2 -b 1 -d 64 --param-dtype fp16 -o "$TMP/nccl_fp16_np2"
job 2 cuda cuda_fp16_np2 2 -b 1 -d 64 --param-dtype fp16 -o "$TMP/cuda_fp16_np2"
# An sm_75 GPU (a T4: EMU_SM=75): bf16 refused, fp16 trains with the cuBLAS attention (the
# flash kernels need sm_80), an explicit --attention flash refused.
EMU_SM=75 job 1 nccl sm75_bf16 1 -b 2 -x 1 -o "$TMP/sm75_bf16"
EMU_SM=75 job 1 nccl sm75_flash 1 -b 2 -x 1 --param-dtype fp16 --attention flash -o "$TMP/sm75_flash"
EMU_SM=75 job 1 nccl sm75_fp16 1 -b 2 --param-dtype fp16 -o "$TMP/sm75_fp16"
# Tensor parallelism (--tp 2, #33) at test_tp.sh's shape (4 heads of 16, so auto picks the
# cuBLAS attention; 12 sequences of 16 tokens per step): the staged path and NCCL (the TP
# communicator on the compute stream) against the cpu's np=1 run, and bitwise each other; TP 2
# x DP 2, also as HSDP; Llama's GQA; FSDP_TEST_TP_REPLICAS checks at every step that the
# replicated tensors' state is bitwise equal on both TP ranks (the tp_unsummed mutant must fail it).
tp=(--layers 2 --channels 64 --heads 4 --max-seq 64 -t 16 --seed 5)
tp_llama=(--arch llama3 --kv-heads 2 --ffn-dim 96)
job 1 cpu tp_cpu 1 -b 12 "${tp[@]}" -o "$TMP/tp_cpu"
FSDP_TEST_TP_REPLICAS=1 job 2 cuda tp_cuda 2 -b 12 "${tp[@]}" --tp 2 -s 4 -g 8 -o "$TMP/tp_cuda"
FSDP_TEST_TP_TRACE=$TMP/trace_tp_nccl FSDP_TEST_TP_REPLICAS=1 job 2 nccl tp_nccl 2 -b 12 "${tp[@]}" --tp 2 -s 4 -g 8 -o "$TMP/tp_nccl"
FSDP_TEST_TP_REPLICAS=1 job 4 nccl tp_nccl_dp2 4 -b 6 "${tp[@]}" --tp 2 -o "$TMP/tp_nccl_dp2" --ckpt-every 4 \
    --save-model "$TMP/tp_nccl_dp2.bin"
job 1 cpu tp_llama_cpu 1 -b 12 "${tp[@]}" "${tp_llama[@]}" -o "$TMP/tp_llama_cpu"
FSDP_TEST_TP_TRACE=$TMP/trace_tp_llama_nccl job 2 nccl tp_llama_nccl 2 -b 12 "${tp[@]}" "${tp_llama[@]}" --tp 2 -o "$TMP/tp_llama_nccl"
FSDP_TEST_TP_REPLICAS=1 job 4 cuda tp_hsdp 4 -b 6 "${tp[@]}" --tp 2 --shard-group-size 1 -o "$TMP/tp_hsdp"
# --offload optimizer at TP 2: the replicated tensors summed over TP before the reduce-scatter,
# counted once in the host's norm, rounded with the global keys on the host: tp_cuda's run.
FSDP_TEST_TP_REPLICAS=1 job 2 cuda tp_offload 2 -b 12 "${tp[@]}" --tp 2 -s 4 -g 8 --offload optimizer -o "$TMP/tp_offload"
job 1 cuda tp1_cuda 1 -b 12 "${tp[@]}" -x 1 -v 0 -o "$TMP/tp1_cuda"
# The rounding keyed by the global element: with --lr 0 the master stays and each step rounds
# it anew (step 1: the first refresh; step 2: AdamW's copy), so TP 2's bf16 parameters are TP
# 1's bitwise only when a value's random bits do not depend on --tp (FSDP_TEST_PARAM16).
sr=(-b 12 "${tp[@]}" --lr 0 --weight-decay 0 -x 2 -v 0)
FSDP_TEST_PARAM16=1 job 1 cuda sr_tp1 1 "${sr[@]}" -o "$TMP/sr_tp1"
FSDP_TEST_PARAM16=1 job 2 cuda sr_tp2 2 "${sr[@]}" --tp 2 -o "$TMP/sr_tp2"
[ ${mut_ok[tp_norm_twice]} = 1 ] && FSDP_MUTANT=tp_norm_twice job 2 run mutant_tp_norm_twice 2 $MUT_EXE \
    --device cuda --comm mpi -b 12 "${tp[@]}" --tp 2 -x 1 -v 0 -o "$TMP/mutant_tp_norm_twice"
[ ${mut_ok[tp_unsummed]} = 1 ] && FSDP_MUTANT=tp_unsummed FSDP_TEST_TP_REPLICAS=1 job 2 run mutant_tp_unsummed 2 $MUT_EXE \
    --device cuda --comm mpi -b 12 "${tp[@]}" --tp 2 -x 2 -v 0 -o "$TMP/mutant_tp_unsummed"
for name in tp_no_wait tp_no_ready; do
    [ ${mut_ok[$name]} = 1 ] && FSDP_MUTANT=$name EMU_DEVICE_COUNT=2 job 2 run mutant_$name 2 $MUT_EXE \
        --device cuda --comm nccl -b 12 "${tp[@]}" --tp 2 -x 2 -v 0 -o "$TMP/mutant_$name"
done
ck="$TMP/nccl_split/ckpt/step_00000002"
[ -f "$ck/manifest.json" ] && job 1 nccl nccl_fp16_from_bf16 1 -b 2 --param-dtype fp16 --resume "$ck" -o "$TMP/nccl_fp16_from_bf16"
ck="$TMP/cuda_split/ckpt/step_00000002"
[ -f "$ck/manifest.json" ] && job 1 cpu cpu_from_cuda 1 -b 2 -o "$TMP/cpu_from_cuda" --resume "$ck"
jobs_wait
wait $lane3

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
        if [[ $name == cuda* || $name == nccl* ]] && ! grep -q '^# cuda_emu: [1-9]' "$TMP/$name.log"; then
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
    # The emulator's cudaMemGetInfo counts exactly what the process allocated: the printed
    # budget must be all of it (an allocation the budget misses, or counts twice, shows).
    for run in cuda_ref nccl_np2 cuda_recompute_full nccl_offload nccl_np2_offload nccl_fp16; do
        mem=$(grep -m1 '^peak GPU memory' "$TMP/$run.log")
        read -r m b <<<"$(peak_gpu_mem "$TMP/$run.log")"
        if awk -v m="${m:-}" -v b="${b:-}" 'BEGIN { exit !(b > 0 && m - b < 0.05 && b - m < 0.05) }'; then
            ok "$TAG $run: the measured peak GPU memory equals the printed budget ($mem)"
        else
            not_ok "$TAG $run: measured peak GPU memory and budget differ: '$mem'"
        fi
        # The emulated NCCL and cuBLASLt allocate nothing: a measured library share here is an
        # allocation of ours that the backend or the kernels do not count.
        lib=$(grep -m1 '^  CUDA libraries (measured)' "$TMP/$run.log")
        [[ "$lib" =~ \ 0\.0\ MiB$ ]] && ok "$TAG $run: the CUDA libraries' measured share is 0 under the emulator" ||
            not_ok "$TAG $run: CUDA libraries line '$lib' (want 0.0 MiB: an allocation not counted by its owner)"
    done
fi
# --plan (train/plan.h) with a GPU profile models the cuda device's engine: its budget lines
# for the engine's state, slots, activations and the host mirror equal the emulated NCCL
# runs' (bf16 shards, fused optimizer, reduce in bf16 or fp32); only the device's own buffers
# (cuBLASLt workspace, kernel scratch, collective buffers) are the plan's estimates.
engine_lines() { sed -n '/^memory budget per rank/,/^  host: \(fp32 mirror\|offloaded\)/p' "$1" | grep -E '^  (sharded|gathered|full-gradient|activations|host: fp32|host: offloaded)'; }
for cfg in "nccl_ref 1 -b 2" "nccl_np2 2 -b 1 -d 64" "nccl_np2_offload 2 -b 1 -d 64 --offload optimizer" "nccl_np2_fp32 2 -b 1 -d 64 --reduce-dtype fp32" "nccl_hsdp 2 -b 1 -d 64 --shard-group-size 1"; do
    set -- $cfg; name=$1 np=$2; shift 2
    good $name >/dev/null || continue
    ./train_gpt --plan --sim-device h100 --plan-world $np "${common[@]}" "$@" >"$TMP/plan_$name.log" 2>&1
    if [ -n "$(engine_lines "$TMP/$name.log")" ] && diff <(engine_lines "$TMP/$name.log") <(engine_lines "$TMP/plan_$name.log") >/dev/null; then
        ok "$TAG --plan's engine budget lines equal the $name run's ($(engine_lines "$TMP/plan_$name.log" | wc -l) lines)"
    else
        not_ok "$TAG --plan vs $name budget: $(diff <(engine_lines "$TMP/$name.log") <(engine_lines "$TMP/plan_$name.log") | tr '\n' ' ' | cut -c1-300)"
    fi
done
# Activation recompute: rebuilt with the forward's kernels on the same inputs, so bitwise the
# run that keeps everything (selective's GELU output is the GELU kernel's, so against
# --gelu-fusion 0); and the budget's activations line shrinks.
good cuda_ref cuda_recompute_full && compare "cuda --recompute full == none (bitwise)" \
    "$TMP/cuda_ref/metrics.jsonl" "$TMP/cuda_recompute_full/metrics.jsonl" --exact
good cuda_gelu0 cuda_recompute_sel && compare "cuda --recompute selective == none, both --gelu-fusion 0 (bitwise)" \
    "$TMP/cuda_gelu0/metrics.jsonl" "$TMP/cuda_recompute_sel/metrics.jsonl" --exact
good cuda_np2 cuda_np2_full && compare "cuda np=2 --recompute full == none (bitwise)" \
    "$TMP/cuda_np2/metrics.jsonl" "$TMP/cuda_np2_full/metrics.jsonl" --exact
if good cuda_ref cuda_recompute_full cuda_recompute_sel; then
    act() { grep -m1 '^  activations' "$TMP/$1.log" | grep -oE '[0-9.]+ MiB' | cut -d' ' -f1; }
    a0=$(act cuda_ref); a1=$(act cuda_recompute_sel); a2=$(act cuda_recompute_full)
    # (2 small blocks: selective's saving, under 0.1 MiB, may not show at the printed precision)
    if awk -v a="$a0" -v b="$a1" -v c="$a2" 'BEGIN { exit !(a >= b && b >= c && a > c && c > 0) }'; then
        ok "$TAG cuda budget: activations none $a0 >= selective $a1 >= full $a2 MiB (full below none)"
    else
        not_ok "$TAG cuda budget: activations none '$a0', selective '$a1', full '$a2' MiB"
    fi
fi
good cpu_ref cuda_ref && compare "train_gpt --device cuda vs cpu, 4 steps from the same init (within 2%)" \
    "$TMP/cpu_ref/metrics.jsonl" "$TMP/cuda_ref/metrics.jsonl" --rtol 0.02
sample() {  # sample NAME [STEP]: the text of run NAME's sample of STEP [4], between its two "---" lines
    awk -v head="sample (step ${2:-4}):" '$0 == head {s = 1; next} s == 1 && /^---$/ {s = 2; next} s == 2 && /^---$/ {exit} s == 2' "$TMP/$1.log"
}
# --eval-only and --generate on the cuda device: the cpu's predictions (bf16 losses within 0.05
# of the cpu's; a prediction may differ only where the cpu's best two are within twice the
# largest difference), the same text at np=1 staged and np=2 NCCL.
if good cpu_infer cuda_infer nccl_infer; then
    [ -n "$(sample cuda_infer 2)" ] && [ "$(sample cuda_infer 2)" = "$(sample nccl_infer 2)" ] \
        && ok "$TAG --generate on cuda: the same greedy text staged at np=1 and NCCL at np=2 ('$(sample cuda_infer 2 | tr '\n' ' ')')" \
        || not_ok "$TAG --generate on cuda: '$(sample cuda_infer 2)' vs NCCL np=2 '$(sample nccl_infer 2)'"
    for name in cuda_infer nccl_infer; do
        msg=$("$PY" dev/test/eval_reference.py agree "$TMP/cpu_infer.jsonl" "$TMP/$name.jsonl" --max-diff 0.05 2>&1) \
            && ok "$TAG --eval-only $name against the cpu: $msg" || not_ok "$TAG --eval-only $name against the cpu: $msg"
    done
    grep -q '^eval acc_norm' "$TMP/nccl_infer.log" && ok "$TAG --eval-only at np=2 over NCCL: $(grep -m1 '^eval acc_norm' "$TMP/nccl_infer.log" | cut -c1-60)" \
        || not_ok "$TAG --eval-only at np=2 over NCCL: no eval line"
fi

# identical_runs A B WHAT: runs A and B (the same arguments) gave the same sample and bitwise
# equal losses.
identical_runs() {
    good $1 $2 || return
    if [ -z "$(sample $1)" ] || [ "$(sample $1)" != "$(sample $2)" ]; then
        not_ok "$TAG two identical $3 runs: the samples differ (or are missing)"
    else
        compare "two identical $3 runs: bitwise equal losses (and the same sample)" \
            "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" --exact
    fi
}
identical_runs cuda_ref cuda_again cuda
good llama_cpu llama_cuda && compare "Llama: --device cuda vs cpu, 4 steps from the same init (within 2%)" \
    "$TMP/llama_cpu/metrics.jsonl" "$TMP/llama_cuda/metrics.jsonl" --rtol 0.02
good llama_cuda llama_again && compare "Llama: two identical cuda runs: bitwise equal losses" \
    "$TMP/llama_cuda/metrics.jsonl" "$TMP/llama_again/metrics.jsonl" --exact
good llama_cuda llama_save llama_resume && compare "Llama: cuda save at step 2 + resume == uninterrupted (bitwise)" \
    "$TMP/llama_cuda/metrics.jsonl" "$TMP/llama_split/metrics.jsonl" --exact --from-step 3
good llama_cuda llama_recompute_full && compare "Llama: cuda --recompute full == none (bitwise)" \
    "$TMP/llama_cuda/metrics.jsonl" "$TMP/llama_recompute_full/metrics.jsonl" --exact
good llama_cuda llama_recompute_sel && compare "Llama: cuda --recompute selective == none (bitwise)" \
    "$TMP/llama_cuda/metrics.jsonl" "$TMP/llama_recompute_sel/metrics.jsonl" --exact
good llama_cuda llama_offload && compare "Llama: cuda --offload optimizer == on the GPU (bitwise)" \
    "$TMP/llama_cuda/metrics.jsonl" "$TMP/llama_offload/metrics.jsonl" --exact
good llama_cuda llama_cublas && compare "Llama: cuda --attention cublas vs flash (within 2%)" \
    "$TMP/llama_cuda/metrics.jsonl" "$TMP/llama_cublas/metrics.jsonl" --rtol 0.02
good llama_cuda llama_np2 && compare "Llama: --comm nccl np=2 vs np=1 (within 1e-2)" \
    "$TMP/llama_cuda/metrics.jsonl" "$TMP/llama_np2/metrics.jsonl" --rtol 0.01
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
if good cpu_ref cuda_ref cuda_pipelined llama_cpu llama_cuda llama_pipelined; then
    if grep -q '^attention: flash-pipelined (requested)$' "$TMP/cuda_pipelined.log" &&
       grep -q '^attention: flash-pipelined (requested)$' "$TMP/llama_pipelined.log"; then
        ok "$TAG --attention flash-pipelined: the runs say so (attention: flash-pipelined (requested))"
    else
        not_ok "$TAG --attention flash-pipelined: $(grep -h -m1 '^attention: ' "$TMP/cuda_pipelined.log" "$TMP/llama_pipelined.log" | tr '\n' ' ')"
    fi
    compare "cuda --attention flash-pipelined vs cpu, 4 steps from the same init (within 2%)" \
        "$TMP/cpu_ref/metrics.jsonl" "$TMP/cuda_pipelined/metrics.jsonl" --rtol 0.02
    compare "cuda --attention flash-pipelined vs flash (within 2%)" \
        "$TMP/cuda_ref/metrics.jsonl" "$TMP/cuda_pipelined/metrics.jsonl" --rtol 0.02
    compare "Llama (GQA): cuda --attention flash-pipelined vs cpu (within 2%)" \
        "$TMP/llama_cpu/metrics.jsonl" "$TMP/llama_pipelined/metrics.jsonl" --rtol 0.02
    compare "Llama (GQA): cuda --attention flash-pipelined vs flash (within 2%)" \
        "$TMP/llama_cuda/metrics.jsonl" "$TMP/llama_pipelined/metrics.jsonl" --rtol 0.02
fi
# --matmul-autotune: the exact mode switches to the faster candidate with the same bits and
# trains bitwise as untuned; the fastest mode takes the other-bits one (close, not equal).
if good cuda_ref cuda_tune_exact cuda_tune_fastest; then
    for run in cuda_tune_exact cuda_tune_fastest; do
        line=$(grep -m1 '^matmul: tuned [1-9][0-9]* shapes' "$TMP/$run.log")
        if [ -n "$line" ] && ! grep -q '^matmul: tuned' "$TMP/cuda_ref.log"; then
            ok "$TAG $run prints its tuning once (the default run does not): ${line:0:200}"
        else
            not_ok "$TAG $run: no 'matmul: tuned N shapes' line, or the untuned run printed one: '$line'"
        fi
    done
    compare "cuda --matmul-autotune 1 (a faster same-bits algorithm chosen) == untuned (bitwise)" \
        "$TMP/cuda_ref/metrics.jsonl" "$TMP/cuda_tune_exact/metrics.jsonl" --exact
    compare "cuda --matmul-autotune 2 (an other-bits algorithm chosen) vs untuned (within 1e-2)" \
        "$TMP/cuda_ref/metrics.jsonl" "$TMP/cuda_tune_fastest/metrics.jsonl" --rtol 0.01
    if cmp -s <(grep -o '"loss":[^,]*' "$TMP/cuda_ref/metrics.jsonl") <(grep -o '"loss":[^,]*' "$TMP/cuda_tune_fastest/metrics.jsonl"); then
        not_ok "$TAG cuda --matmul-autotune 2: losses bitwise equal to untuned: the other-bits candidate was not chosen"
    else
        ok "$TAG cuda --matmul-autotune 2: losses differ from untuned in the last bits (the fastest, other-bits candidate was chosen)"
    fi
fi
good cuda_ref cuda_gelu0 && compare "cuda --gelu-fusion 0 (GELU kernels) vs 2 (cuBLASLt epilogues) (within 1e-2)" \
    "$TMP/cuda_ref/metrics.jsonl" "$TMP/cuda_gelu0/metrics.jsonl" --rtol 0.01
# A cuBLASLt without GELU epilogues: the run says so (forward, backward) and trains exactly
# as --gelu-fusion 0.
if good cuda_gelu0 cuda_no_gelu_epilogue; then
    said=$(grep -c 'cuBLASLt has no algorithm for .*epilogue \(gelu_aux_bias\|dgelu\)' "$TMP/cuda_no_gelu_epilogue.log")
    if [ "$said" = 2 ]; then
        compare "cuda where cuBLASLt has no GELU epilogue: said twice, trains as --gelu-fusion 0 (bitwise)" \
            "$TMP/cuda_gelu0/metrics.jsonl" "$TMP/cuda_no_gelu_epilogue/metrics.jsonl" --exact
    else
        not_ok "$TAG cuda where cuBLASLt has no GELU epilogue: $said refusal lines (expected 2: forward, backward)"
    fi
fi

# A cuBLASLt without the bias-gradient epilogue (BGRADB): the run says so once per weight-
# gradient shape with a bias (qkv, attention projection, fc, fc projection) and trains as
# with it, the bias gradients from the reduction kernels (the same sums, other order).
if good cuda_ref cuda_no_bgrad_epilogue; then
    said=$(grep -c 'cuBLASLt has no deterministic algorithm for .*epilogue bgradb.*bias gradient runs as the reduction kernels' \
        "$TMP/cuda_no_bgrad_epilogue.log")
    if [ "$said" = 4 ]; then
        compare "cuda where cuBLASLt has no bias-gradient epilogue: said once per shape (4), the kernels instead (within 1e-2)" \
            "$TMP/cuda_ref/metrics.jsonl" "$TMP/cuda_no_bgrad_epilogue/metrics.jsonl" --rtol 0.01
    else
        not_ok "$TAG cuda where cuBLASLt has no bias-gradient epilogue: $said refusal lines (expected 4, one per shape)"
    fi
fi

# The backend test's own checks, each prefixed with the configuration.
for cfg in w1 w2_staged w2_nccl; do
    [ -x $BACKEND ] || break
    rc=$(cat "$TMP/backend_$cfg.rc" 2>/dev/null || echo missing)
    grep -E '^(not )?ok - ' "$TMP/backend_$cfg.log" | sed -E "s/^(not )?ok - /&$TAG test_backend_cuda $cfg: /"
    if [ "$rc" != 0 ] && ! grep -q '^not ok - ' "$TMP/backend_$cfg.log"; then
        not_ok "$TAG test_backend_cuda $cfg: status $rc: $(grep -E '^EMU:|error' "$TMP/backend_$cfg.log" | head -2 | tr '\n' ' ' | cut -c1-300)"
    fi
done

# --comm nccl
if [ "$(cat "$TMP/nccl_selftest.rc" 2>/dev/null)" = 0 ]; then
    grep '^ok' "$TMP/nccl_selftest.log" | sed "s/^ok - /ok - $TAG /"
else
    not_ok "$TAG the NCCL shim's self-test failed (status $(cat "$TMP/nccl_selftest.rc" 2>/dev/null)): $(grep -v '^ok' "$TMP/nccl_selftest.log" | head -3 | tr '\n' ' ' | cut -c1-500)"
fi
good cpu_ref nccl_ref && compare "--comm nccl vs cpu, 4 steps from the same init (within 2%)" \
    "$TMP/cpu_ref/metrics.jsonl" "$TMP/nccl_ref/metrics.jsonl" --rtol 0.02
identical_runs nccl_ref nccl_again "--comm nccl"
good nccl_ref nccl_save nccl_resume && compare "--comm nccl: save at step 2 + resume == uninterrupted (bitwise)" \
    "$TMP/nccl_ref/metrics.jsonl" "$TMP/nccl_split/metrics.jsonl" --exact --from-step 3
good nccl_ref nccl_np2 && compare "--comm nccl np=2 (EMU_DEVICE_COUNT=2) vs np=1 (within 1e-2)" \
    "$TMP/nccl_ref/metrics.jsonl" "$TMP/nccl_np2/metrics.jsonl" --rtol 0.01
# At W=2 both paths round the same fp32 sum of two bf16 values once, so under the emulator they
# agree bitwise; any stream-ordering slip on the NCCL path breaks that (the self-checks below).
good cuda_np2 nccl_np2 && compare "--comm nccl np=2 vs the staged --comm mpi np=2 (bitwise)" \
    "$TMP/cuda_np2/metrics.jsonl" "$TMP/nccl_np2/metrics.jsonl" --exact
# --profile-step on cuda: the marks are events on the model's stream (the bitwise check above
# shows they change nothing); the table has the phases of the NCCL schedule.
if good nccl_np2; then
    table=$(sed -n '/^profile of step 3 (rank 0, cuda device/,/^step /p' "$TMP/nccl_np2.log")
    # and the comm stream's own time: 3 units, so 3 reduce-scatters (one micro-step) and at
    # least 3 all-gathers (the blocks again for the backward when resharded).
    comm=$(grep -m1 '^  comm stream (NCCL' <<<"$table")
    if grep -q 'fsdp waits (gather / reduce) *backward' <<<"$table" && grep -q 'attention  *forward' <<<"$table" \
        && grep -q 'grad norm + AdamW' <<<"$table" &&
        grep -qE 'all-gather [0-9.]+ ms \(([3-9]|[1-9][0-9])\), reduce-scatter [0-9.]+ ms \(3\), replica all-reduce 0\.000 ms \(0\)' <<<"$comm"; then
        ok "$TAG --profile-step 3 with --comm nccl: a table of $(grep -c ' interval(s)$' <<<"$table") phases from events on the model's stream;${comm#  comm stream (NCCL, beside the compute above):}"
    else
        not_ok "$TAG --profile-step 3 with --comm nccl: no complete table: $(head -c 300 <<<"$table" | tr '\n' ' ')"
    fi
fi
# The roofline table after the profile (the vector kernels' bytes from the sim twin of each
# call, their measured time, the bytes' time at the copy bandwidth: unknown for the emulator,
# so "-"): every vector family's row, its bytes above zero and equal to the ones --plan
# models for the same flags at the same world size (its own table's column).
roofline_rows() { sed -n '/^vector kernels against the copy bandwidth/,/^[^ ]/p' "$1" |
    awk '$1 != "family" && /^  / { split($0, w, /  +/); print w[2] "|" w[3] "|" w[4] }'; }
roofline_check() {  # NAME W ARGS...: the run NAME at world W had ARGS beside common's
    local name=$1 w=$2; shift 2
    local plan="$TMP/plan_$name.log" got want
    if ! ./train_gpt --plan "${common[@]}" "$@" --plan-world "$w" --sim-device h200 >"$plan" 2>&1; then
        not_ok "$TAG --profile-step roofline ($name): --plan failed: $(tail -n 1 "$plan")"; return
    fi
    got=$(roofline_rows "$TMP/$name.log"); want=$(roofline_rows "$plan" | grep -v '^grad norm')
    if [ "$(grep -c . <<<"$got")" = 5 ] && [ "$got" = "$want" ] &&
       awk -F'|' '{ if (!($3 > 0)) bad = 1 } END { exit bad }' <<<"$got" &&
       grep -qE '^vector kernels against the copy bandwidth \([0-9]+ GB/s measured \(cudaMemcpy device to device, [0-9]+ MiB x 5, best; read \+ write counted\)\)' "$TMP/$name.log"; then
        ok "$TAG --profile-step roofline at W=$w ($name): 5 vector-kernel rows, bytes = --plan's ($(tr '\n' ' ' <<<"$got" | sed 's/  */ /g'))"
    else
        not_ok "$TAG --profile-step roofline at W=$w ($name): got '$(tr '\n' ' ' <<<"$got")', --plan '$(tr '\n' ' ' <<<"$want")'"
    fi
}
good nccl_again && roofline_check nccl_again 1 -b 2 -s 4 -g 8
good nccl_np2 && roofline_check nccl_np2 2 -b 1 -d 64
# The optimizer path's byte ledger and the step's host waits (--profile-step, counted by the
# backend from its launches). Per element of the rank's shard, from the kernels' operands:
# the bf16 gradient slots are not zeroed (each weight's first gradient write overwrites; only
# the padding is zeroed, under 0.05 B here), the first fold of a reduced gradient reads its
# source (W=1: the bf16 slot itself; W=2: NCCL's bf16 reduce-scatter output: 2 B) and writes
# the fp32 shard (4 B) with the norm's squares in the same pass, and AdamW reads master, m, v,
# grad and writes master, m, v and the bf16 shard (16 + 12 + 2 = 30 B): 36 B at any W. No
# host wait inside the step: the loss and norm are all-reduced and judged on the device and
# read one step late.
ledger_check() {  # NAME W WANT
    local line waits
    line=$(grep -m1 '^  optimizer path on the compute stream' "$TMP/$1.log")
    waits=$(grep -m1 '^  host waits in the step' "$TMP/$1.log")
    if grep -qF "$3" <<<"$line" && grep -qxF '  host waits in the step (backend): 0' <<<"$waits"; then
        ok "$TAG --profile-step at W=$2 ($1): ${line#*launches: }; ${waits#  }"
    else
        not_ok "$TAG --profile-step at W=$2 ($1): want '$3' and 0 host waits, got '$line' / '$waits'"
    fi
}
# --offload optimizer
offload_same() {  # offload_same REF RUN WHAT [RUN's output directory]
    good "$1" "$2" && compare "--offload optimizer, $3 == on the GPU (bitwise)" "$TMP/$1/metrics.jsonl" "$TMP/${4:-$2}/metrics.jsonl" --exact
}
offload_same nccl_ref nccl_offload "nccl W=1, sampling"
offload_same cuda_ref cuda_offload "staged W=1, sampling"
offload_same cuda_accum cuda_accum_offload "2 micro-steps, --no-grad-sync-until-last"
offload_same nccl_micro nccl_micro_offload "nccl, 2 micro-steps reduced each"
offload_same nccl_nan nccl_nan_offload "NaN loss at step 2 and gradient at step 4 (both skipped)"
offload_same cuda_np2 cuda_np2_offload "staged W=2"
offload_same nccl_np2 nccl_np2_offload "nccl W=2"
offload_same nccl_ref nccl_resume_offload "resumed at step 2 from a checkpoint of a run on the GPU"
good nccl_save_offload && offload_same nccl_ref nccl_resume_from_offload "a run on the GPU resumed from the offloaded run's step-2 checkpoint" nccl_split_offload
if good nccl_offload nccl_np2_offload; then
    # The device keeps the bf16 shard only; the host holds master, m, v, grads and staging
    # (4 x 4 + 2 + 2 bytes per shard element at W=1, where the slot itself is the reduced gradient).
    sh=$(grep -m1 '^  sharded bf16 params (optimizer offloaded)' "$TMP/nccl_offload.log")
    ho=$(grep -m1 '^  host: offloaded master, m, v, grads + staging (pinned)' "$TMP/nccl_offload.log")
    ref=$(grep -m1 '^  sharded params + grads + Adam m, v' "$TMP/nccl_ref.log")
    a=$(awk '{print $(NF-1)}' <<<"$sh"); h=$(awk '{print $(NF-1)}' <<<"$ho"); r=$(awk '{print $(NF-1)}' <<<"$ref")
    if awk -v a="$a" -v h="$h" -v r="$r" 'BEGIN { exit !(a > 0 && r > 0 && (a / r - 2 / 18) ^ 2 < 1e-4 && (h / a - 10) ^ 2 < 0.01) }'; then
        ok "$TAG --offload optimizer budget: device shards $a MiB (2/18 of the $r MiB on the GPU), pinned host $h MiB (10x the device's)"
    else
        not_ok "$TAG --offload optimizer budget: '$sh' / '$ho' vs '$ref'"
    fi
    waits=$(grep -m1 '^  host waits in the step' "$TMP/nccl_np2_offload.log")
    if grep -qF "host waits in the step (backend): 1 (the offloaded step's loss x 1)" <<<"$waits"; then
        ok "$TAG --offload optimizer: one host wait per step, for the decision ($waits)"
    else
        not_ok "$TAG --offload optimizer: host waits '$waits' (want 1, the offloaded step's loss)"
    fi
fi
offload_same cuda_hsdp cuda_hsdp_offload "staged HSDP (2 replicas of 1-rank shard groups, summed on the host)"
offload_same nccl_hsdp nccl_hsdp_offload "nccl HSDP (2 replicas of 1-rank shard groups, summed on the host)"

if good nccl_nan; then
    skipped=$(grep '^step ' "$TMP/nccl_nan.log" | grep 'update skipped' | awk '{print $2}' | tr '\n' ' ')
    val=$(grep '^val loss' "$TMP/nccl_nan.log" | tail -n 1)
    if [ "$skipped" = "2/4 4/4 " ] && grep -qE '^val loss [0-9]+\.[0-9]+ \(step 4\)' <<<"$val"; then
        ok "$TAG cuda, NaN loss at step 2, NaN gradient at step 4 (device-side decision): both updates skipped, weights finite ($val)"
    else
        not_ok "$TAG cuda, NaN loss at step 2, NaN gradient at step 4: skipped steps '$skipped' (want 2/4 4/4), last '$val'"
    fi
fi
rc=$(cat "$TMP/nccl_nan_stop.rc" 2>/dev/null || echo missing)
msg=$(grep -m1 -o 'step 3: 2 step(s) in a row with a non-finite loss.*' "$TMP/nccl_nan_stop.log" | cut -c1-200)
if [ "$rc" != 0 ] && [ "$rc" != missing ] && grep -q 'weights are those after step 1' <<<"$msg" && ! grep -q '^step    4' "$TMP/nccl_nan_stop.log"; then
    ok "$TAG cuda, NaN loss at steps 2 and 3, --max-bad-steps 2: stops at step 3 (status $rc): $msg"
else
    not_ok "$TAG cuda, NaN loss at steps 2 and 3, --max-bad-steps 2: status $rc, '$msg'"
fi
# --param-dtype fp16. Under the emulator every product and sum is exact but for the 16-bit
# roundings, and fp16 has 3 more significand bits than bf16 (rounding 8x finer) while nothing
# here overflows or underflows at the default scale: so the fp16 run must stay at least as
# close to the fp32 cpu run as the bf16 run does, and both within 2% of it (as cuda vs cpu).
if good cpu_ref nccl_ref nccl_fp16; then
    compare "--param-dtype fp16 vs the fp32 cpu run: within 2%, and at least as close as bf16" \
        "$TMP/cpu_ref/metrics.jsonl" "$TMP/nccl_fp16/metrics.jsonl" --rtol 0.02 --closer-than "$TMP/nccl_ref/metrics.jsonl"
    compare "--param-dtype fp16 vs bf16, 4 steps from the same init (within 2%)" \
        "$TMP/nccl_ref/metrics.jsonl" "$TMP/nccl_fp16/metrics.jsonl" --rtol 0.02
    if diff <(engine_lines "$TMP/nccl_ref.log") <(engine_lines "$TMP/nccl_fp16.log") >/dev/null &&
       [ "$(grep -c '| scale 65536 | ' "$TMP/nccl_fp16.log")" = 4 ] && ! grep -q '| scale ' "$TMP/nccl_ref.log"; then
        ok "$TAG --param-dtype fp16: the budget's engine lines are bf16's; every step line shows the scale (65536)"
    else
        not_ok "$TAG --param-dtype fp16: budget lines or step lines: $(grep -m1 '^step' "$TMP/nccl_fp16.log")"
    fi
fi
# scales NAME: the loss scale of each step of run NAME, from its metrics.
scales() { grep -o '"loss_scale":[0-9.e+]*' "$TMP/$1/metrics.jsonl" | cut -d: -f2 | tr '\n' ' '; }
if good nccl_fp16_overflow; then
    skipped=$(grep -c 'update skipped: gradient overflow' "$TMP/nccl_fp16_overflow.log")
    v0=$(grep -m1 '^val loss' "$TMP/nccl_fp16_overflow.log" | awk '{print $3}')
    v4=$(grep '^val loss' "$TMP/nccl_fp16_overflow.log" | tail -n 1 | awk '{print $3}')
    if [ "$(scales nccl_fp16_overflow)" = "16777216 8388608 4194304 2097152 " ] && [ "$skipped" = 4 ] && [ -n "$v0" ] && [ "$v0" = "$v4" ] &&
       grep -q 'loss scale 2097152 -> 1048576$' "$TMP/nccl_fp16_overflow.log"; then
        ok "$TAG fp16, a first scale of 2^24 overflows: each step skipped and the scale halved (2^24 .. 2^21), weights unchanged (val loss $v0 at steps 0 and 4), not counted by --max-bad-steps 2"
    else
        not_ok "$TAG fp16 overflow: scales '$(scales nccl_fp16_overflow)', $skipped overflow lines, val loss '$v0' -> '$v4'"
    fi
fi
if good nccl_fp16_grow; then
    if [ "$(scales nccl_fp16_grow)" = "65536 131072 262144 524288 " ] &&
       [ "$(grep -c 'update skipped' "$TMP/nccl_fp16_grow.log")" = 1 ] && grep -q '^step    4/4 .*loss scale 524288 -> 262144$' "$TMP/nccl_fp16_grow.log"; then
        ok "$TAG fp16, --loss-scale-window 1: the scale doubles after each clean step (65536 .. 524288) until step 4 overflows, is skipped and halved"
    else
        not_ok "$TAG fp16 growth: scales '$(scales nccl_fp16_grow)': $(grep 'update skipped' "$TMP/nccl_fp16_grow.log" | cut -c1-200)"
    fi
fi
if good nccl_fp16_grow nccl_fp16_save nccl_fp16_resume; then
    man="$TMP/nccl_fp16_split/ckpt/step_00000002/manifest.json"
    if grep -q '"loss_scaler":{"scale":262144,"good_steps":0,"window":1}' "$man" && [ "$(scales nccl_fp16_split)" = "$(scales nccl_fp16_grow)" ]; then
        compare "fp16: save at step 2 + resume == uninterrupted (bitwise; the scaler's state, 262144, in the manifest)" \
            "$TMP/nccl_fp16_grow/metrics.jsonl" "$TMP/nccl_fp16_split/metrics.jsonl" --exact --from-step 3
    else
        not_ok "$TAG fp16 resume: manifest scaler '$(grep -o '"loss_scaler":{[^}]*}' "$man")', scales '$(scales nccl_fp16_split)' vs '$(scales nccl_fp16_grow)'"
    fi
fi
good nccl_fp16 nccl_fp16_np2 && compare "fp16 --comm nccl np=2 vs np=1 (within 1e-2)" \
    "$TMP/nccl_fp16/metrics.jsonl" "$TMP/nccl_fp16_np2/metrics.jsonl" --rtol 0.01
good cuda_fp16_np2 nccl_fp16_np2 && compare "fp16 --comm nccl np=2 vs the staged --comm mpi np=2 (bitwise)" \
    "$TMP/cuda_fp16_np2/metrics.jsonl" "$TMP/nccl_fp16_np2/metrics.jsonl" --exact
if good nccl_ref nccl_fp16_from_bf16; then
    if grep -q 'has no loss scaler state (saved by a bf16 run): starting at --loss-scale 65536' "$TMP/nccl_fp16_from_bf16.log"; then
        compare "fp16 resumed from a bf16 run's checkpoint (said, at the first scale) vs bf16 uninterrupted (within 2%)" \
            "$TMP/nccl_ref/metrics.jsonl" "$TMP/nccl_fp16_from_bf16/metrics.jsonl" --rtol 0.02 --from-step 3
    else
        not_ok "$TAG fp16 resumed from a bf16 checkpoint: no note that it starts at --loss-scale"
    fi
fi
# refused NAME PATTERN WHAT: run NAME exited non-zero with one error line matching PATTERN.
refused() {
    local rc msg
    rc=$(cat "$TMP/$1.rc" 2>/dev/null || echo missing)
    msg=$(grep -m1 -o 'error: .*' "$TMP/$1.log" | cut -c1-240)
    if [ "$rc" != 0 ] && [ "$rc" != missing ] && grep -qE -- "$2" <<<"$msg"; then ok "$TAG $3: refused ($msg)"
    else not_ok "$TAG $3: status $rc, '$msg'"; fi
}

# --attention cudnn (the fake cuDNN): the runs, the startup line that names the pick, and the
# refusals (one line naming the reason, status 1).
if [ -n "$CUDNN_FAKE_WHY" ]; then
    ok "$TAG --attention cudnn # skip $CUDNN_FAKE_WHY"
else
    picked() {  # RUN REGEX WHAT: the run's "attention: ..." startup line matches
        local line
        line=$(grep -m1 '^attention: ' "$TMP/$1.log")
        if grep -qE -- "$2" <<<"$line"; then ok "$TAG $3 ($line)"; else not_ok "$TAG $3: '$line'"; fi
    }
    good cuda_cudnn && picked cuda_cudnn '^attention: cudnn \(.*libcudnn_graph\.so\.9, cuDNN 9\.' \
        "--attention cudnn loads the library named by FSDP_CUDNN_LIB"
    good cpu_ref cuda_cudnn && compare "cuda --attention cudnn vs cpu, 4 steps from the same init (within 2%)" \
        "$TMP/cpu_ref/metrics.jsonl" "$TMP/cuda_cudnn/metrics.jsonl" --rtol 0.02
    good cuda_ref cuda_cudnn && compare "cuda --attention cudnn vs flash (within 2%)" \
        "$TMP/cuda_ref/metrics.jsonl" "$TMP/cuda_cudnn/metrics.jsonl" --rtol 0.02
    good llama_cpu llama_cudnn && compare "Llama (GQA): cuda --attention cudnn vs cpu (within 2%)" \
        "$TMP/llama_cpu/metrics.jsonl" "$TMP/llama_cudnn/metrics.jsonl" --rtol 0.02
    good llama_cuda llama_cudnn && compare "Llama (GQA): cuda --attention cudnn vs flash (within 2%)" \
        "$TMP/llama_cuda/metrics.jsonl" "$TMP/llama_cudnn/metrics.jsonl" --rtol 0.02
    good cudnn_auto && picked cudnn_auto '^attention: cudnn \(' "--attention auto picks cudnn where it loads"
    good cuda_ref && picked cuda_ref '^attention: flash \(auto; cudnn unavailable: cannot load .*\(FSDP_CUDNN_LIB\)' \
        "--attention auto without the library: flash, saying why"
    good cudnn_refuse_auto && picked cudnn_refuse_auto '^attention: flash \(auto; cudnn unavailable: cuDNN SDPA' \
        "--attention auto with a cuDNN that refuses the graphs (EMU_CUDNN_REFUSE=1): flash, saying why"
    refused cudnn_missing '^error: --attention cudnn: cannot load .*\(FSDP_CUDNN_LIB\)' \
        "--attention cudnn without the library"
    refused cudnn_refuse '^error: --attention cudnn: cuDNN SDPA' "--attention cudnn with a cuDNN that refuses the graphs"
fi
refused sm75_bf16 'cuda_emu \(CPU emulation of an sm_75 GPU\) \(sm_75\) has no bf16 tensor cores: train with --param-dtype fp16' \
    "sm_75 GPU, bf16"
refused sm75_flash '--attention flash needs sm_80 or newer .*; use --attention cublas' "sm_75 GPU, --attention flash"
if good nccl_fp16 sm75_fp16; then
    if grep -q '^cuda: .*sm_75 | fp16 with loss scaling | .* attention cublas' "$TMP/sm75_fp16.log"; then
        compare "sm_75 GPU, --param-dtype fp16: the cuBLAS attention chosen, vs flash on sm_90 (within 2%)" \
            "$TMP/nccl_fp16/metrics.jsonl" "$TMP/sm75_fp16/metrics.jsonl" --rtol 0.02
    else
        not_ok "$TAG sm_75 GPU, fp16: $(grep -m1 '^cuda: ' "$TMP/sm75_fp16.log" | cut -c1-240)"
    fi
fi
# Kernel launches (CUPTI's callback API; the emulator's shim reports each launch, cuBLASLt
# matmul and NCCL collective): the per-phase column adds up to the step's total, and a block's
# forward is 7 launches (LayerNorm, the residual add fused with the second LayerNorm, the QKV,
# attention-projection, FC (GELU in its epilogue) and FC-projection GEMMs, one attention
# kernel) plus the final LayerNorm's one launch shared by the L = 2 blocks: 7.5.
# Per block, GPT-2 (2 layers: the final LayerNorm's launches count half to each): forward 7
# + 0.5; backward 15 + 1 (each linear layer's dinp and dweight GEMMs, the bias gradient in
# the latter's epilogue: 8; two LayerNorm backwards of 2 launches, their dweight and dbias
# partial sums in one: 4; attention 3).
launch_check() {  # NAME
    local line total sum fwd bwd
    line=$(grep -m1 '^  kernel launches in the step' "$TMP/$1.log")
    total=$(sed -n 's/.*in the step: \([0-9]*\) on every stream.*/\1/p' <<<"$line")
    fwd=$(sed -n 's/.*per transformer block: forward \([0-9.]*\),.*/\1/p' <<<"$line")
    bwd=$(sed -n 's/.*per transformer block: forward [0-9.]*, backward \([0-9.]*\).*/\1/p' <<<"$line")
    sum=$(sed -n '/^profile of step/,/^  kernel launches/p' "$TMP/$1.log" | grep -oE '[0-9]+ launches$' | awk '{ s += $1 } END { print s + 0 }')
    if [ -n "$total" ] && [ "$total" -gt 0 ] && [ "$total" = "$sum" ] && [ "$fwd" = 7.5 ] && [ "$bwd" = 16.0 ]; then
        ok "$TAG --profile-step counts kernel launches ($1): ${line#  }"
    else
        not_ok "$TAG --profile-step kernel launches ($1): total '$total', phases add to '$sum', per block forward '$fwd' (want 7.5), backward '$bwd' (want 16.0): '$line'"
    fi
}
good nccl_again && launch_check nccl_again
good nccl_np2 && launch_check nccl_np2
# --plan charges each operation the launches the cuda device issues for it (kernels_sim.c):
# its launches per model phase and direction must be the profiled step's (the same flags, the
# h200 profile), for GPT-2 at W = 1 and 2 (flash, the bias gradients in the GEMM epilogue),
# --attention cublas (7 forward, 14 backward launches), --gelu-fusion 0 (the GELU kernels)
# and the Llama (RMSNorm, RoPE, SwiGLU). Not here: a run whose bias-gradient epilogue
# cuBLASLt refuses at run time (EMU_CUBLASLT_NO_BGRAD: the plan cannot know it), and
# --attention cudnn (the fake cuDNN launches no kernel; the plan takes a GPU's 1 and 2).
phase_launches() {  # LOG: "PHASE DIRECTION LAUNCHES" of the model's phases, launches > 0
    sed -n '/^profile of step/,/^  kernel launches/p' "$1" |
        awk '/ launches$/ { name = substr($0, 3, 30); dir = substr($0, 34, 8); sub(/ +$/, "", name); sub(/ +$/, "", dir)
                            if (dir != "" && name !~ /^fsdp waits/ && $(NF - 1) > 0) print name, dir, $(NF - 1) }' | sort
}
launch_plan_check() {  # NAME W ARGS...: the run NAME at world W had ARGS beside common's
    local name=$1 w=$2; shift 2
    local plan="$TMP/planl_$name.log" got want
    if ! ./train_gpt --plan "${common[@]}" "$@" --plan-world "$w" --sim-device h200 >"$plan" 2>&1; then
        not_ok "$TAG --plan launches ($name): --plan failed: $(tail -n 1 "$plan")"; return
    fi
    got=$(phase_launches "$TMP/$name.log")
    want=$(sed -n 's/^  per phase: //p' "$plan" | sed 's/, /\n/g' | sort)
    if [ -n "$got" ] && [ "$got" = "$want" ]; then
        ok "$TAG --plan's launches per model phase = --profile-step's at W=$w ($name: $(tr '\n' ',' <<<"$got" | sed 's/,$//'); $(grep -m1 -o 'per transformer block: .*' "$plan"))"
    else
        not_ok "$TAG --plan's launches per model phase ($name, W=$w): profiled '$(tr '\n' ',' <<<"$got")', planned '$(tr '\n' ',' <<<"$want")'"
    fi
}
good nccl_again && launch_plan_check nccl_again 1 -b 2 -s 4 -g 8
good nccl_np2 && launch_plan_check nccl_np2 2 -b 1 -d 64
good cuda_cublas && launch_plan_check cuda_cublas 1 -b 2 --attention cublas
good cuda_pipelined && launch_plan_check cuda_pipelined 1 -b 2 --attention flash-pipelined
good cuda_gelu0 && launch_plan_check cuda_gelu0 1 -b 2 --gelu-fusion 0
good llama_again && launch_plan_check llama_again 1 -b 2 -s 4 -g 8 "${llama[@]}"
good nccl_again && ledger_check nccl_again 1 "36.0 B per shard element (gradient-slot zeroing 0.0, folds + norm 6.0, AdamW + bf16 shard 30.0"
good nccl_np2 && ledger_check nccl_np2 2 "36.0 B per shard element (gradient-slot zeroing 0.0, folds + norm 6.0, AdamW + bf16 shard 30.0"
good nccl_ref nccl_np2_fp32 && compare "--comm nccl np=2 with --reduce-dtype fp32 vs np=1 (within 1e-2)" \
    "$TMP/nccl_ref/metrics.jsonl" "$TMP/nccl_np2_fp32/metrics.jsonl" --rtol 0.01
good nccl_ref nccl_hsdp && compare "--comm nccl np=2 HSDP (shard + replica communicators) vs np=1 (within 1e-2)" \
    "$TMP/nccl_ref/metrics.jsonl" "$TMP/nccl_hsdp/metrics.jsonl" --rtol 0.01
refused nccl_refused 'which NCCL refuses; use --comm mpi' "--comm nccl at np=2 without EMU_DEVICE_COUNT (two ranks, one GPU)"
m="--comm nccl np=2, rank 1 stalled at step 2 (--comm-timeout 4): the job ends with an error"
rc=$(cat "$TMP/nccl_stall.rc" 2>/dev/null || echo missing)
msg=$(grep -m1 -E 'error: .*within --comm-timeout 4' "$TMP/nccl_stall.log" | cut -c1-300)
if [ "$rc" = 0 ] || [ "$rc" = 124 ] || [ "$rc" = 137 ] || [ "$rc" = missing ] || [ -z "$msg" ]; then
    not_ok "$TAG $m: status $rc: $(grep -v '^ ' "$TMP/nccl_stall.log" | tail -n 3 | tr '\n' ' ' | cut -c1-300)"
else
    ok "$TAG $m (status $rc): $msg"
fi
left=$(find /dev/shm -maxdepth 1 -name 'emu_nccl.*' -newer "$TMP/shm_marker" 2>/dev/null | head -3 | tr '\n' ' ')
[ -z "$left" ] && ok "$TAG --comm nccl runs leave no shared-memory segment in /dev/shm" ||
    not_ok "$TAG --comm nccl runs left shared-memory segments behind: $left"

# self_check NAME REF WHAT COMPARE-ARGS...: the mutant's np=2 run must differ from run REF.
self_check() {
    local name=$1 ref=$2 m="self-check: $3"; shift 3
    case ${mut_ok[$name]} in
        0) not_ok "$TAG $m: the pattern of mutant $name no longer matches fsdp/backend_cuda.cuh; update dev/test/test_train_emu.sh" ;;
        2) build_failed "the mutants' train_gpt" $MUT_EXE ;;
        3) not_ok "$TAG $m: transform.py failed on the mutants' copy" ;;
        *) if [ "$(cat "$TMP/mutant_$name.rc" 2>/dev/null)" != 0 ]; then
               not_ok "$TAG $m: the mutant run failed (status $(cat "$TMP/mutant_$name.rc" 2>/dev/null)): $(tail -n 2 "$TMP/mutant_$name.log" | tr '\n' ' ' | cut -c1-300)"
           elif good $ref >/dev/null; then
               if r=$(compare x "$TMP/$ref/metrics.jsonl" "$TMP/mutant_$name/metrics.jsonl" "$@"); then
                   not_ok "$TAG $m: the mutant matched $ref (${r#"ok - $TAG x "})"
               else
                   ok "$TAG $m (${r#"not ok - $TAG x: "})"
               fi
           fi ;;
    esac
}
self_check staged_gather cuda_ref "with the staged all-gather copying back one slice only, np=2 differs from np=1" --rtol 0.01
self_check nccl_count nccl_ref "with the bf16 ncclReduceScatter passing recvcount n / 2, nccl np=2 differs from np=1" --rtol 0.01
self_check nccl_no_done_wait cuda_np2 "with compute not waiting for the collective's event (async streams), nccl np=2 is no longer bitwise the staged run" --exact
# Tensor parallel: within the bf16 bound of cuda vs cpu, NCCL == staged at TP 2 (both round
# the same fp32 sum of two once), the replicas bitwise equal at every step (4 lines a run).
good tp_cpu tp_cuda && compare "--tp 2 staged (--comm mpi, np=2) vs the cpu's np=1 (within 2%)" \
    "$TMP/tp_cpu/metrics.jsonl" "$TMP/tp_cuda/metrics.jsonl" --rtol 0.02
good tp_cpu tp_nccl && compare "--tp 2 --comm nccl (np=2) vs the cpu's np=1 (within 2%)" \
    "$TMP/tp_cpu/metrics.jsonl" "$TMP/tp_nccl/metrics.jsonl" --rtol 0.02
good tp_cuda tp_nccl && compare "--tp 2: --comm nccl == staged (bitwise)" \
    "$TMP/tp_cuda/metrics.jsonl" "$TMP/tp_nccl/metrics.jsonl" --exact
if good tp_cuda tp_nccl; then  # (each rank's vocabulary range of the row's logits, gathered on the host)
    t=$(sample tp_cuda)
    [ -n "$t" ] && [ "$t" = "$(sample tp_nccl)" ] && ok "$TAG --tp 2: a sample on cuda, the same text staged and with NCCL" ||
        not_ok "$TAG --tp 2 samples: staged '$(head -c 80 <<<"$t")', nccl '$(sample tp_nccl | head -c 80)'"
fi
good tp_cpu tp_nccl_dp2 && compare "--tp 2 x DP 2 --comm nccl (np=4) vs the cpu's np=1 (within 2%)" \
    "$TMP/tp_cpu/metrics.jsonl" "$TMP/tp_nccl_dp2/metrics.jsonl" --rtol 0.02
# --save-model on cuda at TP 2 x DP 2: the fp32 masters gathered over the shard and TP groups,
# each box at its global place: the llm.c export of the same weights, byte for byte.
if good tp_nccl_dp2 >/dev/null; then
    if ./ckpt export "$TMP/tp_nccl_dp2/ckpt/step_00000004" --llmc "$TMP/tp_dp2_export.bin" > "$TMP/tp_dp2_export.log" 2>&1 &&
       cmp -s "$TMP/tp_dp2_export.bin" "$TMP/tp_nccl_dp2.bin"; then
        ok "$TAG --tp 2 x DP 2 --save-model on cuda: ckpt export --llmc of its step 4 checkpoint, byte for byte"
    else
        not_ok "$TAG --tp 2 x DP 2 --save-model on cuda vs export --llmc: $(tail -n 2 "$TMP/tp_dp2_export.log" | tr '\n' ' ') $(cmp "$TMP/tp_dp2_export.bin" "$TMP/tp_nccl_dp2.bin" 2>&1 | head -c 200)"
    fi
fi
good tp_cpu tp_hsdp && compare "--tp 2 x HSDP (2 replicas of 1-rank shard groups, staged, np=4) vs the cpu's np=1 (within 2%)" \
    "$TMP/tp_cpu/metrics.jsonl" "$TMP/tp_hsdp/metrics.jsonl" --rtol 0.02
good tp_llama_cpu tp_llama_nccl && compare "Llama (GQA) --tp 2 --comm nccl vs the cpu's np=1 (within 2%)" \
    "$TMP/tp_llama_cpu/metrics.jsonl" "$TMP/tp_llama_nccl/metrics.jsonl" --rtol 0.02
# The backward's overlap in order (FSDP_TEST_TP_TRACE, as test_tp_overlap.sh on the cpu): per
# rank, each column-parallel backward enqueues its dX GEMM on compute, its reduce-scatter on the
# TP stream, the dW GEMM on compute, then compute's wait for the reduce-scatter's event, then the
# norm's backward; and the runs are bitwise the staged path, whose start blocks.
for name in tp_nccl tp_llama_nccl; do
    good $name >/dev/null || continue
    for r in 0 1; do "$PY" dev/test/tp_trace_order.py "$TAG $name, rank $r" "$TMP/trace_$name.$r" 2 4; done
done
# Its events: without either, the TP communicator's collectives run out of the order they were
# issued in, which the emulator's NCCL refuses, ending the run (as it saw it: "streams that do
# not order them", or the ranks' collectives mismatched).
for cfg in "tp_no_wait:compute not waiting for the started TP reduce-scatter" \
           "tp_no_ready:the TP stream not waiting for compute's dX GEMM"; do
    name=${cfg%%:*} m="self-check: with ${cfg#*:} (async streams), --tp 2 nccl fails"
    case ${mut_ok[$name]} in
        0) not_ok "$TAG $m: the pattern of mutant $name no longer matches fsdp/backend_cuda.cuh" ;;
        2) build_failed "the mutants' train_gpt" $MUT_EXE ;;
        3) not_ok "$TAG $m: transform.py failed on the mutants' copy" ;;
        *) why=$(grep -m1 -oE 'collective #[0-9]+.*(streams that do not order them|the same collectives in the same order)\)' "$TMP/mutant_$name.log" | cut -c1-240)
           [ "$(cat "$TMP/mutant_$name.rc" 2>/dev/null)" != 0 ] && [ -n "$why" ] && ok "$TAG $m: $why" ||
               not_ok "$TAG $m: status $(cat "$TMP/mutant_$name.rc" 2>/dev/null), $(grep -m1 'error:' "$TMP/mutant_$name.log" | cut -c1-240)" ;;
    esac
done
for name in tp_cuda tp_nccl tp_nccl_dp2 tp_hsdp tp_offload; do
    good $name >/dev/null || continue
    n=$(grep -c '^test hook: at step [1-4] the replicated tensors (.*) are bitwise equal on the 2 TP ranks' "$TMP/$name.log")
    [ "$n" = 4 ] && ok "$TAG $name: the replicated tensors' master, m, v and bf16 shard bitwise equal on both TP ranks at steps 1-4" ||
        not_ok "$TAG $name: $n of 4 replica checks passed: $(grep -m1 'test hook' "$TMP/$name.log")"
done
offload_same tp_cuda tp_offload "--tp 2 staged, sampling"
# The bf16 parameters by global element (FSDP_TEST_PARAM16's hash): TP 2's are TP 1's at both
# steps, and the two steps' differ (each step draws new bits, so equal hashes are not a given).
if good sr_tp1 sr_tp2; then
    pat='at step [12] the 2-byte parameters ([0-9]* elements) hash to [0-9a-f]*'
    h1=$(grep -o "$pat" "$TMP/sr_tp1.log"); h2=$(grep -o "$pat" "$TMP/sr_tp2.log")
    distinct=$(awk '{print $NF}' <<<"$h1" | sort -u | wc -l)
    if [ "$(wc -l <<<"$h1")" = 2 ] && [ "$distinct" = 2 ] && [ "$h1" = "$h2" ]; then
        ok "$TAG --tp 2: the bf16 parameters (stochastically rounded, --lr 0) are TP 1's bitwise at steps 1-2 (rounding keyed by the global element)"
    else
        not_ok "$TAG --tp 2 vs TP 1 bf16 parameters at --lr 0: TP 1 '$(tr '\n' ' ' <<<"$h1")', TP 2 '$(tr '\n' ' ' <<<"$h2")'"
    fi
fi
# The global norm counts a replicated tensor once: step 1's (the same initial weights) at TP 2
# equals TP 1's within 1e-3 (bf16 sums in other orders), and not when TP rank 1 counts them too.
norm1() { "$PY" -c 'import json, sys; print([json.loads(l)["grad_norm"] for l in open(sys.argv[1]) if "grad_norm" in l][0])' "$TMP/$1/metrics.jsonl"; }
near() { awk -v a="$1" -v b="$2" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(d <= 1e-3) }'; }
if good tp1_cuda tp_cuda tp_nccl tp_nccl_dp2 tp_hsdp; then
    ref=$(norm1 tp1_cuda)
    for name in tp_cuda tp_nccl tp_nccl_dp2 tp_hsdp; do
        v=$(norm1 $name)
        near "$v" "$ref" && ok "$TAG $name: step 1's gradient norm $v is TP 1's $ref within 1e-3 (replicated tensors counted once)" ||
            not_ok "$TAG $name: step 1's gradient norm $v vs TP 1's $ref (beyond 1e-3)"
    done
    m="self-check: with TP rank 1 counting the replicated tensors' squares too, step 1's norm leaves TP 1's"
    case ${mut_ok[tp_norm_twice]} in
        0) not_ok "$TAG $m: the pattern of mutant tp_norm_twice no longer matches fsdp/backend_cuda.cuh" ;;
        2) build_failed "the mutants' train_gpt" $MUT_EXE ;;
        3) not_ok "$TAG $m: transform.py failed on the mutants' copy" ;;
        *) if good mutant_tp_norm_twice >/dev/null; then
               v=$(norm1 mutant_tp_norm_twice)
               near "$v" "$ref" && not_ok "$TAG $m: it stayed at $v (TP 1: $ref)" || ok "$TAG $m ($v against $ref)"
           else not_ok "$TAG $m: the mutant run failed: $(tail -n 2 "$TMP/mutant_tp_norm_twice.log" | tr '\n' ' ' | cut -c1-300)"; fi ;;
    esac
fi
m="self-check: with TP rank 1's replicated gradients left unsummed, FSDP_TEST_TP_REPLICAS ends the run"
case ${mut_ok[tp_unsummed]} in
    0) not_ok "$TAG $m: the pattern of mutant tp_unsummed no longer matches fsdp/backend_cuda.cuh" ;;
    2) build_failed "the mutants' train_gpt" $MUT_EXE ;;
    3) not_ok "$TAG $m: transform.py failed on the mutants' copy" ;;
    *) refused mutant_tp_unsummed 'FSDP_TEST_TP_REPLICAS: at step 2 .* tp rank 1' "$m" ;;
esac
self_check nccl_no_handoff cuda_np2 "with the comm stream not waiting for compute (async streams), nccl np=2 is no longer bitwise the staged run" --exact
echo "# cpu emulation: $(( $(date +%s) - start ))s ($(( built - start ))s building)"
exit 0
