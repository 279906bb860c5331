"""Tokenizer throughput, one thread: the C encoder (./tokenize_text --bench) against tiktoken's
GPT-2 encoding (built from the same local encoder.json / vocab.bpe) on the same text, in the
same run. Rounds alternate the two so that both see the same machine load; the best round of
each counts. MB/s are computed from each side's own thread CPU time (steadier on a shared
machine) and from wall time.

    $PYTHON dev/bench/bench_tokenizer.py TOOL TEXT_FILE [ROUNDS] [REPEAT]
"""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test"))
from gpt2_tokenizer_ref import data_dir, load_tiktoken_gpt2  # noqa: E402


def main():
    tool, path = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    repeat = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    gpt2 = os.path.join(data_dir(), "gpt2")
    enc = load_tiktoken_gpt2(gpt2)
    import tiktoken

    with open(path, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8")
    nbytes = len(raw)
    ours_cpu = ours_wall = theirs_cpu = theirs_wall = 0.0
    ours_tokens = theirs_tokens = None
    for _ in range(rounds):
        out = subprocess.run([tool, "--encoder", os.path.join(gpt2, "encoder.json"), "--vocab", os.path.join(gpt2, "vocab.bpe"),
                              "--bench", "--threads", "1", "--repeat", str(repeat), path], capture_output=True, text=True, check=True).stdout
        m = dict(re.findall(r"(\S+) ([0-9.]+)", out))
        ours_cpu = max(ours_cpu, float(m["cpu_MB/s"]))
        ours_wall = max(ours_wall, float(m["wall_MB/s"]))
        ours_tokens = int(m["tokens"])
        for _ in range(repeat):
            c0, w0 = time.thread_time(), time.perf_counter()
            ids = enc.encode_ordinary(text)
            c1, w1 = time.thread_time(), time.perf_counter()
            theirs_cpu = max(theirs_cpu, nbytes / (c1 - c0) / 1e6)
            theirs_wall = max(theirs_wall, nbytes / (w1 - w0) / 1e6)
            theirs_tokens = len(ids)
    print(f"tokenizer throughput, one thread: {os.path.basename(path)} ({nbytes / 1e6:.2f} MB), best of {rounds} x {repeat}")
    print(f"  fsdp.c tokenizer:  {ours_cpu:7.2f} MB/s (cpu time)  {ours_wall:7.2f} MB/s (wall)  {ours_tokens} tokens")
    print(f"  tiktoken {tiktoken.__version__:8s}: {theirs_cpu:7.2f} MB/s (cpu time)  {theirs_wall:7.2f} MB/s (wall)  {theirs_tokens} tokens")
    ratio = ours_cpu / theirs_cpu
    print(f"  ratio fsdp.c / tiktoken: {ratio:.2f}x cpu time, {ours_wall / theirs_wall:.2f}x wall (target >= 1.0x)")
    if ours_tokens != theirs_tokens:
        print(f"  WARNING: token counts differ ({ours_tokens} vs {theirs_tokens})")
        sys.exit(1)


if __name__ == "__main__":
    main()
