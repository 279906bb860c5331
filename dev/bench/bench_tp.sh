#!/usr/bin/env bash
# Tensor parallel against data parallel on the CPU, at the same world (2 ranks, 1 thread each)
# and the same global batch: TP 2 x DP 1 (--tp 2: both ranks read the same sequences, each
# holds half of the split weights, the activations between blocks are split by rows) against
# DP 2 (FSDP over the two ranks, each its half of the sequences), alternately REPS times each
# (the machine is shared: its load moves step times by 2x). Prints per layout the step time
# (median, and fastest, of the steps after the first of every repetition, metrics.jsonl), the
# bytes rank 0 moved per step (FSDP's all-gathers, reduce-scatters, replica all-reduces; TP's
# collectives, counted by the run) against their formulas (FSDP: 3 x params x (W-1)/W x
# micro-steps; TP: the planner's "TP bytes per step" of `--plan` with the same flags, which the
# counted bytes must equal), and the ratios. On this machine the collectives are MPI over shared memory and the ranks
# share 2 cores: it measures what TP costs a cpu run and checks the bytes, not speed on a GPU.
#   usage: dev/bench/bench_tp.sh   (MODEL="--layers 4 --channels 128 --heads 4", T=64,
#                                   GLOBAL_SEQS=8, STEPS=8, REPS=3)   ~1 minute
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA="${FSDP_DATA:-../shared/data}/tinyshakespeare/tiny_shakespeare_train.bin"
[ -f "$DATA" ] || DATA=data/tinyshakespeare/tiny_shakespeare_train.bin
MODEL=${MODEL:-"--layers 4 --channels 128 --heads 4"}
T=${T:-64}
GLOBAL_SEQS=${GLOBAL_SEQS:-8}
STEPS=${STEPS:-8}
REPS=${REPS:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(./train_gpt --device cpu $MODEL --max-seq "$T" -t "$T" -d $((GLOBAL_SEQS * T)) -x "$STEPS" -v 0 -i "$DATA"
        --threads 1)
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

train() {  # train NAME ARGS...: 2 ranks, output in $log/NAME.log and $log/NAME/
    local name=$1; shift
    if ! mpirun --oversubscribe --bind-to none -np 2 "${common[@]}" "$@" -o "$log/$name" >"$log/$name.log" 2>&1; then
        echo "bench_tp: $name failed:" >&2; tail -n 5 "$log/$name.log" >&2; exit 1
    fi
}
for r in $(seq "$REPS"); do
    train "dp2_$r" -b $((GLOBAL_SEQS / 2))
    train "tp2_$r" -b "$GLOBAL_SEQS" --tp 2
done
# The planner's TP bytes for the TP run's flags (--plan-world 2: the same world).
"${common[@]}" -b "$GLOBAL_SEQS" --tp 2 --plan --sim-device cpu --plan-world 2 >"$log/plan.log" 2>&1 ||
    { echo "bench_tp: --plan failed:" >&2; tail -n 5 "$log/plan.log" >&2; exit 1; }

median_ms() {  # median_ms NAME: the median and the fastest step after the first over NAME's repetitions
    python3 - "$log/$1"_*/metrics.jsonl <<'PY'
import json, statistics, sys
ms = [m for f in sys.argv[1:] for m in [json.loads(l)["ms"] for l in open(f) if '"loss"' in l][1:]]
print(f"{statistics.median(ms):.1f} {min(ms):.1f}")
PY
}
# From the "communication per step per rank" line: FSDP's counted MiB (all-gather +
# reduce-scatter + replica all-reduce), its formula's MiB, and the TP bytes per step (0 without TP).
comm() {
    grep -m1 '^communication per step per rank' "$1" | sed -E 's/.*all-gather ([0-9.]+) MiB, reduce-scatter ([0-9.]+) MiB, replica all-reduce ([0-9.]+) MiB; 3 x params x \(W-1\)\/W x micro-steps = ([0-9.]+) MiB(.*TP bytes per step ([0-9]+))?.*/\1 \2 \3 \4 \6/' |
        awk '{ printf "%.1f %.1f %.0f\n", $1 + $2 + $3, $4, $5 == "" ? 0 : $5 }'
}
read -r dp_fsdp dp_formula dp_tp <<<"$(comm "$log/dp2_1.log")"
read -r tp_fsdp tp_formula tp_tp <<<"$(comm "$log/tp2_1.log")"
planned=$(sed -nE 's/^tensor parallel: TP bytes per step ([0-9]+) .*/\1/p' "$log/plan.log")
read -r dp_ms dp_min <<<"$(median_ms dp2)"; read -r tp_ms tp_min <<<"$(median_ms tp2)"

grep -m1 "^model:" "$log/dp2_1.log"
echo "world 2 (np 2, --threads 1 each), global batch $GLOBAL_SEQS x $T tokens, $STEPS steps x $REPS runs per layout (median of the steps after the first);"
echo "bytes per step of rank 0, MiB = 2^20 bytes; TP formula: the planner's TP bytes per step (--plan --sim-device cpu)"
printf "%-12s %10s %10s %12s %14s %12s %14s\n" layout "ms/step" "fastest" "FSDP MiB" "FSDP formula" "TP MiB" "TP formula"
awk -v ms="$dp_ms" -v mn="$dp_min" -v f="$dp_fsdp" -v ff="$dp_formula" -v t="$dp_tp" \
    'BEGIN { printf "%-12s %10.1f %10.1f %12.1f %14.1f %12.1f %14s\n", "DP 2", ms, mn, f, ff, t / 1048576, "-" }'
awk -v ms="$tp_ms" -v mn="$tp_min" -v f="$tp_fsdp" -v ff="$tp_formula" -v t="$tp_tp" -v p="$planned" \
    'BEGIN { printf "%-12s %10.1f %10.1f %12.1f %14.1f %12.1f %14.1f\n", "TP 2 x DP 1", ms, mn, f, ff, t / 1048576, p / 1048576 }'
awk -v a="$dp_ms" -v b="$tp_ms" -v c="$dp_min" -v d="$tp_min" -v f="$dp_fsdp" -v t="$tp_tp" -v tf="$tp_fsdp" 'BEGIN {
    printf "TP / DP: step time %.3f (median), %.3f (fastest); bytes moved per step %.3f\n", b / a, d / c, (t / 1048576 + tf) / f }'
if [ -n "$planned" ] && [ "$planned" = "$tp_tp" ]; then
    echo "TP bytes counted = planned: $tp_tp bytes per step"
else
    echo "TP bytes counted ($tp_tp) != planned ($planned)"; exit 1
fi
