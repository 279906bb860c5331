"""Tokenizer throughput on one thread and on all cores: tokenize_text (C, one Tokenizer per
thread) against tiktoken's encode_ordinary_batch (Rust, num_threads) on the same documents,
in the same run, rounds alternating so that both see the same machine load (best round of
each counts); then the whole preparation, end to end, as a user runs it.

    $PYTHON dev/bench/bench_tokenize_threads.py TOOL WORK_DIR [MB] [ROUNDS] [THREADS...]

The documents: Tiny Shakespeare cut into ~4 KB documents (about the size of a web page's
text), repeated to MB megabytes (default 128). Printed:
  - encoder only, in memory (tokenize_text --bench on the JSONL: the documents' text, no
    <|endoftext|>; tiktoken: encode_ordinary_batch over the same strings): MB/s of text;
  - end to end, wall clock from start to exit (loading the vocabulary, reading, writing and
    fsyncing 100M-token shards): tokenize_text on .jsonl.zst; data/prepare.py on Parquet
    (pyarrow reading, framed records through a pipe); data/prepare.py --hf on a local dataset
    directory (datasets' streaming iterator: the path FineWeb takes, without the download);
    and what FineWeb sample-10BT would take at the --hf rate (a projection: its 10e9 tokens
    at the measured tokens/s, and ~40 GB of text at the measured MB/s).
"""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test"))
from gpt2_tokenizer_ref import data_dir, load_tiktoken_gpt2  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def corpus(work, mb):
    import pyarrow as pa
    import pyarrow.parquet as pq

    with open(os.path.join(data_dir(), "tinyshakespeare", "input.txt"), encoding="utf-8") as f:
        paras = f.read().split("\n\n")
    docs, cur = [], []
    size = 0
    for p in paras:
        cur.append(p)
        size += len(p) + 2
        if size >= 4000:
            docs.append("\n\n".join(cur))
            cur, size = [], 0
    base = sum(len(d.encode()) for d in docs)
    docs = docs * max(1, round(mb * 1e6 / base))
    jl = os.path.join(work, "corpus.jsonl")
    with open(jl, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    subprocess.run(["zstd", "-q", "-f", "-3", jl, "-o", jl + ".zst"], check=True)
    pq.write_table(pa.table({"text": docs}), os.path.join(work, "corpus.parquet"), row_group_size=10000)
    os.makedirs(os.path.join(work, "hf"), exist_ok=True)  # a Hugging Face style dataset directory
    os.link(os.path.join(work, "corpus.parquet"), os.path.join(work, "hf", "train-00000-of-00001.parquet"))
    return docs


def best_of(fn, rounds):
    return min(fn() for _ in range(rounds))


def main():
    tool, work = os.path.abspath(sys.argv[1]), sys.argv[2]
    mb = float(sys.argv[3]) if len(sys.argv) > 3 else 128
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    cores = len(os.sched_getaffinity(0))
    threads = [int(t) for t in sys.argv[5:]] or sorted({1, cores})
    os.makedirs(work, exist_ok=True)
    gpt2 = os.path.join(data_dir(), "gpt2")
    vocab = ["--encoder", os.path.join(gpt2, "encoder.json"), "--vocab", os.path.join(gpt2, "vocab.bpe")]
    enc = load_tiktoken_gpt2(gpt2)
    import tiktoken

    docs = corpus(work, mb)
    nbytes = sum(len(d.encode()) for d in docs)
    want_tokens = None
    jl = os.path.join(work, "corpus.jsonl")
    print(f"tokenizer throughput: {len(docs)} documents, {nbytes / 1e6:.1f} MB of text (Tiny Shakespeare in ~4 KB documents), "
          f"{cores} cores, best of {rounds}")

    # ---- encoder only, in memory -----------------------------------------------------------
    rows = []
    for th in threads:
        ours = theirs = 0.0
        ours_tokens = theirs_tokens = None
        for _ in range(rounds):
            out = subprocess.run([tool, *vocab, "--bench", "--jsonl-field", "text", "--threads", str(th), "--repeat", "2", jl],
                                 capture_output=True, text=True, check=True).stdout
            m = dict(re.findall(r"(\S+) ([0-9.]+)", out))
            ours = max(ours, float(m["wall_MB/s"]))
            ours_tokens = int(m["tokens"])
            t0 = time.perf_counter()
            ids = enc.encode_ordinary_batch(docs, num_threads=th)
            dt = time.perf_counter() - t0
            theirs = max(theirs, nbytes / dt / 1e6)
            theirs_tokens = sum(len(x) for x in ids)
            del ids
        if ours_tokens != theirs_tokens:
            print(f"  WARNING: token counts differ ({ours_tokens} vs {theirs_tokens})")
            sys.exit(1)
        want_tokens = ours_tokens
        rows.append((th, ours, theirs))
        print(f"  encoder, {th} thread{'s' if th > 1 else ' '}: fsdp.c {ours:7.1f} MB/s   tiktoken {tiktoken.__version__} "
              f"encode_ordinary_batch(num_threads={th}) {theirs:6.1f} MB/s   ratio {ours / theirs:.2f}x   ({ours_tokens} tokens)",
              flush=True)
    if len(rows) > 1:
        print(f"  scaling 1 -> {rows[-1][0]} threads: fsdp.c {rows[-1][1] / rows[0][1]:.2f}x, tiktoken {rows[-1][2] / rows[0][2]:.2f}x")

    # ---- the one-thread stages in front of the encoders: they bound the scaling ---------------
    best_read = 0.0
    for _ in range(rounds):
        out = subprocess.run([tool, *vocab, "--bench", "--jsonl-field", "text", "--threads", "1", "--repeat", "1", jl + ".zst"],
                             capture_output=True, text=True, check=True).stdout
        best_read = max(best_read, float(dict(re.findall(r"(\S+) ([0-9.]+)", out))["read_MB/s"]))
    producer = {}
    sys.path.insert(0, os.path.join(ROOT, "data"))
    import prepare

    class Null:
        def write(self, b):
            pass

        def flush(self):
            pass

        def close(self):
            pass

    os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=os.path.join(work, "hf_home"))
    for name in ("Parquet", "--hf"):
        for _ in range(rounds):
            src = prepare.ParquetSource([os.path.join(work, "corpus.parquet")], "text") if name == "Parquet" else \
                prepare.HFSource(os.path.join(work, "hf"), None, "train", "text", None)
            frames = prepare.Frames(Null())
            t0 = time.perf_counter()
            src.stream(frames, 0, None, lambda a, b: None)
            producer[name] = max(producer.get(name, 0.0), frames.bytes / (time.perf_counter() - t0) / 1e6)
    print(f"  one-thread stages: tokenize_text reading .jsonl.zst (zstd, JSON, batching) {best_read:.0f} MB/s; prepare.py's "
          f"producer alone (to /dev/null): Parquet {producer['Parquet']:.0f} MB/s, --hf {producer['--hf']:.0f} MB/s", flush=True)

    # ---- end to end ---------------------------------------------------------------------------
    # Each path runs on all documents and on the first eighth of them: the difference is the
    # rate once running (the vocabulary load and, for prepare.py, Python's imports take ~0.1
    # to ~3 s whatever the size), which is what a corpus of billions of tokens sees.
    py = sys.executable
    small = len(docs) // 8
    small_bytes = sum(len(d.encode()) for d in docs[:small])
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=os.path.join(work, "hf_home"))
    prep = [py, os.path.join(ROOT, "data", "prepare.py"), "--tokenize-text", tool, "--no-progress", "--encoder", vocab[1],
            "--vocab", vocab[3]]
    paths = {
        "tokenize_text .jsonl.zst": lambda out, th, n: [tool, *vocab, "-q", "--jsonl-field", "text", "--threads", str(th),
                                                       "--val-tokens", "100000000", "-o", out] + (["--max-docs", str(n)] if n else [])
                                                      + [jl + ".zst"],
        "prepare.py Parquet": lambda out, th, n: prep + ["--threads", str(th), os.path.join(work, "corpus.parquet"), "-o", out]
                                                 + (["--max-docs", str(n)] if n else []),
        "prepare.py --hf": lambda out, th, n: prep + ["--threads", str(th), "--hf", os.path.join(work, "hf"), "-o", out]
                                              + (["--max-docs", str(n)] if n else []),
    }

    def run(name, th, n):
        out = os.path.join(work, "out")
        subprocess.run(["rm", "-rf", out], check=True)
        os.makedirs(out)
        t0 = time.perf_counter()
        subprocess.run(paths[name](os.path.join(out, "c"), th, n), check=True, stdout=subprocess.DEVNULL, env=env)
        return time.perf_counter() - t0

    tokens_all = want_tokens + len(docs)  # the shards hold an <|endoftext|> per document too
    hf_rate = None
    for th in threads:
        for name in paths:
            t_all = best_of(lambda: run(name, th, None), rounds)
            t_small = best_of(lambda: run(name, th, small), rounds)
            marginal = (nbytes - small_bytes) / (t_all - t_small)
            mtok = marginal * tokens_all / nbytes
            print(f"  end to end, {th} thread{'s' if th > 1 else ' '}, {name:25s}: {nbytes / t_all / 1e6:6.1f} MB/s over the "
                  f"whole run ({t_all:.2f} s), {marginal / 1e6:6.1f} MB/s = {mtok / 1e6:5.2f} M tokens/s once running", flush=True)
            if name == "prepare.py --hf":
                hf_rate = (marginal, mtok)
    th = threads[-1]
    print(f"  FineWeb sample-10BT at prepare.py --hf's rate on {th} thread{'s' if th > 1 else ''} (a projection from the "
          f"measured rate; the download not included): 10e9 tokens at {hf_rate[1] / 1e6:.2f} M tokens/s = "
          f"{10e9 / hf_rate[1] / 60:.0f} min; ~40 GB of text at {hf_rate[0] / 1e6:.1f} MB/s = {40e9 / hf_rate[0] / 60:.0f} min")


if __name__ == "__main__":
    main()
