#!/usr/bin/env bash
# run_tests: cores 1.1, 42 s
# Data preparation at scale (tokenize_text's JSONL, compressed and framed input, its threads,
# its resume state; data/prepare.py), offline, on a corpus made here (data_prep_check.py):
#   - JSONL, .jsonl.gz (two members) and .jsonl.zst (two frames) give the shards llm.c's
#     dev/data/fineweb.py writes with tiktoken over the same documents, byte for byte;
#   - --threads 1 and 4, and tiny batches (documents cut in many places), give byte-identical
#     shards; a long document cut into pieces encodes as tiktoken encodes it whole;
#   - prepare.py from Parquet files and from a Hugging Face dataset directory (load_dataset
#     streaming) gives those same shards; --val-split takes a split as the validation shards;
#   - interrupted runs resumed give the shards of an uninterrupted run: prepare.py killed with
#     SIGKILL (Parquet), tokenize_text killed with SIGKILL under prepare.py (JSONL read from a
#     slow pipe), Ctrl-C (SIGINT) during a Hugging Face stream (resumed from the iterator's
#     checkpoint); a finished run is not redone, other settings are refused;
#   - malformed JSONL lines, a missing or non-string field, bad gzip / zstd data, a framed
#     stream cut short and bad flags are refused in one line naming the file, line and field,
#     leaving no temporary or partial shard;
#   - prepare.py: a truncated .zst or corrupt .gz input, a missing pyarrow and an unwritable
#     -o each give one line (the pip command for the module) and no "run the same command
#     again" hint where a rerun cannot help;
#   - --progress: documents, tokens, MB/s, and on a terminal the share done and an ETA;
#   - prepare.py --hellaswag: a jsonl in HellaSwag's schema (unicode, quotes, newlines,
#     "<|endoftext|>" in the text, a label as a string, 1 to 16 endings) becomes byte for byte
#     the eval file llm.c's hellaswag.py writes with tiktoken, and our C reader reads it back;
#     .gz input; malformed lines (JSON, ctx, endings, label) refused naming file:line with no
#     output; the download where the network is unreachable says to pass the file.
# Run from the repository root; prints `ok - ...` / `not ok - ...: why` lines.
set -u
cd "$(dirname "$0")/../.."
source dev/test/lib.sh
PYTHON=${PYTHON:-.venv/bin/python}
DATA=${FSDP_DATA:-../shared/data}
export FSDP_DATA=$DATA
T=${TEST_TMP:-$(mktemp -d)}/data_prep
rm -rf "$T" && mkdir -p "$T"
TOOL=${TOKENIZE_TEXT:-$PWD/tokenize_text}
CHECK="$PYTHON dev/test/data_prep_check.py"
PREP="$PYTHON data/prepare.py --tokenize-text $TOOL"
# the Hugging Face path reads local files only: no hub, a cache of its own
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HOME=$T/hf_home HF_HUB_DISABLE_TELEMETRY=1

if [[ ! -x $TOOL ]] && ! make -s tokenize_text >"$T/make.log" 2>&1; then
    not_ok "build tokenize_text: $(tail -n 3 "$T/make.log" | tr '\n' ' ')"
    exit 1
fi
if [[ ! -f $DATA/gpt2/encoder.json || ! -f $DATA/tinyshakespeare/input.txt ]]; then
    ok "data preparation tests # skip no GPT-2 vocabulary or Tiny Shakespeare in $DATA"
    exit 0
fi
if ! "$PYTHON" -c "import tiktoken, pyarrow, datasets" 2>"$T/import.err"; then
    not_ok "$PYTHON has tiktoken, pyarrow and datasets (run scripts/setup.sh): $(tail -n 1 "$T/import.err")"
    exit 1
fi

# same_shards NAME DIR_A DIR_B: the same shard files, byte for byte (cmp)
same_shards() {
    local name=$1 a=$2 b=$3 f bad="" n=0
    for f in "$a"/*.bin; do
        n=$((n + 1))
        cmp -s "$f" "$b/$(basename "$f")" || bad="$bad $(basename "$f")"
    done
    local na nb
    na=$(ls "$a" | grep -c '\.bin$'); nb=$(ls "$b" | grep -c '\.bin$')
    if [[ $n -gt 0 && -z $bad && $na == "$nb" ]]; then ok "$name ($n shards identical)"
    else not_ok "$name: $na vs $nb shards, differing:${bad:- none} $(ls "$b" | head -n 3 | tr '\n' ' ')"; fi
}
# no_tmp DIR: no temporary shard or state file left
no_tmp() { [[ -z $(find "$1" -name '*.tmp.*') ]]; }
# shards_complete DIR: every shard's header count matches its size
shards_complete() {
    "$PYTHON" - "$1" <<'EOF'
import glob, os, struct, sys
for p in glob.glob(os.path.join(sys.argv[1], "*.bin")):
    magic, version, n = struct.unpack("<3i", open(p, "rb").read(12))
    if magic != 20240520 or os.path.getsize(p) != 1024 + 2 * n:
        sys.exit(f"{p}: incomplete")
EOF
}
# wait_shards STATE N PID: waits until STATE records at least N shards (false if PID ends first)
wait_shards() {
    local st=$1 want=$2 pid=$3 i
    for ((i = 0; i < 3000; i++)); do
        if [[ -f $st ]] && (( $(grep -o '"shards": [0-9]*' "$st" | grep -o '[0-9]*$') >= want )); then return 0; fi
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.01
    done
    return 1
}

C=$T/corpus
if ! $CHECK corpus "$C" >"$T/corpus.log" 2>&1; then
    not_ok "make the test corpus: $(tail -n 3 "$T/corpus.log" | tr '\n' ' ')"
    exit 1
fi
SH=50000   # tokens per shard: ~20 shards of the ~1M-token corpus

# ---- tokens against tiktoken, compressed input, threads ---------------------------------
mkdir -p "$T/jsonl"
if $TOOL -q --jsonl-field text --shard-tokens $SH --val-tokens $SH -o "$T/jsonl/c" "$C/corpus.jsonl" 2>"$T/jsonl.err"; then
    $CHECK expect "JSONL -> shards equal llm.c's fineweb.py with tiktoken over the same documents" "$T/jsonl/c" "$C/docs.json" $SH $SH
else
    not_ok "JSONL -> shards: $(head -n 2 "$T/jsonl.err")"
fi
for z in gz zst; do
    mkdir -p "$T/jsonl_$z"
    $TOOL -q --jsonl-field text --shard-tokens $SH --val-tokens $SH -o "$T/jsonl_$z/c" "$C/corpus.jsonl.$z" 2>"$T/$z.err" \
        || not_ok ".jsonl.$z: $(head -n 2 "$T/$z.err")"
    same_shards ".jsonl.$z (two $([[ $z == gz ]] && echo members || echo frames)) gives the shards of the plain JSONL" "$T/jsonl" "$T/jsonl_$z"
done
for run in "1 1048576" "4 1048576" "4 4096" "3 300"; do
    read -r th bb <<<"$run"
    d=$T/threads_${th}_$bb; mkdir -p "$d"
    $TOOL -q --threads "$th" --batch-bytes "$bb" --jsonl-field text --shard-tokens $SH --val-tokens $SH -o "$d/c" "$C/corpus.jsonl.zst" \
        2>"$d.err" || not_ok "--threads $th: $(head -n 2 "$d.err")"
    same_shards "--threads $th --batch-bytes $bb: byte-identical shards" "$T/jsonl" "$d"
done
# a document longer than a batch is cut where the cut cannot change the tokens
$TOOL --dump --format int32 --no-eot --threads 3 --batch-bytes 200 "$C/long.txt" >"$T/long.ids" 2>"$T/long.err"
$CHECK ids "a 1.2 MB document in 200-byte pieces on 3 threads: the ids tiktoken gives for it whole" "$C/long.txt" "$T/long.ids"

# ---- prepare.py: Parquet and Hugging Face streaming ---------------------------------------
if $PREP "$C/a.parquet" "$C/b.parquet" -o "$T/pq/c" --shard-tokens $SH --threads 1 >"$T/pq.log" 2>&1; then
    same_shards "prepare.py, two Parquet files: the shards of the JSONL" "$T/jsonl" "$T/pq"
else
    not_ok "prepare.py, Parquet: $(tail -n 2 "$T/pq.log" | tr '\n' ' ')"
fi
if $PREP --hf "$C/hf" -o "$T/hf/c" --shard-tokens $SH --threads 4 >"$T/hf.log" 2>&1; then
    same_shards "prepare.py --hf DIR (datasets streaming, a local dataset directory): the shards of the JSONL" "$T/jsonl" "$T/hf"
else
    not_ok "prepare.py --hf: $(tail -n 2 "$T/hf.log" | tr '\n' ' ')"
fi
$PREP "$C/corpus.jsonl.zst" -o "$T/pj/c" --shard-tokens $SH >"$T/pj.log" 2>&1 || not_ok "prepare.py, JSONL: $(tail -n 2 "$T/pj.log" | tr '\n' ' ')"
same_shards "prepare.py, .jsonl.zst (read by tokenize_text itself): the shards of the JSONL" "$T/jsonl" "$T/pj"

# ---- resuming -------------------------------------------------------------------------------
# Parquet, prepare.py and tokenize_text killed with SIGKILL half way
RS=20000
mkdir -p "$T/ref20"
$TOOL -q --jsonl-field text --shard-tokens $RS --val-tokens $RS -o "$T/ref20/c" "$C/corpus.jsonl"
setsid $CHECK slow 200 0.02 -- --tokenize-text "$TOOL" "$C/a.parquet" "$C/b.parquet" -o "$T/kill/c" --shard-tokens $RS \
    >"$T/kill1.log" 2>&1 &
pid=$!
if wait_shards "$T/kill/c.state.json" 8 $pid; then
    kill -KILL -- -$pid; wait $pid 2>/dev/null
    had=$(ls "$T/kill" | grep -c '\.bin$')
    if $PREP "$C/a.parquet" "$C/b.parquet" -o "$T/kill/c" --shard-tokens $RS >"$T/kill2.log" 2>&1 \
            && grep -q "resuming at document" "$T/kill2.log" && no_tmp "$T/kill"; then
        same_shards "prepare.py killed (SIGKILL) after $had shards, rerun: the shards of an uninterrupted run" "$T/ref20" "$T/kill"
    else
        not_ok "prepare.py rerun after SIGKILL: $(tail -n 3 "$T/kill2.log" | tr '\n' ' ') $(find "$T/kill" -name '*.tmp.*')"
    fi
else
    not_ok "prepare.py (slowed) was not interrupted half way: $(tail -n 3 "$T/kill1.log" | tr '\n' ' ')"
fi
# JSONL read by tokenize_text from a slow pipe, tokenize_text killed with SIGKILL
mkdir -p "$T/fifo"
mkfifo "$T/fifo/corpus.jsonl"
$CHECK trickle "$C/corpus.jsonl" "$T/fifo/corpus.jsonl" 16384 0.01 &
feeder=$!
$PREP "$T/fifo/corpus.jsonl" -o "$T/kill_tt/c" --shard-tokens $RS --threads 2 >"$T/kill_tt1.log" 2>&1 &
pid=$!
if wait_shards "$T/kill_tt/c.state.json" 10 $pid; then
    tpid=$(pgrep -P $pid -f tokenize_text | head -n 1)
    [[ -n $tpid ]] && kill -KILL "$tpid"
    wait $pid; rc=$?
    kill "$feeder" 2>/dev/null; wait "$feeder" 2>/dev/null
    had=$(ls "$T/kill_tt" | grep -c '\.bin$')
    $CHECK trickle "$C/corpus.jsonl" "$T/fifo/corpus.jsonl" 1048576 0 &
    feeder=$!
    if [[ $rc == 1 ]] && grep -q "run the same command again to continue" "$T/kill_tt1.log" \
            && $PREP "$T/fifo/corpus.jsonl" -o "$T/kill_tt/c" --shard-tokens $RS --threads 2 >"$T/kill_tt2.log" 2>&1 \
            && grep -q "resuming after" "$T/kill_tt2.log" && no_tmp "$T/kill_tt"; then
        same_shards "tokenize_text killed (SIGKILL) after $had shards under prepare.py, rerun skips the done documents: the shards of an uninterrupted run" \
            "$T/ref20" "$T/kill_tt"
    else
        not_ok "rerun after tokenize_text was killed: rc $rc, $(tail -n 2 "$T/kill_tt1.log" | tr '\n' ' ') / $(tail -n 2 "$T/kill_tt2.log" 2>/dev/null | tr '\n' ' ')"
    fi
    wait "$feeder" 2>/dev/null
else
    not_ok "prepare.py on a slow JSONL pipe was not interrupted half way: $(tail -n 3 "$T/kill_tt1.log" | tr '\n' ' ')"
    kill "$feeder" 2>/dev/null; wait "$feeder" 2>/dev/null
fi
# a Hugging Face stream with a validation split, Ctrl-C (SIGINT to the process group) in the train split
setsid $CHECK slow 100 0.02 -- --tokenize-text "$TOOL" --hf "$C/hf_val" --val-split validation -o "$T/int/c" --shard-tokens $RS \
    >"$T/int1.log" 2>&1 &
pid=$!
if wait_shards "$T/int/c.train.state.json" 6 $pid; then
    kill -INT -- -$pid; wait $pid; rc=$?
    if [[ $rc == 130 ]] && grep -q "interrupted; .* complete shards .* run the same command again to continue" "$T/int1.log" \
            && no_tmp "$T/int" \
            && $PREP --hf "$C/hf_val" --val-split validation -o "$T/int/c" --shard-tokens $RS >"$T/int2.log" 2>&1 \
            && grep -q "dataset iterator reopened at document" "$T/int2.log" && grep -q "val.state.json: complete" "$T/int2.log"; then
        $CHECK expect "Ctrl-C in a Hugging Face stream (--val-split validation), rerun from the iterator checkpoint: the shards of an uninterrupted run (val = the validation split)" \
            "$T/int/c" "$C/train_docs.json" $RS 0 "$C/val_docs.json"
    else
        not_ok "Ctrl-C and rerun of prepare.py --hf: rc $rc, $(tail -n 2 "$T/int1.log" | tr '\n' ' ') / $(tail -n 3 "$T/int2.log" 2>/dev/null | tr '\n' ' ')"
    fi
else
    not_ok "prepare.py --hf (slowed) was not interrupted half way: $(tail -n 3 "$T/int1.log" | tr '\n' ' ')"
fi
# text split into documents, read by tokenize_text from a slow pipe, killed, resumed with --resume
TS=$DATA/tinyshakespeare/input.txt
cat "$TS" "$TS" >"$T/ts2.txt"
mkdir -p "$T/txt_ref" "$T/txt"
$TOOL -q --split-on '\n\n' --shard-tokens $RS --val-tokens $RS -o "$T/txt_ref/ts" "$T/ts2.txt"
mkfifo "$T/txt/in.txt"
$CHECK trickle "$T/ts2.txt" "$T/txt/in.txt" 8192 0.01 &
feeder=$!
$TOOL -q --split-on '\n\n' --shard-tokens $RS --val-tokens $RS --state "$T/txt/st.json" -o "$T/txt/ts" "$T/txt/in.txt" 2>/dev/null &
pid=$!
if wait_shards "$T/txt/st.json" 4 $pid; then
    kill -KILL $pid; wait $pid 2>/dev/null
    kill "$feeder" 2>/dev/null; wait "$feeder" 2>/dev/null
    $CHECK trickle "$T/ts2.txt" "$T/txt/in.txt" 1048576 0 &
    feeder=$!
    out=$($TOOL --split-on '\n\n' --shard-tokens $RS --val-tokens $RS --state "$T/txt/st.json" --resume -o "$T/txt/ts" "$T/txt/in.txt" 2>&1)
    wait "$feeder" 2>/dev/null
    if grep -q "resuming after [0-9]* shards" <<<"$out" && no_tmp "$T/txt"; then
        same_shards "tokenize_text --split-on killed after 4 shards, --resume: the shards of an uninterrupted run" "$T/txt_ref" "$T/txt"
    else
        not_ok "tokenize_text --resume of a text run: $(tail -n 2 <<<"$out" | tr '\n' ' ')"
    fi
else
    not_ok "tokenize_text on a slow pipe was not interrupted half way"
    kill "$feeder" 2>/dev/null; wait "$feeder" 2>/dev/null
fi
$PREP "$T/ts2.txt" --split-on '\n\n' -o "$T/ptxt/ts" --shard-tokens $RS --val-tokens $RS >"$T/ptxt.log" 2>&1 \
    || not_ok "prepare.py, text: $(tail -n 2 "$T/ptxt.log" | tr '\n' ' ')"
same_shards "prepare.py, a text file with --split-on: the shards tokenize_text writes" "$T/txt_ref" "$T/ptxt"

# a finished run is not redone; other settings and foreign shards are refused
before=$(stat -c %Y "$T/pq"/*.bin | md5sum)
out=$($PREP "$C/a.parquet" "$C/b.parquet" -o "$T/pq/c" --shard-tokens $SH 2>&1); rc=$?
[[ $rc == 0 && $out == *"complete ("* && $(stat -c %Y "$T/pq"/*.bin | md5sum) == "$before" ]] \
    && ok "prepare.py rerun of a finished run: says complete, rewrites nothing" || not_ok "rerun of a finished run: rc $rc: $out"
expect_error "prepare.py with other settings into the same shards: refused naming them" "other settings \(shard_tokens" \
    $PREP "$C/a.parquet" "$C/b.parquet" -o "$T/pq/c" --shard-tokens 1000
expect_error "prepare.py into a directory of shards it did not write: refused" "exist but .*prepare.json does not" \
    $PREP "$C/a.parquet" -o "$T/jsonl/c"
expect_error "tokenize_text --resume with another --shard-tokens: refused naming it" \
    "c.state.json: the shards were made with --shard-tokens 20000, not 30000" \
    $TOOL -q --jsonl-field text --shard-tokens 30000 --val-tokens $RS --state "$T/kill/c.state.json" --resume -o "$T/kill/c" "$C/corpus.jsonl"

# ---- bad input: one line naming the file, line and field; nothing half-written ---------------
B=$T/bad; mkdir -p "$B/out"
# bad_line N TEXT: the corpus with line N replaced
bad_line() { awk -v n="$1" -v t="$2" 'NR == n { print t; next } { print }' "$C/corpus.jsonl" >"$B/bad.jsonl"; }
check_bad() {  # NAME PATTERN: tokenize_text on $B/bad.jsonl must fail with PATTERN and leave only complete shards
    local name=$1 pattern=$2 out rc
    rm -f "$B/out"/*
    out=$($TOOL -q --jsonl-field text --shard-tokens 2000 -o "$B/out/c" "$B/bad.jsonl" 2>&1); rc=$?
    if [[ $rc == 2 && $(wc -l <<<"$out") == 1 ]] && grep -qE -- "$pattern" <<<"$out" && no_tmp "$B/out" && shards_complete "$B/out"; then
        ok "$name ($out)"
    else
        not_ok "$name: rc $rc, $(head -c 300 <<<"$out"), want /$pattern/; left: $(ls "$B/out" | tail -n 2 | tr '\n' ' ')"
    fi
}
bad_line 4000 '{"id": 1, "text": "unterminated}'
check_bad "a malformed JSONL line (after complete shards) is refused naming it" "^tokenize_text: .*/bad.jsonl: line 4000: malformed JSON: unterminated string"
bad_line 4001 '{"id": 1, "text": "a" "b"}'
check_bad "a malformed JSONL line: the column" "bad.jsonl: line 4001, column 23: malformed JSON: expected ',' or '\}' after a member"
bad_line 12 '{"id": 12, "body": "no text here"}'
check_bad "a JSONL line without the field is refused naming the line and field" 'bad.jsonl: line 12: no "text" field'
bad_line 13 '{"text": ["a", "list"]}'
check_bad "a field that is not a string is refused naming it" 'bad.jsonl: line 13: field "text" is an array, not a string'
bad_line 14 '["not", "an", "object"]'
check_bad "a line that is not an object" "bad.jsonl: line 14, column 1: malformed JSON: expected '\{'"
head -c 200000 "$C/corpus.jsonl.zst" >"$B/cut.jsonl.zst"
expect_error "a truncated .zst is refused" "cut.jsonl.zst: zstd data ends early" $TOOL -q --jsonl-field text -o "$B/out/z" "$B/cut.jsonl.zst"
cp "$C/corpus.jsonl.gz" "$B/corrupt.jsonl.gz"
printf '\x00\x00\x00\x00' | dd of="$B/corrupt.jsonl.gz" bs=1 seek=30000 conv=notrunc 2>/dev/null
expect_error "corrupt gzip data is refused naming the file and offset" "corrupt.jsonl.gz: bad gzip data near byte [0-9]+" \
    $TOOL -q --jsonl-field text -o "$B/out/g" "$B/corrupt.jsonl.gz"
printf 'plain text' >"$B/fake.gz"
expect_error "a .gz file that is not gzip" "fake.gz: not gzip data" $TOOL --dump "$B/fake.gz"
# a framed stream that ends without its end record (its producer died): the complete shards stay, the last is not written
$CHECK frames "$C/docs.json" "$B/cut.framed" noend
rm -f "$B/out"/*
out=$($TOOL -q --framed --threads 1 --batch-bytes 4096 --shard-tokens 300000 -o "$B/out/f" - <"$B/cut.framed" 2>&1); rc=$?
n=$(ls "$B/out" | grep -c '\.bin$')
full=$(( $(cat "$T/jsonl"/*.bin | wc -c) / 2 / 300000 ))  # complete 300000-token shards in the corpus (headers are < 1 token each)
[[ $rc == 1 && $out == *"-: the stream ends without its end record after "*" documents (did its producer stop early?)" ]] \
    && [[ $n == "$full" ]] && no_tmp "$B/out" && shards_complete "$B/out" \
    && ok "a framed stream cut short: refused, the $full complete shards kept, no partial last shard" \
    || not_ok "framed stream cut short: rc $rc, $n shards (want $full), $out"
expect_error "--threads 0 is refused" "--threads: invalid value '0'" $TOOL --threads 0 --dump "$C/corpus.jsonl"
expect_error "--jsonl-field with --framed is refused" "--jsonl-field and --framed cannot be combined" $TOOL --jsonl-field text --framed --dump -
expect_error "--resume without --state is refused" "--resume needs --state FILE" $TOOL --resume -o "$B/out/x" "$C/corpus.jsonl"
expect_error "--state in a missing directory is refused before any shard" "--state $B/nodir/s.json: no directory $B/nodir" \
    $TOOL --state "$B/nodir/s.json" -o "$B/out/x" "$C/corpus.jsonl"
"$PYTHON" -c "
import pyarrow as pa, pyarrow.parquet as pq
pq.write_table(pa.table({'text': ['a', None, 'c']}), '$B/null.parquet')
pq.write_table(pa.table({'body': ['a']}), '$B/nocol.parquet')"
expect_error "prepare.py: a Parquet file without the column names it and the columns" "nocol.parquet: no column 'text' \(columns: body\)" \
    $PREP "$B/nocol.parquet" -o "$B/p1/c"
expect_error "prepare.py: a null document is refused" "null.parquet: column 'text': row 1 of a batch is null" $PREP "$B/null.parquet" -o "$B/p2/c"
[[ -z $(find "$B/p2" -name '*.bin*') ]] && ok "prepare.py: after a refused document no shard or temporary file is left" \
    || not_ok "prepare.py left $(ls "$B/p2")"
expect_error "prepare.py: an unknown file type" "x.csv: unknown file type '.csv'" bash -c "touch '$B/x.csv'; $PREP '$B/x.csv' -o '$B/p3/c'"
expect_error "prepare.py: mixed file kinds" "the inputs mix jsonl and parquet files" $PREP "$C/a.parquet" "$C/corpus.jsonl" -o "$B/p4/c"
expect_error "prepare.py: a missing file" "nope.parquet: no such file" $PREP "$B/nope.parquet" -o "$B/p5/c"
expect_error "prepare.py: neither --hf nor files" "give either --hf DATASET" $PREP -o "$B/p6/c"
# --preset fineweb10B as the run scripts print it, here without the Hub: one line, nothing written
out=$($PREP --preset fineweb10B --out-dir "$B/fw" 2>&1); rc=$?
[[ $rc == 1 && $(grep -c . <<<"$out") == 1 && $out == *"HuggingFaceFW/fineweb (sample-10BT), split train: cannot open the dataset: "* && ! -e $B/fw ]] \
    && ok "prepare.py --preset fineweb10B without network: one line naming the dataset, nothing written" \
    || not_ok "--preset fineweb10B offline: rc $rc: $(head -c 300 <<<"$out")"

# prepare.py: bad input, a missing optional module, an unwritable -o. One line on stderr and
# status 1, never a traceback; no resume hint where a rerun would fail the same way (bad input:
# tokenize_text's status 2).
prep_one_line() {  # NAME PATTERN CMD...: status 1, stderr one line matching PATTERN, no resume hint
    local name=$1 pattern=$2 rc; shift 2
    "$@" >"$B/prep.out" 2>"$B/prep.err"; rc=$?
    if [[ $rc == 1 && $(grep -c . "$B/prep.err") == 1 ]] && grep -qE -- "$pattern" "$B/prep.err" &&
       ! grep -q "run the same command again\|Traceback" "$B/prep.out" "$B/prep.err"; then
        ok "$name ($(cat "$B/prep.err"))"
    else
        not_ok "$name: rc $rc: $(head -c 400 "$B/prep.err" | tr '\n' '|') / $(tail -n 2 "$B/prep.out" | tr '\n' '|')"
    fi
}
prep_one_line "prepare.py: a truncated .zst, no resume hint" "^tokenize_text: .*cut.jsonl.zst: zstd data ends early \(truncated file\?\)" \
    $PREP "$B/cut.jsonl.zst" -o "$B/p7/c" --shard-tokens $SH
prep_one_line "prepare.py: corrupt gzip data, no resume hint" "^tokenize_text: .*corrupt.jsonl.gz: bad gzip data near byte [0-9]+" \
    $PREP "$B/corrupt.jsonl.gz" -o "$B/p8/c" --shard-tokens $SH
# pyarrow made unimportable in this Python (sys.modules[...] = None is how Python hides one)
prep_one_line "prepare.py: Parquet input without pyarrow names the pip command" \
    "^prepare.py: Parquet input needs the Python module 'pyarrow', which .* cannot import .*: .* -m pip install pyarrow$" \
    "$PYTHON" -c 'import runpy, sys; sys.modules["pyarrow"] = None; sys.argv = ["data/prepare.py"] + sys.argv[1:]
runpy.run_path("data/prepare.py", run_name="__main__")' --tokenize-text "$TOOL" "$C/a.parquet" -o "$B/p9/c"
# /sys refuses new files and directories even to root; a file where the directory should be
prep_one_line "prepare.py: -o in a directory where nothing can be written" "^prepare.py: -o /sys/fsdp_prep: cannot write there \(/sys/fsdp_prep.probe.[0-9]+: Permission denied\)" \
    $PREP "$C/corpus.jsonl" -o /sys/fsdp_prep
prep_one_line "prepare.py: -o in a directory that cannot be created" "^prepare.py: -o /sys/fsdp_dir/c: cannot write there \(/sys/fsdp_dir: (Permission denied|Operation not permitted)\)" \
    $PREP "$C/corpus.jsonl" -o /sys/fsdp_dir/c
touch "$B/a_file"
prep_one_line "prepare.py: -o under a plain file" "^prepare.py: -o $B/a_file/c: $B/a_file is not a directory$" \
    $PREP "$C/corpus.jsonl" -o "$B/a_file/c"

# ---- progress ---------------------------------------------------------------------------------
out=$($TOOL -q --progress --jsonl-field text --shard-tokens $SH -o "$B/out/p" "$C/corpus.jsonl.gz" 2>&1 >/dev/null)
grep -qE '^100\.0% \| [0-9.]+k docs \| [0-9.]+[kM] tokens \| [1-9][0-9.]* MB at [1-9][0-9.]* MB/s \| took' <<<"$out" \
    && ok "--progress: share of the input, documents, tokens, MB/s ($(tail -n 1 <<<"$out"))" || not_ok "--progress: $out"
script -qfec "$CHECK slow 200 0.05 -- --tokenize-text $TOOL $C/a.parquet -o $T/tty/c --shard-tokens $SH" "$T/tty.log" >/dev/null 2>&1
grep -aqE '[0-9.]+% \| [0-9.]+k? docs \| .* tokens \| .* MB/s \| ETA [0-9]' "$T/tty.log" \
    && ok "prepare.py on a terminal: a progress line with the share done and an ETA" \
    || not_ok "progress on a terminal: $(tr '\r' '\n' <"$T/tty.log" | grep -a 'docs' | tail -n 2 | tr '\n' ' ')"

# ---- --hellaswag: llm.c's eval file ---------------------------------------------------------------
H=$T/hs
$CHECK hellaswag "$H" || not_ok "make the HellaSwag-schema test files"
if [[ ! -x build/test_evalset ]] && ! make -s build/test_evalset >"$T/make_evalset.log" 2>&1; then
    not_ok "build test_evalset: $(tail -n 3 "$T/make_evalset.log" | tr '\n' ' ')"
fi
out=$($PREP --hellaswag "$H/hs_val.jsonl" -o "$H/out/hs.bin" 2>&1); rc=$?
sha=$(sha256sum "$H/hs_val.jsonl" | cut -d' ' -f1)
[[ $rc == 0 && $out == *"hs_val.jsonl: sha256 $sha, 16 examples"* && $out == *"16 examples -> $H/out/hs.bin"* ]] \
    && ok "prepare.py --hellaswag FILE: says the source's SHA-256 and the example count" || not_ok "prepare.py --hellaswag: rc $rc: $out"
build/test_evalset dump "$H/out/hs.bin" 50257 100000 >"$H/dump.json" 2>"$H/dump.err" || not_ok "test_evalset dump: $(cat "$H/dump.err")"
$CHECK hellaswag_expect "$H/hs_val.jsonl" "$H/out/hs.bin" "$H/dump.json"
$PREP --hellaswag "$H/hs_val.jsonl.gz" -o "$H/gz/hs.bin" --progress >"$H/gz.log" 2>&1
cmp -s "$H/out/hs.bin" "$H/gz/hs.bin" && grep -q "16 / 16 examples tokenized" "$H/gz.log" \
    && ok "prepare.py --hellaswag FILE.gz --progress: the same file, and a progress line" \
    || not_ok "prepare.py --hellaswag .gz: $(tail -n 2 "$H/gz.log" | tr '\n' ' ')"
# hs_one_line NAME PATTERN CMD...: status 1, stderr one line matching PATTERN, and nothing in $H/bad
hs_one_line() {
    local name=$1 pattern=$2 rc; shift 2
    rm -rf "$H/bad"
    "$@" >"$H/bad.out" 2>"$H/bad.err"; rc=$?
    if [[ $rc == 1 && $(grep -c . "$H/bad.err") == 1 && -z $(ls -A "$H/bad" 2>/dev/null) ]] && grep -qE -- "$pattern" "$H/bad.err"; then
        ok "$name ($(cat "$H/bad.err"))"
    else
        not_ok "$name: rc $rc: $(head -c 400 "$H/bad.err" | tr '\n' '|'); left: $(ls -A "$H/bad" 2>/dev/null | tr '\n' ' ')"
    fi
}
for bad in "json:malformed JSON \(Expecting ',' delimiter, column 25\)" "object:not a JSON object" 'no_ctx:no "ctx" field' \
           'empty_ctx:"ctx" is empty' 'no_endings:no "endings" field' 'endings_str:"endings" is not a list of 1 to 16 strings' \
           'endings_int:"endings" is not a list' 'endings_17:"endings" is not a list of 1 to 16' \
           "no_label:no \"label\" field \(HellaSwag's test set has none" 'label_4:label 4 out of range for 4 endings' \
           'label_neg:label -1 out of range' 'label_word:"label" is "two", not an integer' 'label_bool:"label" is true, not an integer'; do
    name=${bad%%:*}
    hs_one_line "prepare.py --hellaswag: $name refused naming file:line, no output" "^prepare.py: $H/hs_bad_$name.jsonl:3: ${bad#*:}" \
        $PREP --hellaswag "$H/hs_bad_$name.jsonl" -o "$H/bad/hs.bin"
done
# the download where the network does not reach (a proxy that refuses, so that it fails here even online)
hs_one_line "prepare.py --hellaswag without a file or network: one line saying what to do" \
    "^prepare.py: cannot download https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl: .*; fetch it elsewhere and pass the file: prepare.py --hellaswag FILE$" \
    env https_proxy=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 no_proxy= NO_PROXY= $PREP --hellaswag -o "$H/bad/hs.bin"
expect_error "prepare.py --hellaswag with a shard option: refused naming it" "--shard-tokens applies to token shards, not to --hellaswag" \
    $PREP --hellaswag "$H/hs_val.jsonl" --shard-tokens 5 -o "$H/x.bin"
expect_error "prepare.py --hellaswag -o DIR: refused" "-o $H/out: a directory" $PREP --hellaswag "$H/hs_val.jsonl" -o "$H/out"

# ---- --help ------------------------------------------------------------------------------------
out=$($PYTHON data/prepare.py --help 2>&1); rc=$?
[[ $rc == 0 && $out == *"--hf DATASET"* && $out == *"--val-split"* && $out == *"fineweb10B"* && $out == *"--hellaswag [JSONL]"* ]] \
    && ok "prepare.py --help" || not_ok "prepare.py --help: rc $rc"
