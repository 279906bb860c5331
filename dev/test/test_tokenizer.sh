#!/usr/bin/env bash
# run_tests: cores 1.0, 11 s
# GPT-2 tokenizer and data preparation: C API unit tests, ids against tiktoken, shards,
# data/tinyshakespeare.sh against the shared ready-made shards, and the error messages.
# Run from the repository root; prints `ok - ...` / `not ok - ...: why` lines.
set -u
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-.venv/bin/python}
DATA=${FSDP_DATA:-../shared/data}
TMP=${TEST_TMP:-$(mktemp -d)}/tokenizer
rm -rf "$TMP" && mkdir -p "$TMP"
TOOL=${TOKENIZE_TEXT:-$PWD/tokenize_text}       # overridable to test another build
CTEST=${TOKENIZER_CTEST:-build/test_tokenizer}

ok() { echo "ok - $1"; }
notok() { echo "not ok - $1: $2"; }
check() { if [[ $2 == 0 ]]; then ok "$1"; else notok "$1" "$3"; fi; }

# ---- build (make test has built these already) -------------------------------------------
if [[ ! -x $TOOL ]] && ! make -s tokenize_text >"$TMP/make.log" 2>&1; then
    notok "build tokenize_text" "make tokenize_text failed: $(tail -n 3 "$TMP/make.log" | tr '\n' ' ')"
    exit 1
fi
if [[ ! -x $CTEST ]] && ! make -s build/test_tokenizer >"$TMP/make.log" 2>&1; then
    notok "build build/test_tokenizer" "make build/test_tokenizer failed: $(tail -n 3 "$TMP/make.log" | tr '\n' ' ')"
fi

# ---- the data: shared copy, else downloaded from the public sources -----------------------
if [[ ! -f $DATA/gpt2/encoder.json || ! -f $DATA/tinyshakespeare/input.txt ]]; then
    if FSDP_DATA="$TMP/none" FSDP_DOWNLOAD_DIR="$TMP/dl" TOKENIZE_TEXT=$TOOL data/tinyshakespeare.sh "$TMP/dl_out" >/dev/null 2>"$TMP/dl.log"; then
        DATA=$TMP/dl
    else
        echo "ok - tokenizer tests # skip no GPT-2 vocabulary: $DATA has none and the download failed ($(tail -n 1 "$TMP/dl.log"))"
        exit 0
    fi
fi
export FSDP_DATA=$DATA
ENC=$DATA/gpt2/encoder.json
VOC=$DATA/gpt2/vocab.bpe
TEXT=$DATA/tinyshakespeare/input.txt

# ---- C API -------------------------------------------------------------------------------
if [[ -x $CTEST ]]; then
    mkdir -p "$TMP/c"
    "$CTEST" "$DATA/gpt2" "$TMP/c" || notok "$CTEST" "exited with status $?"
fi

# ---- ids against tiktoken, decode, safe printing -----------------------------------------
if "$PYTHON" -c "import tiktoken" 2>/dev/null; then
    "$PYTHON" dev/test/test_tokenizer.py "$TOOL" "$TMP/py" || notok "dev/test/test_tokenizer.py" "exited with status $?"
else
    notok "tiktoken comparison" "$PYTHON cannot import tiktoken (run scripts/setup.sh)"
fi

# ---- data/tinyshakespeare.sh reproduces llm.c's shards byte for byte ----------------------
SHARED_TS=$DATA/tinyshakespeare
if [[ -f $SHARED_TS/tiny_shakespeare_val.bin ]]; then
    out=$TMP/ts
    if FSDP_DATA=$DATA TOKENIZE_TEXT=$TOOL data/tinyshakespeare.sh "$out" >"$TMP/ts.log" 2>&1; then
        for split in val train; do
            if cmp -s "$out/tiny_shakespeare_$split.bin" "$SHARED_TS/tiny_shakespeare_$split.bin"; then
                ok "data/tinyshakespeare.sh: tiny_shakespeare_$split.bin identical to the shared shard"
            else
                notok "data/tinyshakespeare.sh: tiny_shakespeare_$split.bin identical to the shared shard" \
                    "$(cmp "$out/tiny_shakespeare_$split.bin" "$SHARED_TS/tiny_shakespeare_$split.bin" 2>&1 | head -n 1)"
            fi
        done
        left=$(find "$out" -name '*.tmp.*' | wc -l)
        check "data/tinyshakespeare.sh leaves no temporary files" "$left" "$left left"
    else
        notok "data/tinyshakespeare.sh" "failed: $(tail -n 1 "$TMP/ts.log")"
    fi

    # the download path, with the public URLs replaced by local file:// copies
    dl=$TMP/download
    if command -v curl >/dev/null || command -v wget >/dev/null; then
        if FSDP_DATA=$TMP/absent FSDP_DOWNLOAD_DIR=$dl TOKENIZE_TEXT=$TOOL \
            TINYSHAKESPEARE_URL=file://$(realpath "$TEXT") GPT2_ENCODER_URL=file://$(realpath "$ENC") \
            GPT2_VOCAB_URL=file://$(realpath "$VOC") data/tinyshakespeare.sh "$dl/out" >"$TMP/dl1.log" 2>&1 &&
            cmp -s "$dl/out/tiny_shakespeare_train.bin" "$SHARED_TS/tiny_shakespeare_train.bin" &&
            cmp -s "$dl/out/tiny_shakespeare_val.bin" "$SHARED_TS/tiny_shakespeare_val.bin" &&
            [[ -f $dl/gpt2/encoder.json && -f $dl/gpt2/vocab.bpe && -f $dl/tinyshakespeare/input.txt ]]; then
            ok "data/tinyshakespeare.sh without shared data: downloads, verifies, same shards"
        else
            notok "data/tinyshakespeare.sh without shared data: downloads, verifies, same shards" "$(tail -n 1 "$TMP/dl1.log")"
        fi
        FSDP_DATA=$TMP/absent FSDP_DOWNLOAD_DIR=$TMP/download_bad TOKENIZE_TEXT=$TOOL \
            TINYSHAKESPEARE_URL=file://$(realpath "$VOC") data/tinyshakespeare.sh "$TMP/download_bad/out" >/dev/null 2>"$TMP/dl2.log"
        rc=$?
        if [[ $rc != 0 && $(wc -l <"$TMP/dl2.log") == 1 ]] && grep -q "sha256 mismatch" "$TMP/dl2.log" &&
            [[ ! -e $TMP/download_bad/tinyshakespeare/input.txt ]]; then
            ok "data/tinyshakespeare.sh refuses a download with the wrong sha256"
        else
            notok "data/tinyshakespeare.sh refuses a download with the wrong sha256" "rc $rc: $(head -c 300 "$TMP/dl2.log")"
        fi
    else
        echo "ok - data/tinyshakespeare.sh download path # skip neither curl nor wget is installed"
    fi
else  # only when the vocabulary had to be downloaded: llm.c's stream is checked by test_tokenizer.py
    echo "ok - data/tinyshakespeare.sh against ready-made shards # skip no shards in $SHARED_TS"
fi

# ---- shards: sizes, headers, contents, atomic writes --------------------------------------
pre=$TMP/shards/ts
mkdir -p "$TMP/shards"
if $TOOL -q --split-on '\n\n' --val-tokens 50000 --shard-tokens 100000 -o "$pre" "$TEXT" 2>"$TMP/shards.err" &&
    $TOOL --dump --format int32 --split-on '\n\n' "$TEXT" >"$TMP/shards/stream.i32"; then
    "$PYTHON" - "$TMP/shards" <<'EOF'
import glob, os, struct, sys
d = sys.argv[1]
names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(d, "ts_*.bin")))
want_names = ["ts_val_000000.bin", "ts_train_000001.bin", "ts_train_000002.bin", "ts_train_000003.bin"]
want_counts = [50000, 100000, 100000, 88028]
stream = open(os.path.join(d, "stream.i32"), "rb").read()
stream = list(struct.unpack(f"<{len(stream) // 4}i", stream))
order = ["ts_val_000000.bin", "ts_train_000001.bin", "ts_train_000002.bin", "ts_train_000003.bin"]
problems, tokens = [], []
if names != sorted(want_names):
    problems.append(f"files {names}")
else:
    for name, count in zip(order, want_counts):
        raw = open(os.path.join(d, name), "rb").read()
        header = struct.unpack("<256i", raw[:1024])
        if header[:3] != (20240520, 1, count) or any(header[3:]):
            problems.append(f"{name}: header {header[:4]}")
        if len(raw) != 1024 + 2 * count:
            problems.append(f"{name}: {len(raw)} bytes")
        tokens += struct.unpack(f"<{(len(raw) - 1024) // 2}H", raw[1024:])
    if tokens != stream:
        problems.append("shard tokens differ from the --dump stream")
print("ok - shards: val/train split, shard sizes, headers, tokens equal --dump" if not problems
      else "not ok - shards: val/train split, shard sizes, headers, tokens equal --dump: " + "; ".join(problems))
EOF
else
    notok "shards: val/train split, shard sizes, headers, tokens equal --dump" "$(head -n 1 "$TMP/shards.err")"
fi

# a write error (file size limit) leaves the completed val shard and no partial train shard
mkdir -p "$TMP/full"
(trap '' XFSZ; ulimit -f 200; exec $TOOL -q --val-tokens 32768 --shard-tokens 0 -o "$TMP/full/x" "$TEXT") >/dev/null 2>"$TMP/full.err"
rc=$?
if [[ $rc == 1 && $(wc -l <"$TMP/full.err") == 1 ]] && grep -q "x_train.bin.tmp.[0-9]*: write failed: File too large" "$TMP/full.err" &&
    [[ -f $TMP/full/x_val.bin && ! -e $TMP/full/x_train.bin && -z $(find "$TMP/full" -name '*.tmp.*') ]]; then
    ok "shards: a failed write removes its temporary file and leaves no partial shard"
else
    notok "shards: a failed write removes its temporary file and leaves no partial shard" "rc $rc: $(head -c 300 "$TMP/full.err") $(ls "$TMP/full")"
fi

$TOOL --dump "$TEXT" >/dev/full 2>"$TMP/devfull.err"
rc=$?
[[ $rc == 1 ]] && grep -q "stdout: write failed" "$TMP/devfull.err"
check "--dump to a full disk fails with a message" $? "rc $rc: $(head -c 200 "$TMP/devfull.err")"

# ---- malformed inputs and bad flags: a specific one-line error and exit status 1 ----------
# expect_error NAME EXPECTED_TEXT ARGS...: runs tokenize_text ARGS
expect_error() {
    local name=$1 want=$2
    shift 2
    "$TOOL" "$@" >"$TMP/err.out" 2>"$TMP/err.txt"
    local rc=$? lines
    lines=$(wc -l <"$TMP/err.txt")
    if [[ $rc == 1 && $lines == 1 ]] && grep -qF -- "$want" "$TMP/err.txt" && grep -q "^tokenize_text: " "$TMP/err.txt"; then
        ok "error: $name"
    else
        notok "error: $name" "rc $rc, $lines stderr lines: $(head -c 300 "$TMP/err.txt"), want '$want'"
    fi
}
B=$TMP/bad
mkdir -p "$B/dir"
head -c 20000 "$ENC" >"$B/truncated.json"
sed '0,/": 0,/s//" 0,/' "$ENC" >"$B/nocolon.json"
printf '{"a": 0, "a": 1}' >"$B/dupkey.json"
printf '["not", "an", "object"]' >"$B/array.json"
printf '{"a": "zero"}' >"$B/strid.json"
printf '{"a": 0}\n[]\n' >"$B/trailing.json"
printf '{"a\xff": 0}' >"$B/badutf8.json"
printf '{"a": -1}' >"$B/negid.json"
printf '{"a": 2147483648}' >"$B/bigid.json"
{ head -n 5 "$VOC"; printf 'this line has three\n'; tail -n +6 "$VOC"; } >"$B/threesym.bpe"
{ head -n 2 "$VOC"; printf 'qqqzzz\n'; } >"$B/onesym.bpe"
: >"$B/empty.bpe"
: >"$B/empty.json"
printf 'hello\n' >"$B/in.txt"
printf '1\n2\n99999\n' >"$B/badid.txt"
printf 'abc' >"$B/three.i32"
V=(--encoder "$ENC" --vocab "$VOC")

expect_error "missing encoder.json" "$B/missing/encoder.json: cannot open: No such file or directory" \
    --encoder "$B/missing/encoder.json" --vocab "$VOC" --dump "$B/in.txt"
expect_error "encoder.json is a directory (unreadable)" "$B/dir: cannot read: Is a directory" --encoder "$B/dir" --vocab "$VOC" --dump "$B/in.txt"
expect_error "truncated encoder.json" "$B/truncated.json: malformed JSON at line 1, column 20001: unexpected end of file" \
    --encoder "$B/truncated.json" --vocab "$VOC" --dump "$B/in.txt"
expect_error "encoder.json without ':'" "$B/nocolon.json: malformed JSON at line 1, column 6" \
    --encoder "$B/nocolon.json" --vocab "$VOC" --dump "$B/in.txt"
expect_error "encoder.json not an object" "$B/array.json: expected '{' (encoder.json is one object: token -> id)" \
    --encoder "$B/array.json" --vocab "$VOC" --dump "$B/in.txt"
expect_error "encoder.json with a string id" "$B/strid.json: token \"a\": id is not a non-negative integer" \
    --encoder "$B/strid.json" --vocab "$VOC" --dump "$B/in.txt"
expect_error "encoder.json with a duplicate token" "$B/dupkey.json: token \"a\" appears twice" \
    --encoder "$B/dupkey.json" --vocab "$VOC" --dump "$B/in.txt"
expect_error "empty encoder.json" "$B/empty.json: malformed JSON at line 1, column 1: empty file" \
    --encoder "$B/empty.json" --vocab "$VOC" --dump "$B/in.txt"
expect_error "encoder.json with data after the object" "$B/trailing.json: malformed JSON at line 2, column 1: unexpected data after the object" \
    --encoder "$B/trailing.json" --vocab "$VOC" --dump "$B/in.txt"
expect_error "encoder.json with invalid UTF-8 in a token" "$B/badutf8.json: token \"a\\xff\" is not valid UTF-8" \
    --encoder "$B/badutf8.json" --vocab "$VOC" --dump "$B/in.txt"
expect_error "encoder.json with a negative id" "$B/negid.json: token \"a\": id is not a non-negative integer" \
    --encoder "$B/negid.json" --vocab "$VOC" --dump "$B/in.txt"
expect_error "encoder.json with an id beyond int" "$B/bigid.json: token \"a\": id 2147483648 is too large (ids are 0..0, one per token)" \
    --encoder "$B/bigid.json" --vocab "$VOC" --dump "$B/in.txt"
expect_error "missing vocab.bpe" "$B/missing.bpe: cannot open: No such file or directory" --encoder "$ENC" --vocab "$B/missing.bpe" --dump "$B/in.txt"
expect_error "vocab.bpe line with three symbols" "$B/threesym.bpe: line 6: expected two symbols separated by one space" \
    --encoder "$ENC" --vocab "$B/threesym.bpe" --dump "$B/in.txt"
expect_error "vocab.bpe line with one symbol" "$B/onesym.bpe: line 3: expected two symbols separated by one space" \
    --encoder "$ENC" --vocab "$B/onesym.bpe" --dump "$B/in.txt"
expect_error "empty vocab.bpe" "$B/empty.bpe: no merges" --encoder "$ENC" --vocab "$B/empty.bpe" --dump "$B/in.txt"
(cd "$B" && FSDP_DATA=$B/nowhere expect_error "vocabulary not found" \
    "cannot find encoder.json (looked in $B/nowhere/gpt2, ../shared/data/gpt2 and data/gpt2); use --encoder" --dump in.txt)
expect_error "unknown flag" "unknown option '--frobnicate' (see --help)" "${V[@]}" --frobnicate --dump "$B/in.txt"
expect_error "unknown short flag" "unknown option '-z' (see --help)" "${V[@]}" -z --dump "$B/in.txt"
expect_error "flag without its value" "option '--shard-tokens' needs a value" "${V[@]}" -o "$B/x" "$B/in.txt" --shard-tokens
expect_error "non-numeric --shard-tokens" "--shard-tokens: invalid value 'lots' (expected an integer in 0..2147483647)" \
    "${V[@]}" --shard-tokens lots -o "$B/x" "$B/in.txt"
expect_error "negative --val-tokens" "--val-tokens: invalid value '-5'" "${V[@]}" --val-tokens -5 -o "$B/x" "$B/in.txt"
expect_error "bad --format" "--format: invalid value 'xml' (expected text or int32)" "${V[@]}" --dump --format xml "$B/in.txt"
expect_error "bad --repeat" "--repeat: invalid value '0'" "${V[@]}" --bench --repeat 0 "$B/in.txt"
expect_error "empty --split-on" "--split-on: empty separator" "${V[@]}" --split-on '' --dump "$B/in.txt"
expect_error "bad escape in --split-on" "--split-on: unknown escape '\\q'" "${V[@]}" --split-on '\q' --dump "$B/in.txt"
expect_error "--drop-separator without --split-on" "--drop-separator needs --split-on" "${V[@]}" --drop-separator --dump "$B/in.txt"
expect_error "--format when writing shards" "--format only applies to --dump and --decode" "${V[@]}" --format int32 -o "$B/x" "$B/in.txt"
expect_error "modes combined" "--dump, --decode and --bench cannot be combined" "${V[@]}" --dump --bench "$B/in.txt"
expect_error "no input files" "no input files (see --help)" "${V[@]}" --dump
expect_error "missing input file" "$B/nope.txt: cannot open: No such file or directory" "${V[@]}" --dump "$B/in.txt" "$B/nope.txt"
expect_error "input is a directory" "$B/dir: cannot read: Is a directory" "${V[@]}" --dump "$B/dir"
expect_error "shards without --out-prefix" "--out-prefix is required to write shards" "${V[@]}" "$B/in.txt"
expect_error "output directory missing" "$B/nodir/x_train_000000.bin.tmp." "${V[@]}" -o "$B/nodir/x" "$B/in.txt"
expect_error "--decode of an id outside the vocabulary" "$B/badid.txt: id 99999 (entry 2) is outside the vocabulary 0..50256" \
    "${V[@]}" --decode "$B/badid.txt"
expect_error "--decode of a truncated int32 file" "$B/three.i32: size 3 is not a multiple of 4 (int32 ids)" \
    "${V[@]}" --decode --format int32 "$B/three.i32"
[[ -z $(find "$B" -name '*.tmp.*') ]]
check "errors leave no temporary files" $? "$(find "$B" -name '*.tmp.*')"

# ---- --help --------------------------------------------------------------------------------
help=$($TOOL --help 2>&1)
rc=$?
missing=""
for opt in $(grep -o '{"[a-z-]*", [a-z_]*_argument' data/tokenize_text.c | cut -d'"' -f2); do
    grep -q -- "--$opt" <<<"$help" || missing="$missing --$opt"
done
[[ $rc == 0 && -z $missing ]]
check "--help exits 0 and documents every option" $? "rc $rc, undocumented:$missing"
