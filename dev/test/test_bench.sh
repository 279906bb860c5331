#!/usr/bin/env bash
# run_tests: cores 0.6, 49 s
# dev/bench/bench_gpu.sh's and scripts/device_check.sh's bookkeeping without a GPU: the first
# GPU session must not lose its figures, or its one call, to a parsing slip or a hung part.
# bench_gpu.sh runs from a copy of the tree with stand-ins:
#   - nvidia-smi: one "NVIDIA H200";
#   - ./train_gpt: the real cpu train_gpt on a 2-layer model (the benchmark's model, batch and
#     device flags replaced; its step count, data, output folder, --peak-tflops and
#     --profile-step kept), so its real output is what gets parsed;
#   - $PYTHON: a stub answering the torch version query and printing one RESULT line of
#     dev/bench/torch_gpt2_fsdp2.py's form (every key bench_gpu.sh reads must be one that
#     script prints) with the compile mode it was given; with STUB_COMPILE_FAILS=1 every
#     compiled run fails, STUB_HANG_MODES: the modes that hang;
#   - llm.c's train_gpt2cu (LLMC_BIN): its step lines (below, with dev/bench/llmc_side.sh's own checks).
# Checked: exit 0; the train_gpt row's tok/s and ms/step are its log's "average step" figures;
# the pytorch row carries the stub's figures and compile setting; the ratio is their quotient;
# each model's target line; the profile table is copied; the fallback to --no-compile is
# taken and labelled; a failing train_gpt gives exit 1 with its last line in the table; the
# limiting phase is the profile's largest row; an out-of-memory batch is halved and labelled.
# device_check.sh: see the second half below.
set -u
source dev/test/lib.sh
T=$TEST_TMP
ROOT="$T/root"
mkdir -p "$ROOT/dev/bench" "$T/bin"
cp dev/bench/bench_gpu.sh dev/bench/llmc_side.sh "$ROOT/dev/bench/"
REAL=$(pwd)/train_gpt

cat > "$T/bin/nvidia-smi" <<'EOF'
#!/usr/bin/env bash
case "$*" in
    -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-stub)" ;;
    "") echo "| NVIDIA-SMI 580.159.04    Driver Version: 580.159.04    CUDA Version: ${STUB_DRIVER_CUDA:-13.0} |" ;;
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
        -b) [ "\$2" -gt "\${STUB_OOM_ABOVE_B:-999}" ] && { echo "CUDA error at train/device.cuh:140: out of memory (cudaMalloc(&p, n))" >&2; exit 1; }; shift 2 ;;
        --device|-m|-t|-d) shift 2 ;;
        *) args+=("\$1"); shift ;;
    esac
done
exec "$REAL" --device cpu --layers 2 --channels 64 --heads 2 --max-seq 32 -b 2 -t 32 -d 64 --threads 1 "\${args[@]}"
EOF
cat > "$T/bin/python-stub" <<'EOF'
#!/usr/bin/env bash
# Stand-in for PyTorch: the version query, and dev/bench/torch_gpt2_fsdp2.py's RESULT line.
if [ "$1" = -c ]; then echo "2.11.0+cu130 cuda 13.0 available"; exit 0; fi
if [ "$1" = - ]; then cat > /dev/null; exit 0; fi  # scripts/find_nccl.sh's probe: no NCCL wheel
[ -n "${STUB_TORCH_HANG:-}" ] && exec sleep 60
compile=default
[[ " $* " =~ " --compile-mode "([a-z-]+)" " ]] && compile=${BASH_REMATCH[1]}
case " $* " in *" --no-compile "*) compile=off ;; esac
if [ "$compile" != off ] && [ -n "${STUB_COMPILE_FAILS:-}" ]; then echo "torch._dynamo: stub compile failure" >&2; exit 1; fi
case " ${STUB_HANG_MODES:-} " in *" $compile "*) exec sleep 60 ;; esac
model=$(sed -E 's/.*--model ([^ ]+).*/\1/' <<<"$*")
echo "step 1: loss 10.9" >&2
echo "RESULT framework=pytorch-fsdp2 model=$model B=2 T=32 tok_per_s=500.0 mfu=0.2468 peak_mem_gib=1.250 step_ms=128.000 peak_reserved_gib=1.500 gpu_used_gib=2.000 world=1 compile=$compile adamw=${STUB_ADAMW:-fused}"
EOF
# Stand-in for llm.c's train_gpt2cu (as train_gpt2cu, the cuDNN build, and as
# train_gpt2cu_nocudnn): its printed lines, in the format of llm.c's printf calls; step 1
# takes 900 ms, then 100 and 110 ms by turns. STUB_LLMC_CUDNN_FAILS=1: the cuDNN build fails
# as a cuDNN without an engine for the graph does.
mkdir -p "$T/llmc"
cat > "$T/llmc/train_gpt2cu" <<'EOF'
#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "${STUB_LLMC_ARGS:-/dev/null}"
x=0; b=0; t=0; e=""
while [ $# -gt 1 ]; do
    case "$1" in -x) x=$2 ;; -b) b=$2 ;; -t) t=$2 ;; -e) e=$2 ;; esac
    shift 2
done
echo "| micro batch size B    | $(printf '%-50d' "$b") |"
if [ "$(basename "$0")" = train_gpt2cu ] && [ -n "${STUB_LLMC_CUDNN_FAILS:-}" ]; then
    echo "[CUDNN ERROR] at file llmc/cudnn_att.cpp:186: No valid execution plans built."; exit 1
fi
[ "$e" = d12 ] || { echo "stub: want -e d12, got '$e'"; exit 1; }
echo "num_parameters: 124475904 => bytes: 248951808"
echo "device memory usage: 20480 MiB / 81559 MiB"
echo "val loss 10.982156"
for ((s = 1; s <= x; s++)); do
    ms=$((s == 1 ? 900 : 100 + 10 * (s % 2)))
    printf 'step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)| lr %.2e | %.2f ms | %.1f%% bf16 MFU | %.0f tok/s\n' \
        "$s" "$x" 10.9 0 1.5 0 6e-4 "$ms" 40.2 "$((b * t * 1000 / ms))"
done
echo "val loss 9.123456"
echo "total average iteration time: 105.000000 ms"
EOF
cp "$T/llmc/train_gpt2cu" "$T/llmc/train_gpt2cu_nocudnn"
echo "f1e2ace651495b74ae22d45d1723443fd00ecd3a 2025-05-10 stub" > "$T/llmc/train_gpt2cu.COMMIT"
chmod +x "$T/bin/nvidia-smi" "$ROOT/train_gpt" "$T/bin/python-stub" "$T/llmc"/train_gpt2cu*

# Every key bench_gpu.sh reads from a RESULT line is one its producer prints: the PyTorch
# section's torch_gpt2_fsdp2.py's, the llm.c section's llmc_side.sh's.
# keys FROM TO: the keys read between the lines matching FROM and TO.
keys() { sed -n "/$1/,/$2/p" dev/bench/bench_gpu.sh | grep -o 'field [a-z_]* "\$line"' | awk '{print $2}' | sort -u; }
missing=""
for key in $(keys '# ---- PyTorch' '# ---- ratios'); do grep -q "(\"$key\"," dev/bench/torch_gpt2_fsdp2.py || missing+=" torch:$key"; done
for key in $(keys '# ---- llm.c' '# ---- PyTorch'); do grep -q "^    echo \"RESULT .* $key=" dev/bench/llmc_side.sh || missing+=" llm.c:$key"; done
nt=$(keys '# ---- PyTorch' '# ---- ratios' | wc -l); nl=$(keys '# ---- llm.c' '# ---- PyTorch' | wc -l)
[ -z "$missing" ] && [ "$nt" -ge 6 ] && [ "$nl" -ge 5 ] && ok "bench_gpu.sh reads $nt RESULT keys of torch_gpt2_fsdp2.py's and $nl of llmc_side.sh's, each one it prints" ||
    not_ok "bench_gpu.sh reads RESULT keys their producer does not print:$missing ($nt torch, $nl llm.c keys found)"

# torch_gpt2_fsdp2.py's --compile-mode (parsed before torch is imported): every mode
# bench_gpu.sh may ask for is accepted and an unknown one refused by name; with PyTorch here,
# --cpu-smoke (eager, so it runs anywhere) still gives its RESULT line with a mode given.
out=$(python3 dev/bench/torch_gpt2_fsdp2.py --cpu-smoke --compile-mode fastest 2>&1); rc=$?
modes=$(python3 dev/bench/torch_gpt2_fsdp2.py --help | tr -s ' \n' ' ' | grep -o "{max-autotune,max-autotune-no-cudagraphs,reduce-overhead,default}" | head -n 1)
if [ $rc = 2 ] && grep -q "argument --compile-mode: invalid choice: 'fastest'" <<<"$out" && [ -n "$modes" ]; then
    ok "torch_gpt2_fsdp2.py --compile-mode: $modes accepted, an unknown mode refused"
else
    not_ok "torch_gpt2_fsdp2.py --compile-mode: 'fastest' gave status $rc: $(tail -n 1 <<<"$out"); --help's modes: '$modes'"
fi
PYT=.venv/bin/python
python3 -c 'import torch' 2> /dev/null && PYT=python3
if ! "$PYT" -c 'import torch' 2> /dev/null; then
    ok "torch_gpt2_fsdp2.py --cpu-smoke --compile-mode max-autotune # skip no PyTorch here"
elif "$PYT" dev/bench/torch_gpt2_fsdp2.py --cpu-smoke --compile-mode max-autotune --steps 1 --warmup 0 2> /dev/null |
        grep -q '^RESULT framework=pytorch-fp32 .* compile=off .* adamw=[a-z]'; then
    ok "torch_gpt2_fsdp2.py --cpu-smoke --compile-mode max-autotune: the eager smoke run still gives its RESULT line"
else
    not_ok "torch_gpt2_fsdp2.py --cpu-smoke --compile-mode max-autotune: no RESULT line"
fi

# bench MODELS OUT [VAR=VALUE...]: bench_gpu.sh in the copy, its status in OUT.rc.
bench() {
    local which=$1 out=$2; shift 2
    (cd "$ROOT" && env PATH="$T/bin:$PATH" PYTHON="$T/bin/python-stub" BENCH_DATA="$TRAIN_SHARD" \
        LLMC_BIN="$T/llmc" BENCH_STEPS=3 BENCH_WARMUP=1 "$@" timeout 300 bash dev/bench/bench_gpu.sh "$which" "$out" \
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
t_row=$(row "$T/all" d12 "pytorch-fsdp2, compile max-autotune")
want_ratio=$(awk -v a="$c_tps" 'BEGIN { printf "%.2fx", a / 500 }')
l_tps=$(awk 'BEGIN { printf "%.1f", 32 * 1024 * 1000 / (310 / 3) }')  # the llm.c stand-in's steps 2..4: 100, 110, 100 ms
want_lratio=$(awk -v a="$c_tps" -v l="$l_tps" 'BEGIN { printf "%.2fx", a / l }')
if [ "$(cat "$T/all.rc")" = 0 ] && [ -n "$c_tps" ] && grep -q "^  train_gpt: $c_tps tok/s, $c_ms ms/step, MFU " "$s" && awk -v r="$c_row" -v t="$c_tps" -v m="$c_ms" \
        'BEGIN { n = split(r, f, " +"); exit !(f[6] == t && f[7] == m && f[8] ~ /^[0-9.]+%$/) }'; then
    ok "bench_gpu.sh all: exit 0; d12 train_gpt row and its early line = its log's average step ($c_tps tok/s, $c_ms ms)"
else
    not_ok "bench_gpu.sh all: status $(cat "$T/all.rc"), average '$c_avg', row '$c_row': $(tail -n 3 "$T/all.log" | tr '\n' ' ' | cut -c1-300)"
fi
if grep -qE '^d12 .*pytorch-fsdp2, compile max-autotune +500 +128\.0 +24\.7% +2\.0 GiB +1\.2 GiB' <<<"$t_row" &&
   grep -qE "^d12 .*ratio train_gpt / pytorch +$want_ratio\$" "$s" && [ "$(grep -c 'torch_gpt2_fsdp2.py' "$s")" = 2 ] &&
   ! grep -q 'not fused' "$s"; then
    ok "bench_gpu.sh: the pytorch row carries the RESULT figures of its max-autotune run (500 tok/s, 24.7% MFU, fused AdamW); the ratio is $want_ratio"
else
    not_ok "bench_gpu.sh: pytorch row '$t_row', ratio line '$(grep ratio "$s" | head -n 1)' (want $want_ratio)"
fi
if grep -qE "^d12 +32  1024  llm.c train_gpt2cu-cudnn +$(printf '%.0f' "$l_tps") +103\.3 +[0-9.]+% +20\.0 GiB +n/a\$" "$s" &&
   grep -qE "^d12 .*ratio train_gpt / llm.c +$want_lratio\$" "$s" &&
   grep -qE "^d12 target \(train_gpt >= 1.2x llm.c tok/s\): $want_lratio, (met|NOT met)\$" "$s" &&
   grep -q -- '-e d12 -b 32 -t 1024 -d 32768 -x 4 ' "$T/all/d12_llmc.log" && ! grep -q '^d48 .*llm.c' "$s"; then
    ok "bench_gpu.sh: the d12 llm.c row ($l_tps tok/s from its step times after the first), ratio $want_lratio and its target; none for d48"
else
    not_ok "bench_gpu.sh llm.c row: $(grep -E '^d12 .*llm.c|target.*llm.c' "$s" | tr '\n' '|' | cut -c1-400) (want $l_tps tok/s, ratio $want_lratio)"
fi
if grep -qE "^d12 target \(train_gpt >= 1.3x pytorch tok/s\): $want_ratio, (met|NOT met)\$" "$s" &&
   grep -qE '^d48 target \(train_gpt >= 55% MFU\): [0-9.]+%, (met|NOT met)$' "$s" &&
   grep -q '^  profile of step 5 ' "$s" && grep -q '^    matmul (transformer blocks)' "$s" &&
   grep -q '^average step .* over 3 steps after the first (not the profiled one)' "$T/all/d12_train_gpt.log"; then
    ok "bench_gpu.sh: both targets judged; train_gpt's extra profiled step (not in its average) copied ($(grep -c '^  profile of step' "$s") tables)"
else
    not_ok "bench_gpu.sh: target lines '$(grep target "$s" | tr '\n' '|')', profile lines $(grep -c '^  profile' "$s")"
fi

# Every compile mode fails: each is tried, then --no-compile, labelled; max-autotune hangs
# past its cap: default is the row (max-autotune-no-cudagraphs skipped), and the timeout said;
# so is an AdamW that is not the fused one.
bench d12 "$T/fallback" STUB_COMPILE_FAILS=1
bench d12 "$T/hang" STUB_HANG_MODES=max-autotune BENCH_TIMEOUT_TORCH=2 BENCH_TORCH_MIN_RETRY=1 STUB_ADAMW=foreach
if [ "$(cat "$T/fallback.rc")" = 0 ] && [ -n "$(row "$T/fallback" d12 'pytorch-fsdp2, compile off +500')" ] &&
   grep -q "pytorch: fell back to '--no-compile' after: --compile-mode max-autotune failed (exit 1): torch._dynamo: stub compile failure; --compile-mode max-autotune-no-cudagraphs failed .*; --compile-mode default failed " "$T/fallback/summary.txt" &&
   [ "$(cat "$T/hang.rc")" = 0 ] && [ -n "$(row "$T/hang" d12 'pytorch-fsdp2, compile default +500')" ] &&
   grep -q "pytorch: fell back to '--compile-mode default' after: --compile-mode max-autotune timed out after 2s (.*); --compile-mode max-autotune-no-cudagraphs skipped (autotunes as long) .*; AdamW foreach, not fused (see " "$T/hang/summary.txt"; then
    ok "bench_gpu.sh: failing compile modes are tried in turn, then --no-compile; max-autotune past its cap falls back to default (skipping the other autotuning mode); the row says which"
else
    not_ok "bench_gpu.sh fallback: status $(cat "$T/fallback.rc"): $(grep -E 'pytorch' "$T/fallback/summary.txt" | tail -n 3 | tr '\n' ' ' | cut -c1-300)"
fi

# train_gpt fails: exit 1, its last line in the table, the baseline still measured.
bench d12 "$T/cfail" STUB_TRAIN_FAILS=1
if [ "$(cat "$T/cfail.rc")" = 1 ] && grep -q -- '-> train_gpt: failed (exit 3): error: stub train_gpt failure' "$T/cfail/summary.txt" &&
   [ -n "$(row "$T/cfail" d12 'pytorch-fsdp2, compile max-autotune +500')" ] && [ -n "$(row "$T/cfail" d12 'llm.c train_gpt2cu-cudnn +[0-9]')" ] &&
   grep -q '^d12 target (train_gpt >= 1.3x pytorch tok/s): not measured$' "$T/cfail/summary.txt"; then
    ok "bench_gpu.sh: a failing train_gpt gives status 1 and its error in the table; llm.c and the baseline still run"
else
    not_ok "bench_gpu.sh with a failing train_gpt: status $(cat "$T/cfail.rc"): $(sed -n '/^model /,$p' "$T/cfail/summary.txt" | tr '\n' '|' | cut -c1-300)"
fi

# The limiting phase: the largest row of train_gpt's profile table (found here independently).
lim_want=$(sed -n '/^profile of step/,/^step /p' "$T/all/d12_train_gpt.log" | grep ' interval(s)$' |
    awk '{ for (i = 1; $i != "ms"; i++) ; n = $1; for (j = 2; j < i - 1; j++) n = n " " $j; print $(i - 1), n ", " $(i - 1) " ms, " $(i + 1) }' |
    sort -g -r | head -n 1 | cut -d' ' -f2-)
if [ -n "$lim_want" ] && grep -qxF "d12 limiting phase (largest row of train_gpt's profiled step): $lim_want of the step" "$s"; then
    ok "bench_gpu.sh names the limiting phase: the profile's largest row ($lim_want)"
else
    not_ok "bench_gpu.sh limiting phase: want '$lim_want', got '$(grep 'limiting phase' "$s" | head -n 1)'"
fi

# Out of GPU memory: the batch is halved until it fits, and said; BENCH_TORCH=0 runs no baseline.
bench d48 "$T/oom" STUB_OOM_ABOVE_B=4 BENCH_B_D48=16 BENCH_TORCH=0
o="$T/oom/summary.txt"
if [ "$(cat "$T/oom.rc")" = 0 ] && [ -n "$(row "$T/oom" 'd48 +4 ' 'train_gpt \(cuda\) +[0-9]')" ] &&
   grep -q -- '-> train_gpt: B=8 ran out of GPU memory (d48_b8_oom_train_gpt.log): B=4 instead' "$o" &&
   grep -q '^  train_gpt: B=16 ran out of GPU memory' "$o" && [ -f "$T/oom/d48_b16_oom_train_gpt.log" ] &&
   grep -q -- '-> pytorch: not run (BENCH_TORCH=0)' "$o" && ! grep -q '^+ .*torch_gpt2_fsdp2' "$o" &&
   grep -qE '^d48 target \(train_gpt >= 55% MFU\): [0-9.]+%, (met|NOT met)$' "$o"; then
    ok "bench_gpu.sh: out of memory at B=16 and 8 -> B=4, said in the table; BENCH_TORCH=0 runs no baseline"
else
    not_ok "bench_gpu.sh out-of-memory fallback: status $(cat "$T/oom.rc"): $(grep -E 'B=|pytorch|target' "$o" | tr '\n' '|' | cut -c1-400)"
fi

# BENCH_BUDGET cuts a hanging baseline's timeout to fit (train_gpt fails at once and llm.c is left out, so the
# baseline's share does not depend on this machine's speed).
t0=$(date +%s)
bench d12 "$T/budget" STUB_TRAIN_FAILS=1 STUB_TORCH_HANG=1 BENCH_TIMEOUT_TORCH=100 BENCH_BUDGET=8 BENCH_LLMC=0
took=$(( $(date +%s) - t0 ))
if [ "$(cat "$T/budget.rc")" = 1 ] && [ "$took" -le 9 ] && grep -qE -- '-> pytorch: --compile-mode max-autotune timed out after [1-3]s' "$T/budget/summary.txt"; then
    ok "bench_gpu.sh: BENCH_BUDGET=8 cuts a hanging baseline's 100 s timeout (done after $took s)"
else
    not_ok "bench_gpu.sh BENCH_BUDGET: status $(cat "$T/budget.rc") after $took s: $(grep pytorch "$T/budget/summary.txt" | tail -n 2 | tr '\n' ' ')"
fi

# ---- dev/bench/llmc_side.sh: llm.c's trainer beside ours ---------------------------------
# llmc RUN ARGS... [VAR=VALUE before]: llmc_side.sh in the copy, output in $T/RUN.out, status in $T/RUN.rc.
llmc() {
    local name=$1; shift
    (cd "$ROOT" && env "$@" > "$T/$name.out" 2>&1; echo $? > "$T/$name.rc")
}
one_line() { [ "$(cat "$T/$1.rc")" = "$2" ] && [ "$(wc -l < "$T/$1.out")" = 1 ] && grep -q -- "$3" "$T/$1.out"; }
llmc nosnap bash dev/bench/llmc_side.sh fetch "$T/no_such_repo"
llmc nosrc bash dev/bench/llmc_side.sh build
llmc noshard LLMC_BIN="$T/llmc" LLMC_DATA="$T/llmc/train_gpt2cu.COMMIT" bash dev/bench/llmc_side.sh run "$T/noshard.log"
llmc nobin LLMC_BIN="$T/no_bin" LLMC_DATA="$TRAIN_SHARD" bash dev/bench/llmc_side.sh run "$T/nobin.log"
if one_line nosnap 1 "^llmc_side: fetch: no llm.c snapshot at $T/no_such_repo (a git directory of github:karpathy/llm.c" &&
   one_line nosrc 1 "^llmc_side: build: no llm.c sources in $ROOT/.deps/llmc/src (run: bash dev/bench/llmc_side.sh fetch)" &&
   one_line noshard 1 "^llmc_side: run: .*train_gpt2cu.COMMIT is not a token shard (want the header 20240520, version 1)" &&
   one_line nobin 1 "^llmc_side: run: no train_gpt2cu in $T/no_bin that loads here" && [ ! -e "$ROOT/.deps" ]; then
    ok "llmc_side.sh: a missing snapshot, missing sources, a file that is not a shard, no binary: one line each, status 1"
else
    not_ok "llmc_side.sh refusals: $(for n in nosnap nosrc noshard nobin; do echo "$n: $(cat "$T/$n.rc") $(head -c 200 "$T/$n.out")|"; done)"
fi
# fetch from a snapshot (a git repository with llm.c's two marker files; the frontend headers
# already there, so that nothing is downloaded): the files and the commit, nothing else.
snap=$T/snap
mkdir -p "$snap/llmc" "$snap/dev" "$ROOT/.deps/cudnn_frontend/include"
echo "int main() { return 0; }" > "$snap/train_gpt2.cu"; echo "// att" > "$snap/llmc/cudnn_att.cpp"; echo "x" > "$snap/dev/other.py"
: > "$ROOT/.deps/cudnn_frontend/include/cudnn_frontend.h"
(cd "$snap" && git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm "stub llm.c" && git rev-parse HEAD) > "$T/snap.commit"
llmc fetch bash dev/bench/llmc_side.sh fetch "$snap/.git"
if [ "$(cat "$T/fetch.rc")" = 0 ] && [ "$(cut -d' ' -f1 "$ROOT/.deps/llmc/COMMIT")" = "$(cat "$T/snap.commit")" ] &&
   [ "$(cd "$ROOT/.deps/llmc/src" && find . -type f | sort | tr '\n' ' ')" = "./llmc/cudnn_att.cpp ./train_gpt2.cu " ] &&
   grep -q 'cudnn-frontend headers already in' "$T/fetch.out"; then
    ok "llmc_side.sh fetch: train_gpt2.cu and llmc/ of the snapshot's HEAD into .deps/llmc/src, its commit recorded"
else
    not_ok "llmc_side.sh fetch: status $(cat "$T/fetch.rc"): $(tr '\n' '|' < "$T/fetch.out" | cut -c1-300); files: $(cd "$ROOT/.deps/llmc/src" 2>/dev/null && find . -type f | tr '\n' ' ')"
fi
rm -rf "$ROOT/.deps"
# run: steps 2..5 (LLMC_WARMUP=1 + LLMC_STEPS=4, the first left out) at 100 and 110 ms: 105 ms,
# 4*64 tokens per step; the flags llm.c gets; the cuDNN build failing -> the one without.
llmc run LLMC_BIN="$T/llmc" LLMC_DATA="$TRAIN_SHARD" LLMC_B=4 LLMC_T=64 LLMC_WARMUP=1 LLMC_STEPS=4 STUB_LLMC_ARGS="$T/run.args" \
    bash dev/bench/llmc_side.sh run "$T/run/llmc.log"
want_tps=$(awk 'BEGIN { printf "%.1f", 4 * 64 * 1000 / 105 }')
want_mfu=$(awk -v t="$want_tps" 'BEGIN { printf "%.4f", t * (6 * 124475904 + 6 * 12 * 768 * 64) / 989e12 }')
if [ "$(cat "$T/run.rc")" = 0 ] && [ "$(cat "$T/run.out")" = "RESULT framework=llm.c model=d12 B=4 T=64 tok_per_s=$want_tps mfu=$want_mfu step_ms=105.000 steps=4 gpu_used_gib=20.000 impl=train_gpt2cu-cudnn commit=f1e2ace65149" ] &&
   grep -qxF "train_gpt2cu -i $TRAIN_SHARD -j $TRAIN_SHARD -e d12 -b 4 -t 64 -d 256 -x 5 -v 1000000 -m 1 -s 0 -h 0 -n 0 -l 6e-4 -u 0 -r 0 -z 0" "$T/run.args" &&
   grep -q '^step    5/5 | ' "$T/run/llmc.log"; then
    ok "llmc_side.sh run: the mean of llm.c's printed step times after the first (105 ms: $want_tps tok/s, MFU $want_mfu) in one RESULT line; d12 from scratch, B*T per step"
else
    not_ok "llmc_side.sh run: status $(cat "$T/run.rc"): '$(cat "$T/run.out")' (want tok_per_s=$want_tps mfu=$want_mfu); args: $(cat "$T/run.args" 2>/dev/null)"
fi
llmc cfail LLMC_BIN="$T/llmc" LLMC_DATA="$TRAIN_SHARD" LLMC_B=4 LLMC_T=64 LLMC_WARMUP=1 LLMC_STEPS=4 STUB_LLMC_CUDNN_FAILS=1 \
    bash dev/bench/llmc_side.sh run "$T/cfail/llmc.log"
if [ "$(cat "$T/cfail.rc")" = 0 ] && grep -q "^RESULT framework=llm.c .* tok_per_s=$want_tps .* impl=train_gpt2cu-nocudnn " "$T/cfail.out" &&
   grep -qF 'llmc_side: the build without cuDNN ran: the cuDNN build failed (exit 1: [CUDNN ERROR] at file llmc/cudnn_att.cpp:186' "$T/cfail.out" &&
   [ -f "$T/cfail/llmc_cudnn_failed.log" ]; then
    ok "llmc_side.sh run: a failing cuDNN build is followed by the build without cuDNN, named in the RESULT line and why"
else
    not_ok "llmc_side.sh run with the cuDNN build failing: status $(cat "$T/cfail.rc"): $(tr '\n' '|' < "$T/cfail.out" | cut -c1-300)"
fi

# ---- scripts/device_prebuild.sh: its refusal without nvcc, and the digest device_check.sh
# compares (of a copy of the sources: another when one source changes, not when a script does).
PB=$T/pb
mkdir -p "$PB/scripts" "$PB/kernels" "$PB/dev/bench"
cp scripts/device_prebuild.sh "$PB/scripts/"; cp Makefile train_gpt.cu "$PB/"; cp kernels/cuda_attention.cuh "$PB/kernels/"
nonvcc=$(mkdir -p "$T/nobin" && ln -sf "$(command -v bash)" "$T/nobin/bash" && for c in dirname tar git; do ln -sf "$(command -v $c)" "$T/nobin/$c"; done &&
         env PATH="$T/nobin" bash "$PB/scripts/device_prebuild.sh" 2>&1; echo "rc=$?")
d1=$(bash "$PB/scripts/device_prebuild.sh" digest); echo "echo" > "$PB/dev/bench/x.sh"; d2=$(bash "$PB/scripts/device_prebuild.sh" digest)
echo "// changed" >> "$PB/kernels/cuda_attention.cuh"; d3=$(bash "$PB/scripts/device_prebuild.sh" digest)
if [ "$nonvcc" = "$(printf 'device_prebuild: nvcc not found: nothing can be built for the GPU here\nrc=1')" ] &&
   [[ "$d1" =~ ^[0-9a-f]{16}$ ]] && [ "$d1" = "$d2" ] && [ "$d3" != "$d1" ]; then
    ok "device_prebuild.sh: without nvcc one line and status 1; its digest changes with a source ($d1 -> $d3), not with a script"
else
    not_ok "device_prebuild.sh: without nvcc '$nonvcc'; digests '$d1' '$d2' '$d3'"
fi

# ---- scripts/device_check.sh, end to end ------------------------------------------------
# It runs from a copy of the tree (its own scripts, bench_gpu.sh, placeholders for the
# dev/test/test_*_cuda.cu it derives its targets from) with stand-ins on PATH:
#   - nvidia-smi as above (or one failing as without a driver), nvcc, mpicc; the CUDA versions
#     of driver and nvcc are STUB_DRIVER_CUDA and STUB_NVCC_RELEASE [13.0];
#   - make: "builds" the targets it is given by copying stubs in (a target it has none for
#     fails as make does; STUB_MAKE_MPI_FAILS=1: fails unless NO_MPI=1), and logs its arguments;
#   - build/test_*_cuda: ok / not ok lines by name (test_backend_cuda has a failing check;
#     test_attention_cuda prints the three implementations' timings); STUB_KERNELS_HANG=1
#     makes test_kernels_cuda hang after leaving a process behind in a session of its own,
#     STUB_KERNELS_SKIP=1 skip itself as without a GPU, STUB_ALL_HANG=1 every program hang;
#   - train_gpt: step lines, a cuda-style profile table (its largest row differs per model),
#     "average step" and peak memory lines, of figures fixed per model; STUB_D48_OOM_ABOVE_B: d48 out of memory above that B;
#   - dev/test/test_train_gpu.sh: logs the GPU_TESTS it got and checks the data it was given
#     (STUB_E2E_FAIL=1: one more check, failed, and status 0 all the same, as the real one);
#   - compute-sanitizer (only where asked for): memcheck's lines, 2 errors in test_backend_cuda;
#     STUB_SAN_UNSUPPORTED=1: refuses the device, as seen on gVisor.
DC=$T/dc
mkdir -p "$DC/bin" "$DC/san" "$DC/nogpu" "$DC/stubs/build"
cat > "$DC/bin/nvcc" <<'EOF2'
#!/usr/bin/env bash
echo "Cuda compilation tools, release ${STUB_NVCC_RELEASE:-13.0}, V${STUB_NVCC_RELEASE:-13.0}.88"
EOF2
printf '#!/usr/bin/env bash\nexit 0\n' > "$DC/bin/mpicc"
cat > "$DC/nogpu/nvidia-smi" <<'EOF2'
#!/usr/bin/env bash
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
exit 9
EOF2
cat > "$DC/bin/make" <<'EOF2'
#!/usr/bin/env bash
echo "$*" >> "$STUB_STATE/make.args"
if [ -n "${STUB_MAKE_MPI_FAILS:-}" ] && [[ " $* " != *" NO_MPI=1 "* ]]; then
    echo "comm/comm_mpi.c:3:10: fatal error: mpi.h: No such file or directory"; exit 2
fi
for a in "$@"; do
    case "$a" in
        -*|*=*) ;;
        train_gpt) cp "$STUB_DIR/train_gpt" train_gpt ;;
        build/test_*_cuda) mkdir -p build && cp "$STUB_DIR/kernel_test" "$a" ;;
        build/bench_attention_cuda) mkdir -p build && cp "$STUB_DIR/attention_bench" "$a" ;;
        build/bench_vector_cuda) mkdir -p build && cp "$STUB_DIR/vector_bench" "$a" ;;
        *) echo "make: *** No rule to make target '$a'.  Stop."; exit 2 ;;
    esac
done
EOF2
cat > "$DC/stubs/kernel_test" <<'EOF2'
#!/usr/bin/env bash
n=$(basename "$0")
[ -n "${STUB_ALL_HANG:-}" ] && exec sleep 60
# Without a usable GPU a test program prints its skip line alone, as the real ones do.
[ "$n" = test_kernels_cuda ] && [ -n "${STUB_KERNELS_SKIP:-}" ] && { echo "ok - cuda kernels # skip no GPU"; exit 0; }
echo "# device: NVIDIA H200 (sm_90)"
echo "ok - $n check 1"
echo "ok - $n check 2"
case "$n" in
    test_attention_cuda)
        echo "ok - attention flash vs cublas B=4 T=1024 NH=12 hs=64"
        echo "ok - attention flash B=1 T=200 NH=3 hs=32 # skip head size not supported"
        for r in "flash 0.400 1.000" "cublas 0.800 2.400"; do
            set -- $r
            echo "# attention $1 B=4 T=1024 NH=12 hs=64: forward $2 ms (100.0 TFLOP/s causal), backward $3 ms (100.0 TFLOP/s at 2.5x forward flops)"
        done ;;
    test_backend_cuda) echo "not ok - reduce-scatter off by 3.1e-02 (stub)"; exit 1 ;;
    test_kernels_cuda)
        if [ -n "${STUB_KERNELS_HANG:-}" ]; then
            setsid bash -c 'echo $$ > "$STUB_STATE/leftover.pid"; exec sleep 60' < /dev/null > /dev/null 2>&1 &
            sleep 60
        fi ;;
esac
exit 0
EOF2
cat > "$DC/stubs/attention_bench" <<'EOF2'
#!/usr/bin/env bash
# build/bench_attention_cuda: its lines, flash and cublas timed at both shapes, cudnn not in the build,
# flash-pipelined not initialised (a name with a hyphen: device_check's pattern must take it).
[ -n "${STUB_ALL_HANG:-}" ] && exec sleep 60
echo "# attention, causal, bf16, KVH = NH; FLOPs: forward 4*B*NH*T*T*hs/2, backward 2.5x, fwd+bwd 3.5x"
for r in "flash d12 32 12 1.000 151.2 2.000 189.0 3.000 176.4" "flash d48 16 25 1.100 143.1 2.400 163.9 3.500 157.3" \
         "cublas d12 32 12 3.000 50.4 6.000 63.0 9.000 58.8" "cublas d48 16 25 3.300 47.7 7.000 56.2 10.300 53.5"; do
    set -- $r
    echo "attention impl=$1 shape=$2 B=$3 T=1024 NH=$4 hs=64 fwd_ms=$5 fwd_tflops=$6 bwd_ms=$7 bwd_tflops=$8 fwdbwd_ms=$9 fwdbwd_tflops=${10}"
done
echo "attention impl=flash-pipelined not available: its context could not be initialised here (status 1; its message above)"
echo "attention impl=cudnn not available: this build has no attention implementation of that name"
EOF2
cat > "$DC/stubs/vector_bench" <<'EOF2'
#!/usr/bin/env bash
# build/bench_vector_cuda: the copy bandwidth, then rows at both shapes, one within the target.
[ -n "${STUB_ALL_HANG:-}" ] && exec sleep 60
echo 'vector copy_gbs=3712.4 how="cudaMemcpy device to device, 256 MiB x 5, best; read + write counted"'
echo "vector kernel=layernorm_forward shape=d12 mb=100.860 ms=0.0400 copy_ms=0.0272 ratio=1.47 target=NOT_met"
echo "vector kernel=crossentropy_fwd_bwd shape=d12 mb=6593.708 ms=2.0000 copy_ms=1.7762 ratio=1.13 target=met"
echo "vector kernel=layernorm_forward shape=d48 mb=104.907 ms=0.0500 copy_ms=0.0283 ratio=1.77 target=NOT_met"
echo "vector kernel=crossentropy_fwd_bwd shape=d48 mb=3296.854 ms=1.2000 copy_ms=0.8881 ratio=1.35 target=NOT_met"
EOF2
cat > "$DC/stubs/train_gpt" <<'EOF2'
#!/usr/bin/env bash
# train_gpt --device cuda -m MODEL -b B -t T -x STEPS --profile-step P ...: figures per model.
# train_gpt --plan ... [--calibrate-from LOG]: a planned step of 250 ms, or a calibrated profile.
m=""; b=0; t=0; x=0; p=0; plan=0; cal=""
while [ $# -gt 0 ]; do
    case "$1" in
        -m) m=$2; shift ;; -b) b=$2; shift ;; -t) t=$2; shift ;; -x) x=$2; shift ;; --profile-step) p=$2; shift ;;
        --plan) plan=1 ;; --calibrate-from) cal=$2; shift ;;
    esac
    shift
done
if [ "$plan" = 1 ]; then
    echo "$m $b $t ${cal:-plan}" >> "$STUB_STATE/plans"
    if [ -n "$cal" ]; then
        grep -q '^profile of step' "$cal" || { echo "error: --calibrate-from $cal: no --profile-step table in it" >&2; exit 1; }
        printf '#   matmul    measured %10.3f ms, planned %10.3f ms -> time scale %.4g\n' 451.3 300.0 1.504
        echo "name=h200-calibrated"; echo "matmul_time_scale=1.504"
    else
        echo "step 250.00 ms | 1000 tokens/s (all 1 ranks) | MFU 40.0%"
    fi
    exit 0
fi
[ -n "${STUB_TRAIN_HANG:-}" ] && exec sleep 60
if [ "$m" = d48 ] && [ "$b" -gt "${STUB_D48_OOM_ABOVE_B:-999}" ]; then
    echo "CUDA error at train/device.cuh:140: out of memory (cudaMalloc(&p, n))" >&2; exit 1
fi
case "$m" in
    d12) n=124475904; tps=412345; rows=("attention|backward|21.500|31.2|12" "matmul (transformer blocks)|backward|20.100|29.1|48"
                                       "matmul (lm head)|forward|9.900|14.3|1") ;;
    d48) n=1557686400; tps=51234; rows=("matmul (transformer blocks)|backward|301.200|37.1|192" "matmul (transformer blocks)|forward|150.100|18.5|192"
                                       "attention|backward|120.400|14.8|48") ;;
esac
ms=$(awk -v b="$b" -v t="$t" -v r="$tps" 'BEGIN { printf "%.1f", 1000 * b * t / r }')
echo "fsdp.c train_gpt | device cuda (requested) | 1 rank(s) via single (mpi), 16 thread(s) each"
echo "NVIDIA H200: sm_90, 132 SMs, 143771 MiB | peak 989 TFLOP/s"
echo "model: stand-in $m: $n parameters"
for ((s = 1; s <= x; s++)); do
    if [ "$s" = "$p" ]; then
        echo "profile of step $s (rank 0, cuda device; the stream's time between marks): $ms ms, $ms ms on the host clock"
        for r in "${rows[@]}"; do
            IFS='|' read -r name dir rms pct cnt <<< "$r"
            printf '  %-30s %-8s %10s ms %5s%%  %5d interval(s)\n' "$name" "$dir" "$rms" "$pct" "$cnt"
        done
        echo "  host waits in the step (backend): 0"
    fi
    echo "step $(printf '%4d' "$s")/$x | loss 10.9 | norm 1.0 | lr 6.00e-04 | $ms ms | $tps tok/s | mfu 50.0% | mem 90000 MiB | eta 1s"
done
echo "average step $ms ms ($tps tok/s) over $((x - 2)) steps after the first (not the profiled one); data loading 0.010 ms of it (0.00%, rank 0)"
echo "peak GPU memory per rank: 91234.5 MiB measured (max over ranks; cudaMemGetInfo above the context), budget 90000.0 MiB"
EOF2
cat > "$DC/stubs/test_train_gpu.sh" <<'EOF2'
#!/usr/bin/env bash
echo "GPU_TESTS=${GPU_TESTS:-} RUN_TIMEOUT=${GPU_TEST_RUN_TIMEOUT:-}" > "$STUB_STATE/e2e.env"
for f in train val; do
    s="$FSDP_DATA/tinyshakespeare/tiny_shakespeare_$f.bin"
    [ "$(head -c 4 "$s" 2>/dev/null | od -An -tu4 | tr -d ' ')" = 20240520 ] && echo "ok - $f shard there" || echo "not ok - no $f shard: $s"
done
echo "ok - cuda vs cpu (stub)"
[ -n "${STUB_E2E_FAIL:-}" ] && echo "not ok - two identical cuda runs: losses differ (stub)"
exit 0
EOF2
cat > "$DC/san/compute-sanitizer" <<'EOF2'
#!/usr/bin/env bash
# compute-sanitizer --tool memcheck --error-exitcode N PROGRAM
code=0
echo "$*" >> "$STUB_STATE/sanitizer.args"
while [[ "$1" == --* ]]; do [ "$1" = --error-exitcode ] && code=$2; shift 2; done
echo "========= COMPUTE-SANITIZER"
if [ -n "${STUB_SAN_UNSUPPORTED:-}" ]; then
    echo "========= Error: Device not supported"; echo "CUDA error at x.cu:1: unknown error"; exit 1
fi
"$@"; rc=$?
if [ "$(basename "$1")" = test_backend_cuda ]; then
    echo "========= Invalid __global__ write of size 4 bytes"
    echo "=========     at reduce_scatter_kernel+0x40"
    echo "========= ERROR SUMMARY: 2 errors"; exit "$code"
fi
echo "========= ERROR SUMMARY: 0 errors"
exit $rc
EOF2
chmod +x "$DC"/bin/* "$DC"/nogpu/* "$DC"/san/* "$DC"/stubs/*

# check RUN [VAR=VALUE...]: device_check.sh from a fresh copy, its output in $DC/RUN/ (out/,
# state/, log, rc, wall: seconds it took).
# prep_RUN ROOT, where defined, prepares the copy first.
check() {
    local run=$1 d=$DC/$1 t0; shift
    mkdir -p "$d/root/scripts" "$d/root/dev/bench" "$d/root/dev/test" "$d/state"
    cp scripts/device_check.sh scripts/find_nccl.sh scripts/device_deps.sh scripts/device_prebuild.sh "$d/root/scripts/"
    cp dev/bench/bench_gpu.sh dev/bench/llmc_side.sh "$d/root/dev/bench/"
    cp "$DC/stubs/test_train_gpu.sh" "$d/root/dev/test/"
    for f in dev/test/test_*_cuda.cu; do : > "$d/root/$f"; done
    if declare -F "prep_$run" > /dev/null; then "prep_$run" "$d/root"; fi
    t0=$(date +%s)
    env PATH="$DC/bin:$T/bin:$PATH" PYTHON="$T/bin/python-stub" LLMC_BIN="$T/llmc" STUB_DIR="$DC/stubs" STUB_STATE="$d/state" \
        OUT="$d/out" FSDP_DATA="$FSDP_DATA" "$@" timeout 120 bash "$d/root/scripts/device_check.sh" > "$d/log" 2>&1
    echo $? > "$d/rc"
    echo $(( $(date +%s) - t0 )) > "$d/wall"
    mkdir -p "$d/logs" && tar xzf "$d/out/logs.tar.gz" -C "$d/logs" 2>/dev/null
}
# alive PID: PID runs (a zombie, killed but not yet reaped by its adoptive parent, does not).
alive() { [ -r "/proc/$1/stat" ] && ! grep -qE '^[0-9]+ \(.*\) Z' "/proc/$1/stat"; }
# parts RUN: the part names of its summary's lines, in order.
parts() { grep -E '^(PASS|FAIL|SKIP|TIMEOUT) ' "$DC/$1/out/summary.txt" | awk '{ print $2 }' | tr '\n' ' '; }
# line RUN STATUS PART: that part's line, if it has that status.
line() { grep -E "^$2 +$3 \(" "$DC/$1/out/summary.txt"; }
ALL_PARTS="gpu build test_attention_cuda test_backend_cuda test_kernels_cuda bench_d48 bench_d12 plan_d48 plan_d12 attention_timing vector_timing e2e memcheck_test_attention_cuda memcheck_test_backend_cuda "

# prebuilt ROOT DIGEST: .deps/prebuilt in ROOT as scripts/device_prebuild.sh leaves it (the
# stand-ins as the binaries), its MANIFEST with DIGEST ("" for ROOT's own).
prebuilt() {
    local p=$1/.deps/prebuilt t
    mkdir -p "$p/build"
    cp "$DC/stubs/train_gpt" "$p/"
    for t in dev/test/test_*_cuda.cu; do cp "$DC/stubs/kernel_test" "$p/build/$(basename "$t" .cu)"; done
    cp "$DC/stubs/attention_bench" "$p/build/bench_attention_cuda"
    cp "$DC/stubs/vector_bench" "$p/build/bench_vector_cuda"
    printf 'digest %s\ncommit abc1234\nbuilt 2026-12-06 16:00:00 UTC on devbox: sm_90, -march=x86-64-v3, NO_MPI=1, nvcc 13.0\n' \
        "${2:-$(bash "$1/scripts/device_prebuild.sh" digest)}" > "$p/MANIFEST"
}
prep_A() { prebuilt "$1" 0123456789abcdef; }  # built from other sources: not used
prep_E() { prebuilt "$1"; }

# A: the whole check. A failing kernel test, a hanging one (under a 1 s timeout), d48 out of memory at
# B=16, an end-to-end check failing, a compute-sanitizer that does not support the device.
check A DEVICE_CHECK_BUDGET=120 DEVICE_CHECK_TEST_TIMEOUT=1 STUB_KERNELS_HANG=1 STUB_D48_OOM_ABOVE_B=8 STUB_E2E_FAIL=1 \
    STUB_SAN_UNSUPPORTED=1 PATH="$DC/san:$DC/bin:$T/bin:$PATH"
A=$DC/A/out/summary.txt
if [ "$(parts A)" = "$ALL_PARTS" ] && [ "$(cat "$DC/A/rc")" = 1 ] && [ -f "$DC/A/out/logs.tar.gz" ] &&
   [ "$(ls "$DC/A/out")" = "$(printf 'logs.tar.gz\nsummary.txt')" ] && [ -z "$(grep -vxF -f "$DC/A/log" "$A")" ]; then
    ok "device_check.sh: the parts in order ($(parts A | wc -w)), status 1, summary printed; \$OUT holds summary.txt and logs.tar.gz only"
else
    not_ok "device_check.sh: parts '$(parts A)' (want '$ALL_PARTS'), status $(cat "$DC/A/rc"), \$OUT: $(ls "$DC/A/out" | tr '\n' ' '): $(tail -n 3 "$DC/A/log" | tr '\n' '|' | cut -c1-300)"
fi
if line A PASS test_attention_cuda | grep -q '4 ok, 0 not ok (1 of the ok skipped: head size not supported)' &&
   line A FAIL test_backend_cuda | grep -q 'status 1, .*2 ok, 1 not ok' && grep -q '^        not ok - reduce-scatter off by 3.1e-02 (stub)$' "$A" &&
   line A TIMEOUT test_kernels_cuda | grep -q 'a time limit was hit: [0-9]* s of its 1 s' &&
   [ -s "$DC/A/state/leftover.pid" ] && ! alive "$(cat "$DC/A/state/leftover.pid")" &&
   line A SKIP memcheck_test_attention_cuda | grep -q 'compute-sanitizer: ========= Error: Device not supported' &&
   line A SKIP memcheck_test_backend_cuda > /dev/null; then
    ok "device_check.sh: kernel tests PASS / FAIL (its not ok line shown) / TIMEOUT (what it left running killed); memcheck on an unsupported device: SKIP"
else
    not_ok "device_check.sh kernel tests: $(grep -E '^[A-Z]+ +(test_|memcheck)' "$A" | tr '\n' '|' | cut -c1-400); leftover $(cat "$DC/A/state/leftover.pid" 2>/dev/null) $(alive "$(cat "$DC/A/state/leftover.pid" 2>/dev/null)" && echo alive)"
fi
# The figures: those of the logs (in logs.tar.gz), as bench_gpu.sh and the stand-ins made them.
l48=$DC/A/logs/logs/bench_d48/d48_train_gpt.log
avg48=$(grep '^average step' "$l48" 2>/dev/null | sed -E 's/^average step ([0-9.]+) ms \(([0-9.]+) tok\/s\).*/\2 tok\/s, \1 ms\/step/')
mfu48=$(awk 'BEGIN { printf "%.1f%%", 100 * 51234 * (6 * 1557686400 + 6 * 48 * 1600 * 1024) / 989e12 }')
if [ -n "$avg48" ] && line A PASS bench_d48 > /dev/null && grep -q "^          train_gpt: $avg48, MFU $mfu48, GPU mem 89.1 GiB\$" "$A" &&
   grep -qE '^        d48 +8  1024  train_gpt \(cuda\) +51234 ' "$A" && [ -f "$DC/A/logs/logs/bench_d48/d48_b16_oom_train_gpt.log" ] &&
   grep -q -- '-> train_gpt: B=16 ran out of GPU memory (d48_b16_oom_train_gpt.log): B=8 instead' "$A" &&
   grep -q "^        d48 target (train_gpt >= 55% MFU): $mfu48, $(awk -v m="${mfu48%\%}" 'BEGIN { print (m >= 55) ? "met" : "NOT met" }')\$" "$A" &&
   grep -q "^        d48 limiting phase (largest row of train_gpt's profiled step): matmul (transformer blocks) backward, 301.200 ms, 37.1% of the step\$" "$A" &&
   grep -q '^            matmul (transformer blocks)    forward     150.100 ms' "$A"; then
    ok "device_check.sh: d48 at B=8 after B=16 ran out of memory: $avg48, MFU $mfu48 as in its log; limiting phase and profile table"
else
    not_ok "device_check.sh d48: log says '$avg48' (MFU $mfu48); summary: $(sed -n '/bench_d48/,/bench_d12/p' "$A" | grep -E 'train_gpt|d48|limiting' | tr '\n' '|' | cut -c1-500)"
fi
# The planner beside each benchmark: the flags the benchmark ran with (d48 at B=8 after the
# out-of-memory), the planned and measured ms/step and their ratio, the calibration's lines.
ms48=$(awk 'BEGIN { printf "%.1f", 1000 * 8 * 1024 / 51234 }'); r48=$(awk -v m="$ms48" 'BEGIN { printf "%.2f", 250 / m }')
if line A PASS plan_d48 | grep -qF "d48 -b 8 -t 1024 on h200: planned 250.00 ms/step, measured $ms48 ms/step (planned / measured $r48)" &&
   line A PASS plan_d12 | grep -qF "d12 -b 32 -t 1024 on h200: planned 250.00 ms/step" &&
   [ "$(grep -c '^        calibration: matmul    measured    451.300 ms, planned    300.000 ms -> time scale 1.504$' "$A")" = 2 ] &&
   grep -qx "d48 8 1024 $DC/A/out/logs/bench_d48/d48_train_gpt.log" "$DC/A/state/plans" &&
   [ -f "$DC/A/logs/logs/plan_d48.prof" ]; then
    ok "device_check.sh: --plan beside each benchmark (d48 at the B it ran with: planned / measured $r48) and its calibration from the profiled step"
else
    not_ok "device_check.sh plan parts: $(grep -A1 -E '^[A-Z]+ +plan_' "$A" | tr '\n' '|' | cut -c1-400); plans: $(tr '\n' '|' < "$DC/A/state/plans" 2>/dev/null)"
fi
l12=$DC/A/logs/logs/bench_d12/d12_train_gpt.log
tps12=$(grep '^average step' "$l12" 2>/dev/null | sed -E 's/.*\(([0-9.]+) tok\/s\).*/\1/')
r12=$(awk -v a="$tps12" 'BEGIN { printf "%.2fx", a / 500 }')
if [ -n "$tps12" ] && line A PASS bench_d12 > /dev/null && grep -qE "^        d12 +32  1024  train_gpt \(cuda\) +$tps12 " "$A" &&
   grep -qE "^        d12 +32  1024  pytorch-fsdp2, compile max-autotune +500 " "$A" &&
   grep -q "^        d12 target (train_gpt >= 1.3x pytorch tok/s): $r12, met\$" "$A" &&
   grep -q "^        d12 limiting phase (largest row of train_gpt's profiled step): attention backward, 21.500 ms, 31.2% of the step\$" "$A"; then
    ok "device_check.sh: d12 against the baseline: $tps12 tok/s from its log, ratio $r12, target and limiting phase"
else
    not_ok "device_check.sh d12: log tok/s '$tps12'; summary: $(sed -n '/bench_d12/,/attention_timing/p' "$A" | grep -E 'd12' | tr '\n' '|' | cut -c1-500)"
fi
if line A PASS attention_timing | grep -q '(.* s, 4 timings, 2 implementation(s) not available)$' &&
   grep -q '^        cudnn not available: this build has no attention implementation of that name$' "$A" &&
   grep -q '^        flash-pipelined not available: its context could not be initialised here' "$A" &&
   grep -q '^        cublas  d48 (B=16 NH=25): forward 3.300 ms   47.7 TFLOP/s | backward 7.000 ms   56.2 TFLOP/s | fwd+bwd   53.5 TFLOP/s$' "$A" &&
   grep -q '^        d12 target (attention fwd+bwd >= 280 TFLOP/s): flash 176.4, NOT met$' "$A" &&
   grep -q '^        d48 target (attention fwd+bwd >= 280 TFLOP/s): flash 157.3, NOT met$' "$A" &&
   line A FAIL e2e | grep -q 'status 1, .*GPU_TESTS="ref determinism resume offload fp16 llama eval tp": 3 ok, 1 not ok' &&
   grep -q '^        not ok - two identical cuda runs: losses differ (stub)$' "$A" &&
   [ "$(cat "$DC/A/state/e2e.env")" = "GPU_TESTS=ref determinism resume offload fp16 llama eval tp RUN_TIMEOUT=60" ]; then
    ok "device_check.sh: bench_attention_cuda's timings of each implementation and shape, the unavailable one said, the best against the target; e2e with GPU_TESTS, a failed check (status 0) is FAIL"
else
    not_ok "device_check.sh timings / e2e: $(sed -n '/attention_timing/,/memcheck/p' "$A" | tr '\n' '|' | cut -c1-500); e2e got: $(cat "$DC/A/state/e2e.env" 2>/dev/null)"
fi

# bench_vector_cuda's rows: counted, each against the 1.25x target, the bandwidth named.
if line A PASS vector_timing | grep -q '(.* s, 4 rows, 1 within 1.25x of the copy bandwidth (3712.4 GB/s measured))$' &&
   grep -q '^        crossentropy_fwd_bwd       d12:   6593.708 MB    2.0000 ms, at copy bw    1.7762 ms, ratio  1.13, target <= 1.25 met$' "$A" &&
   grep -q '^        layernorm_forward          d48:    104.907 MB    0.0500 ms, at copy bw    0.0283 ms, ratio  1.77, target <= 1.25 NOT met$' "$A"; then
    ok "device_check.sh: bench_vector_cuda's rows, each kernel and shape against the copy bandwidth's 1.25x target"
else
    not_ok "device_check.sh vector_timing: $(sed -n '/vector_timing/,/e2e/p' "$A" | tr '\n' '|' | cut -c1-500)"
fi

# D: a driver older than nvcc (FAIL, the rest goes on), the MPI build fails (then NO_MPI=1), a kernel test skips itself, no Tiny Shakespeare
# (random tokens), a hanging baseline (bench_gpu.sh's own timeout: TIMEOUT), compute-sanitizer.
check D DEVICE_CHECK_BUDGET=120 STUB_DRIVER_CUDA=12.8 STUB_NVCC_RELEASE=13.1 STUB_KERNELS_SKIP=1 STUB_MAKE_MPI_FAILS=1 FSDP_DATA="$DC/none" BENCH_TIMEOUT_TORCH=1 STUB_TORCH_HANG=1 PATH="$DC/san:$DC/bin:$T/bin:$PATH"
D=$DC/D/out/summary.txt
if [ "$(parts D)" = "gpu build build_nompi ${ALL_PARTS#gpu build }" ] && line D FAIL build | grep -q 'status 2' &&
   grep -q '^        comm/comm_mpi.c:3:10: fatal error: mpi.h' "$D" && line D PASS build_nompi > /dev/null &&
   [ "$(sed -n 2p "$DC/D/state/make.args")" = "NO_MPI=1 $(head -n 1 "$DC/D/state/make.args")" ] &&
   grep -q '^data: Tiny Shakespeare not found .*random tokens' "$D" && line D PASS e2e | grep -q '3 ok, 0 not ok' &&
   line D SKIP test_kernels_cuda | grep -qx 'SKIP    test_kernels_cuda (no GPU)' &&
   line D PASS bench_d48 > /dev/null && grep -qE '^        d48 +16  1024  train_gpt' "$D" &&
   line D TIMEOUT bench_d12 > /dev/null && grep -q -- '-> pytorch: --compile-mode max-autotune timed out after 1s' "$D" &&
   line D PASS memcheck_test_attention_cuda | grep -q 'memcheck: 0 error(s)' &&
   line D FAIL memcheck_test_backend_cuda | grep -q 'status 86, .*memcheck: 2 error(s)' && grep -q '^        ========= Invalid __global__ write' "$D" &&
   [ "$(grep -c -- '^--tool memcheck --report-api-errors no --error-exitcode 86 ' "$DC/D/state/sanitizer.args")" = 2 ]; then
    ok "device_check.sh: MPI build fails -> NO_MPI=1; a self-skipped test is SKIP (a partly skipped one PASS); random-token shards; a baseline's timeout is TIMEOUT; memcheck (memory errors only) PASS and FAIL (2 errors)"
else
    not_ok "device_check.sh D: parts '$(parts D)': $(grep -E '^[A-Z]+ |^data' "$D" | tr '\n' '|' | cut -c1-600)"
fi

# B: everything hangs, budget 12 s: the first kernel test takes what is left, the rest are
# skipped, and the whole stays inside the budget.
check B DEVICE_CHECK_BUDGET=12 DEVICE_CHECK_MIN_PART=2 STUB_NVCC_RELEASE=13.1 STUB_ALL_HANG=1 STUB_TRAIN_HANG=1
B=$DC/B/out/summary.txt
nskip=$(grep -c '^SKIP .*(no time left: ' "$B")
if [ "$(parts B)" = "$ALL_PARTS" ] && line B TIMEOUT test_attention_cuda > /dev/null && [ "$nskip" = 7 ] &&
   [ "$(grep -c '^SKIP    memcheck_test_[a-z]*_cuda (compute-sanitizer not found)$' "$B")" = 2 ] &&
   [ "$(cat "$DC/B/wall")" -le 12 ] && grep -qE '^total ([0-9]|1[0-2]) s of 12 s; SOME PARTS FAILED' "$B"; then
    ok "device_check.sh: budget 12 s with every part hanging: done in $(cat "$DC/B/wall") s, a TIMEOUT and $nskip parts skipped for time; no compute-sanitizer: SKIP"
else
    not_ok "device_check.sh B: $(cat "$DC/B/wall") s; parts '$(parts B)'; $(grep -E '^[A-Z]+ |^total' "$B" | cut -c1-80 | tr '\n' '|')"
fi

# C: no GPU visible: a FAIL saying so at once, every other part SKIP, nothing built.
check C PATH="$DC/nogpu:$DC/bin:$T/bin:$PATH"
C=$DC/C/out/summary.txt
if [ "$(parts C)" = "$ALL_PARTS" ] && line C FAIL gpu | grep -q "no GPU visible: NVIDIA-SMI has failed" &&
   [ "$(grep -c '^SKIP .*(no GPU visible)$' "$C")" = 13 ] && [ ! -e "$DC/C/state/make.args" ] &&
   [ "$(cat "$DC/C/rc")" = 1 ] && [ "$(cat "$DC/C/wall")" -le 3 ]; then
    ok "device_check.sh: no GPU visible: FAIL gpu and 13 parts skipped in $(cat "$DC/C/wall") s, status 1, nothing built"
else
    not_ok "device_check.sh C: status $(cat "$DC/C/rc") after $(cat "$DC/C/wall") s: $(grep -E '^[A-Z]+ ' "$C" | cut -c1-80 | tr '\n' '|')"
fi

# The GPU line (runs A, B, D) and A's one build.
margs=$(cat "$DC/A/state/make.args" 2>/dev/null)
want_t="train_gpt$(for f in dev/test/test_*_cuda.cu; do printf ' build/%s' "$(basename "$f" .cu)"; done) build/bench_attention_cuda build/bench_vector_cuda"
if [ "$(wc -l < "$DC/A/state/make.args")" = 1 ] && [[ "$margs" == "-j"*" GPU_ARCH=90 WERROR= $want_t" ]] &&
   line A PASS gpu | grep -qF "(1 GPU(s), NVIDIA H200, 143771 MiB, 580.159.04; CUDA 13.0 (driver), nvcc 13.0 ($DC/bin/nvcc))" &&
   line B PASS gpu | grep -q 'nvcc 13.1 .*: nvcc is newer, runs by minor-version compatibility)$' &&
   line D FAIL gpu | grep -q 'CUDA 12.8 (driver), nvcc 13.1 .*: the driver is too old for nvcc.s programs)$' && line A PASS build > /dev/null; then
    ok "device_check.sh: the driver's CUDA against nvcc's (equal, newer minor, older major); one targeted build: make $margs"
else
    not_ok "device_check.sh build: make called with '$margs' (want '-jN GPU_ARCH=90 WERROR= $want_t'); $(grep -hE '^[A-Z]+ +(gpu|build) ' "$A" "$DC/B/out/summary.txt" "$DC/D/out/summary.txt" | tr '\n' '|')"
fi
# A's prebuilt binaries were built from other sources: said, and built instead. E's are this
# tree's: copied into place and used, nothing compiled.
E=$DC/E/out/summary.txt
check E DEVICE_CHECK_BUDGET=120
if grep -qE '^prebuilt: not used: built from other sources \(digest 0123456789abcdef, this tree.s [0-9a-f]{16}\); building$' "$A" &&
   [ "$(parts E)" = "$ALL_PARTS" ] && [ ! -e "$DC/E/state/make.args" ] &&
   line E PASS build | grep -q "(prebuilt, [0-9]* s: $(echo "$want_t" | wc -w) binaries of .deps/prebuilt, their libraries found here; 2026-12-06 16:00:00 UTC on devbox: sm_90, -march=x86-64-v3, NO_MPI=1, nvcc 13.0, abc1234)" &&
   line E PASS test_attention_cuda > /dev/null && line E PASS bench_d12 > /dev/null && line E PASS attention_timing > /dev/null; then
    ok "device_check.sh: prebuilt binaries of this tree are used (no make), of other sources refused with the digests named"
else
    not_ok "device_check.sh prebuilt: A: $(grep '^prebuilt' "$A"); E: make $(cat "$DC/E/state/make.args" 2>/dev/null); $(grep -E '^[A-Z]+ ' "$E" | cut -c1-200 | tr '\n' '|')"
fi

# test_train_gpu.sh's GPU_TESTS: the checks of the groups named and no others, from a copy of
# the tree with the fake nvidia-smi and a stand-in train_gpt (launched by launch_local.sh, as a
# build without MPI) that writes the same losses on every device and run, a checkpoint at
# --stop-at-step, the steps after it on --resume, and the lines the checks look for (rank 0's
# only, as train_gpt: the mesh line of a --tp run among them).
TG=$T/ttg
mkdir -p "$TG/dev/test" "$TG/scripts"
cp dev/test/test_train_gpu.sh dev/test/lib.sh dev/test/compare_losses.py "$TG/dev/test/"
cp scripts/launch_local.sh scripts/find_cudnn.sh "$TG/scripts/"
cat > "$TG/train_gpt" <<'EOF2'
#!/usr/bin/env bash
o=""; x=20; stop=0; resume=""; sample=0; tp=1
while [ $# -gt 0 ]; do
    case "$1" in
        -o) o=$2; shift ;; -x) x=$2; shift ;; --stop-at-step) stop=$2; shift ;; --resume) resume=$2; shift ;; -s) sample=$2; shift ;;
        --tp) tp=$2; shift ;;
    esac
    shift
done
[ "${RANK:-0}" = 0 ] || exit 0
[ "$tp" -gt 1 ] && echo "tensor parallel: groups of $tp rank(s) (sequence parallel), $((${WORLD_SIZE:-1} / tp)) data-parallel rank(s)"
first=1 last=$x
[ -n "$resume" ] && first=11
[ "$stop" -gt 0 ] && last=$stop
if [ -n "$o" ]; then
    mkdir -p "$o"
    for ((s = first; s <= last; s++)); do echo "{\"step\":$s,\"loss\":$((1000 - s)).5}" >> "$o/metrics.jsonl"; done
    if [ "$stop" -gt 0 ]; then
        ck=$(printf '%s/ckpt/step_%08d' "$o" "$stop")
        mkdir -p "$ck" && echo '{}' > "$ck/manifest.json"
    fi
fi
[ "$sample" -gt 0 ] && echo "sample (step $sample): stand-in"
echo "val loss 9.9"
echo "peak GPU memory per rank: 540.0 MiB measured (max over ranks; cudaMemGetInfo above the context), budget 500.0 MiB"
EOF2
chmod +x "$TG/train_gpt"
# ttg GROUPS: test_train_gpu.sh's ok / not ok lines with GPU_TESTS=GROUPS, names only.
ttg() {
    (cd "$TG" && env PATH="$T/bin:$PATH" PYTHON=python3 GPU_TESTS="$1" TEST_TMP="$TG/tmp_${1// /_}" \
        FSDP_CUDNN_LIB=/stand-in/libcudnn_graph.so.9 \
        timeout 60 bash dev/test/test_train_gpu.sh 2>&1) | grep -E '^(not )?ok - ' | sed -E 's/ \(.*//; s/: .*//' | tr '\n' '|'
}
got1=$(ttg "ref determinism resume")
want1="ok - sampling on cuda|ok - validation on cuda|ok - GPU memory|ok - cuda vs cpu, 20 steps from the same init|ok - two identical cuda runs|ok - cuda|"
got2=$(ttg "cross variants")
want2="ok - cuda checkpoint resumed on the cpu|ok - cpu checkpoint resumed on cuda|ok - --attention cublas vs flash|ok - --attention cudnn vs the default|ok - --reduce-dtype fp32 vs bf16|ok - --gelu-fusion 0 vs 2|"
got3=$(ttg "tp")
want3="ok - TP 2 x DP 1 on one GPU with --comm mpi vs np=1|ok - TP 2 x DP 2 on one GPU with --comm mpi vs np=1|"
if [ "$got1" = "$want1" ] && [ "$got2" = "$want2" ] && [ "$got3" = "$want3" ]; then
    ok "test_train_gpu.sh: GPU_TESTS=\"ref determinism resume\" runs those 6 checks, \"cross variants\" those 6 (cuDNN named by FSDP_CUDNN_LIB), \"tp\" its 2"
else
    not_ok "test_train_gpu.sh GPU_TESTS: 'ref determinism resume' gave '$got1' (want '$want1'); 'cross variants' gave '$got2' (want '$want2'); 'tp' gave '$got3' (want '$want3')"
fi

# test_train_gpu.sh refuses a group it does not know (a typo would check nothing).
out=$(GPU_TESTS="ref determinsm" bash dev/test/test_train_gpu.sh 2>&1); rc=$?
if [ $rc = 1 ] && grep -q "^not ok - GPU_TESTS: unknown group 'determinsm'" <<<"$out"; then
    ok "test_train_gpu.sh: GPU_TESTS with an unknown group is refused"
else
    not_ok "test_train_gpu.sh GPU_TESTS='ref determinsm': status $rc: $(head -c 200 <<<"$out")"
fi
