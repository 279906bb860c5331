#!/usr/bin/env bash
# Sharded-checkpoint throughput for a d12-sized state (124M parameters x fp32 param, Adam m,
# Adam v = 1.5 GB), on the CPU build (the training part is a few tiny steps of 64 tokens):
#   - save and load GB/s at np=1 and np=2, against a plain sequential write + fsync of the same
#     number of bytes and a sequential read of the same rank files on the same disk, measured
#     in the same run (target: checkpoint >= 80% of the baseline, uncompressed). Disks (virtual
#     ones above all) are noisy, so saves and baseline writes are repeated 3 times (min /
#     median / max), and each cold load is followed by its baseline reads (buffered, as `cat`
#     reads; and O_DIRECT, the device's own speed, shown for information);
#   - zstd (level 3): compression ratio, save and load speed, for the byte-shuffled chunks
#     --ckpt-compress zstd writes (codec zstd_shuffle) and for plain zstd of the fp32 bytes
#     (the former codec, written with FSDP_TEST_CKPT_ZSTD_PLAIN=1) on the same state;
#   - async vs synchronous saves: how long the training loop is blocked per save (target:
#     async < 10% of sync), and how much the background write slows the steps it overlaps.
# Reads are cold: before every load and baseline read the files are dropped from the page
# cache with posix_fadvise(DONTNEED) (no root needed; fincore confirms it when installed).
# Writes go through the page cache and end with fsync, like the checkpoint writer's.
#   usage: dev/bench/bench_checkpoint.sh     (BENCH_DIR=DIR: where to write, default out/)
#   needs about 10 GB free there; everything written is deleted at the end. ~5 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA="${FSDP_DATA:-../shared/data}/tinyshakespeare/tiny_shakespeare_train.bin"
[ -f "$DATA" ] || DATA=data/tinyshakespeare/tiny_shakespeare_train.bin
PY=${PYTHON:-python3}; [ -x "$PY" ] || PY=python3
IO=dev/bench/bench_checkpoint_io.py
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
CORES=$(nproc)
REPS=3

parent=${BENCH_DIR:-out}
mkdir -p "$parent"
avail=$(df -B1 --output=avail "$parent" | tail -n 1)
if [ "$avail" -lt $((10 * 1000 * 1000 * 1000)) ]; then
    echo "bench_checkpoint: only $((avail / 1000000)) MB free under $parent; need 10000 MB (set BENCH_DIR)" >&2
    exit 1
fi
B=$(mktemp -d "$parent/bench_checkpoint.XXXXXX")
trap 'rm -rf "$B"' EXIT
echo "disk: $(df -h --output=source,fstype,size,avail "$B" | tail -n 1 | tr -s ' ')  ($B)"
echo "cores: $CORES; GB = 1e9 bytes; loads and baseline reads are cold (posix_fadvise DONTNEED per file)"

train() {  # train NP LOG ARGS...
    local np=$1 log=$2; shift 2
    if ! mpirun --oversubscribe --bind-to none -np "$np" ./train_gpt --device cpu -m d12 -b 1 -t 64 -v 0 \
            -i "$DATA" --threads $((CORES / np > 0 ? CORES / np : 1)) "$@" >"$log" 2>&1; then
        echo "bench_checkpoint: train_gpt failed ($log):" >&2; tail -n 5 "$log" >&2; exit 1
    fi
}
# Seconds of every synchronous save / async snapshot / load printed in a log, one a line.
saved_s() { sed -nE 's/^checkpoint step [0-9]+: saved .* in ([0-9.]+) s .*/\1/p' "$1"; }
snap_s() { sed -nE 's/^checkpoint step [0-9]+: .* snapshotted in ([0-9.]+) s.*/\1/p' "$1"; }
loaded_s() { sed -nE 's/^resumed from .*: loaded .* in ([0-9.]+) s .*/\1/p' "$1"; }
blocked() { grep -m1 '^checkpointing blocked training' "$1" | sed 's/^checkpointing //'; }
rank_bytes() { cat "$1"/rank_*.bin | wc -c; }
# Sum of the step times (ms) of steps FROM..TO in a log.
steps_ms() { awk -v a="$2" -v b="$3" '/^step/ { split($2, s, "/"); if (s[1] >= a && s[1] <= b) for (i = 1; i < NF; i++) if ($(i + 1) == "ms") t += $i }
                                      END { printf "%.0f", t }' "$1"; }
# min / median / max of numbers on stdin, and the median alone
stats() { sort -g | awk '{ v[NR] = $1 } END { printf "%s / %s / %s", v[1], v[int((NR + 1) / 2)], v[NR] }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
gbs() { awk -v b="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.3f", b / s / 1e9; else print "?" }'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.0f%%", 100 * a / b; else print "?" }'; }
cold() {
    $PY $IO evict "$@"
    if command -v fincore >/dev/null; then
        find "$@" -type f -name '*.bin' -exec fincore -b -n -o RES {} + |
            awk '{ s += $1 } END { if (s > 0) print "warning: " s " bytes still in the page cache" }'
    fi
}
# base_write BYTES new|recycled: REPS sequential write+fsync timings (seconds, one a line).
#   new: REPS new files, all kept until the end, as checkpoints are (--ckpt-keep 3): every
#        write needs page-cache pages the kernel has not just freed;
#   recycled: each file deleted before the next is written, which reuses the freed pages.
# On a VM the two differ ~2x (memory the guest has not used recently is slow to fault in).
base_write() {
    for i in $(seq $REPS); do
        $PY $IO write "$B/seq$i.bin" "$1" | cut -d' ' -f1
        if [ "$2" = recycled ]; then rm -f "$B/seq$i.bin"; sync; fi
    done
    rm -f "$B"/seq*.bin; sync
}
row() { printf "%-28s %-24s %-24s %-10s %s\n" "$@"; }
table=()
add_row() {  # add_row NAME BYTES CKPT_SECONDS... -- BASELINE_SECONDS...
    local name=$1 bytes=$2; shift 2
    local ck=() bl=() side=ck
    for x in "$@"; do if [ "$x" = -- ]; then side=bl; elif [ $side = ck ]; then ck+=("$x"); else bl+=("$x"); fi; done
    local ckm blm
    ckm=$(printf '%s\n' "${ck[@]}" | median); blm=$(printf '%s\n' "${bl[@]}" | median)
    table+=("$(row "$name" "$(printf '%s\n' "${ck[@]}" | stats) s" "$(printf '%s\n' "${bl[@]}" | stats) s" \
                "$(gbs "$bytes" "$ckm") GB/s" "vs $(gbs "$bytes" "$blm") GB/s = $(pct "$blm" "$ckm")")")
}

# ---------------------------------------------------------------------------------------
# np=1, synchronous: 12 steps saving every 4 (3 saves; also the sync side of the async
# comparison). np=2: 3 steps saving every step. Then the same number of bytes written
# sequentially 3 times (new files, then recycled pages); 3 cold loads, each followed by cold
# sequential reads of the same rank files (buffered, then O_DIRECT); one warm load.
train 1 "$B/sync1.log" -o "$B/np1" -x 12 --ckpt-every 4
train 2 "$B/sync2.log" -o "$B/np2" -x 3 --ckpt-every 1
for np in 1 2; do
    last=$([ $np = 1 ] && echo 12 || echo 3)
    ck="$B/np$np/ckpt/$(printf 'step_%08d' "$last")"
    bytes=$(rank_bytes "$ck")
    [ $np = 1 ] && raw_bytes=$bytes
    mapfile -t bw < <(base_write "$bytes" new)
    add_row "save np=$np (raw)" "$bytes" $(saved_s "$B/sync$np.log") -- "${bw[@]}"
    mapfile -t bwr < <(base_write "$bytes" recycled)
    add_row "  vs recycled pages (info)" "$bytes" $(saved_s "$B/sync$np.log") -- "${bwr[@]}"
    br=(); bd=()
    for i in $(seq $REPS); do
        cold "$B/np$np/ckpt"
        train $np "$B/load${np}_$i.log" -o "$B/load$np" -x $((last + 2)) --resume "$ck" --stop-at-step $((last + 1))
        br+=("$($PY $IO read "$ck"/rank_*.bin | cut -d' ' -f1)")
        bd+=("$($PY $IO read-direct "$ck"/rank_*.bin | cut -d' ' -f1)")
    done
    add_row "load np=$np (raw, cold)" "$bytes" $(cat "$B"/load${np}_*.log | loaded_s /dev/stdin) -- "${br[@]}"
    add_row "  vs O_DIRECT read (info)" "$bytes" $(cat "$B"/load${np}_*.log | loaded_s /dev/stdin) -- "${bd[@]}"
    # warm: the files in the page cache (read just before; the cold loads read them with
    # O_DIRECT, which leaves the cache as it was, and the baseline reads evict them first)
    cat "$ck"/rank_*.bin > /dev/null
    train $np "$B/warm$np.log" -o "$B/warm$np" -x $((last + 2)) --resume "$ck" --stop-at-step $((last + 1))
    warm_load[$np]=$(loaded_s "$B/warm$np.log")
    rm -rf "$B/np$np" "$B/load$np" "$B/warm$np"
done

# ---------------------------------------------------------------------------------------
# zstd (default level 3) at np=2: 2 saves, one cold load; byte-shuffled (what --ckpt-compress
# zstd writes), then plain (the former codec) on the same state.
declare -A stored zsave zload
for kind in shuffle plain; do
    [ $kind = plain ] && export FSDP_TEST_CKPT_ZSTD_PLAIN=1   # (local ranks inherit it)
    train 2 "$B/zstd.log" -o "$B/zstd" -x 2 --ckpt-every 1 --ckpt-compress zstd
    unset FSDP_TEST_CKPT_ZSTD_PLAIN
    ck="$B/zstd/ckpt/step_00000002"
    grep -q "\"zstd$([ $kind = shuffle ] && echo _shuffle)\"" "$ck/manifest.json" ||
        { echo "bench_checkpoint: $ck is not $kind zstd" >&2; exit 1; }
    stored[$kind]=$(rank_bytes "$ck"); zsave[$kind]=$(saved_s "$B/zstd.log" | median)
    cold "$B/zstd/ckpt"
    train 2 "$B/zload.log" -o "$B/zload" -x 4 --resume "$ck" --stop-at-step 3
    zload[$kind]=$(loaded_s "$B/zload.log")
    rm -rf "$B/zstd" "$B/zload"
done

# ---------------------------------------------------------------------------------------
# Async at np=1: the same 12 steps saving every 4. The first save allocates (and faults in)
# the snapshot buffer; the later ones reuse it.
train 1 "$B/async1.log" -o "$B/async" -x 12 --ckpt-every 4 --ckpt-async 1
rm -rf "$B/async"
mapfile -t sync_b < <(saved_s "$B/sync1.log"); mapfile -t async_b < <(snap_s "$B/async1.log")
over_sync=$(steps_ms "$B/sync1.log" 5 12); over_async=$(steps_ms "$B/async1.log" 5 12)
step_ms=$(awk -v t="$(steps_ms "$B/sync1.log" 2 4)" 'BEGIN { printf "%.0f", t / 3 }')

echo
echo "model: $(grep -m1 '^model:' "$B/sync1.log" | sed 's/^model: //')"
echo "state: $raw_bytes bytes in the rank files (params + Adam m + v, fp32)"
echo
row "" "checkpoint min/med/max" "baseline min/med/max" "ckpt (med)" "baseline (med) = ratio (target >= 80%)"
printf '%s\n' "${table[@]}"
echo "warm loads (files in the page cache): np=1 ${warm_load[1]} s = $(gbs "$raw_bytes" "${warm_load[1]}") GB/s," \
     "np=2 ${warm_load[2]} s = $(gbs "$raw_bytes" "${warm_load[2]}") GB/s"
echo "(baseline: one file, 16 MiB writes then fsync, into new files kept like checkpoints (the target's"
echo " reference) or into recycled page-cache pages; reads: the checkpoint's own rank files after eviction,"
echo " one after the other in 16 MiB reads, through the page cache (the target's reference) or O_DIRECT."
echo " Checkpoint times are train_gpt's own: save = ckpt_save incl. manifest and commit; load = open + read"
echo " + checksum + copy into the shards.)"
echo
for kind in shuffle plain; do
    name=$([ $kind = shuffle ] && echo "zstd_shuffle (--ckpt-compress zstd)" || echo "plain zstd (former codec)")
    echo "$name, level 3, np=2: stored ${stored[$kind]} of $raw_bytes bytes, ratio $(awk -v a="$raw_bytes" -v b="${stored[$kind]}" 'BEGIN{printf "%.3f", a/b}') (raw/stored)"
    echo "  save ${zsave[$kind]} s (median of 2) = $(gbs "$raw_bytes" "${zsave[$kind]}") GB/s of state ($(gbs "${stored[$kind]}" "${zsave[$kind]}") GB/s to disk)"
    echo "  load ${zload[$kind]} s (cold) = $(gbs "$raw_bytes" "${zload[$kind]}") GB/s of state"
done
echo
echo "async vs sync, np=1, 12 steps of ~${step_ms} ms, a save every 4 steps (at 4, 8, 12):"
echo "  training blocked per save, sync:  ${sync_b[*]} s"
echo "  training blocked per save, async: ${async_b[*]} s (the first allocates the snapshot buffer)"
echo "  async / sync, median of the saves after the first: $(pct "$(printf '%s\n' "${async_b[@]:1}" | median)" "$(printf '%s\n' "${sync_b[@]:1}" | median)") (target < 10%)"
echo "  steps 5..12 (overlapping the background writes): $over_async ms in all vs $over_sync ms in the sync run" \
     "(+$(( (over_async - over_sync) / 2 )) ms per save)"
echo "  whole run, sync:  $(blocked "$B/sync1.log")"
echo "  whole run, async: $(blocked "$B/async1.log")  (includes waiting for the last write)"
