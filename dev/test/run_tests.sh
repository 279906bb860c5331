#!/usr/bin/env bash
# Runs every dev/test/test_*.sh from the repository root, shows its output, and counts the
# "ok - ..." / "not ok - ..." lines. A script that exits non-zero without reporting a
# failure counts as one failure of its own. Ends with exactly one line "N passed, M failed".
#
# Two scripts at a time where they can share the machine. A script whose header says
#     # run_tests: shares the machine
# keeps about one core busy and times nothing that another process could slow down past a
# limit; those run in a pool of TEST_JOBS (default 2) while the machine is theirs. Every
# other script (the ones that keep both cores busy through mpirun -np 2 or their own
# pools, and the ones whose checks depend on timing) runs alone, after the pool. Each
# script's output is shown whole when it ends, with its wall time and the CPU seconds its
# processes used (cpu / wall: the cores it kept busy, which is what decides whether it
# may share).
set -u
cd "$(dirname "$0")/../.."
export FSDP_DATA="${FSDP_DATA:-$(cd .. && pwd)/shared/data}"
export PYTHON="${PYTHON:-$(pwd)/.venv/bin/python}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
only="${TESTS:-}"   # e.g. TESTS="gpt2 fsdp" runs test_gpt2.sh and test_fsdp.sh only
jobs_max="${TEST_JOBS:-2}"
results=$(mktemp -d "${TMPDIR:-/tmp}/fsdp_tests.XXXXXX")
trap 'rm -rf "$results"' EXIT
passed=0; failed=0; skipped=0

# start NAME SCRIPT: runs the script in the background into $results/NAME.{out,rc,wall,cpu};
# `times` inside the job's own shell counts exactly the script's processes.
start() {
    (
        export TEST_TMP=$(mktemp -d "${TMPDIR:-/tmp}/fsdp_test_$1.XXXXXX")
        t0=$(date +%s)
        bash "$2" > "$results/$1.out" 2>&1
        echo $? > "$results/$1.rc"
        echo $(( $(date +%s) - t0 )) > "$results/$1.wall"
        times > "$results/$1.times"  # (not into a pipe: its subshell would count none)
        awk 'NR == 2 { s = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); s += a[1] * 60 + a[2] }
                       printf "%d\n", s }' "$results/$1.times" > "$results/$1.cpu"
        rm -rf "$TEST_TMP"
    ) &
    job_name[$!]=$1
}
# report NAME SCRIPT: shows a finished script's output and adds up its lines.
report() {
    local out p f s rc
    out=$(cat "$results/$1.out"); rc=$(cat "$results/$1.rc")
    echo "== $2"
    echo "$out"
    p=$(grep -c '^ok - ' <<<"$out"); f=$(grep -c '^not ok - ' <<<"$out")
    s=$(grep -c '^ok - .*# skip' <<<"$out")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "not ok - $2 exited with status $rc"; f=1
    fi
    passed=$((passed + p - s)); failed=$((failed + f)); skipped=$((skipped + s))
    echo "-- $2: $((p - s)) passed, $f failed, $s skipped ($(cat "$results/$1.wall")s, cpu $(cat "$results/$1.cpu")s)"
}
# wait_one: waits for any running script and reports it.
declare -A job_name
running=0
wait_one() {
    local pid name
    wait -n -p pid
    name=${job_name[$pid]}; unset "job_name[$pid]"
    report "$name" "dev/test/test_$name.sh"
    running=$((running - 1))
}

alone=()
for script in dev/test/test_*.sh; do
    name=$(basename "$script" .sh); name=${name#test_}
    if [ -n "$only" ] && ! [[ " $only " == *" $name "* ]]; then continue; fi
    if [ "$jobs_max" -gt 1 ] && head -n 40 "$script" | grep -q '^# run_tests: shares the machine'; then
        [ "$running" -ge "$jobs_max" ] && wait_one
        start "$name" "$script"; running=$((running + 1))
    else
        alone+=("$name")
    fi
done
while [ "$running" -gt 0 ]; do wait_one; done
for name in "${alone[@]}"; do
    start "$name" "dev/test/test_$name.sh"; running=1
    wait_one
done
# Skips (GPU tests without a GPU) are said on their own line: the last line is always
# exactly "N passed, M failed".
[ "$skipped" -gt 0 ] && echo "($skipped skipped: see the '# skip' lines above)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
