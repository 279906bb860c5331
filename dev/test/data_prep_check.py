"""Helpers of dev/test/test_data_prep.sh: the test corpus, the expected shards, and prepare.py
runs that are slowed down so that they can be interrupted half way.

    $PYTHON dev/test/data_prep_check.py corpus DIR
        writes DIR/docs.json (the documents), val_docs.json / train_docs.json (the split of
        hf_val/), long.txt (1.2 MB of text for one document), and the same documents as
        corpus.jsonl (mixed escaping, extra fields, blank and CRLF lines), corpus.jsonl.gz (two
        gzip members), corpus.jsonl.zst (two zstd frames), a.parquet + b.parquet, a Hugging
        Face style dataset directory hf/ (train-*.parquet) and hf_val/ (train-* and
        validation-*.parquet)
    $PYTHON dev/test/data_prep_check.py expect NAME OUT_PREFIX DOCS_JSON SHARD_TOKENS VAL_TOKENS [VAL_DOCS_JSON]
        prints `ok - NAME` when the OUT_PREFIX_*.bin files are exactly the shards that llm.c's
        dev/data/fineweb.py writes for those documents with tiktoken (every document preceded
        by <|endoftext|>, shards of exactly SHARD_TOKENS, the first VAL_TOKENS tokens val);
        with VAL_DOCS_JSON the val shards hold those documents instead (prepare.py --val-split)
    $PYTHON dev/test/data_prep_check.py ids NAME TEXT_FILE IDS_INT32_FILE
        ok when the int32 ids are tiktoken's encode_ordinary of the whole file
    $PYTHON dev/test/data_prep_check.py slow ROWS SECONDS -- PREPARE_ARGS...
        runs data/prepare.py in this process with every ROWS documents sent followed by a
        sleep of SECONDS (only the Python-fed sources: Parquet and Hugging Face)
    $PYTHON dev/test/data_prep_check.py trickle SRC DST BYTES SECONDS
        copies SRC to DST (a FIFO) BYTES at a time with a sleep between
    $PYTHON dev/test/data_prep_check.py frames DOCS_JSON OUT [noend]
        writes the documents as tokenize_text --framed records (without the end record: noend)
    $PYTHON dev/test/data_prep_check.py hellaswag DIR
        writes DIR/hs_val.jsonl (and .jsonl.gz): 16 examples in HellaSwag's schema, with unicode,
        quotes, newlines, "<|endoftext|>" written in the text, a label given as a string, 1, 4
        and 16 endings; and DIR/hs_bad_NAME.jsonl, each with one malformed line
    $PYTHON dev/test/data_prep_check.py hellaswag_expect JSONL EVAL_FILE DUMP_JSON
        ok lines when EVAL_FILE is byte for byte what llm.c's dev/data/hellaswag.py writes
        for JSONL's examples (its rendering and write_evalfile, tiktoken's GPT-2 tokens), and
        DUMP_JSON (build/test_evalset dump of EVAL_FILE: our C reader) holds those examples
"""
import glob
import gzip
import json
import os
import random
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from gpt2_tokenizer_ref import EOT, data_dir, load_tiktoken_gpt2  # noqa: E402
from test_tokenizer import ALPHABET, SAMPLE, random_text  # noqa: E402


def documents():
    """Tiny Shakespeare's paragraphs with multilingual, emoji, whitespace and escape-heavy
    documents mixed in, an empty one, and one long document (the whole play, 1.1 MB) that a
    batch cannot hold."""
    rng = random.Random(18)
    with open(os.path.join(data_dir(), "tinyshakespeare", "input.txt"), encoding="utf-8", newline="") as f:
        play = f.read()
    docs = play.split("\n\n")
    extra = [SAMPLE, "", "\U0001f600 emoji \u4e2d\u6587", "nul \x00 byte", "quote \" backslash \\ slash / \b\f\r\t",
             "\u2028\u2029 separators", "lone surrogate \ud800 here", "reversed \udc00\ud83d pair"]
    extra += [random_text(rng, rng.randint(1, 2000)) for _ in range(150)]
    extra += ["\n".join(random_text(rng, rng.randint(0, 12)) for _ in range(3000))]  # many short lines: cut points
    for i, e in enumerate(extra):
        docs.insert(37 * i + 11, e)
    docs.insert(2000, play)
    return docs, extra[-1]


def write_jsonl(path, docs):
    """One object per line: escaping alternates (ASCII-only and raw UTF-8), keys come in
    both orders with other fields (a nested object, an array, NaN), and there are blank and
    CRLF lines. Lone surrogates are written escaped (raw they are not UTF-8)."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        for i, d in enumerate(docs):
            ascii_only = i % 2 == 0 or any(0xD800 <= ord(c) <= 0xDFFF for c in d)
            if i % 3 == 0:
                obj = {"text": d, "id": i}
            else:
                obj = {"id": f"doc-{i}", "meta": {"score": float("nan") if i % 5 == 0 else 0.25, "tags": ["a", None, True]},
                       "text": d}
            f.write(json.dumps(obj, ensure_ascii=ascii_only) + ("\r\n" if i % 7 == 0 else "\n"))
            if i % 50 == 0:
                f.write("\n")


def cmd_corpus(out):
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(out, exist_ok=True)
    docs, lines = documents()
    with open(os.path.join(out, "long.txt"), "w", encoding="utf-8", newline="") as f:  # one long document
        f.write(docs[2000] + lines + SAMPLE)
    with open(os.path.join(out, "docs.json"), "w") as f:
        json.dump(docs, f)
    jl = os.path.join(out, "corpus.jsonl")
    write_jsonl(jl, docs)
    raw = open(jl, "rb").read()
    half = raw.index(b"\n", len(raw) // 2) + 1
    with open(jl + ".gz", "wb") as f:  # two members, as `cat a.gz b.gz` makes
        f.write(gzip.compress(raw[:half]))
        f.write(gzip.compress(raw[half:]))
    with open(jl + ".zst", "wb") as f:  # two frames
        for part in (raw[:half], raw[half:]):
            f.write(subprocess.run(["zstd", "-q", "-c", "-3"], input=part, capture_output=True, check=True).stdout)
    # Parquet: two files, row groups of odd sizes; the same documents in the same order
    cut = len(docs) * 3 // 5
    table = pa.table({"id": list(range(len(docs))), "text": docs_for_arrow(docs)})
    pq.write_table(table.slice(0, cut), os.path.join(out, "a.parquet"), row_group_size=997)
    pq.write_table(table.slice(cut), os.path.join(out, "b.parquet"), row_group_size=1500)
    # a Hugging Face style dataset directory (split from the file names)
    os.makedirs(os.path.join(out, "hf"), exist_ok=True)
    pq.write_table(table.slice(0, cut), os.path.join(out, "hf", "train-00000-of-00002.parquet"), row_group_size=997)
    pq.write_table(table.slice(cut), os.path.join(out, "hf", "train-00001-of-00002.parquet"), row_group_size=1500)
    # and one with a validation split: the first 800 documents
    val, train = table.slice(0, 800), table.slice(800)
    os.makedirs(os.path.join(out, "hf_val"), exist_ok=True)
    pq.write_table(val, os.path.join(out, "hf_val", "validation-00000-of-00001.parquet"))
    pq.write_table(train, os.path.join(out, "hf_val", "train-00000-of-00001.parquet"), row_group_size=1200)
    with open(os.path.join(out, "val_docs.json"), "w") as f:
        json.dump(docs[:800], f)
    with open(os.path.join(out, "train_docs.json"), "w") as f:
        json.dump(docs[800:], f)


def docs_for_arrow(docs):
    # Arrow strings are UTF-8: a lone surrogate becomes U+FFFD, which is what tiktoken encodes
    # for it too (so the expected tokens stay the same)
    return [d.encode("utf-16", "surrogatepass").decode("utf-16", "replace") for d in docs]


def stream_ids(enc, docs):
    ids = []
    for d in docs:
        ids.append(EOT)
        ids.extend(enc.encode_ordinary(d))
    return ids


def llmc_shards(ids, shard_tokens, val_tokens, first_index=0, split_names=("val", "train")):
    """fineweb.py's loop, generalised to a val split of any size: shards of exactly
    shard_tokens, a new shard where the split changes; (name, tokens)."""
    out, idx, pos = [], first_index, 0
    while pos < len(ids):
        split = split_names[0] if pos < val_tokens else split_names[1]
        end = min(pos + shard_tokens, len(ids))
        if pos < val_tokens:
            end = min(end, val_tokens)
        out.append((f"{split}_{idx:06d}", ids[pos:end]))
        idx += 1
        pos = end
    return out


def shard_bytes(tokens):
    header = struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253))
    return header + struct.pack(f"<{len(tokens)}H", *tokens)


def cmd_expect(name, prefix, docs_json, shard_tokens, val_tokens, val_docs_json=None):
    enc = load_tiktoken_gpt2()
    docs = json.load(open(docs_json))
    shard_tokens, val_tokens = int(shard_tokens), int(val_tokens)
    if val_docs_json:
        want = llmc_shards(stream_ids(enc, json.load(open(val_docs_json))), shard_tokens, 2**62)
        want += llmc_shards(stream_ids(enc, docs), shard_tokens, 0)
    else:
        want = llmc_shards(stream_ids(enc, docs), shard_tokens, val_tokens)
    want = {f"{os.path.basename(prefix)}_{n}.bin": shard_bytes(t) for n, t in want}
    have = {os.path.basename(p): p for p in glob.glob(glob.escape(prefix) + "_*.bin")}
    problems = []
    if sorted(have) != sorted(want):
        problems.append(f"files {sorted(have)[:4]}... ({len(have)}), want {sorted(want)[:4]}... ({len(want)})")
    else:
        for n in sorted(want):
            got = open(have[n], "rb").read()
            if got != want[n]:
                at = next((i for i, (x, y) in enumerate(zip(got, want[n])) if x != y), min(len(got), len(want[n])))
                problems.append(f"{n} differs at byte {at} ({len(got)} vs {len(want[n])} bytes)")
                break
    ntok = sum((len(b) - 1024) // 2 for b in want.values())
    if problems:
        print(f"not ok - {name}: {'; '.join(problems)}")
    else:
        print(f"ok - {name} ({len(docs)} documents, {len(want)} shards, {ntok} tokens)")


def cmd_ids(name, text_file, ids_file):
    enc = load_tiktoken_gpt2()
    with open(text_file, encoding="utf-8", newline="") as f:  # the bytes as they are: \r stays
        want = enc.encode_ordinary(f.read())
    raw = open(ids_file, "rb").read()
    got = list(struct.unpack(f"<{len(raw) // 4}i", raw))
    if got == want:
        print(f"ok - {name} ({len(got)} ids)")
    else:
        at = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
        print(f"not ok - {name}: {len(got)} ids vs tiktoken's {len(want)}, first difference at {at}")


def cmd_slow(rows, seconds, args):
    sys.path.insert(0, os.path.join(ROOT, "data"))
    import prepare

    rows, seconds = int(rows), float(seconds)
    write_column = prepare.Frames.write_column

    def slow_write(self, column, where, limit=None):
        done = 0
        while done < len(column) and (limit is None or done < limit):
            n = min(rows, len(column) - done)
            got = write_column(self, column.slice(done, n), where, None if limit is None else limit - done)
            done += got
            self.pipe.flush()
            time.sleep(seconds)
        return done

    prepare.Frames.write_column = slow_write
    sys.exit(prepare.main(args))


def cmd_trickle(src, dst, nbytes, seconds):
    data = open(src, "rb").read()
    nbytes, seconds = int(nbytes), float(seconds)
    try:
        with open(dst, "wb") as f:
            for i in range(0, len(data), nbytes):
                f.write(data[i:i + nbytes])
                f.flush()
                if seconds:
                    time.sleep(seconds)
    except BrokenPipeError:
        pass


def cmd_frames(docs_json, out, noend=None):
    docs = json.load(open(docs_json))
    with open(out, "wb") as f:
        for d in docs:
            b = d.encode("utf-8", "surrogatepass")
            f.write(struct.pack("<Q", len(b)) + b)
        if noend != "noend":
            f.write(struct.pack("<Q", 2**64 - 1))


# ---- --hellaswag ------------------------------------------------------------------------------

def hellaswag_examples():
    """HellaSwag's fields (ind, activity_label, ctx_a, ctx_b, ctx, split, split_type, endings,
    source_id, label); the texts the awkward kinds a tokenizer and a splitter must survive."""
    rng = random.Random(34)
    special = [
        ("A man is sitting on a roof. he", ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.",
                                            "is holding a rubik's cube.", "starts pulling up roofing on a roof."], 3),
        ("Unicode: na\u00efve caf\u00e9, \u4e2d\u6587, \U0001f600 and \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u2014",
         ["\u00e9t\u00e9.", "\U0001f680 \U0001f600", "\u65e5\u672c\u8a9e\u3002", "ok"], 1),
        ('She said "quoted" and \'single\' \\ backslashes /', ['"yes"', "it's \"fine\"", "\\n literally", "{}[]"], 0),
        ("Line one\nline two\r\n\tindented\n\n", ["next\nline", "\n", "tab\there", "  spaces  "], 2),
        ("A literal <|endoftext|> in the context", ["and <|endoftext|> in an ending", "<|endoftext|>", "<|endof", "plain"], 1),
        ("The label is a string here", ["a", "b", "c", "d"], "2"),
        ("One ending only", ["the only one"], 0),
        ("Sixteen endings", [f"ending number {i}" for i in range(16)], 15),
        ("x", ["y", "z", "w", "v"], 3),
    ]
    while len(special) < 16:
        n = rng.randint(2, 5)
        special.append((random_text(rng, rng.randint(1, 300)), [random_text(rng, rng.randint(0, 80)) for _ in range(n)],
                        rng.randrange(n)))
    out = []
    for i, (ctx, endings, label) in enumerate(special):
        out.append({"ind": 1000 + i, "activity_label": "Testing", "ctx_a": ctx, "ctx_b": "", "ctx": ctx, "split": "val",
                    "split_type": "indomain", "endings": endings, "source_id": f"test~{i}", "label": label})
    return out


def cmd_hellaswag(out):
    import gzip

    os.makedirs(out, exist_ok=True)
    examples = hellaswag_examples()
    lines = [json.dumps(e, ensure_ascii=i % 2 == 0) for i, e in enumerate(examples)]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "hs_val.jsonl"), "w", encoding="utf-8", newline="") as f:
        f.write(text)
    with open(os.path.join(out, "hs_val.jsonl.gz"), "wb") as f:
        f.write(gzip.compress(text.encode("utf-8")))
    good = examples[0]
    bad = {  # NAME: the line put at line 3
        "json": '{"ctx": "unterminated, "endings": ["a"], "label": 0}',
        "object": '["ctx", "endings", "label"]',
        "no_ctx": json.dumps({k: v for k, v in good.items() if k != "ctx"}),
        "empty_ctx": json.dumps(dict(good, ctx="")),
        "no_endings": json.dumps({k: v for k, v in good.items() if k != "endings"}),
        "endings_str": json.dumps(dict(good, endings="a b c d")),
        "endings_int": json.dumps(dict(good, endings=["a", 2, "c", "d"])),
        "endings_17": json.dumps(dict(good, endings=["e"] * 17)),
        "no_label": json.dumps({k: v for k, v in good.items() if k != "label"}),
        "label_4": json.dumps(dict(good, label=4)),
        "label_neg": json.dumps(dict(good, label=-1)),
        "label_word": json.dumps(dict(good, label="two")),
        "label_bool": json.dumps(dict(good, label=True)),
    }
    for name, line in bad.items():
        with open(os.path.join(out, f"hs_bad_{name}.jsonl"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines[:2] + [line] + lines[3:]) + "\n")


def llmc_evalfile(examples):
    """llm.c's dev/data/data_common.py write_evalfile, restated: the header, then per example
    65535, its bytes, index, label, completions, the context and each completion with its length."""
    import numpy as np

    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240522, 1, len(examples)]
    stream, longest = [], 0
    for idx, (label, ctx_tokens, ending_tokens) in enumerate(examples):
        ex = [2**16 - 1, 0, idx, label, len(ending_tokens), len(ctx_tokens), *ctx_tokens]
        for e in ending_tokens:
            ex += [len(e), *e]
        ex[1] = 2 * len(ex)
        longest = max(longest, ex[1])
        stream += ex
    header[3] = longest
    return header.tobytes() + np.array(stream, dtype=np.uint16).tobytes()


def cmd_hellaswag_expect(jsonl, eval_file, dump_json):
    enc = load_tiktoken_gpt2()
    want = []
    with open(jsonl, "rb") as f:
        for line in f.read().split(b"\n"):
            if not line.strip():
                continue
            ex = json.loads(line)
            # hellaswag.py's render_example: the context, then " " + each ending (tiktoken's encode
            # refuses "<|endoftext|>" written in text; encode_ordinary is what it would encode)
            want.append((int(ex["label"]), enc.encode_ordinary(ex["ctx"]), [enc.encode_ordinary(" " + e) for e in ex["endings"]]))
    got = open(eval_file, "rb").read()
    expect = llmc_evalfile(want)
    if got == expect:
        print(f"ok - prepare.py --hellaswag: the file llm.c's hellaswag.py writes with tiktoken, byte for byte "
              f"({len(want)} examples, {len(got)} bytes)")
    else:
        at = next((i for i, (x, y) in enumerate(zip(got, expect)) if x != y), min(len(got), len(expect)))
        print(f"not ok - prepare.py --hellaswag: differs from llm.c's file at byte {at} ({len(got)} vs {len(expect)} bytes)")
    try:
        dump = json.load(open(dump_json))
        read = [(e["label"], e["context"], e["completions"]) for e in dump["examples"]]
        indices = [e["index"] for e in dump["examples"]]
    except (OSError, ValueError, KeyError) as e:
        print(f"not ok - test_evalset dump of the file: {e}")
        return
    # example 4 writes "<|endoftext|>" in its context and endings: our tokens for it, as read back
    literal = read[4][1] + sum(read[4][2], []) if len(read) > 4 else []
    if literal and EOT not in literal and read[4] == want[4]:
        print("ok - prepare.py --hellaswag: \"<|endoftext|>\" written in a context and an ending is text, not token 50256, "
              "in the file (so tokenize_text's dump splits at 50256 unambiguously)")
    else:
        print(f"not ok - prepare.py --hellaswag: the literal <|endoftext|> example: {read[4] if len(read) > 4 else None}, "
              f"tiktoken's {want[4]}")
    if read == want and indices == list(range(len(want))) and dump["n_examples"] == len(want):
        print(f"ok - the C reader (evalset_load) reads prepare.py's file back: every label, context and completion "
              f"(longest row {dump['longest_row']} tokens)")
    else:
        bad = next((i for i, (a, b) in enumerate(zip(read, want)) if a != b), None)
        print(f"not ok - the C reader reads prepare.py's file differently: {len(read)} examples, first differing {bad}, "
              f"indices {indices[:4]}")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "corpus":
        cmd_corpus(*args)
    elif cmd == "expect":
        cmd_expect(*args)
    elif cmd == "ids":
        cmd_ids(*args)
    elif cmd == "slow":
        cmd_slow(args[0], args[1], args[3:] if args[2] == "--" else args[2:])
    elif cmd == "trickle":
        cmd_trickle(*args)
    elif cmd == "frames":
        cmd_frames(*args)
    elif cmd == "hellaswag":
        cmd_hellaswag(*args)
    elif cmd == "hellaswag_expect":
        cmd_hellaswag_expect(*args)
    else:
        sys.exit(f"data_prep_check.py: unknown command {cmd}")


if __name__ == "__main__":
    main()
