#!/usr/bin/env bash
# Runs every dev/test/test_*.sh from the repository root, shows its output, and counts the
# "ok - ..." / "not ok - ..." lines. A script that exits non-zero without reporting a
# failure counts as one failure of its own. Ends with exactly one line "N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
export FSDP_DATA="${FSDP_DATA:-$(cd .. && pwd)/shared/data}"
export PYTHON="${PYTHON:-$(pwd)/.venv/bin/python}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
passed=0; failed=0; skipped=0
only="${TESTS:-}"   # e.g. TESTS="gpt2 fsdp" runs test_gpt2.sh and test_fsdp.sh only
for script in dev/test/test_*.sh; do
    name=$(basename "$script" .sh); name=${name#test_}
    if [ -n "$only" ] && ! [[ " $only " == *" $name "* ]]; then continue; fi
    export TEST_TMP=$(mktemp -d "${TMPDIR:-/tmp}/fsdp_test_${name}.XXXXXX")
    echo "== $script"
    start=$(date +%s)
    out=$(bash "$script" 2>&1); rc=$?
    echo "$out"
    p=$(grep -c '^ok - ' <<<"$out"); f=$(grep -c '^not ok - ' <<<"$out")
    s=$(grep -c '^ok - .*# skip' <<<"$out")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "not ok - $script exited with status $rc"; f=1
    fi
    passed=$((passed + p - s)); failed=$((failed + f)); skipped=$((skipped + s))
    echo "-- $script: $((p - s)) passed, $f failed, $s skipped ($(( $(date +%s) - start ))s)"
    rm -rf "$TEST_TMP"
done
# Skips (GPU tests without a GPU) are said on their own line: the last line is always
# exactly "N passed, M failed".
[ "$skipped" -gt 0 ] && echo "($skipped skipped: see the '# skip' lines above)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
