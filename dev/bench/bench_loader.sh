#!/usr/bin/env bash
# Data-loader overhead: time spent reading batches (with shuffling, the harder case) against
# the whole training step, on Tiny Shakespeare. Target: under 1% of the step.
#   usage: dev/bench/bench_loader.sh   (MODEL="--layers 4 --channels 256 --heads 4", STEPS=6)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA="${FSDP_DATA:-../shared/data}/tinyshakespeare/tiny_shakespeare_train.bin"
[ -f "$DATA" ] || DATA=data/tinyshakespeare/tiny_shakespeare_train.bin
MODEL=${MODEL:-"--layers 4 --channels 256 --heads 4"}
STEPS=${STEPS:-6}
for shuffle in 0 1; do
    line=$(./train_gpt --device cpu $MODEL --max-seq 256 -b 8 -t 256 -x "$STEPS" -v 0 --shuffle "$shuffle" \
           -i "$DATA" --threads 2 | grep '^average step')
    echo "shuffle $shuffle: $line"
done
