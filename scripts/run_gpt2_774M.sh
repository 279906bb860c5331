#!/usr/bin/env bash
# GPT-2 (774M) on 150B tokens of FineWeb, on one node of 8 GPUs, with llm.c's settings for its
# GPT-2 reproduction (karpathy/llm.c, scripts/run_gpt2_774M.sh):
#   0.5M tokens per step (524288 = 32 sequences of 1024 tokens on each of 8 GPUs, 2 micro-steps
#   of gradient accumulation), 286102 steps, AdamW lr 2.5e-4 with 700 warmup steps then cosine
#   decay to 0, weight decay 0.1, gradient clipping at 1.0. Data: the 100B-token FineWeb sample
#   (1.5 epochs). llm.c ran at ~1.7 s/step on 8 x A100 80GB, so about 5.6 days: run it as
#   several jobs (it resumes) or on several nodes (scripts/slurm/train_gpt2.sbatch).
#
#   bash scripts/run_gpt2_774M.sh                     # 8 GPUs, data/fineweb100B -> out/gpt2_774M
#   B=16 bash scripts/run_gpt2_774M.sh                # 40 GB GPUs: 4 micro-steps per step
#
# Running it again resumes from the newest checkpoint in $OUT/ckpt (--resume auto), on any NP,
# so a crashed or stopped run continues where it was. Arguments are passed on to train_gpt.
# Environment (defaults in brackets):
#   NP        ranks, one per GPU [8]
#   B         micro-batch per GPU in sequences [32, as llm.c on 80 GB GPUs]; lower it on smaller
#             GPUs: gradient accumulation keeps 524288 tokens per step (NP x B x 1024 must divide it)
#   STEPS     optimizer steps [286102]
#   OUT       run directory: metrics.jsonl, ckpt/ [out/gpt2_774M]
#   DATA_DIR  FineWeb shards [data/fineweb100B]; TRAIN, VAL: the shard globs in it ("" VAL: none)
#   DEVICE    train_gpt --device [cuda: fail rather than fall back to the cpu]
#   MPIRUN_ARGS  more mpirun options (e.g. "-x NCCL_DEBUG=WARN")
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-8}
B=${B:-32}
STEPS=${STEPS:-286102}
OUT=${OUT:-out/gpt2_774M}
DEVICE=${DEVICE:-cuda}
DATA_DIR=${DATA_DIR:-data/fineweb100B}
TRAIN=${TRAIN:-$DATA_DIR/fineweb_train_*.bin}
VAL=${VAL-$DATA_DIR/fineweb_val_*.bin}

# The shards come from llm.c's FineWeb preparation; say how to get them before anything else.
if ! compgen -G "$TRAIN" >/dev/null || { [ -n "$VAL" ] && ! compgen -G "$VAL" >/dev/null; }; then
    compgen -G "$TRAIN" >/dev/null && missing=$VAL || missing=$TRAIN
    cat >&2 <<EOF
run_gpt2_774M.sh: no token shards match $missing
  This run trains on FineWeb (sample-100BT) in llm.c's token-shard format. To make the shards
  (about 200 GB; needs Python with datasets, tiktoken, numpy, tqdm and internet access):
      git clone https://github.com/karpathy/llm.c && cd llm.c
      python dev/data/fineweb.py --version 100B       # writes dev/data/fineweb100B/fineweb_{val,train}_*.bin
  then link them here:  ln -s /path/to/llm.c/dev/data/fineweb100B data/fineweb100B
  or set DATA_DIR=/path/to/fineweb100B (or TRAIN=... VAL=... globs). Shards of your own text:
      ./tokenize_text -o data/mytext/mytext --val-tokens 1000000 FILE...   (see ./tokenize_text --help)
EOF
    exit 1
fi

make -j"$(nproc)" train_gpt

mpi_flags=()
[ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)
read -ra extra_mpi <<<"${MPIRUN_ARGS:-}"

# As llm.c: validation loss every 250 steps over 20 batches, a 144-token sample at the end
# (-s larger than the run; train_gpt also samples at the last step).
# --ckpt-every 1000: llm.c saved every 4000 steps (~2 hours); a checkpoint is 9.3 GB of fp32
# weights and Adam moments written in parallel by all ranks, so save about every half hour.
mpirun "${mpi_flags[@]}" "${extra_mpi[@]}" -np "$NP" ./train_gpt \
    --device "$DEVICE" -m d36 -i "$TRAIN" -j "$VAL" -o "$OUT" \
    -b "$B" -t 1024 -d 524288 -x "$STEPS" \
    -l 2.5e-4 -u 700 --lr-decay cosine -q 0.0 -c 0.1 --grad-clip 1.0 \
    -v 250 --val-steps 20 -s 300000 -g 144 \
    --ckpt-every 1000 --resume auto \
    "$@"
echo "run_gpt2_774M.sh: done; plot it with: python3 scripts/plot.py $OUT/metrics.jsonl"
