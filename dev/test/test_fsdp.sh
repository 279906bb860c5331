#!/usr/bin/env bash
# run_tests: cores 1.4, 94 s
# FSDP across real MPI processes (oversubscribed): the same 20-step run at np = 1..4 and with
# every schedule option gives the same losses; memory falls as 1/W; a dying rank ends the job.
set -u
source dev/test/lib.sh
out=$TEST_TMP
# A small GPT-2 (3 layers, 64 channels) on Tiny Shakespeare: 12 sequences of 16 tokens per step.
common=(./train_gpt --device cpu --layers 3 --channels 64 --heads 2 --max-seq 64 -t 16 -d 192 -x 20
        -v 10 --val-steps 1 -i "$TRAIN_SHARD" -j "$VAL_SHARD" --threads 1 -l 1e-3 -u 2 --seed 5)
# Differences come only from the order of floating-point sums (which ranks add what), so the
# losses agree to ~1e-6 relative over 20 steps; 1e-5 leaves a margin and still catches any
# real error (a dropped micro-batch or a wrong shard changes the loss at 1e-3 or more).
RTOL=1e-5

run() {  # run NAME NP ARGS...
    local name=$1 np=$2; shift 2
    if ! run_np "$np" "${common[@]}" -o "$out/$name" "$@" >"$out/$name.log" 2>&1; then
        not_ok "$name: run failed: $(tail -n 3 "$out/$name.log" | tr '\n' ' ')"
        return 1
    fi
}

run ref 1 -b 12 || exit 1
check() {  # check NAME NP ARGS...: run and compare against the np=1 reference
    local name=$1
    run "$@" && $PYTHON dev/test/compare_losses.py "$name" "$out/ref/metrics.jsonl" "$out/$name/metrics.jsonl" --rtol $RTOL
}
check np1_accum3          1 -b 4
check np2                 2 -b 6
check np3                 3 -b 4
check np4                 4 -b 3
check np2_accum3          2 -b 2
check np4_accum3          4 -b 1
check np2_no_sync         2 -b 2 --no-grad-sync-until-last
check np3_keep_gathered   3 -b 2 --reshard-after-forward 0
check np2_unit_layers2    2 -b 6 --fsdp-unit-layers 2
check np3_unit_layers3    3 -b 2 --fsdp-unit-layers 3 --prefetch 0
check np4_hsdp            4 -b 3 --shard-group-size 2
check np4_hsdp_accum      4 -b 1 --shard-group-size 2 --no-grad-sync-until-last
check np3_prefetch2       3 -b 2 --prefetch 2

# Same run twice: bitwise identical.
run ref_again 1 -b 12 && $PYTHON dev/test/compare_losses.py "np1 deterministic" "$out/ref/metrics.jsonl" "$out/ref_again/metrics.jsonl" --exact
run np3_again 3 -b 4 && $PYTHON dev/test/compare_losses.py "np3 deterministic" "$out/np3/metrics.jsonl" "$out/np3_again/metrics.jsonl" --exact

# The loss must actually fall (the runs above compare like with like; this checks training).
$PYTHON - "$out/ref/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
first, last = rows[0]["loss"], rows[-1]["loss"]
print(("ok - " if last < first - 0.5 else "not ok - ") + f"loss falls by more than 0.5 over 20 steps ({first:.3f} -> {last:.3f})")
PY

# Memory: the sharded state (fp32 params, grads, Adam m and v) is 16 bytes per parameter / W.
# Each rank's resident memory after setup is measured at np=1 and np=4 on a model whose
# blocks dominate: the shard budget must scale exactly as 1/W, and the measured drop must
# match the drop of the whole printed budget (within 10%).
mem_args=(./train_gpt --device cpu --layers 8 --channels 256 --heads 4 --max-seq 64 -b 1 -t 16 -x 2 -v 0
          -i "$TRAIN_SHARD" --threads 1)
mem1=$(run_np 1 "${mem_args[@]}" 2>&1); mem4=$(run_np 4 "${mem_args[@]}" -d 64 2>&1)
mib() { grep -m1 "$2" <<<"$1" | grep -oE '[0-9.]+ MiB' | head -n 1 | cut -d' ' -f1; }
shard1=$(mib "$mem1" 'sharded params'); shard4=$(mib "$mem4" 'sharded params')
total1=$(mib "$mem1" '  total'); total4=$(mib "$mem4" '  total')
peak1=$(mib "$mem1" 'resident after setup'); peak4=$(mib "$mem4" 'resident after setup')
if [ -z "$shard1" ] || [ -z "$shard4" ] || [ -z "$peak1" ] || [ -z "$peak4" ] || [ -z "$total1" ] || [ -z "$total4" ]; then
    not_ok "memory per rank: could not read the budget or the peak: $(tail -n 2 <<<"$mem4" | tr '\n' ' ')"
else
    $PYTHON - "$shard1" "$shard4" "$total1" "$total4" "$peak1" "$peak4" <<'PY'
import sys
s1, s4, t1, t4, p1, p4 = map(float, sys.argv[1:])
ratio = (p1 - p4) / (t1 - t4)
status = "ok" if abs(s4 * 4 - s1) / s1 < 0.02 and 0.9 < ratio < 1.1 else "not ok"
print(f"{status} - sharded state per rank falls as 1/W: shards {s1:.1f} -> {s4:.1f} MiB, budget {t1:.1f} -> {t4:.1f} MiB, "
      f"resident {p1:.1f} -> {p4:.1f} MiB (measured drop / budget drop = {ratio:.2f})")
PY
fi

# Activation recompute: the backward rebuilds what was not kept with the forward's kernels on
# the same inputs, so the losses are bitwise those of the run that keeps everything, at any
# W and with accumulation (np=1 reference, np=2 with 3 micro-steps against np2_accum3).
run recompute_full 1 -b 12 --recompute full &&
    $PYTHON dev/test/compare_losses.py "--recompute full == none, np=1 (bitwise)" "$out/ref/metrics.jsonl" "$out/recompute_full/metrics.jsonl" --exact
run recompute_selective 1 -b 12 --recompute selective &&
    $PYTHON dev/test/compare_losses.py "--recompute selective == none, np=1 (bitwise)" "$out/ref/metrics.jsonl" "$out/recompute_selective/metrics.jsonl" --exact
run np2_accum3_full 2 -b 2 --recompute full &&
    $PYTHON dev/test/compare_losses.py "--recompute full == none, np=2 with 3 micro-steps (bitwise)" "$out/np2_accum3/metrics.jsonl" "$out/np2_accum3_full/metrics.jsonl" --exact
run np3_selective_units2 3 -b 4 --recompute selective --fsdp-unit-layers 2 &&
    $PYTHON dev/test/compare_losses.py "--recompute selective, np=3, 2-block units (within 1e-5 of np=1)" "$out/ref/metrics.jsonl" "$out/np3_selective_units2/metrics.jsonl" --rtol $RTOL

# What recompute saves, measured: resident memory after setup (the activations are allocated
# and touched by then) against the printed budget, on a model whose activations dominate
# (8 blocks of 256 channels, 8 x 128 tokens). Per block and token, none keeps 16 C values
# (ln1, qkv 3C, atty, residual2, ln2, fch 4C, fch_gelu 4C, residual3) plus statistics,
# selective drops ln1, ln2 and fch_gelu (6 C), full keeps residual3 only; the drop of the
# activations line must be (L - 1) x what a block no longer keeps, and the resident drop the
# budget's (within 10%).
rc_args=(./train_gpt --device cpu --layers 8 --channels 256 --heads 4 --max-seq 128 -b 8 -t 128 -x 1 -v 0
         -i "$TRAIN_SHARD" --threads 1)
rc_none=$(run_np 1 "${rc_args[@]}" 2>&1); rc_sel=$(run_np 1 "${rc_args[@]}" --recompute selective 2>&1)
rc_full=$(run_np 1 "${rc_args[@]}" --recompute full 2>&1)
vals=()
for o in "$rc_none" "$rc_sel" "$rc_full"; do
    vals+=("$(mib "$o" '  activations')" "$(mib "$o" '  total')" "$(mib "$o" 'resident after setup')")
done
if [[ " ${vals[*]} " == *"  "* ]] || [ ${#vals[@]} -ne 9 ]; then
    not_ok "recompute memory: could not read the budget or the resident figure: $(tail -n 2 <<<"$rc_full" | tr '\n' ' ')"
else
    $PYTHON - "${vals[@]}" <<'PY'
import sys
a0, t0, r0, a1, t1, r1, a2, t2, r2 = map(float, sys.argv[1:])
L, C, BT, NH = 8, 256, 8 * 128, 4
MiB = 1024 * 1024
# fp32 per value; statistics: 4 floats per row (two LayerNorms), lse NH per row
sel_drop = (L - 1) * BT * 6 * C * 4 / MiB
full_drop = (L - 1) * BT * (15 * C + 4 + NH) * 4 / MiB
ok = abs((a0 - a1) - sel_drop) < 0.2 and abs((a0 - a2) - full_drop) < 0.2
rs = [(r0 - r) / (t0 - t) for r, t in ((r1, t1), (r2, t2))]
ok = ok and all(0.9 < x < 1.1 for x in rs)
print(("ok" if ok else "not ok") + f" - recompute memory: activations {a0:.1f} / {a1:.1f} / {a2:.1f} MiB (none / selective / full; "
      f"formula drops {sel_drop:.1f}, {full_drop:.1f}); resident after setup {r0:.1f} / {r1:.1f} / {r2:.1f} MiB, "
      f"measured drop / budget drop = {rs[0]:.2f}, {rs[1]:.2f}")
PY
fi

# A rank killed with SIGKILL mid-run: the job must end (non-zero) promptly, not hang.
death_dir="$out/death"
run_np 3 ./train_gpt --device cpu --layers 2 --channels 64 --heads 2 --max-seq 64 -b 2 -t 16 -x 100000 -v 0 \
    -i "$TRAIN_SHARD" --threads 1 -o "$death_dir" >"$out/death.log" 2>&1 &
launcher=$!
for _ in $(seq 1 100); do [ -s "$death_dir/metrics.jsonl" ] && break; sleep 0.2; done
victim=$(pgrep -f "train_gpt.*$death_dir" | tail -n 1)
if [ -z "$victim" ]; then
    not_ok "killed rank ends the job: the run did not start: $(tail -n 3 "$out/death.log" | tr '\n' ' ')"
    kill "$launcher" 2>/dev/null
else
    kill -9 "$victim"
    start=$(date +%s.%N)
    for _ in $(seq 1 300); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$launcher" 2>/dev/null; then
        not_ok "killed rank ends the job: still running 30 s after kill -9 of rank pid $victim"
        pkill -9 -f "train_gpt.*$death_dir"; kill -9 "$launcher" 2>/dev/null
    else
        wait "$launcher"; rc=$?
        secs=$(echo "$(date +%s.%N) - $start" | bc)
        if [ "$rc" -ne 0 ]; then ok "killed rank ends the job (exit $rc after ${secs}s)"
        else not_ok "killed rank ends the job: mpirun exited 0"; fi
    fi
fi
