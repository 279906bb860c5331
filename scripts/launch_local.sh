#!/usr/bin/env bash
# Starts N ranks of a command on this machine without MPI, the way torchrun does: every rank
# gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and one free
# MASTER_PORT, so train_gpt's ranks meet over its TCP transport (comm/comm_tcp.c). For a
# build without MPI (make NO_MPI=1, the default where there is no mpicc) or a machine with no
# mpirun; with MPI, `mpirun -np N` does the same job.
#
#   scripts/launch_local.sh -n 2 ./train_gpt --device cuda --comm mpi ...
#
# A rank that exits non-zero ends the others (SIGTERM, then SIGKILL 10 s later), so a failed
# job never hangs; the exit status is the first failing rank's, else 0. SIGINT, SIGTERM and
# SIGUSR1 sent to this script go to every rank (train_gpt: SIGUSR1/SIGTERM -> checkpoint,
# exit 75). MASTER_PORT from the environment is used when set.
set -u
usage() { echo "usage: scripts/launch_local.sh -n N COMMAND [ARGS...]" >&2; exit 2; }
[ $# -ge 3 ] && [ "$1" = "-n" ] || usage
n=$2; shift 2
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "launch_local: -n: expected a positive rank count, got '$n'" >&2; exit 2; }
command -v "$1" > /dev/null || { echo "launch_local: $1: not found" >&2; exit 127; }

# A port nobody listens on: the kernel picks one (bound, then released); without python, a
# random one in 20000-39999.
port=${MASTER_PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null)}
[ -n "$port" ] || port=$(( 20000 + RANDOM % 20000 ))

pids=()
for (( r = 0; r < n; r++ )); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" &
    pids+=($!)
done

forward() { kill -s "$1" "${pids[@]}" 2> /dev/null; }
trap 'forward INT' INT
trap 'forward TERM' TERM
trap 'forward USR1' USR1

# Poll rather than `wait -n`: a rank's status is collected with `wait PID` once it is gone,
# and a trapped signal only delays the next round.
status=0 killer=""
running=("${pids[@]}")
while [ ${#running[@]} -gt 0 ]; do
    still=()
    for p in "${running[@]}"; do
        if kill -0 "$p" 2> /dev/null; then still+=("$p"); continue; fi
        wait "$p"
        rc=$?
        if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then
            status=$rc
            echo "launch_local: a rank (pid $p) exited with status $rc: ending the others" >&2
            forward TERM
            ( sleep 10; kill -9 "${pids[@]}" 2> /dev/null ) &
            killer=$!
        fi
    done
    running=("${still[@]}")
    [ ${#running[@]} -gt 0 ] && sleep 0.2
done
[ -n "$killer" ] && kill "$killer" 2> /dev/null
exit "$status"
