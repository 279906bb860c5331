#!/usr/bin/env bash
# GPU benchmark: ./train_gpt --device cuda against llm.c's own CUDA trainer (d12 only:
# train_gpt2cu through dev/bench/llmc_side.sh, built beforehand, with cuDNN attention where it
# loads) and the PyTorch baseline (dev/bench/torch_gpt2_fsdp2.py: FSDP2 fully_shard per block
# with a bf16 MixedPrecisionPolicy, torch.compile in max-autotune, SDPA flash attention, fused
# AdamW), the same GPT-2, micro-batch, sequence length, token shard and step count, one after
# the other on the same GPU in the same call. Prints a table of tokens/s, MFU and peak memory
# of each, and the ratios train_gpt / llm.c and train_gpt / pytorch, with the issue's targets:
#   d12 (124M) at T=1024: train_gpt >= 1.2x llm.c's tokens/s and >= 1.3x PyTorch's
#   d48 (1.5B) at T=1024: train_gpt >= 55% MFU
#
#   bash dev/bench/bench_gpu.sh [d12|d48|all] [OUTDIR]     # from anywhere, after `make`
#
# OUTDIR (default out/bench_gpu) gets MODEL_train_gpt.log, MODEL_pytorch.log and summary.txt
# (and MODEL_bB_oom_train_gpt.log for a batch that ran out of memory). Without a GPU it prints
# one line saying it was skipped and exits 0. It does not build: run `make` first (nvcc
# needed for --device cuda); a train_gpt without the cuda device is reported in the table and
# the baseline still runs. Exit status: 0; 1 when a run failed; 124 when none failed but one
# timed out or found no time left in BENCH_BUDGET.
#
# Batches (one rank, no gradient accumulation: --total-batch-tokens = B x T):
#   d12: B=32, T=1024 (32768 tokens per step)
#   d48: B=8,  T=1024 (8192 tokens per step): weights, fp32 master, gradients and Adam state
#        take ~25 GiB in either program and activations ~25-40 GiB at B=8, well inside an
#        H200's ~139 GiB (B=16 should fit too; BENCH_B_D48=16 tries it).
# A train_gpt run that says "out of memory" is run again at half the batch (the row and a
# note say so; the baseline then runs at that batch too).
# train_gpt runs one step more, profiled (--profile-step): the table of where its time went
# (matmuls, attention, layernorms, waits for FSDP communication, optimizer) is printed too,
# with its largest row named as the limiting phase, and that step is left out of train_gpt's
# average (its event marks cost time of their own).
# Steps: BENCH_WARMUP (5) untimed + BENCH_STEPS (20) timed for PyTorch (compilation happens
# in the warmup); train_gpt runs the same warmup + steps (+ the profiled one) and its printed
# "average step .. over N steps after the first" is used (it allocates everything before
# step 0 and compiles nothing, so only its first step is untimed); llm.c runs warmup + steps
# and the mean of its printed step times after the first is used (the same steps as
# train_gpt's). Every run is under `timeout`; on an H200 the whole script should take 4-7
# minutes, most of it PyTorch's compilation.
# PyTorch's compile mode: BENCH_TORCH_MODES in turn (default max-autotune, then
# max-autotune-no-cudagraphs, then default), then --no-compile, then --no-fsdp --no-compile:
# the first that completes is the row, labelled with its mode, and what failed or timed out
# before it is said under it. A max-autotune mode that ran past its cap skips the other
# (it autotunes every shape as long). A run that fails or times out is followed by the next only when
# BENCH_TORCH_MIN_RETRY seconds are left (of BENCH_BUDGET).
#
# MFU = tokens/s x (6N + 6LCT) / peak, N the parameter count (train_gpt's, which equals the
# baseline's: tied wte once, padded vocab rows included), peak BENCH_PEAK_TFLOPS (989: H100/
# H200 SXM dense BF16), passed to both. Memory, two columns: "GPU mem" is cudaMemGetInfo's
# used memory above the process's CUDA context for both (train_gpt's measured peak;
# PyTorch's at the end, which its caching allocator keeps at its peak); "tensors" is
# train_gpt's printed budget (all it allocates before step 0) and, for PyTorch,
# torch.cuda.max_memory_allocated (the peak of live tensors).
#
# Environment (all optional):
#   PYTHON               python with PyTorch >= 2.4 and CUDA (default: python3 if it imports
#                        torch, else .venv/bin/python)
#   BENCH_DATA           token shard (default: $FSDP_DATA/tinyshakespeare/..., then
#                        data/tinyshakespeare/..., ../shared/data/tinyshakespeare/
#                        tiny_shakespeare_train.bin; none found: a random-token shard is
#                        written to a temporary folder and used by both, said in the table)
#   BENCH_B_D12, BENCH_B_D48, BENCH_T    micro-batches (32, 8) and sequence length (1024)
#   BENCH_STEPS, BENCH_WARMUP            timed and untimed steps (20, 5)
#   BENCH_PEAK_TFLOPS    per-GPU peak for MFU (989)
#   BENCH_TIMEOUT_C, BENCH_TIMEOUT_LLMC, BENCH_TIMEOUT_TORCH    seconds per run (120, 120, 180:
#                        PyTorch's is each compile mode's cap)
#   BENCH_TORCH_MODES    torch.compile modes to try, strongest first ("max-autotune
#                        max-autotune-no-cudagraphs default"; reduce-overhead allowed too)
#   BENCH_TORCH_MIN_RETRY    seconds left under which no further PyTorch run is started (60)
#   BENCH_LLMC=0         no llm.c row (else d12 runs dev/bench/llmc_side.sh run: its
#                        LLMC_BIN [.deps/prebuilt] must hold train_gpt2cu or
#                        train_gpt2cu_nocudnn; without either the row says how to build them)
#   BENCH_BUDGET         seconds for the whole script (default none): each run's timeout is
#                        cut to what is left of it, so that a caller's own limit (e.g.
#                        scripts/device_check.sh's) never stops the script before its table
#   BENCH_TORCH=0        no baseline (the d48 target needs train_gpt's MFU only)
#   BENCH_TORCH_FALLBACK=0               the first compile mode only, no fallback
#   BENCH_TORCH_ARGS     extra arguments for the baseline (e.g. "--sdpa cudnn")
#   BENCH_C_ARGS         extra arguments for train_gpt (e.g. "--attention cublas")
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd) || exit 1
cd "$ROOT" || exit 1

WHICH=${1:-all}
OUTDIR=${2:-out/bench_gpu}
case "$WHICH" in
  d12) MODELS=(d12) ;;
  d48) MODELS=(d48) ;;
  all) MODELS=(d12 d48) ;;
  -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: bash dev/bench/bench_gpu.sh [d12|d48|all] [OUTDIR]" >&2; exit 2 ;;
esac

if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L 2> /dev/null | grep -q '^GPU'; then
  echo "bench_gpu: skipped: no GPU (nvidia-smi finds none)"
  exit 0
fi

die() { echo "bench_gpu: $*" >&2; exit 1; }
posint() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "$1 must be a positive integer (got '$2')"; }

T=${BENCH_T:-1024}
STEPS=${BENCH_STEPS:-20}
WARMUP=${BENCH_WARMUP:-5}
PEAK=${BENCH_PEAK_TFLOPS:-989}
TO_C=${BENCH_TIMEOUT_C:-120}
TO_T=${BENCH_TIMEOUT_TORCH:-180}
TO_L=${BENCH_TIMEOUT_LLMC:-120}
MIN_RETRY=${BENCH_TORCH_MIN_RETRY:-60}
read -r -a TORCH_MODES <<< "${BENCH_TORCH_MODES:-max-autotune max-autotune-no-cudagraphs default}"
for mode in "${TORCH_MODES[@]}"; do
  case "$mode" in max-autotune|max-autotune-no-cudagraphs|reduce-overhead|default) ;;
    *) echo "bench_gpu: BENCH_TORCH_MODES: unknown torch.compile mode '$mode'" >&2; exit 2 ;; esac
done
((${#TORCH_MODES[@]} > 0)) || { echo "bench_gpu: BENCH_TORCH_MODES names no mode" >&2; exit 2; }
# shellcheck disable=SC2034  # read as B_$m below
B_d12=${BENCH_B_D12:-32} B_d48=${BENCH_B_D48:-8}
for v in T STEPS TO_C TO_T TO_L MIN_RETRY B_d12 B_d48; do posint "$v" "${!v}"; done
BUDGET=${BENCH_BUDGET:-0}
[[ "$BUDGET" =~ ^[0-9]+$ ]] || die "BENCH_BUDGET must be a whole number of seconds"
[[ "$WARMUP" =~ ^[0-9]+$ ]] || die "BENCH_WARMUP must be >= 0"
[[ "$PEAK" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "BENCH_PEAK_TFLOPS must be a number"
read -r -a TORCH_EXTRA <<< "${BENCH_TORCH_ARGS:-}"
read -r -a C_EXTRA <<< "${BENCH_C_ARGS:-}"

if [[ -z "${PYTHON:-}" ]]; then
  if python3 -c 'import torch' > /dev/null 2>&1; then PYTHON=python3
  elif [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python
  else PYTHON=python3; fi
fi

mkdir -p "$OUTDIR" || die "cannot create $OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench_gpu.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
SUMMARY="$OUTDIR/summary.txt"
: > "$SUMMARY"
say() { echo "$@" | tee -a "$SUMMARY"; }

# ---- the token shard --------------------------------------------------------------------
DATA=${BENCH_DATA:-}
DATA_NOTE=""
if [[ -z "$DATA" ]]; then
  for f in ${FSDP_DATA:+"$FSDP_DATA/tinyshakespeare/tiny_shakespeare_train.bin"} \
           data/tinyshakespeare/tiny_shakespeare_train.bin \
           ../shared/data/tinyshakespeare/tiny_shakespeare_train.bin; do
    if [[ -f "$f" ]]; then DATA=$f; break; fi
  done
fi
if [[ -z "$DATA" ]]; then
  DATA="$TMP/random_tokens.bin"
  DATA_NOTE=" (no Tiny Shakespeare shard here: 1M random GPT-2 tokens in llm.c format, written for this run)"
  "$PYTHON" - "$DATA" <<'EOF' || die "could not write a random-token shard"
import sys
import numpy as np
n = 1 << 20
hdr = np.zeros(256, dtype="<i4")
hdr[:3] = [20240520, 1, n]
toks = np.random.default_rng(1337).integers(0, 50257, size=n, dtype=np.uint16)
with open(sys.argv[1], "wb") as f:
    f.write(hdr.tobytes())
    f.write(toks.astype("<u2").tobytes())
EOF
fi
[[ -f "$DATA" ]] || die "token shard not found: $DATA"

GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2> /dev/null | head -n 1)
TORCH_VER=$("$PYTHON" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available" if torch.cuda.is_available() else "NOT AVAILABLE")' 2>&1 | tail -n 1)
say "bench_gpu: $(date -u '+%Y-%m-%d %H:%M:%S UTC') | GPU: $GPU"
say "pytorch: $PYTHON, torch $TORCH_VER | data: $DATA$DATA_NOTE"
say "steps: $WARMUP warmup + $STEPS timed | peak $PEAK TFLOP/s for MFU | timeouts: train_gpt ${TO_C}s, llm.c ${TO_L}s, pytorch ${TO_T}s per run"

preset() {  # model -> "L C NH"
  case "$1" in
    d12) echo "12 768 12" ;; d24) echo "24 1024 16" ;; d36) echo "36 1280 20" ;; d48) echo "48 1600 25" ;;
  esac
}
# calc FORMAT EXPR ARG...: EXPR over a[1], a[2], ... (the ARGs as numbers), printed with
# FORMAT; "n/a" when an ARG is not a number
calc() {
  local fmt=$1 expr=$2; shift 2
  awk -v fmt="$fmt" "BEGIN { for (i = 1; i < ARGC; i++) { if (ARGV[i] !~ /^[-+]?[0-9]*[.]?[0-9]+([eE][-+]?[0-9]+)?\$/) { print \"n/a\"; exit } a[i] = ARGV[i] + 0 } printf fmt \"\\n\", $expr }" "$@"
}
field() {  # key, RESULT line -> value
  local kv
  for kv in $2; do [[ "$kv" == "$1="* ]] && { echo "${kv#*=}"; return; }; done
  echo "n/a"
}
quoted() { local q; printf -v q '%q ' "$@"; echo "${q% }"; }
# limit SECONDS: a run's timeout, cut to what is left of BENCH_BUDGET (less the 5 s that
# --kill-after may add); 0 when nothing is left.
limit() {
  local t=$1 left=$((BUDGET - SECONDS - 5))
  if ((BUDGET > 0 && left < t)); then t=$((left > 0 ? left : 0)); fi
  echo "$t"
}
# limiting LOG: the largest row of train_gpt's --profile-step table ("phase, ms, share").
limiting() {
  awk '/^profile of step/ { p = 1; next }
       p && / interval\(s\)$/ { for (i = 2; i < NF && $i != "ms"; i++) ;
                                 name = $1; for (j = 2; j < i - 1; j++) name = name " " $j
                                 if ($(i - 1) + 0 > best) { best = $(i - 1) + 0; out = name ", " $(i - 1) " ms, " $(i + 1) " of the step" } }
       p && /^step / { exit }
       END { if (out != "") print out }' "$1"
}
last_line() { grep -v '^\s*$' "$1" 2> /dev/null | tail -n 1 | cut -c1-160; }

declare -a ROWS=() VERDICTS=()
ROWFMT='%-4s %3s %5s  %-44s %12s %10s %7s %12s %12s'

status=0 timed_out=0

for m in "${MODELS[@]}"; do
  read -r L C NH <<< "$(preset "$m")"
  bvar="B_$m"; B=${!bvar}
  say ""
  say "== $m: L=$L C=$C NH=$NH | B=$B T=$T ($((B * T)) tokens per step, no accumulation)"

  # ---- train_gpt --------------------------------------------------------------------------
  clog="$OUTDIR/${m}_train_gpt.log"
  c_tps="n/a"; c_ms="n/a"; c_mfu="n/a"; c_mem="n/a"; c_tens="n/a"; c_note=""; oom_note=""
  if [[ ! -x ./train_gpt ]]; then
    c_note="not built (run make)"; echo "train_gpt: $c_note" > "$clog"
  elif [[ $(limit "$TO_C") == 0 ]]; then
    c_note="not run: no time left in BENCH_BUDGET (${BUDGET}s)"; echo "train_gpt: $c_note" > "$clog"; timed_out=1
  else
    while :; do
      to=$(limit "$TO_C")
      cmd=(timeout --kill-after=5 "$to" ./train_gpt --device cuda -m "$m" -b "$B" -t "$T" -d $((B * T))
           -x $((WARMUP + STEPS + 1)) -i "$DATA" -j "" --val-every 0 --sample-every 0 -l 6e-4
           --lr-decay constant --peak-tflops "$PEAK" -o "$TMP/${m}_b${B}_train_gpt"
           --profile-step $((WARMUP + STEPS + 1)) "${C_EXTRA[@]}")
      say "+ $(quoted "${cmd[@]}")"
      t0=$SECONDS
      "${cmd[@]}" > "$clog" 2>&1
      rc=$?
      say "  train_gpt exit $rc after $((SECONDS - t0)) s (log: $clog)"
      # Too large a batch for the GPU: half of it, if there is time for another run.
      if [[ $rc -ne 0 && $rc -ne 124 && $rc -ne 137 && $B -gt 1 && $(limit "$TO_C") != 0 ]] &&
         grep -qi 'out of memory' "$clog"; then
        mv "$clog" "$OUTDIR/${m}_b${B}_oom_train_gpt.log"
        oom_note="B=$B ran out of GPU memory (${m}_b${B}_oom_train_gpt.log): B=$((B / 2)) instead"
        say "  train_gpt: $oom_note"
        B=$((B / 2))
        continue
      fi
      break
    done
    avg=$(grep -E '^average step [0-9.]+ ms \([0-9.]+ tok/s\)' "$clog" | tail -n 1)
    if [[ $rc -eq 0 && -n "$avg" ]]; then
      c_ms=$(sed -E 's/^average step ([0-9.]+) ms.*/\1/' <<< "$avg")
      c_tps=$(sed -E 's/^average step [0-9.]+ ms \(([0-9.]+) tok\/s\).*/\1/' <<< "$avg")
      nparams=$(grep -Eo '[0-9]+ parameters' "$clog" | head -n 1 | cut -d' ' -f1)
      c_mfu=$(calc '%.1f%%' "100 * a[1] * (6 * a[2] + 6 * a[3] * a[4] * a[5]) / (a[6] * 1e12)" \
              "$c_tps" "${nparams:-x}" "$L" "$C" "$T" "$PEAK")
      peakline=$(grep -E '^peak GPU memory per rank: [0-9.]+ MiB' "$clog" | tail -n 1)
      mem=$(grep -Eo 'rank: [0-9.]+ MiB' <<< "$peakline" | grep -Eo '[0-9.]+')
      budget=$(grep -Eo 'budget [0-9.]+ MiB' <<< "$peakline" | grep -Eo '[0-9.]+')
      c_tens=$(calc '%.1f GiB' 'a[1] / 1024' "${budget:-x}")
      if [[ -z "$mem" ]]; then  # else the largest "mem N MiB" of the step lines
        mem=$(grep -Eo '\| mem [0-9.]+ MiB' "$clog" | grep -Eo '[0-9.]+' | sort -n | tail -n 1)
      fi
      c_mem=$(calc '%.1f GiB' 'a[1] / 1024' "${mem:-x}")
      # Said now, not only in the final table: a caller that cuts the baseline short keeps it.
      say "  train_gpt: $c_tps tok/s, $c_ms ms/step, MFU $c_mfu, GPU mem $c_mem"
    elif [[ $rc -eq 124 || $rc -eq 137 ]]; then
      c_note="timed out after ${to}s"; timed_out=1
    elif grep -qE -- "--device cuda[:]|--device.*(cuda|cpu)" "$clog" && ! grep -qE '^step +[0-9]+/' "$clog"; then
      c_note="--device cuda refused: $(last_line "$clog")"
    else
      c_note="failed (exit $rc): $(last_line "$clog")"; status=1
    fi
    [[ -n "$c_note" ]] && say "  train_gpt: $c_note"
    c_note=${oom_note}${oom_note:+${c_note:+; }}$c_note
    # Where the last step's time went (--profile-step): what limits the throughput.
    sed -n '/^profile of step/,/^step /p' "$clog" | grep -v '^step ' | while IFS= read -r line; do say "  $line"; done
    lim=$(limiting "$clog")
    if [[ -n "$lim" ]]; then
      say "  limiting phase: $lim"
      VERDICTS+=("$m limiting phase (largest row of train_gpt's profiled step): $lim")
    fi
  fi
  ROWS+=("$(printf "$ROWFMT" "$m" "$B" "$T" "train_gpt (cuda)" "$c_tps" "$c_ms" "$c_mfu" "$c_mem" "$c_tens")")
  [[ -n "$c_note" ]] && ROWS+=("      -> train_gpt: $c_note")

  # ---- llm.c (d12): train_gpt2cu, its own CUDA trainer, on the same shape and shard ------
  l_tps="n/a"; l_ms="n/a"; l_mfu="n/a"; l_mem="n/a"; l_label="llm.c train_gpt2cu"; l_note=""
  if [[ "$m" == d12 && "${BENCH_LLMC:-1}" != 0 ]]; then
    llog="$OUTDIR/${m}_llmc.log"
    to=$(limit "$TO_L")
    if [[ $to == 0 ]]; then
      l_note="not run: no time left in BENCH_BUDGET (${BUDGET}s)"; timed_out=1
    else
      cmd=(env LLMC_B="$B" LLMC_T="$T" LLMC_STEPS="$STEPS" LLMC_WARMUP="$WARMUP" LLMC_DATA="$DATA"
           LLMC_PEAK_TFLOPS="$PEAK" LLMC_TIMEOUT="$to" bash dev/bench/llmc_side.sh run "$llog")
      say "+ $(quoted "${cmd[@]}")"
      t0=$SECONDS
      out=$("${cmd[@]}" 2>&1)
      rc=$?
      say "  llm.c exit $rc after $((SECONDS - t0)) s (log: $llog)"
      line=$(grep '^RESULT ' <<< "$out" | tail -n 1)
      if [[ $rc -eq 0 && -n "$line" ]]; then
        l_label="llm.c $(field impl "$line")"
        l_tps=$(calc '%.0f' 'a[1]' "$(field tok_per_s "$line")")
        l_ms=$(calc '%.1f' 'a[1]' "$(field step_ms "$line")")
        l_mfu=$(calc '%.1f%%' '100 * a[1]' "$(field mfu "$line")")
        l_mem=$(calc '%.1f GiB' 'a[1]' "$(field gpu_used_gib "$line")")
        say "  llm.c: $(cut -d' ' -f2- <<< "$line")"
        l_note=$(grep '^llmc_side: ' <<< "$out" | sed 's/^llmc_side: //' | head -n 1)
      elif [[ $rc -eq 124 ]]; then
        l_note="timed out after ${to}s"; timed_out=1
      elif grep -q '^llmc_side: run: no train_gpt2cu in ' <<< "$out"; then
        l_note="not run: $(grep -m1 '^llmc_side: ' <<< "$out" | sed 's/^llmc_side: run: //' | cut -c1-200)"
      else
        l_note="failed (exit $rc): $(grep -v '^\s*$' <<< "$out" | tail -n 1 | cut -c1-200)"; status=1
      fi
      [[ -n "$l_note" ]] && say "  llm.c: $l_note"
    fi
    ROWS+=("$(printf "$ROWFMT" "$m" "$B" "$T" "$l_label" "$l_tps" "$l_ms" "$l_mfu" "$l_mem" "n/a")")
    [[ -n "$l_note" ]] && ROWS+=("      -> llm.c: $l_note")
  fi

  # ---- PyTorch: torch.compile's modes strongest first, then eager, then without FSDP2 -----
  tlog="$OUTDIR/${m}_pytorch.log"
  : > "$tlog"
  t_tps="n/a"; t_ms="n/a"; t_mfu="n/a"; t_mem="n/a"; t_tens="n/a"; t_label="pytorch-fsdp2"; t_note=""
  variants=()
  for mode in "${TORCH_MODES[@]}"; do variants+=("--compile-mode $mode"); done
  variants+=("--no-compile" "--no-fsdp --no-compile")
  nvar=${#variants[@]}; [[ "${BENCH_TORCH_FALLBACK:-1}" == 0 ]] && nvar=1
  t_timeout=0 tried="" autotune_slow=0
  if [[ "${BENCH_TORCH:-1}" == 0 ]]; then nvar=0; t_label="pytorch"; t_note="not run (BENCH_TORCH=0)"; fi
  for ((k = 0; k < nvar; k++)); do
    read -r -a vargs <<< "${variants[$k]}"
    # Once a max-autotune mode has run past its cap, the other would too (both autotune every
    # shape): the next tried is one that compiles without autotuning.
    if ((autotune_slow)) && [[ "${variants[$k]}" == *max-autotune* ]]; then
      tried="${tried:+$tried; }${variants[$k]} skipped (autotunes as long)"
      continue
    fi
    to=$(limit "$TO_T") left=$((BUDGET - SECONDS))
    # After a run that failed or timed out, the next is worth starting only with
    # BENCH_TORCH_MIN_RETRY s left of BENCH_BUDGET (without a budget, each has its own cap).
    if [[ $to == 0 ]] || ((k > 0 && BUDGET > 0 && left < MIN_RETRY)); then
      t_note="${tried:+$tried; }${variants[$k]} not run: $((left > 0 ? left : 0))s left of BENCH_BUDGET (${BUDGET}s)"; t_timeout=1
      ((k > 0 && to > 0)) && t_note+=", under BENCH_TORCH_MIN_RETRY (${MIN_RETRY}s)"
      say "  pytorch: $t_note"
      break
    fi
    cmd=(timeout --kill-after=5 "$to" env PYTHONUNBUFFERED=1 "$PYTHON" dev/bench/torch_gpt2_fsdp2.py
         --model "$m" -b "$B" -t "$T" --steps "$STEPS" --warmup "$WARMUP" --data "$DATA"
         --peak-tflops "$PEAK" --reduce-dtype bf16 "${vargs[@]}" "${TORCH_EXTRA[@]}")
    say "+ $(quoted "${cmd[@]}")"
    echo "+ $(quoted "${cmd[@]}")" >> "$tlog"
    t0=$SECONDS
    "${cmd[@]}" >> "$tlog" 2>&1
    rc=$?
    say "  pytorch exit $rc after $((SECONDS - t0)) s (log: $tlog)"
    line=$(grep '^RESULT ' "$tlog" | tail -n 1)
    if [[ $rc -eq 0 && -n "$line" ]]; then
      t_label="$(field framework "$line"), compile $(field compile "$line")"
      t_tps=$(calc '%.0f' 'a[1]' "$(field tok_per_s "$line")")
      t_ms=$(calc '%.1f' 'a[1]' "$(field step_ms "$line")")
      t_mfu=$(calc '%.1f%%' '100 * a[1]' "$(field mfu "$line")")
      t_mem=$(calc '%.1f GiB' 'a[1]' "$(field gpu_used_gib "$line")")
      t_tens=$(calc '%.1f GiB' 'a[1]' "$(field peak_mem_gib "$line")")
      say "  pytorch: $(cut -d' ' -f2- <<< "$line")"
      t_note=""; t_timeout=0
      [[ $k -gt 0 ]] && t_note="fell back to '${variants[$k]}' after: $tried (see $tlog)"
      # The baseline is meant with fused AdamW; torch_gpt2_fsdp2.py falls back to foreach if refused.
      adamw=$(field adamw "$line")
      [[ "$adamw" != fused ]] && t_note="${t_note:+$t_note; }AdamW $adamw, not fused (see $tlog)"
      break
    fi
    if [[ $rc -eq 124 || $rc -eq 137 ]]; then
      why="timed out after ${to}s ($(last_line "$tlog"))"; t_timeout=1
      [[ "${variants[$k]}" == *max-autotune* ]] && autotune_slow=1
    else
      why="failed (exit $rc): $(last_line "$tlog")"; t_timeout=0
    fi
    say "  pytorch: ${variants[$k]} $why"
    tried="${tried:+$tried; }${variants[$k]} $why"
    t_note=$tried
  done
  if ((t_timeout)); then timed_out=1; elif ((nvar > 0)) && [[ "$t_tps" == n/a ]]; then status=1; fi
  ROWS+=("$(printf "$ROWFMT" "$m" "$B" "$T" "$t_label" "$t_tps" "$t_ms" "$t_mfu" "$t_mem" "$t_tens")")
  [[ -n "$t_note" ]] && ROWS+=("      -> pytorch: $t_note")

  # ---- ratios and targets -------------------------------------------------------------------
  # judge TARGET VALUE THRESHOLD: "TARGET: VALUE, met" (or NOT met, or not measured).
  judge() {
    if [[ "$2" == n/a ]]; then VERDICTS+=("$1: not measured")
    else VERDICTS+=("$1: $2, $(awk -v r="${2%[x%]}" -v t="$3" 'BEGIN { print (r >= t) ? "met" : "NOT met" }')"); fi
  }
  if [[ "$m" == d12 && "${BENCH_LLMC:-1}" != 0 ]]; then
    l_ratio=$(calc '%.2fx' 'a[1] / a[2]' "$c_tps" "$l_tps")
    ROWS+=("$(printf '%-4s %3s %5s  %-44s %12s' "$m" "$B" "$T" "ratio train_gpt / llm.c" "$l_ratio")")
    judge "d12 target (train_gpt >= 1.2x llm.c tok/s)" "$l_ratio" 1.2
  fi
  ratio=$(calc '%.2fx' 'a[1] / a[2]' "$c_tps" "$t_tps")
  ROWS+=("$(printf '%-4s %3s %5s  %-44s %12s' "$m" "$B" "$T" "ratio train_gpt / pytorch" "$ratio")")
  case "$m" in
    d12) judge "d12 target (train_gpt >= 1.3x pytorch tok/s)" "$ratio" 1.3 ;;
    d48) judge "d48 target (train_gpt >= 55% MFU)" "$c_mfu" 55 ;;
  esac
done

say ""
say "$(printf "$ROWFMT" model B T implementation tok/s ms/step MFU "GPU mem" tensors)"
for r in "${ROWS[@]}"; do say "$r"; done
say ""
for v in "${VERDICTS[@]}"; do say "$v"; done
say "GPU mem: device memory in use above the process's CUDA context (cudaMemGetInfo): train_gpt's measured peak;"
say "  pytorch's at the end of the run (its caching allocator keeps what it reserved, so this is its peak too);"
say "  llm.c's printed device memory usage once it has allocated everything (its CUDA context included)."
say "tensors: train_gpt's printed memory budget (all it allocates, before step 0); pytorch's"
say "  torch.cuda.max_memory_allocated (the peak of live tensors, without the allocator's cached blocks)."
((status == 0 && timed_out)) && status=124
exit $status
