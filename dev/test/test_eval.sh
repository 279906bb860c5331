#!/usr/bin/env bash
# run_tests: cores 1.0, 77 s
# Multiple-choice evaluation (--eval-data, HellaSwag's scoring: train/eval.c) and generation
# (--generate: train/sampler.c) on the cpu device, against an independent reference
# (dev/test/eval_reference.py: float64 numpy forwards in Hugging Face's convention, reading the
# `ckpt export --safetensors` of the same checkpoint):
#   - a tiny GPT-2 and a tiny Llama (GQA) trained 40 steps with --eval-every 20: eval records at
#     steps 0, 20, 40 in metrics.jsonl, and the same figures in the TensorBoard events;
#   - --eval-only of the step-40 checkpoint at np=1, 2 and 3 and another -t (rows packed 16 to
#     a forward where training packed 8): the training run's figure, the --eval-log
#     files' predictions equal and their losses within 1e-5 (a row's place in a batch changes
#     with the world size, and the last bits of its losses with it);
#     against the reference: every example's predictions (acc_norm's and acc's) equal, every
#     loss within 1e-4, acc_norm equal; --init-from the run's --save-model file scores the same;
#   - --generate: the same text at np=1 and np=2, greedy (--top-k 1) and sampled (--top-k 40,
#     --seed); greedy equal to the reference's greedy decoding of the same prompt ids, on the
#     trained model and on an untrained one;
#   - refusals, one line and exit status 1: a truncated eval file, a token shard given as one,
#     a row longer than -t allows, an --eval-log whose directory cannot be made, --eval-every or
#     --eval-log without --eval-data, --eval-only with nothing to evaluate or with --ckpt-every,
#     --plan with --eval-only or --generate, --generate with --save-model or without the
#     tokenizer, a prompt that leaves no room for --sample-tokens, a prompt for a
#     model whose vocabulary is not the tokenizer's.
set -u
source dev/test/lib.sh
out=$TEST_TMP/eval
mkdir -p "$out"
REF=dev/test/eval_reference.py
EV=$out/ev.bin
$PYTHON $REF make-evalset "$VAL_SHARD" "$EV" --examples 24 --seed 3 >"$out/make.log" 2>&1 \
    || { not_ok "eval_reference.py make-evalset: $(tail -n 2 "$out/make.log" | tr '\n' ' ')"; exit 0; }

# The reference itself: its parser against its own writer, its scores against a differently
# written float64 computation (torch_gpt2.py's PyTorch model for GPT-2), its greedy tokens
# against the direct argmax, its refusals.
if msg=$($PYTHON $REF selftest 2>&1); then ok "eval_reference.py selftest: $(grep -c '^ok' <<<"$msg") checks"
else not_ok "eval_reference.py selftest: $(grep -v '^ok' <<<"$msg" | head -n 3 | tr '\n' ' ')"; fi

gpt2=(--layers 2 --channels 64 --heads 4 --max-seq 64)
llama=(--arch llama3 --layers 2 --channels 64 --heads 4 --kv-heads 2 --ffn-dim 96 --max-seq 64)
common=(./train_gpt --device cpu -b 8 -t 32 --threads 1)

# job NAME NP ARGS...: one train_gpt job, output in $out/NAME.log; non-zero on failure (said).
job() { local name=$1 np=$2; shift 2; run_logged "$out" 180 "$name" "$np" "${common[@]}" "$@"; }
# eval_line LOG: the evaluation's figures, without the timing.
eval_line() { grep -m1 '^eval acc_norm' "$1" | sed 's/, [0-9.]* s)$/)/; s/: [0-9]* forwards.*//'; }

# text NAME: the generated text in $out/NAME.log (between the sample's two --- lines).
text() { awk '/^sample \(step/ { s = 1; getline; next } s && /^---$/ { exit } s' "$out/$1.log"; }
# greedy_vs_reference WHAT NAME ST_DIR PROMPT: NAME's text is the prompt and the tokens the
# reference's greedy decoding picks after <|endoftext|> + the prompt (ids from tiktoken).
greedy_vs_reference() {
    local what=$1 name=$2 st=$3 prompt=$4 ids ref_ids ref_text
    ids=$($PYTHON -c "import sys; sys.path.insert(0, 'dev/test'); from gpt2_tokenizer_ref import load_tiktoken_gpt2
print(','.join(map(str, [50256] + load_tiktoken_gpt2().encode(sys.argv[1]))))" "$prompt")
    ref_ids=$($PYTHON $REF generate "$st" --prompt-ids "$ids" --tokens 16 2>&1)
    if ! grep -qE '^[0-9]+(,[0-9]+){15}$' <<<"$ref_ids"; then not_ok "$what: reference generate: $ref_ids"; return; fi
    ref_text=$($PYTHON -c "import sys; sys.path.insert(0, 'dev/test'); from gpt2_tokenizer_ref import load_tiktoken_gpt2
e = load_tiktoken_gpt2(); print(e.decode(e.encode(sys.argv[1]) + [int(x) for x in sys.argv[2].split(',')]))" "$prompt" "$ref_ids")
    [ "$(text $name)" = "$ref_text" ] \
        && ok "$what: --generate --top-k 1 equals the reference's greedy decoding of the safetensors export (ids $ref_ids)" \
        || not_ok "$what: greedy '$(text $name)' vs the reference's '$ref_text' ($ref_ids)"
}

for fam in gpt2 llama; do
    if [ $fam = gpt2 ]; then model=("${gpt2[@]}"); else model=("${llama[@]}"); fi
    run=$out/$fam
    save=(); [ $fam = gpt2 ] && save=(--save-model "$out/gpt2.bin")
    job ${fam}_train 1 "${model[@]}" -x 40 -l 1e-2 -u 5 -v 20 --val-steps 1 -i "$TRAIN_SHARD" -j "$VAL_SHARD" \
        --eval-data "$EV" --eval-every 20 --ckpt-every 40 -o "$run" "${save[@]}" || continue
    steps=$(grep -o '"step":[0-9]*,"eval_acc_norm"' "$run/metrics.jsonl" | grep -o '[0-9]*' | tr '\n' ' ')
    [ "$steps" = "0 20 40 " ] && ok "$fam: --eval-every 20: metrics.jsonl's eval records at steps $steps" \
        || not_ok "$fam: eval records at steps '$steps', expected 0 20 40"
    if $PYTHON -c "import tensorboard" 2>/dev/null; then
        if msg=$($PYTHON dev/test/tb_check.py "$run/tensorboard" "$run/metrics.jsonl" 2>"$out/tb.err"); then
            ok "$fam: TensorBoard events equal to metrics.jsonl, its eval records (eval/acc_norm, eval/acc) included: $msg"
        else not_ok "$fam: TensorBoard events: $msg $(tail -n 2 "$out/tb.err" | tr '\n' ' ')"; fi
    fi
    ckpt=$run/ckpt/step_00000040
    mkdir -p "$out/${fam}_st"
    ./ckpt export "$ckpt" --safetensors "$out/${fam}_st/model.safetensors" >"$out/${fam}_export.log" 2>&1 \
        || not_ok "$fam: ckpt export: $(tail -n 1 "$out/${fam}_export.log")"
    $PYTHON $REF score "$out/${fam}_st" "$EV" "$out/${fam}_ref.jsonl" >"$out/${fam}_ref.log" 2>&1 \
        || not_ok "$fam: reference score: $(tail -n 2 "$out/${fam}_ref.log" | tr '\n' ' ')"

    # --eval-only at np=1, 2, 3, at -t 64 (the run trained at 32: a run that reads no training
    # data takes any -t): the 30-token rows are packed 16 to a forward of 8 x 64 tokens (16 x 32;
    # 8 x 32 in training). One figure, the same predictions, the reference's.
    for np in 1 2 3; do
        job ${fam}_eval$np $np --resume "$ckpt" -t 64 --eval-only --eval-data "$EV" --eval-log "$out/${fam}_log$np.jsonl" || continue
    done
    # (A row's losses may differ in their last bits with its place in the batch, which the world
    # size changes: the predictions and the figure may not.)
    line1=$(eval_line "$out/${fam}_eval1.log")
    same=1
    for np in 2 3; do
        [ "$(eval_line "$out/${fam}_eval$np.log")" = "$line1" ] &&
            $PYTHON $REF compare "$out/${fam}_log1.jsonl" "$out/${fam}_log$np.jsonl" --tol 1e-5 >"$out/${fam}_np$np.cmp" 2>&1 || same=0
    done
    [ $same = 1 ] && [ -n "$line1" ] && ok "$fam: --eval-only at np=1, 2, 3: '$line1'; the --eval-logs' predictions equal, losses within 1e-5" \
        || not_ok "$fam: --eval-only differs across np: $(for np in 1 2 3; do eval_line "$out/${fam}_eval$np.log"; done | tr '\n' '|') $(grep -h '^not ok' "$out/${fam}"_np*.cmp | head -n 2 | tr '\n' ' ')"
    step40=$(grep '"step":40,"eval_acc_norm"' "$run/metrics.jsonl" | grep -o '"eval_acc_norm":[0-9.]*')
    grep -q "acc_norm $(grep -o '[0-9.]*$' <<<"$step40" | cut -c1-6)" <<<"$line1" \
        && ok "$fam: --eval-only of the step-40 checkpoint gives the training run's step-40 figure ($step40)" \
        || not_ok "$fam: --eval-only '$line1' vs the run's step 40 $step40"
    for np in 1 2 3; do
        if msg=$($PYTHON $REF compare "$out/${fam}_ref.jsonl" "$out/${fam}_log$np.jsonl" 2>&1); then
            ok "$fam np=$np: the reference's predictions, losses and acc_norm: $(grep -c '^ok' <<<"$msg") checks, $(grep 'acc_norm' <<<"$msg" | tail -n 1 | sed 's/^ok - //')"
        else not_ok "$fam np=$np against the reference: $(grep -v '^ok' <<<"$msg" | head -n 3 | tr '\n' ' ')"; fi
    done

    # --generate: np=1 and np=2 agree, greedy and sampled; greedy equals the reference's, on the
    # trained model (whose greedy choice after these prompts is mostly a newline) and on the
    # untrained one (one step at -l 0: the initial weights), whose choices follow the prompt.
    gen=(--resume "$ckpt" --generate "ROMEO: I" -g 16)
    job ${fam}_greedy1 1 "${gen[@]}" --top-k 1 && job ${fam}_greedy2 2 "${gen[@]}" --top-k 1 &&
    job ${fam}_sampled1 1 "${gen[@]}" --seed 11 && job ${fam}_sampled2 2 "${gen[@]}" --seed 11 && {
        [ "$(text ${fam}_greedy1)" = "$(text ${fam}_greedy2)" ] && [ "$(text ${fam}_sampled1)" = "$(text ${fam}_sampled2)" ] \
            && [ "$(text ${fam}_greedy1)" != "$(text ${fam}_sampled1)" ] \
            && ok "$fam: --generate: the same text at np=1 and np=2, greedy and sampled (--seed 11), and they differ" \
            || not_ok "$fam: --generate differs across np: greedy '$(text ${fam}_greedy1)' / '$(text ${fam}_greedy2)', sampled '$(text ${fam}_sampled1)' / '$(text ${fam}_sampled2)'"
        greedy_vs_reference "$fam trained" ${fam}_greedy1 "$out/${fam}_st" "ROMEO: I"
    }
    job ${fam}_fresh 1 "${model[@]}" -x 1 -l 0 -v 0 -i "$TRAIN_SHARD" --ckpt-every 1 -o "$out/${fam}_fresh" &&
    mkdir -p "$out/${fam}_fresh_st" && ./ckpt export "$out/${fam}_fresh/ckpt/step_00000001" --safetensors "$out/${fam}_fresh_st/model.safetensors" >/dev/null &&
    job ${fam}_fresh_greedy 1 --resume "$out/${fam}_fresh/ckpt/step_00000001" --generate "And the king" -g 16 --top-k 1 &&
    greedy_vs_reference "$fam untrained" ${fam}_fresh_greedy "$out/${fam}_fresh_st" "And the king"
done

# --init-from the GPT-2 run's --save-model file (its step-40 weights): the same figure.
if [ -f "$out/gpt2.bin" ] && job gpt2_init 2 --init-from "$out/gpt2.bin" -t 64 --eval-only --eval-data "$EV"; then
    [ "$(eval_line "$out/gpt2_init.log" | sed 's/(step [0-9]*; //')" = "$(eval_line "$out/gpt2_eval1.log" | sed 's/(step [0-9]*; //')" ] \
        && ok "--init-from the saved model file, --eval-only at np=2: the checkpoint's figure" \
        || not_ok "--init-from: '$(eval_line "$out/gpt2_init.log")' vs '$(eval_line "$out/gpt2_eval1.log")'"
fi

# Refusals: one line, exit status 1.
head -c 2000 "$EV" >"$out/truncated.bin"
refuse() {  # refuse NAME PATTERN ARGS...
    local name=$1 pattern=$2; shift 2
    expect_error "$name" "$pattern" "${common[@]}" "${gpt2[@]}" "$@"
}
refuse "a truncated eval file" "^error: --eval-data: .*truncated.bin" --eval-only --eval-data "$out/truncated.bin"
refuse "a token shard as the eval file" "^error: --eval-data: .*not an eval file" --eval-only --eval-data "$VAL_SHARD"
refuse "a row longer than -t allows" "^error: --eval-data: .*example" -t 16 --eval-only --eval-data "$EV"
refuse "--eval-log where no directory can be made" "^error: --eval-log $EV/log.jsonl: cannot create its directory" --eval-only \
    --eval-data "$EV" --eval-log "$EV/log.jsonl"
refuse "--eval-every without --eval-data" "^error: --eval-every applies with --eval-data" --eval-every 5
refuse "--eval-log without --eval-data" "^error: --eval-log applies with --eval-data" --eval-log "$out/x.jsonl"
refuse "--eval-only with nothing to evaluate" "^error: --eval-only: nothing to evaluate" --eval-only
refuse "--eval-only with --ckpt-every" "^error: --eval-only trains nothing: --ckpt-every" --eval-only --eval-data "$EV" --ckpt-every 5
refuse "--plan with --eval-only" "^error: --plan plans a training run: --eval-only" --plan --eval-only --eval-data "$EV"
refuse "--generate with no room for --sample-tokens" "^error: --generate: the prompt's [0-9]+ tokens .* --sample-tokens 30 do not fit the 32 positions" \
    --generate "ROMEO: I" -g 30
refuse "--generate without the tokenizer" "^error: --generate: needs the GPT-2 tokenizer's encoder.json and vocab.bpe" \
    --generate "hi" -g 4 --tokenizer-dir "$out/no_tokenizer"
refuse "--generate with --save-model" "^error: --generate trains nothing: --save-model does not apply" --generate "hi" --save-model "$out/x.bin"
refuse "--plan with --generate" "^error: --plan plans a training run: --generate" --plan --generate "hi"
refuse "--generate for another vocabulary" "^error: --generate: the model's vocabulary has 1000 tokens" --vocab 1000 --generate "hi" -g 4
for f in "$out"/*.log; do  # nothing crashed on the way
    grep -qE "Segmentation|Aborted|core dumped" "$f" && not_ok "$(basename "$f"): a crash: $(grep -m1 -E "Segmentation|Aborted|core dumped" "$f")"
done
exit 0
