#!/usr/bin/env bash
# Where a script finds cuDNN for `--attention cudnn` (train_gpt itself only reads
# FSDP_CUDNN_LIB, else the loader's libcudnn_graph.so.9). Prints the environment to give a run,
# as shell words: FSDP_CUDNN_LIB=FILE and, where the cudnn-frontend needs it,
# CUDNN_FRONTEND_CUDART_LIB_NAME=FILE (the CUDA runtime it loads for itself). Order: the
# FSDP_CUDNN_LIB already set; libcudnn_graph.so.9 known to the loader; PyTorch's pip wheel
# (nvidia-cudnn-cu12/13, through python3 or $PYTHON), which is how the GPU machines carry it.
# Prints nothing, and says why on stderr with status 1, when there is none.
# `scripts/find_cudnn.sh include NVCC` instead prints the folder with cudnn.h for the Makefile:
# the toolkit's include/ (NVCC's), /usr/include, else the pip wheel's include/ (nothing: none).
set -u
if [ "${1:-}" = include ]; then
    nvcc=${2:-}
    for d in ${nvcc:+$(dirname "$(dirname "$(readlink -f "$nvcc")")")/include} /usr/include; do
        [ -f "$d/cudnn.h" ] && { echo "$d"; exit 0; }
    done
    for py in ${PYTHON:-} python3; do
        command -v "$py" >/dev/null 2>&1 || continue
        "$py" -c 'import nvidia.cudnn, os
for d in nvidia.cudnn.__path__:
    if os.path.isfile(os.path.join(d, "include", "cudnn.h")): print(os.path.join(d, "include")); break' 2>/dev/null && exit 0
    done
    exit 0
fi
lib=${FSDP_CUDNN_LIB:-}
if [ -z "$lib" ] && ldconfig -p 2>/dev/null | grep -q 'libcudnn_graph\.so\.9 '; then lib=libcudnn_graph.so.9; fi
if [ -z "$lib" ]; then
    for py in ${PYTHON:-} python3; do
        command -v "$py" >/dev/null 2>&1 || continue
        lib=$("$py" -c 'import nvidia.cudnn, os
for d in nvidia.cudnn.__path__:
    f = os.path.join(d, "lib", "libcudnn_graph.so.9")
    if os.path.isfile(f): print(f); break' 2>/dev/null) && [ -n "$lib" ] && break
    done
fi
if [ -z "$lib" ]; then
    echo "find_cudnn: no cuDNN 9 (FSDP_CUDNN_LIB unset, no libcudnn_graph.so.9 for the loader, no nvidia-cudnn pip wheel)" >&2
    exit 1
fi
echo "FSDP_CUDNN_LIB=$lib"
# The frontend's own CUDA runtime: the loader's, else the toolkit's next to nvcc.
if [ -z "${CUDNN_FRONTEND_CUDART_LIB_NAME:-}" ] && ! ldconfig -p 2>/dev/null | grep -qE 'libcudart\.so\.1[23] '; then
    nvcc=$(command -v nvcc || true)
    for f in ${nvcc:+$(dirname "$(readlink -f "$nvcc")")/../lib64/libcudart.so.13} /usr/local/cuda/lib64/libcudart.so.13; do
        [ -f "$f" ] && { echo "CUDNN_FRONTEND_CUDART_LIB_NAME=$(readlink -f "$f")"; break; }
    done
fi
