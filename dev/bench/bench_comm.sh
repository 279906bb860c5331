#!/usr/bin/env bash
# The two transports of comm/comm.h on this machine: a 64 MiB all-gather and reduce-scatter
# (best of 5 after a warm-up) at W=2 over TCP (loopback, file rendezvous) and over MPI
# (Open MPI, shared memory). GB/s = the full 64 MiB buffer / time.
#   bash dev/bench/bench_comm.sh          (needs `make build/test_comm`)
set -eu
cd "$(dirname "$0")/../.."
make -s build/test_comm
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for r in 0 1; do
    build/test_comm --transport tcp --rank $r --world 2 --rendezvous "file:$tmp" --run-id bench \
        --minimal --bench --label "tcp W=2" > "$tmp/out$r" &
done
wait
grep -h '^# bench' "$tmp"/out*
root=(); [ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
mpirun "${root[@]}" --oversubscribe --bind-to none -np 2 build/test_comm --transport mpi --minimal --bench \
    --label "mpi W=2" | grep '^# bench'
