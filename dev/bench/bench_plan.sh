#!/usr/bin/env bash
# The planner against real cpu runs: for each configuration, the step time --plan predicts
# with the measured cpu profile (--sim-device cpu: sgemm and a streaming copy, ~2 s) next to
# the average step a real run of the same flags measures (steps after the first).
#   dev/bench/bench_plan.sh            [STEPS=6]
# Prints one line per configuration: predicted ms, measured ms, predicted / measured.
set -u
cd "$(dirname "$0")/../.."
FSDP_DATA=${FSDP_DATA:-../shared/data}
SHARD="$FSDP_DATA/tinyshakespeare/tiny_shakespeare_train.bin"
STEPS=${STEPS:-6}
cores=$(nproc)
run_np() { local np=$1; shift; mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$@"; }

configs=(
    "1|d4 (4 x 256), b 4 t 256|-m d4 --max-seq 256 -b 4 -t 256"
    "1|d4, b 8 t 128, recompute full|-m d4 --max-seq 128 -b 8 -t 128 --recompute full"
    "1|6 x 384, b 4 t 256|--layers 6 --channels 384 --heads 6 --max-seq 256 -b 4 -t 256"
    "2|d4 (4 x 256), b 4 t 256, np 2|-m d4 --max-seq 256 -b 4 -t 256"
)
printf "%-36s %4s %8s %12s %12s %8s\n" "configuration" "np" "threads" "predicted ms" "measured ms" "ratio"
for c in "${configs[@]}"; do
    IFS='|' read -r np name flags <<<"$c"
    threads=$((cores / np)); [ "$threads" -lt 1 ] && threads=1
    # shellcheck disable=SC2086
    pred=$(./train_gpt --plan --sim-device cpu --threads "$threads" --plan-world "$np" $flags | awk '/^step / { print $2; exit }')
    # shellcheck disable=SC2086
    meas=$(run_np "$np" ./train_gpt --device cpu $flags --threads "$threads" -x "$STEPS" -v 0 -i "$SHARD" 2>&1 |
           awk '/^average step/ { print $3; exit }')
    ratio=$(awk -v p="$pred" -v m="$meas" 'BEGIN { if (m > 0) printf "%.2f", p / m; else print "-" }')
    printf "%-36s %4s %8s %12s %12s %8s\n" "$name" "$np" "$threads" "$pred" "$meas" "$ratio"
done
