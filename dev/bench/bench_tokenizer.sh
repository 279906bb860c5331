#!/usr/bin/env bash
# Tokenizer throughput (MB/s, one thread) of the C GPT-2 encoder against tiktoken, same text,
# same run, with the ratio (target >= 1.0x). See dev/bench/bench_tokenizer.py.
#
#   bash dev/bench/bench_tokenizer.sh             # Tiny Shakespeare x4 (~4.5 MB)
#   bash dev/bench/bench_tokenizer.sh FILE        # any UTF-8 text
#
# Environment: BENCH_COPIES (copies of Tiny Shakespeare, default 4), BENCH_ROUNDS (3),
# BENCH_REPEAT (3 encodes per round per side), PYTHON (default .venv/bin/python),
# TOKENIZE_TEXT (default ./tokenize_text, built with make when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-.venv/bin/python}
TOOL=${TOKENIZE_TEXT:-./tokenize_text}
DATA=${FSDP_DATA:-../shared/data}
export FSDP_DATA=$DATA
[[ -x $TOOL ]] || make -s tokenize_text
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench_tokenizer.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
if [[ $# -ge 1 ]]; then
    text=$1
else
    src=$DATA/tinyshakespeare/input.txt
    [[ -f $src ]] || { echo "bench_tokenizer: $src not found (set FSDP_DATA or run data/tinyshakespeare.sh)" >&2; exit 1; }
    text=$TMP/tinyshakespeare_x${BENCH_COPIES:-4}.txt
    for ((i = 0; i < ${BENCH_COPIES:-4}; i++)); do cat "$src"; done >"$text"
fi
exec "$PYTHON" dev/bench/bench_tokenizer.py "$TOOL" "$text" "${BENCH_ROUNDS:-3}" "${BENCH_REPEAT:-3}"
