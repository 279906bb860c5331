#!/usr/bin/env bash
# Installs what fsdp.c needs on a Debian/Ubuntu machine and makes the Python venv used by
# the reference tests and benchmarks. Safe to run again: it only installs what is missing.
#   Debian packages: compilers, OpenMPI, OpenBLAS, zstd, PCRE2, Python with numpy + PyTorch
#   .venv/: Debian's python3 (sees python3-torch, python3-numpy) + tiktoken, safetensors,
#           and for data/prepare.py pyarrow (Parquet) and datasets (Hugging Face streaming)
set -euo pipefail
cd "$(dirname "$0")/.."

#   libopenblas-openmp-dev: the build links OpenBLAS's OpenMP flavour (shares our thread pool)
#   libjemalloc2: the PyTorch baseline of dev/bench/bench_cpu.sh runs on it (glibc's malloc
#                 returns the big logits buffers to the kernel every step, slowing PyTorch)
#   python3-matplotlib: scripts/plot.py
#   zlib1g-dev: tokenize_text reads gzip input
packages=(build-essential make curl ca-certificates bc libopenmpi-dev openmpi-bin libzstd-dev zlib1g-dev
          libopenblas-dev libopenblas-openmp-dev libpcre2-dev libcjson-dev libxxhash-dev libjemalloc2
          python3 python3-venv python3-numpy python3-torch python3-matplotlib clang)
# clang, libclang-rt-dev: make fuzz (libFuzzer and clang's ASan/UBSan runtimes: Debian 12's
# clang 14 keeps them in libclang-rt-14-dev; where there is no libclang-rt-dev, clang carries
# them). make asan uses gcc's sanitizers (build-essential).
if apt-cache show libclang-rt-dev > /dev/null 2>&1; then packages+=(libclang-rt-dev); fi
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    # (a fresh machine knows no package before the update: the check above found nothing)
    if ! dpkg-query -W -f='${Status}' libclang-rt-dev 2>/dev/null | grep -q "install ok installed" &&
       [[ " ${missing[*]} " != *" libclang-rt-dev "* ]] && apt-cache show libclang-rt-dev > /dev/null 2>&1; then
        missing+=(libclang-rt-dev)
    fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The venv sees the system site-packages so that Debian's torch and numpy are used as-is.
if [ ! -x .venv/bin/python ]; then
    /usr/bin/python3 -m venv --system-site-packages .venv
fi
if ! .venv/bin/python -c "import tiktoken, safetensors" 2>/dev/null; then
    .venv/bin/pip install -q --disable-pip-version-check tiktoken safetensors
fi
# test_tensorboard.sh reads train_gpt's event files with TensorBoard's own reader; 2.21.0
# takes Debian's numpy 1.x (>= 1.12), pinned here so that pip leaves it as it is.
if ! .venv/bin/python -c "import tensorboard" 2>/dev/null; then
    numpy_version=$(.venv/bin/python -c "import numpy; print(numpy.__version__)")
    .venv/bin/pip install -q --disable-pip-version-check "numpy==$numpy_version" tensorboard==2.21.0
fi
# data/prepare.py: pyarrow and datasets. numpy stays Debian's (python3-torch is built against
# it; datasets alone would pull numpy 2 into the venv), so pyarrow is pinned to 25, the last
# release that runs on numpy 1.x (26 needs numpy 2), and datasets to a release that takes it.
if ! .venv/bin/python -c "import pyarrow, datasets" 2>/dev/null; then
    numpy_version=$(.venv/bin/python -c "import numpy; print(numpy.__version__)")
    .venv/bin/pip install -q --disable-pip-version-check "numpy==$numpy_version" pyarrow==25.0.1 datasets==5.2.0
fi
# The cudnn-frontend's headers (--attention cudnn), pinned, into .deps (scripts/cudnn_frontend.sh).
PYTHON=.venv/bin/python bash scripts/cudnn_frontend.sh
.venv/bin/python -c "import torch, numpy, tiktoken, safetensors, pyarrow, datasets, tensorboard" \
    || { echo "setup: the Python venv is incomplete (.venv)"; exit 1; }
echo "setup: ok"
