#!/usr/bin/env bash
# run_tests: cores 0.8, 22 s
# TensorBoard event files (--tensorboard, train/tensorboard.c), read back with TensorBoard's own
# reader (dev/test/tb_check.py, EventAccumulator):
#   - a run with -o writes OUTPUT/tensorboard/events.out.tfevents.*: every scalar at every step
#     equal to metrics.jsonl's (float32), validation included; a last record cut short (a kill
#     mid-write) is skipped by the reader, every earlier event kept;
#   - a run resumed from an earlier checkpoint (step 3 of 6) opens a second file whose SessionLog
#     START drops what the first run logged past the checkpoint: each step once, the resumed
#     run's values;
#   - np=2: one file (rank 0's), with train/mfu (--peak-tflops); --tensorboard DIR without -o
#     writes there;
#   - --tensorboard none writes nothing; an unwritable --tensorboard directory is refused at
#     startup with one line naming the flag and the path, exit status 1; a write error
#     (ENOSPC on a small tmpfs) ends the run with one line, exit status 1.
set -u
source dev/test/lib.sh
out=$TEST_TMP/tensorboard
mkdir -p "$out"
if ! $PYTHON -c "from tensorboard.backend.event_processing.event_accumulator import EventAccumulator" 2>"$out/import.log"; then
    ok "tensorboard event files # skip the tensorboard package cannot be imported ($(tail -n 1 "$out/import.log")): scripts/setup.sh installs it"
    exit 0
fi
# A 2-layer GPT-2 on Tiny Shakespeare, 6 steps, validation every 2.
common=(./train_gpt --device cpu --layers 2 --channels 64 --heads 2 --max-seq 64 -t 16 -d 192 -x 6
        -v 2 --val-steps 1 -i "$TRAIN_SHARD" -j "$VAL_SHARD" --threads 1 -l 1e-3 -u 2 --seed 5)

# run NAME NP ARGS...: one job; its output in $out/NAME.log.
run() { local name=$1 np=$2; shift 2; run_logged "$out" 120 "$name" "$np" "${common[@]}" "$@"; }
# check NAME TB_DIR METRICS ARGS...: tb_check.py's verdict as one line.
check() {
    local name=$1; shift
    local msg
    # (the reader's own notes, as "Purging expired events", go to stderr: kept for a failure)
    if msg=$($PYTHON dev/test/tb_check.py "$@" 2>"$out/check.err"); then ok "$name: $msg"
    else not_ok "$name: $msg $(tail -n 3 "$out/check.err" | tr '\n' ' ')"; fi
}

if run plain 1 -o "$out/plain"; then
    check "np=1 -o: OUTPUT/tensorboard" "$out/plain/tensorboard" "$out/plain/metrics.jsonl" --files 1
    check "np=1: a last record cut short" "$out/plain/tensorboard" "$out/plain/metrics.jsonl" --truncated
fi

# Interrupted after step 6 with checkpoints at 3 and 6; resumed from step 3 (as after a kill
# before the step-6 save): steps 4-6 and validation 4, 6 logged twice in metrics.jsonl.
if run first 1 -o "$out/resumed" --ckpt-every 3 && run second 1 -o "$out/resumed" --resume "$out/resumed/ckpt/step_00000003"; then
    dup=$(grep -c '"step":5,"loss"' "$out/resumed/metrics.jsonl")
    [ "$dup" = 2 ] || not_ok "resume: metrics.jsonl logs step 5 $dup time(s), expected 2 (the test's premise)"
    check "resumed from step 3: each step once, the resumed run's values" "$out/resumed/tensorboard" \
          "$out/resumed/metrics.jsonl" --files 2
fi

# (--peak-tflops: an MFU on the cpu, so train/mfu is checked too)
if run np2 2 -b 6 -o "$out/np2" --peak-tflops 0.001; then
    check "np=2: rank 0 writes one file" "$out/np2/tensorboard" "$out/np2/metrics.jsonl" --files 1
fi

# --tensorboard DIR without -o: the events there (no metrics.jsonl to compare: only counted).
if run dir_only 1 --tensorboard "$out/elsewhere"; then
    n=$(ls "$out/elsewhere" | grep -c '^events\.out\.tfevents\.[0-9]*\..*\.[0-9]*$')
    if [ "$n" = 1 ]; then ok "--tensorboard DIR without -o: one event file there"
    else not_ok "--tensorboard DIR without -o: $n event file(s) in $out/elsewhere: $(ls "$out/elsewhere" | tr '\n' ' ')"; fi
fi

if run off 1 -o "$out/off" --tensorboard none; then
    if [ ! -e "$out/off/tensorboard" ] && ! ls "$out/off" | grep -q tfevents; then
        ok "--tensorboard none: no event directory, no event file"
    else
        not_ok "--tensorboard none: $(ls -R "$out/off" | tr '\n' ' ')"
    fi
fi

# Unwritable: a path under a regular file (root may write anywhere else).
touch "$out/a_file"
expect_error "--tensorboard unwritable: refused naming the flag and path" "^error: --tensorboard $out/a_file/tb: " \
    "${common[@]}" -o "$out/unwritable" --tensorboard "$out/a_file/tb"
"${common[@]}" -o "$out/unwritable2" --tensorboard "$out/a_file/tb" >/dev/null 2>&1
rc=$?
if [ "$rc" = 1 ]; then ok "--tensorboard unwritable: exit status 1"; else not_ok "--tensorboard unwritable: exit status $rc, expected 1"; fi
# np=2: rank 0 checks, every rank agrees (run_lock_acquire), one error line in all.
msg=$(run_np 2 "${common[@]}" -b 6 --tensorboard "$out/a_file/tb" 2>&1); rc=$?
n_err=$(grep -c '^error:' <<<"$msg")
if [ "$rc" != 0 ] && [ "$n_err" = 1 ] && grep -q "^error: --tensorboard $out/a_file/tb: " <<<"$msg" && ! grep -q '^step ' <<<"$msg"; then
    ok "--tensorboard unwritable at np=2: one error line, no step, exit $rc"
else
    not_ok "--tensorboard unwritable at np=2: exit $rc, $n_err error line(s): $(head -c 300 <<<"$msg" | tr '\n' ' ')"
fi
if ! ls "$out/unwritable" 2>/dev/null | grep -q '^metrics.jsonl$' || [ ! -s "$out/unwritable/metrics.jsonl" ]; then
    ok "--tensorboard unwritable: refused before the first step"
else
    not_ok "--tensorboard unwritable: steps were logged: $(head -n 2 "$out/unwritable/metrics.jsonl" | tr '\n' ' ')"
fi

# A write error (ENOSPC: a tmpfs with one free page, the events outgrowing it) ends the run with
# one line naming the file, exit status 1, instead of going on without events.
mnt=$out/full
mkdir -p "$mnt"
trap 'umount "$mnt" 2>/dev/null' EXIT
if ! mount_err=$(mount -t tmpfs -o size=16k tmpfs "$mnt" 2>&1); then
    ok "--tensorboard write error # skip cannot mount a tmpfs: $mount_err"
else
    dd if=/dev/zero of="$mnt/filler" bs=4096 count=3 status=none 2>/dev/null
    expect_error "--tensorboard write error (ENOSPC) is fatal with one line" \
        "^error: --tensorboard: cannot write $mnt/tb/events\.out\.tfevents\..*: No space left on device" \
        "${common[@]}" -x 60 -v 30 --tensorboard "$mnt/tb"
    "${common[@]}" -x 60 -v 30 --tensorboard "$mnt/tb" >/dev/null 2>&1
    rc=$?
    if [ "$rc" = 1 ]; then ok "--tensorboard write error: exit status 1"; else not_ok "--tensorboard write error: exit status $rc, expected 1"; fi
    umount "$mnt"
fi
expect_error "--tensorboard \"\": refused" "--tensorboard: a directory, or none" "${common[@]}" --tensorboard ""
