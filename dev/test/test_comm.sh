#!/usr/bin/env bash
# run_tests: cores 0.8, 24 s
# The communication layer (comm/comm.h): build/test_comm's battery over the TCP transport
# (W = 1..4, file and tcp:// rendezvous) and over MPI; then failures, which must end every
# rank with a clear message in bounded time: a rank killed mid-run, a rank that never
# arrives, a stalled rank, stale rendezvous files, mismatched run ids, duplicate ranks and
# mismatched collectives. Every launch runs under `timeout`, so a bug cannot hang the suite.
set -u
FSDP_DATA=${FSDP_DATA:-../shared/data}   # lib.sh reads it; this test needs no data
source dev/test/lib.sh
BIN=build/test_comm
TMP=${TEST_TMP:-$(mktemp -d)}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# less_than X Y: X < Y (decimals)
less_than() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

# start DIR R W RENDEZVOUS ID [ARGS...]: rank R in the background, output in DIR/out$R and
# DIR/err$R; its pid in PIDS[R].
declare -a PIDS
start() {
    local dir=$1 r=$2 w=$3 rdv=$4 id=$5; shift 5
    mkdir -p "$dir"
    timeout 60 "$BIN" --transport tcp --rank "$r" --world "$w" --rendezvous "$rdv" --run-id "$id" "$@" \
        >"$dir/out$r" 2>"$dir/err$r" &
    PIDS[$r]=$!
}

# collect LABEL DIR W: waits for ranks 0..W-1 and reports their ok/not ok lines, plus one
# failure for each rank that exited non-zero without saying why.
collect() {
    local label=$1 dir=$2 w=$3 r rc
    local -a rcs
    for ((r = 0; r < w; r++)); do wait "${PIDS[$r]}"; rcs[$r]=$?; done
    cat "$dir"/out* | grep -E '^(ok|not ok) - '
    for ((r = 0; r < w; r++)); do
        rc=${rcs[$r]}
        if [ "$rc" -ne 0 ] && ! grep -q '^not ok' "$dir/out$r"; then
            not_ok "$label: rank $r exited with status $rc: $(tail -n 2 "$dir/err$r" | tr '\n' ' ')"
        fi
    done
    if ! grep -q '^ok - ' "$dir/out0"; then not_ok "$label: rank 0 reported nothing"; fi
}

# battery LABEL W RENDEZVOUS ID [ARGS...]
battery() {
    local label=$1 w=$2 rdv=$3 id=$4; shift 4
    local dir=$TMP/$id r
    for ((r = 0; r < w; r++)); do start "$dir" "$r" "$w" "$rdv" "$id" "$@"; done
    collect "$label" "$dir" "$w"
}

RDV=$TMP/rendezvous
battery "tcp W=1" 1 "file:$RDV" w1
battery "tcp W=2" 2 "file:$RDV" w2 --big
battery "tcp W=3" 3 "file:$RDV" w3
battery "tcp W=4" 4 "file:$RDV" w4

# The mesh (process_group_split): every tp x shard layout of W = 4, 6 and 8 ranks (among them
# tp 2 over 2 shards x 2 replicas at 8, tp 3 at 6, tp 4, and tp 1 as before the mesh), each
# rank's coordinates and groups against the formula, f32 all-reduces on the TP and model
# groups, shard-group operations in flight across blocking TP collectives; and the refusals.
# mesh_layouts LABEL OUTPUT N: the run reported N layouts (a loop that skipped some would
# otherwise pass unseen).
mesh_layouts() {
    local n
    n=$(grep -c '^ok - .*: mesh --tp' <<<"$2")
    if [ "$n" -eq "$3" ]; then ok "$1: $n mesh layouts checked"
    else not_ok "$1: $n mesh layouts passed, expected $3"; fi
}
declare -A MESH_LAYOUTS=([4]=9 [6]=13 [8]=14)
for w in 4 6 8; do
    out=$(battery "tcp mesh W=$w" "$w" "file:$RDV" "mesh$w" --mesh)
    echo "$out"
    mesh_layouts "comm tcp W=$w" "$out" "${MESH_LAYOUTS[$w]}"
done
# Many ranks at once (the rendezvous's backlog and handshakes; one all_reduce).
battery "tcp W=32" 32 "file:$RDV" w32 --minimal --label "comm tcp W=32 (file rendezvous, all at once)"
PORT=$($BIN --free-port)
battery "tcp:// W=32" 32 "tcp://127.0.0.1:$PORT" t32 --minimal --label "comm tcp:// W=32 (all at once)"
left=$(ls "$RDV" 2>/dev/null | tr '\n' ' ')
if [ -z "$left" ]; then ok "comm tcp: every rendezvous file was removed"
else not_ok "comm tcp: rendezvous files left behind: $left"; fi

# tcp:// with rank 0 starting last: the others retry until it listens.
PORT=$($BIN --free-port)
dir=$TMP/tcp3
for r in 1 2; do start "$dir" $r 3 "tcp://127.0.0.1:$PORT" tcp3 --label "comm tcp:// W=3 (rank 0 last)"; done
sleep 0.5
start "$dir" 0 3 "tcp://127.0.0.1:$PORT" tcp3 --label "comm tcp:// W=3 (rank 0 last)"
collect "tcp:// W=3, rank 0 late" "$dir" 3

# Signals: SIGUSR1 every few ms at every rank (handled with SA_RESTART, as train_gpt does),
# during the rendezvous (rank 2 comes late) and the whole battery.
dir=$TMP/signals
LABEL="comm tcp W=3 under a SIGUSR1 storm"
for r in 0 1; do start "$dir" $r 3 "file:$RDV" signals --label "$LABEL"; done
(
    # Each rank's pid, once its handler is in place (the default action would end it); a pid
    # is signalled only while it is still test_comm, never a process that reused the number.
    pids=()
    for _ in $(seq 3000); do
        [ ${#pids[@]} -lt 3 ] && pids=($(sed -n 's/^# SIGUSR1 handled by pid //p' "$dir"/out* 2>/dev/null))
        for p in "${pids[@]}"; do
            name=; read -r name 2>/dev/null </proc/"$p"/comm
            [ "$name" = test_comm ] && kill -USR1 "$p" 2>/dev/null
        done
        sleep 0.002
    done
) &
STORM=$!
sleep 0.5
start "$dir" 2 3 "file:$RDV" signals --label "$LABEL"
collect "$LABEL" "$dir" 3
kill "$STORM" 2>/dev/null; wait "$STORM" 2>/dev/null
for r in 0 1 2; do
    n=$(sed -n 's/^# rank [0-9]* handled \([0-9]*\) signals$/\1/p' "$dir/out$r")
    if [ "${n:-0}" -gt 0 ]; then ok "$LABEL: rank $r handled $n signals"
    else not_ok "$LABEL: rank $r saw no signal (the storm missed it)"; fi
done

# MPI: the same battery.
if ! command -v mpirun >/dev/null; then
    ok "comm mpi W=3: battery # skip no mpirun"
else
    out=$(timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 3 "$BIN" --transport mpi --big 2>&1)
    rc=$?
    grep -E '^(ok|not ok) - ' <<<"$out"
    if [ "$rc" -ne 0 ] && ! grep -q '^not ok' <<<"$out"; then
        not_ok "comm mpi W=3: mpirun exited with status $rc: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
    fi
fi

# MPI: the mesh at 4, 6 and 8 ranks.
for w in 4 6 8; do
    if ! command -v mpirun >/dev/null; then ok "comm mpi W=$w: mesh # skip no mpirun"; continue; fi
    out=$(timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$w" "$BIN" --transport mpi --mesh 2>&1)
    rc=$?
    grep -E '^(ok|not ok) - ' <<<"$out"
    if [ "$rc" -ne 0 ] && ! grep -q '^not ok' <<<"$out"; then
        not_ok "comm mpi W=$w mesh: mpirun exited with status $rc: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
    fi
    mesh_layouts "comm mpi W=$w" "$out" "${MESH_LAYOUTS[$w]}"
done

# --- failures -----------------------------------------------------------------------------

# expect_exit LABEL DIR R LIMIT_S T0 PATTERN: rank R exited with status 1, within LIMIT_S
# seconds of T0, printing PATTERN (grep -E) on stderr.
expect_exit() {
    local label=$1 dir=$2 r=$3 limit=$4 t0=$5 pattern=$6 rc took
    wait "${PIDS[$r]}"; rc=$?
    took=$(elapsed "$t0")
    if [ "$rc" -ne 1 ]; then
        not_ok "$label: process $r exited with status $rc, expected 1: $(tail -n 2 "$dir/err$r" | tr '\n' ' ')"
    elif ! grep -qE -- "$pattern" "$dir/err$r"; then
        not_ok "$label: process $r's message does not match /$pattern/: $(tail -n 2 "$dir/err$r" | tr '\n' ' ')"
    elif ! less_than "$took" "$limit"; then
        not_ok "$label: process $r took ${took} s to exit, more than $limit s"
    else
        ok "$label: process $r exits in ${took} s ($(grep -m1 -E -- "$pattern" "$dir/err$r" | cut -c1-150))"
    fi
}

# A rank killed with SIGKILL in the middle of all-gathers: the others notice at once.
dir=$TMP/kill
for r in 0 1 2; do start "$dir" $r 3 "file:$RDV" kill --spin 30 --timeout 30; done
for _ in $(seq 100); do
    [ "$(cat "$dir"/out* 2>/dev/null | grep -c '^# spinning')" -eq 3 ] && break
    sleep 0.1
done
sleep 0.3
t0=$(now)
kill -9 "$(pgrep -P "${PIDS[1]}")"   # test_comm itself, not the timeout around it
wait "${PIDS[1]}" 2>/dev/null
expect_exit "kill -9 of rank 1 mid-run" "$dir" 0 3 "$t0" "closed its connection (during all_gather|between operations) \(it exited or died\)"
expect_exit "kill -9 of rank 1 mid-run" "$dir" 2 3 "$t0" "closed its connection (during all_gather|between operations) \(it exited or died\)"
if grep -q "rank 1 closed its connection" "$dir/err0" "$dir/err2"; then
    ok "kill -9 of rank 1 mid-run: a survivor names rank 1"
else
    not_ok "kill -9 of rank 1 mid-run: no survivor names rank 1: $(cat "$dir/err0" "$dir/err2" | tr '\n' ' ')"
fi

# A rank that never arrives: the rendezvous times out naming it.
dir=$TMP/absent
t0=$(now)
for r in 0 1; do start "$dir" $r 3 "file:$RDV" absent --timeout 3; done
expect_exit "rank 2 never arrives" "$dir" 0 6 "$t0" "rendezvous file:.*: rank 2 did not connect within 3 s \(no file .*absent.rank2\)"
expect_exit "rank 2 never arrives" "$dir" 1 6 "$t0" "rendezvous file:.*: rank 2 did not connect within 3 s"
t0=$(now)
start "$dir" 1 2 "file:$RDV" absent0 --timeout 2
expect_exit "rank 0 never arrives" "$dir" 1 5 "$t0" "rank 0's file .*absent0.rank0 did not appear within 2 s"

# A stalled rank (alive, busy elsewhere): the others give up after the timeout, and the
# stalled one exits too, as its idle communication thread sees them hang up. Every message
# must name the stalled rank, never a healthy one: rank 0 (the barrier's root) waits for rank
# 1 directly and names it; rank 2 waits for rank 0, which is healthy, and must learn rank 1's
# name from rank 0's ABORT; rank 1 finds that ABORT behind rank 0's hang-up.
dir=$TMP/stall
t0=$(now)
for r in 0 1 2; do start "$dir" $r 3 "file:$RDV" stall --timeout 2 --stall-rank 1 --stall 30; done
expect_exit "stalled rank 1" "$dir" 0 4 "$t0" "barrier on a group of 3 ranks: rank 1 made no progress for 2 s \(stalled or dead\): it has not joined the operation"
expect_exit "stalled rank 1" "$dir" 2 4 "$t0" "barrier on a group of 3 ranks: rank 1 made no progress for 2 s \(stalled or dead\); rank 0 found it"
expect_exit "stalled rank 1" "$dir" 1 5 "$t0" "rank [02] gave up on barrier #[0-9]+ of group [0-9a-f]+: rank 1 \(this rank\) made no progress for 2 s"
if grep -qE "waiting for rank [02]|rank [02] made no progress|rank [02] \(this rank\)" "$dir"/err*; then
    not_ok "stalled rank 1: a healthy rank is blamed: $(grep -hE "rank [02] made|waiting for rank [02]" "$dir"/err* | head -n 1)"
else
    ok "stalled rank 1: no message blames rank 0 or 2"
fi
# The stalled rank is the root: no rank can tell it has not joined (each sent its part and
# waits for the answer), so each names it after the grace period (a quarter of the timeout,
# at least 0.5 s), as the rank it waits for. The first to give up hangs up, rank 0's idle
# thread sees it and exits, and the other may see rank 0 close before its own timer: either
# way it names rank 0, and one of them must have named it after the grace period.
dir=$TMP/stall0
t0=$(now)
for r in 0 1 2; do start "$dir" $r 3 "file:$RDV" stall0 --timeout 2 --stall-rank 0 --stall 30; done
expect_exit "stalled root rank 0" "$dir" 1 5 "$t0" "barrier on a group of 3 ranks made no progress for 2.5 s waiting for rank 0 \(stalled or dead, or itself waiting for another rank\)|rank 0 closed its connection during barrier"
expect_exit "stalled root rank 0" "$dir" 2 5 "$t0" "barrier on a group of 3 ranks made no progress for 2.5 s waiting for rank 0 \(stalled or dead, or itself waiting for another rank\)|rank 0 closed its connection during barrier"
expect_exit "stalled root rank 0" "$dir" 0 6 "$t0" "rank [12] closed its connection between operations \(it exited or died\)"
if grep -q "made no progress for 2.5 s waiting for rank 0" "$dir/err1" "$dir/err2"; then
    ok "stalled root rank 0: named after the grace period"
else
    not_ok "stalled root rank 0: no rank named it after the grace period: $(cat "$dir/err1" "$dir/err2" | tr '\n' ' ')"
fi

# Stale rendezvous files. (a) another run id's files are never read; (b) a file with this
# run id left by a crashed attempt names a dead port; (c) or a port now held by a process of
# another launch. In (b) and (c) rank 1 starts first and must keep trying until rank 0's
# fresh file replaces the stale one.
STALE=$TMP/stale
mkdir -p "$STALE"
DEAD=$($BIN --free-port)
printf '127.0.0.1 %s vm\n' "$DEAD" >"$STALE/other.rank0"
printf 'garbage\n' >"$STALE/other.rank1"
battery "stale files of another run id" 2 "file:$STALE" fresh --quick --label "stale files of another run id"
printf '127.0.0.1 %s vm\n' "$DEAD" >"$STALE/again.rank0"
dir=$TMP/again
start "$dir" 1 2 "file:$STALE" again --quick --label "stale file with a dead port"
sleep 0.5
start "$dir" 0 2 "file:$STALE" again --quick --label "stale file with a dead port"
collect "stale file with a dead port" "$dir" 2
dir=$TMP/squat
start "$dir" 0 2 "file:$STALE" squatter --timeout 8          # holds a port, waits for its rank 1
SQUATTER=${PIDS[0]}
for _ in $(seq 50); do [ -f "$STALE/squatter.rank0" ] && break; sleep 0.1; done
cp "$STALE/squatter.rank0" "$STALE/taken.rank0"
dir=$TMP/taken
start "$dir" 1 2 "file:$STALE" taken --quick --label "stale file naming another launch's live port"
sleep 0.5
start "$dir" 0 2 "file:$STALE" taken --quick --label "stale file naming another launch's live port"
collect "stale file naming another launch's live port" "$dir" 2
kill "$SQUATTER" 2>/dev/null; wait "$SQUATTER" 2>/dev/null
left=$(cd "$STALE" && ls | grep -vE '^other\.rank[01]$|^squatter' | tr '\n' ' ')
if [ -z "$left" ]; then ok "stale files: the fresh launches removed theirs"
else not_ok "stale files: left behind: $left"; fi

# tcp:// with a rank of another launch (run id) on the same port: that rank is refused with
# a message; rank 0 waits for its own rank 1 until the timeout.
PORT=$($BIN --free-port)
dir=$TMP/tcpid
t0=$(now)
start "$dir" 0 2 "tcp://127.0.0.1:$PORT" runA --timeout 3
sleep 0.2
start "$dir" 1 2 "tcp://127.0.0.1:$PORT" runB --timeout 3
expect_exit "tcp:// run id mismatch" "$dir" 1 2 "$t0" "rank 0 refused this rank: run id mismatch: rank 0 runs 'runA', the connecting rank 'runB'"
expect_exit "tcp:// run id mismatch" "$dir" 0 6 "$t0" "tcp://127.0.0.1:$PORT: rank 1 did not connect within 3 s"

# tcp:// with two processes claiming rank 1.
PORT=$($BIN --free-port)
dir=$TMP/dup
t0=$(now)
start "$dir" 0 3 "tcp://127.0.0.1:$PORT" dup --timeout 10
start "$dir" 1 3 "tcp://127.0.0.1:$PORT" dup --timeout 10
sleep 0.3
start "$dir" 2 3 "tcp://127.0.0.1:$PORT" dup --rank 1 --timeout 10   # its second --rank wins
expect_exit "tcp:// duplicate rank (process 2 says rank 1 too)" "$dir" 0 3 "$t0" "two processes claim rank 1"
expect_exit "tcp:// duplicate rank (process 2 says rank 1 too)" "$dir" 2 3 "$t0" "refused this rank: two processes claim rank 1"
expect_exit "tcp:// duplicate rank (process 2 says rank 1 too)" "$dir" 1 3 "$t0" "rank 0 closed the connection before the world formed"

# Ranks that issue different collectives (here: sizes) fail with a message, not garbage.
dir=$TMP/mismatch
t0=$(now)
for r in 0 1; do start "$dir" $r 2 "file:$RDV" mismatch --mismatch --timeout 10; done
expect_exit "mismatched all_gather sizes" "$dir" 0 3 "$t0" "the ranks issued different collectives or sizes"
expect_exit "mismatched all_gather sizes" "$dir" 1 3 "$t0" "(the ranks issued different collectives or sizes|rank 0 closed its connection)"
