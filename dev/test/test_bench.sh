#!/usr/bin/env bash
# dev/bench/bench_gpu.sh's bookkeeping without a GPU: the first GPU session must not lose its
# figures to a parsing slip. The script runs from a copy of the tree with stand-ins:
#   - nvidia-smi: one "NVIDIA H200";
#   - ./train_gpt: the real cpu train_gpt on a 2-layer model (the benchmark's model, batch and
#     device flags replaced; its step count, data, output folder, --peak-tflops and
#     --profile-step kept), so its real output is what gets parsed;
#   - $PYTHON: a stub answering the torch version query and printing one RESULT line of
#     dev/bench/torch_gpt2_fsdp2.py's form (every key bench_gpu.sh reads must be one that
#     script prints); with STUB_COMPILE_FAILS=1 the compiled run fails first.
# Checked: exit 0; the train_gpt row's tok/s and ms/step are its log's "average step" figures;
# the pytorch row carries the stub's figures and compile setting; the ratio is their quotient;
# each model's target line; the profile table is copied; the fallback to --no-compile is
# taken and labelled; a failing train_gpt gives exit 1 with its last line in the table.
set -u
source dev/test/lib.sh
T=$TEST_TMP
ROOT="$T/root"
mkdir -p "$ROOT/dev/bench" "$T/bin"
cp dev/bench/bench_gpu.sh "$ROOT/dev/bench/"
REAL=$(pwd)/train_gpt

cat > "$T/bin/nvidia-smi" <<'EOF'
#!/usr/bin/env bash
case "$*" in
    -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-stub)" ;;
    *) echo "NVIDIA H200, 143771 MiB, 580.159.04" ;;
esac
EOF
cat > "$ROOT/train_gpt" <<EOF
#!/usr/bin/env bash
# Stand-in for train_gpt --device cuda -m MODEL -b B -t T -d TOKENS: the cpu train_gpt, tiny.
[ -n "\${STUB_TRAIN_FAILS:-}" ] && { echo "error: stub train_gpt failure"; exit 3; }
args=()
while [ \$# -gt 0 ]; do
    case "\$1" in
        --device|-m|-b|-t|-d) shift 2 ;;
        *) args+=("\$1"); shift ;;
    esac
done
exec "$REAL" --device cpu --layers 2 --channels 64 --heads 2 --max-seq 32 -b 2 -t 32 -d 64 --threads 1 "\${args[@]}"
EOF
cat > "$T/bin/python-stub" <<'EOF'
#!/usr/bin/env bash
# Stand-in for PyTorch: the version query, and dev/bench/torch_gpt2_fsdp2.py's RESULT line.
if [ "$1" = -c ]; then echo "2.11.0+cu130 cuda 13.0 available"; exit 0; fi
compile=default
case " $* " in *" --no-compile "*) compile=off ;; esac
if [ "$compile" = default ] && [ -n "${STUB_COMPILE_FAILS:-}" ]; then echo "torch._dynamo: stub compile failure" >&2; exit 1; fi
model=$(sed -E 's/.*--model ([^ ]+).*/\1/' <<<"$*")
echo "step 1: loss 10.9" >&2
echo "RESULT framework=pytorch-fsdp2 model=$model B=2 T=32 tok_per_s=500.0 mfu=0.2468 peak_mem_gib=1.250 step_ms=128.000 peak_reserved_gib=1.500 gpu_used_gib=2.000 world=1 compile=$compile"
EOF
chmod +x "$T/bin/nvidia-smi" "$ROOT/train_gpt" "$T/bin/python-stub"

# Every key bench_gpu.sh reads from the RESULT line is one the real script prints.
missing=""
for key in $(grep -o 'field [a-z_]* "\$line"' dev/bench/bench_gpu.sh | awk '{print $2}' | sort -u); do
    grep -q "(\"$key\"," dev/bench/torch_gpt2_fsdp2.py || missing+=" $key"
done
nkeys=$(grep -o 'field [a-z_]* "\$line"' dev/bench/bench_gpu.sh | awk '{print $2}' | sort -u | wc -l)
[ -z "$missing" ] && [ "$nkeys" -ge 6 ] && ok "bench_gpu.sh reads $nkeys RESULT keys, each one torch_gpt2_fsdp2.py prints" ||
    not_ok "bench_gpu.sh reads RESULT keys that torch_gpt2_fsdp2.py does not print:$missing ($nkeys keys found)"

# bench MODELS OUT [VAR=VALUE...]: bench_gpu.sh in the copy, its status in OUT.rc.
bench() {
    local which=$1 out=$2; shift 2
    (cd "$ROOT" && env PATH="$T/bin:$PATH" PYTHON="$T/bin/python-stub" BENCH_DATA="$TRAIN_SHARD" \
        BENCH_STEPS=3 BENCH_WARMUP=1 "$@" timeout 300 bash dev/bench/bench_gpu.sh "$which" "$out" \
        > "$out.log" 2>&1; echo $? > "$out.rc")
}
# row OUT MODEL IMPL: the table row (after the header) of that model and implementation.
row() { sed -n '/^model /,$p' "$1/summary.txt" | grep -E "^$2 .* $3" | head -n 1; }

bench all "$T/all"
s="$T/all/summary.txt"
c_avg=$(grep -E '^average step' "$T/all/d12_train_gpt.log" | tail -n 1)
c_ms=$(sed -E 's/^average step ([0-9.]+) ms.*/\1/' <<<"$c_avg")
c_tps=$(sed -E 's/^average step [0-9.]+ ms \(([0-9.]+) tok\/s\).*/\1/' <<<"$c_avg")
c_row=$(row "$T/all" d12 "train_gpt \(cuda\)")
t_row=$(row "$T/all" d12 "pytorch-fsdp2, compile default")
want_ratio=$(awk -v a="$c_tps" 'BEGIN { printf "%.2fx", a / 500 }')
if [ "$(cat "$T/all.rc")" = 0 ] && [ -n "$c_tps" ] && grep -q "^  train_gpt: $c_tps tok/s, $c_ms ms/step, MFU " "$s" && awk -v r="$c_row" -v t="$c_tps" -v m="$c_ms" \
        'BEGIN { n = split(r, f, " +"); exit !(f[6] == t && f[7] == m && f[8] ~ /^[0-9.]+%$/) }'; then
    ok "bench_gpu.sh all: exit 0; d12 train_gpt row and its early line = its log's average step ($c_tps tok/s, $c_ms ms)"
else
    not_ok "bench_gpu.sh all: status $(cat "$T/all.rc"), average '$c_avg', row '$c_row': $(tail -n 3 "$T/all.log" | tr '\n' ' ' | cut -c1-300)"
fi
if grep -qE '^d12 .*pytorch-fsdp2, compile default +500 +128\.0 +24\.7% +2\.0 GiB +1\.2 GiB' <<<"$t_row" &&
   grep -qE "^d12 .*ratio train_gpt / pytorch +$want_ratio\$" "$s"; then
    ok "bench_gpu.sh: the pytorch row carries the RESULT figures (500 tok/s, 24.7% MFU) and the ratio is $want_ratio"
else
    not_ok "bench_gpu.sh: pytorch row '$t_row', ratio line '$(grep ratio "$s" | head -n 1)' (want $want_ratio)"
fi
if grep -qE "^d12 target \(train_gpt >= 1.1x pytorch tok/s\): $want_ratio, (met|NOT met)\$" "$s" &&
   grep -qE '^d48 target \(train_gpt >= 50% MFU\): [0-9.]+%, (met|NOT met)$' "$s" &&
   grep -q '^  profile of step 5 ' "$s" && grep -q '^    matmul (transformer blocks)' "$s" &&
   grep -q '^average step .* over 3 steps after the first (not the profiled one)' "$T/all/d12_train_gpt.log"; then
    ok "bench_gpu.sh: both targets judged; train_gpt's extra profiled step (not in its average) copied ($(grep -c '^  profile of step' "$s") tables)"
else
    not_ok "bench_gpu.sh: target lines '$(grep target "$s" | tr '\n' '|')', profile lines $(grep -c '^  profile' "$s")"
fi

# The compiled baseline fails: one retry without torch.compile, labelled.
bench d12 "$T/fallback" STUB_COMPILE_FAILS=1
if [ "$(cat "$T/fallback.rc")" = 0 ] && [ -n "$(row "$T/fallback" d12 'pytorch-fsdp2, compile off +500')" ] &&
   grep -q "pytorch: fell back to '--no-compile' after the runs above failed" "$T/fallback/summary.txt"; then
    ok "bench_gpu.sh: a failing compiled baseline is retried with --no-compile, and the row says so"
else
    not_ok "bench_gpu.sh fallback: status $(cat "$T/fallback.rc"): $(grep -E 'pytorch' "$T/fallback/summary.txt" | tail -n 3 | tr '\n' ' ' | cut -c1-300)"
fi

# train_gpt fails: exit 1, its last line in the table, the baseline still measured.
bench d12 "$T/cfail" STUB_TRAIN_FAILS=1
if [ "$(cat "$T/cfail.rc")" = 1 ] && grep -q -- '-> train_gpt: failed (exit 3): error: stub train_gpt failure' "$T/cfail/summary.txt" &&
   [ -n "$(row "$T/cfail" d12 'pytorch-fsdp2, compile default +500')" ] &&
   grep -q '^d12 target (train_gpt >= 1.1x pytorch tok/s): not measured$' "$T/cfail/summary.txt"; then
    ok "bench_gpu.sh: a failing train_gpt gives status 1 and its error in the table; the baseline still runs"
else
    not_ok "bench_gpu.sh with a failing train_gpt: status $(cat "$T/cfail.rc"): $(sed -n '/^model /,$p' "$T/cfail/summary.txt" | tr '\n' '|' | cut -c1-300)"
fi
