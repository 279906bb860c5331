#!/usr/bin/env python3
"""PyTorch eager baseline for the Llama CPU benchmark: trains fsdp.c's Llama 3 (the model of
dev/test/torch_llama.py, the one the C engine is checked against) in float32 on the CPU and
prints one JSON line with its throughput.

    $PYTHON dev/bench/torch_llama_cpu.py --layers 4 --channels 256 --heads 4 --kv-heads 2 \\
        --ffn-dim 768 -b 4 -t 256 --steps 10 --warmup 2 --threads 2 [--data SHARD.bin]

Random init as the C engine's (normal std 0.02, the output projections wo and w2 at
0.02/sqrt(2L), norm weights one, padded vocabulary rows zero), GPT-2's vocabulary 50257
padded to a multiple of 128, untied head, RoPE theta 500000, the engine's step: gradient
clipping at norm 1.0 and AdamW (weight decay on the 2-D tensors only), one optimizer step per
batch of B x T tokens. Batches come from an llm.c token shard (256 x int32 header, magic
20240520, then uint16 tokens) or are random tokens. Steps after --warmup are timed (forward,
backward, clipping, optimizer step, zero_grad). Diagnostics go to stderr; stdout gets only
the JSON line.
"""
import argparse
import os
import sys


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--channels", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn-dim", type=int, default=768)
    ap.add_argument("--rope-theta", type=float, default=500000.0)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("-b", "--batch", type=int, default=4)
    ap.add_argument("-t", "--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--data", help="llm.c token shard (default: random tokens)")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--logits", choices=["v", "vp"], default="v",
                    help="LM head over the V real rows of output (default; same loss) or all Vp")
    a = ap.parse_args()
    for k in ("layers", "channels", "heads", "kv_heads", "ffn_dim", "vocab", "batch", "seq", "steps", "threads"):
        if getattr(a, k) <= 0:
            ap.error(f"--{k.replace('_', '-')} must be positive")
    if a.warmup < 0:
        ap.error("--warmup must be >= 0")
    return a


args = parse_args()
# OpenBLAS (which Debian's torch calls for sgemm) sizes its own thread pool from the
# environment when loaded; torch.set_num_threads only sets OpenMP's. Set both, before import.
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ[var] = str(args.threads)

import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test"))
import torch_llama as tl  # noqa: E402

SHARD_MAGIC = 20240520


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def mapped_libraries():
    """Paths of the shared objects this process has mapped."""
    try:
        with open("/proc/self/maps") as f:
            return {line.split()[5] for line in f if len(line.split()) >= 6}
    except OSError:
        return set()


def blas_backend():
    """(torch's BLAS_INFO, the BLAS libraries really loaded, their kind). A generic Debian
    build calls libblas.so.3, which update-alternatives points at OpenBLAS or another."""
    info = "unknown"
    for part in torch.__config__.show().replace(",", " ").split():
        if part.startswith("BLAS_INFO="):
            info = part.split("=", 1)[1]
    libs = sorted({os.path.realpath(p) for p in mapped_libraries()
                   if any(k in os.path.basename(p) for k in ("blas", "mkl", "blis"))})
    loaded = ",".join(libs) or "none found"
    kind = next((k for k in ("openblas", "mkl", "blis") if k in loaded), "reference" if libs else "?")
    return info, loaded, kind


def allocator():
    """jemalloc / tcmalloc when preloaded (bench_llama_cpu.sh does), else glibc's malloc."""
    libs = " ".join(mapped_libraries())
    return next((k for k in ("jemalloc", "tcmalloc") if k in libs), "glibc")


def batches(path, B, T, V, seed):
    """A function returning the next (x, y) int64 [B, T]: consecutive windows of the shard
    (wrapping around), or random tokens without one."""
    if not path:
        g = torch.Generator().manual_seed(seed + 1)

        def rand():
            buf = torch.randint(0, V, (B * T + 1,), generator=g)
            return buf[:-1].view(B, T), buf[1:].view(B, T)
        return rand
    hdr = np.fromfile(path, dtype="<i4", count=256)
    if hdr.size < 256 or hdr[0] != SHARD_MAGIC:
        sys.exit(f"{path}: not an llm.c token shard")
    toks = np.fromfile(path, dtype="<u2", offset=1024)
    if toks.size != int(hdr[2]) or toks.size < B * T + 1:
        sys.exit(f"{path}: {toks.size} tokens (header: {int(hdr[2])}), need at least {B * T + 1}")
    pos = [0]

    def read():
        if pos[0] + B * T + 1 > toks.size:
            pos[0] = 0
        buf = torch.from_numpy(toks[pos[0]:pos[0] + B * T + 1].astype(np.int64))
        pos[0] += B * T
        return buf[:-1].view(B, T), buf[1:].view(B, T)
    return read


def main():
    torch.set_num_threads(args.threads)
    B, T = args.batch, args.seq
    cfg = tl.LlamaConfig(V=args.vocab, Vp=(args.vocab + 127) // 128 * 128, L=args.layers, NH=args.heads,
                         KVH=args.kv_heads, C=args.channels, F=args.ffn_dim, maxT=T, rope_theta=args.rope_theta)
    try:
        cfg.check()
    except ValueError as e:
        sys.exit(f"torch_llama_cpu: {e}")
    g = torch.Generator().manual_seed(args.seed)
    proj_std = 0.02 / math.sqrt(2 * cfg.L)
    P, decay, no_decay = {}, [], []
    with torch.no_grad():
        for name, shape in tl.tensor_specs(cfg):
            if len(shape) == 1:
                p = torch.ones(shape)
            else:
                std = proj_std if name.endswith(("attention.wo.weight", "feed_forward.w2.weight")) else 0.02
                p = torch.randn(shape, generator=g) * std
                if name in ("tok_embeddings.weight", "output.weight"):
                    p[cfg.V:] = 0.0
            P[name] = p.requires_grad_(True)
            (decay if tl.decays(shape) else no_decay).append(P[name])
    params = list(P.values())
    nparams = sum(p.numel() for p in params)
    # torch 1.13 has no fused AdamW on the CPU; the per-tensor loop (foreach off) is the
    # faster one there (dev/bench/torch_gpt2_cpu.py measured it on GPT-2).
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, foreach=False)

    batch = batches(args.data, B, T, cfg.V, args.seed)
    info, loaded, kind = blas_backend()
    log(f"torch {torch.__version__}, BLAS_INFO={info}, loaded BLAS: {loaded}, threads {torch.get_num_threads()}, "
               f"allocator {allocator()}")
    log(f"model L={cfg.L} C={cfg.C} NH={cfg.NH} KVH={cfg.KVH} F={cfg.F} Vp={cfg.Vp}: {nparams / 1e6:.2f}M params; "
               f"B={B} T={T}; {args.warmup} warmup + {args.steps} timed steps")

    total = args.warmup + args.steps
    times, losses = [], []
    for step in range(1, total + 1):
        x, y = batch()
        t0 = time.perf_counter()
        _, loss = tl.forward(cfg, P, x, y, logits_v_only=(args.logits == "v"))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        lv = float(loss)
        dt = time.perf_counter() - t0
        losses.append(lv)
        if step > args.warmup:
            times.append(dt)
        log(f"step {step:4d}/{total} loss {lv:.4f} {dt * 1000:.1f} ms" + (" (warmup)" if step <= args.warmup else ""))
    ms = 1000.0 * sum(times) / len(times)
    out = {"impl": "pytorch-eager", "threads": args.threads,
           "tokens_per_s": round(B * T / (ms / 1000.0), 2), "ms_per_step": round(ms, 2),
           "torch": torch.__version__, "blas": f"{kind} ({loaded}; BLAS_INFO={info})", "allocator": allocator(),
           "layers": cfg.L, "channels": cfg.C, "heads": cfg.NH, "kv_heads": cfg.KVH, "ffn_dim": cfg.F, "B": B, "T": T,
           "params": nparams, "steps": args.steps, "warmup": args.warmup,
           "first_loss": round(losses[0], 4), "last_loss": round(losses[-1], 4)}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
