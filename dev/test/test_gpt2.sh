#!/usr/bin/env bash
# run_tests: cores 1.4, 52 s
# The GPT-2 model on the cpu device: finite differences, PyTorch reference, a real training
# run on Tiny Shakespeare, a model-file round trip, and bad inputs.
set -u
source dev/test/lib.sh
out=$TEST_TMP

# 1. Finite-difference check of every tensor's gradient on a tiny model (vocab 64).
OMP_NUM_THREADS=2 build/test_gpt2 fdcheck || true

# 2. PyTorch reference: train_gpt writes a freshly initialised model file, test_gpt2 runs
#    it (logits, loss, gradients, 10 AdamW steps) and torch_reference.py compares.
model_args=(--layers 2 --channels 64 --heads 4 --max-seq 64)
if ./train_gpt --device cpu "${model_args[@]}" -t 32 -b 1 -x 0 -v 0 -i "$TRAIN_SHARD" \
        --save-model "$out/ref_model.bin" --seed 11 > "$out/save.log" 2>&1 &&
   OMP_NUM_THREADS=2 build/test_gpt2 dump --model "$out/ref_model.bin" --tokens "$TRAIN_SHARD" \
        -b 4 -t 32 --steps 10 --out "$out/c_state.bin" > "$out/dump.log" 2>&1; then
    $PYTHON dev/test/torch_reference.py --model "$out/ref_model.bin" --state "$out/c_state.bin" || true
else
    not_ok "torch reference: could not produce the C state: $(tail -n 3 "$out"/save.log "$out"/dump.log | tr '\n' ' ')"
fi

# The checker checks itself: a float64 PyTorch run passes, emulated kernel bugs fail.
$PYTHON dev/test/torch_reference.py --selftest > "$out/selftest.log" 2>&1
if [ $? -eq 0 ]; then ok "torch_reference.py --selftest ($(grep -c '^ok' "$out/selftest.log") checks)"
else not_ok "torch_reference.py --selftest: $(grep -m3 'not ok' "$out/selftest.log" | tr '\n' ' ')"; fi

# 3. A real training run: a small GPT-2 on Tiny Shakespeare, loss must fall well below its start.
if ./train_gpt --device cpu --layers 2 --channels 128 --heads 4 --max-seq 64 -b 8 -t 64 -x 40 -l 2e-3 -u 5 \
        -v 20 --val-steps 4 -s 40 -g 24 -i "$TRAIN_SHARD" -j "$VAL_SHARD" --threads 2 -o "$out/shakespeare" \
        > "$out/shakespeare.log" 2>&1; then
    $PYTHON - "$out/shakespeare/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r["loss"] for r in rows if "loss" in r]
val = [r["val_loss"] for r in rows if "val_loss" in r]
keys = {"step", "loss", "lr", "grad_norm", "ms", "tokens_per_s"}
missing = [k for k in keys if k not in next(r for r in rows if "loss" in r)]
if missing:
    print(f"not ok - metrics.jsonl has step, loss, lr, grad_norm, ms, tokens_per_s: missing {missing}")
else:
    print(f"ok - metrics.jsonl has step, loss, lr, grad_norm, ms, tokens_per_s ({len(train)} steps, {len(val)} val)")
first, last = train[0], sum(train[-5:]) / 5
ok = last < first - 3.0 and val[-1] < val[0] - 3.0
print(("ok - " if ok else "not ok - ") + f"Tiny Shakespeare loss falls: train {first:.3f} -> {last:.3f} (mean of last 5), val {val[0]:.3f} -> {val[-1]:.3f}")
PY
    # The sample is decoded text (the tokenizer is found in $FSDP_DATA/gpt2), not token ids.
    sample=$(awk '/^sample \(step 40\)/ {on = 1; next} on && /^---$/ {if (++seen == 2) exit; next} on' "$out/shakespeare.log" | tr '\n' ' ')
    if grep -q '[a-zA-Z]' <<<"$sample" && ! grep -qE '^[0-9 ]+$' <<<"$sample"; then ok "--sample-every prints decoded text: ${sample:0:80}"
    else not_ok "--sample-every: no decoded sample in the log: ${sample:0:120}"; fi
else
    not_ok "Tiny Shakespeare training run failed: $(tail -n 3 "$out/shakespeare.log" | tr '\n' ' ')"
fi

# 4. Model files: save after training, --init-from continues from exactly those weights
#    (val loss at step 0 of the new run equals the saved run's final val loss).
run_a=(./train_gpt --device cpu "${model_args[@]}" -b 4 -t 32 -x 5 -v 5 --val-steps 2 -i "$TRAIN_SHARD" -j "$VAL_SHARD" --threads 2)
if "${run_a[@]}" --save-model "$out/trained.bin" -o "$out/a" > "$out/a.log" 2>&1 &&
   ./train_gpt --device cpu --init-from "$out/trained.bin" -b 4 -t 32 -x 0 -v 1 --val-steps 2 -i "$TRAIN_SHARD" \
        -j "$VAL_SHARD" --threads 2 -o "$out/b" > "$out/b.log" 2>&1; then
    a=$(grep val_loss "$out/a/metrics.jsonl" | tail -n 1 | grep -oE '"val_loss":[0-9.]+' | cut -d: -f2)
    b=$(grep val_loss "$out/b/metrics.jsonl" | head -n 1 | grep -oE '"val_loss":[0-9.]+' | cut -d: -f2)
    if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "--save-model then --init-from reproduces the model (val loss $a)"
    else not_ok "--save-model then --init-from: val loss $b after loading, $a before saving"; fi
    # a bf16 (version 5) file of the same weights loads too, with bf16-sized differences
    $PYTHON - "$out/trained.bin" "$out/trained_bf16.bin" <<'PY'
import sys, numpy as np
h = np.fromfile(sys.argv[1], dtype=np.int32, count=256)
p = np.fromfile(sys.argv[1], dtype=np.float32, offset=1024)
h = h.copy(); h[1] = 5
bits = p.view(np.uint32)
rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
with open(sys.argv[2], "wb") as f:
    f.write(h.tobytes()); f.write(rounded.tobytes())
PY
    if ./train_gpt --device cpu --init-from "$out/trained_bf16.bin" -b 4 -t 32 -x 0 -v 1 --val-steps 2 -i "$TRAIN_SHARD" \
            -j "$VAL_SHARD" --threads 2 -o "$out/c" > "$out/c.log" 2>&1; then
        c=$(grep -oE '"val_loss":[0-9.]+' "$out/c/metrics.jsonl" | head -n 1 | cut -d: -f2)
        $PYTHON -c "import sys; a, c = float('$a'), float('$c'); d = abs(a - c) / a
print(('ok' if d < 1e-2 else 'not ok') + f' - bf16 model file (version 5) loads: val loss {c} vs fp32 {a} (relative {d:.1e})')"
    else
        not_ok "bf16 model file: $(tail -n 2 "$out/c.log" | tr '\n' ' ')"
    fi
else
    not_ok "model file round trip: run failed: $(tail -n 3 "$out"/a.log "$out"/b.log | tr '\n' ' ')"
fi
