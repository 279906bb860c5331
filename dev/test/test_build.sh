#!/usr/bin/env bash
# run_tests: cores 1.1, 45 s
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

# A T4 build (GPU_ARCH=75): the flash kernels' sm_80 instructions (cp.async, mma.sync
# m16n8k16) compile to traps there (kernels/cuda_attention_flash.cuh), so train_gpt.cu must still
# compile for sm_75, warnings as errors: the Makefile's own command, into a scratch object.
if command -v nvcc > /dev/null && [ -f build/train_gpt.o ]; then
    obj=${TEST_TMP:-$(mktemp -d)}/train_gpt_sm75.o
    cmd=$(make -n GPU_ARCH=75 build/train_gpt.o 2>/dev/null | grep -- '-gencode arch=compute_75,code=sm_75' | grep -- ' -c train_gpt.cu' | head -n 1)
    if [ -n "$cmd" ] && bash -c "${cmd/-o build\/train_gpt.o/-o $obj}" > "$obj.log" 2>&1 && [ -s "$obj" ]; then
        echo "ok - train_gpt.cu compiles for sm_75 (a T4: --param-dtype fp16, cuBLAS attention) with warnings as errors"
    else
        echo "not ok - train_gpt.cu for sm_75: $(grep -m3 -E 'error|warning' "$obj.log" 2>/dev/null | tr '\n' ' ' | cut -c1-300)$([ -z "$cmd" ] && echo '(no nvcc command planned)')"
    fi
fi

# NCCL from PyTorch's pip wheel (nvidia/nccl/{include/nccl.h,lib/libnccl.so.2}, no libnccl.so)
# when neither the CUDA toolkit nor the system has nccl.h: scripts/find_nccl.sh finds it through
# python3, and the Makefile compiles with its include/ and links libnccl.so.2 by name with an
# rpath. Planned with `make -n` and a stand-in nvcc path (whose toolkit has no nccl.h), an
# empty stand-in for the system's include directories, and a fake wheel on PYTHONPATH.
if command -v nvcc > /dev/null; then
    tmp=${TEST_TMP:-$(mktemp -d)}
    wheel="$tmp/site/nvidia/nccl"
    mkdir -p "$wheel/include" "$wheel/lib" "$tmp/sys_none" "$tmp/sys_nccl" "$tmp/cuda/bin"
    touch "$wheel/include/nccl.h" "$wheel/lib/libnccl.so.2" "$tmp/sys_nccl/nccl.h"
    nccl_env=(env PYTHON= PYTHONPATH="$tmp/site")
    found=$("${nccl_env[@]}" FIND_NCCL_SYSTEM_DIRS="$tmp/sys_none" scripts/find_nccl.sh "$tmp/cuda/bin/nvcc")
    system=$("${nccl_env[@]}" FIND_NCCL_SYSTEM_DIRS="$tmp/sys_nccl" scripts/find_nccl.sh "$tmp/cuda/bin/nvcc")
    link=$("${nccl_env[@]}" FIND_NCCL_SYSTEM_DIRS="$tmp/sys_none" make -n -B NVCC="$tmp/cuda/bin/nvcc" train_gpt 2>&1 |
           grep -- '-o train_gpt')
    default_link=$(make -n -B train_gpt 2>&1 | grep -- '-o train_gpt')
    if [ "$found" = "$wheel" ] && [ -z "$system" ] && grep -q -- "-I$wheel/include" <<<"$link" &&
       grep -q -- "-L$wheel/lib -Xlinker -rpath,$wheel/lib -l:libnccl.so.2" <<<"$link" &&
       grep -q -- ' -lnccl ' <<<"$default_link" && ! grep -q 'libnccl.so.2' <<<"$default_link"; then
        echo "ok - NCCL only in a pip wheel: found by scripts/find_nccl.sh, linked as libnccl.so.2 with an rpath (the toolkit's: -lnccl)"
    else
        echo "not ok - NCCL from a pip wheel: found '$found' (want $wheel), with a system nccl.h '$system' (want none); link line: $(cut -c1-300 <<<"$link")"
    fi
fi
