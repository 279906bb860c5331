#!/usr/bin/env bash
# Data-loader overhead: time spent reading batches (with shuffling, the harder case) against
# the whole training step, on Tiny Shakespeare. Target: under 1% of the step. The loader
# pread()s each window of T+1 tokens into its own buffer (no memory mapping: see
# dataloader/loader.h), one system call per window.
#   usage: dev/bench/bench_loader.sh   (MODEL="--layers 4 --channels 256 --heads 4", STEPS=6,
#          B=8, T=256, TRAIN_GPT=./train_gpt: another build to compare)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA="${FSDP_DATA:-../shared/data}/tinyshakespeare/tiny_shakespeare_train.bin"
[ -f "$DATA" ] || DATA=data/tinyshakespeare/tiny_shakespeare_train.bin
MODEL=${MODEL:-"--layers 4 --channels 256 --heads 4"}
STEPS=${STEPS:-6}
B=${B:-8}
T=${T:-256}
TRAIN_GPT=${TRAIN_GPT:-./train_gpt}
for shuffle in 0 1; do
    line=$("$TRAIN_GPT" --device cpu $MODEL --max-seq "$T" -b "$B" -t "$T" -x "$STEPS" -v 0 --shuffle "$shuffle" \
           -i "$DATA" --threads 2 | grep '^average step')
    echo "shuffle $shuffle: $line"
done
