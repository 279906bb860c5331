#!/usr/bin/env bash
# From a fresh machine to a real training run: installs what is missing (scripts/setup.sh),
# builds, tokenizes Tiny Shakespeare, and trains a small GPT-2 (4 layers, 256 channels) with
# FSDP over NP ranks (default 2) on the cpu device, printing validation loss and samples.
#   bash scripts/run_tinyshakespeare.sh          (NP=4 STEPS=300 ... to change)
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-2}
STEPS=${STEPS:-120}
OUT=${OUT:-out/tinyshakespeare}

bash scripts/setup.sh
make -j"$(nproc)" train_gpt tokenize_text
bash data/tinyshakespeare.sh

# Threads per rank: share the cores between the ranks.
threads=$(( $(nproc) / NP )); [ "$threads" -ge 1 ] || threads=1
mpi_flags=(--bind-to none)
[ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)
[ "$NP" -gt "$(nproc)" ] && mpi_flags+=(--oversubscribe)

mpirun "${mpi_flags[@]}" -np "$NP" ./train_gpt \
    --layers 4 --channels 256 --heads 4 --max-seq 256 \
    -i data/tinyshakespeare/tiny_shakespeare_train.bin -j data/tinyshakespeare/tiny_shakespeare_val.bin \
    -b 4 -t 256 -d $((NP * 4 * 256)) -x "$STEPS" -l 1e-3 -u 10 -q 0.1 \
    -v 20 --val-steps 4 -s 60 -g 64 --threads "$threads" -o "$OUT"
echo "metrics: $OUT/metrics.jsonl"
