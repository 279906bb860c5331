#!/usr/bin/env bash
# run_tests: cores 1.2, 22 s
# Checkpoints across tensor-parallel layouts (cpu device): a checkpoint saved at (TP, DP) = (2, 2)
# names global tensors with global shapes and describes each chunk as a box of them (format
# version 2); it resumes at (2, 2) bitwise, at (1, 3) and (4, 1) within 1e-5 of the uninterrupted
# np=1 run, and a (1, 3) checkpoint (ranges, version 1) resumes back at TP 2; Llama GQA saved at
# TP 2 resumes at TP 1; `ckpt verify` and `info` read a TP checkpoint; the safetensors export of
# a TP 2 checkpoint is byte-identical to TP 1's at the same weights (-l 0: the initial model, the
# same at any --tp), and so is the export after a resume and save at TP 4. --save-model at TP: the
# llm.c file is TP 1's byte for byte at those weights (TP 2, TP 4); after training at (2, 2) it
# is `ckpt export --llmc` of the same step's checkpoint byte for byte, each tensor kind's
# difference from the np=1 run's file within 1e-5 of its norm (the key bias 1e-3: below), and it
# loads with --init-from at TP 1 and TP 2 (the same losses).
set -u
source dev/test/lib.sh
out=$TEST_TMP
SECONDS=0
lap() { echo "# $1: ${SECONDS}s"; SECONDS=0; }  # a section's time (comment: not a check)
CK=./ckpt
# test_tp.sh's shapes: 12 sequences of 16 tokens per step at every layout.
gpt2=(./train_gpt --device cpu --layers 2 --channels 64 --heads 4 --max-seq 64 -t 16 -d 192 -x 6
      -v 0 -i "$TRAIN_SHARD" --threads 1 -l 1e-3 -u 2 --seed 5)
llama=(./train_gpt --device cpu --arch llama3 --layers 2 --channels 64 --heads 4 --kv-heads 2 --ffn-dim 96 --max-seq 64
       -t 16 -d 192 -x 4 -v 0 -i "$TRAIN_SHARD" --threads 1 -l 1e-3 -u 2 --seed 5)
RTOL=1e-5
why() { tail -n 3 "$@" 2>/dev/null | tr '\n' ' ' | head -c 400; }
run() {  # run NAME NP ARGS...
    local name=$1 np=$2; shift 2
    run_logged "$out" 300 "$name" "$np" "$@" -o "$out/$name"
}
near() {  # near DESCRIPTION REF CANDIDATE: losses within RTOL
    $PYTHON dev/test/compare_losses.py "$1" "$out/$2/metrics.jsonl" "$out/$3/metrics.jsonl" --rtol $RTOL
}
step() { printf '%s/ckpt/step_%08d' "$out/$1" "$2"; }

# ---- GPT-2: save at (2, 2), resume at (2, 2), (1, 3), (4, 1), and from (1, 3) back at (2, 2)
run ref 1 "${gpt2[@]}" -b 12 --save-model "$out/ref.bin" || exit 1
run tp2 4 "${gpt2[@]}" -b 6 --tp 2 --ckpt-every 3 --save-model "$out/tp2.bin" || exit 1
near "(2,2) with checkpoints against np=1" ref tp2
s3=$(step tp2 3)
$PYTHON - "$s3/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
shape = {t["name"]: t["shape"] for t in m["tensors"]}
F = m["chunk_fields"].split(",")
rows = [dict(zip(F, r)) for r in m["chunks"]]
problems = []
if m["format_version"] != 2: problems.append(f"format_version {m['format_version']}")
if F[-4:] != ["row0", "col0", "rows", "cols"]: problems.append(f"chunk_fields {F}")
if m["state"].get("tp") != 2 or m["state"].get("world") != 4: problems.append(f"state tp/world {m['state'].get('tp')}/{m['state'].get('world')}")
# global shapes: the tied embedding [Vp, C], c_attn [3C, C], a row-parallel c_proj [C, 4C], a bias [1, 3C]
want = {"wte": [50304, 64], "h.0.attn.c_attn.weight": [192, 64], "h.0.mlp.c_proj.weight": [64, 256], "h.0.attn.c_attn.bias": [1, 192]}
for k, v in want.items():
    if shape.get(k) != v: problems.append(f"{k} shape {shape.get(k)}, want {v}")
# a row-parallel weight is held by columns: boxes of 128 columns at 0 and 128
cols = sorted({(r["col0"], r["cols"]) for r in rows if r["tensor"] == "h.0.mlp.c_proj.weight" and r["kind"] == "param"})
if cols != [(0, 128), (128, 128)]: problems.append(f"mlp.c_proj boxes' columns {cols}")
# every chunk row is a box whose lo, hi are its span; a replicated tensor (ln_f) is in one rank file
for r in rows:
    c = shape[r["tensor"]][1]
    if (r["lo"], r["hi"]) != (r["row0"] * c + r["col0"], (r["row0"] + r["rows"] - 1) * c + r["col0"] + r["cols"]):
        problems.append(f"span of {r}"); break
files = {r["file"] for r in rows if r["tensor"].startswith("ln_f")}
if len(files) != 1: problems.append(f"ln_f in rank files {files}")
print(("not ok - " + "; ".join(problems[:4])) if problems else
      f"ok - a TP 2 manifest: version 2, global shapes, {len(rows)} box chunks, row-parallel boxes by columns, replicated tensors once")
PY
if $CK verify "$s3" > "$out/verify.log" 2>&1 && $CK info "$s3" > "$out/info.log" 2>&1 &&
   grep -qE '^format version +2$' "$out/info.log" && grep -qE '^tp at save +2$' "$out/info.log" &&
   grep -qE '^world at save +4$' "$out/info.log" && grep -qE '^boxes +[0-9]+ of [0-9]+ chunks' "$out/info.log"; then
    ok "ckpt verify and info read a TP 2 checkpoint ($(grep -E '^boxes' "$out/info.log" | tr -s ' '))"
else
    not_ok "ckpt verify / info of a TP 2 checkpoint: $(why "$out/verify.log" "$out/info.log")"
fi
run tp2_res 4 "${gpt2[@]}" -b 6 --tp 2 --resume "$s3" &&
    $PYTHON dev/test/compare_losses.py "(2,2) saved, resumed at (2,2): bitwise" "$out/tp2/metrics.jsonl" \
        "$out/tp2_res/metrics.jsonl" --exact --from-step 3
run res13 3 "${gpt2[@]}" -b 4 --resume "$s3" --ckpt-every 5 && near "(2,2) saved, resumed at (1,3)" ref res13
run res41 4 "${gpt2[@]}" -b 12 --tp 4 --resume "$s3" && near "(2,2) saved, resumed at (4,1)" ref res41
# and back: the (1, 3) run's step 5 (ranges, version 1) at TP 2
if [ -f "$(step res13 5)/manifest.json" ] && grep -q '"format_version":1,' "$(step res13 5)/manifest.json"; then
    run back22 4 "${gpt2[@]}" -b 6 --tp 2 --resume "$(step res13 5)" && near "(1,3) saved, resumed at (2,2)" ref back22
else
    not_ok "the (1,3) run saved no version 1 step 5: $(why "$out/res13.log")"
fi
lap "GPT-2 across layouts"

# ---- --save-model at (2, 2): rank 0 gathers every TP rank's units and writes them at their
# global places. The same weights as the step 6 checkpoint: its llm.c export, byte for byte.
if $CK export "$(step tp2 6)" --llmc "$out/tp2_export.bin" > "$out/export_llmc.log" 2>&1 &&
   cmp -s "$out/tp2_export.bin" "$out/tp2.bin"; then
    ok "--save-model at (2,2) is ckpt export --llmc of its step 6 checkpoint, byte for byte ($(wc -c < "$out/tp2.bin") bytes)"
else
    not_ok "--save-model at (2,2) vs export --llmc: $(why "$out/export_llmc.log") $(cmp "$out/tp2_export.bin" "$out/tp2.bin" 2>&1 | head -c 200)"
fi
# Against np=1's file: the runs differ in the order of sums only, which AdamW's normalized step
# amplifies where a gradient is nothing but rounding: the key bias's (attention does not depend
# on it) moves by noise, about 2e-4 of its norm after 6 steps at any layout (a DP 3 run without
# TP differs from np=1 as much). Each of llm.c's 16 tensor kinds (all layers, in the file's
# order): its difference's norm within RTOL of its norm, c_attn.b within 1e-3; a misplaced box
# differs by the whole tensor (order 1).
$PYTHON - "$out/ref.bin" "$out/tp2.bin" $RTOL <<'PY'
import struct, sys
import numpy as np
def load(path):
    raw = open(path, "rb").read()
    return struct.unpack("256i", raw[:1024]), np.frombuffer(raw[1024:], dtype=np.float32)
(h, a), (h2, b) = load(sys.argv[1]), load(sys.argv[2])
rtol = float(sys.argv[3])
T, L, C, Vp = h[2], h[4], h[6], h[7]
kinds = [("wte", Vp * C), ("wpe", T * C), ("ln_1.w", L * C), ("ln_1.b", L * C), ("c_attn.w", L * 3 * C * C),
         ("c_attn.b", L * 3 * C), ("attn.c_proj.w", L * C * C), ("attn.c_proj.b", L * C), ("ln_2.w", L * C),
         ("ln_2.b", L * C), ("c_fc.w", L * 4 * C * C), ("c_fc.b", L * 4 * C), ("mlp.c_proj.w", L * 4 * C * C),
         ("mlp.c_proj.b", L * C), ("ln_f.w", C), ("ln_f.b", C)]
problems, figures, at = [], [], 0
if h != h2 or a.size != b.size or a.size != sum(n for _, n in kinds):
    problems.append(f"headers or sizes differ: {h[:8]} {a.size} vs {h2[:8]} {b.size}")
for name, n in kinds if not problems else []:
    x, y = a[at:at + n].astype(np.float64), b[at:at + n].astype(np.float64)
    at += n
    rel = float(np.linalg.norm(x - y) / max(np.linalg.norm(x), 1e-30))
    bound = 1e-3 if name == "c_attn.b" else rtol
    figures.append((rel, name))
    if not rel <= bound: problems.append(f"{name}: {rel:.3g} relative (allowed {bound:g})")
others = max(f for f in figures if f[1] != "c_attn.b") if figures else (0, "")
print(("not ok - --save-model (2,2) vs np=1: " + "; ".join(problems[:4])) if problems else
      f"ok - --save-model at (2,2) vs np=1's file: every tensor kind within {rtol:g} (the largest {others[1]}, {others[0]:.2g}), "
      f"c_attn.b {dict((n, r) for r, n in figures)['c_attn.b']:.2g}")
PY
# The file loads at any TP: --init-from it at (1,1) and at (2,1), the same losses.
run init_tp1 1 "${gpt2[@]}" -b 12 -x 3 --init-from "$out/tp2.bin" &&
    run init_tp2 2 "${gpt2[@]}" -b 12 -x 3 --tp 2 --init-from "$out/tp2.bin" &&
    near "--init-from the (2,2) file at (1,1) and at (2,1)" init_tp1 init_tp2
$PYTHON - "$out/ref/metrics.jsonl" "$out/init_tp2/metrics.jsonl" <<'PY'
import json, sys
first = [[json.loads(l)["loss"] for l in open(p) if '"loss"' in l][0] for p in sys.argv[1:]]
print(("ok - " if first[1] < first[0] - 0.1 else "not ok - ") +
      f"--init-from the (2,2) file starts from the trained weights (first loss {first[1]:.3f}, the untrained model's {first[0]:.3f})")
PY
expect_error "Llama --save-model at TP 2: refused before training" "error: --save-model writes llm.c's GPT-2 model file, which has no" \
    run_np 2 "${llama[@]}" -b 12 --tp 2 --save-model "$out/llama.bin"
[ ! -e "$out/llama.bin" ] && ok "no Llama file written" || not_ok "a Llama llm.c file was written"
lap "--save-model"

# ---- Llama GQA: saved at TP 2 (q|k|v and w1|w3 segments as boxes), resumed at TP 1
run lref 1 "${llama[@]}" -b 12 || exit 1
run ltp2 2 "${llama[@]}" -b 12 --tp 2 --ckpt-every 2 &&
    run lres 1 "${llama[@]}" -b 12 --resume "$(step ltp2 2)" && near "Llama GQA saved at (2,1), resumed at (1,1)" lref lres
lap "Llama"

# ---- the export: at -l 0 the weights stay the initial model, which is the same at any --tp
flat=(./train_gpt --device cpu --layers 2 --channels 64 --heads 4 --max-seq 64 -t 16 -d 192 -v 0 -i "$TRAIN_SHARD"
      --threads 1 -l 0 --seed 5)
if run e1 1 "${flat[@]}" -b 12 -x 1 --ckpt-every 1 --save-model "$out/e1.bin" &&
   run e2 2 "${flat[@]}" -b 12 -x 1 --ckpt-every 1 --tp 2 --save-model "$out/e2.bin" &&
   run e4 4 "${flat[@]}" -b 12 -x 2 --ckpt-every 2 --tp 4 --resume "$(step e2 1)" --save-model "$out/e4.bin"; then
    for e in e1:1 e2:1 e4:2; do
        $CK export "$(step ${e%:*} ${e#*:})" --safetensors "$out/${e%:*}.safetensors" > "$out/export_${e%:*}.log" 2>&1 ||
            not_ok "ckpt export ${e%:*}: $(why "$out/export_${e%:*}.log")"
    done
    cmp -s "$out/e1.safetensors" "$out/e2.safetensors" &&
        ok "the safetensors export of a TP 2 checkpoint is TP 1's, byte for byte ($(wc -c < "$out/e1.safetensors") bytes)" ||
        not_ok "TP 2 export differs from TP 1's: $(cmp "$out/e1.safetensors" "$out/e2.safetensors" 2>&1 | head -c 200)"
    cmp -s "$out/e1.safetensors" "$out/e4.safetensors" &&
        ok "resumed at TP 4 from TP 2 and saved again: the export is still TP 1's, byte for byte" ||
        not_ok "the export after a TP 4 resume differs: $(cmp "$out/e1.safetensors" "$out/e4.safetensors" 2>&1 | head -c 200)"
    for e in e2 e4; do  # every split (column, row, vocabulary, q|k|v segments) at its global place
        [ -s "$out/e1.bin" ] && cmp -s "$out/e1.bin" "$out/$e.bin" &&
            ok "--save-model at TP ${e#e} is TP 1's llm.c file, byte for byte ($(wc -c < "$out/e1.bin") bytes)" ||
            not_ok "--save-model at TP ${e#e} differs from TP 1's: $(cmp "$out/e1.bin" "$out/$e.bin" 2>&1 | head -c 200)"
    done
fi
lap "export"
