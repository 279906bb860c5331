#!/usr/bin/env bash
# The host-only build (machines without nvcc compile train_gpt.cu as C++): checked here even
# when nvcc builds the real binary, so that path cannot rot unnoticed.
set -u
flags=$(make -s -f Makefile print-host-cxxflags NO_CUDA=1 2>/dev/null)
for src in train_gpt.cu dev/test/test_gpt2.cu; do
    if out=$(mpicxx $flags -Wno-unused-function -x c++ -fsyntax-only "$src" 2>&1); then
        echo "ok - host-only C++ build of $src"
    else
        echo "not ok - host-only C++ build of $src: $(head -c 400 <<<"$out" | tr '\n' ' ')"
    fi
done

# Another GPU_ARCH rebuilds what nvcc compiled (the build/gpu_arch_* stamp), and going back
# rebuilds again; `make -n` only plans, so the real build is left as it is.
if command -v nvcc > /dev/null && [ -f build/train_gpt.o ]; then
    plan() { make -n "$@" build/train_gpt.o 2>&1 | grep -c -- '-gencode' ; }
    now=$(plan); other=$(plan GPU_ARCH=90)
    if [ "$now" = 0 ] && [ "$other" -ge 1 ] && make -n GPU_ARCH=90 build/train_gpt.o | grep -q 'code=sm_90' \
        && ! make -n GPU_ARCH=90 build/train_gpt.o | grep -q 'code=sm_80'; then
        echo "ok - make GPU_ARCH=90 after the default build recompiles train_gpt.cu for sm_90 only"
    else
        echo "not ok - GPU_ARCH change: up-to-date plan compiles $now time(s), GPU_ARCH=90 plan $other"
    fi
fi
