#!/usr/bin/env bash
# Llama CPU benchmark: ./train_gpt --device cpu --arch llama3 against PyTorch eager
# (dev/bench/torch_llama_cpu.py: the model dev/test/torch_llama.py checks the engine against)
# training the same Llama shape on Tiny Shakespeare with the same thread count; prints tokens/s
# of both and their ratio (train_gpt / pytorch; > 1 means train_gpt is faster).
#
#   bash dev/bench/bench_llama_cpu.sh             # from the repository root, after `make`
#   BENCH_STEPS=3 bash dev/bench/bench_llama_cpu.sh   # a quick run
#
# Environment (all optional):
#   BENCH_LAYERS, BENCH_CHANNELS, BENCH_HEADS, BENCH_KV_HEADS, BENCH_FFN   the shape
#                  (4, 256, 4, 2, 768: llama3:tiny, grouped-query attention, GPT-2's vocabulary)
#   BENCH_B, BENCH_T    micro-batch and sequence length (4, 256)
#   BENCH_THREADS  threads for both (2)
#   BENCH_STEPS    timed steps per run (10);  BENCH_WARMUP  untimed steps first (2)
#   BENCH_DATA     token shard (default $FSDP_DATA/tinyshakespeare/tiny_shakespeare_train.bin)
#   BENCH_SKIP_C=1 / BENCH_SKIP_TORCH=1   run one side only
#   PYTHON         python with torch (default .venv/bin/python, else python3)
#   BENCH_JEMALLOC libjemalloc.so.2 to preload for PyTorch, "" for none (default: the system's
#                  when installed), for the reason dev/bench/bench_cpu.sh gives: glibc returns
#                  PyTorch's large freed buffers (the [B*T, V] logits and their gradient) to the
#                  kernel, and every step page-faults them anew. train_gpt allocates once.
# Both sides do the same work per step: forward, backward, gradient clipping at norm 1 and
# AdamW. train_gpt's step time is its metrics.jsonl "ms"; PyTorch's is timed around the same
# work. Each side's figure is the mean over the steps after the warmup; tokens/s = B*T / mean.
set -euo pipefail
cd "$(dirname "$0")/../.."

L=${BENCH_LAYERS:-4}
C=${BENCH_CHANNELS:-256}
NH=${BENCH_HEADS:-4}
KVH=${BENCH_KV_HEADS:-2}
FFN=${BENCH_FFN:-768}
B=${BENCH_B:-4}
T=${BENCH_T:-256}
THREADS=${BENCH_THREADS:-2}
STEPS=${BENCH_STEPS:-10}
WARM=${BENCH_WARMUP:-2}
DATA=${BENCH_DATA:-${FSDP_DATA:-../shared/data}/tinyshakespeare/tiny_shakespeare_train.bin}
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

die() { echo "bench_llama_cpu: $*" >&2; exit 1; }
[[ -f "$DATA" ]] || die "token shard not found: $DATA (set BENCH_DATA or FSDP_DATA)"
for v in L C NH KVH FFN B T THREADS STEPS; do [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer"; done
[[ "$WARM" =~ ^[0-9]+$ ]] || die "BENCH_WARMUP must be a non-negative integer"

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
  echo "note: no jemalloc to preload (Debian: libjemalloc2); PyTorch runs on glibc malloc"
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench_llama_cpu.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

json_field() { "$PYTHON" -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

echo "== llama L=$L C=$C NH=$NH KVH=$KVH F=$FFN, B=$B T=$T, $THREADS threads, $WARM warmup + $STEPS timed steps"
status=0

c_tps="n/a"; c_ms="n/a"
if [[ "${BENCH_SKIP_C:-0}" != 1 ]]; then
  if [[ ! -x ./train_gpt ]]; then
    echo "train_gpt: not built (run make); skipping the C engine"
  else
    cmd=(./train_gpt --device cpu --arch llama3 --layers "$L" --channels "$C" --heads "$NH" --kv-heads "$KVH"
         --ffn-dim "$FFN" --max-seq "$T" -b "$B" -t "$T" -d $((B * T)) -x $((WARM + STEPS)) --val-every 0
         --sample-every 0 -i "$DATA" -o "$TMP/c" --threads "$THREADS")
    echo "+ ${cmd[*]}"
    if "${cmd[@]}" > "$TMP/c.log" 2>&1; then
      # mean "ms" over the steps after the warmup
      if r=$("$PYTHON" - "$TMP/c/metrics.jsonl" "$WARM" $((B * T)) <<'EOF'
import json, sys
path, warm, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ms = [float(r["ms"]) for r in map(json.loads, open(path)) if "ms" in r and int(r["step"]) > warm]
if not ms:
    sys.exit(f"no timed steps after warmup {warm} in {path}")
mean = sum(ms) / len(ms)
print(f"{tokens / (mean / 1000.0):.2f} {mean:.2f}")
EOF
      ); then
        read -r c_tps c_ms <<< "$r"
        echo "train_gpt: $c_tps tokens/s ($c_ms ms/step); $(grep -m1 '^model: ' "$TMP/c.log")"
      else
        echo "train_gpt: could not read $TMP/c/metrics.jsonl"; status=1
      fi
    else
      echo "train_gpt: failed; last lines of its output:"; tail -n 5 "$TMP/c.log"
      status=1
    fi
  fi
fi

t_tps="n/a"; t_ms="n/a"
if [[ "${BENCH_SKIP_TORCH:-0}" != 1 ]]; then
  cmd=("${TORCH_ENV[@]}" "$PYTHON" dev/bench/torch_llama_cpu.py --layers "$L" --channels "$C" --heads "$NH"
       --kv-heads "$KVH" --ffn-dim "$FFN" -b "$B" -t "$T" --steps "$STEPS" --warmup "$WARM" --threads "$THREADS"
       --data "$DATA")
  echo "+ ${cmd[*]}"
  if line=$("${cmd[@]}" 2> "$TMP/torch.log" | tail -n 1) && [[ "$line" == "{"* ]]; then
    t_tps=$(json_field "$line" tokens_per_s); t_ms=$(json_field "$line" ms_per_step)
    echo "pytorch: $t_tps tokens/s ($t_ms ms/step), torch $(json_field "$line" torch)," \
         "allocator $(json_field "$line" allocator), BLAS $(json_field "$line" blas)"
  else
    echo "pytorch: failed; last lines of its output:"; tail -n 5 "$TMP/torch.log"
    status=1
  fi
fi

ratio="n/a"
if [[ "$c_tps" != n/a && "$t_tps" != n/a ]]; then
  ratio=$("$PYTHON" -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}')" "$c_tps" "$t_tps")
fi
echo
printf '%-6s %4s %5s %3s %4s %5s %3s %4s %7s %16s %16s %6s\n' model L C NH KVH F B T threads "train_gpt tok/s" "pytorch tok/s" ratio
printf '%-6s %4s %5s %3s %4s %5s %3s %4s %7s %16s %16s %6s\n' llama "$L" "$C" "$NH" "$KVH" "$FFN" "$B" "$T" "$THREADS" "$c_tps" "$t_tps" "$ratio"
exit $status
