#!/usr/bin/env bash
# GPT-2 (1558M) on 33.6B tokens of FineWeb-EDU, on one node of 8 GPUs, with llm.c's settings
# for its GPT-2 1.5B reproduction (karpathy/llm.c, scripts/run_gpt2_1558M.sh):
#   1M tokens per step (1048576 = 8 ranks x 16 sequences x 1024 tokens x 8 micro-steps of
#   gradient accumulation), 32000 steps, AdamW lr 6e-4 with 700 warmup steps then cosine decay
#   to 0.1 x lr, weight decay 0.1, gradient clipping at 1.0. Data: the 100B-token FineWeb-EDU
#   sample (a third of an epoch). llm.c ran at ~2.8 s/step on 8 x H100 80GB, so about a day.
#   -b 16 is what llm.c fits on 80 GB GPUs; on smaller ones lower B (gradient accumulation
#   keeps 1048576 tokens per step), and several nodes are scripts/slurm/train_gpt2_1558M.sbatch.
#
#   bash scripts/run_gpt2_1558M.sh                    # 8 GPUs, data/edu_fineweb100B -> out/gpt2_1558M
#   B=8 bash scripts/run_gpt2_1558M.sh                # 40 GB GPUs: 16 micro-steps per step
#
# Running it again resumes from the newest checkpoint in $OUT/ckpt (--resume auto), on any NP,
# so a crashed or stopped run continues where it was. Arguments are passed on to train_gpt.
# Environment (defaults in brackets):
#   NP        ranks, one per GPU [8]
#   B         micro-batch per GPU in sequences [16] (NP x B x 1024 must divide 1048576)
#   STEPS     optimizer steps [32000]
#   OUT       run directory: metrics.jsonl, ckpt/ [out/gpt2_1558M]
#   DATA_DIR  FineWeb-EDU shards [data/edu_fineweb100B]; TRAIN, VAL: the shard globs in it
#             ("" VAL: none)
#   DEVICE    train_gpt --device [cuda: fail rather than fall back to the cpu]
#   MPIRUN_ARGS  more mpirun options (e.g. "-x NCCL_DEBUG=WARN")
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-8}
B=${B:-16}
STEPS=${STEPS:-32000}
OUT=${OUT:-out/gpt2_1558M}
DEVICE=${DEVICE:-cuda}
DATA_DIR=${DATA_DIR:-data/edu_fineweb100B}
TRAIN=${TRAIN:-$DATA_DIR/edu_fineweb_train_*.bin}
VAL=${VAL-$DATA_DIR/edu_fineweb_val_*.bin}

source scripts/run_gpt2_common.sh
need_shards "FineWeb-EDU (sample-100BT)" "about 200 GB" edu_fineweb100B

# As llm.c: validation loss every 250 steps over 20 batches, a 384-token sample at the end
# (-s larger than the run; train_gpt also samples at the last step).
# --ckpt-every 500: llm.c saved every 2000 steps (~1.5 hours); a checkpoint is 18.7 GB of fp32
# weights and Adam moments written in parallel by all ranks, so save about every 25 minutes.
launch d48 \
    -b "$B" -t 1024 -d 1048576 -x "$STEPS" \
    -l 6e-4 -u 700 --lr-decay cosine -q 0.1 -c 0.1 --grad-clip 1.0 \
    -v 250 --val-steps 20 -s 300000 -g 384 \
    --ckpt-every 500 --resume auto \
    "$@"
