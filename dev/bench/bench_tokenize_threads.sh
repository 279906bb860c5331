#!/usr/bin/env bash
# Tokenizer throughput on one thread and on all cores: tokenize_text against tiktoken's
# encode_ordinary_batch on the same cores and documents, then the whole preparation end to
# end (tokenize_text on .jsonl.zst, data/prepare.py on Parquet and on a local Hugging Face
# dataset directory) and what FineWeb-10B would take at that rate (a projection). See
# dev/bench/bench_tokenize_threads.py.
#
#   bash dev/bench/bench_tokenize_threads.sh            # 128 MB of documents, 1 and all threads
#   BENCH_MB=16 BENCH_THREADS="1 2 4" bash dev/bench/bench_tokenize_threads.sh
#
# Environment: BENCH_MB (text size, default 128), BENCH_ROUNDS (3), BENCH_THREADS (default
# "1 <cores>"), PYTHON (default .venv/bin/python), TOKENIZE_TEXT (default ./tokenize_text,
# built with make when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-.venv/bin/python}
TOOL=${TOKENIZE_TEXT:-./tokenize_text}
export FSDP_DATA=${FSDP_DATA:-../shared/data}
[[ -x $TOOL ]] || make -s tokenize_text
[[ -f $FSDP_DATA/tinyshakespeare/input.txt ]] || { echo "bench_tokenize_threads: no $FSDP_DATA/tinyshakespeare/input.txt (set FSDP_DATA)" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench_tokenize_threads.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
read -ra threads <<<"${BENCH_THREADS:-}"
"$PYTHON" dev/bench/bench_tokenize_threads.py "$TOOL" "$TMP" "${BENCH_MB:-64}" "${BENCH_ROUNDS:-3}" "${threads[@]}"
