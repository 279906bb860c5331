#!/usr/bin/env bash
# The planner against real cpu runs: for each configuration, the step time --plan predicts
# with the measured cpu profile (--sim-device cpu: sgemm and a streaming copy, ~2 s) next to
# the average step a real run of the same flags measures (steps after the first).
#   dev/bench/bench_plan.sh            [STEPS=6]
# Prints one line per configuration: predicted ms, measured ms, predicted / measured. First,
# without running anything, the plans of the two GPU runs measured on an H200 (2026-12-04,
# scripts/device_check.sh; README "Results") beside their measured ms/step: the figures the
# GPU profiles' efficiencies were calibrated on (train/plan.c). BENCH_CPU=0 skips the cpu runs.
set -u
cd "$(dirname "$0")/../.."
FSDP_DATA=${FSDP_DATA:-../shared/data}
SHARD="$FSDP_DATA/tinyshakespeare/tiny_shakespeare_train.bin"
STEPS=${STEPS:-6}
cores=$(nproc)
run_np() { local np=$1; shift; mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$@"; }

# model|flags|measured ms per step on the H200 (d12: 32 x 1024 tokens at 513,274 tok/s)
gpu_runs=(
    "d12|-m d12 -b 32 -t 1024|63.84"
    "d48|-m d48 -b 16 -t 1024|341.3"
)
printf "%-6s %-24s %12s %12s %8s\n" "model" "flags (h200, W=1)" "planned ms" "measured ms" "ratio"
for r in "${gpu_runs[@]}"; do
    IFS='|' read -r name flags meas <<<"$r"
    # shellcheck disable=SC2086
    pred=$(./train_gpt --plan --sim-device h200 --plan-world 1 $flags | awk '/^step / { print $2; exit }')
    ratio=$(awk -v p="$pred" -v m="$meas" 'BEGIN { if (p > 0) printf "%.3f", p / m; else print "-" }')
    printf "%-6s %-24s %12s %12s %8s\n" "$name" "$flags" "$pred" "$meas" "$ratio"
done
[ "${BENCH_CPU:-1}" = 0 ] && exit 0
echo

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
