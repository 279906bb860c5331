#!/usr/bin/env bash
# run_tests: cores 0.9, 45 s
# The ckpt tool: info and verify on checkpoints train_gpt wrote (np=1 and np=2), damage found
# and named, export to llm.c and safetensors files, import back (byte-identical round trips),
# train_gpt --resume from an imported checkpoint, the safetensors file against the PyTorch
# reference, and bad inputs (safetensors whose tensors share bytes, a head count of "0", and
# the head count taken from the config.json of a Hugging Face save_pretrained directory or
# refused when nothing gives it: never guessed as channels / 64). Then a Llama 3 with
# grouped-query attention: Hugging Face LlamaForCausalLM safetensors export/import round trips,
# the sharded form (shards + model.safetensors.index.json) imported like the single file,
# --resume from the import, and the export checked in Hugging Face's convention (section 7).
set -u
source dev/test/lib.sh
out=$TEST_TMP
CK=./ckpt
if [ ! -x "$CK" ]; then not_ok "ckpt tool: $CK is not built (make ckpt)"; exit 1; fi

model=(--layers 2 --channels 64 --heads 4 --max-seq 64)
common=(--device cpu -b 2 -t 32 -i "$TRAIN_SHARD" -j "$VAL_SHARD" --threads 1)

# tail of a log, on one line
why() { tail -n 3 "$@" 2>/dev/null | tr '\n' ' ' | head -c 400; }
# first val_loss in a metrics file
first_val() { grep -oE '"val_loss":[-0-9.e+]+' "$1/metrics.jsonl" 2>/dev/null | head -n 1 | cut -d: -f2; }
# ck_py PYTHON ARGS...: the ok/not ok lines of `PYTHON ckpt_tool_check.py ARGS`, or a not ok
# naming it when it failed without one
ck_py() {
    local py=$1 res rc; shift
    res=$($py dev/test/ckpt_tool_check.py "$@" 2>&1); rc=$?
    grep -E '^(not )?ok - ' <<<"$res"
    if [ $rc -ne 0 ] && ! grep -q '^not ok - ' <<<"$res"; then not_ok "ckpt_tool_check.py $1: $(tail -n 2 <<<"$res" | tr '\n' ' ')"; fi
}
# The transformers checks run with TRANSFORMERS_PYTHON (a Python that has transformers), else
# $PYTHON, which has none: they then print one skip line each.
TF_PYTHON=${TRANSFORMERS_PYTHON:-$PYTHON}
# ok/not ok on a command's status
check() {
    local name=$1; shift
    local log="$out/check.log"
    if "$@" > "$log" 2>&1; then ok "$name"; else not_ok "$name: $(why "$log")"; fi
}

# 1. Checkpoints from train_gpt, on one rank (with --save-model for comparison) and on two.
if ! ./train_gpt "${common[@]}" "${model[@]}" -x 4 -v 0 -o "$out/run1" --ckpt-every 4 \
        --save-model "$out/final1.bin" > "$out/run1.log" 2>&1; then
    not_ok "train_gpt np=1 with --ckpt-every 4: $(why "$out/run1.log")"; exit 1
fi
if ! run_np 2 ./train_gpt "${common[@]}" "${model[@]}" -x 4 -v 0 -o "$out/run2" --ckpt-every 4 \
        > "$out/run2.log" 2>&1; then
    not_ok "train_gpt np=2 with --ckpt-every 4: $(why "$out/run2.log")"; exit 1
fi
step1="$out/run1/ckpt/step_00000004"
step2="$out/run2/ckpt/step_00000004"

# 2. info and verify
if $CK info "$out/run2/ckpt" > "$out/info2.txt" 2>&1 &&
   grep -qE '^step +4$' "$out/info2.txt" && grep -qE '^world at save +2$' "$out/info2.txt" &&
   grep -qE '^tokens +512$' "$out/info2.txt" && grep -q 'L=2 NH=4 C=64 maxT=64 V=50257 Vp=50304' "$out/info2.txt" &&
   grep -qE '^parameters +3323648 ' "$out/info2.txt" && grep -qE '^codec +raw$' "$out/info2.txt" &&
   grep -qE '^kind m +[0-9]+ chunks' "$out/info2.txt"; then
    ok "info on a checkpoint root (np=2): step 4, world 2, tokens 512, config, 3323648 parameters, codec, per-kind sizes"
else
    not_ok "info on the np=2 checkpoint root: $(head -c 600 "$out/info2.txt" | tr '\n' '|')"
fi
if $CK info "$out/run1" > "$out/info1.txt" 2>&1 && grep -qF "checkpoint       $step1" "$out/info1.txt" &&
   grep -qE '^world at save +1$' "$out/info1.txt"; then
    ok "info on a run directory finds its newest checkpoint ($step1)"
else
    not_ok "info on a run directory: $(head -c 300 "$out/info1.txt" | tr '\n' '|')"
fi
check "verify a good np=1 checkpoint (step directory)" bash -c "$CK verify '$step1' | grep -q '^ok'"
check "verify a good np=2 checkpoint (checkpoint root)" bash -c "$CK verify '$out/run2/ckpt' | grep -q '^ok'"
check "verify --finite of the np=1 and np=2 checkpoints: every value finite" \
    bash -c "$CK verify --finite '$step1' | grep -q 'state valid, every value finite$' &&
             $CK verify '$out/run2' --finite | grep -q 'state valid, every value finite$'"

# Damage: a flipped byte, a truncated and a missing rank file. Each is found and named.
tensor_re='(wte|wpe|ln_f\.(weight|bias)|h\.[0-9]+\.[a-z_.0-9]+)'
cp -r "$step2" "$out/flipped"
flipped=$($PYTHON dev/test/ckpt_tool_check.py flip "$out/flipped" 1)
expect_error "verify: a flipped byte in a rank file is found, naming file and tensor" \
    "rank_00001\.bin: checksum mismatch in ${flipped:-?} \(param\)" $CK verify "$out/flipped"
expect_error "export refuses a checkpoint with a flipped byte" "rank_00001\.bin: checksum mismatch in ${flipped:-?} \(param\)" \
    $CK export "$out/flipped" --llmc "$out/flipped.bin"
if [ -e "$out/flipped.bin" ] || [ -e "$out/flipped.bin.tmp" ]; then not_ok "a failed export leaves no output file behind"
else ok "a failed export leaves no output file behind"; fi
cp -r "$step2" "$out/truncated"
truncate -s 1000 "$out/truncated/rank_00000.bin"
expect_error "verify: a truncated rank file is named" "rank_00000\.bin: .*$tensor_re" $CK verify "$out/truncated"
cp -r "$step2" "$out/missing"
rm "$out/missing/rank_00001.bin"
expect_error "verify: a missing rank file is named" "rank_00001\.bin: cannot open" $CK verify "$out/missing"

# 3. llm.c export: the np=1 checkpoint of the last step holds exactly --save-model's weights.
if $CK export "$step1" --llmc "$out/a.bin" > "$out/export.log" 2>&1 && cmp -s "$out/a.bin" "$out/final1.bin"; then
    ok "export --llmc of the final checkpoint is byte-identical to train_gpt --save-model"
else
    not_ok "export --llmc vs --save-model: $(why "$out/export.log") $(cmp "$out/a.bin" "$out/final1.bin" 2>&1)"
fi
# Round trips: llm.c -> import (W=3) -> llm.c; bf16 -> import (W=2, zstd) -> bf16.
if $CK import "$out/a.bin" "$out/imp3" --world 3 > "$out/imp3.log" 2>&1 &&
   $CK verify "$out/imp3" > /dev/null 2>&1 &&
   $CK export "$out/imp3" --llmc "$out/b.bin" >> "$out/imp3.log" 2>&1 && cmp -s "$out/a.bin" "$out/b.bin"; then
    ok "llm.c export -> import --world 3 -> export: byte-identical"
else
    not_ok "llm.c round trip through a W=3 import: $(why "$out/imp3.log") $(cmp "$out/a.bin" "$out/b.bin" 2>&1)"
fi
if grep -qE '^world at save +3$' <($CK info "$out/imp3" 2>&1) && grep -qE '^step +0$' <($CK info "$out/imp3" 2>&1); then
    ok "the import is a step-0 checkpoint for 3 ranks"
else
    not_ok "import --world 3: info says $($CK info "$out/imp3" 2>&1 | grep -E '^(step|world)' | tr '\n' ' ')"
fi
if $CK export "$step2" --llmc "$out/a16.bin" --dtype bf16 > "$out/bf16.log" 2>&1 &&
   $CK import "$out/a16.bin" "$out/imp16" --world 2 --step 7 --compress zstd:5 >> "$out/bf16.log" 2>&1 &&
   $CK export "$out/imp16/step_00000007" --llmc "$out/b16.bin" --dtype bf16 >> "$out/bf16.log" 2>&1 &&
   cmp -s "$out/a16.bin" "$out/b16.bin"; then
    ok "bf16 llm.c export -> import (zstd, --step 7) -> bf16 export: byte-identical"
else
    not_ok "bf16 round trip: $(why "$out/bf16.log") $(cmp "$out/a16.bin" "$out/b16.bin" 2>&1)"
fi
$CK info "$out/imp16" > "$out/info16.txt" 2>&1
# (--compress zstd writes byte-shuffled zstd chunks, codec zstd_shuffle in the manifest)
if grep -qE '^codec +zstd_shuffle$' "$out/info16.txt" && grep -qE '^step +7$' "$out/info16.txt" &&
   awk '/^compression/ {exit !($2 + 0 > 1.5)}' "$out/info16.txt"; then
    ok "info on a zstd import: codec zstd_shuffle, $(grep '^compression' "$out/info16.txt" | tr -s ' ')"
else
    not_ok "info on the zstd import: $(grep -E '^(codec|compression|step)' "$out/info16.txt" | tr '\n' ' ')"
fi
check "verify --finite of a zstd_shuffle checkpoint (values checked as decoded)" \
    bash -c "$CK verify --finite '$out/imp16' | grep -q 'every value finite$'"
# bf16 export: version 5 header, fp32 rounded to nearest even (the np=1 weights, against numpy)
$CK export "$step1" --llmc "$out/a1_16.bin" --dtype bf16 > /dev/null 2>&1
$PYTHON - "$out/a.bin" "$out/a1_16.bin" <<'PY'
import sys, numpy as np
h = np.fromfile(sys.argv[2], dtype="<i4", count=256)
u = np.fromfile(sys.argv[1], dtype="<u4", offset=1024).astype(np.uint64)
want = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
got = np.fromfile(sys.argv[2], dtype="<u2", offset=1024)
n = int((want != got).sum()) if want.size == got.size else -1
hdr = list(h[:8]) == [20240326, 5, 64, 50257, 2, 4, 64, 50304]
print(("ok" if n == 0 and hdr else "not ok") + f" - bf16 export: header {list(h[:8])}, fp32 rounded to nearest even "
      f"({n} of {u.size} values differ)")
PY

# 4. safetensors: export -> import -> export byte-identical, and the same weights as llm.c.
if $CK export "$step1" --safetensors "$out/a.safetensors" > "$out/st.log" 2>&1 &&
   $CK import "$out/a.safetensors" "$out/impst" --world 2 --heads 4 >> "$out/st.log" 2>&1 &&
   $CK export "$out/impst" --safetensors "$out/b.safetensors" >> "$out/st.log" 2>&1 &&
   cmp -s "$out/a.safetensors" "$out/b.safetensors"; then
    ok "safetensors export -> import --world 2 -> export: byte-identical"
else
    not_ok "safetensors round trip: $(why "$out/st.log") $(cmp "$out/a.safetensors" "$out/b.safetensors" 2>&1)"
fi
if $CK export "$out/impst" --llmc "$out/c.bin" > "$out/st2.log" 2>&1 && cmp -s "$out/a.bin" "$out/c.bin"; then
    ok "a safetensors import exports the same llm.c file as the checkpoint it came from"
else
    not_ok "safetensors import -> llm.c: $(why "$out/st2.log") $(cmp "$out/a.bin" "$out/c.bin" 2>&1)"
fi
# The safetensors package reads it; PyTorch from its weights = train_gpt's logits.
if OMP_NUM_THREADS=2 build/test_gpt2 dump --model "$out/a.bin" --tokens "$TRAIN_SHARD" -b 2 -t 32 --steps 1 \
        --out "$out/state.bin" > "$out/dump.log" 2>&1; then
    res=$($PYTHON dev/test/ckpt_tool_check.py safetensors "$out/a.safetensors" "$out/a.bin" "$out/state.bin" 2>&1)
    rc=$?
    echo "$res" | grep -E '^(not )?ok - '
    if [ $rc -ne 0 ] && ! grep -q '^not ok - ' <<<"$res"; then not_ok "ckpt_tool_check.py safetensors: $(tail -n 2 <<<"$res" | tr '\n' ' ')"; fi
else
    not_ok "test_gpt2 dump on the exported model: $(why "$out/dump.log")"
fi

# Safetensors as Hugging Face writes them (GPT2LMHeadModel: "transformer." prefix, attn.bias
# buffers, tied lm_head.weight; no n_head metadata, so --heads) and in BF16 import too.
mkdir -p "$out/bad"
$PYTHON dev/test/ckpt_tool_check.py variants "$out/a.safetensors" "$out/bad"
if $CK import "$out/bad/hf.safetensors" "$out/imphf" --world 2 --heads 4 > "$out/hf.log" 2>&1 &&
   $CK export "$out/imphf" --llmc "$out/hf.bin" >> "$out/hf.log" 2>&1 && cmp -s "$out/a.bin" "$out/hf.bin"; then
    ok "import of a GPT2LMHeadModel-style safetensors file (prefix, buffers, lm_head) gives the same weights"
else
    not_ok "import of GPT2LMHeadModel-style safetensors: $(why "$out/hf.log") $(cmp "$out/a.bin" "$out/hf.bin" 2>&1)"
fi
# A save_pretrained directory (model.safetensors without n_head metadata, and config.json): the
# head count comes from config.json, and the weights are the same.
if $CK import "$out/bad/hf_dir/model.safetensors" "$out/imphfdir" --world 2 > "$out/hfdir.log" 2>&1 &&
   grep -q "heads from .*hf_dir/config.json n_head" "$out/hfdir.log" &&
   grep -q 'L=2 NH=4 C=64' <($CK info "$out/imphfdir" 2>&1) &&
   $CK export "$out/imphfdir" --llmc "$out/hfdir.bin" >> "$out/hfdir.log" 2>&1 && cmp -s "$out/a.bin" "$out/hfdir.bin"; then
    ok "import of a save_pretrained directory takes n_head 4 from config.json; same weights as the source"
else
    not_ok "import with config.json: $(why "$out/hfdir.log") $(cmp "$out/a.bin" "$out/hfdir.bin" 2>&1)"
fi
# GPT-2's config.json: the export writes the keys transformers' save_pretrained writes (against
# a copy of its output), its directory imports with no --heads and exports again byte-identical,
# config.json too; beside a file without n_head metadata it gives the head count.
mkdir -p "$out/gst" "$out/gst2" "$out/gsthf"
if $CK export "$step1" --safetensors "$out/gst/model.safetensors" > "$out/gst.log" 2>&1 &&
   grep -q "^wrote $out/gst/config.json" "$out/gst.log" &&
   $CK import "$out/gst" "$out/gstimp" --world 2 >> "$out/gst.log" 2>&1 &&
   $CK export "$out/gstimp" --safetensors "$out/gst2/model.safetensors" >> "$out/gst.log" 2>&1 &&
   cmp -s "$out/gst/model.safetensors" "$out/gst2/model.safetensors" && cmp -s "$out/gst/config.json" "$out/gst2/config.json"; then
    ok "GPT-2 safetensors export writes config.json; its directory imports with no --heads and exports byte-identical, config.json too"
else
    not_ok "GPT-2 export with config.json, round trip: $(why "$out/gst.log") $(cmp "$out/gst/config.json" "$out/gst2/config.json" 2>&1)"
fi
ck_py "$PYTHON" config "$out/gst"
cp "$out/bad/hf.safetensors" "$out/gsthf/model.safetensors"
cp "$out/gst/config.json" "$out/gsthf/config.json"
if $CK import "$out/gsthf/model.safetensors" "$out/gsthfimp" --world 1 > "$out/gsthf.log" 2>&1 &&
   grep -q "heads from .*gsthf/config.json n_head" "$out/gsthf.log" &&
   $CK export "$out/gsthfimp" --llmc "$out/gsthf.bin" >> "$out/gsthf.log" 2>&1 && cmp -s "$out/a.bin" "$out/gsthf.bin"; then
    ok "the export's config.json beside a GPT2LMHeadModel-style file (no n_head metadata) gives its 4 heads; same weights"
else
    not_ok "the export's config.json beside a GPT2LMHeadModel-style file: $(why "$out/gsthf.log") $(cmp "$out/a.bin" "$out/gsthf.bin" 2>&1)"
fi
# config.json fields that change the math, set to what fsdp.c computes (or absent: transformers'
# defaults): imported, the same weights. (Each other value is refused: section 6.)
for vd in "hf_cfg_minimal|model_type and n_head alone: transformers' defaults" \
          "hf_cfg_tanh|gelu_pytorch_tanh, n_inner 4 x n_embd, reorder_and_upcast_attn true" \
          "hf_cfg_untied_same|tie_word_embeddings false, lm_head.weight = wte.weight: a note"; do
    v=${vd%%|*}
    if $CK import "$out/bad/$v/model.safetensors" "$out/imp_$v" --world 1 > "$out/$v.log" 2>&1 &&
       $CK export "$out/imp_$v" --llmc "$out/$v.bin" >> "$out/$v.log" 2>&1 && cmp -s "$out/a.bin" "$out/$v.bin" &&
       { [ $v != hf_cfg_untied_same ] ||
         grep -q "^note: .*hf_cfg_untied_same/config.json says tie_word_embeddings = false, but lm_head.weight equals wte.weight" "$out/$v.log"; }; then
        ok "import of $v (${vd#*|}): same weights"
    else
        not_ok "import of $v: $(why "$out/$v.log") $(cmp "$out/a.bin" "$out/$v.bin" 2>&1)"
    fi
done
# transformers itself (TRANSFORMERS_PYTHON): GPT2LMHeadModel.from_pretrained loads the export and
# gives train_gpt's logits; its save_pretrained imports (tied: the same tensors; untied: refused).
ck_py "$TF_PYTHON" transformers load "$out/gst" "$out/a.bin" "$out/state.bin"
saved=$(ck_py "$TF_PYTHON" transformers save "$out/tf")
echo "$saved"
if ! grep -q '# skip' <<<"$saved" && [ -f "$out/tf/tied/model.safetensors" ]; then
    mkdir -p "$out/tfexp"
    if $CK import "$out/tf/tied" "$out/tfimp" --world 1 > "$out/tf.log" 2>&1 &&
       $CK export "$out/tfimp" --safetensors "$out/tfexp/model.safetensors" >> "$out/tf.log" 2>&1; then
        ck_py "$TF_PYTHON" transformers same "$out/tf/tied/model.safetensors" "$out/tfexp/model.safetensors"
    else
        not_ok "import of transformers' save_pretrained (tied): $(why "$out/tf.log")"
    fi
    expect_error "import of transformers' save_pretrained with tie_word_embeddings=False (a head of its own)" \
        "tf/untied/config.json: tie_word_embeddings = false, and lm_head.weight differs from wte.weight" \
        $CK import "$out/tf/untied" "$out/imp_x" --world 1
fi
if $CK import "$out/bad/bf16.safetensors" "$out/impbf" --world 1 > "$out/bf.log" 2>&1 &&
   $CK export "$out/impbf" --llmc "$out/bf.bin" --dtype bf16 >> "$out/bf.log" 2>&1 && cmp -s "$out/a1_16.bin" "$out/bf.bin"; then
    ok "import of a BF16 safetensors file equals the bf16 llm.c export"
else
    not_ok "import of BF16 safetensors: $(why "$out/bf.log") $(cmp "$out/a1_16.bin" "$out/bf.bin" 2>&1)"
fi

# 4b. The LayerNorms' epsilon: a save_pretrained directory whose config.json says
#     layer_norm_epsilon 1e-6 imports with it, resumes with no model flags and trains with it
#     (its val loss is not that of the same weights at 1e-5, which --norm-eps 1e-5 on the resume
#     gives back bitwise), exports it in the metadata and re-imports byte-equal; 0, and metadata
#     disagreeing with config.json, are refused.
epsrun=(--device cpu -b 2 -t 32 -i "$TRAIN_SHARD" -j "$VAL_SHARD" --threads 1 -v 1 --val-steps 2)
if $CK import "$out/bad/hf_dir_eps/model.safetensors" "$out/impeps" --world 2 > "$out/eps.log" 2>&1 &&
   grep -q 'L=2 NH=4 C=64 maxT=64 V=50257 Vp=50304 eps=1e-06' "$out/eps.log"; then
    ok "import of a GPT-2 with layer_norm_epsilon 1e-6 in config.json: the import says eps=1e-06"
else
    not_ok "import of a GPT-2 with layer_norm_epsilon 1e-6: $(why "$out/eps.log")"
fi
if ./train_gpt "${epsrun[@]}" -x 0 --resume "$out/imphfdir" -o "$out/eps_ref" > "$out/eps_ref.log" 2>&1 &&
   ./train_gpt "${epsrun[@]}" -x 2 --ckpt-every 2 --resume "$out/impeps" -o "$out/eps_run" > "$out/eps_run.log" 2>&1 &&
   ./train_gpt "${epsrun[@]}" -x 0 --norm-eps 1e-5 --resume "$out/impeps" -o "$out/eps_back" > "$out/eps_back.log" 2>&1; then
    a=$(first_val "$out/eps_ref"); b=$(first_val "$out/eps_run"); c=$(first_val "$out/eps_back")
    if [ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ] && [ "$c" = "$a" ] && grep -q '^model: GPT-2, .*, norm eps 1e-06' "$out/eps_run.log" &&
       grep -q -- "--norm-eps 1e-05 replaces the checkpoint's 1e-06" "$out/eps_back.log" && grep -q '"step":2,"loss"' "$out/eps_run/metrics.jsonl"; then
        ok "GPT-2 at eps 1e-6 resumed without model flags: val loss $b (the same weights at 1e-5: $a, and with --norm-eps 1e-5: $c), 2 steps trained"
    else
        not_ok "GPT-2 at eps 1e-6 resumed: val loss ${b:-none}, at 1e-5 ${a:-none}, with --norm-eps 1e-5 ${c:-none}; $(grep -h -E '^model|replaces' "$out/eps_run.log" "$out/eps_back.log" | tr '\n' ' ')"
    fi
else
    not_ok "train_gpt --resume of the eps imports: $(why "$out/eps_ref.log" "$out/eps_run.log" "$out/eps_back.log")"
fi
mkdir -p "$out/epsexp" "$out/epsexp2"
if $CK export "$out/eps_run" --safetensors "$out/epsexp/model.safetensors" > "$out/epsexp.log" 2>&1 &&
   head -c 4096 "$out/epsexp/model.safetensors" | grep -aq '"layer_norm_epsilon":"1e-06"' &&
   $CK import "$out/epsexp/model.safetensors" "$out/impeps2" --world 3 >> "$out/epsexp.log" 2>&1 &&
   grep -q 'eps=1e-06' "$out/epsexp.log" &&
   $CK export "$out/impeps2" --safetensors "$out/epsexp2/model.safetensors" >> "$out/epsexp.log" 2>&1 &&
   cmp -s "$out/epsexp/model.safetensors" "$out/epsexp2/model.safetensors"; then
    ok "GPT-2 at eps 1e-6: export (metadata layer_norm_epsilon 1e-06) -> import -> export byte-identical"
else
    not_ok "GPT-2 eps export round trip: $(why "$out/epsexp.log") $(cmp "$out/epsexp/model.safetensors" "$out/epsexp2/model.safetensors" 2>&1)"
fi
expect_error "import: layer_norm_epsilon 0" "hf_dir_eps0/config\.json: layer_norm_epsilon = 0 is not in \[1e-30, 1\]" \
    $CK import "$out/bad/hf_dir_eps0/model.safetensors" "$out/imp_x" --world 2
expect_error "import: metadata layer_norm_epsilon disagreeing with config.json's" \
    "hf_dir_eps_disagree/model\.safetensors: __metadata__ layer_norm_epsilon 1e-05 disagrees with .*hf_dir_eps_disagree/config\.json's 1e-06" \
    $CK import "$out/bad/hf_dir_eps_disagree/model.safetensors" "$out/imp_x" --world 2
expect_error "export --llmc of a model at eps 1e-6 (llm.c's header has no field for it)" \
    "llm\.c model files have no field for the norm epsilon, and this model's is 1e-06" \
    $CK export "$out/impeps" --llmc "$out/eps.bin"

# 5. train_gpt --resume from an import (step 0, Adam moments zero) continues exactly like
#    --init-from the llm.c file: same val loss at step 0, same losses for two steps, on 3 ranks
#    (the import's W) and on 1.
val=(-x 2 -v 2 --val-steps 2)
losses() { grep -oE '"(val_loss|loss)":[-0-9.e+]+' "$1/metrics.jsonl" 2>/dev/null | tr '\n' ' '; }
for np in 3 1; do
    launch=(); [ "$np" -gt 1 ] && launch=(run_np "$np")
    if ! "${launch[@]}" ./train_gpt "${common[@]}" "${val[@]}" --init-from "$out/a.bin" -o "$out/init$np" \
            > "$out/init$np.log" 2>&1; then
        not_ok "np=$np: --init-from the exported llm.c file: $(why "$out/init$np.log")"
    elif ! "${launch[@]}" ./train_gpt "${common[@]}" "${val[@]}" "${model[@]}" --resume "$out/imp3/step_00000000" \
            -o "$out/resume$np" > "$out/resume$np.log" 2>&1; then
        not_ok "np=$np: --resume from the W=3 import: $(grep -m1 -i error "$out/resume$np.log" || why "$out/resume$np.log")"
    else
        a=$(losses "$out/init$np"); b=$(losses "$out/resume$np")
        if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$(wc -w <<<"$a")" -eq 4 ]; then
            ok "np=$np: --resume from the W=3 import = --init-from the llm.c file (val loss $(first_val "$out/init$np"), 2 steps bitwise)"
        else not_ok "np=$np: after --resume from the import: $b; after --init-from: $a"; fi
    fi
done

# 6. Bad inputs: one line naming the file or argument, exit 1.
printf 'not a model at all, just some text that is long enough\n' > "$out/junk.bin"
head -c 3000 "$out/a.bin" > "$out/short.bin"
mkdir -p "$out/empty"
cp -r "$step2" "$out/run2/ckpt/step_00000008.tmp"
rm -f "$out/run2/ckpt/step_00000008.tmp/manifest.json"
cp -r "$step2" "$out/badmanifest"
printf '{"format_version": 1, "world": 2' > "$out/badmanifest/manifest.json"
expect_error "no command"                 "missing COMMAND"                      $CK
expect_error "unknown command"            "unknown command 'frobnicate'"         $CK frobnicate x
expect_error "info: missing path"         "no_such_dir: No such file"            $CK info "$out/no_such_dir"
expect_error "info: a directory without checkpoints" "empty: no complete checkpoint" $CK info "$out/empty"
expect_error "info: a file, not a directory" "junk.bin: not a directory"         $CK info "$out/junk.bin"
expect_error "info: step_N.tmp without a manifest" "step_00000008.tmp: not a committed checkpoint" \
    $CK info "$out/run2/ckpt/step_00000008.tmp"
expect_error "info: a corrupt manifest"   "badmanifest/manifest.json: not valid JSON" $CK info "$out/badmanifest"
expect_error "info: extra argument"       "unexpected argument 'extra'"          $CK info "$step1" extra
expect_error "verify: unknown option"     "unknown option '--fast'"              $CK verify --fast "$step1"
expect_error "verify: --finite takes no value" "verify: --finite takes no value"   $CK verify --finite=1 "$step1"
expect_error "export: no output"          "give --llmc OUT.bin or --safetensors" $CK export "$step1"
expect_error "export: --llmc needs a value" "--llmc needs a value"               $CK export "$step1" --llmc
expect_error "export: bad --dtype"        "--dtype: expected fp32 or bf16, got 'fp16'" $CK export "$step1" --llmc "$out/x.bin" --dtype fp16
expect_error "export: unwritable output"  "nodir/x.bin.tmp: cannot create"       $CK export "$step1" --llmc "$out/nodir/x.bin"
expect_error "import: --world missing"    "--world W is required"                $CK import "$out/a.bin" "$out/imp_x"
expect_error "import: --world 0"          "--world: 0 is out of range"           $CK import "$out/a.bin" "$out/imp_x" --world 0
expect_error "import: bad --world"        "--world: expected an integer, got 'two'" $CK import "$out/a.bin" "$out/imp_x" --world two
expect_error "import: bad --compress"     "--compress: expected none, zstd or zstd:LEVEL, got 'lz4'" \
    $CK import "$out/a.bin" "$out/imp_x" --world 2 --compress lz4
expect_error "import: bad zstd level"     "zstd:LEVEL: 99 is out of range"       $CK import "$out/a.bin" "$out/imp_x" --world 2 --compress zstd:99
expect_error "import: missing source"     "nope.bin: cannot open"                $CK import "$out/nope.bin" "$out/imp_x" --world 2
# A model.safetensors symlink to its own directory, or in a loop: named as what it is (the first
# recursed until ELOOP and was reported as a directory without model.safetensors).
mkdir -p "$out/st_dot" "$out/st_loop"
ln -sfn . "$out/st_dot/model.safetensors"
ln -sfn model.safetensors "$out/st_loop/model.safetensors"
expect_error "import: model.safetensors -> ." "st_dot/model.safetensors: not a regular file \(a directory\)" \
    $CK import "$out/st_dot" "$out/imp_x" --world 2
expect_error "import: a model.safetensors symlink loop" "st_loop/model.safetensors: cannot open: a symlink loop \(Too many levels of symbolic links\)" \
    $CK import "$out/st_loop" "$out/imp_x" --world 2
expect_error "import: a symlink loop named as SRC" "st_loop/model.safetensors: cannot open: a symlink loop" \
    $CK import "$out/st_loop/model.safetensors" "$out/imp_x" --world 2
expect_error "import: neither llm.c nor safetensors" "junk.bin: not an llm.c model file .* nor a safetensors file" \
    $CK import "$out/junk.bin" "$out/imp_x" --world 2
expect_error "import: truncated llm.c file" "short.bin: (truncated header|3000 bytes)" $CK import "$out/short.bin" "$out/imp_x" --world 2
expect_error "import: --heads disagrees with an llm.c file" "--heads 8 disagrees" $CK import "$out/a.bin" "$out/imp_x" --world 2 --heads 8
expect_error "import: into an existing step" "imp3/step_00000000: already exists" $CK import "$out/a.bin" "$out/imp3" --world 2
expect_error "import: safetensors missing a tensor" "st_missing.safetensors: tensor h.1.mlp.c_fc.bias is missing \(a GPT-2 with 2 layers\)" \
    $CK import "$out/bad/st_missing.safetensors" "$out/imp_x" --world 2
expect_error "import: safetensors wrong shape" "st_shape.safetensors: tensor h.0.attn.c_attn.weight has shape \[192, 64\], expected \[64, 192\]" \
    $CK import "$out/bad/st_shape.safetensors" "$out/imp_x" --world 2
expect_error "import: safetensors unsupported dtype" "st_dtype.safetensors: tensor h.0.ln_1.bias: unsupported dtype I32" \
    $CK import "$out/bad/st_dtype.safetensors" "$out/imp_x" --world 2
expect_error "import: safetensors truncated" "st_truncated.safetensors: tensor .* run past the end" \
    $CK import "$out/bad/st_truncated.safetensors" "$out/imp_x" --world 2
expect_error "import: safetensors unknown tensor" "st_extra.safetensors: unexpected tensor h.0.extra.weight \(not one of a GPT-2 with 2 layers\)" \
    $CK import "$out/bad/st_extra.safetensors" "$out/imp_x" --world 2
expect_error "import: a tensor under two prefixes" \
    "st_twice.safetensors: [0-9]+ tensor names for [0-9]+ GPT-2 tensors: a tensor appears twice in the header \(under two prefixes\?\)" \
    $CK import "$out/bad/st_twice.safetensors" "$out/imp_x" --world 2
expect_error "import: safetensors bad header" "st_badjson.safetensors: safetensors header is not a JSON object" \
    $CK import "$out/bad/st_badjson.safetensors" "$out/imp_x" --world 2
expect_error "import: --heads not dividing C" "channels 64 is not a multiple of 3 heads" \
    $CK import "$out/a.safetensors" "$out/imp_x" --world 2 --heads 3
# Untrusted safetensors headers and the head count (never guessed as channels / 64, which for
# this 64-channel, 4-head model would be 1 head).
expect_error "import: safetensors tensors sharing bytes" \
    "st_overlap.safetensors: tensors h\.0\.ln_1\.(weight|bias) and h\.0\.ln_1\.(weight|bias) overlap in the data" \
    $CK import "$out/bad/st_overlap.safetensors" "$out/imp_x" --world 2
expect_error "import: metadata n_head \"0\"" "st_nhead0.safetensors: __metadata__ n_head = 0 is not a head count" \
    $CK import "$out/bad/st_nhead0.safetensors" "$out/imp_x" --world 2
expect_error "import: metadata n_head \"4x\"" "st_nhead_junk.safetensors: __metadata__ n_head = 4x is not a head count" \
    $CK import "$out/bad/st_nhead_junk.safetensors" "$out/imp_x" --world 2
expect_error "import: --heads disagreeing with the metadata's n_head" "--heads 8 disagrees with the file's 4 heads" \
    $CK import "$out/a.safetensors" "$out/imp_x" --world 2 --heads 8
expect_error "import: no head count anywhere (no --heads, metadata or config.json)" \
    "hf_dir_noconfig/model.safetensors: no head count: no __metadata__ n_head and no config.json beside it .*give --heads N" \
    $CK import "$out/bad/hf_dir_noconfig/model.safetensors" "$out/imp_x" --world 2
expect_error "import: config.json whose n_embd is not the tensors'" "hf_dir_badembd/config.json: n_embd = 128, but the safetensors file has 64" \
    $CK import "$out/bad/hf_dir_badembd/model.safetensors" "$out/imp_x" --world 2
expect_error "import: config.json with n_head 0" "hf_dir_nhead0/config.json: n_head is not a head count" \
    $CK import "$out/bad/hf_dir_nhead0/model.safetensors" "$out/imp_x" --world 2
expect_error "import: metadata n_head disagreeing with config.json" \
    "hf_dir_disagree/model.safetensors: __metadata__ n_head 2 disagrees with .*hf_dir_disagree/config.json's n_head 4" \
    $CK import "$out/bad/hf_dir_disagree/model.safetensors" "$out/imp_x" --world 2
# transformers' GPT-2 config fields that change the math, set to what fsdp.c does not compute;
# a head that is not wte (tie_word_embeddings false or true: no untied GPT-2 here), or an untied
# head missing.
gcfg="$out/bad"
expect_error "import: config.json activation_function \"gelu\" (erf, not tanh)" \
    "hf_cfg_act/config.json: activation_function = \"gelu\": fsdp.c's GPT-2 MLP is GELU's tanh approximation" \
    $CK import "$gcfg/hf_cfg_act/model.safetensors" "$out/imp_x" --world 2
expect_error "import: config.json n_inner 100 (not 4 x n_embd)" \
    "hf_cfg_inner/config.json: n_inner = 100: fsdp.c's GPT-2 MLP is 4 x n_embd = 256 wide" \
    $CK import "$gcfg/hf_cfg_inner/model.safetensors" "$out/imp_x" --world 2
expect_error "import: config.json scale_attn_weights false" \
    "hf_cfg_scale/config.json: scale_attn_weights = false: fsdp.c's GPT-2 divides the attention scores by sqrt\(head size\)" \
    $CK import "$gcfg/hf_cfg_scale/model.safetensors" "$out/imp_x" --world 2
expect_error "import: config.json scale_attn_by_inverse_layer_idx true" \
    "hf_cfg_layeridx/config.json: scale_attn_by_inverse_layer_idx = true: " \
    $CK import "$gcfg/hf_cfg_layeridx/model.safetensors" "$out/imp_x" --world 2
expect_error "import: config.json add_cross_attention true" \
    "hf_cfg_cross/config.json: add_cross_attention = true: fsdp.c's GPT-2 is a decoder alone" \
    $CK import "$gcfg/hf_cfg_cross/model.safetensors" "$out/imp_x" --world 2
expect_error "import: config.json scale_attn_weights \"yes\"" \
    "hf_cfg_bool/config.json: scale_attn_weights = \"yes\" is not true or false" \
    $CK import "$gcfg/hf_cfg_bool/model.safetensors" "$out/imp_x" --world 2
expect_error "import: tie_word_embeddings false and an lm_head.weight that is not wte" \
    "hf_cfg_untied_diff/config.json: tie_word_embeddings = false, and lm_head.weight differs from wte.weight" \
    $CK import "$gcfg/hf_cfg_untied_diff/model.safetensors" "$out/imp_x" --world 2
expect_error "import: tie_word_embeddings true and an lm_head.weight that is not wte" \
    "hf_cfg_tied_diff/config.json: tie_word_embeddings = true, and lm_head.weight differs from wte.weight" \
    $CK import "$gcfg/hf_cfg_tied_diff/model.safetensors" "$out/imp_x" --world 2
expect_error "import: tie_word_embeddings false and no lm_head.weight" \
    "hf_cfg_untied_nohead/config.json: tie_word_embeddings = false, but .*hf_cfg_untied_nohead/model.safetensors holds no lm_head.weight" \
    $CK import "$gcfg/hf_cfg_untied_nohead/model.safetensors" "$out/imp_x" --world 2
expect_error "import: no config.json and an lm_head.weight that is not wte" \
    "st_head_diff.safetensors: lm_head.weight differs from wte.weight: fsdp.c's GPT-2 has no head of its own" \
    $CK import "$gcfg/st_head_diff.safetensors" "$out/imp_x" --world 2 --heads 4
if [ -e "$out/imp_x" ] && [ -n "$(ls -A "$out/imp_x" 2>/dev/null)" ]; then not_ok "failed imports leave nothing in OUT_ROOT: $(ls "$out/imp_x")"
else ok "failed imports leave nothing in OUT_ROOT"; fi
if $CK --help | grep -q 'ckpt import SRC OUT_ROOT' && $CK --help | grep -q 'ckpt verify PATH \[--finite\]'; then ok "ckpt --help (verify --finite listed)"; else not_ok "ckpt --help: no usage"; fi

# 7. Llama 3 (grouped-query attention: 2 kv heads for 4 heads, SwiGLU width 96): info and verify,
#    --llmc refused, export to Hugging Face LlamaForCausalLM safetensors + config.json, import
#    back (byte-identical round trip), --resume from the import, and the export run by an
#    independent forward in Hugging Face's rotate_half convention (dev/test/hf_llama_check.py)
#    against train_gpt's val loss on the same weights. Bad Llama inputs: test_untrusted_ckpt.sh.
lmodel=(--arch llama3 --layers 2 --channels 64 --heads 4 --kv-heads 2 --ffn-dim 96 --max-seq 64)
lval=(-v 2 --val-steps 2)
last_val() { grep -oE '"val_loss":[-0-9.e+]+' "$1/metrics.jsonl" 2>/dev/null | tail -n 1 | cut -d: -f2; }
HF=dev/test/hf_llama_check.py
# py_checks: the ok/not ok lines of a hf_llama_check.py run, or a not ok naming it when it failed without one
py_checks() {
    local res rc
    res=$($PYTHON "$HF" "$@" 2>&1); rc=$?
    grep -E '^(not )?ok - ' <<<"$res"
    if [ $rc -ne 0 ] && ! grep -q '^not ok - ' <<<"$res"; then not_ok "hf_llama_check.py $1: $(tail -n 2 <<<"$res" | tr '\n' ' ')"; fi
}
if ! ./train_gpt "${common[@]}" "${lmodel[@]}" "${lval[@]}" -x 4 -o "$out/lrun" --ckpt-every 4 > "$out/lrun.log" 2>&1; then
    not_ok "train_gpt --arch llama3 (KVH 2) with --ckpt-every 4: $(why "$out/lrun.log")"; exit 1
fi
lstep="$out/lrun/ckpt/step_00000004"
lval4=$(last_val "$out/lrun")   # the val loss at step 4, of the checkpoint's weights
$CK info "$out/lrun" > "$out/linfo.txt" 2>&1
if grep -qE '^family +llama3' "$out/linfo.txt" && grep -q 'L=2 NH=4 KVH=2 C=64 F=96 maxT=64 V=50257 Vp=50304' "$out/linfo.txt" &&
   grep -qE '^kv heads +2 ' "$out/linfo.txt" && grep -qE '^ffn dim +96 ' "$out/linfo.txt" &&
   grep -qE '^rope +theta 500000, no scaling$' "$out/linfo.txt" && grep -qE '^step +4$' "$out/linfo.txt" &&
   grep -qE '^parameters +6500672 .*6494656 without the 47 padded vocabulary rows' "$out/linfo.txt"; then
    ok "info on a Llama checkpoint: family llama3, L/NH/KVH/C/F, kv heads 2, ffn dim 96, rope theta 500000 no scaling, parameters"
else
    not_ok "info on the Llama checkpoint: $(head -c 700 "$out/linfo.txt" | tr '\n' '|')"
fi
check "verify a Llama checkpoint" bash -c "$CK verify '$lstep' | grep -q '^ok'"
expect_error "export --llmc of a Llama checkpoint is refused (llm.c files hold GPT-2 only)" \
    "step_00000004 is a Llama 3 checkpoint: llm.c model files hold GPT-2 only \(use --safetensors\)" \
    $CK export "$lstep" --llmc "$out/llama.bin"
if [ -e "$out/llama.bin" ] || [ -e "$out/llama.bin.tmp" ]; then not_ok "the refused --llmc export leaves no file"; fi

mkdir -p "$out/lhf" "$out/lhf2"
if $CK export "$lstep" --safetensors "$out/lhf/model.safetensors" > "$out/lst.log" 2>&1 && [ -f "$out/lhf/config.json" ] &&
   $CK import "$out/lhf/model.safetensors" "$out/limp" --world 3 >> "$out/lst.log" 2>&1 &&
   $CK verify "$out/limp" > /dev/null 2>&1 &&
   $CK export "$out/limp" --safetensors "$out/lhf2/model.safetensors" >> "$out/lst.log" 2>&1 &&
   cmp -s "$out/lhf/model.safetensors" "$out/lhf2/model.safetensors" && cmp -s "$out/lhf/config.json" "$out/lhf2/config.json"; then
    ok "Llama safetensors export (+ config.json) -> import --world 3 -> export: byte-identical, config.json too"
else
    not_ok "Llama safetensors round trip: $(why "$out/lst.log") $(cmp "$out/lhf/model.safetensors" "$out/lhf2/model.safetensors" 2>&1)"
fi
$CK info "$out/limp" > "$out/limpinfo.txt" 2>&1
if grep -qE '^world at save +3$' "$out/limpinfo.txt" && grep -qE '^step +0$' "$out/limpinfo.txt" &&
   grep -q 'L=2 NH=4 KVH=2 C=64 F=96 maxT=64 V=50257 Vp=50304' "$out/limpinfo.txt" && grep -qE '^family +llama3' "$out/limpinfo.txt"; then
    ok "the Llama import is a step-0 llama3 checkpoint for 3 ranks of the same shape"
else
    not_ok "info on the Llama import: $(grep -E '^(step|world|family|model)' "$out/limpinfo.txt" | tr '\n' ' ')"
fi
# train_gpt --resume from the import: its val loss at step 0 is the original's at step 4 (same
# weights, same val windows), and it trains on.
if ./train_gpt "${common[@]}" "${lmodel[@]}" "${lval[@]}" -x 2 --resume "$out/limp/step_00000000" -o "$out/lres" \
        > "$out/lres.log" 2>&1; then
    a=$(first_val "$out/lres")
    if [ -n "$a" ] && [ "$a" = "$lval4" ] && grep -q '"step":2,"loss"' "$out/lres/metrics.jsonl"; then
        ok "--resume from the Llama import: first val loss $a = the original's at step 4, and 2 steps trained"
    else
        not_ok "--resume from the Llama import: first val loss ${a:-none}, the original's ${lval4:-none}"
    fi
else
    not_ok "--resume from the Llama import: $(grep -m1 -i error "$out/lres.log" || why "$out/lres.log")"
fi
# Hugging Face's sharded form (the 8B's: model-0000i-of-0000N.safetensors and
# model.safetensors.index.json beside config.json): the export split into 3 shards imports, given
# as the index or as its directory, into the single file's checkpoint (the rank files at the
# same W byte-identical, the export of it the same file), and resumes with the same val loss.
if $PYTHON "$HF" shard "$out/lhf/model.safetensors" "$out/lshard" 3 > "$out/lshard.log" 2>&1 &&
   $CK import "$out/lshard" "$out/lshimp" --world 3 >> "$out/lshard.log" 2>&1 &&
   $CK import "$out/lshard/model.safetensors.index.json" "$out/lshimp2" --world 3 >> "$out/lshard.log" 2>&1 &&
   grep -q 'lshard/model.safetensors.index.json: safetensors in 3 shards (Hugging Face Llama), L=2 NH=4 KVH=2 C=64 F=96' "$out/lshard.log" &&
   mkdir -p "$out/lshexp" && $CK export "$out/lshimp" --safetensors "$out/lshexp/model.safetensors" >> "$out/lshard.log" 2>&1; then
    differ=""
    for f in "$out/limp/step_00000000/"rank_*.bin; do
        for d in lshimp lshimp2; do cmp -s "$f" "$out/$d/step_00000000/${f##*/}" || differ+=" $d/${f##*/}"; done
    done
    if [ -z "$differ" ] && cmp -s "$out/lhf2/model.safetensors" "$out/lshexp/model.safetensors"; then
        ok "sharded Llama safetensors (3 shards + index): import of the index and of its directory = the single file's, rank files and export byte-identical"
    else
        not_ok "sharded Llama import differs from the single file's:${differ:- (export)} $(cmp "$out/lhf2/model.safetensors" "$out/lshexp/model.safetensors" 2>&1)"
    fi
else
    not_ok "sharded Llama safetensors import: $(why "$out/lshard.log")"
fi
if ./train_gpt "${common[@]}" "${lmodel[@]}" "${lval[@]}" -x 1 --resume "$out/lshimp" -o "$out/lshres" > "$out/lshres.log" 2>&1; then
    a=$(first_val "$out/lshres")
    if [ -n "$a" ] && [ "$a" = "$lval4" ]; then ok "--resume from the sharded Llama import: first val loss $a = the original's at step 4"
    else not_ok "--resume from the sharded Llama import: first val loss ${a:-none}, the original's ${lval4:-none}"; fi
else
    not_ok "--resume from the sharded Llama import: $(grep -m1 -i error "$out/lshres.log" || why "$out/lshres.log")"
fi
# The exported file in Hugging Face's convention: names, shapes, config.json; its forward on
# the val windows = train_gpt's val loss at step 4 (near-initial weights: a weak test of q/k).
py_checks names "$out/lhf/model.safetensors"
py_checks loss "$out/lhf/model.safetensors" "$VAL_SHARD" 2 32 4 "${lval4:-nan}" "the step-4 export"
# A sharp variant (q/k scaled up: attention far from uniform, so the rotary convention moves the
# loss well beyond float32 rounding): imported, its val loss from train_gpt (-x 0) against the
# Hugging Face forward, which must also miss it with q/k left in fsdp.c's order; and its
# checkpoint exports back to the same tensors bitwise.
$PYTHON "$HF" sharpen "$out/lhf/model.safetensors" "$out/lsharp"
if $CK import "$out/lsharp/model.safetensors" "$out/lsharpimp" --world 1 > "$out/lsharp.log" 2>&1 &&
   ./train_gpt "${common[@]}" "${lmodel[@]}" -x 0 -v 1 --val-steps 2 --resume "$out/lsharpimp" -o "$out/lsharprun" \
        >> "$out/lsharp.log" 2>&1; then
    py_checks loss "$out/lsharp/model.safetensors" "$VAL_SHARD" 2 32 4 "$(first_val "$out/lsharprun")" "sharp variant" --bug
    mkdir -p "$out/lsharp2"
    if $CK export "$out/lsharpimp" --safetensors "$out/lsharp2/model.safetensors" > "$out/lsharp2.log" 2>&1; then
        py_checks same "$out/lsharp/model.safetensors" "$out/lsharp2/model.safetensors"
    else
        not_ok "export of the sharp import: $(why "$out/lsharp2.log")"
    fi
else
    not_ok "import + train_gpt -x 0 of the sharp variant: $(why "$out/lsharp.log")"
fi
# Valid Hugging Face variants: tied embeddings (Llama 3.2 1B/3B: no lm_head.weight,
# tie_word_embeddings true), and Llama 3.1's RoPE scaling in config.json.
mkdir -p "$out/lvar"
$PYTHON "$HF" variants "$out/lhf/model.safetensors" "$out/lvar"
if $CK import "$out/lvar/tied/model.safetensors" "$out/ltied" --world 2 > "$out/ltied.log" 2>&1 &&
   grep -q 'note: no lm_head.weight and tie_word_embeddings: true: the output head starts as a copy of model.embed_tokens.weight' "$out/ltied.log" &&
   mkdir -p "$out/ltied_out" && $CK export "$out/ltied" --safetensors "$out/ltied_out/model.safetensors" >> "$out/ltied.log" 2>&1; then
    py_checks same "$out/lvar/tied_ref/model.safetensors" "$out/ltied_out/model.safetensors"
else
    not_ok "import of a tied Llama (no lm_head.weight, tie_word_embeddings true): $(why "$out/ltied.log")"
fi
mkdir -p "$out/lscaled_out"
if $CK import "$out/lvar/scaled/model.safetensors" "$out/lscaled" --world 1 > "$out/lscaled.log" 2>&1 &&
   grep -qE '^rope +theta 500000, llama3 scaling: factor 32, low_freq_factor 1, high_freq_factor 4, original_max_pos 8192$' \
        <($CK info "$out/lscaled" 2>&1) &&
   $CK export "$out/lscaled" --safetensors "$out/lscaled_out/model.safetensors" >> "$out/lscaled.log" 2>&1 &&
   $PYTHON -c 'import json, sys; a, b = (json.load(open(p)) for p in sys.argv[1:]); sys.exit(a["rope_scaling"] != b["rope_scaling"])' \
        "$out/lvar/scaled/config.json" "$out/lscaled_out/config.json"; then
    ok "import of a Llama with rope_scaling llama3 (factor 32): info shows it, export writes it back to config.json"
else
    not_ok "Llama with rope_scaling: $(why "$out/lscaled.log") $($CK info "$out/lscaled" 2>&1 | grep '^rope')"
fi
# Llama 3.1's RoPE scaling with other parameters (factor 16, low 2, high 8, original 4096),
# transformers' default rms_norm_eps 1e-6 and 2^21 positions (more than --max-seq once took):
# imported, resumed with no model flags (its val loss = the Hugging Face forward's with that
# config), trained 2 steps, exported (config.json carries all of it) and re-imported byte-equal.
mkdir -p "$out/lcustom_exp" "$out/lcustom_exp2"
if $CK import "$out/lvar/custom/model.safetensors" "$out/lcustom" --world 2 > "$out/lcustom.log" 2>&1 &&
   grep -qE '^rope +theta 500000, llama3 scaling: factor 16, low_freq_factor 2, high_freq_factor 8, original_max_pos 4096$' \
        <($CK info "$out/lcustom" 2>&1) &&
   grep -q 'L=2 NH=4 KVH=2 C=64 F=96 maxT=2097152 V=50257 Vp=50304 eps=1e-06' <($CK info "$out/lcustom" 2>&1); then
    ok "import of a Llama with RoPE scaling 16/2/8/4096, rms_norm_eps 1e-6 and 2^21 positions: info shows them"
else
    not_ok "import of the custom Llama: $(why "$out/lcustom.log") $($CK info "$out/lcustom" 2>&1 | grep -E '^(rope|model)' | tr '\n' ' ')"
fi
if ./train_gpt "${common[@]}" "${lval[@]}" -x 2 --ckpt-every 2 --resume "$out/lcustom" -o "$out/lcustom_run" \
        > "$out/lcustom_run.log" 2>&1 &&
   grep -q '^model: Llama 3, 2 layers, 4 heads (2 kv heads), 64 channels, SwiGLU 96, RoPE theta 500000 scaled x16, norm eps 1e-06, max_seq 2097152' \
        "$out/lcustom_run.log" && grep -q '"step":2,"loss"' "$out/lcustom_run/metrics.jsonl"; then
    a=$(first_val "$out/lcustom_run")
    py_checks loss "$out/lvar/custom/model.safetensors" "$VAL_SHARD" 2 32 4 "${a:-nan}" "custom RoPE scaling and eps 1e-6"
    [ -n "$a" ] && [ "$a" != "$lval4" ] || not_ok "the custom Llama's val loss ${a:-none} is the default config's ($lval4): its config unused"
    if $CK export "$out/lcustom_run" --safetensors "$out/lcustom_exp/model.safetensors" > "$out/lcustom_exp.log" 2>&1 &&
       $PYTHON -c 'import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
keys = ("rope_scaling", "rms_norm_eps", "max_position_embeddings", "rope_theta")
sys.exit(any(a[k] != b[k] for k in keys))' "$out/lvar/custom/config.json" "$out/lcustom_exp/config.json" &&
       $CK import "$out/lcustom_exp/model.safetensors" "$out/lcustom_imp2" --world 1 >> "$out/lcustom_exp.log" 2>&1 &&
       $CK export "$out/lcustom_imp2" --safetensors "$out/lcustom_exp2/model.safetensors" >> "$out/lcustom_exp.log" 2>&1 &&
       cmp -s "$out/lcustom_exp/model.safetensors" "$out/lcustom_exp2/model.safetensors" &&
       cmp -s "$out/lcustom_exp/config.json" "$out/lcustom_exp2/config.json"; then
        ok "the trained custom Llama exports its RoPE scaling, rms_norm_eps and positions to config.json; re-import -> export byte-identical"
    else
        not_ok "custom Llama export round trip: $(why "$out/lcustom_exp.log") $(cmp "$out/lcustom_exp/config.json" "$out/lcustom_exp2/config.json" 2>&1)"
    fi
else
    not_ok "--resume of the custom Llama import without model flags: $(grep -m1 -E '^error|^model' "$out/lcustom_run.log" || why "$out/lcustom_run.log")"
fi
# The same custom Llama as Hugging Face's sharded form, 2 shards + index: imported into the single
# file's rank files, resumed with no model flags, trained the same 2 steps and exported to the
# single file's export, byte for byte (weights and config.json).
mkdir -p "$out/lcsh_exp"
if $PYTHON "$HF" shard "$out/lvar/custom/model.safetensors" "$out/lcsh" 2 > "$out/lcsh.log" 2>&1 &&
   $CK import "$out/lcsh/model.safetensors.index.json" "$out/lcshimp" --world 2 >> "$out/lcsh.log" 2>&1 &&
   grep -q 'safetensors in 2 shards (Hugging Face Llama), L=2 NH=4 KVH=2 C=64 F=96 maxT=2097152 V=50257 Vp=50304 eps=1e-06' "$out/lcsh.log" &&
   cmp -s "$out/lcustom/step_00000000/rank_00000.bin" "$out/lcshimp/step_00000000/rank_00000.bin" &&
   cmp -s "$out/lcustom/step_00000000/rank_00001.bin" "$out/lcshimp/step_00000000/rank_00001.bin" &&
   ./train_gpt "${common[@]}" "${lval[@]}" -x 2 --ckpt-every 2 --resume "$out/lcshimp" -o "$out/lcsh_run" >> "$out/lcsh.log" 2>&1 &&
   $CK export "$out/lcsh_run" --safetensors "$out/lcsh_exp/model.safetensors" >> "$out/lcsh.log" 2>&1 &&
   cmp -s "$out/lcustom_exp/model.safetensors" "$out/lcsh_exp/model.safetensors" &&
   cmp -s "$out/lcustom_exp/config.json" "$out/lcsh_exp/config.json"; then
    ok "the custom Llama in 2 shards + index: import = the single file's rank files; resume (no model flags), 2 steps, export = the single file's export, byte for byte"
else
    not_ok "the custom Llama in 2 shards: $(why "$out/lcsh.log") $(cmp "$out/lcustom_exp/model.safetensors" "$out/lcsh_exp/model.safetensors" 2>&1)"
fi
expect_error "import of a Llama safetensors with --heads disagreeing with config.json" \
    "--heads 2 disagrees with .*lhf/config.json's num_attention_heads 4" \
    $CK import "$out/lhf/model.safetensors" "$out/limp_x" --world 2 --heads 2
