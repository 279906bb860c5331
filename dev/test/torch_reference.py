#!/usr/bin/env python3
"""Checks fsdp.c's CPU GPT-2 against PyTorch.

    $PYTHON dev/test/torch_reference.py --model M.bin --state S.bin
    $PYTHON dev/test/torch_reference.py --selftest

M.bin is an llm.c model file (written by train_gpt --save-model); S.bin is what
`build/test_gpt2 dump` wrote from the same model file: a fixed batch, the C model's logits,
loss and every parameter's gradient at those weights, then the losses and gradient norms of
n_steps AdamW steps on that same batch. This script rebuilds the model in PyTorch (float32 on
the CPU, see dev/test/torch_gpt2.py), redoes all of it and prints one `ok - <check>` or
`not ok - <check>: <numbers>` line per check; it exits 1 if any check fails.

State file: int32 header[256] = {20261130, 1, B, T, n_steps, V, Vp, L, NH, C, maxT, 0...};
float32 hyper[256] = {lr, beta1, beta2, eps, weight_decay, grad_clip, 0...}; int32 x[B*T];
int32 y[B*T]; float32 logits[B*T*Vp]; float32 loss; float32 grads[num_params] (model-file
order and shapes); float32 losses[n_steps]; float32 grad_norms[n_steps].
Step i (1-based) on the same batch: loss_i and grads; norm_i = global L2 norm of the grads
(before clipping); scale = grad_clip/norm_i if grad_clip > 0 and norm_i > grad_clip else 1;
AdamW with constant lr:  g = grad*scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
p -= lr * (m/(1-b1^i) / (sqrt(v/(1-b2^i)) + eps) + wd_p p), with wd_p = weight_decay for the
2-D tensors (wte, wpe, qkvw, attprojw, fcw, fcprojw) and 0 for biases and LayerNorms.

--selftest makes a small model, writes a state file from a float64 PyTorch run (standing in
for the C program: a second implementation whose rounding differs), checks that it passes,
then that corrupted states and emulated kernel bugs fail.
"""
import argparse
import math
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt2 as tg  # noqa: E402

STATE_MAGIC = 20261130
STATE_VERSION = 1

# ---- tolerances (fp32 C vs fp32 PyTorch; both differ from exact arithmetic by rounding) --
# Measured by --selftest (float64 vs float32 PyTorch, i.e. one implementation's rounding):
# loss ~1e-7 relative, logits ~3e-7 of max|logit|, gradients <= ~1e-6 of each tensor's
# max|grad|, step losses ~1e-7 and grad norms ~3e-7 relative after 8 AdamW steps.
# Loss: relative; ten times tighter than the 1e-4 the issue asks for, ~100x above the noise.
LOSS_RTOL = 1e-5
# Logits over all Vp columns: max|diff| <= LOGITS_RTOL * max|ref logit| + LOGITS_ATOL.
LOGITS_RTOL = 1e-4
LOGITS_ATOL = 1e-6
# Gradients, per tensor and per layer (h.N.attn.c_attn.weight, ...):
#   max|diff| <= GRAD_RTOL * max|ref grad| + GRAD_ATOL.
# The issue suggests 1e-3; 1e-4 still leaves ~100x over fp32 noise and is needed to catch a
# subtly wrong kernel: GELU with erf instead of tanh moves the MLP gradients by ~1.5e-4 of
# their max at GPT-2's init (std 0.02), which 1e-3 would let through.
GRAD_RTOL = 1e-4
# Absolute floor, for tensors whose reference gradient is (nearly) all zero. The gradient of
# wte's padded rows (>= V) and of wpe's rows >= T must be zero: checked against this floor.
GRAD_ATOL = 1e-9
# AdamW steps on the same batch: each step's loss and pre-clip gradient norm, relative
# (the issue suggests 1e-4; the losses hold 1e-5 with ~100x margin).
STEP_LOSS_RTOL = 1e-5
STEP_NORM_RTOL = 1e-4


class Results:
    def __init__(self, quiet=False):
        self.items = []  # (ok, name, detail)
        self.quiet = quiet

    def add(self, ok, name, detail=""):
        ok = bool(ok)
        self.items.append((ok, name, detail))
        if not self.quiet:
            if ok:
                print(f"ok - {name}" + (f" ({detail})" if detail else ""))
            else:
                print(f"not ok - {name}: {detail}")
        sys.stdout.flush()

    def failed(self):
        return [(n, d) for ok, n, d in self.items if not ok]


# ----------------------------------------------------------------------------------------
# state file


def state_layout(B, T, n_steps, Vp, num_params):
    """[(field, dtype, count)] after the two 256-entry headers."""
    return [("x", "<i4", B * T), ("y", "<i4", B * T), ("logits", "<f4", B * T * Vp),
            ("loss", "<f4", 1), ("grads", "<f4", num_params), ("losses", "<f4", n_steps),
            ("grad_norms", "<f4", n_steps)]


def read_state(path, cfg):
    """Reads and validates a state file against the model's config. Raises ValueError."""
    raw = tg.read_header(path, 512 * 4)
    hdr = np.frombuffer(raw[:1024], dtype="<i4")
    hyper = np.frombuffer(raw[1024:2048], dtype="<f4")
    if hdr[0] != STATE_MAGIC:
        raise ValueError(f"{path}: bad magic {hdr[0]} (expected {STATE_MAGIC}, a test_gpt2 state file)")
    if hdr[1] != STATE_VERSION:
        raise ValueError(f"{path}: unsupported state version {hdr[1]} (expected {STATE_VERSION})")
    B, T, n_steps, V, Vp, L, NH, C, maxT = (int(v) for v in hdr[2:11])
    mine = dict(V=V, Vp=Vp, L=L, NH=NH, C=C, maxT=maxT)
    theirs = dict(V=cfg.V, Vp=cfg.Vp, L=cfg.L, NH=cfg.NH, C=cfg.C, maxT=cfg.maxT)
    bad = [f"{k}={mine[k]} vs {theirs[k]}" for k in mine if mine[k] != theirs[k]]
    if bad:
        raise ValueError(f"{path}: state does not match the model file: " + ", ".join(bad)
                         + " (state vs model)")
    if B <= 0 or T <= 0 or T > maxT or n_steps < 0:
        raise ValueError(f"{path}: bad B={B} T={T} n_steps={n_steps} (maxT={maxT})")
    num_params = tg.llmc_num_params(cfg)
    layout = state_layout(B, T, n_steps, Vp, num_params)
    expect = 2048 + sum(np.dtype(dt).itemsize * n for _, dt, n in layout)
    size = os.path.getsize(path)
    if size != expect:
        raise ValueError(f"{path}: size {size} bytes, expected {expect} for B={B} T={T} "
                         f"n_steps={n_steps} and {num_params} parameters")
    st = dict(B=B, T=T, n_steps=n_steps,
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
    st["grads"] = tg.split_flat(cfg, st["grads"])
    return st


def write_state(path, cfg, st):
    hdr = np.zeros(256, dtype="<i4")
    hdr[:11] = [STATE_MAGIC, STATE_VERSION, st["B"], st["T"], st["n_steps"], cfg.V, cfg.Vp,
                cfg.L, cfg.NH, cfg.C, cfg.maxT]
    hyper = np.zeros(256, dtype="<f4")
    hyper[:6] = [st[k] for k in ("lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip")]
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        f.write(hyper.tobytes())
        for field, dt, n in state_layout(st["B"], st["T"], st["n_steps"], cfg.Vp, 0):
            if field == "grads":
                for g in st["grads"]:
                    f.write(np.ascontiguousarray(g, dtype=dt).tobytes())
                continue
            a = np.asarray(st[field], dtype=dt).reshape(-1)
            assert a.size == n, (field, a.size, n)
            f.write(a.tobytes())


# ----------------------------------------------------------------------------------------
# the PyTorch run: forward/backward on the batch, then n_steps manual AdamW steps


def run_reference(cfg, params, st, dtype=torch.float32, bugs=()):
    """Returns dict(logits, loss, grads, losses, grad_norms) computed by PyTorch.
    bugs: names of deliberate errors (self-test only): gelu_erf, attn_scale, attn_mask,
    ln_eps, adam_bias, decay_all, no_clip."""
    torch.manual_seed(0)
    model = tg.GPT2(cfg).to(dtype).load_llmc(params)
    if "gelu_erf" in bugs:
        model.gelu = lambda x: torch.nn.functional.gelu(x)
    if "ln_eps" in bugs:
        model.ln_eps = 1e-3
    if "attn_scale" in bugs or "attn_mask" in bugs:
        def attn(q, k, v, scale_bug="attn_scale" in bugs, mask_bug="attn_mask" in bugs):
            T, hs = q.size(-2), q.size(-1)
            mask = torch.ones(T, T, dtype=torch.bool).triu_(2 if mask_bug else 1)
            att = (q @ k.transpose(-2, -1)) / (hs if scale_bug else math.sqrt(hs))
            att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
            return att @ v
        model.attention = attn
    x = torch.from_numpy(st["x"].astype(np.int64)).view(st["B"], st["T"])
    y = torch.from_numpy(st["y"].astype(np.int64)).view(st["B"], st["T"])
    views = model.llmc_tensor_views()
    moments = {id(p): (torch.zeros_like(p), torch.zeros_like(p))
               for _, plist in views for _, p in plist}
    b1, b2, eps, lr = st["beta1"], st["beta2"], st["eps"], st["lr"]
    out = dict(losses=[], grad_norms=[])
    for step in range(1, max(st["n_steps"], 1) + 1):
        model.zero_grad(set_to_none=False)
        logits, loss = model(x, y)
        loss.backward()
        norm = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in model.parameters()))
        if step == 1:
            out["logits"] = logits.detach().float().numpy()
            out["loss"] = float(loss)
            out["grads"] = model.export_llmc(grads=True)
        if step > st["n_steps"]:
            break
        out["losses"].append(float(loss))
        out["grad_norms"].append(norm)
        clip = st["grad_clip"]
        scale = clip / norm if clip > 0 and norm > clip and "no_clip" not in bugs else 1.0
        bc1 = 1.0 if "adam_bias" in bugs else 1.0 - b1 ** step
        bc2 = 1.0 if "adam_bias" in bugs else 1.0 - b2 ** step
        with torch.no_grad():
            for name, plist in views:
                wd = st["weight_decay"] if (name in tg.LLMC_DECAYED or "decay_all" in bugs) else 0.0
                for _, p in plist:
                    m, v = moments[id(p)]
                    g = p.grad * scale
                    m.mul_(b1).add_(g, alpha=1.0 - b1)
                    v.mul_(b2).addcmul_(g, g, value=1.0 - b2)
                    upd = (m / bc1) / ((v / bc2).sqrt() + eps) + wd * p
                    p.sub_(lr * upd)
    return out


# ----------------------------------------------------------------------------------------
# comparison


def fmt(x):
    return f"{x:.3e}"


def compare(cfg, st, ref, res):
    # logits, all Vp columns
    c, r = st["logits"].astype(np.float64), ref["logits"].astype(np.float64)
    diff = float(np.max(np.abs(c - r)))
    tol = LOGITS_RTOL * float(np.max(np.abs(r))) + LOGITS_ATOL
    res.add(diff <= tol, f"logits [{st['B']}x{st['T']}x{cfg.Vp}]",
            f"max|diff| {fmt(diff)}, tol {fmt(tol)}")

    # loss
    rel = abs(st["loss"] - ref["loss"]) / max(abs(ref["loss"]), 1e-30)
    res.add(rel <= LOSS_RTOL, "loss",
            f"C {st['loss']:.7f}, torch {ref['loss']:.7f}, rel diff {fmt(rel)}, tol {fmt(LOSS_RTOL)}")

    # gradients: one line per llm.c tensor, each layer checked on its own
    for (name, pattern, _), cg, rg in zip(tg.LLMC_TENSORS, st["grads"], ref["grads"]):
        layered = tg.llmc_is_layered(pattern)
        parts = [(pattern.format(l), cg[l], rg[l]) for l in range(cfg.L)] if layered \
            else [(pattern, cg, rg)]
        bad, worst = [], 0.0
        for pname, a, b in parts:
            a, b = a.astype(np.float64), b.astype(np.float64)
            d = float(np.max(np.abs(a - b)))
            scale = float(np.max(np.abs(b)))
            t = GRAD_RTOL * scale + GRAD_ATOL
            ratio = d / t
            worst = max(worst, ratio) if ratio == ratio else float("inf")
            if not d <= t:
                rel2 = float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
                bad.append(f"{pname} max|diff| {fmt(d)} > tol {fmt(t)} "
                           f"(max|ref| {fmt(scale)}, rel L2 err {fmt(rel2)})")
        what = f"grad {name}" + (f" (h.0-{cfg.L - 1})" if layered else f" ({pattern})")
        res.add(not bad, what, "; ".join(bad) if bad else f"worst max|diff|/tol {fmt(worst)}")

    # gradients that must be exactly zero: wte's padded rows, wpe's rows >= T
    zero_parts = [("wte padded rows", st["grads"][0][cfg.V:]),
                  ("wpe rows >= T", st["grads"][1][st["T"]:])]
    for what, a in zero_parts:
        m = float(np.max(np.abs(a))) if a.size else 0.0
        res.add(m <= GRAD_ATOL, f"grad {what} zero", f"max|grad| {fmt(m)}, tol {fmt(GRAD_ATOL)}")

    # AdamW steps
    n = st["n_steps"]
    if n == 0:
        return
    for key, label, rtol in (("losses", "step losses", STEP_LOSS_RTOL),
                             ("grad_norms", "step grad norms", STEP_NORM_RTOL)):
        c = np.asarray(st[key], dtype=np.float64)
        r = np.asarray(ref[key], dtype=np.float64)
        rels = np.abs(c - r) / np.maximum(np.abs(r), 1e-30)
        badsteps = [f"step {i + 1}: C {c[i]:.7f} torch {r[i]:.7f} rel {fmt(rels[i])}"
                    for i in range(n) if not rels[i] <= rtol]
        res.add(not badsteps, f"{label} ({n} AdamW steps)",
                "; ".join(badsteps) + f" (tol {fmt(rtol)})" if badsteps else
                f"max rel diff {fmt(float(np.max(rels)))}, {r[0]:.5f} -> {r[-1]:.5f}")
    # losses[0] is the loss at the initial weights
    res.add(abs(st["losses"][0] - st["loss"]) <= 1e-6 * abs(st["loss"]), "state losses[0] == loss",
            f"{st['losses'][0]!r} vs {st['loss']!r}")


def check_files(model_path, state_path, dtype, quiet=False, ref=None):
    """Reads both files, runs PyTorch (unless ref, a previous run on the same model, batch and
    hyperparameters, is given) and compares."""
    res = Results(quiet)
    cfg, params = tg.read_model_file(model_path)
    st = read_state(state_path, cfg)
    res.add(True, "model and state files agree",
            f"L={cfg.L} C={cfg.C} NH={cfg.NH} V={cfg.V} Vp={cfg.Vp} maxT={cfg.maxT}, "
            f"B={st['B']} T={st['T']} steps={st['n_steps']}, lr={st['lr']:g} "
            f"wd={st['weight_decay']:g} clip={st['grad_clip']:g}")
    if ref is None:
        ref = run_reference(cfg, params, st, dtype)
    compare(cfg, st, ref, res)
    return res


# ----------------------------------------------------------------------------------------
# self-test


def selftest(tmp):
    res = Results()
    cfg = tg.GPTConfig(maxT=32, V=tg.GPT2_VOCAB, L=2, NH=4, C=64)
    model = tg.GPT2(cfg).init_weights(seed=1)
    with torch.no_grad():
        # Non-trivial LayerNorm parameters and biases; matrices at std 0.1 instead of 0.02 so
        # that activations are of order 1 (GELU, softmax and LayerNorm off their near-linear
        # regime, where a subtly wrong kernel shows). The tolerances also hold at std 0.02.
        g = torch.Generator().manual_seed(2)
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.mul_(5.0)
        model.wte.weight[cfg.V:].zero_()
    params = model.export_llmc()
    mpath = os.path.join(tmp, "model.bin")
    tg.write_model_file(mpath, cfg, params)
    cfg2, params2 = tg.read_model_file(mpath)
    res.add(cfg2 == cfg and all(np.array_equal(a, b) for a, b in zip(params, params2)),
            "selftest: model file round trip")
    bpath = os.path.join(tmp, "model_bf16.bin")  # version 5: the upper 16 bits of each fp32
    with open(mpath, "rb") as f, open(bpath, "wb") as g:
        hdr = np.frombuffer(f.read(1024), dtype="<i4").copy()
        hdr[1] = tg.MODEL_VERSION_BF16
        g.write(hdr.tobytes())
        g.write((np.fromfile(f, dtype="<u4") >> 16).astype("<u2").tobytes())
    _, pb = tg.read_model_file(bpath)
    res.add(all(np.array_equal(b, (a.view(np.uint32) & 0xFFFF0000).view(np.float32))
                for a, b in zip(params, pb)), "selftest: bf16 model file read")

    rng = np.random.default_rng(3)
    B, T = 2, 24
    base = dict(B=B, T=T, n_steps=8, lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8,
                weight_decay=0.1, grad_clip=1.0,
                x=rng.integers(0, cfg.V, B * T).astype(np.int32),
                y=rng.integers(0, cfg.V, B * T).astype(np.int32))

    def fake_c_state(bugs=()):
        # float64 PyTorch stands in for the C program (a second, differently rounded run)
        out = run_reference(cfg, params, base, torch.float64, bugs)
        st = dict(base)
        st.update(logits=out["logits"], loss=np.float32(out["loss"]),
                  grads=out["grads"], losses=np.float32(out["losses"]),
                  grad_norms=np.float32(out["grad_norms"]))
        st["losses"][0] = st["loss"]
        return st

    spath = os.path.join(tmp, "state.bin")
    clean = fake_c_state()
    write_state(spath, cfg, clean)
    ref32 = run_reference(cfg, params, base, torch.float32)  # the same for every state below
    r = check_files(mpath, spath, torch.float32, quiet=True, ref=ref32)
    worst = "; ".join(f"{n}: {d}" for ok, n, d in r.items if n.startswith(("loss", "logits", "step")))
    gworst = max(float(d.split()[-1]) for ok, n, d in r.items if ok and n.startswith("grad")
                 and "worst" in d)
    worst += f"; gradients: worst max|diff|/tol {gworst:.3e}"
    res.add(not r.failed(), "selftest: a float64 run passes the float32 checks",
            worst if not r.failed() else "; ".join(f"{n}: {d}" for n, d in r.failed()))
    print(f"# clean run: grad clipping active at step 1: {clean['grad_norms'][0]:.3f} > 1.0"
          if clean["grad_norms"][0] > 1.0 else "# clean run: no clipping")

    def expect_fail(what, st, expect_prefix):
        write_state(spath, cfg, st)
        r = check_files(mpath, spath, torch.float32, quiet=True, ref=ref32)
        names = [n for n, _ in r.failed()]
        hit = any(n.startswith(expect_prefix) for n in names)
        res.add(hit, f"selftest: {what} is caught",
                "failed: " + ", ".join(names) if hit else f"expected '{expect_prefix}' to fail, "
                f"failed: {names}")

    def mutated(fn):
        st = {k: (v.copy() if isinstance(v, np.ndarray) else
                  [a.copy() for a in v] if isinstance(v, list) else v) for k, v in clean.items()}
        fn(st)
        return st

    names = [n for n, _, _ in tg.LLMC_TENSORS]

    def bump_grad(name, layer, rel):
        def fn(st):
            g = st["grads"][names.index(name)]
            part = g[layer] if g.ndim > 1 and name not in ("wte", "wpe") else g
            flat = part.reshape(-1)
            i = int(np.argmax(np.abs(flat)))
            flat[i] += rel * abs(flat[i])
        return fn

    # corrupted state files: one value off in one tensor of one layer
    expect_fail("grad qkvw layer 1 max element +0.2%", mutated(bump_grad("qkvw", 1, 2e-3)), "grad qkvw")
    expect_fail("grad ln2b layer 0 max element +0.2%", mutated(bump_grad("ln2b", 0, 2e-3)), "grad ln2b")
    expect_fail("grad lnfw max element +0.2%", mutated(bump_grad("lnfw", 0, 2e-3)), "grad lnfw")
    expect_fail("grad wpe max element +0.2%", mutated(bump_grad("wpe", 0, 2e-3)), "grad wpe")

    def pad_row(st):
        st["grads"][0][cfg.V + 3, 5] = 1e-6
    expect_fail("non-zero gradient in a padded wte row", mutated(pad_row), "grad wte padded")

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

    # emulated kernel bugs: the fake C state is produced by a subtly wrong model
    for bug, expect in (("gelu_erf", "grad"), ("attn_scale", "logits"), ("attn_mask", "logits"),
                        ("ln_eps", "grad"), ("adam_bias", "step losses"),
                        ("decay_all", "step"), ("no_clip", "step losses")):
        expect_fail(f"kernel bug '{bug}'", fake_c_state((bug,)), expect)

    # mismatched / broken files: clear errors, no crash
    cfg_other = tg.GPTConfig(maxT=32, V=tg.GPT2_VOCAB, L=2, NH=4, C=32)
    other = os.path.join(tmp, "other.bin")
    tg.write_model_file(other, cfg_other, tg.GPT2(cfg_other).init_weights().export_llmc())
    write_state(spath, cfg, clean)
    for what, fn, expect in (
            ("state vs a model with other channels", lambda: check_files(other, spath, torch.float32, True),
             "C=64 vs 32"),
            ("truncated state", lambda: (truncate(spath, 100), check_files(mpath, spath, torch.float32, True)),
             "size"),
            ("truncated model", lambda: (truncate(mpath, 4), tg.read_model_file(mpath)), "size"),
            ("model with a bad magic", lambda: (poke(mpath, 0, 1234), tg.read_model_file(mpath)), "bad magic")):
        try:
            fn()
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
    ap.add_argument("--model", help="llm.c model file (train_gpt --save-model)")
    ap.add_argument("--state", help="state file (build/test_gpt2 dump)")
    ap.add_argument("--double", action="store_true",
                    help="run the PyTorch reference in float64 instead of float32 (diagnostics)")
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
        if not args.model or not args.state:
            ap.error("--model and --state are required (or --selftest)")
        try:
            res = check_files(args.model, args.state, torch.float64 if args.double else torch.float32)
        except (ValueError, OSError) as e:
            print(f"not ok - torch reference: {e}")
            return 1
    return 1 if res.failed() else 0


if __name__ == "__main__":
    sys.exit(main())
