#!/usr/bin/env bash
# GPU end-to-end tests of train_gpt --device cuda (the kernels have their own tests in
# build/test_*_cuda, run by test_kernels_gpu.sh). On a machine without a usable GPU (or a build
# without nvcc) this reports one skip and exits 0. With a GPU, on a small GPT-2 (2 layers,
# 128 channels, head size 64 so that flash attention applies) and Tiny Shakespeare:
#   - 20 steps on cuda vs cpu from the same initial weights (same seed): losses within 2%
#     (bf16 activations and parameters against the fp32 reference);
#   - two identical cuda runs: bitwise equal losses;
#   - cuda: save at step 10 + resume == 20 uninterrupted steps, bitwise;
#   - a cuda checkpoint resumed on the cpu, and a cpu checkpoint resumed on cuda: losses
#     within 2% of the uninterrupted runs (checkpoints are fp32 and device-independent);
#   - np=2 ranks sharing the GPU with --comm mpi vs np=1: within 1e-2 (bf16 reductions); the
#     same with HSDP (2 replicas); gradient accumulation with and without
#     --no-grad-sync-until-last within 1e-2;
#   - tensor parallel on one GPU, staged (--comm mpi): TP 2 (np=2) and TP 2 x DP 2 (np=4) vs
#     np=1 within 1e-2;
#   - --attention cublas vs flash, --reduce-dtype fp32 vs bf16, --gelu-fusion 0 vs 2: within 2%;
#   - sampling and validation run on cuda; the measured peak GPU memory agrees with the
#     printed budget (at least it, at most max(64 MiB, 1%) above it).
# Every run is bounded by `timeout` (GPU_TEST_RUN_TIMEOUT seconds [180]); a failing run is
# reported and the others still run.
#
# GPU_TESTS selects groups of checks (default: all), e.g. GPU_TESTS="ref determinism resume" as
# scripts/device_check.sh runs them; the cuda reference run is always made:
#   ref          cuda vs cpu, sampling, validation, measured memory vs budget
#   determinism  two identical cuda runs
#   resume       save + resume on cuda
#   cross        checkpoints across devices (cuda -> cpu, cpu -> cuda)
#   ranks        np=2 with --comm mpi, np=1 mpi vs nccl, HSDP
#   accum        gradient accumulation with and without --no-grad-sync-until-last
#   tp           --tp 2 with --comm mpi (ranks sharing the GPU: the TP collectives staged through
#                host memory, as the shard group's) at np=2 and, TP 2 x DP 2, np=4 vs np=1
#   variants     --attention cublas, --reduce-dtype fp32, --gelu-fusion 0
#   offload      --offload optimizer (AdamW on the host) vs the GPU's AdamW: bitwise
#   fp16         --param-dtype fp16 vs the fp32 cpu run (at least as close as bf16, within 2%),
#                every step at a loss scale; a first scale of 2^24 overflows: halved and skipped
#   llama        the same shape as Llama 3 (--arch llama3: RMSNorm, RoPE, grouped-query
#                attention with one kv head for two query heads, SwiGLU): cuda vs cpu within
#                2%, two cuda runs bitwise equal, save + resume bitwise; and build/test_gpt2
#                dump-llama --device cuda (2 kv heads for 4 query heads, head size 64)
#                against the plain PyTorch Llama at its bf16 bounds (dev/test/torch_llama.py;
#                skipped where $PYTHON has no torch)
#   eval         --eval-only and --generate of a cuda checkpoint (a 16-example set from
#                dev/test/eval_reference.py make-evalset: needs numpy) on cuda and on the cpu:
#                mean losses within 0.05, the same predictions away from near ties; np=2
#                (--comm mpi) gives the np=1 run's greedy text
set -u
cd "$(dirname "$0")/../.." || exit 1
export FSDP_DATA="${FSDP_DATA:-$(cd .. && pwd)/shared/data}"  # as run_tests.sh
source dev/test/lib.sh
out=${TEST_TMP:-$(mktemp -d)}
mkdir -p "$out"
PY=${PYTHON:-python3}
[ -x "$PY" ] || PY=python3

skip() { echo "ok - GPU end-to-end tests # skip $*"; exit 0; }
GROUPS_ALL="ref determinism resume cross ranks accum tp variants offload fp16 llama eval"
for g in ${GPU_TESTS:-}; do  # a misspelt group would otherwise pass by checking nothing
    [[ " $GROUPS_ALL " == *" $g "* ]] || { not_ok "GPU_TESTS: unknown group '$g' (groups: $GROUPS_ALL)"; exit 1; }
done
want() { [ -z "${GPU_TESTS:-}" ] || [[ " $GPU_TESTS " == *" $1 "* ]]; }
RUN_TIMEOUT=${GPU_TEST_RUN_TIMEOUT:-180}

[ -x ./train_gpt ] || skip "train_gpt not built"
command -v nvidia-smi >/dev/null 2>&1 || skip "no GPU (nvidia-smi not found)"
nvidia-smi -L >/dev/null 2>&1 || skip "no GPU (nvidia-smi -L fails)"

# The ranks: mpirun for an MPI build; scripts/launch_local.sh (torchrun-style variables, the TCP
# transport) for a build without MPI (make NO_MPI=1, e.g. on a GPU image without MPI).
if ldd ./train_gpt 2>/dev/null | grep -q 'libmpi'; then
    launch=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np)
else
    launch=(scripts/launch_local.sh -n)
fi
echo "# ranks started by ${launch[0]}"

common=(--layers 2 --channels 128 --heads 2 --max-seq 64 -t 64 -x 20 -l 1e-3 -u 2 --seed 7
        -v 10 --val-steps 1 -i "$TRAIN_SHARD" -j "$VAL_SHARD" --threads 4)
# run NAME NP ARGS...: one job, output in $out/NAME.log, metrics in $out/NAME/metrics.jsonl
# (unless ARGS give another -o). 0 when it exited 0.
run() {
    local name=$1 np=$2; shift 2
    if ! timeout -k 5 "$RUN_TIMEOUT" "${launch[@]}" "$np" ./train_gpt "${common[@]}" "$@" >"$out/$name.log" 2>&1; then
        not_ok "$name: run failed: $(grep -m2 -iE 'error|fault|abort' "$out/$name.log" | tr '\n' ' ' | cut -c1-300) $(tail -n 2 "$out/$name.log" | tr '\n' ' ' | cut -c1-200)"
        return 1
    fi
}
compare() { "$PY" dev/test/compare_losses.py "$@"; }

# Probe: does this build/machine give a cuda device at all?
probe=$(timeout "$RUN_TIMEOUT" ./train_gpt --device cuda --layers 1 --channels 64 --heads 1 --max-seq 16 -t 16 -b 1 -x 1 -v 0 \
        -i "$TRAIN_SHARD" 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q -- '--device cuda:' <<<"$probe"; then
    skip "no GPU ($(grep -m1 -- '--device cuda:' <<<"$probe" | cut -c1-160))"
fi
if [ $rc -ne 0 ]; then
    not_ok "1-step cuda probe run failed (status $rc): $(tail -n 3 <<<"$probe" | tr '\n' ' ' | cut -c1-400)"
fi

# The references: 20 steps on each device, same seed (so the same initial weights). The cpu
# one only where a group compares against it.
cpu_ok=0
if want ref || want cross || want fp16; then run cpu_ref 1 --device cpu -b 4 -o "$out/cpu_ref" && cpu_ok=1; fi
run cuda_ref 1 --device cuda -b 4 -o "$out/cuda_ref" -s 10 -g 8 && cuda_ok=1 || cuda_ok=0
if want ref && [ $cuda_ok = 1 ]; then
    grep -q '^sample (step 10)' "$out/cuda_ref.log" && ok "sampling on cuda" || not_ok "sampling on cuda: no sample printed"
    grep -q '^val loss' "$out/cuda_ref.log" && ok "validation on cuda" || not_ok "validation on cuda: no val loss printed"
    # The measured peak must agree with the printed budget: at least the budget (all of it is
    # allocated before step 0, the libraries' share measured then) and at most 64 MiB (or 1%)
    # above it, the kernels CUDA loads lazily in the first step and autotuning's scratch (an
    # H200 measured 2 to 16 MiB).
    mem=$(grep -m1 '^peak GPU memory' "$out/cuda_ref.log")
    if [ -z "$mem" ]; then not_ok "no 'peak GPU memory' line"
    else
        read -r m b <<<"$(peak_gpu_mem "$out/cuda_ref.log")"
        check=$(awk -v m="${m:-}" -v b="${b:-}" 'BEGIN { slack = b * 0.01 > 64 ? b * 0.01 : 64
                       printf "%s %.1f", (b > 0 && m >= 0.999 * b && m <= b + slack) ? "agree" : "differ", m - b }')
        [ "${check%% *}" = agree ] && ok "GPU memory: measured peak agrees with the budget (${check#* } MiB above it): $mem" ||
            not_ok "GPU memory: measured peak and budget differ by ${check#* } MiB (allowed: 0 to max(64 MiB, 1%)): $mem"
    fi
fi
want ref && [ $cpu_ok = 1 ] && [ $cuda_ok = 1 ] && compare "cuda vs cpu, 20 steps from the same init (bf16 vs fp32)" \
    "$out/cpu_ref/metrics.jsonl" "$out/cuda_ref/metrics.jsonl" --rtol 0.02

# Determinism: the same cuda run again.
if want determinism; then
    run cuda_again 1 --device cuda -b 4 -o "$out/cuda_again" -s 10 -g 8 && [ $cuda_ok = 1 ] &&
        compare "two identical cuda runs: bitwise equal losses" "$out/cuda_ref/metrics.jsonl" "$out/cuda_again/metrics.jsonl" --exact
fi

# Resume on cuda: save at 10, resume, compare steps 11..20 bitwise with the uninterrupted run.
# (The saved checkpoint is what `cross` resumes on the cpu.)
saved=0
if want resume || want cross; then
    run cuda_save 1 --device cuda -b 4 -o "$out/cuda_split" --ckpt-every 10 --stop-at-step 10 && saved=1
fi
if want resume && [ $saved = 1 ]; then
    run cuda_resume 1 --device cuda -b 4 -o "$out/cuda_split" --ckpt-every 10 --resume auto && [ $cuda_ok = 1 ] &&
        compare "cuda: save at step 10 + resume == uninterrupted (bitwise)" "$out/cuda_ref/metrics.jsonl" \
            "$out/cuda_split/metrics.jsonl" --exact --from-step 11
fi

# Across devices: the cuda checkpoint on the cpu, a cpu checkpoint on cuda.
if want cross; then
    if [ -f "$out/cuda_split/ckpt/step_00000010/manifest.json" ]; then
        run cuda_to_cpu 1 --device cpu -b 4 -o "$out/cuda_to_cpu" --resume "$out/cuda_split/ckpt/step_00000010" && [ $cuda_ok = 1 ] &&
            compare "cuda checkpoint resumed on the cpu (within 2%)" "$out/cuda_ref/metrics.jsonl" \
                "$out/cuda_to_cpu/metrics.jsonl" --rtol 0.02 --from-step 11
    fi
    run cpu_save 1 --device cpu -b 4 -o "$out/cpu_split" --ckpt-every 10 --stop-at-step 10 &&
    run cpu_to_cuda 1 --device cuda -b 4 -o "$out/cpu_to_cuda" --resume "$out/cpu_split/ckpt/step_00000010" && [ $cpu_ok = 1 ] &&
        compare "cpu checkpoint resumed on cuda (within 2%)" "$out/cpu_ref/metrics.jsonl" \
            "$out/cpu_to_cuda/metrics.jsonl" --rtol 0.02 --from-step 11
fi

if want ranks; then
    # Two ranks on one GPU (NCCL refuses that: --comm mpi stages through host memory). The same
    # global batch: 2 x 2 sequences instead of 1 x 4.
    run cuda_np2 2 --device cuda --comm mpi -b 2 -d 256 -o "$out/cuda_np2" && [ $cuda_ok = 1 ] &&
        compare "np=2 on one GPU with --comm mpi vs np=1 (within 1e-2)" "$out/cuda_ref/metrics.jsonl" \
            "$out/cuda_np2/metrics.jsonl" --rtol 0.01
    run cuda_np1_mpi 1 --device cuda --comm mpi -b 4 -o "$out/cuda_np1_mpi" && [ $cuda_ok = 1 ] &&
        compare "np=1 with --comm mpi vs nccl (within 1e-2)" "$out/cuda_ref/metrics.jsonl" \
            "$out/cuda_np1_mpi/metrics.jsonl" --rtol 0.01
    # HSDP on one GPU: 2 replicas of a 1-rank shard group (the replica all-reduce, staged).
    run cuda_hsdp 2 --device cuda --comm mpi -b 2 -d 256 --shard-group-size 1 -o "$out/cuda_hsdp" && [ $cuda_ok = 1 ] &&
        compare "np=2 HSDP (shard groups of 1) on one GPU vs np=1 (within 1e-2)" "$out/cuda_ref/metrics.jsonl" \
            "$out/cuda_hsdp/metrics.jsonl" --rtol 0.01
fi

# Gradient accumulation (2 micro-steps): reduce-scatter every micro-step vs only on the last
# (bf16 gradients accumulated unsharded).
if want accum; then
    run cuda_accum 1 --device cuda -b 4 -d 512 -o "$out/cuda_accum" &&
    run cuda_accum_nosync 1 --device cuda -b 4 -d 512 --no-grad-sync-until-last -o "$out/cuda_accum_nosync" &&
        compare "gradient accumulation: --no-grad-sync-until-last vs every micro-step (within 1e-2)" \
            "$out/cuda_accum/metrics.jsonl" "$out/cuda_accum_nosync/metrics.jsonl" --rtol 0.01
fi

# Tensor parallel on one GPU (NCCL refuses ranks sharing it: --comm mpi stages the TP group's
# gathers, reduce-scatters and all-reduces through host memory). The same global batch: TP 2 is
# one data-parallel rank of 4 sequences, TP 2 x DP 2 two of 2. The setup line says the mesh ran.
if want tp; then
    tp_run() {  # tp_run NAME NP DP ARGS...
        local name=$1 np=$2 dp=$3; shift 3
        run "$name" "$np" --device cuda --comm mpi --tp 2 -d 256 -o "$out/$name" "$@" && [ $cuda_ok = 1 ] || return
        if grep -q "^tensor parallel: groups of 2 rank(s) (sequence parallel), $dp data-parallel rank(s)" "$out/$name.log"; then
            compare "TP 2 x DP $dp on one GPU with --comm mpi vs np=1 (np=$np, within 1e-2)" "$out/cuda_ref/metrics.jsonl" \
                "$out/$name/metrics.jsonl" --rtol 0.01
        else
            not_ok "$name: no 'tensor parallel: groups of 2 rank(s) ..., $dp data-parallel rank(s)' setup line"
        fi
    }
    tp_run cuda_tp2 2 1 -b 4
    tp_run cuda_tp2_dp2 4 2 -b 2
fi

if want variants; then
    # The reference attention path and fp32 gradient reductions.
    run cuda_cublas 1 --device cuda -b 4 --attention cublas -o "$out/cuda_cublas" && [ $cuda_ok = 1 ] &&
        compare "--attention cublas vs flash (within 2%)" "$out/cuda_ref/metrics.jsonl" "$out/cuda_cublas/metrics.jsonl" --rtol 0.02
    # cuDNN's fused attention where scripts/find_cudnn.sh finds the library (else said as a skip).
    if cudnn_env=($(bash scripts/find_cudnn.sh 2>"$out/find_cudnn.err")); then
        (export "${cudnn_env[@]}"; run cuda_cudnn 1 --device cuda -b 4 --attention cudnn -o "$out/cuda_cudnn") &&
            [ $cuda_ok = 1 ] &&
            compare "--attention cudnn vs the default (within 2%): $(grep -m1 '^attention: ' "$out/cuda_cudnn.log")" \
                "$out/cuda_ref/metrics.jsonl" "$out/cuda_cudnn/metrics.jsonl" --rtol 0.02
    else
        ok "--attention cudnn # skip $(cat "$out/find_cudnn.err")"
    fi
    run cuda_fp32red 1 --device cuda -b 4 --reduce-dtype fp32 -o "$out/cuda_fp32red" && [ $cuda_ok = 1 ] &&
        compare "--reduce-dtype fp32 vs bf16 (within 2%)" "$out/cuda_ref/metrics.jsonl" "$out/cuda_fp32red/metrics.jsonl" --rtol 0.02
    # The GELU as kernels of its own instead of cuBLASLt epilogues.
    run cuda_gelu0 1 --device cuda -b 4 --gelu-fusion 0 -o "$out/cuda_gelu0" && [ $cuda_ok = 1 ] &&
        compare "--gelu-fusion 0 vs 2 (within 2%)" "$out/cuda_ref/metrics.jsonl" "$out/cuda_gelu0/metrics.jsonl" --rtol 0.02
fi
# The host's AdamW is the GPU kernel's arithmetic with the same roundings (no FMA on either
# side, kernels/optimizer_math.h) and the same rounding bits: the run must repeat bitwise.
if want offload; then
    run cuda_offload 1 --device cuda -b 4 -o "$out/cuda_offload" -s 10 -g 8 --offload optimizer && [ $cuda_ok = 1 ] &&
        compare "--offload optimizer == AdamW on the GPU (bitwise)" "$out/cuda_ref/metrics.jsonl" \
            "$out/cuda_offload/metrics.jsonl" --exact
fi

# fp16 has 3 more significand bits than bf16: from the same init it must stay at least as
# close to the fp32 cpu run (over the 20 steps and the val losses), and show its scale on
# every step line; 2^24 as the first scale overflows (dlogits alone reach 2^24 / 256 tokens):
# the first steps are skipped with the scale halved each time, the weights untouched.
if want fp16; then
    if run cuda_fp16 1 --device cuda -b 4 -o "$out/cuda_fp16" -s 10 -g 8 --param-dtype fp16 && [ $cuda_ok = 1 ] && [ $cpu_ok = 1 ]; then
        compare "--param-dtype fp16 vs cpu, 20 steps from the same init: within 2%, and at least as close as bf16" \
            "$out/cpu_ref/metrics.jsonl" "$out/cuda_fp16/metrics.jsonl" --rtol 0.02 --closer-than "$out/cuda_ref/metrics.jsonl"
        lines=$(grep -c '^step .* | scale [0-9]' "$out/cuda_fp16.log")
        [ "$lines" = 20 ] && ok "--param-dtype fp16: 20 step lines with the loss scale" ||
            not_ok "--param-dtype fp16: $lines of 20 step lines show the loss scale"
    fi
    if run cuda_fp16_overflow 1 --device cuda -b 4 -x 4 -o "$out/cuda_fp16_overflow" --param-dtype fp16 --loss-scale 16777216; then
        first=$(grep -m1 '^step ' "$out/cuda_fp16_overflow.log")
        if grep -q 'update skipped: gradient overflow, loss scale 16777216 -> 8388608$' <<<"$first"; then
            ok "--param-dtype fp16, a first scale of 2^24: step 1 overflows, skipped and the scale halved ($(grep -c 'gradient overflow' "$out/cuda_fp16_overflow.log") of 4 steps)"
        else
            not_ok "--param-dtype fp16, a first scale of 2^24: step 1 '$first'"
        fi
    fi
fi

if want llama; then
    llama=(--arch llama3 --kv-heads 1 --ffn-dim 320)
    run llama_cpu 1 --device cpu -b 4 "${llama[@]}" -o "$out/llama_cpu" && l_cpu=1 || l_cpu=0
    run llama_cuda 1 --device cuda -b 4 "${llama[@]}" -o "$out/llama_cuda" && l_cuda=1 || l_cuda=0
    [ $l_cpu = 1 ] && [ $l_cuda = 1 ] && compare "Llama: cuda vs cpu, 20 steps from the same init (bf16 vs fp32)" \
        "$out/llama_cpu/metrics.jsonl" "$out/llama_cuda/metrics.jsonl" --rtol 0.02
    run llama_again 1 --device cuda -b 4 "${llama[@]}" -o "$out/llama_again" && [ $l_cuda = 1 ] &&
        compare "Llama: two identical cuda runs" "$out/llama_cuda/metrics.jsonl" "$out/llama_again/metrics.jsonl" --exact
    run llama_save 1 --device cuda -b 4 "${llama[@]}" -o "$out/llama_split" --ckpt-every 10 --stop-at-step 10 &&
        run llama_resume 1 --device cuda -b 4 "${llama[@]}" -o "$out/llama_split" --ckpt-every 10 --resume auto && [ $l_cuda = 1 ] &&
        compare "Llama: cuda save at step 10 + resume == 20 uninterrupted steps" "$out/llama_cuda/metrics.jsonl" \
            "$out/llama_split/metrics.jsonl" --exact
    # Logits, loss, every gradient and 10 AdamW steps against PyTorch (test_llama.sh's check
    # under the emulator, here on the GPU).
    if [ ! -x build/test_gpt2 ]; then
        echo "ok - Llama on cuda against PyTorch # skip build/test_gpt2 not built (make)"
    elif ! "$PY" -c 'import torch' 2>/dev/null; then
        echo "ok - Llama on cuda against PyTorch # skip $PY has no torch"
    elif timeout -k 5 "$RUN_TIMEOUT" build/test_gpt2 dump-llama --layers 2 --channels 256 --heads 4 --kv-heads 2 \
            --ffn-dim 384 --vocab 50257 --max-seq 64 --rope-theta 500000 --seed 11 --tokens "$TRAIN_SHARD" -b 4 -t 32 \
            --steps 10 --device cuda --out "$out/llama_torch.bin" > "$out/llama_torch.log" 2>&1; then
        "$PY" dev/test/torch_llama.py --state "$out/llama_torch.bin" --label "Llama on cuda against PyTorch" \
            --sensitivity kv_heads,rope_halves,swiglu_swap || true
        rm -f "$out/llama_torch.bin"
    else
        not_ok "Llama on cuda against PyTorch: test_gpt2 dump-llama --device cuda failed: $(tail -n 3 "$out/llama_torch.log" | tr '\n' ' ' | cut -c1-300)"
    fi
fi

if want eval; then
    if ! "$PY" dev/test/eval_reference.py make-evalset "$VAL_SHARD" "$out/ev.bin" --examples 16 >"$out/ev.log" 2>&1; then
        echo "ok - --eval-only and --generate on cuda # skip no eval set ($(tail -n 1 "$out/ev.log" | cut -c1-120))"
    elif run eval_save 1 --device cuda -b 4 -x 4 -o "$out/eval_split" --ckpt-every 4; then
        infer=(-b 4 --resume "$out/eval_split/ckpt/step_00000004" --eval-only --eval-data "$out/ev.bin" --generate "ROMEO:" -g 8 --top-k 1)
        run eval_cpu 1 --device cpu "${infer[@]}" --eval-log "$out/eval_cpu.jsonl" &&
        run eval_cuda 1 --device cuda "${infer[@]}" --eval-log "$out/eval_cuda.jsonl" &&
        run eval_cuda2 2 --device cuda --comm mpi "${infer[@]}" && {
            msg=$("$PY" dev/test/eval_reference.py agree "$out/eval_cpu.jsonl" "$out/eval_cuda.jsonl" --max-diff 0.05 2>&1) \
                && ok "--eval-only on cuda against the cpu: $msg" || not_ok "--eval-only on cuda against the cpu: $msg"
            gen() { awk '/^sample \(step 4\):/ {s = 1; next} s == 1 && /^---$/ {s = 2; next} s == 2 && /^---$/ {exit} s == 2' "$out/$1.log"; }
            [ -n "$(gen eval_cuda)" ] && [ "$(gen eval_cuda)" = "$(gen eval_cuda2)" ] \
                && ok "--generate on cuda: the same greedy text at np=1 and np=2 ('$(gen eval_cuda | tr '\n' ' ')')" \
                || not_ok "--generate on cuda: np=1 '$(gen eval_cuda)' vs np=2 '$(gen eval_cuda2)'"
        }
    fi
fi

# Whether the reference run had to fall back from the GELU epilogues: it says so on stderr.
grep -h 'cuBLASLt has no algorithm' "$out"/*.log 2>/dev/null | sort -u | head -3 | sed 's/^/# /'

# Keep the logs where a caller asked for them (scripts/device_check.sh).
if [ -n "${GPU_TEST_LOGS:-}" ]; then mkdir -p "$GPU_TEST_LOGS" && cp "$out"/*.log "$GPU_TEST_LOGS"/ 2>/dev/null; fi
exit 0
