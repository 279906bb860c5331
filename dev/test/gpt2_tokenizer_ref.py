"""The reference GPT-2 tokenizer for tests and benchmarks: tiktoken's r50k ("gpt2") encoding,
built from the local encoder.json / vocab.bpe so that nothing is downloaded.

This mirrors tiktoken's own loader (tiktoken/load.py, data_gym_to_mergeable_bpe_ranks):
the 256 single bytes get ranks 0..255 in GPT-2's byte-alphabet order, merge line i of
vocab.bpe gets rank 256 + i, and the result is checked against encoder.json.
"""
import json
import os

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = 50256


def data_dir():
    """$FSDP_DATA, else ../shared/data (scripts run from the repository root)."""
    return os.environ.get("FSDP_DATA") or os.path.join("..", "shared", "data")


def _byte_alphabet():
    """GPT-2's bytes_to_unicode, as (rank order of bytes, char -> byte)."""
    rank_to_byte = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    char_to_byte = {chr(b): b for b in rank_to_byte}
    n = 0
    for b in range(256):
        if b not in rank_to_byte:
            rank_to_byte.append(b)
            char_to_byte[chr(256 + n)] = b
            n += 1
    return rank_to_byte, char_to_byte


def mergeable_ranks(encoder_json, vocab_bpe):
    rank_to_byte, char_to_byte = _byte_alphabet()

    def to_bytes(s):
        return bytes(char_to_byte[c] for c in s)

    ranks = {bytes([b]): i for i, b in enumerate(rank_to_byte)}
    with open(vocab_bpe, encoding="utf-8") as f:
        merges = [tuple(line.split()) for line in f.read().split("\n")[1:-1]]
    n = len(ranks)
    for a, b in merges:
        ranks[to_bytes(a) + to_bytes(b)] = n
        n += 1
    with open(encoder_json, encoding="utf-8") as f:
        enc = {to_bytes(k): v for k, v in json.load(f).items()}
    enc.pop(b"<|endoftext|>", None)
    assert ranks == enc, "encoder.json and vocab.bpe disagree"
    return ranks


def load_tiktoken_gpt2(gpt2_dir=None):
    import tiktoken

    gpt2_dir = gpt2_dir or os.path.join(data_dir(), "gpt2")
    ranks = mergeable_ranks(os.path.join(gpt2_dir, "encoder.json"), os.path.join(gpt2_dir, "vocab.bpe"))
    return tiktoken.Encoding(
        name="gpt2_local",
        pat_str=GPT2_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": EOT},
    )
