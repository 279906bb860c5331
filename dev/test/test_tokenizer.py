"""Compares the C tokenizer (./tokenize_text) with tiktoken's GPT-2 encoding built from the
local vocabulary files, and checks decoding and safe printing.

    $PYTHON dev/test/test_tokenizer.py ./tokenize_text $TEST_TMP

Prints one `ok - name` / `not ok - name: why` line per check (dev/test/CONVENTIONS.md).
"""
import os
import random
import subprocess
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_tokenizer_ref import EOT, data_dir, load_tiktoken_gpt2  # noqa: E402

TOOL = TMP = None  # set by main() from the command line
GPT2_DIR = os.path.join(data_dir(), "gpt2")
VOCAB_ARGS = ["--encoder", os.path.join(GPT2_DIR, "encoder.json"), "--vocab", os.path.join(GPT2_DIR, "vocab.bpe")]
SHAKESPEARE = os.path.join(data_dir(), "tinyshakespeare", "input.txt")


def report(name, good, why=""):
    if good:
        print(f"ok - {name}", flush=True)
    else:
        print(f"not ok - {name}: {why}", flush=True)


def run(args, stdin=None):
    p = subprocess.run([TOOL] + VOCAB_ARGS + args, input=stdin, capture_output=True)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace").strip()


def ids_of(data):
    return [int.from_bytes(data[i:i + 4], "little", signed=True) for i in range(0, len(data), 4)]


def dump(paths, *flags):
    """The token stream of files (each preceded by EOT unless --no-eot), as a list."""
    rc, out, err = run(["--dump", "--format", "int32", *flags, *paths])
    if rc != 0:
        raise RuntimeError(f"tokenize_text --dump failed (rc {rc}): {err}")
    return ids_of(out)


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def describe_diff(got, want, texts=None):
    i = first_diff(got, want)
    msg = f"{len(got)} ids vs tiktoken's {len(want)}, first difference at {i}: got {got[i:i + 6]} want {want[i:i + 6]}"
    return msg


def write(name, data):
    path = os.path.join(TMP, name)
    with open(path, "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
    return path


# A multilingual, emoji- and whitespace-heavy sample.
SAMPLE = (
    "Hello, world! It's a test: we're here, they've gone, I'm sure you'll see, he'd say.\n"
    "SHOUTING'S FINE, DON'T WORRY. 'quoted' and \u2018curly\u2019 quotes \u201clike this\u201d.\n"
    "Numbers: 0 1 12 123 1234 12345 3.14159 -42 1,000,000 2024-05-20 0x1F 1e-9 \u00bd \u00b2 \u2167 \u0663\u0664 \u0967\u0968 \uff11\uff12\n"
    "\u4e2d\u6587\u6587\u672c\u6ca1\u6709\u7a7a\u683c\u3002\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u30ab\u30bf\u30ab\u30ca\u3002"
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\u3002\u3000\u5168\u89d2\u7a7a\u683c\n"
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0645\u0646 \u0627\u0644\u064a\u0645\u064a\u0646 \u0625\u0644\u0649 \u0627\u0644\u064a\u0633\u0627\u0631\u060c "
    "\u05e2\u05d1\u05e8\u05d9\u05ea \u05d2\u05dd. \u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e\u0964 \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22\n"
    "Combining: e\u0301 a\u0308 n\u0303 Z\u0336\u0335\u0334 \u0915\u094d\u0937 \u1e9b\u0323 caf\u00e9 vs cafe\u0301\n"
    "\u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u0442\u0435\u043a\u0441\u0442, \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac, "
    "Stra\u00dfe, \u0130stanbul, \u01c5 \u1f00\u0345\n"
    "Emoji: \U0001f600\U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 "
    "\U0001f3f3\ufe0f\u200d\U0001f308 \U0001f1fa\U0001f1f8\U0001f1ef\U0001f1f5 \u2764\ufe0f x\U0001f525y "
    "\U0001f9d1\U0001f3ff\u200d\U0001f4bb #\ufe0f\u20e3 \u263a\n"
    "Whitespace:\ttab\t\ttabs \t mixed  two   three    four\n\n\nthree newlines\r\nCRLF\r\n"
    "trailing spaces   \n   leading spaces\n\t\n \n  \n"
    "odd spaces:\u00a0nbsp\u2009thin\u2003em\u202fnnbsp\u205fmmsp\u3000ideo\u1680ogham\u180emongolian\u0085nel"
    "\u2028ls\u2029ps\x0bvt\x0cff\x1cfs\x1dgs\u200bzwsp\ufeffbom\n"
    "<|endoftext|>Special token inside text<|endoftext|> and half <|endof text|> and <|endoftext|"
    "<|endoftext|><|endoftext|>\n"
    "Code: def f(x):\n    return x**2  # comment\n\tif (a && b) { c->d[0] = 'e'; }\n"
    "Punctuation runs: !!! ??? ... --- === *** ((( ))) ''' \"\"\" ,,, ;;; ::: @@@ ### $$$ %%% ^^^ &&& |||\n"
    "Contractions: 's 't 're 've 'm 'll 'd 'S 'T 'RE 'Ll x's y'all rock'n'roll ''s '''ll \u2019s\n"
    "Private use \ue000\U000f0000, unassigned \u0378, replacement \ufffd, null \x00 byte, DEL \x7f.\n"
    + " " * 40 + "x" + "\n" * 7 + "end"
)

ALPHABET = (
    list("abcdefXYZ") + list("0123456789") + list("'.,;:!?-_()[]{}\"<>|/\\@#$%^&*+=~`")
    + ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "\u2019s", "<|endoftext|>", "<|endof", "text|>", "<|"]
    + ["\t", "\n", "\r", "\r\n", "\x0b", "\x0c", " ", " ", " ", "  ", "\u00a0", "\u1680", "\u2000", "\u200a",
       "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u180e", "\u0085", "\x1c", "\x1f", "\u200b", "\ufeff"]
    + ["\u00e9", "\u00df", "\u03a9", "\u0416", "\u4e2d", "\u65e5\u672c", "\ud55c", "\u0627", "\u05e2", "\u0939",
       "\u0e01", "\u0130", "\u01c5", "\u02b0", "\u3042", "\u30ab"]
    + ["\u0301", "\u0308", "\u093f", "\u094d", "\u0e31", "\u20e3"]
    + ["\u0663", "\u096b", "\u00b2", "\u00bd", "\u216b", "\uff10", "\U0001d7ce"]
    + ["\U0001f600", "\U0001f44d\U0001f3fd", "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\u200d", "\ufe0f",
       "\U0001f1fa", "\u2764"]
    + ["\x00", "\x7f", "\ufffd", "\ue000", "\U0010fffd", "\u0378", "\U00010000", "\u00ad", "\u2066"]
)


ASCII_HEAVY = [chr(i) for i in range(128)] + list("aZ09 '") * 8 + [
    "'s", "'ll", "'ve", "'re", "'d", "'m", "'t", "'L", "  ", "\n\n", " \n", "\t ", "\u00a0", "\u3000", "\u00e9",
    "\u0663", "\U0001f600", "\u0085", "\u2028"]


def random_text(rng, n):
    return "".join(rng.choice(ALPHABET) for _ in range(n))


def sanitize_ref(b):
    """What the safe printer must print for the byte string b."""
    out = []
    for c in b.decode("utf-8", "replace"):  # one U+FFFD per maximal ill-formed subpart
        o = ord(c)
        if (o < 0x20 and c not in "\t\n\r") or 0x7F <= o <= 0x9F:
            out.append("\ufffd")
        else:
            out.append(c)
    return "".join(out).encode("utf-8")


def main():
    global TOOL, TMP
    if len(sys.argv) != 3:
        sys.exit("usage: test_tokenizer.py TOKENIZE_TEXT TMP_DIR")
    TOOL = os.path.abspath(sys.argv[1])
    TMP = sys.argv[2]
    os.makedirs(TMP, exist_ok=True)
    try:
        enc = load_tiktoken_gpt2(GPT2_DIR)
    except Exception as e:  # noqa: BLE001
        report("tiktoken reference", False, f"cannot build tiktoken's GPT-2 encoding from {GPT2_DIR}: {e!r}")
        return
    rng = random.Random(1234)

    # --- token ids against tiktoken -------------------------------------------------
    with open(SHAKESPEARE, encoding="utf-8") as f:
        shakespeare = f.read()
    want = enc.encode_ordinary(shakespeare)
    got = dump([SHAKESPEARE], "--no-eot")
    report("ids equal tiktoken: Tiny Shakespeare (encode_ordinary)", got == want, describe_diff(got, want))
    got = dump([SHAKESPEARE], "--no-eot", "--allow-special")
    report("ids equal tiktoken: Tiny Shakespeare (allowed_special)", got == want, describe_diff(got, want))

    sample_path = write("sample.txt", SAMPLE)
    want = enc.encode_ordinary(SAMPLE)
    got = dump([sample_path], "--no-eot")
    report("ids equal tiktoken: multilingual/emoji/whitespace sample (encode_ordinary)", got == want, describe_diff(got, want))
    want = enc.encode(SAMPLE, allowed_special="all")
    got = dump([sample_path], "--no-eot", "--allow-special")
    report("ids equal tiktoken: multilingual/emoji/whitespace sample (allowed_special)", got == want, describe_diff(got, want))
    report("sample has <|endoftext|> as 50256 only with --allow-special",
           want.count(EOT) == 4 and EOT not in enc.encode_ordinary(SAMPLE), f"{want.count(EOT)} EOTs")

    # many random strings in one run: each file is preceded by EOT in the stream
    texts = [random_text(rng, rng.randint(0, 60)) for _ in range(400)]
    texts += [random_text(rng, 400) for _ in range(20)]
    # ASCII-heavy texts: the C encoder's ASCII fast path and its hand-over to PCRE2
    texts += ["".join(rng.choice(ASCII_HEAVY) for _ in range(rng.randint(1, 80))) for _ in range(400)]
    paths = [write(f"fuzz_{i:03d}.txt", t) for i, t in enumerate(texts)]
    for mode, flags, fn in (("encode_ordinary", [], enc.encode_ordinary),
                            ("allowed_special", ["--allow-special"], lambda s: enc.encode(s, allowed_special="all"))):
        want = []
        for t in texts:
            want += [EOT] + fn(t)
        got = dump(paths, *flags)
        why = describe_diff(got, want)
        if got != want:  # name the first text that differs
            pos = 0
            for t in texts:
                n = 1 + len(fn(t))
                if got[pos:pos + n] != want[pos:pos + n]:
                    why += f"; first differing text: {t!r}"
                    break
                pos += n
        report(f"ids equal tiktoken: {len(texts)} random texts ({mode})", got == want, why)

    # pieces long enough for the heap-based merge
    long_texts = {
        "spaces": " " * 100000 + "x",
        "newlines": "\n" * 20000,
        "digits": "1234567890" * 5000,
        "letters": "a" * 30000 + "b" + "ab" * 10000,
        "cjk": "\u4e2d\u6587\u5b57" * 10000,
        "punct": "-=" * 20000 + "!",
        "word": "supercalifragilisticexpialidocious" * 300,
        "mixed": "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(50000)),
    }
    lp = [write(f"long_{k}.txt", v) for k, v in long_texts.items()]
    want = []
    for v in long_texts.values():
        want += [EOT] + enc.encode_ordinary(v)
    got = dump(lp)
    report("ids equal tiktoken: very long pieces (spaces, digits, letters, CJK, punctuation)", got == want,
           describe_diff(got, want))

    # --- documents ---------------------------------------------------------------------
    # llm.c's dev/data/tinyshakespeare.py, with tiktoken
    want = []
    sections = shakespeare.split("\n\n")
    for i, s in enumerate(sections):
        want.append(EOT)
        want.extend(enc.encode_ordinary(s + "\n\n" if i != len(sections) - 1 else s))
    got = dump([SHAKESPEARE], "--split-on", "\\n\\n")
    report("--split-on '\\n\\n' gives llm.c's tinyshakespeare.py token stream", got == want, describe_diff(got, want))
    docs = write("docs.txt", "a\n\nb\n\n\n\nc\n\n")
    for flags, parts in ((["--split-on", "\\n\\n"], ["a\n\n", "b\n\n", "\n\n", "c\n\n", ""]),
                         (["--split-on", "\\n\\n", "--drop-separator"], ["a", "b", "", "c", ""]),
                         (["--split-on", "\\x0a\\x0a", "--no-eot"], ["a\n\n", "b\n\n", "\n\n", "c\n\n", ""])):
        got = dump([docs], *flags)
        eot = [] if "--no-eot" in flags else [EOT]  # documents are encoded separately either way
        want = [t for p in parts for t in eot + enc.encode_ordinary(p)]
        report(f"documents: {' '.join(flags)}", got == want, describe_diff(got, want))
    got = dump([docs, sample_path])
    want = [EOT] + enc.encode_ordinary("a\n\nb\n\n\n\nc\n\n") + [EOT] + enc.encode_ordinary(SAMPLE)
    report("documents: every input file is preceded by EOT", got == want, describe_diff(got, want))

    # --- invalid UTF-8: defined behaviour ---------------------------------------------
    # Every maximal run of bytes that are not part of a valid UTF-8 character is one piece
    # (BPE over its bytes); the valid text between such runs is encoded as usual.
    bad_bytes = [b"\xff", b"\xc0\xaf", b"\xe4\xb8", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80\x80\x80",
                 b"\xf0\x9f\x98", b"\xfe\xfe\xff", b"\xc3"]
    chunks = []
    for i in range(300):
        if rng.random() < 0.3:
            chunks.append(rng.choice(bad_bytes))
        else:
            chunks.append(random_text(rng, rng.randint(1, 8)).encode("utf-8"))
    blob = b"".join(chunks)
    blob_path = write("invalid_utf8.bin", blob)
    want = []
    esc = blob.decode("utf-8", "surrogateescape")
    i = 0
    while i < len(esc):
        j = i
        if 0xDC80 <= ord(esc[i]) <= 0xDCFF:
            while j < len(esc) and 0xDC80 <= ord(esc[j]) <= 0xDCFF:
                j += 1
            raw = bytes(ord(c) - 0xDC00 for c in esc[i:j])
            want += enc._core_bpe.encode_single_piece(raw)
        else:
            while j < len(esc) and not 0xDC80 <= ord(esc[j]) <= 0xDCFF:
                j += 1
            want += enc.encode_ordinary(esc[i:j])
        i = j
    try:
        got = dump([blob_path], "--no-eot")
        report("invalid UTF-8: valid text as tiktoken, each invalid run one BPE piece", got == want, describe_diff(got, want))
    except RuntimeError as e:
        report("invalid UTF-8: valid text as tiktoken, each invalid run one BPE piece", False, str(e))

    # --- decode(encode(x)) == x ---------------------------------------------------------
    rand_bytes = bytes(rng.randrange(256) for _ in range(20000))
    cases = {
        "Tiny Shakespeare": SHAKESPEARE,
        "multilingual sample": sample_path,
        "invalid UTF-8 mix": blob_path,
        "random bytes": write("random.bin", rand_bytes),
        "empty file": write("empty.txt", b""),
        "long pieces": lp[0],
    }
    for name, path in cases.items():
        with open(path, "rb") as f:
            original = f.read()
        for flags in ([], ["--allow-special"]):
            ids_path = os.path.join(TMP, "roundtrip.ids")
            rc, out, err = run(["--dump", "--no-eot", "--format", "int32", *flags, path])
            if rc == 0:
                with open(ids_path, "wb") as f:
                    f.write(out)
                rc, out, err = run(["--decode", "--format", "int32", ids_path])
            label = f"decode(encode(x)) == x: {name}" + (" (--allow-special)" if flags else "")
            report(label, rc == 0 and out == original,
                   f"rc {rc}: {err}" if rc else f"{len(out)} bytes back for {len(original)}, first difference at {first_diff(out, original)}")

    # text-format ids too
    ids = enc.encode_ordinary(SAMPLE)
    ids_txt = write("sample.ids.txt", "".join(f"{i}\n" for i in ids))
    rc, out, err = run(["--decode", ids_txt])
    report("--decode reads one id per line", rc == 0 and out == SAMPLE.encode("utf-8"), err)

    # --- safe printing --------------------------------------------------------------------
    # an id stream that splits multi-byte characters across tokens and holds invalid bytes
    stream = []
    for _ in range(2000):
        r = rng.random()
        if r < 0.4:
            stream += enc.encode_ordinary(random_text(rng, rng.randint(1, 6)))
        elif r < 0.7:  # single-byte tokens of a UTF-8 sequence, possibly cut short
            ch = rng.choice(["\u00e9", "\u4e2d", "\U0001f600", "\u0085", "\u200d"]).encode("utf-8")
            ch = ch[: rng.randint(1, len(ch))]
            stream += [enc.encode_single_token(bytes([b])) for b in ch]
        else:
            stream.append(rng.randrange(EOT + 1))
    raw = b"".join(enc.decode_single_token_bytes(i) for i in stream)
    sp = write("stream.ids", b"".join(i.to_bytes(4, "little") for i in stream))
    rc, out, err = run(["--decode", "--safe", "--format", "int32", sp])
    good = rc == 0 and out == sanitize_ref(raw)
    report("--safe output = UTF-8 decode with U+FFFD per maximal ill-formed subpart, controls replaced",
           good, f"rc {rc}: {err}" if rc else f"first difference at byte {first_diff(out, sanitize_ref(raw))}")
    try:
        out.decode("utf-8", "strict")
        valid = all(not unicodedata.category(c) == "Cc" or c in "\t\n\r" for c in out.decode("utf-8"))
    except UnicodeDecodeError:
        valid = False
    report("--safe output is valid UTF-8 without control characters", valid, "invalid UTF-8 or a control character")
    # an emoji in single-byte tokens prints as the emoji
    emoji = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    ep = write("emoji.ids", b"".join(enc.encode_single_token(bytes([b])).to_bytes(4, "little") for b in emoji.encode()))
    rc, out, err = run(["--decode", "--safe", "--format", "int32", ep])
    report("--safe joins a character split over several tokens", rc == 0 and out == emoji.encode(), f"got {out!r}")


if __name__ == "__main__":
    main()
