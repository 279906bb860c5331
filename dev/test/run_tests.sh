#!/usr/bin/env bash
# Runs every dev/test/test_*.sh from the repository root, shows its output, and counts the
# "ok - ..." / "not ok - ..." lines. A script that exits non-zero without reporting a
# failure counts as one failure of its own. Ends with exactly one line "N passed, M failed".
#
# Several scripts at a time, as many as the cores hold. A script's header says how many
# cores it keeps busy and for how long, measured on a quiet 2-core machine (its CPU seconds
# over its wall time, and that wall time):
#     # run_tests: cores 1.5, 92 s
# Scripts start in the order of their work (cores x seconds), each as soon as the running
# ones' cores plus its own fit in TEST_CORES (default: the machine's cores x 1.25; a little over-subscription keeps
# the cores busy through a script's quiet moments and costs nothing else). A script
# without the line (one whose checks time things that a neighbour could push past a limit:
# kills during a save, signals to a fake Slurm, Slurm's daemons) runs alone. Each script's
# output is shown whole when it ends, with its wall time and the CPU seconds its processes
# used, from which its line's figure comes.
set -u
cd "$(dirname "$0")/../.."
export FSDP_DATA="${FSDP_DATA:-$(cd .. && pwd)/shared/data}"
export PYTHON="${PYTHON:-$(pwd)/.venv/bin/python}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
only="${TESTS:-}"   # e.g. TESTS="gpt2 fsdp" runs test_gpt2.sh and test_fsdp.sh only
# Cores in tenths (bash counts in integers).
budget=$(awk -v c="${TEST_CORES:-}" -v n="$(nproc)" 'BEGIN { if (c == "") c = n * 1.25; printf "%d", c * 10 + 0.5 }')
[ "$budget" -ge 10 ] || budget=10
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
# wait_one: waits for any running script, reports it and gives back its cores.
declare -A job_name cores
running=0; used=0
wait_one() {
    local pid name
    wait -n -p pid
    name=${job_name[$pid]}; unset "job_name[$pid]"
    report "$name" "dev/test/test_$name.sh"
    running=$((running - 1)); used=$((used - cores[$name]))
}

# The queue, the most work (cores x seconds) first, so that the longest scripts start at
# once and the short ones fill the cores around them; the scripts without a cores line come
# last and run alone.
queue=()
for script in dev/test/test_*.sh; do
    name=$(basename "$script" .sh); name=${name#test_}
    if [ -n "$only" ] && ! [[ " $only " == *" $name "* ]]; then continue; fi
    line=$(sed -n '1,40s/^# run_tests: cores \([0-9.]*\), \([0-9]*\) s.*/\1 \2/p' "$script" | head -n 1)
    if [ -n "$line" ]; then
        read -r c work < <(awk -v c="${line% *}" -v t="${line#* }" 'BEGIN { c = int(c * 10 + 0.5); if (c < 1) c = 1; print c, c * t }')
    else
        c=$budget; work=0
    fi
    cores[$name]=$c
    queue+=("$work $name")
done
[ ${#queue[@]} -gt 0 ] && mapfile -t queue < <(printf '%s\n' "${queue[@]}" | sort -k1,1nr -k2,2 | cut -d' ' -f2)
while [ ${#queue[@]} -gt 0 ]; do
    rest=()
    for name in "${queue[@]}"; do
        if [ "$running" -eq 0 ] || [ $((used + cores[$name])) -le "$budget" ]; then
            start "$name" "dev/test/test_$name.sh"
            running=$((running + 1)); used=$((used + cores[$name]))
        else
            rest+=("$name")
        fi
    done
    queue=("${rest[@]}")
    [ "$running" -gt 0 ] && wait_one
done
while [ "$running" -gt 0 ]; do wait_one; done
# Skips (GPU tests without a GPU) are said on their own line: the last line is always
# exactly "N passed, M failed".
[ "$skipped" -gt 0 ] && echo "($skipped skipped: see the '# skip' lines above)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
