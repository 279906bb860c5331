#!/usr/bin/env bash
# run_tests: cores 1.0, 168 s
# The bad-input cases under AddressSanitizer + UndefinedBehaviorSanitizer (`make asan`:
# build/asan/*_asan, host-only, the cpu device): a case that is handled with a message there
# but reads or writes out of bounds, or overflows, is caught here. Every sanitizer report
# aborts (abort_on_error), so expect_error sees a death by SIGABRT, never a pass.
#   1. dev/test/test_errors.sh with train_gpt_asan (flags, shards, model files, the run lock,
#      signals);
#   2. corrupt checkpoints: ckpt_asan verify and train_gpt_asan --resume on a checkpoint with a
#      flipped byte, a truncated or missing rank file, and manifests whose numbers are out of
#      range (file index 2^31, 2^32-1, -1; bytes beyond the chunk; lo/hi of 2^64; world 1e300;
#      state.step -5; windows_consumed -1 and 1e30; loss_scaler.good_steps 2^31-1; overlapping
#      chunks hiding a gap; `latest` naming ..; boxes of a --tp 2 checkpoint that overlap, leave a
#      gap, lie out of bounds, or hold 2^64 or negative numbers, and a good one read at --tp 1:
#      the box reader's intersections); a NaN in the parameters (checksums matching):
#      verify --finite and --resume refuse it; and NaN weights through the kernels (--init-from a
#      model file holding one: fast_expf's exponent arithmetic overflowed on a NaN, undefined);
#   3. model files and safetensors that are lies (ckpt_asan import, train_gpt_asan -e);
#   4. dev/test/test_tokenizer.sh with tokenize_text_asan;
#   5. dev/test/test_tp_layout.c (the tensor-parallel layout's index arithmetic) as test_tp_layout_asan.
# Builds build/asan/ first when needed (about a minute on 2 cores, once).
set -u
source dev/test/lib.sh
out=$TEST_TMP
A=${ASAN_BINS:-build/asan}   # overridable to test another sanitizer build
if ! make -s -j2 asan > "$out/make_asan.log" 2>&1; then
    not_ok "make asan: $(grep -m3 -E 'error|Error' "$out/make_asan.log" | tr '\n' ' ' | head -c 400)"
    exit 1
fi
# Leaks are not errors here (a failing CLI exits with what it allocated); MPI's own would
# drown everything else.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:print_summary=1:symbolize=1
export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1
sanitizer_report() { grep -lE "ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer|UndefinedBehaviorSanitizer" "$@" 2>/dev/null; }

# 1. test_errors.sh with the sanitizer build.
# In the background, in a folder of its own (one process at a time, as the checks below: the
# two cores share them); its lines are printed when it is done, before the sanitizer scan (or
# at any exit).
mkdir -p "$out/errors"
chmod 711 "$out"  # (its check run as another user must reach its folder through this one)
TRAIN_GPT=$A/train_gpt_asan TEST_TMP=$out/errors bash dev/test/test_errors.sh > "$out/errors.log" 2>&1 &
errors_pid=$!
errors_report() {
    [ -n "$errors_pid" ] || return 0
    wait $errors_pid
    sed -E 's/^(ok|not ok) - /\1 - asan: /' "$out/errors.log" | grep -E '^(ok|not ok) - '
    errors_pid=
}
trap errors_report EXIT

# 2. Corrupt checkpoints.
tiny=(--device cpu --layers 1 --channels 32 --heads 2 --max-seq 32 -b 2 -t 16 -v 0 --threads 1 -i "$TRAIN_SHARD")
if ! $A/train_gpt_asan "${tiny[@]}" -x 2 -o "$out/run" --ckpt-every 2 > "$out/run.log" 2>&1; then
    not_ok "asan: train_gpt_asan with --ckpt-every: $(tail -n 3 "$out/run.log" | tr '\n' ' ')"; exit 1
fi
good=$out/run/ckpt/step_00000002
if $A/ckpt_asan verify "$good" > "$out/verify.log" 2>&1 && grep -q '^ok' "$out/verify.log"; then ok "asan: ckpt verify of a good checkpoint"
else not_ok "asan: ckpt verify of a good checkpoint: $(tail -n 2 "$out/verify.log" | tr '\n' ' ')"; fi
# bad NAME: a copy of the good checkpoint to damage, as $out/bad/NAME (the step directory),
# with its own run directory (a `latest` naming it) for --resume auto.
bad() { rm -rf "$out/bad/$1"; mkdir -p "$out/bad/$1/ckpt"; cp -a "$good" "$out/bad/$1/ckpt/"; echo step_00000002 > "$out/bad/$1/ckpt/latest"; }
# manifest NAME PYTHON: edits $out/bad/NAME's manifest.json (m: the parsed JSON, chunks: its
# rows as dicts by field name; XXH64(bytes) at hand for rewriting checksums).
manifest() {
    local name=$1 code=$2
    $PYTHON - "$out/bad/$name/ckpt/step_00000002/manifest.json" "$code" <<'PY'
import ctypes, json, sys
path, code = sys.argv[1], sys.argv[2]
m = json.load(open(path))
fields = ["tensor", "kind", "lo", "hi", "file", "offset", "bytes", "codec", "xxh64"]
chunks = [dict(zip(fields, row)) for row in m["chunks"]]
_xx = ctypes.CDLL("libxxhash.so.0")
_xx.XXH64.restype = ctypes.c_uint64
_xx.XXH64.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
def XXH64(b): return "%016x" % _xx.XXH64(b, len(b), 0)
def find(tensor, kind): return next(c for c in chunks if c["tensor"] == tensor and c["kind"] == kind)
exec(code)
m["chunks"] = [[c[f] for f in fields] for c in chunks]
text = json.dumps(m)
for k, v in getattr(sys.modules[__name__], "raw", {}).items(): text = text.replace(k, v)
open(path, "w").write(text)
PY
}
# both NAME LABEL PATTERN: ckpt verify (--finite: every value read) and train_gpt --resume of
# the damaged checkpoint $out/bad/NAME must fail with a message matching PATTERN, exit non-zero
# and not die of a signal (or a sanitizer).
both() {
    local name=$1 label=$2 pattern=$3 dir=$out/bad/$1/ckpt/step_00000002
    expect_error "asan: ckpt verify --finite: $label" "$pattern" $A/ckpt_asan verify --finite "$dir"
    expect_error "asan: train_gpt --resume: $label" "$pattern" $A/train_gpt_asan "${tiny[@]}" -x 3 -o "$out/resume_$name" --resume "$dir"
}
bad flip; manifest flip '
c = find("wpe", "param")
with open(path.replace("manifest.json", "rank_00000.bin"), "r+b") as f:
    f.seek(c["offset"] + 100); x = f.read(1); f.seek(c["offset"] + 100); f.write(bytes([x[0] ^ 0x40]))'
both flip "flipped byte" "rank_00000\.bin.*(checksum|wpe)"
bad trunc; truncate -s 1000000 "$out/bad/trunc/ckpt/step_00000002/rank_00000.bin"
both trunc "truncated rank file" "rank_00000\.bin"
bad missing; rm "$out/bad/missing/ckpt/step_00000002/rank_00000.bin"
both missing "missing rank file" "rank_00000\.bin"
bad notjson; printf '{"format_version": 1, "chunks": [' > "$out/bad/notjson/ckpt/step_00000002/manifest.json"
both notjson "truncated manifest.json" "manifest\.json: .*(JSON|parse)"
bad file31; manifest file31 'find("wpe", "param")["file"] = 2**31'
both file31 "chunk file index 2^31" "manifest\\.json.*(file)|(file).*manifest\\.json"
bad file32; manifest file32 'find("wpe", "param")["file"] = 2**32 - 1'
both file32 "chunk file index 2^32-1" "manifest\\.json.*(file)|(file).*manifest\\.json"
bad fileneg; manifest fileneg 'find("wpe", "param")["file"] = -1'
both fileneg "chunk file index -1" "manifest\\.json.*(file)|(file).*manifest\\.json"
# The heap overflow of issue 16: a raw chunk's bytes larger than its range, checksum matching
# the bytes it now names (the next chunk's start included).
bad bytes
manifest bytes '
c = find("wpe", "param"); c["bytes"] = 8192
raw_file = open(path.replace("manifest.json", "rank_00000.bin"), "rb"); raw_file.seek(c["offset"])
c["xxh64"] = XXH64(raw_file.read(8192))'
both bytes "raw chunk with more bytes than its range" "manifest\\.json.*(bytes)|(bytes).*manifest\\.json"
bad lo64; manifest lo64 'c = find("wpe", "param"); c["lo"] = "LO"; c["hi"] = "HI"
raw = {"\"LO\"": "18446744073709551616", "\"HI\"": "18446744073709552640"}'
both lo64 "chunk range at 2^64" "manifest\\.json.*(lo|hi|range)|(lo|hi|range).*manifest\\.json"
bad world; manifest world 'm["world"] = "W"
raw = {"\"W\"": "1e300"}'
both world "world 1e300" "manifest\\.json.*(world)|(world).*manifest\\.json"
bad step; manifest step 'm["state"]["step"] = -5; m["step"] = -5'
both step "state.step -5" "manifest\\.json.*(step[^_]|step$)|(step[^_]|step$).*manifest\\.json"
bad wneg; manifest wneg 'm["state"]["loader"]["windows_consumed"] = -1'
both wneg "windows_consumed -1" "manifest\\.json.*(windows_consumed)|(windows_consumed).*manifest\\.json"
bad whuge; manifest whuge 'm["state"]["loader"]["windows_consumed"] = 1e30'
both whuge "windows_consumed 1e30" "manifest\\.json.*(windows_consumed)|(windows_consumed).*manifest\\.json"
bad good_steps; manifest good_steps 'm["state"]["loss_scaler"] = {"scale": 1024, "good_steps": 2**31 - 1}'
both good_steps "loss_scaler.good_steps 2^31-1" "manifest\\.json: state\\.loss_scaler\\.good_steps = 2147483647 is not"
# A NaN parameter, checksums matching (it passed verify, and --resume trained on it).
bad nan; $PYTHON dev/test/ckpt_tool_check.py poison "$out/bad/nan/ckpt/step_00000002" wpe param 5 nan
both nan "a NaN parameter" "step_00000002: tensor wpe \\(param\\): element 5 is nan \\(not finite\\)"
# NaN weights reaching the kernels: wpe's row 0 NaN in an llm.c model file (--init-from checks
# no values), so every attention score is NaN. The losses are NaN (fast_expf returns NaN: the
# cross-entropy no longer drops a NaN logit), each step is skipped, --max-bad-steps ends it.
$A/ckpt_asan export "$good" --llmc "$out/nan_model.bin" > "$out/nan_export.log" 2>&1
$PYTHON - "$out/nan_model.bin" <<'PY'
import struct, sys
with open(sys.argv[1], "r+b") as f:
    hdr = struct.unpack("<256i", f.read(1024))
    Vp, C = hdr[7], hdr[6]
    f.seek(1024 + 4 * Vp * C)                  # wpe follows wte
    f.write(struct.pack("<f", float("nan")) * C)
PY
expect_error "asan: NaN weights through the kernels (softmax, attention, GELU): no UB, the steps skipped" \
    "step [0-9]+: 2 step\\(s\\) in a row with a non-finite loss or gradient norm \\(--max-bad-steps 2\\)" \
    $A/train_gpt_asan --device cpu -b 2 -t 16 -x 3 -v 0 --threads 1 -i "$TRAIN_SHARD" --init-from "$out/nan_model.bin" \
    --max-bad-steps 2
# Two chunks over [0, 512) of wpe's parameters and none over [512, 1024): the element count
# adds up (1024), the coverage does not. Checksums match what each chunk names.
bad overlap
manifest overlap '
c = find("wpe", "param")
raw_file = open(path.replace("manifest.json", "rank_00000.bin"), "rb"); raw_file.seek(c["offset"]); data = raw_file.read(4096)
c["hi"] = 512; c["bytes"] = 2048; c["xxh64"] = XXH64(data[:2048])
d = dict(c); d["offset"] = c["offset"] + 2048; d["xxh64"] = XXH64(data[2048:])
chunks.insert(chunks.index(c) + 1, d)'
both overlap "overlapping chunks hiding a gap" "manifest\\.json.*(overlap|cover|gap)|(overlap|cover|gap).*manifest\\.json"
bad dotdot; echo "../../../../etc" > "$out/bad/dotdot/ckpt/latest"
# `latest` naming .. is not followed: it is said and ignored, and the newest step found wins.
log=$out/dotdot.log
if $A/train_gpt_asan "${tiny[@]}" -x 3 -o "$out/bad/dotdot" --resume auto > "$log" 2>&1 &&
   grep -q "latest names '../../../../etc', not a step_N directory.*ignored" "$log" && grep -q "resumed from .*/step_00000002 " "$log"; then
    ok "asan: --resume auto with latest naming ..: not followed (said, and the newest step_N resumed)"
else not_ok "asan: --resume auto with latest naming ..: $(tail -n 3 "$log" | tr '\n' ' ')"; fi

# Boxes: a --tp 2 checkpoint (./train_gpt over MPI writes it), read whole by ckpt_asan verify
# --finite and at --tp 1 by train_gpt_asan --resume (every box intersected with the ranges a
# rank asks for), then damaged boxes of its row-parallel h.0.mlp.c_proj.weight ([32, 128],
# TP rank 1's box at columns [64, 128)).
if run_np 2 ./train_gpt "${tiny[@]}" --tp 2 -x 2 -o "$out/runtp" --ckpt-every 2 > "$out/runtp.log" 2>&1; then
    goodtp=$out/runtp/ckpt/step_00000002
    if $A/ckpt_asan verify --finite "$goodtp" > "$out/verifytp.log" 2>&1 &&
       $A/train_gpt_asan "${tiny[@]}" -x 3 -o "$out/resumetp" --resume "$goodtp" > "$out/resumetp.log" 2>&1; then
        ok "asan: a --tp 2 checkpoint (boxes) verified, and resumed at --tp 1"
    else not_ok "asan: a --tp 2 checkpoint: $(tail -n 2 "$out/verifytp.log" "$out/resumetp.log" | tr '\n' ' ')"; fi
    box() {  # box NAME LABEL PATTERN CODE: CODE edits r, the box's chunk row (a dict); both readers refuse it
        local name=$1 label=$2 pattern=$3 code=$4
        rm -rf "$out/bad/$name"; mkdir -p "$out/bad/$name/ckpt"; cp -a "$goodtp" "$out/bad/$name/ckpt/"
        $PYTHON - "$out/bad/$name/ckpt/step_00000002/manifest.json" "$code" <<'PY'
import json, sys
path, code = sys.argv[1], sys.argv[2]
m = json.load(open(path)); F = m["chunk_fields"].split(",")
i = next(i for i, r in enumerate(m["chunks"]) if r[0] == "h.0.mlp.c_proj.weight" and r[1] == "param" and r[F.index("col0")] == 64)
r = dict(zip(F, m["chunks"][i]))
exec(code)
if r: m["chunks"][i] = [r[f] for f in F]
else: del m["chunks"][i]
open(path, "w").write(json.dumps(m))
PY
        both "$name" "$label" "$pattern"
    }
    box box_overlap "overlapping boxes" "chunks of h\.0\.mlp\.c_proj\.weight \(param\) overlap" \
        'r["col0"] = 32; r["lo"], r["hi"] = 32, 31 * 128 + 32 + 64'
    box box_gap "a box missing (a gap)" "elements of h\.0\.mlp\.c_proj\.weight \(param\) in row 0, columns \[64, 128\) are in no chunk" \
        'r.clear()'
    box box_out "a box out of bounds" "box \[0, 64\] \+ \[33, 64\] is out of bounds" 'r["rows"] = 33'
    box box_huge "a box of 2^64 columns" "cols = 1\.8446744073709552e\+19 is not a whole number" 'r["cols"] = 2**64'
    box box_neg "a box at row -1" "row0 = -1 is not a whole number" 'r["row0"] = -1'
else
    not_ok "asan: the --tp 2 fixture: $(tail -n 3 "$out/runtp.log" | tr '\n' ' ')"
fi

# 3. Model files and safetensors whose headers lie.
$PYTHON - "$out" <<'PY'
import json, struct, sys
d = sys.argv[1]
def llmc(name, L, NH=2, C=32, maxT=32, V=50257, Vp=50304, extra=4000):
    hdr = [0] * 256
    hdr[:8] = [20240326, 3, maxT, V, L, NH, C, Vp]
    with open(f"{d}/{name}", "wb") as f:
        f.write(struct.pack("<256i", *hdr)); f.write(b"\0" * extra)
llmc("model_L_int_max.bin", 2**31 - 1)
llmc("model_L_1e8.bin", 100000000)
llmc("model_C_0.bin", 1, C=0)
llmc("model_NH_0.bin", 1, NH=0)
llmc("model_Vp_small.bin", 1, Vp=100)
# safetensors: a 1-layer GPT-2 with C=8, V=16, maxT=4, all F32; overlapping data_offsets.
C, V, T = 8, 16, 4
shapes = {"wte.weight": [V, C], "wpe.weight": [T, C], "ln_f.weight": [C], "ln_f.bias": [C]}
for k, s in {"ln_1.weight": [C], "ln_1.bias": [C], "attn.c_attn.weight": [C, 3 * C], "attn.c_attn.bias": [3 * C],
             "attn.c_proj.weight": [C, C], "attn.c_proj.bias": [C], "ln_2.weight": [C], "ln_2.bias": [C],
             "mlp.c_fc.weight": [C, 4 * C], "mlp.c_fc.bias": [4 * C], "mlp.c_proj.weight": [4 * C, C], "mlp.c_proj.bias": [C]}.items():
    shapes["h.0." + k] = s
def st(name, overlap=False, n_head=None, head=None, config=None):
    # head: GPT2LMHeadModel's lm_head.weight, zeros as wte ("same") or ones ("diff"); config: a
    # config.json beside it (name is then DIR/model.safetensors)
    header, off, data = {}, 0, b""
    for k, s in dict(shapes, **({"lm_head.weight": [V, C]} if head else {})).items():
        n = 4
        for x in s: n *= x
        begin = 0 if overlap and k == "wpe.weight" else off
        header[k] = {"dtype": "F32", "shape": s, "data_offsets": [begin, begin + n]}
        data += struct.pack("<f", 1.0) * (n // 4) if k == "lm_head.weight" and head == "diff" else b"\0" * n
        off += n
    if n_head is not None: header["__metadata__"] = {"n_head": n_head}
    h = json.dumps(header).encode(); h += b" " * (-len(h) % 8)
    if config is not None:
        import os
        os.makedirs(os.path.dirname(f"{d}/{name}"), exist_ok=True)
        with open(os.path.join(d, os.path.dirname(name), "config.json"), "w") as f: json.dump(config, f)
    with open(f"{d}/{name}", "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h); f.write(data)
st("st_overlap.safetensors", overlap=True, n_head="2")
st("st_nhead0.safetensors", n_head="0")
st("st_ok.safetensors", n_head="2")
# GPT-2 config fields that change the math (model/gpt2.c): a head compared with wte, config.json refusals
st("st_head_diff.safetensors", n_head="2", head="diff")
st("cfg_act/model.safetensors", head="same", config={"n_head": 2, "activation_function": "relu"})
st("cfg_untied/model.safetensors", head="same", config={"n_head": 2, "tie_word_embeddings": False})
PY
for m in model_L_int_max model_L_1e8 model_C_0 model_NH_0 model_Vp_small; do
    expect_error "asan: ckpt import of $m.bin" "$m\.bin" $A/ckpt_asan import "$out/$m.bin" "$out/imp_$m" --world 2
    expect_error "asan: train_gpt --init-from $m.bin" "$m\.bin" \
        $A/train_gpt_asan --device cpu -b 2 -t 4 -x 1 -v 0 --threads 1 -i "$TRAIN_SHARD" --init-from "$out/$m.bin"
done
expect_error "asan: ckpt import of overlapping safetensors data_offsets" "st_overlap\.safetensors" \
    $A/ckpt_asan import "$out/st_overlap.safetensors" "$out/imp_overlap" --world 2
expect_error "asan: ckpt import of safetensors with n_head \"0\"" "st_nhead0\.safetensors.*n_head|n_head.*st_nhead0" \
    $A/ckpt_asan import "$out/st_nhead0.safetensors" "$out/imp_nhead0" --world 2
if $A/ckpt_asan import "$out/st_ok.safetensors" "$out/imp_ok" --world 2 > "$out/imp_ok.log" 2>&1; then
    ok "asan: ckpt import of a good safetensors file (the control)"
else not_ok "asan: ckpt import of a good safetensors file: $(tail -n 2 "$out/imp_ok.log" | tr '\n' ' ')"; fi
expect_error "asan: ckpt import of a GPT-2 whose lm_head.weight is not wte" "st_head_diff\.safetensors: lm_head\.weight differs" \
    $A/ckpt_asan import "$out/st_head_diff.safetensors" "$out/imp_head_diff" --world 2
expect_error "asan: ckpt import of a GPT-2 config.json with activation_function relu" "cfg_act/config\.json: activation_function" \
    $A/ckpt_asan import "$out/cfg_act/model.safetensors" "$out/imp_cfg_act" --world 2
if $A/ckpt_asan import "$out/cfg_untied/model.safetensors" "$out/imp_cfg_untied" --world 2 > "$out/imp_cfg_untied.log" 2>&1 &&
   grep -q "^note: .*tie_word_embeddings = false, but lm_head.weight equals wte.weight" "$out/imp_cfg_untied.log"; then
    ok "asan: ckpt import of a GPT-2 with tie_word_embeddings false and lm_head.weight = wte.weight (a note)"
else not_ok "asan: ckpt import of an untied GPT-2 whose head is wte: $(tail -n 2 "$out/imp_cfg_untied.log" | tr '\n' ' ')"; fi

# Profiles and calibration logs read whole (util/regular_file): a NUL byte, a value of 1e300,
# a line past any fixed buffer, a time of 301 digits; a symlink loop as model.safetensors.
printf 'like=h100\n\0tflops=1\n' >"$out/nul.prof"
printf 'like=h100\ntflops=1e300\n' >"$out/huge.prof"
{ printf 'like=h100\nname='; head -c 100000 /dev/zero | tr '\0' x; printf '\n'; } >"$out/long.prof"
{ echo "profile of step 2 (rank 0, cpu device; the stream's time between marks): 1.00 ms, 1.00 ms on the host clock"
  printf '  %-30s %-8s 1%0300d.000 ms 100.0%%      1 interval(s)\n' "attention" "forward" 0; } >"$out/huge.log"
expect_error "asan: --plan --sim-device with a NUL byte" "nul.prof: not a text file" $A/train_gpt_asan --plan --sim-device "$out/nul.prof"
expect_error "asan: --plan --sim-device tflops=1e300" "huge.prof:2: tflops: expected a number" $A/train_gpt_asan --plan --sim-device "$out/huge.prof"
expect_error "asan: --plan --calibrate-from a time of 301 digits" "huge.log:2: attention: expected a time" \
    $A/train_gpt_asan --plan --calibrate-from "$out/huge.log"
if $A/train_gpt_asan --plan -m d1 -b 1 -t 64 --sim-device "$out/long.prof" > "$out/long.log" 2>&1 && grep -q "^step " "$out/long.log"; then
    ok "asan: --plan with a 100000-byte profile line (the name kept short)"
else not_ok "asan: --plan with a 100000-byte profile line: $(tail -n 2 "$out/long.log" | tr '\n' ' ' | head -c 300)"; fi
# An older profile's single attention_eff (applied after the file is read), and a calibration
# log whose lines end right after the words the implementation is read from.
printf 'like=h100\nattention_eff_cublas_64=0.05\nattention_eff=0.3\n' >"$out/old_att.prof"
if $A/train_gpt_asan --plan -m d1 -b 1 -t 64 --sim-device "$out/old_att.prof" > "$out/old_att.log" 2>&1 &&
   grep -q "^note: .*old_att.prof:3: attention_eff=0.3" "$out/old_att.log" && grep -q "^attention: flash at head size 64, 0.3 of" "$out/old_att.log"; then
    ok "asan: --plan with an older profile's attention_eff (applied to flash, said once)"
else not_ok "asan: --plan with an older profile's attention_eff: $(tail -n 2 "$out/old_att.log" | tr '\n' ' ' | head -c 300)"; fi
{ echo "attention: "; echo "x | attention "; echo "GPU 0 | attention cublas"
  echo "profile of step 2 (rank 0, cuda device; the stream's time between marks): 1.00 ms, 1.00 ms on the host clock"
  printf '  %-30s %-8s 1.000 ms 100.0%%      1 interval(s)\n' "attention" "forward"; } >"$out/att_name.log"
if $A/train_gpt_asan --plan -m d1 -b 4 -t 1024 --sim-device h100 --calibrate-from "$out/att_name.log" > "$out/att_name.prof" 2>&1 &&
   grep -q "attention_eff_cublas_64 .* (was 0.032)" "$out/att_name.prof"; then
    ok "asan: --calibrate-from reads the implementation from a log line ending after 'attention' (cublas: $(grep '^attention_eff_cublas_64' "$out/att_name.prof"))"
else not_ok "asan: --calibrate-from attention name: $(tail -n 2 "$out/att_name.prof" | tr '\n' ' ' | head -c 300)"; fi
mkdir -p "$out/st_loop" && ln -sfn model.safetensors "$out/st_loop/model.safetensors"
expect_error "asan: ckpt import of a model.safetensors symlink loop" "st_loop/model.safetensors: cannot open: a symlink loop" \
    $A/ckpt_asan import "$out/st_loop" "$out/imp_loop" --world 2

# 4. The tokenizer's tests (its bad inputs among them) with tokenize_text_asan.
case $A in /*) tt=$A/tokenize_text_asan ;; *) tt=$PWD/$A/tokenize_text_asan ;; esac
TOKENIZE_TEXT=$tt bash dev/test/test_tokenizer.sh > "$out/tokenizer.log" 2>&1
sed -E 's/^(ok|not ok) - /\1 - asan: tokenize_text: /' "$out/tokenizer.log" | grep -E '^(ok|not ok) - '

# 5. The tensor-parallel layout's unit test.
$A/test_tp_layout_asan "$out" > "$out/tp_layout.log" 2>&1
sed -E 's/^(ok|not ok) - /\1 - asan: /' "$out/tp_layout.log" | grep -E '^(ok|not ok) - ' ||
    not_ok "asan: test_tp_layout_asan printed no result: $(tail -n 3 "$out/tp_layout.log" | tr '\n' ' ' | head -c 300)"

errors_report
# Anything a sanitizer said anywhere (a report in a run whose status was not checked).
reports=$(sanitizer_report "$out"/*.log "$out"/*/*.log)
if [ -z "$reports" ]; then ok "asan: no sanitizer report in any log"
else not_ok "asan: sanitizer reports in: $reports"; fi
