#!/usr/bin/env bash
# Installs what fsdp.c needs on a Debian/Ubuntu machine and makes the Python venv used by
# the reference tests and benchmarks. Safe to run again: it only installs what is missing.
#   Debian packages: compilers, OpenMPI, OpenBLAS, zstd, PCRE2, Python with numpy + PyTorch
#   .venv/: Debian's python3 (sees python3-torch, python3-numpy) + tiktoken, safetensors
set -euo pipefail
cd "$(dirname "$0")/.."

#   libopenblas-openmp-dev: the build links OpenBLAS's OpenMP flavour (shares our thread pool)
#   libjemalloc2: the PyTorch baseline of dev/bench/bench_cpu.sh runs on it (glibc's malloc
#                 returns the big logits buffers to the kernel every step, slowing PyTorch)
#   python3-matplotlib: scripts/plot.py
packages=(build-essential make curl ca-certificates bc libopenmpi-dev openmpi-bin libzstd-dev
          libopenblas-dev libopenblas-openmp-dev libpcre2-dev libcjson-dev libxxhash-dev libjemalloc2
          python3 python3-venv python3-numpy python3-torch python3-matplotlib)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The venv sees the system site-packages so that Debian's torch and numpy are used as-is.
if [ ! -x .venv/bin/python ]; then
    /usr/bin/python3 -m venv --system-site-packages .venv
fi
if ! .venv/bin/python -c "import tiktoken, safetensors" 2>/dev/null; then
    .venv/bin/pip install -q --disable-pip-version-check tiktoken safetensors
fi
.venv/bin/python -c "import torch, numpy, tiktoken, safetensors" \
    || { echo "setup: the Python venv is incomplete (.venv)"; exit 1; }
echo "setup: ok"
