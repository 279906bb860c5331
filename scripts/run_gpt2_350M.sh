#!/usr/bin/env bash
# GPT-2 (350M) on 31.5B tokens of FineWeb, on one node of 8 GPUs, with llm.c's settings for its
# GPT-2 reproduction (karpathy/llm.c, scripts/run_gpt2_350M.sh):
#   0.5M tokens per step (524288 = 64 sequences of 1024 tokens on each of 8 GPUs, no gradient
#   accumulation), 60000 steps, AdamW lr 3e-4 with 700 warmup steps then cosine decay to 0,
#   weight decay 0.1, gradient clipping at 1.0. Data: the 100B-token FineWeb sample (a third of
#   an epoch). llm.c ran at ~820 ms/step on 8 x A100 80GB, so about 14 hours.
#
#   bash scripts/run_gpt2_350M.sh                     # 8 GPUs, data/fineweb100B -> out/gpt2_350M
#   NP=8 B=32 bash scripts/run_gpt2_350M.sh           # 40 GB GPUs: 2 micro-steps per step
#
# Running it again resumes from the newest checkpoint in $OUT/ckpt (--resume auto), on any NP,
# so a crashed or stopped run continues where it was. Arguments are passed on to train_gpt.
# Environment (defaults in brackets):
#   NP        ranks, one per GPU [8]
#   B         micro-batch per GPU in sequences [64]; lower it on GPUs with less than 80 GB:
#             gradient accumulation keeps 524288 tokens per step (NP x B x 1024 must divide it)
#   STEPS     optimizer steps [60000]
#   OUT       run directory: metrics.jsonl, ckpt/ [out/gpt2_350M]
#   DATA_DIR  FineWeb shards [data/fineweb100B]; TRAIN, VAL: the shard globs in it ("" VAL: none)
#   DEVICE    train_gpt --device [cuda: fail rather than fall back to the cpu]
#   MPIRUN_ARGS  more mpirun options (e.g. "-x NCCL_DEBUG=WARN")
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-8}
B=${B:-64}
STEPS=${STEPS:-60000}
OUT=${OUT:-out/gpt2_350M}
DEVICE=${DEVICE:-cuda}
DATA_DIR=${DATA_DIR:-data/fineweb100B}
TRAIN=${TRAIN:-$DATA_DIR/fineweb_train_*.bin}
VAL=${VAL-$DATA_DIR/fineweb_val_*.bin}

source scripts/run_gpt2_common.sh
need_shards "FineWeb (sample-100BT)" "about 200 GB" fineweb100B

# As llm.c: validation loss every 250 steps over 20 batches, a 144-token sample at the end
# (-s larger than the run; train_gpt also samples at the last step), a checkpoint every 2000
# steps (4.2 GB of fp32 weights and Adam moments, about every half hour).
launch d24 \
    -b "$B" -t 1024 -d 524288 -x "$STEPS" \
    -l 3e-4 -u 700 --lr-decay cosine -q 0.0 -c 0.1 --grad-clip 1.0 \
    -v 250 --val-steps 20 -s 100000 -g 144 \
    --ckpt-every 2000 --resume auto \
    "$@"
