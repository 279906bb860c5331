#!/usr/bin/env bash
# run_tests: cores 1.3, 86 s
# Sharded checkpoints through train_gpt, with real MPI ranks (oversubscribed):
#   - 10 steps + save + resume + 10 steps gives bitwise the losses of 20 uninterrupted steps
#     (np = 1, 2), also when the resumed job gives no model flags (the model is the
#     checkpoint's), and matches within the W-equivalence tolerance when the resumed run has
#     another number of ranks (saved at 4 -> resumed at 1, 2, 3; saved at 2 -> resumed at 4);
#   - model flags that differ from the checkpoint's are refused, every one named in one line;
#   - zstd-compressed and async checkpoints resume bitwise like plain ones (zstd: smaller);
#   - a rank killed with -9 mid-save leaves the previous checkpoint complete and used by
#     --resume auto, which also skips step_N.tmp and directories without a manifest;
#   - corrupted, truncated, partial, foreign-shaped and future-version checkpoints are refused
#     with a message naming the file or tensor; a save failing with ENOSPC (small tmpfs) is
#     reported and leaves the previous checkpoint intact; --ckpt-keep K keeps the newest K,
#     and pruning never deletes the checkpoint just committed (resuming from an older one).
set -u
source dev/test/lib.sh
out=$TEST_TMP
# A small GPT-2 (3 layers, 64 channels) on Tiny Shakespeare: 12 sequences of 16 tokens per
# step at every W (-b = 12 / np, no accumulation), as in test_fsdp.sh.
common=(./train_gpt --device cpu --layers 3 --channels 64 --heads 2 --max-seq 64 -t 16 -d 192 -x 20
        -v 10 --val-steps 1 -i "$TRAIN_SHARD" -j "$VAL_SHARD" --threads 1 -l 1e-3 -u 2 --seed 5)
# Resuming on another W only changes the order of floating-point sums (see test_fsdp.sh).
RTOL=1e-5
b_of() { echo $((12 / $1)); }
s10=step_00000010

# run NAME NP ARGS...: one job (the caller gives -o); output in $out/NAME.log. A job that
# hangs is killed after 120 s.
run() { local name=$1 np=$2; shift 2; run_logged "$out" 120 "$name" "$np" "${common[@]}" "$@"; }
compare() { $PYTHON dev/test/compare_losses.py "$@"; }
# The first training step a job logged ("step   11/20 | ..."), from its output.
first_step() { grep -m1 -oE '^step +[0-9]+' "$out/$1.log" | awk '{print $2}'; }
# The checkpoint `latest` names (a file holding a name or a path; a symlink also accepted).
latest_of() {
    local f=$1/latest
    if [ -L "$f" ]; then basename "$(readlink "$f")"
    elif [ -f "$f" ]; then basename "$(tr -d '\n' <"$f")"
    else echo "(no latest)"; fi
}
# committed DIR STEP_NAME: the directory holds a complete checkpoint and `latest` names it.
committed() {
    local name=$1 dir=$2 step=$3
    if [ ! -f "$dir/$step/manifest.json" ]; then
        not_ok "$name: $dir/$step/manifest.json missing (ckpt dir: $(ls "$dir" 2>&1 | tr '\n' ' '))"
    elif [ "$(latest_of "$dir")" != "$step" ]; then
        not_ok "$name: latest names '$(latest_of "$dir")', not $step"
    else
        ok "$name ($step complete, latest names it)"
    fi
}
# steps_once NAME METRICS N: training steps 1..N logged exactly once each, in order.
steps_once() {
    $PYTHON - "$@" <<'PY'
import json, sys
name, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
steps = [json.loads(l)["step"] for l in open(path) if '"loss"' in l]
want = list(range(1, n + 1))
print(f"ok - {name}" if steps == want else f"not ok - {name}: training steps logged {steps}, want 1..{n} once each")
PY
}

# ---------------------------------------------------------------------------------------
# Same W: 20 uninterrupted steps vs two jobs with the same command line (a requeued job):
# --resume auto with no checkpoint yet starts fresh and stops after step 10 (saving it);
# the second resumes from it. metrics.jsonl is appended to with global step numbers.
for np in 1 2; do
    b=$(b_of $np)
    run ref$np $np -b "$b" -o "$out/ref$np" || exit 1
    job=(-b "$b" -o "$out/split$np" --ckpt-every 10 --resume auto)
    if run split${np}_a $np "${job[@]}" --stop-at-step 10; then
        [ "$(first_step split${np}_a)" = 1 ] && ok "np=$np: --resume auto without a checkpoint starts at step 1" \
            || not_ok "np=$np: --resume auto without a checkpoint: first step '$(first_step split${np}_a)', want 1"
        committed "np=$np: --stop-at-step 10 saves step 10" "$out/split$np/ckpt" $s10
        # kept for the crash test below, before the second job adds step 20
        [ $np = 2 ] && cp -a "$out/split2/ckpt" "$out/crash_ckpt"
        if run split${np}_b $np "${job[@]}"; then
            [ "$(first_step split${np}_b)" = 11 ] && ok "np=$np: resumed job starts at step 11" \
                || not_ok "np=$np: resumed job's first step is '$(first_step split${np}_b)', want 11"
            compare "same W np=$np: 10 steps + resume + 10 = 20 uninterrupted" "$out/ref$np/metrics.jsonl" \
                "$out/split$np/metrics.jsonl" --exact --from-step 11
            steps_once "np=$np: metrics.jsonl after resume holds steps 1..20 once each" "$out/split$np/metrics.jsonl" 20
            committed "np=$np: the end of the run saves step 20" "$out/split$np/ckpt" step_00000020
        fi
    fi
done

# The model is the checkpoint's: a job resumed with no model flags (no --layers, --channels,
# --heads, --max-seq) continues the full-flag run bitwise, at np=1 and 2.
noshape=("${common[@]:0:3}" "${common[@]:11}")
[ "${common[3]} ${common[9]} ${common[11]}" = "--layers --max-seq -t" ] ||
    not_ok "test bug: common[3], [9], [11] are ${common[3]} ${common[9]} ${common[11]}, not --layers --max-seq -t"
for np in 1 2; do
    [ -d "$out/split$np/ckpt/$s10" ] || continue
    if timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np $np "${noshape[@]}" -b "$(b_of $np)" \
            -o "$out/noflags$np" --resume "$out/split$np/ckpt/$s10" > "$out/noflags$np.log" 2>&1; then
        compare "np=$np: --resume DIR without model flags = the full-flag run (bitwise)" "$out/ref$np/metrics.jsonl" \
            "$out/noflags$np/metrics.jsonl" --exact --from-step 11
    else
        not_ok "np=$np: --resume DIR without model flags: $(tail -n 3 "$out/noflags$np.log" | tr '\n' ' ')"
    fi
done

# ---------------------------------------------------------------------------------------
# Other W: saved at np=4, resumed at np=1, 2, 3; saved at np=2, resumed at np=4.
run ref4 4 -b 3 -o "$out/ref4"
if run split4_a 4 -b 3 -o "$out/split4" --ckpt-every 10 --stop-at-step 10; then
    for np in 1 2 3; do
        run w4to$np $np -b "$(b_of $np)" -o "$out/w4to$np" --resume "$out/split4/ckpt/$s10" &&
            compare "saved at np=4, resumed at np=$np" "$out/ref4/metrics.jsonl" "$out/w4to$np/metrics.jsonl" \
                --rtol $RTOL --from-step 11
    done
fi
run w2to4 4 -b 3 -o "$out/w2to4" --resume "$out/split2/ckpt/$s10" &&
    compare "saved at np=2, resumed at np=4" "$out/ref2/metrics.jsonl" "$out/w2to4/metrics.jsonl" --rtol $RTOL --from-step 11

# ---------------------------------------------------------------------------------------
# zstd and async: the same losses, bitwise, as the uninterrupted (= plain resumed) run.
job=(-b 6 -o "$out/zstd" --ckpt-every 10 --ckpt-compress zstd:3 --resume auto)
if run zstd_a 2 "${job[@]}" --stop-at-step 10 && run zstd_b 2 "${job[@]}"; then
    compare "zstd checkpoint resumes bitwise" "$out/ref2/metrics.jsonl" "$out/zstd/metrics.jsonl" --exact --from-step 11
    plain=$(du -sb "$out/split2/ckpt/$s10" | cut -f1); zst=$(du -sb "$out/zstd/ckpt/$s10" | cut -f1)
    if [ "$zst" -lt "$plain" ]; then ok "zstd checkpoint is smaller ($zst vs $plain bytes)"
    else not_ok "zstd checkpoint is not smaller: $zst vs $plain bytes"; fi
fi
job=(-b 6 -o "$out/async" --ckpt-every 10 --ckpt-async 1 --resume auto)
if run async_a 2 "${job[@]}" --stop-at-step 10; then
    committed "async: the save before --stop-at-step is committed" "$out/async/ckpt" $s10
    same=1
    for f in "$out/split2/ckpt/$s10"/rank_*.bin; do cmp -s "$f" "$out/async/ckpt/$s10/$(basename "$f")" || same=0; done
    [ $same = 1 ] && ok "async rank files are byte-identical to the synchronous ones" \
        || not_ok "async rank files differ from the synchronous ones (same state at step 10)"
    run async_b 2 "${job[@]}" &&
        compare "async checkpoint resumes bitwise" "$out/ref2/metrics.jsonl" "$out/async/metrics.jsonl" --exact --from-step 11
fi
# Async saves every 5 steps while training goes on, keeping 2: training is unchanged, exactly
# the newest two remain, and the one written while steps 16..20 ran resumes bitwise.
if run keep 2 -b 6 -o "$out/keep" --ckpt-every 5 --ckpt-async 1 --ckpt-keep 2; then
    compare "async saves every 5 steps leave training unchanged" "$out/ref2/metrics.jsonl" "$out/keep/metrics.jsonl" --exact
    left=$(cd "$out/keep/ckpt" && ls -d step_* 2>/dev/null | tr '\n' ' ')
    [ "$left" = "step_00000015 step_00000020 " ] && [ "$(latest_of "$out/keep/ckpt")" = step_00000020 ] &&
        ok "--ckpt-keep 2 keeps exactly the newest 2 ($left)" ||
        not_ok "--ckpt-keep 2: left '$left', latest '$(latest_of "$out/keep/ckpt")'; want step_00000015 step_00000020"
    run keep_resume 2 -b 6 -o "$out/keep_resume" --resume "$out/keep/ckpt/step_00000015" &&
        compare "async save taken while training continued resumes bitwise" "$out/ref2/metrics.jsonl" \
            "$out/keep_resume/metrics.jsonl" --exact --from-step 16
fi

# Rolling back: resumed from step 10 of a directory that also holds step 20 (an abandoned
# future), saving step 15 with --ckpt-keep 1. The checkpoint just committed must survive the
# pruning and stay the one `latest` names (else --resume auto silently takes step 20).
cp -a "$out/split1/ckpt" "$out/rollback_ckpt"
if run rollback 1 -b 12 -o "$out/rollback" --ckpt-dir "$out/rollback_ckpt" --resume "$out/rollback_ckpt/$s10" \
        --ckpt-every 5 --ckpt-keep 1 --stop-at-step 15; then
    committed "rollback with --ckpt-keep 1: the new step 15 survives pruning" "$out/rollback_ckpt" step_00000015
fi

# ---------------------------------------------------------------------------------------
# A rank killed with -9 while step 20 is being saved (each chunk write is slowed down by the
# test hook): the job fails, step 10 stays complete and named by latest, and --resume auto
# continues from it, skipping the half-written step_00000020.tmp, and then saves step 20 in
# its place.
crash=(-b 6 -o "$out/crash" --ckpt-dir "$out/crash_ckpt" --ckpt-every 10 --resume auto)
FSDP_TEST_CKPT_WRITE_DELAY_MS=40 timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
    -x FSDP_TEST_CKPT_WRITE_DELAY_MS "${common[@]}" "${crash[@]}" >"$out/crash.log" 2>&1 &
launcher=$!
tmpdir="$out/crash_ckpt/step_00000020.tmp"
for _ in $(seq 1 400); do   # until a rank file in step_00000020.tmp has data
    [ -n "$(find "$tmpdir" -name 'rank_*' -size +0 2>/dev/null)" ] && break
    kill -0 $launcher 2>/dev/null || break
    sleep 0.05
done
victim=$(pgrep -f "^\./train_gpt .*$out/crash_ckpt" | tail -n 1)   # a rank, not mpirun
if [ -z "$(find "$tmpdir" -name 'rank_*' -size +0 2>/dev/null)" ] || [ -z "$victim" ]; then
    not_ok "kill -9 during a save: never saw $tmpdir being written: $(tail -n 3 "$out/crash.log" | tr '\n' ' ')"
    kill $launcher 2>/dev/null; wait $launcher 2>/dev/null
else
    kill -9 "$victim"; killed_at=$SECONDS
    wait $launcher; rc=$?   # mpirun passes on the rank's 128 + 9; the 120 s timeout means a hang
    if [ $rc -eq 0 ]; then not_ok "kill -9 during a save: the job exited 0"
    elif [ $((SECONDS - killed_at)) -ge 100 ]; then not_ok "kill -9 during a save: the job hung (ended by timeout, exit $rc)"
    else ok "kill -9 of a rank during the step-20 save ends the job (exit $rc after $((SECONDS - killed_at)) s)"; fi
    [ -d "$out/crash_ckpt/step_00000020" ] && not_ok "kill -9 during a save: step_00000020 was committed anyway"
    committed "after the crash the previous checkpoint is complete" "$out/crash_ckpt" $s10
    if run crash_resume 2 -b 6 -o "$out/crash_resumed" --ckpt-dir "$out/crash_ckpt" --ckpt-every 10 --resume auto; then
        [ "$(first_step crash_resume)" = 11 ] && ok "--resume auto after the crash uses step 10 (first step 11)" \
            || not_ok "--resume auto after the crash: first step '$(first_step crash_resume)', want 11"
        compare "resumed after the crash, bitwise" "$out/ref2/metrics.jsonl" "$out/crash_resumed/metrics.jsonl" \
            --exact --from-step 11
        committed "the resumed job saves step 20 over the abandoned step_00000020.tmp" "$out/crash_ckpt" step_00000020
        left=$(cd "$out/crash_ckpt" && ls -d step_*.tmp 2>/dev/null | tr '\n' ' ')
        [ -z "$left" ] && ok "no step_N.tmp left after the next commit" || not_ok "step_N.tmp left after the next commit: $left"
    fi
fi

# --resume auto without `latest`: the highest step_N with a manifest. Decoys: a complete-
# looking step_00000030.tmp and a step_00000040 without manifest.json, both holding the
# step-20 state (a run resumed from them would start at step 21).
mkdir -p "$out/decoy"
cp -a "$out/split2/ckpt/$s10" "$out/decoy/"
cp -a "$out/split2/ckpt/step_00000020" "$out/decoy/step_00000030.tmp"
cp -a "$out/split2/ckpt/step_00000020" "$out/decoy/step_00000040" && rm -f "$out/decoy/step_00000040/manifest.json"
if run decoy 2 -b 6 -o "$out/decoy_run" --ckpt-dir "$out/decoy" --resume auto --stop-at-step 11; then
    [ "$(first_step decoy)" = 11 ] &&
        ok "--resume auto without latest skips step_N.tmp and directories without a manifest" ||
        not_ok "--resume auto without latest: first step '$(first_step decoy)', want 11 (from $s10)"
fi

# ---------------------------------------------------------------------------------------
# Refusals: copies of the np=2 step-10 checkpoint, damaged, resumed at np=1 (reads all).
src="$out/split2/ckpt/$s10"
bad() { rm -rf "$out/bad/$1"; mkdir -p "$out/bad"; cp -a "$src" "$out/bad/$1"; }
# One process without mpirun (a singleton): mpirun takes ~2 s to wind down a failed job.
resume1=("${common[@]}" -b 12 --stop-at-step 11)
# The chunk of rank_00001.bin holding most bytes: its tensor name (regex-escaped) and
# offset; the flip lands in its middle.
bad flip
read -r tensor flip_at < <($PYTHON - "$out/bad/flip" <<'PY'
import json, re, sys
d = sys.argv[1]
m = json.load(open(f"{d}/manifest.json"))
fields = m["chunk_fields"].split(",")     # chunks are rows: tensor,kind,lo,hi,file,offset,bytes,...
chunks = [dict(zip(fields, row)) for row in m["chunks"]]
c = max((c for c in chunks if c["file"] == 1), key=lambda c: c["bytes"])
at = c["offset"] + c["bytes"] // 2
with open(f"{d}/rank_00001.bin", "r+b") as f:
    f.seek(at); x = f.read(1); f.seek(at); f.write(bytes([x[0] ^ 0x10]))
print(re.escape(c["tensor"]), at)
PY
)
expect_error "flipped byte is refused naming the file and tensor" \
    "rank_00001\.bin.*$tensor([^.a-z0-9_]|\$)|$tensor([^.a-z0-9_]|\$).*rank_00001\.bin" "${resume1[@]}" -o "$out/bad_flip" --resume "$out/bad/flip"
bad trunc; truncate -s $(( $(stat -c %s "$out/bad/trunc/rank_00001.bin") / 2 )) "$out/bad/trunc/rank_00001.bin"
expect_error "truncated rank file is refused" "rank_00001\.bin" \
    "${resume1[@]}" -o "$out/bad_trunc" --resume "$out/bad/trunc"
bad missing; rm "$out/bad/missing/rank_00001.bin"
expect_error "missing rank file is refused" "rank_00001\.bin" \
    "${resume1[@]}" -o "$out/bad_missing" --resume "$out/bad/missing"
# A manifest rewritten as if saved from a 128-channel model (config and tensor shapes).
bad shape
$PYTHON - "$out/bad/shape/manifest.json" <<'PY'
import json, sys
p = sys.argv[1]; m = json.load(open(p)); hits = []
for t in m["tensors"]:                   # {"name": ..., "shape": [rows, cols]}
    if 64 in t["shape"]:
        t["shape"] = [128 if x == 64 else x for x in t["shape"]]; hits.append(t["name"])
def walk(o):                             # the model config in "state"
    if isinstance(o, dict):
        for k, v in o.items():
            if k in ("channels", "n_embd", "C") and v == 64: o[k] = 128; hits.append(k)
            else: walk(v)
    elif isinstance(o, list):
        for v in o: walk(v)
walk(m["state"])
json.dump(m, open(p, "w"), indent=1)
if not hits: print("shape edit: found no 64-channel field in the manifest", file=sys.stderr)
PY
expect_error "manifest of another model shape is refused" "manifest\.json|channels" \
    "${resume1[@]}" -o "$out/bad_shape" --resume "$out/bad/shape"
common32=("${common[@]}"); common32[6]=32   # --channels 32
[ "${common[5]}" = --channels ] || not_ok "test bug: common[5] is ${common[5]}, not --channels"
expect_error "resuming with another --channels is refused" "$s10: the checkpoint's model has --channels 64 \(given 32\)" \
    "${common32[@]}" -b 12 --stop-at-step 11 -o "$out/bad_channels" --resume "$src"
# Every conflicting flag in one line (and -m's preset is held to the checkpoint like flags).
conflict=$("${noshape[@]}" -b 12 --stop-at-step 11 -o "$out/bad_two" --resume "$src" --layers 4 --channels 32 --heads 2 2>&1)
rc=$?
want="--resume $src: the checkpoint's model has --layers 3 (given 4), --channels 64 (given 32) (see --help)"
if [ $rc -eq 1 ] && [ "$(grep -c '^error' <<<"$conflict")" -eq 1 ] && grep -qxF "error: $want" <<<"$conflict"; then
    ok "two conflicting model flags on --resume: both named in one line, exit 1 (--heads, which agrees, is not)"
else
    not_ok "two conflicting model flags on --resume: exit $rc, want one line 'error: $want', got: $(head -c 400 <<<"$conflict")"
fi
expect_error "-m d2 on a 3-layer checkpoint: the preset's fields named" \
    "the checkpoint's model has --layers 3 \(given 2 by -m d2\), --channels 64 \(given 128 by -m d2\), --max-seq 64 \(given 1024 by -m d2\)" \
    "${noshape[@]}" -b 12 --stop-at-step 11 -o "$out/bad_preset" --resume "$src" -m d2
# --plan --resume plans the checkpoint's model (no model flags given), and refuses a conflict.
if plan=$("${noshape[@]}" -b 6 --plan --plan-world 2 --resume "$src" 2>&1) &&
   grep -qxF -- "--plan: the model of $src" <<<"$plan" && grep -q '^model: GPT-2, 3 layers, 2 heads, 64 channels, max_seq 64,' <<<"$plan"; then
    ok "--plan --resume without model flags plans the checkpoint's model"
else
    not_ok "--plan --resume without model flags: $(grep -E '^(error|model|--plan)' <<<"$plan" | tr '\n' ' ')"
fi
expect_error "--plan --resume with a conflicting flag" "--resume .*$s10: the checkpoint's model has --layers 3 \(given 5\)" \
    "${noshape[@]}" -b 6 --plan --plan-world 2 --resume "$src" --layers 5
# A checkpoint from before the norm's epsilon was a config key (no state.config.norm_eps):
# resumed as 1e-5, bitwise like the same checkpoint with the key.
bad noeps
$PYTHON - "$out/bad/noeps/manifest.json" <<'PY'
import json, sys
p = sys.argv[1]; m = json.load(open(p))
del m["state"]["config"]["norm_eps"]
json.dump(m, open(p, "w"), indent=1)
PY
if run eps_key 1 -b 12 --stop-at-step 11 -o "$out/eps_key" --resume "$src" &&
   run no_eps_key 1 -b 12 --stop-at-step 11 -o "$out/no_eps_key" --resume "$out/bad/noeps"; then
    compare "a manifest without state.config.norm_eps resumes as 1e-5 (bitwise)" "$out/eps_key/metrics.jsonl" \
        "$out/no_eps_key/metrics.jsonl" --exact
fi
bad version
$PYTHON - "$out/bad/version/manifest.json" <<'PY'
import json, sys
p = sys.argv[1]; m = json.load(open(p))
keys = [k for k in m if "version" in k]
for k in keys: m[k] = 3
json.dump(m, open(p, "w"), indent=1)
if not keys: print("no version key at the top of the manifest", file=sys.stderr)
PY
expect_error "manifest of format version 3 is refused" "manifest\.json.*version|version.*manifest\.json" \
    "${resume1[@]}" -o "$out/bad_version" --resume "$out/bad/version"
bad nomanifest; rm "$out/bad/nomanifest/manifest.json"
expect_error "directory without manifest.json is refused" "nomanifest.*manifest\.json|manifest\.json.*nomanifest" \
    "${resume1[@]}" -o "$out/bad_nomanifest" --resume "$out/bad/nomanifest"
bad badjson; truncate -s 100 "$out/bad/badjson/manifest.json"
expect_error "unparsable manifest.json is refused" "manifest\.json" \
    "${resume1[@]}" -o "$out/bad_json" --resume "$out/bad/badjson"
common_t32=("${common[@]}"); common_t32[12]=32   # -t 32
[ "${common[11]}" = -t ] || not_ok "test bug: common[11] is ${common[11]}, not -t"
expect_error "resuming with another --seq-len is refused" "manifest\.json: .*seq-len 16" \
    "${common_t32[@]}" -b 6 --stop-at-step 11 -o "$out/bad_seq" --resume "$src"
expect_error "--resume of a missing directory is refused" "no_such_ckpt" \
    "${resume1[@]}" -o "$out/bad_nodir" --resume "$out/no_such_ckpt"

expect_error "--ckpt-compress lz4 is refused" "ckpt-compress.*lz4" "${resume1[@]}" -o "$out/bad_flag" --ckpt-every 5 --ckpt-compress lz4
expect_error "--ckpt-compress zstd:99 is refused" "ckpt-compress.*99" "${resume1[@]}" -o "$out/bad_flag" --ckpt-every 5 --ckpt-compress zstd:99
expect_error "--resume auto without -o or --ckpt-dir is refused" "resume auto.*(-o|ckpt-dir)" "${resume1[@]}" --resume auto

# ---------------------------------------------------------------------------------------
# ENOSPC: a tmpfs with room for 1.5 checkpoints. The save at step 5 fits, the one at step 10
# does not: the job reports it and fails, step 5 stays complete and resumes bitwise. Both
# synchronous saves and async ones (the error comes from the writer thread, reported later).
size_mib=$(( $(du -sb "$src" | cut -f1) * 3 / 2 / 1048576 + 1 ))
mnt="$out/small_fs"; mkdir -p "$mnt"
trap 'umount "$mnt" 2>/dev/null' EXIT
for mode in sync async; do
    if ! mount_err=$(mount -t tmpfs -o size=${size_mib}M tmpfs "$mnt" 2>&1); then
        ok "ENOSPC during a $mode save # skip cannot mount a tmpfs: $mount_err"
        continue
    fi
    async=0; [ $mode = async ] && async=1
    expect_error "$mode: a save failing with ENOSPC is reported (tmpfs of $size_mib MiB)" "No space left on device" \
        timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "${common[@]}" -b 6 \
        -o "$out/enospc_$mode" --ckpt-dir "$mnt" --ckpt-every 5 --ckpt-async $async
    [ -d "$mnt/step_00000010" ] && not_ok "$mode ENOSPC: step_00000010 was committed anyway"
    committed "$mode: after ENOSPC the previous checkpoint is complete" "$mnt" step_00000005
    if run enospc_resume_$mode 2 -b 6 -o "$out/enospc_resumed_$mode" --ckpt-dir "$mnt" --resume auto --stop-at-step 10; then
        [ "$(first_step enospc_resume_$mode)" = 6 ] && ok "$mode: after ENOSPC --resume auto uses step 5" \
            || not_ok "$mode: after ENOSPC --resume auto: first step '$(first_step enospc_resume_$mode)', want 6"
        compare "$mode: resumed after ENOSPC, bitwise" "$out/ref2/metrics.jsonl" "$out/enospc_resumed_$mode/metrics.jsonl" \
            --exact --from-step 6
    fi
    umount "$mnt" || not_ok "cannot unmount $mnt"
done
trap - EXIT

# HSDP (np=4, shard groups of 2): only the first replica group writes shard data (the other
# ranks' files are empty); the checkpoint resumes under plain FSDP at np=2 and matches the
# uninterrupted HSDP run.
if run hsdp_ref 4 -b 3 --shard-group-size 2 -o "$out/hsdp_ref" &&
   run hsdp_a 4 -b 3 --shard-group-size 2 -o "$out/hsdp" --ckpt-every 10 --stop-at-step 10 &&
   run hsdp_b 2 -b 6 -o "$out/hsdp" --resume auto; then
    [ ! -s "$out/hsdp/ckpt/$s10/rank_00002.bin" ] && [ -s "$out/hsdp/ckpt/$s10/rank_00000.bin" ] \
        && ok "HSDP: replicas write empty rank files" || not_ok "HSDP: replica rank files are not empty"
    compare "HSDP save (np=4, S=2) -> FSDP resume (np=2)" "$out/hsdp_ref/metrics.jsonl" "$out/hsdp/metrics.jsonl" \
        --rtol $RTOL --from-step 11
fi
