#!/usr/bin/env bash
# GPT-2 (124M) on 10B tokens of FineWeb, on one node of 8 GPUs, with llm.c's settings for its
# GPT-2 reproduction (karpathy/llm.c, scripts/run_gpt2_124M.sh):
#   0.5M tokens per step (524288 = 64 sequences of 1024 tokens on each of 8 GPUs, no gradient
#   accumulation), AdamW lr 6e-4 with 700 warmup steps then cosine decay to 0, weight decay 0.1,
#   gradient clipping at 1.0.
#   Steps: llm.c trained one epoch of its fineweb10B train shards, 18865 steps (9.9B tokens;
#   a full 10e9 tokens would be 19073 steps). We fix the number instead of using -x -1 (one
#   epoch) so that the learning-rate schedule does not depend on which shards are present.
#   llm.c ran at ~300 ms/step on 8 x A100 80GB, so about 1.6 hours.
#
#   bash scripts/run_gpt2_124M.sh                     # 8 GPUs, data/fineweb10B -> out/gpt2_124M
#   NP=4 B=32 bash scripts/run_gpt2_124M.sh -s 0      # arguments are passed on to train_gpt
#
# Running it again resumes from the newest checkpoint in $OUT/ckpt (--resume auto), on any NP,
# so a crashed or stopped run continues where it was.
# Environment (defaults in brackets):
#   NP        ranks, one per GPU [8]
#   B         micro-batch per GPU in sequences [64]; lower it on GPUs with less than 80 GB:
#             gradient accumulation keeps 524288 tokens per step (NP x B x 1024 must divide it)
#   STEPS     optimizer steps [18865]
#   OUT       run directory: metrics.jsonl, ckpt/ [out/gpt2_124M]
#   DATA_DIR  FineWeb shards [data/fineweb10B]; TRAIN, VAL: the shard globs in it ("" VAL: none)
#   DEVICE    train_gpt --device [cuda: fail rather than fall back to the cpu]
#   MPIRUN_ARGS  more mpirun options (e.g. "-x NCCL_DEBUG=WARN")
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-8}
B=${B:-64}
STEPS=${STEPS:-18865}
OUT=${OUT:-out/gpt2_124M}
DEVICE=${DEVICE:-cuda}
DATA_DIR=${DATA_DIR:-data/fineweb10B}
TRAIN=${TRAIN:-$DATA_DIR/fineweb_train_*.bin}
VAL=${VAL-$DATA_DIR/fineweb_val_*.bin}

source scripts/run_gpt2_common.sh
need_shards "FineWeb (sample-10BT)" "about 20 GB" fineweb10B

# As llm.c: validation loss every 250 steps over 20 batches (10M tokens at NP=8, B=64), and a
# 144-token sample every 20000 steps, so once, at the end (train_gpt also samples at the last step).
# --ckpt-every 1000: llm.c saved every 5000 steps; a 124M checkpoint (1.5 GB of fp32 weights
# and Adam moments) takes seconds, so save more often and lose at most ~5 minutes to a crash.
launch d12 \
    -b "$B" -t 1024 -d 524288 -x "$STEPS" \
    -l 6e-4 -u 700 --lr-decay cosine -q 0.0 -c 0.1 --grad-clip 1.0 \
    -v 250 --val-steps 20 -s 20000 -g 144 \
    --ckpt-every 1000 --resume auto \
    "$@"
