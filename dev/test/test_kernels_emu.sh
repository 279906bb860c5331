#!/usr/bin/env bash
# run_tests: cores 1.3, 220 s
# The GPU test programs (dev/test/test_kernels_cuda.cu, dev/test/test_attention_cuda.cu),
# unchanged, on the CPU under the emulator of dev/cuda_emu (see dev/cuda_emu/emu.h): a logic
# check of the kernels (indexing, fragment layouts, barriers, masking, cuBLASLt planning),
# not a GPU result. Their "ok - X" lines are reported as "ok - [cpu emulation] X".
# Not run here: test_attention_large (GPT-2 size flash vs cublas and timings; hours on a CPU).
# dev/bench/bench_vector_cuda.cu runs at its --smoke shape (its times mean nothing here): that
# it prints the copy bandwidth and every kernel's row, so that the GPU's bench cannot rot.
# The matmul checks run a second time with EMU_CUBLASLT_NO_GELU=1 (a cuBLASLt whose heuristic
# has nothing for the GELU epilogues): they must pass through the GELU kernels instead.
# The attention test runs cudnn through the fake cuDNN (dev/cuda_emu/cudnn.cpp, CUDNN_ENV of
# dev/cuda_emu/build.sh); that it loaded and passed its checks is checked here (a skip fails).
# Then self-checks: with the __syncthreads of sum_partials_kernel dropped (the emulator's
# EMU_SKIP_BARRIER: no second build), the kernels test must fail; dev/cuda_emu/selftest_streams.cu checks the emulator's asynchronous streams
# (races between streams and with the host show for some EMU_SEED, never with the right
# events/synchronisation; see its top comment). The tests run with the default EMU_SEED
# (set EMU_SEED, or EMU_STREAMS=sync, in the environment to replay or compare). Builds with
# g++ into build/emu/ (no Makefile rule; outputs are reused when their inputs and commands
# are unchanged). About 90 s alone on 2 cores with the runtime cached (both types: bf16 and fp16).
set -u
cd "$(dirname "$0")/../.."
if [ -n "${TEST_TMP:-}" ]; then TMP=$TEST_TMP; else TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT; fi
source dev/cuda_emu/build.sh
start=$(date +%s)

for tool in g++ gcc python3 mpicxx; do
    if ! command -v $tool >/dev/null; then
        echo "ok - $TAG CUDA tests # skip $tool not found"
        exit 0
    fi
done
MPI_INC=$(mpicxx --showme:compile 2>/dev/null || true)
CXX_TEST=(g++ -std=gnu++17 -O2 -w -I$E/include $MPI_INC -DOMPI_SKIP_MPICXX)
LIBS=(-L$BLAS_DIR -Wl,-rpath,$BLAS_DIR -lopenblas -fopenmp -lm)
KERNELS=(kernels/*.cuh)
SKIP=(--skip-call 'test_attention_large=too slow under CPU emulation (GPT-2 size, and timings)')


# ----------------------------------------------------------------------------
# Sources: the transformed copies

if ! python3 $E/transform.py $B/src "${KERNELS[@]}" dev/test/test_kernels_cuda.cu dev/test/test_attention_cuda.cu \
        dev/bench/bench_vector_cuda.cu $E/selftest_streams.cu $E/selftest_fp16.cu "${SKIP[@]}" 2>"$TMP/transform.err"; then
    echo "not ok - $TAG transform.py failed: $(tr '\n' ' ' <"$TMP/transform.err" | cut -c1-400)"
    exit 1
fi

# ----------------------------------------------------------------------------
# Build: runtime objects, then the three programs (the attention test runs as soon as it is
# built, in parallel with the rest)

{ build_runtime && build_cudnn; } &
p1=$!
rc=0
for twin in cpu_kernels cpu_kernels_llama kernels_sim; do  # the CPU twins (the bench's byte model)
    build $B/$twin.o kernels/$twin.c kernels/$twin.h kernels/rope.h -- \
        gcc -std=gnu11 -O2 -fopenmp -I. -I$BLAS_INC -c kernels/$twin.c -o $B/$twin.o ||
        { build_failed $twin.o $B/$twin.o; rc=1; }
done
wait $p1 || rc=1
[ $rc -eq 0 ] || exit 1
OBJS=($B/emu.o $B/cublaslt.o $B/cpu_kernels.o $B/cpu_kernels_llama.o)
build_cudnn >/dev/null  # (built above: sets CUDNN_FAKE_WHY in this shell)

# build_test NAME SRCDIR OUT
build_test() {
    build "$3" "$2"/kernels/*.cuh "$2/dev/test/$1.cu" "${HDRS[@]}" kernels/*.h "${OBJS[@]}" -- \
        "${CXX_TEST[@]}" -I"$2" -I. -x c++ "$2/dev/test/$1.cu" -x none "${OBJS[@]}" "${CUDNN_OBJS[@]}" -o "$3" "${LIBS[@]}"
}
# run_test NAME: runs build/emu/NAME into $TMP/NAME.{out,err,rc}
# (run_test NAME OUT ARGS...: into $TMP/OUT.{out,err,rc} instead, with these arguments)
run_test() {  # (in a subshell: no "Aborted" notice from bash when it dies)
    local name=$1 out=${2:-$1}
    shift; [ $# -gt 0 ] && shift
    (timeout 600 env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "${CUDNN_ENV[@]}" $B/$name "$@" >"$TMP/$out.out" \
        2>"$TMP/$out.err"; exit $?) 2>/dev/null
    echo $? >"$TMP/$out.rc"
}

( if build_test test_attention_cuda $B/src $B/test_attention_cuda; then
      run_test test_attention_cuda
      # A cuBLASLt without GELU epilogue algorithms: the matmuls must fall back to the kernels.
      EMU_CUBLASLT_NO_GELU=1 run_test test_attention_cuda no_gelu_epilogue matmul
  else
      echo build >"$TMP/test_attention_cuda.rc"
  fi ) &
attn=$!
build_test test_kernels_cuda $B/src $B/test_kernels_cuda
kbuild=$?
[ $kbuild -eq 0 ] && run_test test_kernels_cuda
# The streams self-test (warnings are errors: it is the emulator's own code).
if build $B/selftest_streams $B/src/$E/selftest_streams.cu "${HDRS[@]}" $B/emu.o $B/cublaslt.o -- \
        "${CXX_EMU[@]}" -x c++ $B/src/$E/selftest_streams.cu -x none $B/emu.o $B/cublaslt.o -o $B/selftest_streams -lpthread; then
    TMPDIR=$TMP run_test selftest_streams
else
    echo build >"$TMP/selftest_streams.rc"
fi
# The vector-kernel bench at its smoke shape (kernels_sim.o: the planner's bytes).
if build $B/bench_vector_cuda $B/src/kernels/*.cuh $B/src/dev/bench/bench_vector_cuda.cu "${HDRS[@]}" kernels/*.h $B/emu.o \
        $B/cublaslt.o $B/kernels_sim.o -- "${CXX_TEST[@]}" -I$B/src -I. -x c++ $B/src/dev/bench/bench_vector_cuda.cu -x none \
        $B/emu.o $B/cublaslt.o $B/kernels_sim.o -o $B/bench_vector_cuda "${LIBS[@]}"; then
    run_test bench_vector_cuda bench_vector_cuda --smoke
else
    echo build >"$TMP/bench_vector_cuda.rc"
fi
# The fp16 self-test (dev/cuda_emu/selftest_fp16.cu: cuda_fp16.h, mma .f16, cuBLASLt 16F).
if build $B/selftest_fp16 $B/src/$E/selftest_fp16.cu "${HDRS[@]}" $B/emu.o $B/cublaslt.o -- \
        "${CXX_EMU[@]}" -x c++ $B/src/$E/selftest_fp16.cu -x none $B/emu.o $B/cublaslt.o -o $B/selftest_fp16 -lpthread; then
    run_test selftest_fp16
else
    echo build >"$TMP/selftest_fp16.rc"
fi

# Self-check: the kernels test with sum_partials_kernel's barrier dropped by the emulator
# (EMU_SKIP_BARRIER, as if the source had none); the first failure ends the run.
first=""
if [ $kbuild -eq 0 ]; then
    first=$(timeout 120 env EMU_SKIP_BARRIER=sum_partials_kernel OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
            $B/test_kernels_cuda 2>&1 | grep -m1 -E '^not ok|EMU:' | cut -c1-200)
fi
wait $attn

# ----------------------------------------------------------------------------
# Report

# report NAME: the program's lines, relabelled; its exit status and emulator aborts.
report() {
    local name=$1 rc nok=0 nfail=0 line
    rc=$(cat "$TMP/$name.rc" 2>/dev/null || echo missing)
    if [ "$rc" = build ] || [ "$rc" = missing ]; then
        build_failed $name $B/$name
        return
    fi
    while IFS= read -r line; do
        case "$line" in
            "ok - "*"# skip no GPU"* | "ok - "*"kernels need sm_80"*)
                echo "not ok - $TAG $name: the program saw no usable device (${line#ok - })"; nfail=$((nfail + 1)) ;;
            "ok - "*) echo "ok - $TAG ${line#ok - }"; nok=$((nok + 1)) ;;
            "not ok - "*) echo "not ok - $TAG ${line#not ok - }"; nfail=$((nfail + 1)) ;;
            *) echo "$line" ;;
        esac
    done <"$TMP/$name.out"
    grep -E '^# cuda_emu' "$TMP/$name.err"
    local emu
    emu=$(grep -E '^EMU: ' "$TMP/$name.err" | grep -v '^EMU: note' | head -3 | tr '\n' ' ' | cut -c1-400)
    if [ "$rc" -ne 0 ] && { [ "$nfail" -eq 0 ] || [ "$rc" -ge 124 ] || [ -n "$emu" ]; }; then
        [ -z "$emu" ] && emu=$(grep -v '^# cuda_emu' "$TMP/$name.err" | tail -n 2 | tr '\n' ' ' | cut -c1-400)
        echo "not ok - $TAG $name exited with status $rc${emu:+: $emu}"
    elif [ "$rc" -eq 0 ] && [ "$nok" -eq 0 ]; then
        echo "not ok - $TAG $name reported no check"
    fi
}
report test_kernels_cuda
report test_attention_cuda
# The cudnn path through the fake cuDNN: it must have loaded and run (a skip would pass).
m="cudnn attention through the fake cuDNN (dev/cuda_emu/cudnn.cpp) ran"
if [ -n "$CUDNN_FAKE_WHY" ]; then
    echo "ok - $TAG $m # skip $CUDNN_FAKE_WHY"
else
    ncudnn=$(grep -c '^ok - attention cudnn' "$TMP/test_attention_cuda.out" 2>/dev/null)
    if grep -q '^# cudnn: .*libcudnn_graph.so.9' "$TMP/test_attention_cuda.out" 2>/dev/null && [ "${ncudnn:-0}" -ge 25 ]; then
        echo "ok - $TAG $m ($ncudnn checks)"
    else
        echo "not ok - $TAG $m: $ncudnn checks passed, expected 25: $(grep -m2 'cudnn' "$TMP/test_attention_cuda.out" | tr '\n' ' ' | cut -c1-300)"
    fi
fi
# The fallback run: every matmul check passes, with the GELU kernels, and each refused
# epilogue (the forward's, the backward's) is said once.
m="cuBLASLt with no GELU epilogue algorithm (EMU_CUBLASLT_NO_GELU=1): the matmuls fall back to the GELU kernels"
nok=$(grep -c '^ok - ' "$TMP/no_gelu_epilogue.out" 2>/dev/null)
nbad=$(grep -c '^not ok - ' "$TMP/no_gelu_epilogue.out" 2>/dev/null)
nkernel=$(grep -c '^ok - matmul .*GELU.*kernel (unfused)' "$TMP/no_gelu_epilogue.out" 2>/dev/null)
said=$(grep -c 'cuBLASLt has no algorithm for .*epilogue \(gelu_aux_bias\|dgelu\)' "$TMP/no_gelu_epilogue.err" 2>/dev/null)
if [ "$(cat "$TMP/no_gelu_epilogue.rc" 2>/dev/null)" = 0 ] && [ "${nbad:-1}" = 0 ] && [ "${nkernel:-0}" -ge 6 ] &&
   [ "${said:-0}" = 2 ] && ! grep -q '^ok - matmul .*GELU epilogue' "$TMP/no_gelu_epilogue.out"; then
    echo "ok - $TAG $m ($nok checks, $nkernel of them GELU via the kernels; 2 refusals said)"
else
    echo "not ok - $TAG $m: status $(cat "$TMP/no_gelu_epilogue.rc" 2>/dev/null), $nbad failed, $nkernel GELU checks via kernels, $said refusals said: $(grep -v '^#' "$TMP/no_gelu_epilogue.err" 2>/dev/null | head -c 300)"
fi
report selftest_streams
report selftest_fp16
# The bench: its bandwidth line and the 8 kernels' rows, each with its bytes and ratio.
m="dev/bench/bench_vector_cuda.cu --smoke: the copy bandwidth and every vector kernel's row"
rc=$(cat "$TMP/bench_vector_cuda.rc" 2>/dev/null || echo missing)
rows=$(grep -cE '^vector kernel=[a-z_]+ shape=smoke mb=[0-9.]*[1-9][0-9.]* ms=[0-9.]+ copy_ms=[0-9.]+ ratio=[0-9.]+ target=(met|NOT_met)$' \
       "$TMP/bench_vector_cuda.out" 2>/dev/null)
if [ "$rc" = build ]; then
    build_failed bench_vector_cuda $B/bench_vector_cuda
elif [ "$rc" = 0 ] && [ "$rows" = 8 ] && grep -qE '^vector copy_gbs=[0-9.]+ how="cudaMemcpy device to device' "$TMP/bench_vector_cuda.out" &&
     ! grep -q '^EMU: ' "$TMP/bench_vector_cuda.err"; then
    echo "ok - $TAG $m ($rows rows: $(sed -n 's/^vector kernel=\([a-z_]*\) .*/\1/p' "$TMP/bench_vector_cuda.out" | tr '\n' ' '))"
else
    echo "not ok - $TAG $m: status $rc, $rows rows: $(tail -n 3 "$TMP/bench_vector_cuda.out" "$TMP/bench_vector_cuda.err" 2>/dev/null | tr '\n' '|' | cut -c1-300)"
fi

m="emulator self-check: sum_partials_kernel without its __syncthreads (EMU_SKIP_BARRIER) fails the kernels test"
if [ $kbuild -ne 0 ]; then echo "not ok - $TAG $m: test_kernels_cuda did not build"
elif [ -n "$first" ]; then echo "ok - $TAG $m ($first)"
else echo "not ok - $TAG $m: it passed (the emulator missed a missing barrier, or the kernel has none left)"; fi
echo "# cpu emulation: $(( $(date +%s) - start ))s"
exit 0
