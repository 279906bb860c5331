#!/usr/bin/env bash
# NVIDIA's header-only cudnn-frontend, pinned, for --attention cudnn (kernels/cuda_attention_cudnn.cpp):
# downloads its PyPI wheel (no install: the wheel's include/ is all the build uses) and unpacks
# the headers into .deps/cudnn_frontend/include (git-ignored), where the Makefile's CUDNN_FE_INC
# looks. Run by scripts/setup.sh, and by scripts/device_deps.sh fetch (the GPU machine has no
# network: .deps travels there). Does nothing when that version is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.32.0
dest=.deps/cudnn_frontend
if grep -qs "CUDNN_FRONTEND_MINOR_VERSION $(echo $version | cut -d. -f2)\$" $dest/include/cudnn_frontend_version.h; then
    exit 0
fi
python=${PYTHON:-python3}
[ -x .venv/bin/python ] && python=.venv/bin/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    "nvidia-cudnn-frontend==$version" -d "$tmp" ||
    { echo "cudnn_frontend: pip download of nvidia-cudnn-frontend==$version failed" >&2; exit 1; }
"$python" - "$tmp" "$dest" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
wheel = glob.glob(os.path.join(tmp, "*.whl"))[0]
out = os.path.join(tmp, "x")
with zipfile.ZipFile(wheel) as z:
    z.extractall(out, [n for n in z.namelist() if n.startswith("include/")])
shutil.rmtree(os.path.join(dest, "include"), ignore_errors=True)
os.makedirs(dest, exist_ok=True)
shutil.move(os.path.join(out, "include"), os.path.join(dest, "include"))
PY
echo "cudnn_frontend: nvidia-cudnn-frontend $version headers in $dest/include"
