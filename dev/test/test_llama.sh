#!/usr/bin/env bash
# run_tests: cores 1.8, 149 s
# The Llama 3 family, every check on grouped-query attention (2 query heads
# per kv head): the cpu device against PyTorch (dev/test/torch_llama.py), the cuda device
# against PyTorch under the CPU emulator, then on the cpu device W-equivalence over real MPI
# ranks, resuming on another rank count, activation recompute, multi-block FSDP units, a real
# training run on Tiny Shakespeare, and bad input.
set -u
source dev/test/lib.sh
out=$TEST_TMP
KVH=2   # of 4 heads: grouped-query attention throughout
SECONDS=0
lap() { echo "# $1: ${SECONDS}s"; SECONDS=0; }  # a section's time (comment: not a check)

# ---------------------------------------------------------------------------------------
# 1. PyTorch reference: test_gpt2 dump-llama builds and initialises a tiny Llama, runs it on
#    a batch of Tiny Shakespeare (logits, loss, every gradient, 10 AdamW steps) and writes it
#    all with the initial weights; torch_llama.py redoes it in PyTorch and compares.
#    Twice: plain RoPE at the engine's own init (std 0.02), and Llama 3.1's RoPE scaling with
#    every weight doubled (std 0.04). At std 0.02 the attention is nearly uniform and the
#    scaled pairs' angles stay small at T = 32: the scaling itself would be invisible (its
#    effect on the gradients measured at ~0.9 of the tolerance); doubled, a run without it
#    fails by ~30x. --sensitivity proves, per state, that PyTorch with each named bug fails
#    against the C run: the comparison is able to see that bug at this shape.
ref_shape=(--layers 2 --channels 64 --heads 4 --kv-heads $KVH --ffn-dim 96 --vocab 50257 --max-seq 64
           --rope-theta 500000 --seed 11 --tokens "$TRAIN_SHARD" -b 4 -t 32 --steps 10)
torch_check() {  # torch_check NAME LABEL SENSITIVITY DUMP_ARGS...
    local name=$1 label=$2 bugs=$3; shift 3
    if OMP_NUM_THREADS=2 build/test_gpt2 dump-llama "${ref_shape[@]}" "$@" --out "$out/$name.bin" \
            > "$out/$name.log" 2>&1; then
        local res rc
        res=$($PYTHON dev/test/torch_llama.py --state "$out/$name.bin" --label "$label" --sensitivity "$bugs" --threads 2 2>&1)
        rc=$?
        echo "$res"
        # A crash (a traceback, no verdict) must not pass for silence.
        if [ $rc -ne 0 ] && ! grep -q '^not ok' <<<"$res"; then not_ok "$label: torch_llama.py exited $rc: $(tail -n 2 <<<"$res" | tr '\n' ' ')"; fi
    else
        not_ok "$label: test_gpt2 dump-llama failed: $(tail -n 3 "$out/$name.log" | tr '\n' ' ')"
    fi
    rm -f "$out/$name.bin"  # 75 MB each (the logits over GPT-2's padded vocabulary)
}
torch_check llama_plain "torch llama GQA" kv_heads,rope_halves,swiglu_swap --rope-factor 0
torch_check llama_scaled "torch llama GQA, RoPE scaling" kv_heads,rope_noscale,rope_blend --rope-factor 8 --init-scale 2

# The checker checks itself: a float64 PyTorch run passes, corrupted states and emulated bugs
# (RoPE on halves, k/v heads mapped wrongly, ...) fail, broken files are refused.
$PYTHON dev/test/torch_llama.py --selftest > "$out/selftest.log" 2>&1
if [ $? -eq 0 ]; then ok "torch_llama.py --selftest ($(grep -c '^ok' "$out/selftest.log") checks)"
else not_ok "torch_llama.py --selftest: $(grep -m3 'not ok' "$out/selftest.log" | tr '\n' ' ')"; fi
lap "PyTorch reference"

# ---------------------------------------------------------------------------------------
# 1b. The cuda device against the same PyTorch Llama, under the CPU emulator (dev/cuda_emu):
#     test_gpt2.cu, with train_gpt.cu's CUDA device, built with g++ for the emulator, runs
#     dump-llama --device cuda (bf16 weights, activations and gradients; fp32 master weights
#     and AdamW) and torch_llama.py holds the state to its bf16 bounds (the state says which
#     device wrote it). Head size 64, so the flash kernels run (mma.sync), 2 kv heads for 4
#     query heads. Measured under the emulator: logits 1.4e-2 (bound 5.4e-2), loss 2.9e-5
#     relative, gradients at most 1.1e-2 relative L2 error per tensor (bound 4e-2), step losses
#     5.1e-4 and norms 1.2e-2 relative over 10 AdamW steps (bf16 noise grows as the loss falls
#     from 10.85 to 5.03). The model bugs named below fail against it; at these bounds neither
#     RoPE scaling (its effect at T = 32 sits below bf16 noise: its cuda kernel is checked
#     against its CPU twin in test_kernels_emu.sh) nor decay_all/no_clip (optimizer code shared
#     with the cpu device, checked above at fp32 bounds) would show. A logic check of the
#     cuda path, NOT a GPU result.
emu_torch_check() {
    (
    source dev/cuda_emu/build.sh
    LIB_OBJS=()
    for src in util/*.c comm/*.c kernels/*.c fsdp/*.c dataloader/*.c checkpoint/*.c model/*.c train/*.c; do LIB_OBJS+=("build/${src%.c}.o"); done
    for tool in g++ mpicxx; do
        command -v $tool >/dev/null || { ok "$TAG torch llama GQA on cuda # skip $tool not found"; exit 0; }
    done
    CUDA_SRCS=(train_gpt.cu kernels/*.cuh fsdp/*.cuh train/*.cuh)
    if ! python3 $E/transform.py $B/gpt2_src dev/test/test_gpt2.cu "${CUDA_SRCS[@]}" 2>"$out/gpt2_transform.err"; then
        not_ok "$TAG transform.py failed on dev/test/test_gpt2.cu: $(tr '\n' ' ' <"$out/gpt2_transform.err" | cut -c1-300)"
        exit 0
    fi
    build_runtime || exit 0
    build_cudnn || exit 0  # train_gpt.cu's device calls the cudnn object (without the headers: built with FSDP_NO_CUDNN, which refuses every graph, saying why)
    # auto must not pick up a cuDNN installed here: this test checks the flash path.
    export FSDP_CUDNN_LIB=$PWD/$B/no_cudnn/libcudnn_graph.so.9
    local exe=$B/test_gpt2
    if ! build $exe $B/gpt2_src/dev/test/test_gpt2.cu $B/gpt2_src/train_gpt.cu $B/gpt2_src/kernels/*.cuh \
            $B/gpt2_src/fsdp/*.cuh $B/gpt2_src/train/*.cuh "${HDRS[@]}" \
            $(ls util/*.h comm/*.h kernels/*.h fsdp/*.h dataloader/*.h checkpoint/*.h model/*.h train/*.h) \
            "${RUNTIME_OBJS[@]}" "${LIB_OBJS[@]}" $B/cuda_attention_cudnn.o -- \
        g++ -std=gnu++17 -O2 -w -D__CUDACC__ -I$E/include $(mpicxx --showme:compile) -DOMPI_SKIP_MPICXX \
            -I$B/gpt2_src -I. -I$BLAS_INC -fopenmp -x c++ $B/gpt2_src/dev/test/test_gpt2.cu -x none \
            "${RUNTIME_OBJS[@]}" "${LIB_OBJS[@]}" "${CUDNN_OBJS[@]}" -o $exe $(mpicxx --showme:link) -L$BLAS_DIR -Wl,-rpath,$BLAS_DIR \
            -lopenblas -lzstd -lpcre2-8 -lcjson -lxxhash -lpthread -lm; then
        build_failed "dev/test/test_gpt2.cu for the emulator" $exe
        exit 0
    fi
    local shape=(--layers 2 --channels 256 --heads 4 --kv-heads $KVH --ffn-dim 384 --vocab 50257 --max-seq 64
                 --rope-theta 500000 --seed 11 --tokens "$TRAIN_SHARD" -b 4 -t 32 --steps 10)
    if timeout -k 5 300 env OMP_NUM_THREADS=1 $exe dump-llama "${shape[@]}" --device cuda --out "$out/llama_cuda.bin" \
            > "$out/llama_cuda.log" 2>&1; then
        if grep -qE '^EMU: ' "$out/llama_cuda.log"; then
            not_ok "$TAG dump-llama --device cuda: $(grep -m2 '^EMU: ' "$out/llama_cuda.log" | tr '\n' ' ' | cut -c1-300)"
        elif ! grep -qE '^# cuda_emu: [1-9][0-9]* launches.*[( ][1-9][0-9]* mma[.]sync' "$out/llama_cuda.log"; then
            not_ok "$TAG dump-llama --device cuda: no flash attention ran (no mma.sync in: $(grep '^# cuda_emu' "$out/llama_cuda.log" | cut -c1-200))"
        else
            local res rc
            res=$($PYTHON dev/test/torch_llama.py --state "$out/llama_cuda.bin" --label "$TAG torch llama GQA on cuda" \
                  --sensitivity kv_heads,rope_halves,rope_sign,swiglu_swap,rmsnorm_mean --threads 2 2>&1)
            rc=$?
            echo "$res"
            if [ $rc -ne 0 ] && ! grep -q '^not ok' <<<"$res"; then not_ok "$TAG torch llama GQA on cuda: torch_llama.py exited $rc: $(tail -n 2 <<<"$res" | tr '\n' ' ')"; fi
        fi
    else
        not_ok "$TAG test_gpt2 dump-llama --device cuda failed: $(grep -v '^# cuda_emu' "$out/llama_cuda.log" | tail -n 3 | tr '\n' ' ' | cut -c1-300)"
    fi
    rm -f "$out/llama_cuda.bin"
    )
}
# It builds train_gpt.cu with g++ (one core, about a minute) and then runs one process: in the
# background, beside the cpu runs below; its lines are printed at the end (or at any exit).
emu_torch_check > "$out/emu_torch.out" 2>&1 &
emu_pid=$!
emu_report() { wait $emu_pid; cat "$out/emu_torch.out"; echo "# cuda (emulated) against PyTorch, in the background: done"; }
trap emu_report EXIT

# ---------------------------------------------------------------------------------------
# 2. FSDP over real MPI ranks (oversubscribed, as test_fsdp.sh): a tiny GQA Llama (3 blocks
#    of 64 channels, 4 heads, 2 kv heads) on Tiny Shakespeare, 12 sequences of 16 tokens a
#    step at every W, 10 steps, validation at steps 0, 5 and 10. (lr 3e-3: the loss falls by
#    ~1 over the 10 steps, where test_fsdp.sh's 1e-3 gives ~0.4.)
common=(./train_gpt --device cpu --arch llama3 --layers 3 --channels 64 --heads 4 --kv-heads $KVH --ffn-dim 96
        --max-seq 64 -t 16 -d 192 -x 10 -v 5 --val-steps 1 -i "$TRAIN_SHARD" -j "$VAL_SHARD" --threads 1
        -l 3e-3 -u 2 --seed 5)
# Ranks only change the order of floating-point sums: test_fsdp.sh's tolerance for GPT-2.
RTOL=1e-5
run() {  # run NAME NP ARGS...: one job, its output in $out/NAME.log; a hang is killed after 120 s
    local name=$1 np=$2; shift 2
    if ! timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
            "${common[@]}" "$@" > "$out/$name.log" 2>&1; then
        not_ok "llama $name: run failed: $(tail -n 3 "$out/$name.log" | tr '\n' ' ')"
        return 1
    fi
}
compare() { $PYTHON dev/test/compare_losses.py "$@"; }
metrics() { echo "$out/$1/metrics.jsonl"; }

run ref 1 -b 12 -o "$out/ref" || exit 1
# The run is a Llama with GQA, not a GPT-2 that ignored the flags: its setup says so.
model_line=$(grep -m1 '^model: ' "$out/ref.log")
if grep -q "^model: Llama 3, 3 layers, 4 heads ($KVH kv heads), 64 channels, SwiGLU 96" <<<"$model_line"; then
    ok "llama ref run is the GQA Llama asked for ($model_line)"
else
    not_ok "llama ref run: its model line is not the GQA Llama asked for: '$model_line'"
fi
for np in 2 3 4; do
    run np$np $np -b $((12 / np)) -o "$out/np$np" &&
        compare "llama W-equivalence: np=$np equals np=1" "$(metrics ref)" "$(metrics np$np)" --rtol $RTOL
done
# Gradient accumulation (3 micro-steps), reduce-scattered every micro-step and, with
# --no-grad-sync-until-last, summed unsharded until the last: then the later micro-steps' backward
# adds to the gradient buffer, and Llama's embedding gradient (its own tensor, where GPT-2's
# adds to the head's) must be zeroed by the first micro-step only (the backward zeroing it
# every micro-step, tried by hand, fails the second check by 1.5e-4 from step 2 on).
run np2_accum3 2 -b 2 -o "$out/np2_accum3" &&
    compare "llama np=2 with 3 micro-steps equals np=1" "$(metrics ref)" "$(metrics np2_accum3)" --rtol $RTOL
run np2_accum3_nosync 2 -b 2 -o "$out/np2_accum3_nosync" --no-grad-sync-until-last &&
    compare "llama np=2, 3 micro-steps, --no-grad-sync-until-last equals np=1" "$(metrics ref)" \
        "$(metrics np2_accum3_nosync)" --rtol $RTOL
$PYTHON - "$(metrics ref)" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
first, last = rows[0]["loss"], rows[-1]["loss"]
print(("ok - " if last < first - 0.5 else "not ok - ") + f"llama loss falls by more than 0.5 over 10 steps ({first:.3f} -> {last:.3f})")
PY

# Resume on another rank count: saved after step 5 at np=2, resumed at np=2 (bitwise the
# uninterrupted np=2 run), np=3 and np=1 (within the W tolerance of it). The model is the
# checkpoint's: the np=2 resume gives no model flags (no --arch, shape, RoPE), as does one saved
# and resumed at np=1 (bitwise the np=1 run); a Llama's --max-seq is not in its weights, so a
# resume may raise it (said on a line; the same losses, bitwise).
noshape=("${common[@]:0:3}" "${common[@]:17}")
[ "${common[3]} ${common[15]} ${common[17]}" = "--arch --max-seq -t" ] ||
    not_ok "test bug: common[3], [15], [17] are ${common[3]} ${common[15]} ${common[17]}, not --arch --max-seq -t"
run_noshape() {  # run_noshape NAME NP ARGS...: as run, without the model flags
    local name=$1 np=$2; shift 2
    if ! timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
            "${noshape[@]}" "$@" > "$out/$name.log" 2>&1; then
        not_ok "llama $name: run failed: $(tail -n 3 "$out/$name.log" | tr '\n' ' ')"
        return 1
    fi
}
if run split1 1 -b 12 -o "$out/split1" --ckpt-every 5 --stop-at-step 5; then
    run_noshape resume1_noflags 1 -b 12 -o "$out/resume1_noflags" --resume "$out/split1/ckpt/step_00000005" &&
        compare "llama resume without model flags: saved and resumed at np=1 (bitwise)" "$(metrics ref)" \
            "$(metrics resume1_noflags)" --exact --from-step 6
    if run_noshape resume1_maxseq 1 -b 12 -o "$out/resume1_maxseq" --resume "$out/split1/ckpt/step_00000005" --max-seq 128; then
        grep -qF -- "--resume $out/split1/ckpt/step_00000005: --max-seq 128 replaces the checkpoint's 64" "$out/resume1_maxseq.log" ||
            not_ok "llama resume with --max-seq 128: no line saying it replaces the checkpoint's 64"
        compare "llama resume with --max-seq 128 (not in a Llama's weights): the same losses (bitwise)" "$(metrics ref)" \
            "$(metrics resume1_maxseq)" --exact --from-step 6
    fi
fi
if run split2 2 -b 6 -o "$out/split2" --ckpt-every 5 --stop-at-step 5; then
    ck="$out/split2/ckpt/step_00000005"
    run_noshape resume2 2 -b 6 -o "$out/resume2" --resume "$ck" &&
        compare "llama resume without model flags: saved at np=2, resumed at np=2 (bitwise)" "$(metrics np2)" \
            "$(metrics resume2)" --exact --from-step 6
    run resume3 3 -b 4 -o "$out/resume3" --resume "$ck" &&
        compare "llama resume: saved at np=2, resumed at np=3" "$(metrics np2)" "$(metrics resume3)" --rtol $RTOL --from-step 6
    run resume1 1 -b 12 -o "$out/resume1" --resume "$ck" &&
        compare "llama resume: saved at np=2, resumed at np=1" "$(metrics np2)" "$(metrics resume1)" --rtol $RTOL --from-step 6
fi

# Activation recompute rebuilds what was not kept with the forward's kernels on the same
# inputs (RMSNorm, RoPE'd qkv, SwiGLU): bitwise the losses of the run that keeps everything.
for mode in selective full; do
    run recompute_$mode 1 -b 12 -o "$out/recompute_$mode" --recompute $mode &&
        compare "llama --recompute $mode == none, np=1 (bitwise)" "$(metrics ref)" "$(metrics recompute_$mode)" --exact
done
# Units of 2 blocks (3 blocks: units of 2 and 1), at np=2 with recompute too.
run units2 2 -b 6 -o "$out/units2" --fsdp-unit-layers 2 &&
    compare "llama --fsdp-unit-layers 2, np=2" "$(metrics ref)" "$(metrics units2)" --rtol $RTOL
run units2_full 2 -b 6 -o "$out/units2_full" --fsdp-unit-layers 2 --recompute full &&
    compare "llama --fsdp-unit-layers 2 --recompute full == without recompute, np=2 (bitwise)" "$(metrics units2)" \
        "$(metrics units2_full)" --exact
lap "FSDP runs"

# ---------------------------------------------------------------------------------------
# 3. A real training run: a small GQA Llama on Tiny Shakespeare, loss must fall well below
#    its start (as GPT-2's in test_gpt2.sh), and the sample decodes to text.
if ./train_gpt --device cpu --arch llama3 --layers 2 --channels 128 --heads 4 --kv-heads $KVH --ffn-dim 256 --max-seq 64 \
        -b 8 -t 64 -x 40 -l 2e-3 -u 5 -v 20 --val-steps 4 -s 40 -g 24 -i "$TRAIN_SHARD" -j "$VAL_SHARD" --threads 2 \
        -o "$out/shakespeare" > "$out/shakespeare.log" 2>&1; then
    $PYTHON - "$out/shakespeare/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r["loss"] for r in rows if "loss" in r]
val = [r["val_loss"] for r in rows if "val_loss" in r]
first, last = train[0], sum(train[-5:]) / 5
ok = len(train) == 40 and last < first - 3.0 and val[-1] < val[0] - 3.0
print(("ok - " if ok else "not ok - ") + f"llama Tiny Shakespeare loss falls: train {first:.3f} -> {last:.3f} (mean of last 5, "
      f"{len(train)} steps), val {val[0]:.3f} -> {val[-1]:.3f}")
PY
    sample=$(awk '/^sample \(step 40\)/ {on = 1; next} on && /^---$/ {if (++seen == 2) exit; next} on' "$out/shakespeare.log" | tr '\n' ' ')
    if grep -q '[a-zA-Z]' <<<"$sample" && ! grep -qE '^[0-9 ]+$' <<<"$sample"; then ok "llama --sample-every prints decoded text: ${sample:0:80}"
    else not_ok "llama --sample-every: no decoded sample in the log: ${sample:0:120}"; fi
else
    not_ok "llama Tiny Shakespeare training run failed: $(tail -n 3 "$out/shakespeare.log" | tr '\n' ' ')"
fi
lap "Tiny Shakespeare"

# ---------------------------------------------------------------------------------------
# 4. Bad input: one clear error line, a non-zero exit, nothing trained or written.
# expect_one_error NAME PATTERN CMD...: as lib.sh's expect_error (a non-zero exit, not a
# signal, PATTERN in the output), and PATTERN on the one and only line starting with "error".
expect_one_error() {
    local name=$1 pattern=$2; shift 2
    local out rc errs
    out=$("$@" 2>&1); rc=$?
    errs=$(grep '^error' <<<"$out")
    if [ "$rc" -eq 0 ]; then not_ok "$name: exited 0"
    elif [ "$rc" -ge 128 ]; then not_ok "$name: killed by signal $((rc - 128)): $(tail -n 2 <<<"$out" | tr '\n' ' ')"
    elif [ "$(grep -c . <<<"$errs")" -ne 1 ]; then
        not_ok "$name: $(grep -c . <<<"$errs") lines start with 'error', want 1: $(head -c 300 <<<"$out" | tr '\n' ' ')"
    elif ! grep -qE -- "$pattern" <<<"$errs"; then not_ok "$name: the error does not match /$pattern/: $errs"
    else ok "$name (exit $rc: ${errs:0:160})"; fi
}
T=(./train_gpt --device cpu -b 2 -t 16 -x 1 -v 0 --threads 1 -i "$TRAIN_SHARD")
L=("${T[@]}" --arch llama3 --layers 1 --max-seq 32 --ffn-dim 96)
expect_one_error "llama: --kv-heads not dividing --heads" "--kv-heads 3 does not divide --heads 4" \
    "${L[@]}" --channels 64 --heads 4 --kv-heads 3
expect_one_error "llama: an odd head size" "--channels 36 / --heads 4 is an odd head size" \
    "${L[@]}" --channels 36 --heads 4 --kv-heads 2
expect_one_error "--kv-heads with a GPT-2 preset" "--kv-heads is not a GPT-2 setting: give --arch llama3 or a llama3 preset" \
    "${T[@]}" -m d2 --kv-heads 2
expect_one_error "--ffn-dim without a Llama model" "--ffn-dim is not a GPT-2 setting: give --arch llama3" \
    "${T[@]}" --layers 1 --channels 64 --heads 4 --ffn-dim 96
expect_one_error "--rope-original-max-pos without a Llama model" "--rope-original-max-pos is not a GPT-2 setting" \
    "${T[@]}" --layers 1 --channels 64 --heads 4 --rope-original-max-pos 4096
expect_one_error "llama: RoPE scaling flags without --rope-factor > 1" \
    "--rope-low-freq-factor, --rope-high-freq-factor and --rope-original-max-pos apply to RoPE scaling \(--rope-factor > 1\), and this model's factor is 0" \
    "${L[@]}" --channels 64 --heads 4 --kv-heads 2 --rope-low-freq-factor 2
expect_one_error "llama: --rope-low-freq-factor not below --rope-high-freq-factor" \
    "RoPE scaling needs --rope-low-freq-factor 8 below --rope-high-freq-factor 4" \
    "${L[@]}" --channels 64 --heads 4 --kv-heads 2 --rope-factor 8 --rope-low-freq-factor 8
expect_one_error "--arch gpt2 -m llama3:tiny" "--arch gpt2 contradicts --model llama3:tiny" "${T[@]}" --arch gpt2 -m llama3:tiny
expect_one_error "llama: --save-model refused before training" "--save-model writes llm.c's GPT-2 model file" \
    "${L[@]}" --channels 64 --heads 4 --kv-heads 2 --save-model "$out/llama_model.bin"
if [ -e "$out/llama_model.bin" ] || [ -e "$out/llama_model.bin.tmp" ]; then not_ok "llama: --save-model refused, yet a file was written"
else ok "llama: --save-model refused: no model file written"; fi
# Checkpoints across the families: the message names both architectures.
if run_np 1 ./train_gpt --device cpu --layers 1 --channels 64 --heads 4 --max-seq 32 -b 2 -t 16 -x 1 -v 0 --threads 1 \
        -i "$TRAIN_SHARD" --ckpt-every 1 -o "$out/gpt2ck" > "$out/gpt2ck.log" 2>&1; then
    expect_one_error "GPT-2 checkpoint resumed into a Llama run" \
        "the checkpoint's model has --arch gpt2 \(given llama3\), --kv-heads 2 \(not a GPT-2 setting\), --ffn-dim 96 \(not a GPT-2 setting\)" \
        "${L[@]}" --channels 64 --heads 4 --kv-heads 2 --resume "$out/gpt2ck/ckpt/step_00000001"
else
    not_ok "GPT-2 checkpoint for the cross-family resume: run failed: $(tail -n 3 "$out/gpt2ck.log" | tr '\n' ' ')"
fi
if [ -d "$out/split2/ckpt/step_00000005" ]; then
    ck=(--resume "$out/split2/ckpt/step_00000005")
    expect_one_error "Llama checkpoint resumed into a GPT-2 run" "the checkpoint's model has --arch llama3 \(given gpt2\)" \
        "${T[@]}" --arch gpt2 --layers 3 --channels 64 --heads 4 --max-seq 64 "${ck[@]}"
    expect_one_error "Llama checkpoint resumed with other kv heads" "the checkpoint's model has --kv-heads $KVH \(given 4\)" \
        "${common[@]}" -b 12 --kv-heads 4 "${ck[@]}"
    expect_one_error "Llama checkpoint resumed with RoPE scaling flags but no scaling" \
        "--rope-low-freq-factor, --rope-high-freq-factor and --rope-original-max-pos apply to RoPE scaling \(--rope-factor > 1\), and this model's factor is 0" \
        "${noshape[@]}" -b 12 --rope-high-freq-factor 8 "${ck[@]}"
fi
lap "bad input"
