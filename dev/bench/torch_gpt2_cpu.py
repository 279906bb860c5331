#!/usr/bin/env python3
"""PyTorch eager baseline for the CPU benchmark: trains fsdp.c's GPT-2 (dev/test/torch_gpt2.py)
in float32 on the CPU and prints one JSON line with its throughput.

    $PYTHON dev/bench/torch_gpt2_cpu.py --layers 4 --channels 256 --heads 4 -b 4 -t 256 \\
        --steps 10 --warmup 2 --threads 2 [--data SHARD.bin]

Random GPT-2 init, vocab 50257 padded to a multiple of 128, tied LM head, AdamW (weight decay
on matrices only), one optimizer step per batch of B x T tokens. Batches come from an llm.c
token shard (256 x int32 header, magic 20240520, then uint16 tokens) or are random tokens.
Steps after --warmup are timed (forward, backward, optimizer step, zero_grad). Diagnostics
go to stderr; stdout gets only the JSON line.
"""
import argparse
import os
import sys


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--channels", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--max-seq", type=int, default=1024)
    ap.add_argument("-b", "--batch", type=int, default=4)
    ap.add_argument("-t", "--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--data", help="llm.c token shard (default: random tokens)")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--foreach", choices=["auto", "0", "1"], default="auto",
                    help="AdamW's foreach implementation; auto = off: on the CPU in torch 1.13 "
                         "the per-tensor loop is faster (d12: 400 vs 460 ms per step)")
    ap.add_argument("--logits", choices=["v", "vp"], default="v",
                    help="LM head over the V real columns (default; same loss) or all Vp")
    a = ap.parse_args()
    for k in ("layers", "channels", "heads", "batch", "seq", "steps", "threads"):
        if getattr(a, k) <= 0:
            ap.error(f"--{k} must be positive")
    if a.warmup < 0:
        ap.error("--warmup must be >= 0")
    if a.seq > a.max_seq:
        ap.error(f"-t {a.seq} exceeds --max-seq {a.max_seq}")
    return a


args = parse_args()
# OpenBLAS (which Debian's torch calls for sgemm) sizes its own thread pool from the
# environment when loaded; torch.set_num_threads only sets OpenMP's. Set both.
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ[var] = str(args.threads)

import json  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test"))
import torch_gpt2 as tg  # noqa: E402

SHARD_MAGIC = 20240520


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def blas_backend():
    """What torch's sgemm really runs: the build's BLAS_INFO and, for a generic build, the
    libblas.so.3 that got loaded (Debian switches it with update-alternatives)."""
    cfg = torch.__config__.show()
    m = re.search(r"BLAS_INFO=([^,\s]+)", cfg)
    info = m.group(1) if m else "unknown"
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                if re.search(r"lib(open)?blas[^/]*\.so|libmkl|libblis", path):
                    libs.add(os.path.realpath(path))
    except OSError:
        pass
    loaded = ",".join(sorted(libs)) or "none found"
    kind = "openblas" if "openblas" in loaded else ("mkl" if "mkl" in loaded else
                                                     "reference" if "/blas/" in loaded else "?")
    return info, loaded, kind


def allocator():
    """jemalloc / tcmalloc when preloaded (bench_cpu.sh does), else glibc malloc."""
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return "?"
    for name in ("jemalloc", "tcmalloc"):
        if name in maps:
            return name
    return "glibc"


def load_shard(path):
    hdr = np.fromfile(path, dtype="<i4", count=256)
    if hdr.size < 256 or hdr[0] != SHARD_MAGIC or hdr[1] != 1:
        sys.exit(f"{path}: not an llm.c token shard (magic {hdr[0] if hdr.size else '?'})")
    ntok = int(hdr[2])
    toks = np.fromfile(path, dtype="<u2", offset=1024)
    if toks.size != ntok:
        sys.exit(f"{path}: header says {ntok} tokens, file has {toks.size}")
    return toks


def main():
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    B, T = args.batch, args.seq
    cfg = tg.GPTConfig(maxT=args.max_seq, L=args.layers, NH=args.heads, C=args.channels)
    model = tg.GPT2(cfg).init_weights(args.seed)
    model.train()
    nparams = sum(p.numel() for p in model.parameters())
    decay, no_decay = tg.param_groups_decay(model)
    foreach = args.foreach == "1"  # torch 1.13 has no fused AdamW on the CPU
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, foreach=foreach)

    total = args.warmup + args.steps
    if args.data:
        toks = load_shard(args.data)
        need = B * T + 1
        if toks.size < need:
            sys.exit(f"{args.data}: {toks.size} tokens, need at least {need}")
        pos = 0

        def batch():
            nonlocal pos
            if pos + need > toks.size:
                pos = 0
            buf = torch.from_numpy(toks[pos:pos + need].astype(np.int64))
            pos += B * T
            return buf[:-1].view(B, T), buf[1:].view(B, T)
    else:
        g = torch.Generator().manual_seed(args.seed + 1)

        def batch():
            buf = torch.randint(0, cfg.V, (B * T + 1,), generator=g)
            return buf[:-1].view(B, T), buf[1:].view(B, T)

    info, loaded, kind = blas_backend()
    log(f"torch {torch.__version__}, BLAS_INFO={info}, loaded BLAS: {loaded}, "
        f"threads {torch.get_num_threads()}, foreach AdamW {foreach}, allocator {allocator()}, "
        f"sdpa {'yes' if hasattr(torch.nn.functional, 'scaled_dot_product_attention') else 'no'}")
    log(f"model L={cfg.L} C={cfg.C} NH={cfg.NH} Vp={cfg.Vp}: {nparams / 1e6:.2f}M params; "
        f"B={B} T={T}; {args.warmup} warmup + {args.steps} timed steps")

    times, losses = [], []
    for step in range(1, total + 1):
        x, y = batch()
        t0 = time.perf_counter()
        _, loss = model(x, y, logits_v_only=(args.logits == "v"))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        lv = float(loss)
        dt = time.perf_counter() - t0
        losses.append(lv)
        if step > args.warmup:
            times.append(dt)
        log(f"step {step:4d}/{total} loss {lv:.4f} {dt * 1000:.1f} ms"
            + (" (warmup)" if step <= args.warmup else ""))
    ms = 1000.0 * sum(times) / len(times)
    out = {"impl": "pytorch-eager", "threads": args.threads,
           "tokens_per_s": round(B * T / (ms / 1000.0), 2), "ms_per_step": round(ms, 2),
           "torch": torch.__version__, "blas": f"{kind} ({loaded}; BLAS_INFO={info})",
           "allocator": allocator(),
           "layers": cfg.L, "channels": cfg.C, "heads": cfg.NH, "B": B, "T": T,
           "params": nparams, "steps": args.steps, "warmup": args.warmup,
           "first_loss": round(losses[0], 4), "last_loss": round(losses[-1], 4)}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
