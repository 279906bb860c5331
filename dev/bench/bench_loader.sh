#!/usr/bin/env bash
# Data-loader overhead against the training step (target: under 1% of it), two parts:
#   1. reading batches, with shuffling (the harder case) and without, on Tiny Shakespeare: the
#      loader pread()s each window of T+1 tokens into its own buffer (no memory mapping: see
#      dataloader/loader.h), one system call per window; train_gpt's "data loading" figure;
#   2. the token check at open (loader_open reads every token of every shard once, against the
#      vocabulary: dataloader/loader.c's check_tokens), timed by dev/bench/loader_open_time.c
#      on one FineWeb-sized shard (llm.c's shards: 100M tokens, 200 MB) of Tiny Shakespeare's
#      tokens repeated, page cache warm (best and median of OPEN_ROUNDS opens; the first may
#      read from disk). Every rank pays it once at startup for every token of the data, and a
#      run consumes tokens_per_step of them per step, so over an epoch it costs each step
#      (ns per token) x tokens_per_step: printed against the step of part 1 measured here, and
#      against the --plan step of GPT-2 124M (d12, 16 x 1024 per rank) on 8 simulated H100s (a
#      model of that machine, not a measurement), with the one-time cost per shard and per 10B
#      tokens (FineWeb 10B) at the measured rate.
#   usage: dev/bench/bench_loader.sh   (MODEL="--layers 4 --channels 256 --heads 4", STEPS=6,
#          B=8, T=256, TRAIN_GPT=./train_gpt: another build to compare; SHARD_TOKENS=100000000,
#          OPEN_ROUNDS=7)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA="${FSDP_DATA:-../shared/data}/tinyshakespeare/tiny_shakespeare_train.bin"
[ -f "$DATA" ] || DATA=data/tinyshakespeare/tiny_shakespeare_train.bin
MODEL=${MODEL:-"--layers 4 --channels 256 --heads 4"}
STEPS=${STEPS:-6}
B=${B:-8}
T=${T:-256}
TRAIN_GPT=${TRAIN_GPT:-./train_gpt}
SHARD_TOKENS=${SHARD_TOKENS:-100000000}
OPEN_ROUNDS=${OPEN_ROUNDS:-7}
work_dir=$(mktemp -d "${TMPDIR:-/tmp}/bench_loader.XXXXXX")
trap 'rm -rf "$work_dir"' EXIT

step_ms=
for shuffle in 0 1; do
    line=$("$TRAIN_GPT" --device cpu $MODEL --max-seq "$T" -b "$B" -t "$T" -x "$STEPS" -v 0 --shuffle "$shuffle" \
           -i "$DATA" --threads 2 | grep '^average step')
    echo "shuffle $shuffle: $line"
    step_ms=$(sed -E 's/^average step ([0-9.]+) ms.*/\1/' <<<"$line")
done

# ---- 2. the token check at open
make -s build/dataloader/loader.o build/util/regular_file.o
${CC:-cc} -O2 -std=gnu11 -I. dev/bench/loader_open_time.c build/dataloader/loader.o build/util/regular_file.o \
    -o "$work_dir/loader_open_time"
python3 - "$DATA" "$work_dir/shard_000.bin" "$SHARD_TOKENS" <<'PY'
import struct, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(src, "rb") as f:
    header, tokens = f.read(1024), f.read()
reps = -(-2 * n // len(tokens))
hdr = list(struct.unpack("<256i", header))
hdr[2] = n
with open(dst, "wb") as f:
    f.write(struct.pack("<256i", *hdr))
    f.write((tokens * reps)[:2 * n])
PY
open_line=$("$work_dir/loader_open_time" "$work_dir/shard_000.bin" "$T" 50257 "$OPEN_ROUNDS")
echo "token check at open (one shard, every token against a vocabulary of 50257): $open_line"
ns_per_token=$(sed -E 's/.*\(([0-9.]+) ns\/token.*/\1/' <<<"$open_line")
plan=$("$TRAIN_GPT" --plan --sim-device h100 -m d12 -b 16 -t 1024)
plan_ms=$(grep -E '^step [0-9.]+ ms' <<<"$plan" | sed -E 's/^step ([0-9.]+) ms.*/\1/')
plan_tokens=$(grep -E '^batch: ' <<<"$plan" | sed -E 's/.* = ([0-9]+) tokens per step/\1/')
python3 - "$ns_per_token" "$step_ms" "$((B * T))" "$plan_ms" "$plan_tokens" "$SHARD_TOKENS" <<'PY'
import sys
ns, step_ms, step_tokens, plan_ms, plan_tokens, shard = (float(x) for x in sys.argv[1:])
for what, ms, tokens in (("this machine's cpu step above", step_ms, step_tokens),
                         ("--plan's d12 step on 8 x h100 (16 x 1024 per rank)", plan_ms, plan_tokens)):
    cost = ns * tokens / 1e6
    print(f"  per step over an epoch, against {what}: {tokens:.0f} tokens x {ns:.3f} ns = {cost:.4f} ms of {ms:.2f} ms "
          f"({100 * cost / ms:.3f}%)")
print(f"  once at startup, per rank: {ns * shard / 1e9:.2f} s per shard of {shard:.0f} tokens, "
      f"{ns * 10:.1f} s per 10B tokens (page cache warm; a cold read is bound by the disk instead)")
PY
