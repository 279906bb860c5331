#!/usr/bin/env bash
# CPU benchmark: ./train_gpt --device cpu against PyTorch eager (dev/bench/torch_gpt2_cpu.py)
# training the same GPT-2 shapes on Tiny Shakespeare with the same thread count; prints
# tokens/s of both and their ratio (train_gpt / pytorch; > 1 means train_gpt is faster).
#
#   bash dev/bench/bench_cpu.sh                 # from the repository root, after `make`
#   BENCH_MODELS=d4 BENCH_STEPS=3 bash dev/bench/bench_cpu.sh     # a quick run
#
# Environment (all optional):
#   BENCH_MODELS   models, llm.c's dN naming: N layers, 64*N channels, N heads ("d4 d12")
#   BENCH_B, BENCH_T    micro-batch and sequence length (4, 256)
#   BENCH_THREADS  threads for both (2)
#   BENCH_STEPS    timed steps per run (default 10 for models up to d6, else 4)
#   BENCH_WARMUP   untimed steps first (default 2 up to d6, else 1)
#   BENCH_DATA     token shard (default $FSDP_DATA/tinyshakespeare/tiny_shakespeare_train.bin)
#   BENCH_SKIP_C=1 / BENCH_SKIP_TORCH=1   run one side only
#   PYTHON         python with torch (default .venv/bin/python, else python3)
#   BENCH_JEMALLOC path of libjemalloc.so.2 to preload for PyTorch, "" for none (default: the
#                  system's when installed; Debian package libjemalloc2). PyTorch's CPU tensors
#                  come from malloc, and glibc hands each large one (the [B*T, V] logits and
#                  their gradients) back to the kernel when freed, so every step page-faults
#                  ~1 GB anew at d4; jemalloc told to keep its pages avoids that, as Intel's
#                  PyTorch CPU tuning guide recommends. train_gpt allocates once.
# Each run's step times are averaged over the steps after the warmup; tokens/s = B*T / mean.
set -euo pipefail
cd "$(dirname "$0")/../.."

MODELS=${BENCH_MODELS:-d4 d12}
B=${BENCH_B:-4}
T=${BENCH_T:-256}
THREADS=${BENCH_THREADS:-2}
DATA=${BENCH_DATA:-${FSDP_DATA:-../shared/data}/tinyshakespeare/tiny_shakespeare_train.bin}
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
if [[ -z "${BENCH_JEMALLOC+set}" ]]; then
  BENCH_JEMALLOC=""
  for f in /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 /usr/lib/aarch64-linux-gnu/libjemalloc.so.2 \
           /usr/lib64/libjemalloc.so.2 /usr/lib/libjemalloc.so.2; do
    if [[ -f "$f" ]]; then BENCH_JEMALLOC=$f; break; fi
  done
fi
TORCH_ENV=()
if [[ -n "$BENCH_JEMALLOC" ]]; then
  TORCH_ENV=(env "LD_PRELOAD=$BENCH_JEMALLOC"
             "MALLOC_CONF=background_thread:true,metadata_thp:auto,dirty_decay_ms:-1,muzzy_decay_ms:-1")
else
  echo "note: no jemalloc to preload (Debian: libjemalloc2); PyTorch runs on glibc malloc, which" \
       "page-faults its large buffers anew every step (d4: ~25% slower)"
fi

die() { echo "bench_cpu: $*" >&2; exit 1; }
[[ -f "$DATA" ]] || die "token shard not found: $DATA (set BENCH_DATA or FSDP_DATA)"
for v in B T THREADS; do [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer"; done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench_cpu.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# mean tokens/s over metrics.jsonl steps > warmup, from "ms" (else "tokens_per_s")
c_tokens_per_s() {
  "$PYTHON" - "$1" "$2" "$3" <<'EOF'
import json, sys
path, warmup, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [json.loads(l) for l in open(path) if l.strip()]
timed = [r for r in rows if int(r.get("step", 0)) > warmup and ("ms" in r or "tokens_per_s" in r)]
if not timed:
    sys.exit(f"no timed steps after warmup {warmup} in {path}")
if all("ms" in r for r in timed):
    ms = sum(float(r["ms"]) for r in timed) / len(timed)
    print(f"{tokens / (ms / 1000.0):.2f} {ms:.2f}")
else:
    tps = sum(float(r["tokens_per_s"]) for r in timed) / len(timed)
    print(f"{tps:.2f} {tokens / tps * 1000.0:.2f}")
EOF
}

json_field() { "$PYTHON" -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

declare -a SUMMARY=()
status=0
for m in $MODELS; do
  [[ "$m" =~ ^d([1-9][0-9]*)$ ]] || die "bad model name '$m' (expected dN, e.g. d12)"
  L=${BASH_REMATCH[1]}; C=$((64 * L)); NH=$L
  if (( L <= 6 )); then steps=${BENCH_STEPS:-10}; warm=${BENCH_WARMUP:-2}
  else steps=${BENCH_STEPS:-4}; warm=${BENCH_WARMUP:-1}; fi
  echo "== $m: L=$L C=$C NH=$NH, B=$B T=$T, $THREADS threads, $warm warmup + $steps timed steps"

  c_tps="n/a"; c_ms="n/a"
  if [[ "${BENCH_SKIP_C:-0}" != 1 ]]; then
    if [[ ! -x ./train_gpt ]]; then
      echo "train_gpt: not built (run make); skipping the C engine"
    else
      out="$TMP/$m"; mkdir -p "$out"
      cmd=(./train_gpt --device cpu --layers "$L" --channels "$C" --heads "$NH" -b "$B" -t "$T"
           -d $((B * T)) -x $((warm + steps)) --val-every 0 --sample-every 0
           -i "$DATA" -o "$out" --threads "$THREADS")
      echo "+ ${cmd[*]}"
      if "${cmd[@]}" > "$TMP/$m.c.log" 2>&1; then
        if r=$(c_tokens_per_s "$out/metrics.jsonl" "$warm" $((B * T))); then
          read -r c_tps c_ms <<< "$r"
          echo "train_gpt: $c_tps tokens/s ($c_ms ms/step)"
        else
          echo "train_gpt: could not read $out/metrics.jsonl"; status=1
        fi
      else
        echo "train_gpt: failed (exit $?); last lines of its output:"; tail -n 5 "$TMP/$m.c.log"
        status=1
      fi
    fi
  fi

  t_tps="n/a"; t_ms="n/a"; blas=""
  if [[ "${BENCH_SKIP_TORCH:-0}" != 1 ]]; then
    cmd=("${TORCH_ENV[@]}" "$PYTHON" dev/bench/torch_gpt2_cpu.py --layers "$L" --channels "$C" --heads "$NH"
         -b "$B" -t "$T" --steps "$steps" --warmup "$warm" --threads "$THREADS" --data "$DATA")
    echo "+ ${cmd[*]}"
    if line=$("${cmd[@]}" 2> "$TMP/$m.torch.log" | tail -n 1) && [[ "$line" == "{"* ]]; then
      t_tps=$(json_field "$line" tokens_per_s); t_ms=$(json_field "$line" ms_per_step)
      blas=$(json_field "$line" blas)
      echo "pytorch: $t_tps tokens/s ($t_ms ms/step), torch $(json_field "$line" torch)," \
           "allocator $(json_field "$line" allocator), BLAS $blas"
    else
      echo "pytorch: failed; last lines of its output:"; tail -n 5 "$TMP/$m.torch.log"
      status=1
    fi
  fi

  ratio="n/a"
  if [[ "$c_tps" != n/a && "$t_tps" != n/a ]]; then
    ratio=$("$PYTHON" -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}')" "$c_tps" "$t_tps")
  fi
  SUMMARY+=("$(printf '%-5s %4s %5s %3s %4s %7s %16s %16s %6s' "$m" "$L" "$C" "$B" "$T" "$THREADS" "$c_tps" "$t_tps" "$ratio")")
done

echo
printf '%-5s %4s %5s %3s %4s %7s %16s %16s %6s\n' model L C B T threads "train_gpt tok/s" "pytorch tok/s" ratio
for s in "${SUMMARY[@]}"; do echo "$s"; done
exit $status
