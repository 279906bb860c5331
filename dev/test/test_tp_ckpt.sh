#!/usr/bin/env bash
# Checkpoints across tensor-parallel layouts (cpu device): a checkpoint saved at (TP, DP) = (2, 2)
# names global tensors with global shapes and describes each chunk as a box of them (format
# version 2); it resumes at (2, 2) bitwise, at (1, 3) and (4, 1) within 1e-5 of the uninterrupted
# np=1 run, and a (1, 3) checkpoint (ranges, version 1) resumes back at TP 2; Llama GQA saved at
# TP 2 resumes at TP 1; `ckpt verify` and `info` read a TP checkpoint; the safetensors export of
# a TP 2 checkpoint is byte-identical to TP 1's at the same weights (-l 0: the initial model, the
# same at any --tp), and so is the export after a resume and save at TP 4.
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
run ref 1 "${gpt2[@]}" -b 12 || exit 1
run tp2 4 "${gpt2[@]}" -b 6 --tp 2 --ckpt-every 3 || exit 1
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

# ---- Llama GQA: saved at TP 2 (q|k|v and w1|w3 segments as boxes), resumed at TP 1
run lref 1 "${llama[@]}" -b 12 || exit 1
run ltp2 2 "${llama[@]}" -b 12 --tp 2 --ckpt-every 2 &&
    run lres 1 "${llama[@]}" -b 12 --resume "$(step ltp2 2)" && near "Llama GQA saved at (2,1), resumed at (1,1)" lref lres
lap "Llama"

# ---- the export: at -l 0 the weights stay the initial model, which is the same at any --tp
flat=(./train_gpt --device cpu --layers 2 --channels 64 --heads 4 --max-seq 64 -t 16 -d 192 -v 0 -i "$TRAIN_SHARD"
      --threads 1 -l 0 --seed 5)
if run e1 1 "${flat[@]}" -b 12 -x 1 --ckpt-every 1 && run e2 2 "${flat[@]}" -b 12 -x 1 --ckpt-every 1 --tp 2 &&
   run e4 4 "${flat[@]}" -b 12 -x 2 --ckpt-every 2 --tp 4 --resume "$(step e2 1)"; then
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
fi
lap "export"
