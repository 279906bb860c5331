#!/usr/bin/env bash
# run_tests: cores 1.3, 66 s
# MPICH: train_gpt built against MPICH (in a copy of the sources; with nvcc when it exists,
# as a GPU node builds it: the MPI wrapper is nvcc's host compiler) and launched with MPICH's
# mpiexec (hydra) trains exactly like the Open MPI build under mpirun.
set -u
source dev/test/lib.sh
if ! command -v mpicc.mpich > /dev/null || ! command -v mpiexec.mpich > /dev/null; then
    echo "ok - MPICH build and launch # skip MPICH is not installed (scripts/setup.sh installs it)"
    exit 0
fi
src="$TEST_TMP/src"
mkdir -p "$src"
cp -r Makefile train_gpt.cu util comm kernels fsdp dataloader checkpoint model train "$src"/
# One CUDA target (sm_90): what differs here is the MPI, not the device code, which the main
# build compiles for every target with warnings as errors.
if command -v nvcc > /dev/null; then kind="CUDA build (nvcc -ccbin mpicxx.mpich)"; flavour=(GPU_ARCH=90)
else kind="host-only build"; flavour=(NO_CUDA=1); fi
if ! make -C "$src" -j2 "${flavour[@]}" CC=mpicc.mpich CXX=mpicxx.mpich train_gpt > "$TEST_TMP/build.log" 2>&1; then
    not_ok "MPICH $kind: $(grep -m3 -E 'error' "$TEST_TMP/build.log" | tr '\n' ' ')"
    exit 0
fi
if ldd "$src/train_gpt" | grep -q libmpich && ! ldd "$src/train_gpt" | grep -q 'libmpi\.so'; then
    ok "$kind against MPICH links libmpich (and not Open MPI)"
else not_ok "the MPICH $kind does not link libmpich alone: $(ldd "$src/train_gpt" | grep -i mpi | tr '\n' ' ')"; fi
args=(--device cpu --layers 2 --channels 64 --heads 2 --max-seq 64 -b 2 -t 64 -x 8 -v 0 --threads 1 -i "$TRAIN_SHARD")
timeout 120 mpiexec.mpich -np 2 "$src/train_gpt" "${args[@]}" -o "$TEST_TMP/mpich" > "$TEST_TMP/mpich.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "2 rank(s) via mpich (mpi)" "$TEST_TMP/mpich.log"; then ok "mpiexec (MPICH hydra) -np 2: the MPICH launcher is detected, one MPI world"
else not_ok "mpiexec.mpich -np 2 (rc $rc): $(tail -n 3 "$TEST_TMP/mpich.log" | tr '\n' ' ')"; fi
run_np 2 ./train_gpt "${args[@]}" -o "$TEST_TMP/ompi" > "$TEST_TMP/ompi.log" 2>&1
"$PYTHON" dev/test/compare_losses.py "MPICH np=2 losses equal Open MPI np=2" \
    "$TEST_TMP/ompi/metrics.jsonl" "$TEST_TMP/mpich/metrics.jsonl" --exact
