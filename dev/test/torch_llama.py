#!/usr/bin/env python3
"""Checks fsdp.c's Llama 3 (cpu device, or cuda in bf16) against a plain PyTorch Llama.

    $PYTHON dev/test/torch_llama.py --state S.bin [--label NAME] [--sensitivity BUG,...]
    $PYTHON dev/test/torch_llama.py --selftest

S.bin is what `build/test_gpt2 dump-llama` wrote (its format: the header comment of
dev/test/test_gpt2.cu): the model's shape, RoPE parameters and AdamW hyper-parameters, a
fixed batch, the initial weights of every tensor, then the C model's logits, mean loss and
every gradient at those weights, and the losses and gradient norms of n_steps AdamW steps on
that batch. This script rebuilds the model from the state's weights (float32 on the CPU, own
code, no downloads), redoes all of it and prints one `ok - <check>` or
`not ok - <check>: <numbers>` line per check; it exits 1 if any check fails. The state says
which device wrote it: the cpu's (fp32) is held to the fp32 bounds below, the cuda device's
(bf16 weights, activations and gradients; fp32 master weights and optimizer) to the bf16
bounds.

The model, as fsdp.c defines Llama 3 (model/model.h):
  h = tok_embeddings[x]
  per layer:  a = rmsnorm(h) * attention_norm;  q|k|v = a @ wqkv^T (NH, KVH, KVH heads of
              hs = C/NH);  q, k rotated (RoPE);  y = softmax(q k^T / sqrt(hs), causal) v, with
              query head h reading kv head h // (NH/KVH);  h += y @ wo^T
              m = rmsnorm(h) * ffn_norm;  gate|up = m @ w13^T (w1's F rows, then w3's);
              h += (silu(gate) * up) @ w2^T
  logits = (rmsnorm(h) * norm) @ output^T over all Vp rows of output (untied);
  loss = mean cross-entropy over the first V columns only (the padded columns are not part
  of the softmax, and get zero gradient, as in kernels/cpu_kernels.h's
  crossentropy_softmax_fused). rmsnorm(x) = x / sqrt(mean(x^2) + 1e-5).
RoPE (Meta's convention): pair i = elements (2i, 2i+1) of a head, at position t, rotated by
t * inv_freq(i); inv_freq(i) = theta^(-2i/hs) in float64, with Llama 3.1's scaling when
factor > 1 (wavelengths above original_max_pos/low_freq_factor divided by factor, below
original_max_pos/high_freq_factor kept, blended between), then rounded to float32, which is
what the C code keeps (kernels/rope.h); the angle, its cos and sin are float64.
AdamW (kernels/cpu_kernels.h adamw_update, fsdp/fsdp.h fsdp_decide_from_sums): step i
(1-based) on the same batch, norm_i = global L2 norm of every gradient (before clipping),
scale = grad_clip/norm_i if grad_clip > 0 and norm_i > grad_clip else 1;
g = grad*scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
p -= lr * (m/(1-b1^i) / (sqrt(v/(1-b2^i)) + eps) + wd_p p), with wd_p = weight_decay for the
2-D tensors (tok_embeddings, output, wqkv, wo, w13, w2: model/gpt2.c build_layout decays the
embedding, the head and every block tensor with more than one row) and 0 for the norms.

--selftest makes a small GQA model, writes a state file from a float64 PyTorch run (standing
in for the C program: a second implementation whose rounding differs), checks that it passes,
then that corrupted states and emulated bugs (RoPE on halves, k/v heads mapped wrongly, ...)
fail, and that broken files are refused.
"""
import argparse
import math
import os
import sys
import tempfile
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

STATE_MAGIC = 20261201
STATE_VERSION = 1
GPT2_STATE_MAGIC = 20261130  # test_gpt2 dump's (GPT-2) state: named when given by mistake
HEADER_INTS = 256
RMSNORM_EPS = 1e-5

# ---- tolerances (fp32 C vs fp32 PyTorch; both differ from exact arithmetic by rounding) --
# The same bounds as torch_reference.py's for GPT-2, re-measured for this model. Rounding
# alone, measured: --selftest's float64 run against float32 PyTorch (weights at std 0.1) gives
# logits 1.7e-6 (bound 3.6e-4), loss 7e-8 relative, gradients at most 1.1e-2 of their bound,
# step losses 1.1e-7 and norms 2.2e-7 relative; the C engine on test_llama.sh's tiny GQA model
# gives logits 3e-7 (bound 8.5e-5; 1.9e-6 of 3.3e-4 with RoPE scaling and doubled weights),
# loss 9e-8, gradients at most 8e-3 of their bound, step losses 1.2e-7 and norms 3e-7. So every
# bound sits ~100x or more above rounding, while every emulated bug of the self-test (and of
# test_llama.sh's --sensitivity runs) lands well above it.
# Loss: relative.
LOSS_RTOL = 1e-5
# Logits over all Vp columns: max|diff| <= LOGITS_RTOL * max|ref logit| + LOGITS_ATOL.
LOGITS_RTOL = 1e-4
LOGITS_ATOL = 1e-6
# Gradients, per tensor and per layer: max|diff| <= GRAD_RTOL * max|ref grad| + GRAD_ATOL.
# Relative to each tensor's own largest gradient, so a small tensor (a norm weight) is held
# to its own scale, not the embedding's.
GRAD_RTOL = 1e-4
# Absolute floor for (nearly) all-zero gradients; the padded vocabulary rows of
# tok_embeddings and output must have exactly zero gradient: checked against this floor.
GRAD_ATOL = 1e-9
# AdamW steps on the same batch: each step's loss and pre-clip gradient norm, relative.
STEP_LOSS_RTOL = 1e-5
STEP_NORM_RTOL = 1e-4

# ---- tolerances for the cuda device (bf16 compute vs fp32 PyTorch) ----------------------
# Every weight is rounded to bf16 (8 significant bits) before use, activations and gradients
# are stored in bf16, matmuls accumulate in fp32. Measured on test_llama.sh's cuda state (the
# CPU emulator, which rounds to bf16 where a GPU does; head size 64, the flash kernels):
# logits 1.4e-2 (bound 5.4e-2, 3e-2 of max|logit| 1.8), loss 2.9e-5, gradients at most
# 1.1e-2 relative L2 error and 0.26 of the max bound, step losses 5.1e-4 and norms 1.2e-2 (the
# loss falls from 10.85 to 5.03 in the 10 steps, and bf16 noise in the updates grows with
# it). The bounds sit 3-10x above those; the model bugs test_llama.sh names with --sensitivity
# land above them.
BF16 = dict(
    LOSS_RTOL=3e-4,
    LOGITS_RTOL=3e-2, LOGITS_ATOL=1e-6,
    # gradients: per tensor both max|diff| <= GRAD_RTOL * max|ref| + GRAD_ATOL and the relative
    # L2 error ||c - ref|| / ||ref|| <= GRAD_L2: bf16 rounding is ~4e-3 per element, so the max
    # alone would need a loose bound on the largest element; the L2 error sees a bug that
    # spreads over a tensor at well under that.
    GRAD_RTOL=5e-2, GRAD_ATOL=1e-9, GRAD_L2=4e-2,
    STEP_LOSS_RTOL=2e-3, STEP_NORM_RTOL=5e-2)
FP32 = dict(LOSS_RTOL=LOSS_RTOL, LOGITS_RTOL=LOGITS_RTOL, LOGITS_ATOL=LOGITS_ATOL, GRAD_RTOL=GRAD_RTOL,
            GRAD_ATOL=GRAD_ATOL, GRAD_L2=float("inf"), STEP_LOSS_RTOL=STEP_LOSS_RTOL, STEP_NORM_RTOL=STEP_NORM_RTOL)
# The state's device field (header int 14): which bounds hold it.
DEVICES = {0: ("cpu fp32", FP32), 1: ("cuda bf16", BF16)}


@dataclass
class LlamaConfig:
    V: int
    Vp: int
    L: int
    NH: int
    KVH: int
    C: int
    F: int
    maxT: int
    rope_theta: float = 500000.0
    rope_factor: float = 0.0
    rope_low: float = 1.0
    rope_high: float = 4.0
    rope_orig: int = 8192

    def check(self):
        """Raises ValueError on a shape no model can have (before anything is sized from it)."""
        dims = dict(V=self.V, Vp=self.Vp, L=self.L, NH=self.NH, KVH=self.KVH, C=self.C, F=self.F,
                    maxT=self.maxT)
        bad = [f"{k}={v}" for k, v in dims.items() if not 0 < v <= (1 << 26)]
        if bad:
            raise ValueError("dimensions out of range: " + ", ".join(bad))
        if self.Vp < self.V:
            raise ValueError(f"padded vocab {self.Vp} < vocab {self.V}")
        if self.C % self.NH or self.NH % self.KVH or (self.C // self.NH) % 2:
            raise ValueError(f"C={self.C}, NH={self.NH}, KVH={self.KVH}: heads must divide C, kv heads "
                             f"divide heads, and the head size be even")
        if not self.rope_theta > 1.0:
            raise ValueError(f"rope_theta {self.rope_theta} is not > 1")

    @property
    def hs(self):
        return self.C // self.NH


def tensor_specs(cfg):
    """[(name, shape)] of every tensor in the state's (the flat units') order."""
    C, hs = cfg.C, cfg.hs
    out = [("tok_embeddings.weight", (cfg.Vp, C)), ("norm.weight", (C,)), ("output.weight", (cfg.Vp, C))]
    for l in range(cfg.L):
        out += [(f"layers.{l}.attention_norm.weight", (C,)),
                (f"layers.{l}.attention.wqkv.weight", ((cfg.NH + 2 * cfg.KVH) * hs, C)),
                (f"layers.{l}.attention.wo.weight", (C, C)),
                (f"layers.{l}.ffn_norm.weight", (C,)),
                (f"layers.{l}.feed_forward.w13.weight", (2 * cfg.F, C)),
                (f"layers.{l}.feed_forward.w2.weight", (C, cfg.F))]
    return out


def num_params(cfg):
    return sum(int(np.prod(s)) for _, s in tensor_specs(cfg))


def decays(shape):
    """Weight decay on the 2-D tensors only (build_layout's rule; the norms are 1-D)."""
    return len(shape) == 2


def kind(name):
    """'layers.3.attention.wqkv.weight' -> 'attention.wqkv.weight' (a line per kind)."""
    return name.split(".", 2)[2] if name.startswith("layers.") else name


# ----------------------------------------------------------------------------------------
# state file


def state_layout(cfg, B, T, n_steps):
    """[(field, dtype, count)] after the two 256-entry headers."""
    P = num_params(cfg)
    return [("x", "<i4", B * T), ("y", "<i4", B * T), ("params", "<f4", P),
            ("logits", "<f4", B * T * cfg.Vp), ("loss", "<f4", 1), ("grads", "<f4", P),
            ("losses", "<f4", n_steps), ("grad_norms", "<f4", n_steps)]


def split_flat(cfg, flat):
    out, off = [], 0
    for _, shape in tensor_specs(cfg):
        k = int(np.prod(shape))
        out.append(np.asarray(flat[off:off + k], dtype=np.float32).reshape(shape))
        off += k
    assert off == flat.size, (off, flat.size)
    return out


def read_state(path):
    """Reads and validates a state file. Returns (cfg, st). Raises ValueError."""
    with open(path, "rb") as f:
        raw = f.read(2 * HEADER_INTS * 4)
    if len(raw) < 2 * HEADER_INTS * 4:
        raise ValueError(f"{path}: truncated header ({len(raw)} bytes, a state starts with 2048)")
    hdr = np.frombuffer(raw[:1024], dtype="<i4")
    hyper = np.frombuffer(raw[1024:2048], dtype="<f4")
    if hdr[0] == GPT2_STATE_MAGIC:
        raise ValueError(f"{path}: a GPT-2 state (test_gpt2 dump, magic {hdr[0]}): check it with "
                         "torch_reference.py; this script reads test_gpt2 dump-llama's")
    if hdr[0] != STATE_MAGIC:
        raise ValueError(f"{path}: bad magic {hdr[0]} (expected {STATE_MAGIC}, a test_gpt2 dump-llama state)")
    if hdr[1] != STATE_VERSION:
        raise ValueError(f"{path}: unsupported state version {hdr[1]} (expected {STATE_VERSION})")
    B, T, n_steps, V, Vp, L, NH, KVH, C, Fd, maxT, orig, device = (int(v) for v in hdr[2:15])
    if device not in DEVICES:
        raise ValueError(f"{path}: unknown device {device} in the header (0 cpu fp32, 1 cuda bf16)")
    cfg = LlamaConfig(V=V, Vp=Vp, L=L, NH=NH, KVH=KVH, C=C, F=Fd, maxT=maxT,
                      rope_theta=float(hyper[6]), rope_factor=float(hyper[7]),
                      rope_low=float(hyper[8]), rope_high=float(hyper[9]), rope_orig=orig)
    try:
        cfg.check()
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    if B <= 0 or T <= 0 or T > maxT or n_steps < 0:
        raise ValueError(f"{path}: bad B={B} T={T} n_steps={n_steps} (maxT={maxT})")
    layout = state_layout(cfg, B, T, n_steps)
    expect = 2048 + sum(np.dtype(dt).itemsize * n for _, dt, n in layout)
    size = os.path.getsize(path)
    if size != expect:
        raise ValueError(f"{path}: size {size} bytes, expected {expect} for B={B} T={T} "
                         f"n_steps={n_steps} and {num_params(cfg)} parameters")
    st = dict(B=B, T=T, n_steps=n_steps, device=device,
              lr=float(hyper[0]), beta1=float(hyper[1]), beta2=float(hyper[2]),
              eps=float(hyper[3]), weight_decay=float(hyper[4]), grad_clip=float(hyper[5]))
    off = 2048
    for field, dt, n in layout:
        st[field] = np.fromfile(path, dtype=dt, count=n, offset=off)
        off += np.dtype(dt).itemsize * n
    for f in ("x", "y"):
        a = st[f]
        if a.size and (a.min() < 0 or a.max() >= V):
            raise ValueError(f"{path}: token ids in {f} outside [0, {V}): min {a.min()} max {a.max()}")
    st["loss"] = float(st["loss"][0])
    st["logits"] = st["logits"].reshape(B, T, Vp)
    st["params"] = split_flat(cfg, st["params"])
    st["grads"] = split_flat(cfg, st["grads"])
    return cfg, st


def write_state(path, cfg, st):
    hdr = np.zeros(HEADER_INTS, dtype="<i4")
    hdr[:15] = [STATE_MAGIC, STATE_VERSION, st["B"], st["T"], st["n_steps"], cfg.V, cfg.Vp, cfg.L,
                cfg.NH, cfg.KVH, cfg.C, cfg.F, cfg.maxT, cfg.rope_orig, st.get("device", 0)]
    hyper = np.zeros(HEADER_INTS, dtype="<f4")
    hyper[:10] = [st["lr"], st["beta1"], st["beta2"], st["eps"], st["weight_decay"], st["grad_clip"],
                  cfg.rope_theta, cfg.rope_factor, cfg.rope_low, cfg.rope_high]
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        f.write(hyper.tobytes())
        for field, dt, n in state_layout(cfg, st["B"], st["T"], st["n_steps"]):
            if field in ("params", "grads"):
                for a in st[field]:
                    f.write(np.ascontiguousarray(a, dtype=dt).tobytes())
                continue
            a = np.asarray(st[field], dtype=dt).reshape(-1)
            assert a.size == n, (field, a.size, n)
            f.write(a.tobytes())


# ----------------------------------------------------------------------------------------
# the model


def rope_inv_freq(cfg, scaled=True, bugs=()):
    """float32 [hs/2]: pair i's inverse frequency, computed in float64 then rounded."""
    hs = cfg.hs
    out = np.empty(hs // 2, dtype=np.float32)
    for i in range(hs // 2):
        f = float(cfg.rope_theta) ** (-2.0 * i / hs)
        if scaled and cfg.rope_factor > 1.0:
            wavelen = 2.0 * math.pi / f
            long_edge = cfg.rope_orig / cfg.rope_low    # longer wavelengths: stretched fully
            short_edge = cfg.rope_orig / cfg.rope_high  # shorter: untouched
            if wavelen > long_edge:
                f = f / cfg.rope_factor
            elif wavelen >= short_edge:
                # blend: 0 at the long edge (all stretched), 1 at the short edge (untouched)
                w = (cfg.rope_orig / wavelen - cfg.rope_low) / (cfg.rope_high - cfg.rope_low)
                if "rope_blend" in bugs:  # the blend's weights swapped
                    w = 1.0 - w
                f = (1.0 - w) * (f / cfg.rope_factor) + w * f
        out[i] = f
    return out


def rope_tables(cfg, T, dtype, bugs=()):
    """cos, sin [T, hs/2]: angle t * inv_freq(i), in float64 (the C code's), cast to dtype."""
    inv = rope_inv_freq(cfg, scaled="rope_noscale" not in bugs, bugs=bugs).astype(np.float64)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    if "rope_sign" in bugs:
        ang = -ang
    return torch.from_numpy(np.cos(ang)).to(dtype), torch.from_numpy(np.sin(ang)).to(dtype)


def rope(x, cos, sin, bugs=()):
    """x [B, T, H, hs]: each pair (2i, 2i+1) rotated by its angle at t (cos/sin [T, hs/2])."""
    B, T, H, hs = x.shape
    c, s = cos.view(1, T, 1, hs // 2), sin.view(1, T, 1, hs // 2)
    if "rope_halves" in bugs:  # Hugging Face's layout: pairs (i, i + hs/2)
        x0, x1 = x[..., : hs // 2], x[..., hs // 2:]
        return torch.cat([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).view(B, T, H, hs)


def rmsnorm(x, w, bugs=()):
    if "rmsnorm_mean" in bugs:  # a LayerNorm without bias: the mean subtracted
        x = x - x.mean(-1, keepdim=True)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMSNORM_EPS) * w


def forward(cfg, P, x, y, bugs=(), logits_v_only=False):
    """P: {name: tensor} (tensor_specs' names); x, y int64 [B, T]. Returns (logits [B,T,Vp],
    mean loss). bugs: deliberate errors, self-test only (see selftest). logits_v_only: the head
    over output's V real rows only (same loss; dev/bench/torch_llama_cpu.py's default)."""
    B, T = x.shape
    C, NH, KVH, hs, Fd = cfg.C, cfg.NH, cfg.KVH, cfg.hs, cfg.F
    dtype = P["norm.weight"].dtype
    cos, sin = rope_tables(cfg, T, dtype, bugs)
    causal = torch.ones(T, T, dtype=torch.bool).triu_(1)  # True above the diagonal: the future
    h = P["tok_embeddings.weight"][x]
    for l in range(cfg.L):
        p = lambda n: P[f"layers.{l}.{n}.weight"]  # noqa: E731
        a = rmsnorm(h, p("attention_norm"), bugs)
        q, k, v = (a @ p("attention.wqkv").t()).split([NH * hs, KVH * hs, KVH * hs], dim=-1)
        q = rope(q.reshape(B, T, NH, hs), cos, sin, bugs).transpose(1, 2)   # [B, NH, T, hs]
        k = rope(k.reshape(B, T, KVH, hs), cos, sin, bugs).transpose(1, 2)  # [B, KVH, T, hs]
        v = v.reshape(B, T, KVH, hs).transpose(1, 2)
        group = NH // KVH
        if "kv_heads" in bugs:  # query head h reads kv head h % KVH instead of h // group
            k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
        else:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = torch.softmax(att.masked_fill(causal, float("-inf")), dim=-1)
        h = h + (att @ v).transpose(1, 2).reshape(B, T, C) @ p("attention.wo").t()
        m = rmsnorm(h, p("ffn_norm"), bugs)
        gate, up = (m @ p("feed_forward.w13").t()).split(Fd, dim=-1)
        if "swiglu_swap" in bugs:  # w1 and w3 confused: silu on the up projection
            gate, up = up, gate
        h = h + (F.silu(gate) * up) @ p("feed_forward.w2").t()
    head = P["output.weight"][: cfg.V] if logits_v_only else P["output.weight"]
    logits = rmsnorm(h, P["norm.weight"], bugs) @ head.t()
    cols = cfg.Vp if "ce_padded" in bugs else cfg.V  # the bug: padded columns in the softmax
    loss = F.cross_entropy(logits[..., :cols].reshape(B * T, cols), y.reshape(B * T))
    return logits, loss


def run_reference(cfg, st, dtype=torch.float32, bugs=()):
    """dict(logits, loss, grads, losses, grad_norms) computed by PyTorch from st's weights.
    bugs (self-test only): rope_halves, rope_sign, rope_noscale, rope_blend, kv_heads, rmsnorm_mean,
    swiglu_swap, ce_padded, adam_bias, decay_all, no_clip."""
    specs = tensor_specs(cfg)
    P = {name: torch.tensor(a, dtype=dtype, requires_grad=True) for (name, _), a in zip(specs, st["params"])}
    x = torch.from_numpy(st["x"].astype(np.int64)).view(st["B"], st["T"])
    y = torch.from_numpy(st["y"].astype(np.int64)).view(st["B"], st["T"])
    moments = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in P.items()}
    b1, b2, eps, lr = st["beta1"], st["beta2"], st["eps"], st["lr"]
    out = dict(losses=[], grad_norms=[])
    for step in range(1, max(st["n_steps"], 1) + 1):
        for p in P.values():
            p.grad = None
        logits, loss = forward(cfg, P, x, y, bugs)
        loss.backward()
        norm = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in P.values()))
        if step == 1:
            out["logits"] = logits.detach().to(torch.float32).numpy()
            out["loss"] = float(loss)
            out["grads"] = [P[n].grad.detach().to(torch.float32).numpy().copy() for n, _ in specs]
        if step > st["n_steps"]:
            break
        out["losses"].append(float(loss))
        out["grad_norms"].append(norm)
        clip = st["grad_clip"]
        scale = clip / norm if clip > 0 and norm > clip and "no_clip" not in bugs else 1.0
        bc1 = 1.0 if "adam_bias" in bugs else 1.0 - b1 ** step
        bc2 = 1.0 if "adam_bias" in bugs else 1.0 - b2 ** step
        with torch.no_grad():
            for name, shape in specs:
                p = P[name]
                wd = st["weight_decay"] if (decays(shape) or "decay_all" in bugs) else 0.0
                m, v = moments[name]
                g = p.grad * scale
                m.mul_(b1).add_(g, alpha=1.0 - b1)
                v.mul_(b2).addcmul_(g, g, value=1.0 - b2)
                p.sub_(lr * ((m / bc1) / ((v / bc2).sqrt() + eps) + wd * p))
    return out


# ----------------------------------------------------------------------------------------
# comparison


class Results:
    def __init__(self, quiet=False, label=""):
        self.items = []  # (ok, name, detail)
        self.quiet = quiet
        self.label = label

    def add(self, ok, name, detail=""):
        ok = bool(ok)
        name = f"{self.label}: {name}" if self.label else name
        self.items.append((ok, name, detail))
        if not self.quiet:
            print(f"ok - {name}" + (f" ({detail})" if detail else "") if ok else f"not ok - {name}: {detail}")
        sys.stdout.flush()

    def failed(self):
        return [(n, d) for ok, n, d in self.items if not ok]


def fmt(x):
    return f"{x:.3e}"


def compare(cfg, st, ref, res):
    tl = DEVICES[st.get("device", 0)][1]
    # logits, all Vp columns (the padded ones are output's zero rows: zero logits)
    c, r = st["logits"].astype(np.float64), ref["logits"].astype(np.float64)
    diff = float(np.max(np.abs(c - r)))
    tol = tl["LOGITS_RTOL"] * float(np.max(np.abs(r))) + tl["LOGITS_ATOL"]
    res.add(diff <= tol, f"logits [{st['B']}x{st['T']}x{cfg.Vp}]", f"max|diff| {fmt(diff)}, tol {fmt(tol)}")

    rel = abs(st["loss"] - ref["loss"]) / max(abs(ref["loss"]), 1e-30)
    res.add(rel <= tl["LOSS_RTOL"], "loss",
            f"C {st['loss']:.7f}, torch {ref['loss']:.7f}, rel diff {fmt(rel)}, tol {fmt(tl['LOSS_RTOL'])}")

    # gradients: one line per kind of tensor, each layer's tensor held to its own scale
    groups = {}
    for (name, _), cg, rg in zip(tensor_specs(cfg), st["grads"], ref["grads"]):
        groups.setdefault(kind(name), []).append((name, cg, rg))
    for k, parts in groups.items():
        bad, worst, worst_l2 = [], 0.0, 0.0
        for pname, a, b in parts:
            a, b = a.astype(np.float64), b.astype(np.float64)
            d = float(np.max(np.abs(a - b)))
            t = tl["GRAD_RTOL"] * float(np.max(np.abs(b))) + tl["GRAD_ATOL"]
            rel2 = float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
            worst = max(worst, d / t) if d == d else float("inf")
            worst_l2 = max(worst_l2, rel2) if rel2 == rel2 else float("inf")
            if not (d <= t and rel2 <= tl["GRAD_L2"]):
                bad.append(f"{pname} max|diff| {fmt(d)} (tol {fmt(t)}, max|ref| {fmt(float(np.max(np.abs(b))))}), "
                           f"rel L2 err {fmt(rel2)} (tol {fmt(tl['GRAD_L2'])})")
        where = f" (layers 0-{cfg.L - 1})" if len(parts) > 1 else ""
        res.add(not bad, f"grad {k}{where}", "; ".join(bad) if bad else
                f"worst max|diff|/tol {fmt(worst)}, worst rel L2 err {fmt(worst_l2)}")

    # gradients that must be exactly zero: the padded vocabulary rows (no token reaches
    # tok_embeddings' rows >= V; the loss ignores output's rows >= V)
    names = [n for n, _ in tensor_specs(cfg)]
    for tname in ("tok_embeddings.weight", "output.weight"):
        a = st["grads"][names.index(tname)][cfg.V:]
        m = float(np.max(np.abs(a))) if a.size else 0.0
        res.add(m <= tl["GRAD_ATOL"], f"grad {tname} padded rows zero", f"max|grad| {fmt(m)}, tol {fmt(tl['GRAD_ATOL'])}")

    n = st["n_steps"]
    if n == 0:
        return
    for key, label, rtol in (("losses", "step losses", tl["STEP_LOSS_RTOL"]),
                             ("grad_norms", "step grad norms", tl["STEP_NORM_RTOL"])):
        c = np.asarray(st[key], dtype=np.float64)
        r = np.asarray(ref[key], dtype=np.float64)
        rels = np.abs(c - r) / np.maximum(np.abs(r), 1e-30)
        badsteps = [f"step {i + 1}: C {c[i]:.7f} torch {r[i]:.7f} rel {fmt(rels[i])}" for i in range(n) if not rels[i] <= rtol]
        res.add(not badsteps, f"{label} ({n} AdamW steps)",
                "; ".join(badsteps) + f" (tol {fmt(rtol)})" if badsteps else
                f"max rel diff {fmt(float(np.max(rels)))}, {r[0]:.5f} -> {r[-1]:.5f}")
    # losses[0] is the loss at the initial weights, computed by a second forward
    res.add(abs(st["losses"][0] - st["loss"]) <= 1e-6 * abs(st["loss"]), "state losses[0] == loss",
            f"{st['losses'][0]!r} vs {st['loss']!r}")


def sensitivity(path, bugs, label=""):
    """For each emulated bug: the C state must fail against PyTorch with that bug, i.e. the
    comparison, at this state's shape, weights and batch, is able to tell the bug apart (a
    bug whose effect sits below the tolerances would pass unnoticed). Model bugs only: logits,
    loss and gradients at the initial weights are compared. One line per bug."""
    res = Results(False, label)
    cfg, st = read_state(path)
    st = dict(st, n_steps=0)  # the model's bugs show at the first weights: no AdamW steps
    for bug in bugs:
        if bug in ("rope_noscale", "rope_blend") and not cfg.rope_factor > 1.0:
            res.add(False, f"sensitivity to '{bug}'", "the state has no RoPE scaling to get wrong")
            continue
        quiet = Results(True)
        compare(cfg, st, run_reference(cfg, st, torch.float32, (bug,)), quiet)
        failed = [n for n, _ in quiet.failed()]
        res.add(failed, f"the C run is told apart from PyTorch with bug '{bug}'",
                f"{len(failed)} checks fail, e.g. {failed[0]}" if failed else "every check passes with the bug too")
    return res


def check_state(path, dtype=torch.float32, quiet=False, ref=None, label=""):
    """Reads the state, runs PyTorch (unless ref, a run on the same weights, batch and
    hyper-parameters, is given) and compares."""
    res = Results(quiet, label)
    cfg, st = read_state(path)
    res.add(True, "state file read",
            f"{DEVICES[st['device']][0]}: L={cfg.L} C={cfg.C} NH={cfg.NH} KVH={cfg.KVH} F={cfg.F} V={cfg.V} Vp={cfg.Vp} maxT={cfg.maxT}, "
            f"rope theta={cfg.rope_theta:g} factor={cfg.rope_factor:g}, B={st['B']} T={st['T']} "
            f"steps={st['n_steps']}, lr={st['lr']:g} wd={st['weight_decay']:g} clip={st['grad_clip']:g}")
    if ref is None:
        ref = run_reference(cfg, st, dtype)
    compare(cfg, st, ref, res)
    return res


# ----------------------------------------------------------------------------------------
# self-test


def selftest(tmp):
    res = Results()
    # GQA (2 query heads per kv head), head size 16; RoPE scaling on with original_max_pos 32
    # so that at T = 24 all three of its regimes (kept, blended, stretched) act on pairs whose
    # angles matter (with 8192 they would all be below 0.1 rad at these positions). A vocabulary
    # of 1000 (padded to 1024: padded rows and columns still there) keeps the ~20 float64 runs
    # quick; the C comparison runs GPT-2's.
    cfg = LlamaConfig(V=1000, Vp=1024, L=2, NH=4, KVH=2, C=64, F=96, maxT=32,
                      rope_theta=10000.0, rope_factor=8.0, rope_low=1.0, rope_high=4.0, rope_orig=32)
    cfg.check()
    # The regimes: wavelengths 2 pi / inv_freq against 32 / 4 = 8 and 32 / 1 = 32.
    wl = 2 * math.pi / rope_inv_freq(cfg, scaled=False).astype(np.float64)
    regimes = (int((wl < 8).sum()), int(((wl >= 8) & (wl <= 32)).sum()), int((wl > 32).sum()))
    res.add(all(r > 0 for r in regimes), "selftest: RoPE scaling's three regimes are exercised",
            f"pairs kept / blended / stretched: {regimes}")

    # Weights at std 0.1 (norm weights around 1) so that activations are of order 1: softmax,
    # SiLU and the norms off their near-linear regime, where a subtly wrong kernel shows. The
    # padded vocabulary rows are zero, as the C init leaves them.
    rng = np.random.default_rng(1)
    params = []
    for name, shape in tensor_specs(cfg):
        if len(shape) == 1:
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            a = 0.1 * rng.standard_normal(shape)
            if name in ("tok_embeddings.weight", "output.weight"):
                a[cfg.V:] = 0.0
        params.append(a.astype(np.float32))
    B, T = 2, 24
    base = dict(B=B, T=T, n_steps=8, lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0,
                x=rng.integers(0, cfg.V, B * T).astype(np.int32), y=rng.integers(0, cfg.V, B * T).astype(np.int32),
                params=params)

    def fake_c_state(bugs=(), c=cfg):
        # float64 PyTorch stands in for the C program (a second, differently rounded run)
        out = run_reference(c, base, torch.float64, bugs)
        st = dict(base)
        st.update(logits=out["logits"], loss=np.float32(out["loss"]), grads=out["grads"],
                  losses=np.float32(out["losses"]), grad_norms=np.float32(out["grad_norms"]))
        st["losses"][0] = st["loss"]
        return st

    spath = os.path.join(tmp, "state.bin")
    clean = fake_c_state()
    write_state(spath, cfg, clean)
    cfg2, st2 = read_state(spath)
    res.add(cfg2 == cfg and all(np.array_equal(a, b) for a, b in zip(params, st2["params"])),
            "selftest: state file round trip (config, RoPE parameters, weights)")
    ref32 = run_reference(cfg, base, torch.float32)  # the same for every state below
    r = check_state(spath, quiet=True, ref=ref32)
    worst = "; ".join(f"{n}: {d}" for ok, n, d in r.items if n.startswith(("loss", "logits", "step")))
    gworst = max(float(d.split()[-1]) for ok, n, d in r.items if ok and n.startswith("grad") and "worst" in d)
    worst += f"; gradients: worst max|diff|/tol {gworst:.3e}"
    res.add(not r.failed(), "selftest: a float64 run passes the float32 checks",
            worst if not r.failed() else "; ".join(f"{n}: {d}" for n, d in r.failed()))
    res.add(clean["grad_norms"][0] > base["grad_clip"], "selftest: gradient clipping is active at step 1",
            f"norm {clean['grad_norms'][0]:.3f} > clip {base['grad_clip']}")

    def expect_fail(what, st, expect_prefix, c=cfg):
        write_state(spath, c, st)
        r = check_state(spath, quiet=True, ref=ref32)
        names = [n for n, _ in r.failed()]
        hit = any(n.startswith(expect_prefix) for n in names)
        res.add(hit, f"selftest: {what} is caught",
                "failed: " + ", ".join(names) if hit else f"expected '{expect_prefix}' to fail, failed: {names}")

    def mutated(fn):
        st = {k: (v.copy() if isinstance(v, np.ndarray) else [a.copy() for a in v] if isinstance(v, list) else v)
              for k, v in clean.items()}
        fn(st)
        return st

    names = [n for n, _ in tensor_specs(cfg)]

    def bump_grad(name, rel):
        def fn(st):
            flat = st["grads"][names.index(name)].reshape(-1)
            i = int(np.argmax(np.abs(flat)))
            flat[i] += rel * abs(flat[i])
        return fn

    # corrupted state files: one value off in one tensor of one layer
    for tname in ("layers.1.attention.wqkv.weight", "layers.0.attention_norm.weight", "layers.1.feed_forward.w13.weight",
                  "layers.0.feed_forward.w2.weight", "norm.weight", "output.weight", "tok_embeddings.weight"):
        expect_fail(f"grad {tname} max element +0.2%", mutated(bump_grad(tname, 2e-3)), f"grad {kind(tname)}")

    def pad_row(tname):
        def fn(st):
            st["grads"][names.index(tname)][cfg.V + 3, 5] = 1e-6
        return fn
    expect_fail("non-zero gradient in a padded tok_embeddings row", mutated(pad_row("tok_embeddings.weight")),
                "grad tok_embeddings.weight padded")
    expect_fail("non-zero gradient in a padded output row", mutated(pad_row("output.weight")), "grad output.weight padded")

    # the cuda device's bf16 bounds: looser per element, but a tensor's gradient 10% off
    # throughout fails them by its relative L2 error
    def bf16_scaled(tname):
        def fn(st):
            st["device"] = 1
            st["grads"][names.index(tname)] *= np.float32(1.1)
        return fn
    expect_fail("(bf16 bounds) grad layers.0.feed_forward.w2.weight 10% off throughout",
                mutated(bf16_scaled("layers.0.feed_forward.w2.weight")), "grad feed_forward.w2")

    def logit(st):
        st["logits"][1, 5, 100] += 1e-3
    expect_fail("one logit off by 1e-3", mutated(logit), "logits")

    def pad_logit(st):
        st["logits"][0, 0, cfg.Vp - 1] += 1e-3
    expect_fail("a padded-column logit off by 1e-3", mutated(pad_logit), "logits")

    def loss(st):
        st["loss"] = np.float32(st["loss"] * (1 + 1e-4))
    expect_fail("loss off by 1e-4 relative", mutated(loss), "loss")

    def step_loss(st):
        st["losses"][6] *= np.float32(1 + 3e-5)
    expect_fail("step 7 loss off by 3e-5 relative", mutated(step_loss), "step losses")

    def step_norm(st):
        st["grad_norms"][4] *= np.float32(1 + 3e-4)
    expect_fail("step 5 grad norm off by 3e-4 relative", mutated(step_norm), "step grad norms")

    # emulated bugs: the fake C state is produced by a subtly wrong model or optimizer
    for bug, expect in (("rope_halves", "logits"), ("rope_sign", "logits"), ("rope_noscale", "logits"),
                        ("rope_blend", "logits"),
                        ("kv_heads", "logits"), ("rmsnorm_mean", "logits"), ("swiglu_swap", "logits"),
                        ("ce_padded", "loss"), ("adam_bias", "step losses"), ("decay_all", "step"),
                        ("no_clip", "step losses")):
        expect_fail(f"bug '{bug}'", fake_c_state((bug,)), expect)

    # The weights come from the state: a state whose initial weights differ from those its
    # outputs were computed with (the C code read other weights than it wrote) fails.
    def other_weights(st):
        st["params"][names.index("layers.1.attention.wo.weight")][3, 7] += 0.05
    write_state(spath, cfg, mutated(other_weights))
    r = check_state(spath, quiet=True)  # a fresh reference, from the changed weights
    res.add(any(n.startswith("logits") for n, _ in r.failed()), "selftest: a state whose weights are not its outputs' is caught",
            "failed: " + ", ".join(n for n, _ in r.failed()))

    # broken files: clear errors, no crash
    write_state(spath, cfg, clean)
    for what, fn, expect in (
            ("truncated state", lambda: truncate(spath, 100), "size"),
            ("state with a bad magic", lambda: poke(spath, 0, 1234), "bad magic 1234"),
            ("GPT-2 state", lambda: poke(spath, 0, GPT2_STATE_MAGIC), "a GPT-2 state"),
            ("state with kv heads not dividing heads", lambda: poke(spath, 9, 3), "kv heads divide heads"),
            ("state with a future version", lambda: poke(spath, 1, 2), "unsupported state version 2"),
            ("state from an unknown device", lambda: poke(spath, 14, 7), "unknown device 7")):
        write_state(spath, cfg, clean)
        fn()
        try:
            read_state(spath)
            res.add(False, f"selftest: {what} is refused", "no error raised")
        except ValueError as e:
            res.add(expect in str(e), f"selftest: {what} is refused", str(e))
    return res


def truncate(path, nbytes):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - nbytes)


def poke(path, index, value):
    with open(path, "r+b") as f:
        f.seek(4 * index)
        f.write(np.int32(value).tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--state", help="state file (build/test_gpt2 dump-llama)")
    ap.add_argument("--label", default="", help="prefix of every check's name")
    ap.add_argument("--sensitivity", metavar="BUG,...",
                    help="after the comparison, check that PyTorch with each of these emulated bugs "
                         "(run_reference's list) fails against the same state")
    ap.add_argument("--double", action="store_true", help="run the reference in float64 (diagnostics)")
    ap.add_argument("--selftest", action="store_true",
                    help="check this script on a small model against float64 and corrupted states")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.selftest:
        with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMP")) as tmp:
            res = selftest(tmp)
    else:
        if not args.state:
            ap.error("--state is required (or --selftest)")
        try:
            res = check_state(args.state, torch.float64 if args.double else torch.float32, label=args.label)
            if args.sensitivity:
                res.items += sensitivity(args.state, args.sensitivity.split(","), args.label).items
        except (ValueError, OSError) as e:
            print(f"not ok - {args.label + ': ' if args.label else ''}torch Llama reference: {e}")
            return 1
    return 1 if res.failed() else 0


if __name__ == "__main__":
    sys.exit(main())
