#!/usr/bin/env bash
# GPU tests: every build/test_*_cuda program (from dev/test/test_*_cuda.cu). Each prints its
# own "ok - ..." / "not ok - ..." lines, and "ok - <name> # skip no GPU" where no GPU is
# usable. Without nvcc nothing was built, which is reported as a skip too.
set -u
shopt -s nullglob
bins=(build/test_*_cuda)
if [ ${#bins[@]} -eq 0 ]; then
    echo "ok - GPU tests # skip not built (no nvcc)"
    exit 0
fi
# cuDNN for test_attention_cuda's cudnn checks (scripts/find_cudnn.sh; it says why not, and the
# program then prints its skip).
cudnn_env=($(bash scripts/find_cudnn.sh 2>/dev/null))
for bin in "${bins[@]}"; do
    out=$(env "${cudnn_env[@]}" "$bin" 2>&1); rc=$?
    echo "$out"
    # A failing program has said what failed; a crash (or a silent non-zero exit) has not.
    if [ $rc -ne 0 ] && ! grep -q '^not ok - ' <<<"$out"; then echo "not ok - $bin exited with status $rc"; fi
done
exit 0
