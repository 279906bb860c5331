#!/usr/bin/env bash
# data/: turning text into token shards (tokenize_text.c) and preparing the datasets.
#
# Tiny Shakespeare as GPT-2 token shards, the same split as llm.c's
# dev/data/tinyshakespeare.py: the text is cut at every blank line ("\n\n"), each section is
# preceded by <|endoftext|> (50256) and, except the last, keeps its "\n\n"; the first 32768
# tokens of the stream are the validation shard, the rest the training shard.
#
#   data/tinyshakespeare.sh [OUT_DIR]        (default data/tinyshakespeare)
#
# writes OUT_DIR/tiny_shakespeare_val.bin (32768 tokens) and tiny_shakespeare_train.bin
# (305260 tokens), byte-identical to llm.c's. The text and the GPT-2 vocabulary come from
# $FSDP_DATA (default ../shared/data) when it has them; otherwise they are downloaded from
# their public sources into $FSDP_DOWNLOAD_DIR (default data/) and checked by sha256.
# The sources can be overridden with TINYSHAKESPEARE_URL, GPT2_ENCODER_URL, GPT2_VOCAB_URL.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$ROOT/data/tinyshakespeare}
DATA=${FSDP_DATA:-$ROOT/../shared/data}
DL=${FSDP_DOWNLOAD_DIR:-$ROOT/data}
TOOL=${TOKENIZE_TEXT:-$ROOT/tokenize_text}

TEXT_URL=${TINYSHAKESPEARE_URL:-https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt}
ENCODER_URL=${GPT2_ENCODER_URL:-https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json}
VOCAB_URL=${GPT2_VOCAB_URL:-https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe}
TEXT_SHA=86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed
ENCODER_SHA=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
VOCAB_SHA=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5

die() { echo "tinyshakespeare.sh: $*" >&2; exit 1; }

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# fetch NAME URL SHA DEST: use the shared copy when it is there, else download once.
fetch() {
    local shared=$DATA/$1 url=$2 sha=$3 dest=$4
    if [[ -f $shared ]]; then
        [[ $(sha_of "$shared") == "$sha" ]] || die "$shared: sha256 mismatch (expected $sha)"
        echo "$shared"
        return
    fi
    if [[ -f $dest && $(sha_of "$dest") == "$sha" ]]; then
        echo "$dest"
        return
    fi
    mkdir -p "$(dirname "$dest")"
    local tmp=$dest.part.$$
    if command -v curl >/dev/null; then
        curl -fsSL --retry 3 -o "$tmp" "$url" || { rm -f "$tmp"; die "cannot download $url"; }
    elif command -v wget >/dev/null; then
        wget -q -O "$tmp" "$url" || { rm -f "$tmp"; die "cannot download $url"; }
    else
        die "neither curl nor wget is installed to download $url"
    fi
    local got
    got=$(sha_of "$tmp")
    [[ $got == "$sha" ]] || { rm -f "$tmp"; die "$url: sha256 mismatch (got $got, expected $sha)"; }
    mv -f "$tmp" "$dest"
    echo "$dest"
}

text=$(fetch tinyshakespeare/input.txt "$TEXT_URL" "$TEXT_SHA" "$DL/tinyshakespeare/input.txt")
encoder=$(fetch gpt2/encoder.json "$ENCODER_URL" "$ENCODER_SHA" "$DL/gpt2/encoder.json")
vocab=$(fetch gpt2/vocab.bpe "$VOCAB_URL" "$VOCAB_SHA" "$DL/gpt2/vocab.bpe")

if [[ ! -x $TOOL ]]; then
    make -s -C "$ROOT" tokenize_text >&2 || die "cannot build $TOOL (run make)"
fi
mkdir -p "$OUT"
"$TOOL" --encoder "$encoder" --vocab "$vocab" --split-on '\n\n' --val-tokens 32768 --shard-tokens 0 \
    --out-prefix "$OUT/tiny_shakespeare" "$text"
