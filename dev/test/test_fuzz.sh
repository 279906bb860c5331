#!/usr/bin/env bash
# run_tests: cores 1.4, 71 s
# The libFuzzer harnesses of dev/fuzz/ (make fuzz: clang, ASan + UBSan), each for a bounded
# time from a copy of its seed corpus dev/fuzz/corpus/NAME: the manifest reader, the shard
# header and loader, the llm.c model header, model/'s safetensors / llm.c readers (the files
# ckpt import reads), a Hugging Face directory (shard index, shards, config.json), the
# GPT-2 encoder (decode(encode(x)) == x) and llm.c's eval files (HellaSwag: what the reader
# accepts must round-trip through the writer). A crash, a sanitizer report, a leak or an input
# running over 10 s fails the harness; its reproducer is kept under $TEST_TMP and named.
# First, every seed must replay cleanly. The time: 5.5 x FUZZ_SECONDS (16 by default) in all,
# FUZZ_SECONDS per harness but shard, model_header and evalset, which take half of it each:
# their few edges (71, 63, 124) are all found within the first 100,000 execs (about 5 s
# here), and the hf_index harness takes the time they leave. A harness is one process on one
# core: two run at a time (the machine's two cores), so the wall time is about half that.
set -u
source dev/test/lib.sh
out=$TEST_TMP
SECONDS_EACH=${FUZZ_SECONDS:-16}
if ! make -s -j2 fuzz > "$out/make_fuzz.log" 2>&1; then
    not_ok "make fuzz: $(grep -m3 -E 'error|Error|no clang' "$out/make_fuzz.log" | tr '\n' ' ' | head -c 400)"
    exit 1
fi
fuzz_one() {  # fuzz_one NAME:HALVES
    local spec=$1 name secs bin corpus seeds dict log rc execs rate cov artifact
    name=${spec%%:*}
    secs=$((SECONDS_EACH * ${spec#*:} / 2))   # (halves of FUZZ_SECONDS; at least 1: 0 is no limit)
    [ "$secs" -ge 1 ] || secs=1
    bin=build/fuzz/fuzz_$name
    if [ "$name" = tokenizer ] && [ ! -f "$FSDP_DATA/gpt2/encoder.json" ] && [ ! -f data/gpt2/encoder.json ]; then
        ok "fuzz $name # skip no GPT-2 vocabulary ($FSDP_DATA/gpt2 or data/gpt2)"; return
    fi
    corpus=$out/corpus_$name
    rm -rf "$corpus"; cp -r "dev/fuzz/corpus/$name" "$corpus"
    seeds=$(ls "$corpus" | wc -l)
    dict=(); case $name in manifest|safetensors|hf_index) dict=(-dict=dev/fuzz/json.dict) ;; esac
    log=$out/fuzz_$name.log
    # the seeds alone: each is parsed and must be accepted without a report
    if ! $bin -runs=0 "$corpus" > "$log.seeds" 2>&1; then
        not_ok "fuzz $name: replaying its $seeds seeds fails: $(grep -m1 -E 'ERROR|error' "$log.seeds" | head -c 300)"; return
    fi
    $bin "${dict[@]}" -max_total_time="$secs" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$out/$name-" "$corpus" > "$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -n 1)
    artifact=$(ls "$out/$name-"* 2>/dev/null | head -n 1)
    if [ "$rc" -eq 0 ] && [ -z "$artifact" ] && [ "${execs:-0}" -gt 1000 ]; then
        ok "fuzz $name: ${secs} s, $execs execs ($rate/s), $cov, $(ls "$corpus" | wc -l) corpus entries from $seeds seeds, no crash"
    else
        not_ok "fuzz $name: status $rc after ${execs:-0} execs: $(grep -m1 -E 'ERROR|runtime error|SUMMARY' "$log" | head -c 300)${artifact:+; reproducer $artifact}"
    fi
}
running=0
for spec in manifest:2 safetensors:2 hf_index:2 tokenizer:2 shard:1 model_header:1 evalset:1; do
    if [ $running -eq 2 ]; then wait -n; running=1; fi
    fuzz_one "$spec" &
    running=$((running + 1))
done
wait
