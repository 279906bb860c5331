#!/usr/bin/env bash
# The cost of a multiple-choice evaluation pass (--eval-data, train/eval.c) on this machine's
# cpu device, against a training step of the same shape:
#   1. a set of EXAMPLES examples of HellaSwag's shape (4 completions, context CONTEXT tokens,
#      completions of COMPLETION: a guess at HellaSwag's shape, whose file is not reachable here),
#      written by dev/test/eval_reference.py make-evalset from Tiny Shakespeare's tokens;
#   2. STEPS training steps of the same model at B x T (the step time, after the first);
#   3. --eval-only of a fresh model on the set at np=1 and np=2 (the ranks share the cores):
#      seconds, forwards per rank, examples per second, and the time a full HellaSwag pass
#      (10,042 examples) would take at that rate (a projection from the measured rate), in
#      training steps of this shape.
#   usage: dev/bench/bench_eval.sh   (MODEL="--layers 4 --channels 256 --heads 4", B=8, T=256,
#          EXAMPLES=500, CONTEXT=40, COMPLETION=20, STEPS=6, TRAIN_GPT=./train_gpt)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA="${FSDP_DATA:-../shared/data}/tinyshakespeare"
[ -d "$DATA" ] || DATA=data/tinyshakespeare
PYTHON=${PYTHON:-.venv/bin/python}
MODEL=${MODEL:-"--layers 4 --channels 256 --heads 4"}
B=${B:-8}
T=${T:-256}
EXAMPLES=${EXAMPLES:-500}
CONTEXT=${CONTEXT:-40}
COMPLETION=${COMPLETION:-20}
STEPS=${STEPS:-6}
TRAIN_GPT=${TRAIN_GPT:-./train_gpt}
work_dir=$(mktemp -d "${TMPDIR:-/tmp}/bench_eval.XXXXXX")
trap 'rm -rf "$work_dir"' EXIT
cores=$(nproc)

$PYTHON dev/test/eval_reference.py make-evalset "$DATA/tiny_shakespeare_val.bin" "$work_dir/set.bin" \
    --examples "$EXAMPLES" --context "$CONTEXT" --completion "$COMPLETION" --seed 1 >/dev/null
echo "eval set: $EXAMPLES examples, 4 completions, context $CONTEXT + completion $COMPLETION tokens; model $MODEL, -b $B -t $T, $cores cores"

# shellcheck disable=SC2086
$TRAIN_GPT --device cpu $MODEL --max-seq "$T" -b "$B" -t "$T" -x "$STEPS" -v 0 -i "$DATA/tiny_shakespeare_train.bin" \
    --threads "$cores" >"$work_dir/train.log" 2>&1
step_ms=$(grep -m1 '^average step' "$work_dir/train.log" | awk '{print $3}')
echo "training step (np=1, $cores threads): $step_ms ms for $B x $T tokens"

for np in 1 2; do
    # shellcheck disable=SC2086
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np $np $TRAIN_GPT --device cpu $MODEL --max-seq "$T" \
        -b "$B" -t "$T" --threads $((cores / np > 0 ? cores / np : 1)) --eval-only --eval-data "$work_dir/set.bin" \
        >"$work_dir/eval$np.log" 2>&1
    line=$(grep -m1 '^eval acc_norm' "$work_dir/eval$np.log")
    secs=$(sed -E 's/.* ([0-9.]+) s\)$/\1/' <<<"$line")
    fwd=$(sed -E 's/.*: ([0-9]+) forwards.*/\1/' <<<"$line")
    shape=$(sed -E 's/.* forwards of ([0-9]+x[0-9]+) per rank.*/\1/' <<<"$line")
    awk -v np=$np -v s="$secs" -v f="$fwd" -v shape="$shape" -v n="$EXAMPLES" -v step="$step_ms" 'BEGIN {
        full = s * 10042 / n
        printf "np=%d: %.2f s for %d examples (%d forwards of %s per rank, %.1f ms each), %.0f examples/s; a full HellaSwag pass at this rate: %.0f s = %.0f training steps of this shape\n",
               np, s, n, f, shape, 1000 * s / f, n / s, full, 1000 * full / step
    }'
done
