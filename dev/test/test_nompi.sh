#!/usr/bin/env bash
# run_tests: cores 1.2, 78 s
# The build a GPU image without MPI or our Debian libraries gets (scripts/device_check.sh on
# the lent GPU machine): make NO_MPI=1 (the default where there is no mpicc) in a copy of the
# sources, with nvcc when it exists, against zstd/PCRE2/cJSON/xxHash/OpenBLAS unpacked from
# .deb files by scripts/device_deps.sh (its probe is told the system has none of them). It links
# no MPI library and the bundled libraries, runs as a single process, refuses an MPI launcher
# with a clear message, and its ranks started by scripts/launch_local.sh (torchrun-style
# variables, TCP transport) train exactly like the MPI build under mpirun; a stalled rank ends
# the whole launch. Bad arguments of launch_local.sh and a `use` without .deb files are refused.
set -u
source dev/test/lib.sh
src="$TEST_TMP/src"
mkdir -p "$src"
cp -r Makefile train_gpt.cu util comm kernels fsdp dataloader checkpoint model train "$src"/

# The libraries from .deb files, as on the GPU machine: fetched once into .deps/debs (apt),
# unpacked by `use` because the probe compiler below only succeeds once CPATH names them.
deps="none"
if ls .deps/debs/*.deb > /dev/null 2>&1 || bash scripts/device_deps.sh fetch > "$TEST_TMP/fetch.log" 2>&1; then
    printf '#!/bin/sh\ncase "${CPATH:-}" in *.deps/root*) exec cc "$@" ;; esac\nexit 1\n' > "$TEST_TMP/probe_cc"
    chmod +x "$TEST_TMP/probe_cc"
    if CC_PROBE=$TEST_TMP/probe_cc source scripts/device_deps.sh use > "$TEST_TMP/use.log" 2>&1; then
        deps="bundle"
        if echo '#include <cjson/cJSON.h>' | cc -E -x c - 2>/dev/null | grep -q '\.deps/root/usr/include/cjson/cJSON.h'; then
            ok "scripts/device_deps.sh use: a system without the libraries gets them from .deps/root ($(cat "$TEST_TMP/use.log" | cut -c1-120))"
        else
            not_ok "scripts/device_deps.sh use: cJSON.h does not come from .deps/root"
        fi
    else
        not_ok "scripts/device_deps.sh use: $(tr '\n' ' ' < "$TEST_TMP/use.log" | cut -c1-300)"
    fi
else
    echo "# scripts/device_deps.sh fetch failed (no apt?): building against the system's libraries: $(tail -n 1 "$TEST_TMP/fetch.log")"
fi
if command -v nvcc > /dev/null; then kind="CUDA build"; else kind="host-only build"; fi
# One CUDA target (the lent GPUs' sm_90): what differs here is MPI, not the device code, which
# the main build compiles for every target with warnings as errors.
if ! make -C "$src" -j2 NO_MPI=1 GPU_ARCH=90 train_gpt > "$TEST_TMP/build.log" 2>&1; then
    not_ok "NO_MPI=1 $kind: $(grep -m3 -E 'error' "$TEST_TMP/build.log" | tr '\n' ' ' | cut -c1-400)"
    exit 0
fi
if grep -q 'mpicc\|mpicxx' "$TEST_TMP/build.log"; then
    not_ok "NO_MPI=1 $kind still calls an MPI compiler wrapper: $(grep -m1 'mpic' "$TEST_TMP/build.log" | cut -c1-200)"
elif ldd "$src/train_gpt" | grep -qi 'libmpi'; then
    not_ok "NO_MPI=1 $kind links MPI: $(ldd "$src/train_gpt" | grep -i mpi | tr '\n' ' ')"
elif [ $deps = bundle ] && ! ldd "$src/train_gpt" | grep -q 'libcjson.so.1 => .*\.deps/root/'; then
    not_ok "NO_MPI=1 $kind does not load the bundled libraries: $(ldd "$src/train_gpt" | grep -E 'cjson|openblas' | tr '\n' ' ')"
else
    ok "NO_MPI=1 $kind: compiled without MPI's headers or wrappers, links no MPI library ($([ $deps = bundle ] && echo 'libraries from .deps/root' || echo "system libraries"))"
fi

args=(--device cpu --layers 2 --channels 64 --heads 2 --max-seq 64 -b 2 -t 64 -x 8 -v 0 --threads 1 -i "$TRAIN_SHARD")
if timeout 120 "$src/train_gpt" "${args[@]}" -x 2 > "$TEST_TMP/single.log" 2>&1 \
    && grep -q "1 rank(s) via single (tcp)" "$TEST_TMP/single.log"; then
    ok "NO_MPI build, no launcher: one process, a TCP world of one"
else
    not_ok "NO_MPI build as a single process: $(tail -n 3 "$TEST_TMP/single.log" | tr '\n' ' ' | cut -c1-300)"
fi

timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 "$src/train_gpt" "${args[@]}" > "$TEST_TMP/mpirun.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "built without MPI (NO_MPI=1) but openmpi started it" "$TEST_TMP/mpirun.log"; then
    ok "NO_MPI build under mpirun: refused, naming scripts/launch_local.sh (status $rc)"
else
    not_ok "NO_MPI build under mpirun -np 2 (status $rc): $(grep -m2 -i error "$TEST_TMP/mpirun.log" | tr '\n' ' ' | cut -c1-300)"
fi

timeout 120 scripts/launch_local.sh -n 2 "$src/train_gpt" "${args[@]}" -o "$TEST_TMP/local" > "$TEST_TMP/local.log" 2>&1
rc=$?
run_np 2 ./train_gpt "${args[@]}" -o "$TEST_TMP/mpi" > "$TEST_TMP/mpi.log" 2>&1
if [ $rc -eq 0 ] && grep -q "2 rank(s) via torchrun (tcp)" "$TEST_TMP/local.log"; then
    "$PYTHON" dev/test/compare_losses.py "NO_MPI build, 2 ranks by scripts/launch_local.sh == MPI build under mpirun -np 2" \
        "$TEST_TMP/mpi/metrics.jsonl" "$TEST_TMP/local/metrics.jsonl" --exact
else
    not_ok "scripts/launch_local.sh -n 2 (status $rc): $(tail -n 3 "$TEST_TMP/local.log" | tr '\n' ' ' | cut -c1-300)"
fi

# Rank 1 stalls at step 2: rank 0's collective times out (--comm-timeout 4), it exits non-zero,
# and the launcher ends rank 1: the launch fails within seconds instead of hanging.
t0=$(date +%s)
FSDP_TEST_STALL=1:2 timeout 60 scripts/launch_local.sh -n 2 "$src/train_gpt" "${args[@]}" --comm-timeout 4 \
    > "$TEST_TMP/stall.log" 2>&1
rc=$?
secs=$(( $(date +%s) - t0 ))
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "launch_local: a rank" "$TEST_TMP/stall.log" && [ $secs -lt 30 ]; then
    ok "scripts/launch_local.sh: a stalled rank ends the launch (status $rc after ${secs} s)"
else
    not_ok "stalled rank under scripts/launch_local.sh: status $rc after ${secs} s: $(tail -n 3 "$TEST_TMP/stall.log" | tr '\n' ' ' | cut -c1-300)"
fi

# Bad input: launch_local.sh without a valid rank count or command; device_deps.sh `use` on a
# system without the libraries and without carried .deb files.
out=$(scripts/launch_local.sh -n 0 true 2>&1); rc=$?
out2=$(scripts/launch_local.sh -n 2 ./no_such_program 2>&1); rc2=$?
if [ $rc -eq 2 ] && grep -q "expected a positive rank count, got '0'" <<<"$out" && [ $rc2 -eq 127 ] && grep -q "no_such_program: not found" <<<"$out2"; then
    ok "scripts/launch_local.sh refuses -n 0 (status 2) and a missing program (status 127), naming them"
else
    not_ok "scripts/launch_local.sh bad arguments: status $rc '$out', status $rc2 '$out2'"
fi
mkdir -p "$TEST_TMP/nodeps/scripts" && cp scripts/device_deps.sh "$TEST_TMP/nodeps/scripts/"
out=$(cd "$TEST_TMP/nodeps" && CC_PROBE=false bash -c 'source scripts/device_deps.sh use' 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "holds no packages (run 'bash scripts/device_deps.sh fetch'" <<<"$out"; then
    ok "scripts/device_deps.sh use without libraries or .deb files: status $rc, says to run fetch"
else
    not_ok "scripts/device_deps.sh use without .deb files: status $rc: $out"
fi
