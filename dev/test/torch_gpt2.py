"""GPT-2 in PyTorch exactly as fsdp.c (and llm.c) defines it, plus llm.c's model-file format.

Shared by dev/test/torch_reference.py (the reference the C model is checked against) and
dev/bench/torch_gpt2_cpu.py (the PyTorch side of the CPU benchmark). PyTorch 1.13 API.

The model: learned token (wte [Vp, C]) and position (wpe [maxT, C]) embeddings; L pre-LN
blocks  x = x + attn_proj(attn(ln_1(x)));  x = x + fc_proj(gelu_tanh(fc(ln_2(x))));
final ln_f; logits = ln_f(x) @ wte^T over all Vp columns (tied LM head); the loss is the
mean cross-entropy over all B*T positions using only the first V columns (the padded
columns get zero gradient). LayerNorm eps 1e-5; causal attention with scale 1/sqrt(C/NH);
qkv = x @ W^T + b split as q | k | v, each [C], heads of size C/NH in order.

Model file (llm.c): int32 header[256] = {20240326, 3 (fp32) or 5 (bf16: upper 16 bits of
fp32), maxT, V, L, NH, C, Vp, 0...}, then the tensors of LLMC_TENSORS concatenated in that
order, each row-major, the per-layer ones stacked over L.
"""
import math
import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MODEL_MAGIC = 20240326
MODEL_VERSION_FP32 = 3
MODEL_VERSION_BF16 = 5
HEADER_INTS = 256
GPT2_VOCAB = 50257


@dataclass
class GPTConfig:
    maxT: int = 1024
    V: int = GPT2_VOCAB
    L: int = 12
    NH: int = 12
    C: int = 768
    Vp: int = 0  # 0: V rounded up to a multiple of 128

    def __post_init__(self):
        if self.Vp == 0:
            self.Vp = (self.V + 127) // 128 * 128
        if min(self.maxT, self.V, self.L, self.NH, self.C) <= 0:
            raise ValueError(f"bad GPT-2 config {self}")
        if self.C % self.NH != 0:
            raise ValueError(f"channels {self.C} not divisible by heads {self.NH}")
        if self.Vp < self.V:
            raise ValueError(f"padded vocab {self.Vp} < vocab {self.V}")


# (llm.c name, per-layer name pattern or None for a root tensor, shape as a function of cfg)
# in the model file's order. Per-layer shapes exclude the leading L.
LLMC_TENSORS = [
    ("wte", "wte.weight", lambda c: (c.Vp, c.C)),
    ("wpe", "wpe.weight", lambda c: (c.maxT, c.C)),
    ("ln1w", "h.{}.ln_1.weight", lambda c: (c.C,)),
    ("ln1b", "h.{}.ln_1.bias", lambda c: (c.C,)),
    ("qkvw", "h.{}.attn.c_attn.weight", lambda c: (3 * c.C, c.C)),
    ("qkvb", "h.{}.attn.c_attn.bias", lambda c: (3 * c.C,)),
    ("attprojw", "h.{}.attn.c_proj.weight", lambda c: (c.C, c.C)),
    ("attprojb", "h.{}.attn.c_proj.bias", lambda c: (c.C,)),
    ("ln2w", "h.{}.ln_2.weight", lambda c: (c.C,)),
    ("ln2b", "h.{}.ln_2.bias", lambda c: (c.C,)),
    ("fcw", "h.{}.mlp.c_fc.weight", lambda c: (4 * c.C, c.C)),
    ("fcb", "h.{}.mlp.c_fc.bias", lambda c: (4 * c.C,)),
    ("fcprojw", "h.{}.mlp.c_proj.weight", lambda c: (c.C, 4 * c.C)),
    ("fcprojb", "h.{}.mlp.c_proj.bias", lambda c: (c.C,)),
    ("lnfw", "ln_f.weight", lambda c: (c.C,)),
    ("lnfb", "ln_f.bias", lambda c: (c.C,)),
]
# Tensors that get weight decay (the 2-D ones); biases and LayerNorm parameters do not.
LLMC_DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def llmc_is_layered(pattern):
    return "{}" in pattern


def llmc_shapes(cfg):
    """[(llm.c name, full shape as stored in the file)] in file order."""
    out = []
    for name, pattern, shape in LLMC_TENSORS:
        s = shape(cfg)
        out.append((name, ((cfg.L,) + s) if llmc_is_layered(pattern) else s))
    return out


def llmc_num_params(cfg):
    return sum(int(np.prod(s)) for _, s in llmc_shapes(cfg))


# ----------------------------------------------------------------------------------------
# model file I/O


def read_header(path, nbytes=HEADER_INTS * 4):
    with open(path, "rb") as f:
        raw = f.read(nbytes)
    if len(raw) < nbytes:
        raise ValueError(f"{path}: file too short for a {nbytes}-byte header ({len(raw)} bytes)")
    return raw


def read_model_file(path):
    """Returns (GPTConfig, [np.float32 arrays in LLMC_TENSORS order, full stacked shapes])."""
    hdr = np.frombuffer(read_header(path), dtype="<i4")
    if hdr[0] != MODEL_MAGIC:
        raise ValueError(f"{path}: bad magic {hdr[0]} (expected {MODEL_MAGIC}, an llm.c model file)")
    version = int(hdr[1])
    if version not in (MODEL_VERSION_FP32, MODEL_VERSION_BF16):
        raise ValueError(f"{path}: unsupported version {version} (3 = fp32, 5 = bf16)")
    maxT, V, L, NH, C, Vp = (int(v) for v in hdr[2:8])
    try:
        cfg = GPTConfig(maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=Vp)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    n = llmc_num_params(cfg)
    esize = 4 if version == MODEL_VERSION_FP32 else 2
    expect = HEADER_INTS * 4 + n * esize
    size = os.path.getsize(path)
    if size != expect:
        raise ValueError(f"{path}: size {size} bytes, expected {expect} for {cfg} (version {version})")
    if version == MODEL_VERSION_FP32:
        flat = np.fromfile(path, dtype="<f4", offset=HEADER_INTS * 4)
    else:
        u16 = np.fromfile(path, dtype="<u2", offset=HEADER_INTS * 4)
        flat = (u16.astype(np.uint32) << 16).view(np.float32)
    return cfg, split_flat(cfg, flat)


def split_flat(cfg, flat):
    out, off = [], 0
    for _, shape in llmc_shapes(cfg):
        k = int(np.prod(shape))
        out.append(np.asarray(flat[off:off + k], dtype=np.float32).reshape(shape))
        off += k
    assert off == flat.size, (off, flat.size)
    return out


def write_model_file(path, cfg, arrays):
    """Writes an fp32 (version 3) llm.c model file."""
    hdr = np.zeros(HEADER_INTS, dtype="<i4")
    hdr[:8] = [MODEL_MAGIC, MODEL_VERSION_FP32, cfg.maxT, cfg.V, cfg.L, cfg.NH, cfg.C, cfg.Vp]
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        for (name, shape), a in zip(llmc_shapes(cfg), arrays):
            assert tuple(a.shape) == tuple(shape), (name, a.shape, shape)
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())


# ----------------------------------------------------------------------------------------
# the model


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


_MASKS = {}


def causal_mask(T, device):
    """[T, T] bool, True above the diagonal (the future), cached."""
    key = (T, str(device))
    if key not in _MASKS:
        _MASKS[key] = torch.ones(T, T, dtype=torch.bool, device=device).triu_(1)
    return _MASKS[key]


def causal_attention(q, k, v):
    """q, k, v: [B, NH, T, hs] -> [B, NH, T, hs], causal, scale 1/sqrt(hs)."""
    if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T, hs = q.size(-2), q.size(-1)
    mask = causal_mask(T, q.device)
    att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
    att = att.masked_fill(mask, float("-inf"))
    att = torch.softmax(att, dim=-1)
    return torch.matmul(att, v)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg.C
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(C, 3 * C)
        self.attn.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(C, 4 * C)
        self.mlp.c_proj = nn.Linear(4 * C, C)


class GPT2(nn.Module):
    # Hooks the reference's self-test swaps to emulate a buggy kernel.
    gelu = staticmethod(gelu_tanh)
    attention = staticmethod(causal_attention)
    ln_eps = 1e-5

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.Vp, cfg.C)
        self.wpe = nn.Embedding(cfg.maxT, cfg.C)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.L)])
        self.ln_f = nn.LayerNorm(cfg.C, eps=1e-5)

    def init_weights(self, seed=0):
        """GPT-2 init (as llm.c's train_gpt2.py): N(0, 0.02) for matrices and embeddings,
        0.02/sqrt(2L) for the residual projections, zero biases, unit LayerNorm weights;
        the padded vocabulary rows are zero."""
        g = torch.Generator().manual_seed(seed)
        std_res = 0.02 / math.sqrt(2 * self.cfg.L)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    p.normal_(0.0, std_res, generator=g)
                elif name.endswith(".weight") and p.dim() == 2:
                    p.normal_(0.0, 0.02, generator=g)
                elif "ln" in name and name.endswith(".weight"):
                    p.fill_(1.0)
                else:
                    p.zero_()
            self.wte.weight[self.cfg.V:].zero_()
        return self

    def _ln(self, x, ln):
        return F.layer_norm(x, (self.cfg.C,), ln.weight, ln.bias, self.ln_eps)

    def forward(self, idx, targets=None, logits_v_only=False):
        """idx, targets: int64 [B, T]. Returns (logits [B, T, Vp], mean loss or None).
        logits_v_only=True computes only the first V columns (same loss, for the benchmark)."""
        cfg = self.cfg
        B, T = idx.shape
        C, NH = cfg.C, cfg.NH
        hs = C // NH
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.h:
            qkv = blk.attn.c_attn(self._ln(x, blk.ln_1))
            q, k, v = qkv.split(C, dim=2)
            q = q.view(B, T, NH, hs).transpose(1, 2)
            k = k.view(B, T, NH, hs).transpose(1, 2)
            v = v.view(B, T, NH, hs).transpose(1, 2)
            y = self.attention(q, k, v).transpose(1, 2).contiguous().view(B, T, C)
            x = x + blk.attn.c_proj(y)
            x = x + blk.mlp.c_proj(self.gelu(blk.mlp.c_fc(self._ln(x, blk.ln_2))))
        x = self._ln(x, self.ln_f)
        if logits_v_only:
            logits = F.linear(x, self.wte.weight[: cfg.V])
            lv = logits
        else:
            logits = F.linear(x, self.wte.weight)
            lv = logits[..., : cfg.V]
        loss = None
        if targets is not None:
            loss = F.cross_entropy(lv.reshape(B * T, -1), targets.reshape(B * T))
        return logits, loss

    # --- llm.c layout <-> this module -------------------------------------------------------

    def llmc_tensor_views(self):
        """[(llm.c name, [(display name, Parameter)])] in file order; per-layer tensors list
        one Parameter per layer (h.N....), root tensors one."""
        params = dict(self.named_parameters())
        out = []
        for name, pattern, _ in LLMC_TENSORS:
            if llmc_is_layered(pattern):
                out.append((name, [(pattern.format(l), params[pattern.format(l)])
                                   for l in range(self.cfg.L)]))
            else:
                out.append((name, [(pattern, params[pattern])]))
        return out

    def load_llmc(self, arrays):
        with torch.no_grad():
            for (name, plist), a in zip(self.llmc_tensor_views(), arrays):
                layered = llmc_is_layered(dict((n, p) for n, p, _ in LLMC_TENSORS)[name])
                for i, (_, p) in enumerate(plist):
                    src = np.ascontiguousarray(a[i] if layered else a)
                    p.copy_(torch.from_numpy(src).to(p.dtype).view_as(p))
        return self

    def export_llmc(self, grads=False):
        """Parameters (or their .grad) as float32 numpy arrays in llm.c layout."""
        out = []
        for (name, pattern, _), (_, plist) in zip(LLMC_TENSORS, self.llmc_tensor_views()):
            ts = [(p.grad if grads else p).detach().to(torch.float32) for _, p in plist]
            t = torch.stack(ts) if llmc_is_layered(pattern) else ts[0]
            out.append(t.numpy().copy())
        return out


def param_groups_decay(model):
    """(decayed, not decayed) Parameters following LLMC_DECAYED."""
    decay, no_decay = [], []
    for name, plist in model.llmc_tensor_views():
        (decay if name in LLMC_DECAYED else no_decay).extend(p for _, p in plist)
    return decay, no_decay
