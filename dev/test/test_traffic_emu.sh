#!/usr/bin/env bash
# run_tests: cores 1.4, 162 s
# The planner's cost model against what the kernels do, under the CPU emulator (#14): the
# emulated train_gpt --device cuda is built with the traffic counters (dev/cuda_emu/emu.h,
# "Traffic counts": every load and store of the kernels, through GCC's kernel-address
# instrumentation and dev/cuda_emu/traffic_hooks.cpp; cp.async, mma.sync, cuBLASLt operands,
# memsets counted by the emulator) and the audit (dev/cuda_emu/traffic_audit.h), which runs
# every kernel-table and backend compute call on the sim device too. For a 2-layer model
# (128 channels, 2 heads, T = 128; the three runs are at the end) it prints, per operation
# and shape, the counted bytes (distinct 32-byte sectors per launch: DRAM traffic when what
# a launch touches twice stays cached) beside the planner's bytes, and the counted FLOPs
# (tensor cores and cuBLASLt) beside the planner's, and checks:
#   - the emulator's counters on hand-made cases (dev/cuda_emu/selftest_traffic.cu);
#   - every operation's counted bytes within 10% of the planner's (or within 64 bytes per
#     launch: the sectors a few-byte operand rounds up to), and its counted FLOPs
#     too where it does matrix work (vector kernels' scalar FLOPs are not counted);
#   - the optimizer path's bytes per shard element per step, counted, within 10% of the plan.
# A kernel that moves more than its model says is named in its failure line: either the
# model or the kernel is wrong. Also printed: "accessed" bytes (every access of every
# thread), whose ratio to the counted bytes says how often a kernel re-reads what it touched.
# Builds with g++ into build/emu/traffic (EMU_BUILD=DIR elsewhere), linked with the library
# objects `make` built; about 1 min on 2 cores (1 min more when the build is stale).
set -u
cd "$(dirname "$0")/../.."
if [ -n "${TEST_TMP:-}" ]; then TMP=$TEST_TMP; else TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT; fi
source dev/cuda_emu/build.sh
TAG='[cpu emulation, traffic]'
for tool in g++ python3 mpicxx mpirun; do
    if ! command -v $tool >/dev/null; then
        echo "ok - $TAG planner vs counted traffic # skip $tool not found"
        exit 0
    fi
done
LIB_OBJS=()
for src in util/*.c comm/*.c kernels/*.c fsdp/*.c dataloader/*.c checkpoint/*.c model/*.c train/*.c; do LIB_OBJS+=("build/${src%.c}.o"); done
for f in "${LIB_OBJS[@]}"; do
    if [ ! -f "$f" ]; then echo "not ok - $TAG $f is missing (run make)"; exit 1; fi
done

# ---- build: the runtime as the other emulator scripts build it, the hooks without and the
# counted sources with the instrumentation
T=$B/traffic
mkdir -p $T
# -O0: optimising, GCC drops a store's check after a load of the same address (traffic_hooks.cpp).
COUNT=(-fsanitize=kernel-address --param asan-instrumentation-with-call-threshold=0 --param asan-stack=0
       --param asan-globals=0 -O0)
SRCS=(train_gpt.cu kernels/*.cuh fsdp/*.cuh train/*.cuh $E/selftest_traffic.cu)
if ! python3 $E/transform.py $T/src "${SRCS[@]}" 2>"$TMP/transform.err"; then
    echo "not ok - $TAG transform.py failed: $(tr '\n' ' ' <"$TMP/transform.err" | cut -c1-400)"
    exit 1
fi
build_runtime || exit 1
build_cudnn || exit 1  # train_gpt.cu's device calls the cudnn object (without the headers: built with FSDP_NO_CUDNN, which refuses every graph, saying why)
# auto must not pick up a cuDNN installed here: the audit's attention is flash's.
export FSDP_CUDNN_LIB=$PWD/$B/no_cudnn/libcudnn_graph.so.9
build $T/traffic_hooks.o $E/traffic_hooks.cpp "${HDRS[@]}" -- "${CXX_EMU[@]}" -c $E/traffic_hooks.cpp -o $T/traffic_hooks.o ||
    { build_failed traffic_hooks.cpp $T/traffic_hooks.o; exit 1; }
OBJS=("${RUNTIME_OBJS[@]}" $T/traffic_hooks.o)
build $T/selftest_traffic $T/src/$E/selftest_traffic.cu "${HDRS[@]}" "${OBJS[@]}" -- \
    "${CXX_EMU[@]}" "${COUNT[@]}" -x c++ $T/src/$E/selftest_traffic.cu -x none "${OBJS[@]}" -o $T/selftest_traffic \
    -lpthread &
sbuild=$!
EXE=$T/train_gpt
build $EXE $T/src/train_gpt.cu $T/src/kernels/*.cuh $T/src/fsdp/*.cuh $T/src/train/*.cuh $E/traffic_audit.h "${HDRS[@]}" \
        $(ls util/*.h comm/*.h kernels/*.h fsdp/*.h dataloader/*.h checkpoint/*.h model/*.h train/*.h) "${OBJS[@]}" "${LIB_OBJS[@]}" \
        $B/cuda_attention_cudnn.o -- \
    g++ -std=gnu++17 -w -D__CUDACC__ -include $E/traffic_audit.h "${COUNT[@]}" -I$E/include $(mpicxx --showme:compile) \
        -DOMPI_SKIP_MPICXX -I$T/src -I. -I$BLAS_INC -fopenmp -x c++ $T/src/train_gpt.cu -x none "${OBJS[@]}" \
        "${LIB_OBJS[@]}" "${CUDNN_OBJS[@]}" -o $EXE $(mpicxx --showme:link) -L$BLAS_DIR -Wl,-rpath,$BLAS_DIR -lopenblas \
        -lzstd -lpcre2-8 -lcjson -lxxhash -lpthread -lm
ebuild=$?
wait $sbuild || build_failed selftest_traffic.cu $T/selftest_traffic
[ $ebuild -eq 0 ] || { build_failed "train_gpt.cu (traffic audit)" $EXE; exit 1; }

# ---- the counters on hand-made cases
if [ -x $T/selftest_traffic ]; then
    timeout -k 5 60 $T/selftest_traffic >"$TMP/selftest.log" 2>&1
    rc=$?
    grep -E '^(not )?ok - ' "$TMP/selftest.log" | sed "s/^\(\(not \)\{0,1\}ok - \)traffic: /\1$TAG counters: /"
    [ $rc -eq 0 ] || echo "not ok - $TAG selftest_traffic exited with status $rc: $(grep -m2 -v '^ok' "$TMP/selftest.log" | tr '\n' ' ' | cut -c1-300)"
fi

# ---- the data: 4096 distinct token ids (i x 7919 mod 50257), as the planner prices the
# embedding: every token's row read (and its gradient row written) once; real text repeats
# tokens, whose rows a launch then reads once
python3 - "$TMP/distinct.bin" <<'PY'
import struct, sys
n = 4096
header = [20240520, 1, n] + [0] * 253
with open(sys.argv[1], 'wb') as f:
    f.write(struct.pack('<256i', *header))
    f.write(struct.pack('<%dH' % n, *[(i * 7919) % 50257 for i in range(n)]))
PY

# ---- a 2-layer model, every call on both devices (EMU_STREAMS=sync: each call's launches
# run inside it, so that the counters between two reads are that call's):
#   w1: one rank, one step of 2 sequences of 128 tokens (every gradient written fresh);
#   w2_accum: two ranks (--comm nccl, an emulated GPU each), two steps of two micro-steps of
#     one sequence each (each micro-step's reduce-scattered bf16 shard folded in: first and
#     added; AdamW on half the parameters);
#   w2_nosync: the same with --no-grad-sync-until-last (the second micro-step's backward
#     accumulates into the gradient slots: the beta = 1 GEMMs, the accumulating LayerNorm,
#     bias and embedding backward);
#   llama: one rank, one step of the same shape as a Llama 3 (--arch llama3: RMSNorm, RoPE,
#     grouped-query attention with one kv head for the two query heads, SwiGLU of width 320,
#     an untied head), the planner's prices of the Llama kernels against theirs
audit() {
    local name=$1 np=$2; shift 2
    timeout -k 5 300 env EMU_STREAMS=sync EMU_DEVICE_COUNT=$np OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
        mpirun --allow-run-as-root --oversubscribe --bind-to none -np $np $EXE --device cuda \
        --layers 2 --channels 128 --heads 2 --max-seq 128 -t 128 -v 0 -s 0 --seed 7 \
        -i "$TMP/distinct.bin" -j "" --threads 1 -o "$TMP/$name" "$@" >"$TMP/$name.log" 2>&1
    local rc=$?
    if [ $rc -ne 0 ] || grep -q 'EMU:' "$TMP/$name.log"; then
        echo "not ok - $TAG $name: the audited run failed (status $rc): $(grep -m3 -E 'EMU:|error|Error' "$TMP/$name.log" | tr '\n' ' ' | cut -c1-400)"
        return
    fi
    python3 - "$TMP/$name.log" "$TAG $name" <<'PY'
import re, sys
log, tag = sys.argv[1], sys.argv[2]
rows, opt = [], None
for line in open(log):
    m = re.match(r'traffic: (\S+(?: zero)?) \[(.*)\] calls (\d+) launches (\d+) counted_bytes (\S+) planned_bytes (\S+) '
                 r'counted_flops (\S+) planned_flops (\S+) accessed_bytes (\S+)', line)
    if m:
        rows.append((m.group(1), m.group(2), int(m.group(3)), int(m.group(4))) + tuple(float(m.group(i)) for i in range(5, 10)))
    m = re.match(r'traffic: optimizer path .*counted (\S+) B, planned (\S+) B', line)
    if m:
        opt = (float(m.group(1)), float(m.group(2)))
if not rows or opt is None:
    print('not ok - %s: the audited run printed no traffic table' % tag)
    sys.exit(0)

# Matrix work: the operations whose FLOPs the planner prices as tensor-core work.
MATRIX = ('matmul_forward', 'matmul_backward', 'attention_forward', 'attention_backward')
def ratio(a, b):
    return a / b if b else (1.0 if a == 0 else float('inf'))
print('# %s (rank 0)' % tag)
print('# %-27s %-38s %5s %4s %11s %11s %6s %11s %11s %6s %8s' % ('operation', 'shape', 'calls', 'lnch', 'counted B',
      'planned B', 'ratio', 'counted F', 'planned F', 'ratio', 'reread'))
for op, shape, calls, launches, counted, planned, cf, pf, accessed in rows:
    print('# %-27s %-38s %5d %4d %11.0f %11.0f %6.3f %11.0f %11.0f %6s %8.2f' % (
        op, shape[:38], calls, launches, counted, planned, ratio(counted, planned), cf, pf,
        '%.3f' % ratio(cf, pf) if op in MATRIX else '-', accessed / counted if counted else 0))
for op, shape, calls, launches, counted, planned, cf, pf, accessed in rows:
    r = ratio(counted, planned)
    what = '%s [%s]: counted %.0f bytes, planned %.0f (%.3fx, %d launches per %d calls)' % (op, shape, counted, planned, r,
                                                                                           launches, calls)
    # DRAM moves whole 32-byte sectors: an operand of a few bytes (a double, a 56-byte
    # struct) costs up to a sector more at each end; the model counts its bytes.
    if abs(r - 1) <= 0.10 or abs(counted - planned) <= 64 * launches:
        print('ok - %s: bytes within 10%% of the planner: %s' % (tag, what))
    else:
        print('not ok - %s: %s %s than the planner says: %s' % (tag, op, 'moves more' if r > 1 else 'moves less', what))
    if op in MATRIX:
        rf = ratio(cf, pf)
        what = '%s [%s]: counted %.0f FLOPs, planned %.0f (%.3fx)' % (op, shape, cf, pf, rf)
        print('%s - %s: FLOPs within 10%% of the planner: %s' % ('ok' if abs(rf - 1) <= 0.10 else 'not ok', tag, what))
r = ratio(opt[0], opt[1])
print('%s - %s: optimizer path per step: counted %.1f B per shard element, planned %.1f (%.3fx)' % (
    'ok' if abs(r - 1) <= 0.10 else 'not ok', tag, opt[0], opt[1], r))
PY
}
audit w1 1 --comm mpi -b 2 -x 1
audit w2_accum 2 --comm nccl -b 1 -d 512 -x 2
audit w2_nosync 2 --comm nccl -b 1 -d 512 -x 1 --no-grad-sync-until-last
audit llama 1 --comm mpi -b 2 -x 1 --arch llama3 --kv-heads 1 --ffn-dim 320
