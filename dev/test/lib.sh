# Shared helpers for the shell tests (sourced).
TRAIN_SHARD="$FSDP_DATA/tinyshakespeare/tiny_shakespeare_train.bin"
VAL_SHARD="$FSDP_DATA/tinyshakespeare/tiny_shakespeare_val.bin"

# mpirun for tests on a small machine: any rank count, no core binding, root allowed.
run_np() {
    local np=$1; shift
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$@"
}

# peak_gpu_mem LOG: "MEASURED BUDGET" (MiB) from train_gpt's "peak GPU memory per rank: M MiB
# measured (...), budget B MiB" line, or nothing when LOG has none.
peak_gpu_mem() {
    grep -m1 '^peak GPU memory' "$1" |
        awk '{ for (i = 1; i <= NF; i++) { if ($i == "rank:") m = $(i + 1); if ($i == "budget") b = $(i + 1) }; print m, b }'
}

# run_logged DIR SECONDS NAME NP CMD...: CMD on NP ranks (mpirun), killed after SECONDS, its
# output in DIR/NAME.log; a failure is reported (the log's last lines) and returns non-zero.
run_logged() {
    local dir=$1 secs=$2 name=$3 np=$4; shift 4
    if ! timeout -k 5 "$secs" mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$@" >"$dir/$name.log" 2>&1; then
        not_ok "$name: run failed: $(tail -n 3 "$dir/$name.log" | tr '\n' ' ')"
        return 1
    fi
}

ok() { echo "ok - $*"; }
not_ok() { echo "not ok - $*"; }

# expect_error NAME PATTERN CMD...: CMD must exit non-zero and print PATTERN (grep -E).
expect_error() {
    local name=$1 pattern=$2; shift 2
    local out rc
    out=$("$@" 2>&1); rc=$?
    if [ "$rc" -eq 0 ]; then
        not_ok "$name: exited 0"
    elif [ "$rc" -ge 128 ]; then
        not_ok "$name: killed by signal $((rc - 128)): $(tail -n 2 <<<"$out" | tr '\n' ' ')"
    elif ! grep -qE -- "$pattern" <<<"$out"; then
        not_ok "$name: message does not match /$pattern/: $(head -c 300 <<<"$out" | tr '\n' ' ')"
    else
        ok "$name ($(grep -m1 -E -- "$pattern" <<<"$out" | head -c 160))"
    fi
}
