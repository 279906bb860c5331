#!/usr/bin/env bash
# Sharding overhead on the CPU: the same global batch trained by one rank with 2 threads and
# by two ranks (FSDP, W=2) with 1 thread each, same model, same steps, the two ranks over
# MPI and over the TCP transport. Prints the average step times, their ratios, and the bytes
# each rank moved per step against FSDP's 3 x params x (W-1)/W.
#   usage: dev/bench/bench_fsdp.sh            (MODEL="--layers 6 --channels 384 --heads 6", STEPS=6)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA="${FSDP_DATA:-../shared/data}/tinyshakespeare/tiny_shakespeare_train.bin"
[ -f "$DATA" ] || DATA=data/tinyshakespeare/tiny_shakespeare_train.bin
MODEL=${MODEL:-"--layers 6 --channels 384 --heads 6"}
STEPS=${STEPS:-6}
T=${T:-256}
GLOBAL_SEQS=${GLOBAL_SEQS:-8}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(./train_gpt --device cpu $MODEL --max-seq "$T" -t "$T" -d $((GLOBAL_SEQS * T)) -x "$STEPS" -v 0 -i "$DATA")
log=$(mktemp -d)

mpirun --oversubscribe --bind-to none -np 1 "${common[@]}" -b "$GLOBAL_SEQS" --threads 2 > "$log/np1.log"
mpirun --oversubscribe --bind-to none -np 2 "${common[@]}" -b $((GLOBAL_SEQS / 2)) --threads 1 > "$log/np2.log"
# The same two ranks over the TCP transport (torchrun-style variables, no MPI world): its
# communication thread progresses the prefetching gathers and the reduce-scatters while the
# ranks compute; Open MPI progresses its non-blocking collectives only inside MPI calls.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "${common[@]}" -b $((GLOBAL_SEQS / 2)) --threads 1 > "$log/tcp$r.log" &
done
wait

avg() { grep -m1 '^average step' "$1" | awk '{print $3}'; }
ms1=$(avg "$log/np1.log"); ms2=$(avg "$log/np2.log"); ms3=$(avg "$log/tcp0.log")
echo "model: $(grep -m1 '^model:' "$log/np1.log")"
echo "global batch: $GLOBAL_SEQS x $T tokens, $STEPS steps (the first is not timed)"
printf "np=1, 2 threads:          %8.1f ms/step\n" "$ms1"
printf "np=2, 1 thread each:      %8.1f ms/step\n" "$ms2"
printf "np=2 over TCP:            %8.1f ms/step\n" "$ms3"
awk -v a="$ms1" -v b="$ms2" 'BEGIN { printf "sharded / unsharded:      %8.3f  (target <= 1.15)\n", b / a }'
awk -v a="$ms2" -v b="$ms3" 'BEGIN { printf "tcp / mpi transport:      %8.3f\n", b / a }'
echo "np=2 $(grep -m1 '^communication' "$log/np2.log")"
rm -rf "$log"
