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
