#!/usr/bin/env bash
# Where the Makefile finds NCCL. Usage: scripts/find_nccl.sh NVCC
# Prints nothing when nccl.h is where nvcc looks by itself (the CUDA toolkit's include/, or
# /usr/include, /usr/local/include: apt's libnccl-dev, NVIDIA's toolkit images); else the
# directory of the NCCL that PyTorch's pip wheel installs (nvidia-nccl-cu12/13: include/nccl.h
# and lib/libnccl.so.2, no libnccl.so), found through python3 (or $PYTHON), which is how some
# GPU images carry NCCL. Prints nothing either when neither exists: the build then fails at
# `#include <nccl.h>`, naming it.
# FIND_NCCL_SYSTEM_DIRS (a space-separated list) replaces the system include directories, so
# that tests can pretend there is no system NCCL.
set -u
nvcc=${1:-}
cuda_include=""
[ -n "$nvcc" ] && cuda_include="$(dirname "$(dirname "$(readlink -f "$nvcc")")")/include"
for dir in $cuda_include ${FIND_NCCL_SYSTEM_DIRS-/usr/include /usr/local/include}; do
    [ -f "$dir/nccl.h" ] && exit 0
done
for py in ${PYTHON:-} python3; do
    command -v "$py" >/dev/null 2>&1 || continue
    home=$("$py" - 2>/dev/null <<'EOF'
import os
try:
    import nvidia.nccl as m
except ImportError:
    raise SystemExit(0)
for d in m.__path__:
    if os.path.isfile(os.path.join(d, "include", "nccl.h")) and os.path.isfile(os.path.join(d, "lib", "libnccl.so.2")):
        print(d)
        break
EOF
)
    if [ -n "$home" ]; then echo "$home"; exit 0; fi
done
exit 0
