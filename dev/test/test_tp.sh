#!/usr/bin/env bash
# run_tests: cores 1.3, 79 s
# Tensor parallelism composed with FSDP on the cpu device (--tp N: TP groups of N consecutive
# ranks, FSDP/HSDP over the data-parallel ranks of each TP position, Megatron's splits with
# sequence parallel and a vocabulary-parallel embedding and loss): the same 20-step runs as
# test_fsdp.sh's np=1 reference at (TP, DP) = (2,1), (2,2), (2,3), (4,1), (2,2) with HSDP, with
# micro-steps, with --no-grad-sync-until-last, with 2-block units kept gathered, over the TCP
# transport, GPT-2 and Llama with grouped-query attention;
# a TP run twice and recompute on/off at TP 2 bitwise; samples; the refusals; the TP bytes a
# run counts per step equal the planner's for the same flags.
set -u
source dev/test/lib.sh
out=$TEST_TMP
SECONDS=0
lap() { echo "# $1: ${SECONDS}s"; SECONDS=0; }  # a section's time (comment: not a check)
# 12 sequences of 16 tokens per step; 4 heads, MLP 256, padded vocabulary 50304: TP 2 and 4 divide them.
gpt2=(./train_gpt --device cpu --layers 2 --channels 64 --heads 4 --max-seq 64 -t 16 -d 192 -x 20
      -v 10 --val-steps 1 -i "$TRAIN_SHARD" -j "$VAL_SHARD" --threads 1 -l 1e-3 -u 2 --seed 5)
llama=(./train_gpt --device cpu --arch llama3 --layers 2 --channels 64 --heads 4 --kv-heads 2 --ffn-dim 96 --max-seq 64
       -t 16 -d 192 -x 20 -v 10 --val-steps 1 -i "$TRAIN_SHARD" -j "$VAL_SHARD" --threads 1 -l 1e-3 -u 2 --seed 5)
# As test_fsdp.sh: the runs differ only in the order of floating-point sums.
RTOL=1e-5

run() {  # run NAME NP ARGS...
    local name=$1 np=$2; shift 2
    run_logged "$out" 300 "$name" "$np" "$@" -o "$out/$name"
}
check() {  # check REF NAME NP ARGS...: run NAME and compare it with REF's losses
    local ref=$1 name=$2
    shift 1
    run "$@" && $PYTHON dev/test/compare_losses.py "$name" "$out/$ref/metrics.jsonl" "$out/$name/metrics.jsonl" --rtol $RTOL
}

run gpt2_ref 1 "${gpt2[@]}" -b 12 || exit 1
check gpt2_ref gpt2_tp2_dp1       2 "${gpt2[@]}" -b 12 --tp 2
check gpt2_ref gpt2_tp2_dp2       4 "${gpt2[@]}" -b 6 --tp 2
check gpt2_ref gpt2_tp2_dp3       6 "${gpt2[@]}" -b 4 --tp 2
check gpt2_ref gpt2_tp4_dp1       4 "${gpt2[@]}" -b 12 --tp 4
check gpt2_ref gpt2_tp2_hsdp      4 "${gpt2[@]}" -b 6 --tp 2 --shard-group-size 1
check gpt2_ref gpt2_tp2_accum3    4 "${gpt2[@]}" -b 2 --tp 2
check gpt2_ref gpt2_tp2_no_sync   4 "${gpt2[@]}" -b 2 --tp 2 --no-grad-sync-until-last
check gpt2_ref gpt2_tp2_units     4 "${gpt2[@]}" -b 6 --tp 2 --fsdp-unit-layers 2 --reshard-after-forward 0
# Over the TCP transport (ranks started torchrun-style): its one communication thread runs the
# shard group's prefetched gathers and the TP group's collectives in the order every rank issues them.
if timeout 300 scripts/launch_local.sh -n 4 "${gpt2[@]}" -b 6 --tp 2 --prefetch 2 -o "$out/gpt2_tp2_tcp" > "$out/gpt2_tp2_tcp.log" 2>&1; then
    grep -q "rank(s) via [a-z]* (tcp)" "$out/gpt2_tp2_tcp.log" || not_ok "gpt2_tp2_tcp: not on the TCP transport: $(grep -m1 'rank(s) via' "$out/gpt2_tp2_tcp.log")"
    $PYTHON dev/test/compare_losses.py gpt2_tp2_tcp "$out/gpt2_ref/metrics.jsonl" "$out/gpt2_tp2_tcp/metrics.jsonl" --rtol $RTOL
else
    not_ok "gpt2_tp2_tcp: run failed: $(tail -n 3 "$out/gpt2_tp2_tcp.log" | tr '\n' ' ')"
fi
lap "GPT-2 W-equivalence"

run llama_ref 1 "${llama[@]}" -b 12 || exit 1
check llama_ref llama_tp2_dp1     2 "${llama[@]}" -b 12 --tp 2
check llama_ref llama_tp2_dp2     4 "${llama[@]}" -b 6 --tp 2
check llama_ref llama_tp2_accum3  4 "${llama[@]}" -b 2 --tp 2 --no-grad-sync-until-last
lap "Llama GQA W-equivalence"

# The same TP run twice, and recompute on or off, are bitwise equal (recompute reruns the
# forward's kernels and collectives on the same inputs).
exact() {  # exact NAME REF CANDIDATE
    $PYTHON dev/test/compare_losses.py "$1" "$out/$2/metrics.jsonl" "$out/$3/metrics.jsonl" --exact
}
run gpt2_tp2_again 2 "${gpt2[@]}" -b 12 --tp 2 && exact "TP 2 twice (bitwise)" gpt2_tp2_dp1 gpt2_tp2_again
run gpt2_tp2_full 2 "${gpt2[@]}" -b 12 --tp 2 --recompute full &&
    exact "TP 2: --recompute full == none (bitwise)" gpt2_tp2_dp1 gpt2_tp2_full
run llama_tp2_selective 2 "${llama[@]}" -b 12 --tp 2 --recompute selective &&
    exact "TP 2 Llama: --recompute selective == none (bitwise)" llama_tp2_dp1 llama_tp2_selective
lap "bitwise"

# The setup says the mesh; the loss falls; a sample at TP 2 (each rank's vocabulary range of
# the logits gathered) is the same text as at TP 1 on the same weights and coins.
grep -q "^tensor parallel: groups of 2 rank(s) (sequence parallel), 2 data-parallel rank(s)" "$out/gpt2_tp2_dp2.log" &&
    ok "the setup names the mesh" || not_ok "no 'tensor parallel:' setup line: $(grep -m1 '^batch' "$out/gpt2_tp2_dp2.log")"
$PYTHON - "$out/gpt2_tp2_dp2/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
first, last = rows[0]["loss"], rows[-1]["loss"]
print(("ok - " if last < first - 0.5 else "not ok - ") + f"TP 2 x DP 2: the loss falls by more than 0.5 over 20 steps ({first:.3f} -> {last:.3f})")
PY
sample() {  # sample NAME NP ARGS...: the sample text of a 2-step run
    local name=$1 np=$2; shift 2
    run_logged "$out" 300 "$name" "$np" "${gpt2[@]}" -x 2 -v 0 -s 2 --sample-tokens 24 -b 12 "$@" -o "$out/$name" &&
        awk '/^sample \(step/ { on = 1; next } on && /^---$/ { if (++bars == 2) on = 0; next } on' "$out/$name.log" > "$out/$name.txt"
}
if sample sample_tp1 1 && sample sample_tp2 2 --tp 2; then
    if [ -s "$out/sample_tp1.txt" ] && cmp -s "$out/sample_tp1.txt" "$out/sample_tp2.txt"; then
        ok "a sample at TP 2 is TP 1's text ($(wc -c < "$out/sample_tp1.txt") bytes)"
    else
        not_ok "samples differ: TP 1 '$(head -c 120 "$out/sample_tp1.txt" | tr '\n' ' ')' TP 2 '$(head -c 120 "$out/sample_tp2.txt" | tr '\n' ' ')'"
    fi
fi
lap "setup, loss, samples"

# Refusals: one line naming the flag, before any work.
T=(./train_gpt --device cpu -i "$TRAIN_SHARD" -x 1 -v 0 --threads 1)
expect_error "--tp 3, 4 heads" "error: --tp 3 does not divide the 4 heads" \
    run_np 3 "${T[@]}" --layers 1 --channels 64 --heads 4 --max-seq 64 -t 16 -b 3 --tp 3
expect_error "--tp 2, 1 kv head" "error: --tp 2 does not divide the 1 kv heads" \
    run_np 2 "${T[@]}" --arch llama3 --layers 1 --channels 64 --heads 4 --kv-heads 1 --ffn-dim 96 --max-seq 64 -t 16 -b 2 --tp 2
expect_error "--tp 2, MLP 97" "error: --tp 2 does not divide the MLP width 97" \
    run_np 2 "${T[@]}" --arch llama3 --layers 1 --channels 64 --heads 4 --kv-heads 2 --ffn-dim 97 --max-seq 64 -t 16 -b 2 --tp 2
expect_error "--tp 3, padded vocabulary 1024" "error: --tp 3 does not divide the padded vocabulary 1024" \
    run_np 3 "${T[@]}" --layers 1 --channels 48 --heads 3 --max-seq 64 --vocab 1000 -t 16 -b 3 --tp 3
expect_error "--tp 2, -t 15" "error: --tp 2 does not divide -t 15" \
    run_np 2 "${T[@]}" --layers 1 --channels 64 --heads 4 --max-seq 64 -t 15 -b 2 --tp 2
expect_error "--tp 3, world 4" "error: --tp 3 does not divide the world size 4" \
    run_np 4 "${T[@]}" --layers 1 --channels 48 --heads 3 --max-seq 64 -t 16 -b 3 --tp 3
lap "refusals"

# The bytes of TP collectives a run counts per step (the schedule's all-gathers, reduce-scatters
# and the loss's all-reduces, the engine's all-reduces of the replicated gradients, as a ring
# moves them: its "communication per step per rank" line) are exactly what --plan prices for
# the same flags at the same world ("TP bytes per step"): the planner models the schedule the
# run executes. At TP 1 the line says nothing of TP.
tp_bytes_match() {  # tp_bytes_match NAME NP CMD...: the run NAME (its log) against CMD --plan at world NP
    local name=$1 np=$2 counted planned; shift 2
    counted=$(sed -nE 's/^communication per step per rank: .*: TP bytes per step ([0-9]+)$/\1/p' "$out/$name.log")
    if ! "$@" --plan --sim-device cpu --plan-world "$np" >"$out/plan_$name.log" 2>&1; then
        not_ok "TP bytes $name: --plan failed: $(tail -n 2 "$out/plan_$name.log" | tr '\n' ' ')"; return
    fi
    planned=$(sed -nE 's/^tensor parallel: TP bytes per step ([0-9]+) .*/\1/p' "$out/plan_$name.log")
    if [ -n "$counted" ] && [ "$counted" = "$planned" ]; then
        ok "TP bytes $name: $counted per step counted = planned"
    else
        not_ok "TP bytes $name: counted '$counted' ($(grep -m1 '^communication' "$out/$name.log")), planned '$planned'"
    fi
}
tp_bytes_match gpt2_tp2_dp1     2 "${gpt2[@]}" -b 12 --tp 2
tp_bytes_match gpt2_tp4_dp1     4 "${gpt2[@]}" -b 12 --tp 4
tp_bytes_match gpt2_tp2_accum3  4 "${gpt2[@]}" -b 2 --tp 2
tp_bytes_match gpt2_tp2_no_sync 4 "${gpt2[@]}" -b 2 --tp 2 --no-grad-sync-until-last
tp_bytes_match gpt2_tp2_full    2 "${gpt2[@]}" -b 12 --tp 2 --recompute full
tp_bytes_match llama_tp2_dp1    2 "${llama[@]}" -b 12 --tp 2
# TP 3 (3 heads, 48 channels, -t 48): (tp - 1) / tp not a power of two; the plan's node holds 3.
gpt2_tp3=(./train_gpt --device cpu --layers 2 --channels 48 --heads 3 --max-seq 64 -t 48 -d 288 -b 6 -x 2 -v 0
          -i "$TRAIN_SHARD" --threads 1 --tp 3)
run gpt2_tp3 3 "${gpt2_tp3[@]}" && tp_bytes_match gpt2_tp3 3 "${gpt2_tp3[@]}" --gpus-per-node 3
line=$(grep -m1 '^communication per step per rank' "$out/gpt2_ref.log")
[ -n "$line" ] && [[ "$line" != *TP* ]] && ok "TP 1: the communication line names no TP bytes" ||
    not_ok "TP 1 communication line: '$line'"
lap "TP bytes"
