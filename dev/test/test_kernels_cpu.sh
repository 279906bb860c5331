#!/usr/bin/env bash
# run_tests: cores 1.2, 4 s
# CPU kernels against naive double references and finite differences
# (dev/test/test_kernels_cpu.c). Two threads: the determinism checks need more than one.
set -u
cd "$(dirname "$0")/../.."
if [ ! -x build/test_kernels_cpu ]; then
    echo "not ok - test_kernels_cpu: build/test_kernels_cpu is missing (run make)"
    exit 1
fi
OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 build/test_kernels_cpu
exit $?
