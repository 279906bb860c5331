#!/usr/bin/env bash
# run_tests: cores 0.6, 50 s
# Untrusted checkpoints, state and model files (issue 16): every number read from a manifest,
# its state, `latest`, or an llm.c model header is range-checked before it indexes, sizes or
# seeks anything. Each case below feeds one damaged input to the real readers (ckpt verify /
# export / info, train_gpt --resume and --init-from) and checks the one-line message naming
# the file and field, and a non-zero exit (expect_error: never a crash: a signal fails it).
# Then: `latest` that points outside the root, a stale `latest`, a `latest` that cannot be
# written, the abandoned timeline moved aside, and train_gpt --resume taking the same PATH
# forms as the ckpt tool; malformed Hugging Face Llama safetensors directories (ckpt import),
# single-file and sharded (model.safetensors.index.json and its shards).
# The writer's API (ckpt_writer_resumed_from, ckpt_writer_launcher, CKPT_SAVED_NO_LATEST,
# ckpt_resolve) is driven directly by build/test_untrusted_ckpt.
set -u
source dev/test/lib.sh
out=$TEST_TMP
CK=./ckpt
tiny=(--device cpu --layers 1 --channels 32 --heads 2 --max-seq 32 -b 2 -t 16 -v 0 --threads 1
      -i "$TRAIN_SHARD" -j "$VAL_SHARD")
T=(./train_gpt "${tiny[@]}")
why() { tail -n 3 "$@" 2>/dev/null | tr '\n' ' ' | head -c 400; }

# Fixtures: a train_gpt checkpoint after 2 steps (one rank), and the same weights imported
# for 2 ranks (so tensors are split between rank files).
if ! "${T[@]}" -x 2 -o "$out/run" --ckpt-every 2 > "$out/run.log" 2>&1; then
    not_ok "fixture: train_gpt -x 2 --ckpt-every 2: $(why "$out/run.log")"; exit 1
fi
good="$out/run/ckpt/step_00000002"
if ! $CK export "$good" --llmc "$out/m.bin" > "$out/fix.log" 2>&1 ||
   ! $CK import "$out/m.bin" "$out/imp2" --world 2 >> "$out/fix.log" 2>&1; then
    not_ok "fixture: export + import --world 2: $(why "$out/fix.log")"; exit 1
fi
good2="$out/imp2/step_00000000"
$CK verify "$good" > /dev/null 2>&1 && $CK verify "$good2" > /dev/null 2>&1 &&
    ok "fixtures verify (np=1 step 2, and a W=2 import)" || not_ok "fixtures do not verify"

# mutate NAME SRC CODE: $out/bad/NAME is a copy of step directory SRC whose manifest.json was
# changed by the Python code CODE, which sees m (the manifest), row(i) (chunk row i as a list,
# edited in place) and col(field) (a chunk field's index).
mutate() {
    local name=$1 src=$2 code=$3
    rm -rf "$out/bad/$name"; mkdir -p "$out/bad"; cp -a "$src" "$out/bad/$name"
    $PYTHON - "$out/bad/$name/manifest.json" "$code" <<'PY' || not_ok "test bug: mutate $name failed"
import json, sys
p, code = sys.argv[1], sys.argv[2]
m = json.load(open(p))
F = m["chunk_fields"].split(",")
col = F.index
row = lambda i: m["chunks"][i]
exec(code)
open(p, "w").write(json.dumps(m))
PY
}
# (TEST_TMP, not out: expect_error's own `local out` would shadow it here)
resume() { "${T[@]}" -x 3 -o "$TEST_TMP/resumed_$1" --resume "$TEST_TMP/bad/$1"; }
M='manifest\.json: '

# ---- the chunk `file` index, as a full integer (was truncated to int; 2^31 crashed, 2^32-1 read fd 0)
mutate file2p31 "$good" 'row(0)[col("file")] = 2**31'
expect_error "chunk file = 2^31 is refused (verify)" "${M}chunks\[0\]\.file = 2147483648 is not a rank file index in \[0, 1\)" \
    $CK verify "$out/bad/file2p31"
expect_error "chunk file = 2^31 is refused (train_gpt --resume)" "${M}chunks\[0\]\.file = 2147483648" resume file2p31
mutate file2p32 "$good" 'row(0)[col("file")] = 2**32 - 1'
expect_error "chunk file = 2^32-1 is refused, also with a rank file on stdin (was read from fd 0)" \
    "${M}chunks\[0\]\.file = 4294967295 is not a rank file index" \
    bash -c "$CK verify '$out/bad/file2p32' < '$out/bad/file2p32/rank_00000.bin'"
mutate file_world "$good2" 'row(0)[col("file")] = 2'
expect_error "chunk file = world is refused" "${M}chunks\[0\]\.file = 2 is not a rank file index in \[0, 2\) \(world 2\)" \
    $CK verify "$out/bad/file_world"

# ---- a raw chunk's bytes checked against (hi - lo) * 4 before any read (was a heap overflow)
mutate rawbytes "$good" 'r = row(0); r[col("bytes")] = (r[col("hi")] - r[col("lo")]) * 4 + 4096'
expect_error "raw chunk bytes > 4 x values is refused (export, before reading)" \
    "${M}chunks\[0\]\.bytes = [0-9]+, but a raw chunk of [0-9]+ values .* has [0-9]+" \
    $CK export "$out/bad/rawbytes" --llmc "$out/rawbytes.bin"
expect_error "raw chunk bytes > 4 x values is refused (train_gpt --resume)" "${M}chunks\[0\]\.bytes = " resume rawbytes
mutate zbytes "$good" 'r = row(0); r[col("codec")] = "zstd"; r[col("bytes")] = 10**15'
expect_error "zstd chunk bytes beyond any frame of its values is refused" \
    "${M}chunks\[0\]\.bytes = 1000000000000000, but a zstd frame of" $CK verify "$out/bad/zbytes"

# ---- world bounded (1e300 saturated and allocated ~8 GB)
mutate world1e300 "$good" 'm["world"] = 1e300'
expect_error "world = 1e300 is refused" "${M}world = 1e\+300 is not a whole number in \[1, 1048576\]" \
    $CK verify "$out/bad/world1e300"
expect_error "world = 1e300 is refused (train_gpt --resume)" "${M}world = 1" resume world1e300
mutate world0 "$good" 'm["world"] = 0'
expect_error "world = 0 is refused" "${M}world = 0 is not a whole number in \[1," $CK verify "$out/bad/world0"

# ---- every double that becomes an integer: finite, whole, within range (no cast of >= 2^64 or < 0)
mutate off2p64 "$good" 'row(0)[col("offset")] = float(2**64)'
expect_error "chunk offset = 2^64 is refused" "${M}chunks\[0\]\.offset = 1\.8446744073709552e\+19 is not a whole number" \
    $CK verify "$out/bad/off2p64"
mutate loneg "$good" 'row(0)[col("lo")] = -1'
expect_error "chunk lo = -1 is refused" "${M}chunks\[0\]\.lo = -1 is not a whole number" $CK verify "$out/bad/loneg"
mutate hifrac "$good" 'row(0)[col("hi")] = row(0)[col("hi")] - 0.5'
expect_error "chunk hi = N - 0.5 is refused" "${M}chunks\[0\]\.hi = [0-9]+\.5 is not a whole number" $CK verify "$out/bad/hifrac"
mutate version15 "$good" 'm["format_version"] = 1.5'
expect_error "format_version = 1.5 is refused (was read as 1)" "${M}format_version = 1\.5 is not a whole number" \
    $CK verify "$out/bad/version15"
mutate shape2p64 "$good" 'm["tensors"][0]["shape"][0] = float(2**64)'
expect_error "tensor shape 2^64 is refused" "${M}tensor [a-z_.0-9]+: shape\[0\] = 1\.8446744073709552e\+19" \
    $CK verify "$out/bad/shape2p64"
mutate shapebig "$good" 'm["tensors"][0]["shape"] = [2**40, 2**40]'
expect_error "tensor shape with more than 2^53 elements is refused" "${M}tensor [a-z_.0-9]+: shape \[1099511627776, 1099511627776\] has more than 2\^53" \
    $CK verify "$out/bad/shapebig"
mutate nosum "$good" 'row(0)[col("xxh64")] = ""'
expect_error "empty checksum is refused (was read as 0)" "${M}chunks\[0\]\.xxh64 = \"\" \(a string\) is not 1 to 16 hex digits" \
    $CK verify "$out/bad/nosum"
mutate dup "$good" 'm["tensors"].append(dict(m["tensors"][1]))'
expect_error "a tensor listed twice is refused" "${M}tensor [a-z_.0-9]+ is listed twice" $CK verify "$out/bad/dup"
mutate longname "$good" 'm["tensors"][0]["name"] = "x" * 60'
expect_error "a tensor name longer than 47 characters is refused" "${M}tensors\[0\]\.name is not a name of 1 to 47 characters" \
    $CK verify "$out/bad/longname"

# ---- coverage as exact, non-overlapping ranges. In the W=2 import wte's param chunks are
# [0, s) in rank_00000.bin and [s, n) in rank_00001.bin; moving the second down by one element
# keeps the sum of lengths (and its bytes and checksum) but overlaps [s-1, s) and leaves
# [n-1, n) uncovered: verify said ok, and the model loaded wrong.
shift_code='
wte = [i for i, r in enumerate(m["chunks"]) if r[col("tensor")] == "wte" and r[col("kind")] == "param"]
assert len(wte) == 2, wte
r = row(max(wte, key=lambda i: row(i)[col("lo")]))
r[col("lo")] -= 1; r[col("hi")] -= 1'
mutate overlap "$good2" "$shift_code"
expect_error "overlapping chunks with the right sum are refused (verify)" \
    "${M}chunks of wte \(param\) overlap: elements \[0, [0-9]+\) and \[[0-9]+, [0-9]+\)" $CK verify "$out/bad/overlap"
expect_error "overlapping chunks are refused (train_gpt --resume)" "${M}chunks of wte \(param\) overlap" resume overlap
mutate gap "$good2" 'm["chunks"] = [r for r in m["chunks"] if not (r[col("tensor")] == "wte" and r[col("kind")] == "m" and r[col("file")] == 1)]'
expect_error "a gap in a tensor's chunks is refused" "${M}elements \[[0-9]+, 1609728\) of wte \(m\) are in no chunk" \
    $CK verify "$out/bad/gap"

# ---- boxes (a checkpoint saved at --tp 2: format version 2, chunks of global boxes). The
# row-parallel h.0.mlp.c_proj.weight [32, 128] is two boxes per kind, columns [0, 64) and
# [64, 128), one per TP rank. Every number of a box is checked (whole, in range), every box
# lies inside its tensor with lo, hi its span, and the boxes of a tensor cover it exactly.
if run_np 2 "${T[@]}" --tp 2 -x 2 -o "$out/runtp" --ckpt-every 2 > "$out/runtp.log" 2>&1; then
    goodtp="$out/runtp/ckpt/step_00000002"
    # the box at columns [64, 128) of h.0.mlp.c_proj.weight's parameters (i: its row)
    pick='i = next(i for i, r in enumerate(m["chunks"]) if r[col("tensor")] == "h.0.mlp.c_proj.weight" and r[col("kind")] == "param" and r[col("col0")] == 64); r = row(i)
def span(r): return [r[col("row0")] * 128 + r[col("col0")], (r[col("row0")] + r[col("rows")] - 1) * 128 + r[col("col0")] + r[col("cols")]]
'
    C='h\.0\.mlp\.c_proj\.weight'
    mutate box_overlap "$goodtp" "$pick"'r[col("col0")] = 32; r[col("lo")], r[col("hi")] = span(r)'
    expect_error "boxes: overlapping boxes are refused (verify)" \
        "${M}chunks of $C \(param\) overlap: chunks\[[0-9]+\] and chunks\[[0-9]+\] both hold row 0, columns \[32, 64\)" \
        $CK verify "$out/bad/box_overlap"
    expect_error "boxes: overlapping boxes are refused (train_gpt --resume at --tp 2)" "${M}chunks of $C \(param\) overlap" \
        run_np 2 "${T[@]}" --tp 2 -x 3 -o "$out/resumed_box_overlap" --resume "$out/bad/box_overlap"
    mutate box_gap "$goodtp" "$pick"'del m["chunks"][i]'
    expect_error "boxes: a tensor not fully covered is refused" \
        "${M}elements of $C \(param\) in row 0, columns \[64, 128\) are in no chunk" $CK verify "$out/bad/box_gap"
    expect_error "boxes: a gap is refused (train_gpt --resume at --tp 1)" "${M}elements of $C \(param\) in row 0" resume box_gap
    mutate box_out "$goodtp" "$pick"'r[col("rows")] += 1'
    expect_error "boxes: a box out of bounds is refused" \
        "${M}chunks\[[0-9]+\]: box \[0, 64\] \+ \[33, 64\] is out of bounds of $C, which is \[32, 128\]" $CK verify "$out/bad/box_out"
    mutate box_neg "$goodtp" "$pick"'r[col("row0")] = -1'
    expect_error "boxes: a negative row0 is refused" "${M}chunks\[[0-9]+\]\.row0 = -1 is not a whole number in \[0, " \
        $CK verify "$out/bad/box_neg"
    mutate box_huge "$goodtp" "$pick"'r[col("cols")] = 2**64'
    expect_error "boxes: cols = 2^64 is refused" "${M}chunks\[[0-9]+\]\.cols = 1\.8446744073709552e\+19 is not a whole number in \[1, " \
        $CK verify "$out/bad/box_huge"
    mutate box_frac "$goodtp" "$pick"'r[col("col0")] = 64.5'
    expect_error "boxes: a fractional col0 is refused" "${M}chunks\[[0-9]+\]\.col0 = 64\.5 is not a whole number" \
        $CK verify "$out/bad/box_frac"
    mutate box_none "$goodtp" "$pick"'r[col("rows")] = 0'
    expect_error "boxes: a box of no rows is refused" "${M}chunks\[[0-9]+\]\.rows = 0 is not a whole number in \[1, " \
        $CK verify "$out/bad/box_none"
    mutate box_span "$goodtp" "$pick"'r[col("hi")] += 1'
    expect_error "boxes: lo, hi other than the box's span are refused" \
        "${M}chunks\[[0-9]+\]: elements \[64, 4097\) are not the span \[64, 4096\) of its box of $C" $CK verify "$out/bad/box_span"
    mutate box_v1 "$goodtp" 'm["format_version"] = 1'
    expect_error "boxes: a box row in a version 1 manifest is refused" "${M}chunks\[0\] is not a row of 9 fields" \
        $CK verify "$out/bad/box_v1"
    mutate box_short "$goodtp" 'row(0).pop()'
    expect_error "boxes: a row of 12 fields is refused" "${M}chunks\[0\] is not a row of 9 fields .* or 13" \
        $CK verify "$out/bad/box_short"
else
    not_ok "fixture: train_gpt --tp 2 --ckpt-every 2: $(why "$out/runtp.log")"
fi

# ---- non-regular files never block (a FIFO as manifest.json or as a rank file)
rm -rf "$out/bad/fifo_manifest"; cp -a "$good" "$out/bad/fifo_manifest"
rm "$out/bad/fifo_manifest/manifest.json"; mkfifo "$out/bad/fifo_manifest/manifest.json"
expect_error "a FIFO as manifest.json is refused at once" "fifo_manifest/manifest\.json: not a regular file" \
    timeout 20 $CK verify "$out/bad/fifo_manifest"
rm -rf "$out/bad/fifo_rank"; cp -a "$good" "$out/bad/fifo_rank"
rm "$out/bad/fifo_rank/rank_00000.bin"; mkfifo "$out/bad/fifo_rank/rank_00000.bin"
expect_error "a FIFO as a rank file is refused at once" "fifo_rank/rank_00000\.bin: not a regular file" \
    timeout 20 $CK verify "$out/bad/fifo_rank"

# ---- state: step, the data position and the loss scaler validated, naming the field. ckpt
# verify and train_gpt --resume run the same checks (model_checkpoint_read_state): `both` wants
# the same message from each.
both() {
    local name=$1 label=$2 pattern=$3
    expect_error "$label (ckpt verify)" "$pattern" $CK verify "$out/bad/$name"
    expect_error "$label (train_gpt --resume)" "$pattern" resume "$name"
}
for case in "step_neg|state.step = -5|m['state']['step'] = -5" \
            "step_huge|state.step = 1e\+30|m['state']['step'] = 1e30" \
            "step_frac|state.step = 2\.5|m['state']['step'] = 2.5" \
            "win_neg|state.loader.windows_consumed = -1|m['state']['loader']['windows_consumed'] = -1" \
            "win_huge|state.loader.windows_consumed = 1e\+30|m['state']['loader']['windows_consumed'] = 1e30" \
            "win_frac|state.loader.windows_consumed = 0\.5|m['state']['loader']['windows_consumed'] = 0.5" \
            "shuffle2|state.loader.shuffle = 2|m['state']['loader']['shuffle'] = 2" \
            "tokens_neg|state.tokens = -1|m['state']['tokens'] = -1" \
            "world_huge|state.world = 2097152|m['state']['world'] = 2**21"; do
    IFS='|' read -r name pattern code <<<"$case"
    mutate "$name" "$good" "$code"
    both "$name" "$name is refused" "${M}${pattern} is not a whole number in \[0, [0-9]+\]"
done
mutate step_other "$good" 'm["state"]["step"] = 3'
both step_other "state.step disagreeing with the manifest's step is refused" "${M}state.step = 3 disagrees with the manifest's step 2"
mutate seed_junk "$good" 'm["state"]["loader"]["seed"] = "12abc"'
both seed_junk "a loader seed that is not a decimal string is refused" "${M}state.loader.seed is not a decimal string"
mutate no_windows "$good" 'del m["state"]["loader"]["windows_consumed"]'
both no_windows "a missing data position is refused, naming it" "${M}state.loader.windows_consumed is missing"
# The fp16 loss scaler's state (--param-dtype fp16 runs write it; every resume checks it).
for case in "scaler_zero|m['state']['loss_scaler'] = {'scale': 0, 'good_steps': 0}" \
            "scaler_str|m['state']['loss_scaler'] = {'scale': 'x', 'good_steps': 0}" \
            "scaler_huge|m['state']['loss_scaler'] = {'scale': 2.0**25, 'good_steps': 0}" \
            "scaler_num|m['state']['loss_scaler'] = 5"; do
    IFS='|' read -r name code <<<"$case"
    mutate "$name" "$good" "$code"
    both "$name" "$name is refused" "${M}state.loss_scaler.scale is not a number in \[1, 2\^24\]"
done
# good_steps counts finite steps at the scale and is below the window that doubles it (it
# overflowed at 2^31-1, after which the scale never grew): bounded by the saved window, 0 for a
# fixed scale, and by the largest --loss-scale-window when no window is recorded.
G='state\.loss_scaler\.good_steps'
for case in "good_int_max|2147483647|{'scale': 1024, 'good_steps': 2**31 - 1}|$G = 2147483647 is not a whole number in \[0, 2147483646\] \(finite steps at the scale: below the largest --loss-scale-window\)" \
            "good_neg|-1|{'scale': 1024, 'good_steps': -1, 'window': 1000}|$G = -1 is not a whole number in \[0, 999\]" \
            "good_frac|2.5|{'scale': 1024, 'good_steps': 2.5, 'window': 1000}|$G = 2\.5 is not a whole number in \[0, 999\]" \
            "good_window|1000|{'scale': 1024, 'good_steps': 1000, 'window': 1000}|$G = 1000 is not a whole number in \[0, 999\] \(finite steps at the scale: below state\.loss_scaler\.window = 1000\)" \
            "good_fixed|1|{'scale': 1024, 'good_steps': 1, 'window': 0}|$G = 1 is not a whole number in \[0, 0\] \(finite steps at the scale: below state\.loss_scaler\.window = 0, a fixed scale\)" \
            "window_huge|0|{'scale': 1024, 'good_steps': 0, 'window': 2**31}|state\.loss_scaler\.window = 2147483648 is not a whole number in \[0, 2147483647\]"; do
    IFS='|' read -r name what scaler pattern <<<"$case"
    mutate "$name" "$good" "m['state']['loss_scaler'] = $scaler"
    both "$name" "loss_scaler.good_steps $what ($name) is refused" "${M}${pattern}"
done
# The control: a scaler at the edge of its window passes both (a bf16 resume ignores it).
mutate good_edge "$good" "m['state']['loss_scaler'] = {'scale': 1024, 'good_steps': 999, 'window': 1000}"
if $CK verify "$out/bad/good_edge" > "$out/edge.log" 2>&1 && resume good_edge >> "$out/edge.log" 2>&1; then
    ok "loss_scaler.good_steps = window - 1 passes ckpt verify and --resume"
else
    not_ok "loss_scaler.good_steps = window - 1: $(why "$out/edge.log")"
fi

# ---- non-finite weights and Adam moments (checksums recomputed: only the value is wrong). They
# passed verify and --resume trained with every update skipped, exit 0. ckpt verify --finite reads
# every value and names the first that is not finite; --resume checks what each rank read.
poison() { rm -rf "$out/bad/$1"; cp -a "$2" "$out/bad/$1"; $PYTHON dev/test/ckpt_tool_check.py poison "$out/bad/$1" "${@:3}" ||
           not_ok "test bug: poison $1 failed"; }
for case in "nan_param|h.0.attn.c_attn.weight|param|100|nan" "nan_m|wpe|m|7|nan" "inf_v|h.0.mlp.c_proj.bias|v|3|inf" \
            "ninf_param|ln_f.bias|param|31|-inf"; do
    IFS='|' read -r name tensor kind element value <<<"$case"
    poison "$name" "$good" "$tensor" "$kind" "$element" "$value"
    t=${tensor//./\\.}
    if $CK verify "$out/bad/$name" > "$out/$name.log" 2>&1; then ok "$name: plain verify passes (checksums match; values are --finite's)"
    else not_ok "$name: plain verify: $(why "$out/$name.log")"; fi
    expect_error "$name: verify --finite names the tensor, kind and element" \
        "verify failed: .*/bad/$name: tensor $t \($kind\): element $element is -?$value \(not finite\)" $CK verify --finite "$out/bad/$name"
    expect_error "$name: --resume refuses it, naming the tensor" \
        "error: --resume: .*/bad/$name: tensor $t \($kind\): element $element is -?$value \(not finite\)" resume "$name"
done
resume nan_param > "$out/nan_resume.log" 2>&1
if ls -d "$out/resumed_nan_param/ckpt/step_"* > /dev/null 2>&1 || grep -q '^step' "$out/nan_resume.log"; then
    not_ok "a refused resume trained or saved: $(ls "$out/resumed_nan_param/ckpt") $(grep -m2 '^step' "$out/nan_resume.log" | tr '\n' ' ')"
else ok "a refused resume trains and saves nothing"; fi
# Two ranks: the value is in rank 1's half of the root unit (wpe), so only rank 1 finds it; both
# exit 1 with its line, printed once (agreed: no MPI_Abort, no rank prefix).
poison nan_rank1 "$good" wpe param 1000 nan
run_np 2 "${T[@]}" -x 3 -o "$out/resumed_np2" --resume "$out/bad/nan_rank1" > "$out/np2.log" 2>&1; rc=$?
if [ $rc -eq 1 ] && [ "$(grep -c '^error:' "$out/np2.log")" -eq 1 ] &&
   grep -q '^error: --resume: .*/bad/nan_rank1: tensor wpe (param): element 1000 is nan (not finite)$' "$out/np2.log" &&
   ! grep -qE 'MPI_ABORT|\[rank' "$out/np2.log"; then
    ok "np=2: a NaN only rank 1 loads: every rank exits 1 with its message, printed once"
else
    not_ok "np=2 NaN on rank 1: exit $rc: $(head -c 400 "$out/np2.log" | tr '\n' '|')"
fi
for d in "$good" "$good2"; do
    if $CK verify --finite "$d" > "$out/finite.log" 2>&1 && grep -q "checksums match, state valid, every value finite$" "$out/finite.log"; then
        ok "a fresh checkpoint verifies clean with --finite ($(basename "$(dirname "$d")"))"
    else not_ok "verify --finite of a fresh checkpoint: $(why "$out/finite.log")"; fi
done

# ---- model config in the state, and llm.c model headers: bounded before any layout or allocation
mutate cfg_L1e8 "$good" 'm["state"]["config"]["num_layers"] = 10**8'
expect_error "state.config.num_layers = 1e8 is refused (export)" "${M}inconsistent model config \(num_layers is implausibly large" \
    $CK export "$out/bad/cfg_L1e8" --llmc "$out/x.bin"
expect_error "state.config.num_layers = 1e8 is refused (train_gpt --resume)" "${M}inconsistent model config \(num_layers" resume cfg_L1e8
mutate cfg_L2p31 "$good" 'm["state"]["config"]["num_layers"] = 2**31'
expect_error "state.config.num_layers = 2^31 is refused" "${M}state.config.num_layers = 2147483648 is not a whole number" \
    $CK export "$out/bad/cfg_L2p31" --llmc "$out/x.bin"
$PYTHON - "$out" <<'PY'
import struct, sys
d = sys.argv[1]
for name, L, C, NH in (("L2p31m1", 2**31 - 1, 32, 2), ("L1e8", 10**8, 32, 2), ("C2p30", 1, 2**30, 2), ("NH0", 1, 32, 0)):
    hdr = [0] * 256
    hdr[:8] = [20240326, 3, 32, 50257, L, NH, C, 50304]
    with open(f"{d}/model_{name}.bin", "wb") as f:
        f.write(struct.pack("<256i", *hdr)); f.write(b"\0" * 4096)
PY
init=(./train_gpt --device cpu -b 2 -t 16 -x 1 -v 0 --threads 1 -i "$TRAIN_SHARD")
expect_error "model file with L = 2^31-1 is refused (--init-from)" "model_L2p31m1\.bin: inconsistent config \(num_layers is implausibly large" \
    "${init[@]}" --init-from "$out/model_L2p31m1.bin"
expect_error "model file with L = 2^31-1 is refused (ckpt import)" "model_L2p31m1\.bin: inconsistent config \(num_layers is implausibly large" \
    $CK import "$out/model_L2p31m1.bin" "$out/imp_x" --world 2
expect_error "model file with L = 1e8 is refused (--init-from)" "model_L1e8\.bin: inconsistent config \(num_layers is implausibly large" \
    "${init[@]}" --init-from "$out/model_L1e8.bin"
expect_error "model file with L = 1e8 is refused (ckpt import)" "model_L1e8\.bin: inconsistent config \(num_layers" \
    $CK import "$out/model_L1e8.bin" "$out/imp_x" --world 2
expect_error "model file with C = 2^30 is refused" "model_C2p30\.bin: inconsistent config \(channels is implausibly large" \
    $CK import "$out/model_C2p30.bin" "$out/imp_x" --world 2
expect_error "model file with NH = 0 is refused" "model_NH0\.bin: inconsistent config \(a dimension is < 1" \
    $CK import "$out/model_NH0.bin" "$out/imp_x" --world 2
mkfifo "$out/model_fifo.bin"
expect_error "a FIFO as --init-from is refused at once" "model_fifo\.bin: not a regular file" \
    timeout 20 "${init[@]}" --init-from "$out/model_fifo.bin"

# ---- `latest` naming anything but a step_N directory of the root is ignored, with a warning
mkdir -p "$out/lroot" "$out/outside"
cp -a "$good" "$out/lroot/step_00000002"
cp -a "$good" "$out/outside/step_00000009"
printf '../outside/step_00000009\n' > "$out/lroot/latest"
$CK info "$out/lroot" > "$out/linfo.txt" 2> "$out/linfo.err"; rc=$?
if [ $rc -eq 0 ] && grep -qF "checkpoint       $out/lroot/step_00000002" "$out/linfo.txt" &&
   grep -qF "latest names '../outside/step_00000009', not a step_N directory of $out/lroot: ignored" "$out/linfo.err"; then
    ok "latest = '../outside/...' is not followed: info takes lroot/step_00000002, with a warning"
else
    not_ok "latest with '..': exit $rc, $(head -c 300 "$out/linfo.txt" "$out/linfo.err" | tr '\n' '|')"
fi
if "${T[@]}" -x 3 -o "$out/lrun" --ckpt-dir "$out/lroot" --resume auto > "$out/lrun.log" 2>&1 &&
   grep -qF "resumed from $out/lroot/step_00000002 " "$out/lrun.log" && grep -q "ignored" "$out/lrun.log"; then
    ok "--resume auto with latest = '../outside/...' resumes from the root's own step 2, with a warning"
else
    not_ok "--resume auto with latest = '../...': $(grep -m2 -E 'resumed|latest|rror' "$out/lrun.log" | tr '\n' ' ')"
fi

# ---- a stale `latest` (its write failed after step 4 was committed): the newer complete step
# wins; a higher step written *before* `latest` (a timeline `latest` was moved off by a run
# from before abandoned steps were moved aside) does not.
mkdir -p "$out/stale"
cp -a "$good" "$out/stale/step_00000002"
printf 'step_00000002\n' > "$out/stale/latest"; touch -d '-1 hour' "$out/stale/latest"
cp -a "$good" "$out/stale/step_00000004"; touch "$out/stale/step_00000004/manifest.json"
grep -qE '^checkpoint +.*/stale/step_00000004$' <($CK info "$out/stale" 2>&1) &&
    ok "a complete step newer than a stale latest is taken (step 4 over latest's step 2)" ||
    not_ok "stale latest: info takes $($CK info "$out/stale" 2>&1 | head -n 1)"
touch -d '-2 hours' "$out/stale/step_00000004/manifest.json"
grep -qE '^checkpoint +.*/stale/step_00000002$' <($CK info "$out/stale" 2>&1) &&
    ok "a higher step older than latest (another timeline) is not taken over latest's step 2" ||
    not_ok "older higher step: info takes $($CK info "$out/stale" 2>&1 | head -n 1)"

# ---- writing `latest` fails (latest.tmp is a directory): the step is still complete and verified
mkdir -p "$out/nolatest/latest.tmp"
$CK import "$out/m.bin" "$out/nolatest" --world 1 > "$out/nl.log" 2> "$out/nl.err"; rc=$?
if [ $rc -eq 0 ] && grep -q "warning: step 0 is complete and verified in $out/nolatest/step_00000000 .*latest was not updated (.*latest.tmp: cannot create: Is a directory)" "$out/nl.err" &&
   $CK verify "$out/nolatest" > /dev/null 2>&1; then
    ok "ckpt import with an unwritable latest: exit 0, 'step 0 is complete and verified', and the root verifies"
else
    not_ok "import with an unwritable latest: exit $rc: $(head -c 400 "$out/nl.err")"
fi
# train_gpt: step 2 saved normally, then latest.tmp blocks `latest`; step 4 is saved anyway,
# the run says so and goes on (exit 0), and --resume auto takes step 4.
job=(-x 6 -o "$out/nlrun" --ckpt-every 2 --resume auto)
if "${T[@]}" "${job[@]}" --stop-at-step 2 > "$out/nl_a.log" 2>&1; then
    mkdir "$out/nlrun/ckpt/latest.tmp"
    "${T[@]}" "${job[@]}" --stop-at-step 4 > "$out/nl_b.log" 2>&1; rc=$?
    msg=$(grep -m1 "complete and verified" "$out/nl_b.log")
    if [ $rc -eq 0 ] && [ -n "$msg" ] && ! grep -q "not saved" "$out/nl_b.log" && [ -f "$out/nlrun/ckpt/step_00000004/manifest.json" ]; then
        ok "train_gpt: latest not writable: step 4 saved, run continues (exit 0): $(head -c 120 <<<"$msg")"
    else
        not_ok "train_gpt with an unwritable latest: exit $rc, $(grep -m1 -E 'checkpoint step 4|rror' "$out/nl_b.log" | head -c 300)"
    fi
    if "${T[@]}" -x 6 -o "$out/nlrun" --resume auto --stop-at-step 5 > "$out/nl_c.log" 2>&1 &&
       grep -qF "resumed from $out/nlrun/ckpt/step_00000004 " "$out/nl_c.log"; then
        ok "--resume auto takes step 4 although latest still names step 2"
    else
        not_ok "--resume auto after a failed latest: $(grep -m1 -E 'resumed|rror' "$out/nl_c.log")"
    fi
else
    not_ok "train_gpt -x 6 --stop-at-step 2: $(why "$out/nl_a.log")"
fi

# ---- resuming from an older checkpoint: the abandoned newer steps are moved aside at the first
# commit (renamed, never deleted), so --resume auto cannot take them later. A timeline saved at
# steps 2, 3, 4; a run resumed from step 2 commits step 4: the old 3 and 4 are moved aside
# (3 only because train_gpt tells the writer which step it resumed from).
if "${T[@]}" -x 4 -o "$out/tl" --ckpt-every 1 > "$out/tl_a.log" 2>&1; then
    "${T[@]}" -x 4 -o "$out/tl" --ckpt-every 2 --resume "$out/tl/ckpt/step_00000002" > "$out/tl_b.log" 2>&1
    a3=$(cd "$out/tl/ckpt" && ls -d step_00000003.abandoned_* 2>/dev/null | head -n 1)
    a4=$(cd "$out/tl/ckpt" && ls -d step_00000004.abandoned_* 2>/dev/null | head -n 1)
    if [ -n "$a3" ] && [ -n "$a4" ] && [ -f "$out/tl/ckpt/$a3/manifest.json" ] && [ -f "$out/tl/ckpt/$a4/rank_00000.bin" ] &&
       [ ! -e "$out/tl/ckpt/step_00000003" ] && [ -f "$out/tl/ckpt/step_00000004/manifest.json" ] &&
       grep -q "moved .*step_00000003 aside to .*$a3 (newer than step 2, which this run resumed from" "$out/tl_b.log"; then
        ok "resumed from step 2: the old steps 3 and 4 are moved aside intact ($a3, $a4) when step 4 is committed"
    else
        not_ok "abandoned timeline: ckpt holds $(ls "$out/tl/ckpt" | tr '\n' ' '); $(grep -m2 -E 'moved|rror' "$out/tl_b.log" | tr '\n' ' ')"
    fi
    "${T[@]}" -x 5 -o "$out/tl" --resume auto > "$out/tl_c.log" 2>&1
    grep -qF "resumed from $out/tl/ckpt/step_00000004 " "$out/tl_c.log" && [ "$($CK info "$out/tl/ckpt/$a3" 2>/dev/null | awk '/^step/ {print $2}')" = 3 ] &&
        ok "--resume auto then takes the new step 4; the moved-aside step 3 still reads (ckpt info)" ||
        not_ok "--resume auto after moving aside: $(grep -m1 -E 'resumed|rror' "$out/tl_c.log")"
else
    not_ok "train_gpt -x 4 --ckpt-every 1: $(why "$out/tl_a.log")"
fi

# ---- a unit of more than 5 blocks would not hold their tensors (it crashed: SIGSEGV)
expect_error "--fsdp-unit-layers 6 with 6 layers is refused" "fsdp-unit-layers" \
    ./train_gpt --device cpu --layers 6 --channels 32 --heads 2 --max-seq 32 -b 2 -t 16 -x 1 -v 0 --threads 1 \
    -i "$TRAIN_SHARD" -j "$VAL_SHARD" --fsdp-unit-layers 6

# ---- train_gpt --resume PATH takes what the ckpt tool takes: a run directory or a checkpoint root
for form in "run directory|$out/run" "checkpoint root|$out/run/ckpt"; do
    IFS='|' read -r what path <<<"$form"
    if "${T[@]}" -x 3 -o "$out/form_${what// /_}" --resume "$path" > "$out/form.log" 2>&1 &&
       grep -qF "resumed from $good " "$out/form.log"; then
        ok "train_gpt --resume <$what> resumes from its newest step ($good)"
    else
        not_ok "train_gpt --resume <$what>: $(grep -m1 -E 'resumed|rror' "$out/form.log")"
    fi
done
expect_error "train_gpt --resume of an unfinished step_N.tmp is refused like ckpt's" \
    "step_00000008\.tmp: not a committed checkpoint" bash -c "mkdir -p '$out/run/ckpt/step_00000008.tmp' &&
    ${T[*]} -x 3 -o '$out/form_tmp' --resume '$out/run/ckpt/step_00000008.tmp'"

# ---- Hugging Face Llama safetensors (ckpt import): malformed save_pretrained directories made
# from a real export (dev/test/hf_llama_check.py variants) are refused with one line naming the
# file, before anything is allocated from them or written.
lt=(./train_gpt --device cpu --arch llama3 --layers 1 --channels 32 --heads 2 --kv-heads 1 --ffn-dim 48 --max-seq 32
    -b 2 -t 16 -v 0 --threads 1 -i "$TRAIN_SHARD")
mkdir -p "$out/llama_hf" "$out/llama_bad"
if "${lt[@]}" -x 1 -o "$out/llama_run" --ckpt-every 1 > "$out/llama_run.log" 2>&1 &&
   $CK export "$out/llama_run" --safetensors "$out/llama_hf/model.safetensors" > "$out/llama_fix.log" 2>&1 &&
   $PYTHON dev/test/hf_llama_check.py variants "$out/llama_hf/model.safetensors" "$out/llama_bad" >> "$out/llama_fix.log" 2>&1; then
    limport() { $CK import "$TEST_TMP/llama_bad/$1/model.safetensors" "$TEST_TMP/llama_imp" --world 2; }
    expect_error "Llama: no config.json beside the file" \
        "noconfig/model\.safetensors: a Hugging Face Llama file needs the config\.json beside it .*not found" limport noconfig
    expect_error "Llama: num_key_value_heads 3 not dividing 2 heads" \
        "kv3/config\.json: num_key_value_heads 3 does not divide num_attention_heads 2" limport kv3
    expect_error "Llama: num_key_value_heads above num_attention_heads" \
        "kv_more/config\.json: num_key_value_heads 4 does not divide num_attention_heads 2" limport kv_more
    expect_error "Llama: num_attention_heads 3 not dividing hidden_size 32" \
        "heads3/config\.json: num_attention_heads 3 does not divide hidden_size 32" limport heads3
    expect_error "Llama: a k_proj of the wrong shape" \
        "kshape/model\.safetensors: tensor model\.layers\.0\.self_attn\.k_proj\.weight has shape \[18, 32\], expected \[16, 32\]" \
        limport kshape
    expect_error "Llama: a missing tensor" "missing/model\.safetensors: tensor model\.layers\.0\.mlp\.up_proj\.weight is missing" \
        limport missing
    expect_error "Llama: no lm_head.weight and no tie_word_embeddings" \
        "nohead/model\.safetensors: tensor lm_head\.weight is missing \(and .*nohead/config\.json does not say tie_word_embeddings: true\)" \
        limport nohead
    expect_error "Llama: tie_word_embeddings without the embedding" \
        "tie_noembed/model\.safetensors: tensor model\.embed_tokens\.weight is missing \(with tie_word_embeddings true it is the output head too\)" \
        limport tie_noembed
    expect_error "Llama: config.json that is not JSON" "badjson/config\.json: not a JSON object" limport badjson
    expect_error "Llama: rope_theta NaN (Python's json writes NaN: not JSON)" "theta_nan/config\.json: not a JSON object" \
        limport theta_nan
    expect_error "Llama: rope_theta 1e999 (read as infinity)" "theta_inf/config\.json: rope_theta = inf is not a finite number" \
        limport theta_inf
    expect_error "Llama: no rope_scaling key" "noscaling/config\.json: rope_scaling is missing" limport noscaling
    expect_error "Llama: rope_scaling of another type" \
        "yarn/config\.json: rope_scaling\.rope_type \"yarn\" is not supported" limport yarn
    expect_error "Llama: rms_norm_eps 0 (outside [1e-30, 1])" "eps_zero/config\.json: rms_norm_eps = 0 is not in \[1e-30, 1\]" \
        limport eps_zero
    expect_error "Llama: hidden_size disagreeing with the tensors" \
        "hidden_mismatch/config\.json: hidden_size = 64, but the safetensors file has 32" limport hidden_mismatch
    expect_error "Llama: a tensor no Llama has" \
        "extra/model\.safetensors: unexpected tensor model\.layers\.0\.self_attn\.q_proj\.bias" limport extra
    expect_error "Llama: two tensors sharing bytes" \
        "overlap/model\.safetensors: tensors model\.layers\.0\.(input|post_attention)_layernorm\.weight and model\.layers\.0\.(input|post_attention)_layernorm\.weight overlap in the data" \
        limport overlap
    # The sharded form (model.safetensors.index.json + shards): an index that reaches outside its
    # directory, names a missing or non-safetensors file, disagrees with the shards' headers, or
    # is not an index; each refused with one line naming the file and the tensor.
    if $PYTHON dev/test/hf_llama_check.py shard "$out/llama_hf/model.safetensors" "$out/llama_sh" 3 >> "$out/llama_fix.log" 2>&1 &&
       $PYTHON dev/test/hf_llama_check.py shard_variants "$out/llama_sh" "$out/llama_shbad" > "$out/llama_shbad.json" 2>> "$out/llama_fix.log"; then
        simport() { $CK import "$TEST_TMP/llama_shbad/$1" "$TEST_TMP/llama_imp" --world 2; }
        sh1=model-00001-of-00003\.safetensors sh2=model-00002-of-00003\.safetensors
        t1=lm_head\.weight t2=model\.layers\.0\.mlp\.gate_proj\.weight   # (the first tensors of shards 1 and 2)
        grep -q '"first": "lm_head.weight", "second": "model.layers.0.mlp.gate_proj.weight"' "$out/llama_shbad.json" ||
            not_ok "Llama sharded fixture: not the expected tensors: $(cat "$out/llama_shbad.json")"
        expect_error "Llama sharded: a shard name with a path (../x.safetensors)" \
            "dotdot/model\.safetensors\.index\.json: weight_map: tensor $t1 is in \"\.\./$sh1\": not a \*\.safetensors file name in the index's directory" \
            simport dotdot
        expect_error "Llama sharded: a shard that is not a .safetensors file" \
            "notsafetensors/model\.safetensors\.index\.json: weight_map: tensor $t1 is in \"pytorch_model-00001-of-00002\.bin\": not a \*\.safetensors file name" \
            simport notsafetensors
        expect_error "Llama sharded: an index naming a missing shard file" \
            "noshard/model-00009-of-00009\.safetensors: cannot open: No such file or directory \(the weight_map of .*noshard/model\.safetensors\.index\.json puts tensor $t1 there\)" \
            simport noshard
        expect_error "Llama sharded: a tensor mapped to the wrong shard" \
            "wrongshard/model\.safetensors\.index\.json: tensor $t1 is in $sh1, but the weight_map puts it in $sh2" \
            simport wrongshard
        expect_error "Llama sharded: a tensor in two shards" \
            "twoshards/model\.safetensors\.index\.json: tensor $t1 is in two shards, $sh1 and $sh2" simport twoshards
        expect_error "Llama sharded: a shard holding a tensor the weight_map does not list" \
            "unlisted/$sh2: holds tensor $t2, which the weight_map of .*unlisted/model\.safetensors\.index\.json does not list" \
            simport unlisted
        expect_error "Llama sharded: a tensor in neither the weight_map nor a shard" \
            "missing/model\.safetensors\.index\.json: tensor $t2 is missing" simport missing
        expect_error "Llama sharded: an index that is not JSON" \
            "badjson/model\.safetensors\.index\.json: not a JSON object \(invalid JSON" simport badjson
        expect_error "Llama sharded: an index without weight_map" \
            "nomap/model\.safetensors\.index\.json: no weight_map object" simport nomap/model.safetensors.index.json
        expect_error "Llama sharded: no config.json beside the index" \
            "noconfig/model\.safetensors\.index\.json: a Hugging Face Llama file needs the config\.json beside it" simport noconfig
        expect_error "Llama sharded: a directory with neither an index nor model.safetensors" \
            "llama_run: a directory without model\.safetensors\.index\.json or model\.safetensors" \
            $CK import "$out/llama_run" "$out/llama_imp" --world 2
    else
        not_ok "Llama sharded fixture (hf_llama_check.py shard, shard_variants): $(why "$out/llama_fix.log")"
    fi
    if [ -n "$(ls -A "$out/llama_imp" 2>/dev/null)" ]; then not_ok "Llama: failed imports leave nothing: $(ls "$out/llama_imp")"
    else ok "Llama: the failed imports left nothing in OUT_ROOT"; fi
else
    not_ok "Llama fixture (train_gpt --arch llama3 -x 1, ckpt export --safetensors, variants): $(why "$out/llama_run.log" "$out/llama_fix.log")"
fi

# ---- the writer's API, driven directly (one rank)
if [ -x build/test_untrusted_ckpt ]; then
    build/test_untrusted_ckpt "$out/api" 2>&1
else
    not_ok "build/test_untrusted_ckpt is not built (make)"
fi
