#!/usr/bin/env python3
"""Corpus -> GPT-2 token shards in llm.c's format, through ./tokenize_text (our tokenizer).

    .venv/bin/python data/prepare.py --preset fineweb10B          # -> data/fineweb10B/fineweb_{val,train}_*.bin
    .venv/bin/python data/prepare.py --hf HuggingFaceFW/fineweb --name sample-10BT -o data/fineweb10B/fineweb
    .venv/bin/python data/prepare.py --hf roneneldan/TinyStories --val-split validation -o data/tinystories/tinystories
    .venv/bin/python data/prepare.py corpus/*.parquet -o data/corpus/corpus
    .venv/bin/python data/prepare.py corpus/part-*.jsonl.zst --field text -o data/corpus/corpus
    .venv/bin/python data/prepare.py --hellaswag                  # -> data/hellaswag/hellaswag_val.bin

Sources: a Hugging Face dataset, streamed (datasets' load_dataset(..., streaming=True): never
the whole corpus on disk or in memory; a local dataset directory works the same way), or
local files: Parquet (read with pyarrow, a record batch at a time), JSON Lines or text, each
optionally .gz / .zst (handed to tokenize_text, which reads and decompresses them itself).
Parquet and Hugging Face documents are streamed to tokenize_text's standard input as framed
records (tokenize_text --framed), straight from the Arrow buffers.

Shards: as llm.c's dev/data/fineweb.py: every document preceded by <|endoftext|>, shards of
exactly --shard-tokens tokens (a document may straddle two), the first --val-tokens tokens
(default: one shard) are the validation split: PREFIX_val_000000.bin, PREFIX_train_000001.bin,
... With --val-split SPLIT (a Hugging Face dataset that ships one), that split's documents
are the validation shards instead.

Resuming: a rerun of the same command continues after the last complete shard and writes the
same shards as an uninterrupted run. tokenize_text records after every shard where the next
one begins (PREFIX.state.json: shards, tokens, documents done, tokens of the straddling
document already written); this script records what it needs to reopen the source there
(PREFIX.prepare.json: the source and settings, and for a Hugging Face stream a checkpoint of
the dataset iterator, IterableDataset.state_dict(), taken at or before that document).
A rerun with other settings, or into a directory holding shards it did not write, is refused.

Progress (on a terminal, or with --progress): documents, tokens, MB/s and an ETA, from
tokenize_text --progress; the ETA uses the Parquet row count, the dataset's example count
when its card has one, a preset's expected tokens, or the share of input bytes read.

HellaSwag (--hellaswag [JSONL]): a multiple-choice set in HellaSwag's jsonl schema (ctx,
endings, label) becomes llm.c's eval file (dataloader/evalset.h), each example rendered as
llm.c's dev/data/hellaswag.py renders it (the context, then " " + each ending) and tokenized by
tokenize_text; without JSONL the validation set is downloaded next to -o's file.

Run with --help for the options.
"""
import argparse
import copy
import glob
import gzip
import hashlib
import http.client
import importlib
import io
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import zlib
from array import array

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROG = "prepare.py"
FRAME_END = struct.pack("<Q", 2**64 - 1)
STATE_VERSION = 1
HF_CHECKPOINTS_KEPT = 4

# As llm.c's dev/data/fineweb.py (directories, names, 1e8-token shards, the first shard val);
# expect_tokens is the sample's GPT-2 token count (its name), for the ETA only.
PRESETS = {
    "fineweb10B": dict(hf="HuggingFaceFW/fineweb", name="sample-10BT", dir="fineweb10B", prefix="fineweb", expect_tokens=10 * 10**9),
    "fineweb100B": dict(hf="HuggingFaceFW/fineweb", name="sample-100BT", dir="fineweb100B", prefix="fineweb", expect_tokens=100 * 10**9),
    "edu_fineweb10B": dict(hf="HuggingFaceFW/fineweb-edu", name="sample-10BT", dir="edu_fineweb10B", prefix="edu_fineweb",
                           expect_tokens=10 * 10**9),
    "edu_fineweb100B": dict(hf="HuggingFaceFW/fineweb-edu", name="sample-100BT", dir="edu_fineweb100B", prefix="edu_fineweb",
                            expect_tokens=100 * 10**9),
    "tinystories": dict(hf="roneneldan/TinyStories", name=None, dir="tinystories", prefix="tinystories", val_split="validation"),
}
COMPRESSED = (".gz", ".gzip", ".zst", ".zstd")
KINDS = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".txt": "text", ".text": "text"}


class Fail(Exception):
    """An error for the user: printed as one line, exit status 1."""


class InputRefused(Exception):
    """tokenize_text refused an input's content (its exit status 2) in one line of its own:
    exit status 1 with nothing added (no "run the same command again": a rerun stops there too)."""


# The pip package of each optional module (Parquet input, numpy for its buffers, --hf).
PIP_PACKAGES = {"pyarrow": "pyarrow", "numpy": "numpy", "datasets": "datasets"}


def need(module, what):
    """Imports an optional module, or fails in one line with the pip command that installs it
    into the Python running this script (scripts/setup.sh puts them in .venv)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
        raise Fail(f"{what} needs the Python module '{top}', which {sys.executable} cannot import ({e}): "
                   f"{sys.executable} -m pip install {PIP_PACKAGES[top]}")


def say(msg):
    print(f"{PROG}: {msg}", flush=True)


def file_kind(path):
    base = path
    for c in COMPRESSED:
        if base.endswith(c):
            base = base[: -len(c)]
            break
    ext = os.path.splitext(base)[1].lower()
    if ext not in KINDS:
        raise Fail(f"{path}: unknown file type '{ext or os.path.basename(path)}' (expected .parquet, .jsonl, .json or .txt, "
                   f"optionally .gz or .zst)")
    if KINDS[ext] == "parquet" and base != path:
        raise Fail(f"{path}: compressed Parquet is not supported (Parquet compresses its pages itself)")
    return KINDS[ext]


def expand_inputs(args):
    """Files in the order given; a directory or a glob gives its files sorted."""
    files = []
    for a in args:
        if os.path.isdir(a):
            found = sorted(p for p in glob.glob(os.path.join(a, "**", "*"), recursive=True) if os.path.isfile(p))
            found = [p for p in found if not os.path.basename(p).startswith(".")]
            if not found:
                raise Fail(f"{a}: no files in this directory")
            files += found
        elif any(c in a for c in "*?["):
            found = sorted(glob.glob(a))
            if not found:
                raise Fail(f"{a}: no files match")
            files += found
        else:
            if not os.path.exists(a):
                raise Fail(f"{a}: no such file")
            if not os.access(a, os.R_OK):
                raise Fail(f"{a}: cannot read (permission denied)")
            files.append(a)
    return files


# ---- documents as framed records ------------------------------------------------------------

def text_chunks(column, where):
    """The chunks of an Arrow string column as (offsets, data buffer) with int64 offsets."""
    np = need("numpy", "Parquet and --hf input")
    pa = need("pyarrow", "Parquet and --hf input")

    chunks = column.chunks if hasattr(column, "chunks") else [column]
    for c in chunks:
        t = c.type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", lambda _: False)(t)):
            raise Fail(f"{where}: the column is {t}, not a string")
        if c.null_count:
            first = c.is_null().index(True).as_py()
            raise Fail(f"{where}: row {first} of a batch is null, not a string")
        if not pa.types.is_large_string(t):
            c = c.cast(pa.large_string())
        n = len(c)
        if n == 0:
            continue
        bufs = c.buffers()
        offsets = np.frombuffer(bufs[1], dtype=np.int64, count=n + 1, offset=c.offset * 8)
        data = memoryview(bufs[2]) if bufs[2] is not None else memoryview(b"")
        yield offsets, data


class Frames:
    """Writes documents to tokenize_text's standard input as framed records."""

    def __init__(self, pipe):
        self.pipe = pipe
        self.docs = 0
        self.bytes = 0

    def write_column(self, column, where, limit=None):
        """Writes the column's documents (at most limit); returns how many were written."""
        w = self.pipe.write
        pack = struct.Struct("<Q").pack
        done = 0
        for offsets, data in text_chunks(column, where):
            o = offsets.tolist()
            n = len(o) - 1
            if limit is not None:
                n = min(n, limit - done)
            for i in range(n):
                a, b = o[i], o[i + 1]
                w(pack(b - a))
                w(data[a:b])
            self.bytes += o[n] - o[0]
            done += n
            self.docs += n
            if limit is not None and done >= limit:
                break
        return done

    def end(self):
        self.pipe.write(FRAME_END)
        self.pipe.flush()
        self.pipe.close()


# ---- sources -----------------------------------------------------------------------------------

class ParquetSource:
    """Local Parquet files, a record batch at a time (pyarrow); resumable to any row."""

    def __init__(self, files, field):
        pq = need("pyarrow.parquet", "Parquet input")
        self.files, self.field = files, field
        self.meta = []
        for f in files:
            try:
                pf = pq.ParquetFile(f)
            except Exception as e:  # noqa: BLE001 (pyarrow raises several kinds)
                raise Fail(f"{f}: not a readable Parquet file: {e}")
            names = pf.schema_arrow.names
            if field not in names:
                raise Fail(f"{f}: no column '{field}' (columns: {', '.join(names)}); use --field")
            self.meta.append([pf.metadata.row_group(i).num_rows for i in range(pf.metadata.num_row_groups)])
        self.total_docs = sum(sum(m) for m in self.meta)

    def describe(self):
        return {"kind": "parquet", "field": self.field, "files": [[os.path.abspath(f), os.path.getsize(f)] for f in self.files]}

    def stream(self, frames, start, limit, on_batch):
        """Sends documents start, start+1, ... (at most limit of them) to frames."""
        pq = need("pyarrow.parquet", "Parquet input")
        skip, sent = start, 0
        for f, groups in zip(self.files, self.meta):
            if skip >= sum(groups):
                skip -= sum(groups)
                continue
            first = 0
            while skip >= groups[first]:  # whole row groups before the resume point are not read
                skip -= groups[first]
                first += 1
            pf = pq.ParquetFile(f)
            for batch in pf.iter_batches(batch_size=8192, row_groups=list(range(first, len(groups))), columns=[self.field]):
                col = batch.column(0)
                if skip:
                    cut = min(skip, len(col))
                    col = col.slice(cut)
                    skip -= cut
                left = None if limit is None else limit - sent
                sent += frames.write_column(col, f"{f}: column '{self.field}'", left)
                on_batch(start + sent, None)
                if limit is not None and sent >= limit:
                    return


class HFSource:
    """A Hugging Face dataset, streamed; resumable from IterableDataset.state_dict()."""

    def __init__(self, path, name, split, field, data_files):
        need("datasets", "--hf")
        self.path, self.name, self.split, self.field, self.data_files = path, name, split, field, data_files
        self.ds = self.open()
        cols = self.ds.column_names
        if cols is not None and field not in cols:
            raise Fail(f"{self.where()}: no column '{field}' (columns: {', '.join(cols)}); use --field")
        self.total_docs = None
        try:
            splits = self.ds.info.splits
            if splits and split in splits and splits[split].num_examples:
                self.total_docs = int(splits[split].num_examples)
        except Exception:  # noqa: BLE001 (only for the ETA)
            pass

    def where(self):
        return f"{self.path}" + (f" ({self.name})" if self.name else "") + f", split {self.split}"

    def open(self):
        datasets = need("datasets", "--hf")
        kw = dict(split=self.split, streaming=True)
        if self.name:
            kw["name"] = self.name
        if self.data_files:
            kw["data_files"] = self.data_files
        try:
            ds = datasets.load_dataset(self.path, **kw)
        except Exception as e:  # noqa: BLE001 (network, missing dataset or split: one line for the user)
            raise Fail(f"{self.where()}: cannot open the dataset: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        if ds.column_names is not None and self.field in ds.column_names:
            ds = ds.select_columns([self.field])
        return ds.with_format("arrow")

    def describe(self):
        return {"kind": "hf", "path": self.path, "name": self.name, "split": self.split, "field": self.field,
                "data_files": self.data_files}

    def stream(self, frames, start, limit, on_batch, checkpoint=None):
        """Sends documents start, ... to frames. checkpoint: (documents, state_dict) at or
        before start, from which the iterator is reopened instead of reading from the top."""
        ds = self.ds
        at = 0
        if checkpoint:
            at, st = checkpoint
            ds.load_state_dict(st)
        skip, sent = start - at, 0
        it = ds.iter(batch_size=1000)
        try:
            for table in it:
                if self.field not in table.column_names:
                    raise Fail(f"{self.where()}: no column '{self.field}' (columns: {', '.join(table.column_names)}); use --field")
                col = table.column(self.field)
                if skip:
                    cut = min(skip, len(col))
                    col = col.slice(cut)
                    skip -= cut
                left = None if limit is None else limit - sent
                sent += frames.write_column(col, f"{self.where()}: column '{self.field}'", left)
                if not skip:
                    on_batch(start + sent, ds.state_dict())
                if limit is not None and sent >= limit:
                    break
        finally:
            if hasattr(it, "close"):
                it.close()


# ---- the run ------------------------------------------------------------------------------------

def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise Fail(f"{path}: unreadable ({e}); delete it to start over")


def write_json(path, obj):
    """Atomically: a temporary file, fsync, rename."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def process_alive(pid):
    """A zombie counts as gone: where nothing reaps orphans (a container's init), a killed
    tokenize_text stays one."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def remove_stale_tmp(prefix):
    """Temporary shards and state files left by a killed run (whose process is gone)."""
    for p in glob.glob(f"{glob.escape(prefix)}_*.bin.tmp.*") + glob.glob(f"{glob.escape(prefix)}*.json.tmp.*"):
        pid = p.rsplit(".", 1)[1]
        if pid.isdigit() and int(pid) != os.getpid() and process_alive(int(pid)):
            continue
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


def shards_of(prefix):
    return sorted(glob.glob(f"{glob.escape(prefix)}_val*.bin") + glob.glob(f"{glob.escape(prefix)}_train*.bin"))


def check_shard(path):
    """Header and size of a shard (llm.c's format); returns its token count."""
    with open(path, "rb") as f:
        head = f.read(1024)
    if len(head) < 1024:
        raise Fail(f"{path}: shorter than a shard header")
    magic, version, n = struct.unpack("<3i", head[:12])
    if magic != 20240520 or version != 1 or os.path.getsize(path) != 1024 + 2 * n:
        raise Fail(f"{path}: not a complete shard (magic {magic}, version {version}, {n} tokens, {os.path.getsize(path)} bytes)")
    return n


def ensure_tool(tool, given):
    """tokenize_text: the one given (--tokenize-text), else the repository's, built if missing."""
    if given:
        if not os.access(tool, os.X_OK):
            raise Fail(f"{tool}: not an executable")
        return
    if not os.access(tool, os.X_OK):
        say(f"building {tool}")
        r = subprocess.run(["make", "-C", ROOT, "tokenize_text"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise Fail(f"cannot build tokenize_text (make tokenize_text: {r.stderr.strip().splitlines()[-1:]})")


def check_writable(out):
    """-o's directory is created and a file created and removed there now, not at the first
    output file (which would end in a traceback)."""
    d = os.path.dirname(out) or "."
    probe = f"{out}.probe.{os.getpid()}"
    if os.path.exists(d) and not os.path.isdir(d):
        raise Fail(f"-o {out}: {d} is not a directory")
    try:
        os.makedirs(d, exist_ok=True)
        with open(probe, "w"):
            pass
        os.unlink(probe)
    except OSError as e:
        raise Fail(f"-o {out}: cannot write there ({e.filename}: {e.strerror})")


class Run:
    def __init__(self, args):
        self.args = args
        self.prefix = args.out
        self.meta_path = f"{self.prefix}.prepare.json"
        self.tool = args.tokenize_text or os.path.join(ROOT, "tokenize_text")
        self.child = None

    def tool_args(self, state, val_tokens, first_doc, expect_docs, expect_tokens):
        a = self.args
        cmd = [self.tool, "-o", self.prefix, "--shard-tokens", str(a.shard_tokens), "--val-tokens", str(val_tokens),
               "--state", state, "--resume"]
        if first_doc:
            cmd += ["--first-doc", str(first_doc)]
        if a.max_docs is not None:
            cmd += ["--max-docs", str(a.max_docs)]
        if a.threads:
            cmd += ["--threads", str(a.threads)]
        if a.encoder:
            cmd += ["--encoder", a.encoder]
        if a.vocab:
            cmd += ["--vocab", a.vocab]
        if self.progress:
            cmd.append("--progress")
            if expect_docs:
                cmd += ["--expect-docs", str(min(expect_docs, a.max_docs) if a.max_docs is not None else expect_docs)]
            elif expect_tokens:
                cmd += ["--expect-tokens", str(expect_tokens)]
        return cmd

    def follow(self, stream, on_shard):
        """tokenize_text's stdout: one line per shard (and a summary); passed on."""
        tty = sys.stdout.isatty() and self.progress
        for line in stream:
            line = line.rstrip("\n")
            print(("\r\033[K" if tty else "") + line, flush=True)
            if line.endswith(" tokens") and ": " in line:
                on_shard()

    def run_tool(self, cmd, feed=None, on_shard=lambda: None):
        """Runs tokenize_text; feed(pipe) writes its framed input. Returns when it is done."""
        self.child = subprocess.Popen(cmd, stdin=subprocess.PIPE if feed else subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      bufsize=1 << 20)
        out = threading.Thread(target=self.follow, args=(io.TextIOWrapper(self.child.stdout), on_shard), daemon=True)
        out.start()
        try:
            if feed:
                try:
                    feed(self.child.stdin)
                except BrokenPipeError:
                    pass  # tokenize_text stopped: its own message says why
                except BaseException:
                    self.stop_child()  # before its input closes, so that it says nothing of the cut
                    raise
                finally:
                    try:
                        self.child.stdin.close()
                    except BrokenPipeError:
                        pass
            rc = self.child.wait()
        except BaseException:
            self.stop_child()
            raise
        finally:
            out.join(timeout=5)
        if rc in (-signal.SIGINT, -signal.SIGTERM):
            raise KeyboardInterrupt  # Ctrl-C reached tokenize_text too (or a batch system stopped it)
        if rc == 2:
            raise InputRefused()
        if rc != 0:
            raise Fail(f"tokenize_text failed (status {rc}); {self.status()}")

    def stop_child(self):
        """A failure of ours (or Ctrl-C): SIGTERM makes tokenize_text remove its temporary
        shard; the framed stream never got its end record, so no partial shard is written."""
        if self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)
        self.child.wait()

    def status(self):
        done = [p for p in shards_of(self.prefix)]
        return f"{len(done)} complete shard{'s' if len(done) != 1 else ''} in {os.path.dirname(self.prefix) or '.'}; " \
               f"run the same command again to continue"

    def source(self):
        a = self.args
        if a.hf:
            return HFSource(a.hf, a.name, a.split, a.field, a.data_files or None), "hf"
        files = expand_inputs(a.inputs)
        kinds = sorted({file_kind(f) for f in files})
        if len(kinds) > 1:
            raise Fail(f"the inputs mix {' and '.join(kinds)} files; prepare each kind into its own --out")
        if kinds[0] == "parquet":
            return ParquetSource(files, a.field), "parquet"
        return files, kinds[0]

    def main(self):
        a = self.args
        self.progress = a.progress if a.progress is not None else sys.stderr.isatty()
        src, kind = self.source()
        check_writable(self.prefix)
        describe = src.describe() if kind in ("hf", "parquet") else \
            {"kind": kind, "field": a.field if kind == "jsonl" else None, "files": [[os.path.abspath(f), os.path.getsize(f)] for f in src]}
        val_split = a.val_split if kind == "hf" else None
        settings = {"source": describe, "shard_tokens": a.shard_tokens, "val_tokens": a.val_tokens, "val_split": val_split,
                    "max_docs": a.max_docs}
        meta = read_json(self.meta_path)
        if meta is None:
            if shards_of(self.prefix):
                raise Fail(f"{self.prefix}_*.bin exist but {self.meta_path} does not: shards this script did not write; "
                           f"remove them or choose another --out")
            meta = {"format": "prepare.py state", "version": STATE_VERSION, "settings": settings, "hf_checkpoints": {}}
            write_json(self.meta_path, meta)
        elif meta.get("settings") != settings:
            old = meta.get("settings", {})
            diff = [k for k in sorted(set(old) | set(settings)) if old.get(k) != settings.get(k)]
            raise Fail(f"{self.meta_path}: the shards there were made with other settings ({', '.join(diff)} differ); "
                       f"use the same command, another --out, or delete them to start over")
        self.meta = meta
        phases = [("val", val_split), ("train", a.split)] if val_split else [("all", a.split)]
        ensure_tool(self.tool, self.args.tokenize_text)
        say(f"{self.describe(describe, val_split)} -> {self.prefix}_{{val,train}}_*.bin, {a.shard_tokens:,} tokens per shard")
        for phase, split in phases:
            self.phase(phase, split, src, kind)
        total = 0
        for p in shards_of(self.prefix):
            total += check_shard(p)
        say(f"complete: {len(shards_of(self.prefix))} shards, {total:,} tokens in {os.path.dirname(self.prefix) or '.'}")

    def describe(self, d, val_split):
        if d["kind"] == "hf":
            s = d["path"] + (f" ({d['name']})" if d["name"] else "") + f", split {d['split']}"
            return s + (f", validation from split {val_split}" if val_split else "")
        n = len(d["files"])
        return f"{n} {d['kind']} file{'s' if n != 1 else ''}"

    def phase(self, phase, split, src, kind):
        a = self.args
        suffix = "" if phase == "all" else f".{phase}"
        state_path = f"{self.prefix}{suffix}.state.json"
        val_tokens = a.val_tokens if phase == "all" else (2**61 if phase == "val" else 0)
        st = read_json(state_path)
        if st and st.get("complete"):
            say(f"{state_path}: complete ({st['shards']} shards, {st['tokens']:,} tokens)")
            return
        remove_stale_tmp(self.prefix)
        done_docs = st["documents"] if st else 0
        expect_tokens = PRESETS[a.preset].get("expect_tokens") if a.preset and phase != "val" else None
        if kind in ("jsonl", "text"):
            # tokenize_text reads the files itself, and on a resume skips what is in shards
            cmd = self.tool_args(state_path, val_tokens, 0, None, None)
            if kind == "jsonl":
                cmd += ["--jsonl-field", a.field]
            if a.split_on:
                cmd += ["--split-on", a.split_on]
            self.run_tool(cmd + ["--"] + src)
            return
        if kind == "hf" and split != src.split:
            src = HFSource(src.path, src.name, split, src.field, src.data_files)
        cps = self.meta["hf_checkpoints"].get(phase, []) if kind == "hf" else []
        checkpoint = None
        for c in cps:  # the newest taken at or before the resume point
            if c["documents"] <= done_docs:
                checkpoint = (c["documents"], c["state"])
        if done_docs:
            say(f"resuming{'' if phase == 'all' else ' the ' + phase + ' split'} at document {done_docs:,}"
                + (f" (dataset iterator reopened at document {checkpoint[0]:,})" if checkpoint else ""))
        pending = []  # (documents sent, iterator state) not yet known to be in shards
        lock = threading.Lock()

        def on_batch(docs_sent, state):
            if state is not None:
                with lock:
                    pending.append((docs_sent, copy.deepcopy(state)))
                    del pending[:-64]

        def on_shard():
            # the shard is committed and its state written: keep a checkpoint at or before it
            s = read_json(state_path)
            if not s or kind != "hf":
                return
            with lock:
                best = [p for p in pending if p[0] <= s["documents"]]
                if not best:
                    return
                keep = [c for c in self.meta["hf_checkpoints"].get(phase, []) if c["documents"] < best[-1][0]]
                keep.append({"documents": best[-1][0], "state": best[-1][1]})
                self.meta["hf_checkpoints"][phase] = keep[-HF_CHECKPOINTS_KEPT:]
                pending[:] = [p for p in pending if p[0] > best[-1][0]]
                write_json(self.meta_path, self.meta)

        def feed(pipe):
            frames = Frames(pipe)
            limit = None if a.max_docs is None else max(0, a.max_docs - done_docs)
            if limit != 0:
                if kind == "hf":
                    src.stream(frames, done_docs, limit, on_batch, checkpoint)
                else:
                    src.stream(frames, done_docs, limit, on_batch)
            frames.end()

        cmd = self.tool_args(state_path, val_tokens, done_docs, src.total_docs, expect_tokens) + ["--framed", "-"]
        self.run_tool(cmd, feed, on_shard)


# ---- --hellaswag: a multiple-choice eval set in llm.c's eval format ------------------------------

HELLASWAG_URL = "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl"
EVAL_MAGIC, EVAL_VERSION = 20240522, 1  # dataloader/evalset.h
EVAL_MAX_COMPLETIONS = 16
EVAL_MAX_EXAMPLES = 65535      # the example index is a uint16
EVAL_MAX_EXAMPLE_BYTES = 65534  # an example's byte count is a uint16 of whole uint16s
EOT = 50256


def hellaswag_source(given, out):
    """The jsonl to read: the file given, or HellaSwag's validation set downloaded next to the
    output (once: a download already there is used; it appears whole or not at all)."""
    if given:
        if not os.path.isfile(given):
            raise Fail(f"{given}: {'not a file' if os.path.exists(given) else 'no such file'}")
        return given
    dest = os.path.join(os.path.dirname(out) or ".", "hellaswag_val.jsonl")
    if os.path.isfile(dest):
        say(f"hellaswag: {dest} is there already (delete it to download it again)")
        return dest
    say(f"hellaswag: downloading {HELLASWAG_URL} -> {dest}")
    tmp = f"{dest}.tmp.{os.getpid()}"
    try:
        with urllib.request.urlopen(HELLASWAG_URL, timeout=60) as r, open(tmp, "wb") as f:
            shutil.copyfileobj(r, f)
        os.replace(tmp, dest)
    except (OSError, http.client.HTTPException) as e:
        if isinstance(e, urllib.error.HTTPError):
            reason = f"HTTP {e.code} {e.reason}"
        elif isinstance(e, urllib.error.URLError):
            reason = e.reason  # the network's error (name resolution, refused, timed out)
        else:
            reason = e
        raise Fail(f"cannot download {HELLASWAG_URL}: {reason}; fetch it elsewhere and pass the file: "
                   f"prepare.py --hellaswag FILE")
    finally:
        if os.path.exists(tmp):  # a failed or interrupted download leaves nothing
            os.unlink(tmp)
    return dest


def read_hellaswag(path):
    """The examples of a HellaSwag-schema jsonl (.gz too): (line, label, ctx, endings) each,
    every line checked; and the SHA-256 of the file as stored."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise Fail(f"{path}: cannot read ({e.strerror})")
    sha = hashlib.sha256(raw).hexdigest()
    if path.endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise Fail(f"{path}: not readable gzip data ({e})")
    examples = []
    for lineno, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            ex = json.loads(line)
        except UnicodeDecodeError as e:
            raise Fail(f"{where}: not UTF-8 ({e.reason} at byte {e.start})")
        except ValueError as e:
            raise Fail(f"{where}: malformed JSON ({getattr(e, 'msg', e)}, column {getattr(e, 'colno', '?')})")
        if not isinstance(ex, dict):
            raise Fail(f"{where}: not a JSON object")
        ctx, endings, label = ex.get("ctx"), ex.get("endings"), ex.get("label")
        if not isinstance(ctx, str):
            raise Fail(f"{where}: " + ("no \"ctx\" field" if "ctx" not in ex else "\"ctx\" is not a string"))
        if not ctx:
            raise Fail(f"{where}: \"ctx\" is empty (an example needs a context)")
        if not isinstance(endings, list) or not all(isinstance(e, str) for e in endings) \
                or not 1 <= len(endings) <= EVAL_MAX_COMPLETIONS:
            raise Fail(f"{where}: " + ("no \"endings\" field" if "endings" not in ex else
                                       f"\"endings\" is not a list of 1 to {EVAL_MAX_COMPLETIONS} strings"))
        if "label" not in ex:
            raise Fail(f"{where}: no \"label\" field (HellaSwag's test set has none: use the validation set)")
        if isinstance(label, str) and re.fullmatch(r"[0-9]+", label):
            label = int(label)  # some copies of the data write it as a string
        if isinstance(label, bool) or not isinstance(label, int):
            raise Fail(f"{where}: \"label\" is {json.dumps(ex['label'])}, not an integer")
        if not 0 <= label < len(endings):
            raise Fail(f"{where}: label {label} out of range for {len(endings)} endings")
        examples.append((lineno, label, ctx, endings))
        if len(examples) > EVAL_MAX_EXAMPLES:
            raise Fail(f"{path}: more than {EVAL_MAX_EXAMPLES} examples, the most llm.c's eval format holds")
    if not examples:
        raise Fail(f"{path}: no examples")
    return examples, sha


class EvalProgress:
    """The examples tokenized so far, on one line of a terminal (or every 2,000 examples as
    lines, with --progress elsewhere)."""

    def __init__(self, total, on):
        self.total, self.on, self.tty = total, on, sys.stderr.isatty()
        self.shown = 0

    def update(self, done, last=False):
        if not self.on or (not last and done - self.shown < (100 if self.tty else 2000)):
            return
        self.shown = done
        line = f"{PROG}: hellaswag: {done:,} / {self.total:,} examples tokenized"
        print(("\r\033[K" + line) if self.tty else line, end="\n" if last or not self.tty else "", file=sys.stderr, flush=True)


def tokenize_records(args, tool, texts, on_record):
    """Every text tokenized by tokenize_text (our tokenizer) as one framed record: the dump is
    <|endoftext|> before each record's tokens. With --allow-special off, a literal
    "<|endoftext|>" in a text is ordinary text (never 50256), so the stream splits there
    unambiguously. on_record(count) after each complete record; returns the token lists."""
    cmd = [tool, "--dump", "--framed", "--format", "int32"]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.encoder:
        cmd += ["--encoder", args.encoder]
    if args.vocab:
        cmd += ["--vocab", args.vocab]
    child = subprocess.Popen(cmd + ["-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def feed():
        pack = struct.Struct("<Q").pack
        try:
            for t in texts:
                b = t.encode("utf-8", "surrogatepass")
                child.stdin.write(pack(len(b)))
                child.stdin.write(b)
            child.stdin.write(FRAME_END)
            child.stdin.close()
        except (BrokenPipeError, ValueError):
            pass  # tokenize_text stopped (its own message says why) or was stopped by us

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    records, rest = [], b""
    try:
        while True:
            chunk = child.stdout.read1(1 << 20)
            if not chunk:
                break
            chunk, cut = rest + chunk, (len(rest) + len(chunk)) // 4 * 4
            chunk, rest = chunk[:cut], chunk[cut:]
            ids = array("i", chunk)
            if sys.byteorder != "little":
                ids.byteswap()
            for t in ids.tolist():
                if t == EOT:
                    records.append([])
                    if len(records) > 1:
                        on_record(len(records) - 1)
                elif records:
                    records[-1].append(t)
                else:
                    raise Fail(f"tokenize_text's dump does not begin with <|endoftext|> (token {t})")
        rc = child.wait()
    except BaseException:
        if child.poll() is None:
            child.kill()
        child.wait()
        raise
    finally:
        feeder.join(timeout=5)
    if rc != 0:
        raise Fail(f"tokenize_text failed (status {rc})")
    if len(records) != len(texts) or rest:
        raise Fail(f"tokenize_text gave {len(records)} records for {len(texts)} texts{' and a partial id' if rest else ''}")
    on_record(len(records))
    return records


def write_evalfile(path, examples):
    """(index, label, context tokens, [completion tokens]) as llm.c's eval file, atomically
    (a temporary file, fsync, rename). Returns the longest example's bytes."""
    stream, longest = array("H"), 0
    for index, label, ctx, ends in examples:
        start = len(stream)
        stream.extend([65535, 0, index, label, len(ends), len(ctx)])
        stream.extend(ctx)
        for e in ends:
            stream.append(len(e))
            stream.extend(e)
        stream[start + 1] = 2 * (len(stream) - start)
        longest = max(longest, stream[start + 1])
    if sys.byteorder != "little":
        stream.byteswap()
    header = struct.pack("<256i", EVAL_MAGIC, EVAL_VERSION, len(examples), longest, *([0] * 252))
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(header)
            f.write(stream.tobytes())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        raise Fail(f"{e.filename or path}: cannot write: {e.strerror}")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return longest


def prepare_hellaswag(args):
    out = args.out
    if os.path.isdir(out):
        raise Fail(f"-o {out}: a directory (give the file to write, e.g. {os.path.join(out, 'hellaswag_val.bin')})")
    check_writable(out)
    src = hellaswag_source(args.hellaswag, out)
    examples, sha = read_hellaswag(src)
    say(f"hellaswag: {src}: sha256 {sha}, {len(examples):,} examples")
    tool = args.tokenize_text or os.path.join(ROOT, "tokenize_text")
    ensure_tool(tool, args.tokenize_text)
    # llm.c's rendering (dev/data/hellaswag.py): the context as it is, each ending after a space
    texts, first = [], []
    for _, _, ctx, endings in examples:
        first.append(len(texts))
        texts.append(ctx)
        texts += [" " + e for e in endings]
    ends_at = [f + 1 + len(ex[3]) for f, ex in zip(first, examples)]  # records after each example
    progress = EvalProgress(len(examples), args.progress if args.progress is not None else sys.stderr.isatty())
    done = 0

    def on_record(n):
        nonlocal done
        while done < len(examples) and ends_at[done] <= n:
            done += 1
        progress.update(done, last=done == len(examples))

    records = tokenize_records(args, tool, texts, on_record)
    rows, out_examples = 0, []
    for index, ((lineno, label, _, endings), f) in enumerate(zip(examples, first)):
        ctx, ends = records[f], records[f + 1: f + 1 + len(endings)]
        nbytes = 2 * (6 + len(ctx) + sum(1 + len(e) for e in ends))
        if nbytes > EVAL_MAX_EXAMPLE_BYTES:
            raise Fail(f"{src}:{lineno}: the example takes {nbytes:,} bytes in llm.c's eval format, more than its "
                       f"{EVAL_MAX_EXAMPLE_BYTES:,}")
        rows = max(rows, max(len(ctx) + len(e) for e in ends))
        out_examples.append((index, label, ctx, ends))
    longest = write_evalfile(out, out_examples)
    say(f"hellaswag: {len(examples):,} examples -> {out} ({os.path.getsize(out):,} bytes; longest example {longest:,} "
        f"bytes, longest row {rows} tokens: context + completion, so a run evaluating it needs -t {rows - 1} or more)")


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="data/prepare.py",
        description="Turns a Hugging Face dataset (streamed) or local Parquet / JSON Lines / text files into GPT-2 token "
                    "shards in llm.c's format, tokenized by ./tokenize_text on all cores. Rerunning the same command "
                    "resumes after the last complete shard. With --hellaswag: a multiple-choice eval set into llm.c's "
                    "eval file instead.",
        epilog="presets (the FineWeb ones named as llm.c's dev/data/fineweb.py names them; tinystories takes its "
               "validation split as the val shards): " + ", ".join(
            f"{k} = {v['hf']}{' ' + v['name'] if v['name'] else ''} -> data/{v['dir']}/{v['prefix']}_*.bin" for k, v in PRESETS.items()))
    p.add_argument("inputs", nargs="*", metavar="FILE", help="local files, directories or globs: .parquet, "
                   ".jsonl/.json (one document per line), .txt (one document per file, or see --split-on), .gz/.zst "
                   "compressed too; one kind per run")
    p.add_argument("--preset", choices=sorted(PRESETS), help="a known dataset with llm.c's output names")
    p.add_argument("--hellaswag", nargs="?", const="", metavar="JSONL",
                   help="instead of shards: HellaSwag (or any multiple-choice set in its jsonl schema: ctx, endings, "
                        "label) as llm.c's eval file, -o PATH (default data/hellaswag/hellaswag_val.bin); JSONL (.gz "
                        "too) is read, or without it the validation set is downloaded next to PATH")
    p.add_argument("--hf", metavar="DATASET", help="a Hugging Face dataset name (or a local dataset directory), streamed")
    p.add_argument("--name", help="the dataset's configuration (load_dataset's name=), e.g. sample-10BT")
    p.add_argument("--split", default="train", help="the split to read (default: train)")
    p.add_argument("--val-split", help="a split whose documents are the validation shards (instead of --val-tokens)")
    p.add_argument("--data-files", action="append", metavar="PATTERN", help="load_dataset's data_files= (repeatable), "
                   "e.g. one file of a large dataset")
    p.add_argument("--field", default="text", help="the text column / JSON field (default: text)")
    p.add_argument("-o", "--out", metavar="PREFIX", help="write PREFIX_val_NNNNNN.bin, PREFIX_train_NNNNNN.bin "
                   "(default with --preset: OUT_DIR/NAME); with --hellaswag the file to write")
    p.add_argument("--out-dir", metavar="DIR", help="with --preset: the directory (default: data/<preset>)")
    p.add_argument("--shard-tokens", type=int, default=10**8, help="tokens per shard (default: 100000000, as llm.c)")
    p.add_argument("--val-tokens", type=int, help="the first N tokens are the validation split (default: one shard; "
                   "none with --val-split)")
    p.add_argument("--split-on", metavar="STR", help="text files: cut documents at STR (tokenize_text --split-on)")
    p.add_argument("--max-docs", type=int, help="stop after N documents (a sample of a large dataset)")
    p.add_argument("--threads", type=int, help="tokenizer threads (default: all cores)")
    p.add_argument("--progress", action="store_true", default=None, help="show progress even when stderr is not a terminal")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="never show progress")
    p.add_argument("--tokenize-text", metavar="PATH", help="the tokenize_text to use (default: the repository's, built if missing)")
    p.add_argument("--encoder", metavar="PATH", help="GPT-2 encoder.json (default: tokenize_text's search)")
    p.add_argument("--vocab", metavar="PATH", help="GPT-2 vocab.bpe (default: next to encoder.json)")
    a = p.parse_args(argv)
    if a.hellaswag is not None:
        if a.preset or a.hf or a.inputs:
            p.error("--hellaswag takes its jsonl as its own argument: no other files, --hf or --preset with it")
        shard_only = {"--name": a.name, "--split": a.split != "train" or None, "--val-split": a.val_split,
                      "--data-files": a.data_files, "--field": a.field != "text" or None, "--out-dir": a.out_dir,
                      "--shard-tokens": a.shard_tokens != 10**8 or None, "--val-tokens": a.val_tokens, "--split-on": a.split_on,
                      "--max-docs": a.max_docs}
        given = [k for k, v in shard_only.items() if v is not None]
        if given:
            p.error(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to token shards, not to --hellaswag")
        if a.threads is not None and a.threads < 1:
            p.error("--threads must be >= 1")
        a.out = a.out or os.path.join(ROOT, "data", "hellaswag", "hellaswag_val.bin")
        return a
    if a.preset:
        pre = PRESETS[a.preset]
        if a.hf or a.inputs:
            p.error("--preset names the dataset: give no --hf or files with it")
        a.hf, a.name = pre["hf"], a.name or pre["name"]
        a.val_split = a.val_split or pre.get("val_split")
        if not a.out:
            a.out = os.path.join(a.out_dir or os.path.join(ROOT, "data", pre["dir"]), pre["prefix"])
    elif a.out_dir:
        p.error("--out-dir only applies with --preset (use -o DIR/NAME)")
    if bool(a.hf) == bool(a.inputs):
        p.error("give either --hf DATASET (or --preset) or local files")
    if not a.out:
        p.error("-o/--out PREFIX is required (e.g. -o data/mycorpus/mycorpus)")
    if not a.hf and (a.name or a.val_split or a.data_files or a.split != "train"):
        p.error("--name, --split, --val-split and --data-files apply to --hf datasets only")
    if a.hf and a.split_on:
        p.error("--split-on applies to local text files only")
    if a.shard_tokens < 1 or a.shard_tokens > 2**31 - 1:
        p.error("--shard-tokens must be in 1..2147483647")
    if a.val_split and a.val_tokens is not None:
        p.error("--val-split and --val-tokens cannot be combined")
    if a.val_tokens is None:
        a.val_tokens = 0 if a.val_split else a.shard_tokens
    if a.val_tokens < 0:
        p.error("--val-tokens must be >= 0")
    if a.max_docs is not None and a.max_docs < 0:
        p.error("--max-docs must be >= 0")
    if a.threads is not None and a.threads < 1:
        p.error("--threads must be >= 1")
    return a


def on_term(sig, frame):
    raise KeyboardInterrupt  # SIGTERM (a batch system's stop) ends the run as Ctrl-C does


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, on_term)
    if args.hellaswag is not None:
        try:
            prepare_hellaswag(args)
        except Fail as e:
            print(f"{PROG}: {e}", file=sys.stderr, flush=True)
            return 1
        except KeyboardInterrupt:
            print(f"\n{PROG}: interrupted; nothing written", file=sys.stderr, flush=True)
            return 130
        return 0
    run = Run(args)
    try:
        run.main()
    except Fail as e:
        print(f"{PROG}: {e}", file=sys.stderr, flush=True)
        return 1
    except InputRefused:
        return 1
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted; {run.status()}", file=sys.stderr, flush=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
