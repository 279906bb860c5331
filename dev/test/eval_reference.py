#!/usr/bin/env python3
"""An independent reference for train_gpt's multiple-choice evaluation (HellaSwag in llm.c's
eval format) and its greedy generation, run on a Hugging Face-layout safetensors export
(`ckpt export --safetensors DIR/model.safetensors` writes model.safetensors + config.json).

Nothing here goes through train_gpt's code: the eval file is parsed by its own reader, and
the model is a numpy float64 forward in Hugging Face's convention, the family taken from
config.json's model_type: "gpt2" (GPT2Model / GPT2LMHeadModel names, with or without
"transformer.", Conv1D weights [in, out], LayerNorm eps layer_norm_epsilon, tanh GELU, a head
tied to wte unless lm_head.weight is given with tie_word_embeddings false) or "llama"
(LlamaForCausalLM: q/k in rotate_half's row order, grouped-query attention, rope_theta and
rope_scaling "llama3" as kernels/rope.h computes the frequencies, rms_norm_eps, lm_head.weight
or tied embeddings). F32 or BF16 tensors, one file or save_pretrained's shards + index. Logits
are taken over the first vocab_size columns.

    eval_reference.py score MODEL_DIR EVALFILE OUT.jsonl
        Every example of EVALFILE: row = context + completion; the forward reads the row's first
        len-1 tokens; cross-entropy (float64 log-softmax) of the next token at positions
        ctx_len-1 .. len-2 (the completion's tokens); their mean and sum. pred_norm = the first
        argmin of the means, pred = of the sums. OUT.jsonl (written whole or not at all): one line
        per example in file order,
          {"example": i, "index": idx, "label": l, "pred_norm": p, "pred": q,
           "mean_loss": [one per completion], "sum_loss": [one per completion]}
        and one line on stdout: "examples N acc_norm A acc B" (fractions, 6 decimals).
    eval_reference.py compare REF.jsonl OURS.jsonl [--tol 1e-4]
        OURS (train_gpt's eval log, same schema) against REF (score's): the same examples in
        the same order with the same labels and completion counts; every pred_norm (pred) equal,
        except at a near tie, where OURS's choice is within tol of REF's best mean (sum): counted
        and named, and more than 10% near ties fails (the test model must discriminate); OURS's
        own pred_norm / pred the argmin of its own losses; every mean and sum within tol
        (absolute: fp32 on the cpu device against float64); acc_norm and acc equal (a difference
        is accepted only where near ties make it). Exits 1 on any failure.
    eval_reference.py agree BASE.jsonl OTHER.jsonl --max-diff D
        Two train_gpt eval logs of the same set and weights on different devices (the cpu's fp32
        and cuda's bf16): every mean loss within D of BASE's, and OTHER's pred_norm equal to
        BASE's except where BASE's losses of the two choices are within twice the largest
        difference seen (a near tie at that precision). Prints one line; exits 1 otherwise.
    eval_reference.py generate MODEL_DIR --prompt-ids 50256,464,... --tokens N
        Greedy decoding (argmax of the first vocab_size logits, ties to the smaller id), a full
        forward per token; prints the N generated ids comma-separated on one line. Refused when
        the prompt + N tokens exceed the model's positions (n_positions,
        max_position_embeddings).
    eval_reference.py loss MODEL_DIR VAL_SHARD T N EXPECT [--name NAME]
        The mean next-token loss over windows 0..N-1 of VAL_SHARD (window w: tokens w*T ..
        w*T+T, as train_gpt's unshuffled validation reads them; N = --val-steps x B on one rank)
        against EXPECT, train_gpt's val_loss of the same weights (hf_llama_check.py's tolerance):
        the forward checked against train_gpt on a real export, for both families.
    eval_reference.py make-evalset TOKEN_SHARD OUT.bin [--examples 20] [--context 20]
                                   [--completion 10] [--seed 1]
        A test eval file written by this script's own writer (not dataloader/evalset's): each
        example a context of --context tokens at a random place of TOKEN_SHARD (a .bin token
        shard, uint16), its true continuation (--completion tokens) as the label's completion
        and three distractors of that length from elsewhere, the label random; index = the
        example's number. Real text against random text: a trained model discriminates.
    eval_reference.py selftest
        The parser against files its own writer makes (and refusing damaged ones), make-evalset
        on a shard of counting tokens; random 2-layer GPT-2 and Llama models saved as
        save_pretrained directories (V 300, 12 examples of 4 completions), where score's
        losses equal a differently written float64 computation (torch_gpt2.py's model for
        GPT-2, hf_llama_check.py's full-sequence loss for Llama), the tied Llama scores as the
        untied one, and generate is deterministic and follows the direct computation's argmax;
        compare on edited copies of a score output.

Bad input (a file, a flag): one line "eval_reference.py: error: ..." naming it, exit 1. The
checks print `ok - ...` / `not ok - ...` lines and exit 1 if one failed.
"""
import argparse
import json
import math
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hf_llama_check as hf  # noqa: E402  (report, rope_inv_freq, rmsnorm, val_windows, save)

EVAL_MAGIC, EVAL_VERSION, EVAL_HEADER_INTS = 20240522, 1, 256
START = 65535
MAX_COMPLETIONS = 16  # dataloader/evalset.h's limit


class InputError(Exception):
    """A bad file or flag: its message is the one line printed."""


report = hf.report  # its `failed` flag decides the exit status


# ---- the eval file (llm.c's format), read and written here without the C reader

def parse_evalset(path):
    """[{"index", "label", "context": [ids], "completions": [[ids], ...]}] of an eval file, every
    framing field checked (the path and the example named in each refusal)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}")
    if len(raw) < 4 * EVAL_HEADER_INTS:
        raise InputError(f"{path}: {len(raw)} bytes, too short for the {4 * EVAL_HEADER_INTS}-byte header")
    hdr = np.frombuffer(raw[:4 * EVAL_HEADER_INTS], dtype="<i4")
    if hdr[0] != EVAL_MAGIC:
        raise InputError(f"{path}: not an eval file (magic {hdr[0]}, expected {EVAL_MAGIC})")
    if hdr[1] != EVAL_VERSION:
        raise InputError(f"{path}: eval file version {hdr[1]}, expected {EVAL_VERSION}")
    n, longest = int(hdr[2]), int(hdr[3])
    if n < 1:
        raise InputError(f"{path}: header says {n} examples")
    body = raw[4 * EVAL_HEADER_INTS:]
    if len(body) % 2:
        raise InputError(f"{path}: an odd number of bytes after the header ({len(body)})")
    s = np.frombuffer(body, dtype="<u2").astype(np.int64)
    examples, at, seen_longest = [], 0, 0
    for i in range(n):
        where = f"{path}: example {i}"

        def take(count, what):
            nonlocal at
            if at + count > len(s):
                raise InputError(f"{where}: file ends inside the {what}")
            out = s[at:at + count]
            at += count
            return out

        start = at
        if take(1, "start marker")[0] != START:
            raise InputError(f"{where}: no start marker {START} at uint16 {start}")
        nbytes, index, label, nc, ctx_len = (int(v) for v in take(5, "example header"))
        if not 1 <= nc <= MAX_COMPLETIONS:
            raise InputError(f"{where}: {nc} completions (1..{MAX_COMPLETIONS})")
        if not 0 <= label < nc:
            raise InputError(f"{where}: label {label} out of range for {nc} completions")
        if ctx_len < 1:
            raise InputError(f"{where}: empty context")
        context = take(ctx_len, "context").tolist()
        completions = []
        for c in range(nc):
            m = int(take(1, f"length of completion {c}")[0])
            if m < 1:
                raise InputError(f"{where}: completion {c} is empty")
            completions.append(take(m, f"completion {c}").tolist())
        if nbytes != 2 * (at - start):
            raise InputError(f"{where}: byte count {nbytes}, but the example holds {2 * (at - start)} bytes")
        seen_longest = max(seen_longest, nbytes)
        examples.append({"index": index, "label": label, "context": context, "completions": completions})
    if at != len(s):
        raise InputError(f"{path}: {2 * (len(s) - at)} bytes after the last of its {n} examples")
    if longest != seen_longest:
        raise InputError(f"{path}: header's longest example {longest} bytes, but the longest holds {seen_longest}")
    return examples


def write_evalset(path, examples):
    """The writer of the format (for selftest): examples as parse_evalset returns them."""
    streams = []
    for ex in examples:
        u = [START, 0, ex["index"], ex["label"], len(ex["completions"]), len(ex["context"])] + list(ex["context"])
        for comp in ex["completions"]:
            u += [len(comp)] + list(comp)
        u[1] = 2 * len(u)
        streams.append(np.array(u, dtype="<u2"))
    hdr = np.zeros(EVAL_HEADER_INTS, dtype="<i4")
    hdr[:4] = [EVAL_MAGIC, EVAL_VERSION, len(examples), max(int(st[1]) for st in streams)]
    write_whole(path, hdr.tobytes() + b"".join(st.tobytes() for st in streams))


def write_whole(path, data):
    """PATH holds DATA or is left as it was: a temporary file beside it renamed over it."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".eval_reference.", dir=os.path.dirname(os.path.abspath(path)))
    except OSError as e:
        raise InputError(f"{path}: cannot write: {e.strerror}")
    try:
        os.fchmod(fd, 0o644)  # (mkstemp's 0600 would hide the file from other users)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        raise InputError(f"{path}: cannot write: {e.strerror}")


# ---- the model: a save_pretrained directory, run in float64

def read_tensors(model_dir):
    """{name: float64 array} of model.safetensors, or of the shards an index names."""
    from safetensors import safe_open
    index = os.path.join(model_dir, "model.safetensors.index.json")
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single) or not os.path.exists(index):
        files = [single]
    else:
        try:
            with open(index) as f:
                files = sorted({os.path.join(model_dir, v) for v in json.load(f)["weight_map"].values()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise InputError(f"{index}: not a safetensors index ({type(e).__name__}: {e})")
    out = {}
    for path in files:
        try:
            with safe_open(path, "pt") as f:
                for k in f.keys():
                    out[k] = f.get_tensor(k).double().numpy()
        except Exception as e:  # the package's own errors: a missing, truncated or foreign file
            raise InputError(f"{path}: cannot read as safetensors ({type(e).__name__}: {e})")
    return out


def cfg_int(cfg, key, where, default=None, lo=1):
    v = cfg.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise InputError(f"{where}: {key} = {v!r}, expected an integer >= {lo}")
    return v


def cfg_positive(cfg, key, where, default):
    v = cfg.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
        raise InputError(f"{where}: {key} = {v!r}, expected a positive number")
    return float(v)


def load_model(model_dir):
    """{"family", "V", "positions", "W" (float64 tensors by our short names), config values}."""
    where = os.path.join(model_dir, "config.json")
    try:
        with open(where) as f:
            cfg = json.load(f)
    except OSError as e:
        raise InputError(f"{where}: cannot read: {e.strerror}")
    except ValueError as e:
        raise InputError(f"{where}: not JSON ({e})")
    if not isinstance(cfg, dict):
        raise InputError(f"{where}: not a JSON object")
    family = cfg.get("model_type")
    if family not in ("gpt2", "llama"):
        raise InputError(f"{where}: model_type {family!r}, expected \"gpt2\" or \"llama\"")
    st = read_tensors(model_dir)
    m = gpt2_model(cfg, st, where) if family == "gpt2" else llama_model(cfg, st, where)
    m["family"] = family
    return m


def take_tensors(st, want, where, optional=()):
    """want: {name: shape}; every one present with that shape (else one line naming it)."""
    W = {}
    for name, shape in want.items():
        if name not in st:
            if name in optional:
                continue
            raise InputError(f"{where}: the model has no tensor {name}")
        if tuple(st[name].shape) != tuple(shape):
            raise InputError(f"{where}: {name} has shape {list(st[name].shape)}, config.json implies {list(shape)}")
        W[name] = st[name]
    return W


def gpt2_model(cfg, st, where):
    st = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in st.items()}
    L, C, NH = (cfg_int(cfg, k, where) for k in ("n_layer", "n_embd", "n_head"))
    V, maxT = cfg_int(cfg, "vocab_size", where), cfg_int(cfg, "n_positions", where)
    if C % NH:
        raise InputError(f"{where}: n_embd {C} is not a multiple of n_head {NH}")
    inner = cfg.get("n_inner") or 4 * C
    # transformers' GPT-2 options that change the math, where this forward computes only GPT-2's own
    for key, ok in (("activation_function", cfg.get("activation_function", "gelu_new") in ("gelu_new", "gelu_pytorch_tanh")),
                    ("scale_attn_weights", cfg.get("scale_attn_weights", True) is True),
                    ("scale_attn_by_inverse_layer_idx", cfg.get("scale_attn_by_inverse_layer_idx", False) is False),
                    ("add_cross_attention", cfg.get("add_cross_attention", False) is False)):
        if not ok:
            raise InputError(f"{where}: {key} = {cfg[key]!r} is not GPT-2's (this reference computes GPT-2 only)")
    want = {"wte.weight": (st["wte.weight"].shape[0] if "wte.weight" in st else V, C), "wpe.weight": (maxT, C),
            "ln_f.weight": (C,), "ln_f.bias": (C,)}
    for l in range(L):
        p = f"h.{l}."
        want.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,), p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
                     p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
                     p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
                     p + "mlp.c_fc.weight": (C, inner), p + "mlp.c_fc.bias": (inner,),
                     p + "mlp.c_proj.weight": (inner, C), p + "mlp.c_proj.bias": (C,)})
    W = take_tensors(st, want, where)
    if W["wte.weight"].shape[0] < V:
        raise InputError(f"{where}: wte.weight has {W['wte.weight'].shape[0]} rows, fewer than vocab_size {V}")
    head = W["wte.weight"]
    if cfg.get("tie_word_embeddings", True) is False:
        if "lm_head.weight" not in st:
            raise InputError(f"{where}: tie_word_embeddings is false, and the model has no lm_head.weight")
        head = st["lm_head.weight"]
        if head.shape[0] < V or head.shape[1] != C:
            raise InputError(f"{where}: lm_head.weight has shape {list(head.shape)}, expected [>= {V}, {C}]")
    return {"W": W, "head": np.ascontiguousarray(head[:V]), "V": V, "positions": maxT, "L": L, "C": C, "NH": NH,
            "eps": cfg_positive(cfg, "layer_norm_epsilon", where, 1e-5)}


def llama_model(cfg, st, where):
    L, C, NH = (cfg_int(cfg, k, where) for k in ("num_hidden_layers", "hidden_size", "num_attention_heads"))
    KVH, F = cfg_int(cfg, "num_key_value_heads", where, NH), cfg_int(cfg, "intermediate_size", where)
    V, maxT = cfg_int(cfg, "vocab_size", where), cfg_int(cfg, "max_position_embeddings", where)
    if C % NH or NH % KVH or (C // NH) % 2:
        raise InputError(f"{where}: hidden_size {C}, {NH} heads, {KVH} kv heads: not a Llama attention shape")
    hs = C // NH
    for key, ok in (("hidden_act", cfg.get("hidden_act", "silu") == "silu"),
                    ("head_dim", cfg.get("head_dim", hs) in (hs, None)),
                    ("attention_bias", not cfg.get("attention_bias", False)),
                    ("mlp_bias", not cfg.get("mlp_bias", False))):
        if not ok:
            raise InputError(f"{where}: {key} = {cfg[key]!r} is not Llama 3's (this reference computes Llama 3 only)")
    rs = cfg.get("rope_scaling")
    if rs is not None and not (isinstance(rs, dict) and rs.get("rope_type", rs.get("type")) == "llama3"):
        raise InputError(f"{where}: rope_scaling {rs!r}: only \"llama3\" is computed here")
    theta, eps = cfg_positive(cfg, "rope_theta", where, 10000.0), cfg_positive(cfg, "rms_norm_eps", where, 1e-6)
    try:
        inv_freq = hf.rope_inv_freq(hs, dict(cfg, rope_theta=theta))   # [hs/2], rounded as kernels/rope.h does
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        raise InputError(f"{where}: rope_scaling {rs!r} is incomplete ({type(e).__name__}: {e})")
    want = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,), "lm_head.weight": (V, C)}
    for l in range(L):
        p = f"model.layers.{l}."
        want.update({p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,),
                     p + "self_attn.q_proj.weight": (C, C), p + "self_attn.k_proj.weight": (KVH * hs, C),
                     p + "self_attn.v_proj.weight": (KVH * hs, C), p + "self_attn.o_proj.weight": (C, C),
                     p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C),
                     p + "mlp.down_proj.weight": (C, F)})
    tied = cfg.get("tie_word_embeddings", False) is True
    W = take_tensors(st, want, where, optional=("lm_head.weight",) if tied else ())
    return {"W": W, "head": W["model.embed_tokens.weight"] if tied else W["lm_head.weight"], "V": V,
            "positions": maxT, "L": L, "C": C, "NH": NH, "KVH": KVH, "eps": eps, "inv_freq": inv_freq}


def softmax_causal(s):
    """s: [..., T, T] scores -> causal softmax over the last axis."""
    T = s.shape[-1]
    s = np.where(np.tril(np.ones((T, T), dtype=bool)), s, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layernorm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gpt2_hidden(m, ids):
    """ids [B, T] -> the final LayerNorm's output [B, T, C]."""
    W, C, NH, eps = m["W"], m["C"], m["NH"], m["eps"]
    B, T = ids.shape
    hs = C // NH
    x = W["wte.weight"][ids] + W["wpe.weight"][:T]
    for l in range(m["L"]):
        p = f"h.{l}."
        qkv = layernorm(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps) @ W[p + "attn.c_attn.weight"] \
            + W[p + "attn.c_attn.bias"]                                                  # Conv1D: x @ [in, out]
        q, k, v = (qkv[..., i * C:(i + 1) * C].reshape(B, T, NH, hs) for i in range(3))
        a = softmax_causal(np.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hs))
        y = np.einsum("bhts,bshd->bthd", a, v).reshape(B, T, C)
        x = x + y @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        h = layernorm(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
        x = x + gelu_tanh(h @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"]) @ W[p + "mlp.c_proj.weight"] \
            + W[p + "mlp.c_proj.bias"]
    return layernorm(x, W["ln_f.weight"], W["ln_f.bias"], eps)


def llama_hidden(m, ids):
    """ids [B, T] -> the final RMSNorm's output [B, T, C]. Query head h reads kv head h // G."""
    W, C, NH, KVH, eps = m["W"], m["C"], m["NH"], m["KVH"], m["eps"]
    B, T = ids.shape
    hs, G = C // NH, NH // KVH
    angle = np.arange(T, dtype=np.float64)[:, None] * m["inv_freq"][None, :]           # [T, hs/2]
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]                    # against [T, heads, hs/2]

    def rope(z):  # Hugging Face's rotation of a head's two halves (rotate_half), written out
        lo, hi = z[..., :hs // 2], z[..., hs // 2:]
        return np.concatenate([lo * cos - hi * sin, hi * cos + lo * sin], axis=-1)

    x = W["model.embed_tokens.weight"][ids]
    for l in range(m["L"]):
        p = f"model.layers.{l}."
        h = hf.rmsnorm(x, W[p + "input_layernorm.weight"], eps)
        q = rope((h @ W[p + "self_attn.q_proj.weight"].T).reshape(B, T, NH, hs)).reshape(B, T, KVH, G, hs)
        k = rope((h @ W[p + "self_attn.k_proj.weight"].T).reshape(B, T, KVH, hs))
        v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(B, T, KVH, hs)
        a = softmax_causal(np.einsum("btkgd,bskd->bkgts", q, k) / math.sqrt(hs))
        y = np.einsum("bkgts,bskd->btkgd", a, v).reshape(B, T, C)
        x = x + y @ W[p + "self_attn.o_proj.weight"].T
        h = hf.rmsnorm(x, W[p + "post_attention_layernorm.weight"], eps)
        g = h @ W[p + "mlp.gate_proj.weight"].T
        x = x + (g / (1.0 + np.exp(-g)) * (h @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
    return hf.rmsnorm(x, W["model.norm.weight"], eps)


def hidden(m, ids):
    return (gpt2_hidden if m["family"] == "gpt2" else llama_hidden)(m, np.asarray(ids, dtype=np.int64))


def token_losses(m, h, targets):
    """h [K, C] final hidden states, targets [K]: cross-entropy over the first V logits."""
    logits = h @ m["head"].T                                                             # [K, V]
    top = logits.max(axis=-1)
    lse = np.log(np.exp(logits - top[:, None]).sum(axis=-1)) + top
    return lse - logits[np.arange(len(targets)), targets]


# ---- score

def score_example(m, ex):
    """(mean losses, sum losses) of the example's completions, the completions as one batch
    (rows padded at their end: causal attention keeps the padding out of earlier positions)."""
    ctx, comps = ex["context"], ex["completions"]
    rows = [ctx + c for c in comps]
    T = max(len(r) for r in rows) - 1
    ids = np.zeros((len(rows), T), dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, :len(r) - 1] = r[:-1]
    h = hidden(m, ids)
    means, sums = [], []
    for i, r in enumerate(rows):
        pos = np.arange(len(ctx) - 1, len(r) - 1)                                        # predict r[pos + 1]
        loss = token_losses(m, h[i, pos], np.asarray(r, dtype=np.int64)[pos + 1])
        means.append(float(loss.mean()))
        sums.append(float(loss.sum()))
    return means, sums


def check_fits(m, examples, path):
    for i, ex in enumerate(examples):
        for c, comp in enumerate(ex["completions"]):
            bad = [t for t in ex["context"] + comp if t >= m["V"]]
            if bad:
                raise InputError(f"{path}: example {i}: token {bad[0]} >= the model's vocab_size {m['V']}")
            n = len(ex["context"]) + len(comp)
            if n - 1 > m["positions"]:
                raise InputError(f"{path}: example {i}: context + completion {c} = {n} tokens, longer than the "
                                 f"model's {m['positions']} positions + 1")


def score(m, examples, path):
    check_fits(m, examples, path)
    records = []
    for i, ex in enumerate(examples):
        means, sums = score_example(m, ex)
        records.append({"example": i, "index": ex["index"], "label": ex["label"],
                         "pred_norm": int(np.argmin(means)), "pred": int(np.argmin(sums)),
                         "mean_loss": means, "sum_loss": sums})
    return records


def accuracy(records, key):
    return sum(r[key] == r["label"] for r in records)


def summary(records):
    n = len(records)
    return f"examples {n} acc_norm {accuracy(records, 'pred_norm') / n:.6f} acc {accuracy(records, 'pred') / n:.6f}"


# ---- compare

KEYS = {"example": int, "index": int, "label": int, "pred_norm": int, "pred": int, "mean_loss": list, "sum_loss": list}


def read_jsonl(path):
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}")
    out = []
    for n, line in enumerate(lines, 1):
        try:
            r = json.loads(line)
        except ValueError as e:
            raise InputError(f"{path}:{n}: not JSON ({e})")
        if not isinstance(r, dict):
            raise InputError(f"{path}:{n}: not a JSON object")
        for k, t in KEYS.items():
            if not isinstance(r.get(k), t) or isinstance(r.get(k), bool):
                raise InputError(f"{path}:{n}: {k} is {r.get(k, '(absent)')!r}, expected {t.__name__}")
        for k in ("mean_loss", "sum_loss"):
            if not r[k] or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                                   for v in r[k]):
                raise InputError(f"{path}:{n}: {k} is not a non-empty list of finite numbers")
        if len(r["mean_loss"]) != len(r["sum_loss"]) or not all(0 <= r[k] < len(r["mean_loss"])
                                                               for k in ("label", "pred_norm", "pred")):
            raise InputError(f"{path}:{n}: label / pred_norm / pred out of range for {len(r['mean_loss'])} completions")
        out.append(r)
    if not out:
        raise InputError(f"{path}: no examples")
    return out


def brief(items, k=4):
    return "; ".join(items[:k]) + (f"; ... ({len(items)} in all)" if len(items) > k else "")


def agree(base, other, max_diff):
    """agree's verdict: (ok, one line)."""
    if [(r["example"], r["label"], len(r["mean_loss"])) for r in base] != \
            [(r["example"], r["label"], len(r["mean_loss"])) for r in other]:
        return False, f"not the same examples ({len(base)} and {len(other)} lines)"
    diff = max(abs(a - b) for x, y in zip(base, other) for a, b in zip(x["mean_loss"], y["mean_loss"]))
    off = [x["example"] for x, y in zip(base, other) if x["pred_norm"] != y["pred_norm"] and
           abs(x["mean_loss"][x["pred_norm"]] - x["mean_loss"][y["pred_norm"]]) > 2 * diff]
    line = f"{len(base)} examples, max |mean loss difference| {diff:.2e} (at most {max_diff:g}), predictions off: {off or 'none'}"
    return diff <= max_diff and not off, line


def compare_records(ref, ours, tol):
    """[(ok, name, detail)]: the checks of `compare`, in order."""
    out = []
    n = len(ref)
    frame = [f"line {i + 1}: example/index/label/completions {a['example']}/{a['index']}/{a['label']}/"
             f"{len(a['mean_loss'])} vs {b['example']}/{b['index']}/{b['label']}/{len(b['mean_loss'])}"
             for i, (a, b) in enumerate(zip(ref, ours))
             if (a["example"], a["index"], a["label"], len(a["mean_loss"])) !=
                (b["example"], b["index"], b["label"], len(b["mean_loss"]))]
    if len(ours) != n:
        frame.insert(0, f"{len(ours)} examples, the reference has {n}")
    out.append((not frame, f"{n} examples in the same order, the same indices, labels and completion counts",
                brief(frame)))
    if frame:
        return out
    flipped = {}
    for key, loss in (("pred_norm", "mean_loss"), ("pred", "sum_loss")):
        ties, flips, wrong, self_wrong = [], [], [], []
        for a, b in zip(ref, ours):
            r, best = np.array(a[loss]), min(a[loss])
            if len(r) > 1 and np.sort(r)[1] - best <= tol:
                ties.append(a["example"])
            if b[key] != a[key]:
                if r[b[key]] - best <= tol:
                    flips.append(a["example"])
                else:
                    wrong.append(f"example {a['example']}: {b[key]} ({loss} {r[b[key]]:.6f}), reference {a[key]} "
                                 f"({best:.6f})")
            # OURS's choice is its own argmin (to the precision it prints its losses with: tol / 10)
            o = np.array(b[loss])
            if o[b[key]] - o.min() > tol / 10:
                self_wrong.append(f"example {b['example']}: {key} {b[key]}, its {loss} {b[loss]}")
        flipped[key] = flips
        out.append((not wrong, f"{key} equal to the reference's on {n - len(flips) - len(wrong)} of {n} examples"
                    + (f", {len(flips)} near ties decided the other way (examples {flips[:8]})" if flips else ""),
                    brief(wrong)))
        out.append((not self_wrong, f"{key} is the argmin of its own {loss}", brief(self_wrong)))
        out.append((len(ties) <= 0.1 * n, f"near ties of {loss} (best two within {tol:g}): {len(ties)} of {n}, at most 10%",
                    f"examples {ties[:8]}: the test model does not discriminate" if len(ties) > 0.1 * n else ""))
    for loss in ("mean_loss", "sum_loss"):
        diffs = [(abs(x - y), a["example"], c) for a, b in zip(ref, ours)
                 for c, (x, y) in enumerate(zip(a[loss], b[loss]))]
        worst = max(diffs)
        bad = [f"example {e} completion {c}: |diff| {d:.3g}" for d, e, c in diffs if d > tol]
        out.append((not bad, f"every {loss} within {tol:g} of the reference's (max |diff| {worst[0]:.3g}, "
                    f"example {worst[1]})", brief(bad)))
    for key, name in (("pred_norm", "acc_norm"), ("pred", "acc")):
        a, b = accuracy(ref, key), accuracy(ours, key)
        # what the near ties decided the other way may move the count, nothing else
        moved = sum((o[key] == o["label"]) - (r[key] == r["label"])
                    for r, o in zip(ref, ours) if r["example"] in flipped[key])
        out.append((b - a == moved, f"{name} {b / n:.6f} = the reference's {a / n:.6f}" if a == b else
                    f"{name} {b / n:.6f}, the reference's {a / n:.6f}",
                    "" if b - a == moved else f"{b} vs {a} correct, near ties explain {moved}"))
    return out


# ---- selftest

def random_gpt2(d, rng, V=300, L=2, C=64, NH=4, maxT=48):
    import ckpt_tool_check as ck
    import torch_gpt2 as tg
    cfg = tg.GPTConfig(maxT=maxT, V=V, L=L, NH=NH, C=C)
    st = {}
    for name, shape in ck.hf_expected(cfg).items():
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            st[name] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:  # large enough for sharp attention and logits far from uniform
            st[name] = (0.3 * rng.standard_normal(shape)).astype(np.float32)
    config = dict(ck.reference_config(L, C, NH, maxT, V), n_ctx=maxT, tie_word_embeddings=True)
    hf.save(st, config, d)
    return cfg, st


def random_llama(d, rng, V=300, L=2, C=64, NH=4, KVH=2, F=96, maxT=48):
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
              "hidden_size": C, "intermediate_size": F, "num_attention_heads": NH, "num_key_value_heads": KVH,
              "num_hidden_layers": L, "vocab_size": V, "max_position_embeddings": maxT, "rms_norm_eps": 1e-5,
              "rope_theta": 500000.0, "tie_word_embeddings": False,
              "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                               "original_max_position_embeddings": 16, "rope_type": "llama3"}}
    st = {}
    for name, shape in hf.expected_shapes(config).items():
        if name.endswith("norm.weight"):
            st[name] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            st[name] = (0.3 * rng.standard_normal(shape)).astype(np.float32)
    hf.save(st, config, d)
    return config, st


def random_examples(rng, V, n=6, ctx=(3, 12), comp=(1, 10), nc=4):
    return [{"index": 100 + i, "label": int(rng.integers(nc)),
             "context": rng.integers(V, size=int(rng.integers(*ctx))).tolist(),
             "completions": [rng.integers(V, size=int(rng.integers(*comp))).tolist() for _ in range(nc)]}
            for i in range(n)]


def expect_refusal(name, fn, pattern):
    try:
        fn()
    except InputError as e:
        report(pattern in str(e), f"refused: {name}", str(e))
        return
    report(False, f"refused: {name}", "accepted")


def selftest_parser(d, rng):
    exs = random_examples(rng, 50000, n=5) + [{"index": 7, "label": 15, "context": [65534],
                                                "completions": [[i] for i in range(16)]}]
    path = os.path.join(d, "ok.bin")
    write_evalset(path, exs)
    report(parse_evalset(path) == exs, "the parser reads back what the writer wrote (6 examples, 4 and 16 completions, "
           "token 65534)")
    raw = open(path, "rb").read()
    body = np.frombuffer(raw[1024:], dtype="<u2").copy()
    hdr = np.frombuffer(raw[:1024], dtype="<i4").copy()

    def damaged(name, h=hdr, b=body, extra=b""):
        p = os.path.join(d, name)
        with open(p, "wb") as f:
            f.write(h.tobytes() + b.tobytes() + extra)
        return p

    h = hdr.copy(); h[0] = 20240520
    p = damaged("magic.bin", h=h)
    expect_refusal("a token shard given as the eval file", lambda: parse_evalset(p), f"{p}: not an eval file")
    h = hdr.copy(); h[1] = 2
    p = damaged("version.bin", h=h)
    expect_refusal("version 2", lambda: parse_evalset(p), f"{p}: eval file version 2")
    h = hdr.copy(); h[3] += 2
    p = damaged("longest.bin", h=h)
    expect_refusal("a wrong longest-example field", lambda: parse_evalset(p), "header's longest example")
    p = damaged("trunc.bin", b=body[:-3])
    expect_refusal("a truncated file", lambda: parse_evalset(p), f"{p}: example 5: file ends inside the completion")
    p = damaged("trailing.bin", extra=b"\0\0")
    expect_refusal("bytes after the last example", lambda: parse_evalset(p), "2 bytes after the last of its 6 examples")
    b = body.copy(); b[3] = 4            # example 0's label: 4 of 4 completions
    p = damaged("label.bin", b=b)
    expect_refusal("a label out of range", lambda: parse_evalset(p), f"{p}: example 0: label 4 out of range for 4")
    b = body.copy(); b[1] += 2
    p = damaged("bytes.bin", b=b)
    expect_refusal("a wrong byte count", lambda: parse_evalset(p), "example 0: byte count")
    b = body.copy(); b[0] = 0
    p = damaged("start.bin", b=b)
    expect_refusal("a missing start marker", lambda: parse_evalset(p), "example 0: no start marker")
    # make-evalset on a shard of the tokens 0, 1, 2, ...: the label's completion continues the context
    shard = os.path.join(d, "count.bin")
    h = np.zeros(256, dtype="<i4"); h[:3] = [20240520, 1, 5000]
    with open(shard, "wb") as f:
        f.write(h.tobytes() + np.arange(5000, dtype="<u2").tobytes())
    make_evalset(shard, os.path.join(d, "made.bin"), 7, 5, 3, seed=2)
    made = parse_evalset(os.path.join(d, "made.bin"))
    cont = [ex["completions"][ex["label"]] == list(range(ex["context"][-1] + 1, ex["context"][-1] + 4)) and
            ex["context"] == list(range(ex["context"][0], ex["context"][0] + 5)) for ex in made]
    report(len(made) == 7 and all(cont) and len({ex["label"] for ex in made}) > 1,
           "make-evalset: 7 examples, the label's completion the context's continuation, labels varied",
           f"labels {[ex['label'] for ex in made]}")


def selftest_models(d, rng):
    import torch
    import ckpt_tool_check as ck
    import torch_gpt2 as tg
    gdir, ldir = os.path.join(d, "gpt2"), os.path.join(d, "llama")
    gcfg, gst = random_gpt2(gdir, rng)
    lcfg, lst = random_llama(ldir, rng)
    exs = random_examples(rng, 300, n=12)
    ev = os.path.join(d, "ex.bin")
    write_evalset(ev, exs)
    exs = parse_evalset(ev)

    # GPT-2: torch_gpt2.py's model (llm.c layout, Conv1D weights transposed back) in float64
    tmodel = tg.GPT2(gcfg).double().load_llmc(ck.to_llmc_arrays(gcfg, gst))

    def gpt2_row_losses(row):
        with torch.no_grad():
            logits, _ = tmodel(torch.tensor([row[:-1]]))
        lv = logits[0, :, :gcfg.V]
        return torch.nn.functional.cross_entropy(lv, torch.tensor(row[1:]), reduction="none").numpy()

    # Llama: hf_llama_check.hf_loss is a mean over all positions; a completion's sum is the full
    # row's total less its context prefix's (causal: the prefix's positions see the same tokens)
    lst64 = {k: v.astype(np.float64) for k, v in lst.items()}

    def llama_total(row):
        return 0.0 if len(row) < 2 else hf.hf_loss(lst64, lcfg, np.array([row[:-1]]), np.array([row[1:]])) * (len(row) - 1)

    def gpt2_next(row):
        with torch.no_grad():
            logits, _ = tmodel(torch.tensor([row]))
        return int(torch.argmax(logits[0, -1, :gcfg.V]))

    def llama_next(row):  # the target of least loss after row: the argmax of the last logits
        return int(np.argmin([llama_total(row + [t]) for t in range(lcfg["vocab_size"])]))

    for name, mdir, direct_sum, direct_next in (
            ("GPT-2", gdir, lambda ctx, comp: float(gpt2_row_losses(ctx + comp)[len(ctx) - 1:].sum()), gpt2_next),
            ("Llama", ldir, lambda ctx, comp: llama_total(ctx + comp) - llama_total(ctx), llama_next)):
        m = load_model(mdir)
        recs = score(m, exs, ev)
        diffs = [abs(r["mean_loss"][c] - direct_sum(ex["context"], comp) / len(comp))
                 for r, ex in zip(recs, exs) for c, comp in enumerate(ex["completions"])]
        spread = min(max(r["mean_loss"]) - min(r["mean_loss"]) for r in recs)
        report(max(diffs) < 1e-10 and spread > 0.01,
               f"{name}: score's mean losses = a direct float64 computation ({len(diffs)} completions)",
               f"max |diff| {max(diffs):.3g}, smallest spread of an example's means {spread:.3g}")
        sums_ok = all(abs(s - mu * len(c)) < 1e-9 for r, ex in zip(recs, exs)
                      for s, mu, c in zip(r["sum_loss"], r["mean_loss"], ex["completions"]))
        preds_ok = all(r["pred_norm"] == int(np.argmin(r["mean_loss"])) and r["pred"] == int(np.argmin(r["sum_loss"]))
                       for r in recs)
        report(sums_ok and preds_ok, f"{name}: sum = mean x completion length, pred_norm / pred their argmins")
        prompt = exs[0]["context"]
        gen = generate(m, prompt, 6)
        again = generate(load_model(mdir), prompt, 6)
        want = []
        for _ in range(6):
            want.append(direct_next(list(prompt) + want))
        report(gen == again and gen == want, f"{name}: generate is deterministic and each token is the direct "
               f"computation's argmax", f"{gen} vs {again} vs {want}")
        expect_refusal(f"{name}: a prompt + tokens beyond the model's positions",
                       lambda: generate(m, prompt, 49 - len(prompt)), "exceeds the model's 48 positions")
        bad = [dict(exs[0], completions=[[5], [300]] + exs[0]["completions"][2:])]
        expect_refusal(f"{name}: a token >= vocab_size", lambda: score(m, bad, ev),
                       f"{ev}: example 0: token 300 >= the model's vocab_size 300")
        if name == "Llama":
            t = dict(lst)
            head = t.pop("lm_head.weight")
            t["model.embed_tokens.weight"] = head
            hf.save(t, dict(lcfg, tie_word_embeddings=True), os.path.join(d, "tied"))
            u = dict(lst, **{"model.embed_tokens.weight": head})
            hf.save(u, lcfg, os.path.join(d, "untied"))
            a = score(load_model(os.path.join(d, "tied")), exs, ev)
            b = score(load_model(os.path.join(d, "untied")), exs, ev)
            report(a == b, "Llama: tied embeddings without lm_head.weight score as the same head given untied")
    return exs, recs, ev


def selftest_compare(recs):
    tol = 1e-4

    def failing(ours, ref=recs):
        return [name for ok, name, _ in compare_records(ref, ours, tol) if not ok]

    def edit(i, **kw):
        out = json.loads(json.dumps(recs))
        out[i].update(kw)
        return out

    report(not failing(json.loads(json.dumps(recs))), "compare: a copy of the reference passes every check")
    noisy = json.loads(json.dumps(recs))
    for r in noisy:
        r["mean_loss"] = [v + 5e-5 for v in r["mean_loss"]]
    report(not failing(noisy), "compare: losses 5e-5 off (within tol 1e-4) pass")
    r0 = recs[0]
    other = next(c for c in range(len(r0["mean_loss"])) if c != r0["pred_norm"])
    cases = [("a pred_norm that is not a near tie", edit(0, pred_norm=other), "pred_norm equal"),
             ("a mean loss 2e-4 off", edit(1, mean_loss=[v + 2e-4 for v in recs[1]["mean_loss"]]), "every mean_loss"),
             ("a sum loss 2e-4 off", edit(1, sum_loss=[v + 2e-4 for v in recs[1]["sum_loss"]]), "every sum_loss"),
             ("two examples swapped", [recs[1], recs[0]] + recs[2:], "same order"),
             ("a missing example", recs[:-1], "same order"),
             ("a wrong label", edit(2, label=(recs[2]["label"] + 1) % 4), "same order")]
    for what, ours, check in cases:
        f = failing(ours)
        report(any(check in name for name in f), f"compare: {what} fails", f"failing: {f}")
    # a near tie: the reference's best two means 5e-5 apart, OURS picks the second
    tie = json.loads(json.dumps(recs))
    m = tie[0]["mean_loss"]
    best = tie[0]["pred_norm"]
    m[other] = m[best] + 5e-5
    ours = json.loads(json.dumps(tie))
    ours[0]["pred_norm"] = other
    ours[0]["mean_loss"][best] += 1e-4 * 0.9
    got = compare_records(tie, ours, tol)
    f = [name for ok, name, _ in got if not ok]
    named = [name for ok, name, _ in got if ok and "near ties decided the other way" in name]
    report(not f and named, "compare: a near tie decided the other way is named, not failed", f"failing: {f}")
    many = json.loads(json.dumps(recs))
    for r in many[:2]:
        r["mean_loss"] = [r["mean_loss"][0]] * len(r["mean_loss"])
        r["pred_norm"] = 0
    f = failing(many, ref=many)
    report(f and all("near ties of mean_loss" in n for n in f), f"compare: more than 10% near ties fail (2 of {len(recs)})",
           f"failing: {f}")
    # agree (two devices' logs): bf16-sized noise passes; a loss beyond the bound, or another
    # prediction where the base's two choices are far apart, fails.
    noisy = json.loads(json.dumps(recs))
    for r in noisy:
        r["mean_loss"] = [v + 0.01 * (-1) ** c for c, v in enumerate(r["mean_loss"])]
    report(agree(recs, noisy, 0.05)[0] and not agree(recs, noisy, 0.005)[0],
           "agree: losses 0.01 off pass a bound of 0.05 and fail one of 0.005")
    far = edit(0, pred_norm=other)  # the same losses, another choice: not a near tie
    report(not agree(recs, far, 0.05)[0], "agree: another prediction away from a near tie fails", agree(recs, far, 0.05)[1])


def selftest():
    rng = np.random.default_rng(34)
    with tempfile.TemporaryDirectory(prefix="eval_reference.") as d:
        selftest_parser(d, rng)
        _, recs, _ = selftest_models(d, rng)
        selftest_compare(recs)


# ---- generate, loss, main

def generate(m, prompt, n):
    if len(prompt) + n > m["positions"]:
        raise InputError(f"--prompt-ids ({len(prompt)} tokens) + --tokens {n} = {len(prompt) + n} exceeds the "
                         f"model's {m['positions']} positions")
    row = list(prompt)
    for _ in range(n):
        h = hidden(m, np.array([row]))[0, -1:]
        row.append(int(np.argmax(h @ m["head"].T)))   # argmax: the first (smallest id) of equal maxima
    return row[len(prompt):]


def parse_ids(text, V):
    try:
        ids = [int(t) for t in text.split(",")]
    except ValueError:
        raise InputError(f"--prompt-ids {text!r}: expected comma-separated token ids")
    bad = [t for t in ids if not 0 <= t < V]
    if bad:
        raise InputError(f"--prompt-ids: token {bad[0]} is not in [0, {V}) (the model's vocab_size)")
    return ids


def make_evalset(shard, out, n, ctx, comp, seed):
    try:
        hdr = np.fromfile(shard, dtype="<i4", count=256)
        if len(hdr) < 256 or hdr[0] != 20240520:
            raise InputError(f"{shard}: not a uint16 token shard (magic {hdr[0] if len(hdr) else None})")
        tok = np.fromfile(shard, dtype="<u2", offset=1024).astype(np.int64)
    except OSError as e:
        raise InputError(f"{shard}: cannot read: {e.strerror}")
    if len(tok) < 4 * (ctx + comp):
        raise InputError(f"{shard}: {len(tok)} tokens, too few for examples of {ctx} + {comp} tokens")
    rng = np.random.default_rng(seed)
    examples = []
    for i in range(n):
        at = int(rng.integers(0, len(tok) - ctx - comp))
        comps = [tok[at + ctx:at + ctx + comp].tolist()] + \
                [tok[o:o + comp].tolist() for o in rng.integers(0, len(tok) - comp, size=3)]
        label = int(rng.integers(4))
        comps[0], comps[label] = comps[label], comps[0]
        examples.append({"index": i, "label": label, "context": tok[at:at + ctx].tolist(), "completions": comps})
    write_evalset(out, examples)
    return f"wrote {out}: {n} examples, context {ctx} tokens, 4 completions of {comp}"


def check_loss(model_dir, shard, T, n, expect, name):
    m = load_model(model_dir)
    try:
        inputs, targets = hf.val_windows(shard, T, n)
    except (OSError, KeyError, ValueError) as e:
        raise InputError(f"{shard}: cannot read {n} windows of {T} tokens ({type(e).__name__}: {e})")
    total = 0.0
    for x, y in zip(inputs, targets):
        total += float(token_losses(m, hidden(m, x[None])[0], y).sum())
    ref = total / inputs.size
    tol = hf.LOSS_RTOL * abs(expect) + hf.LOSS_ATOL
    diff = abs(ref - expect)
    report(diff <= tol, f"{name}: eval_reference.py's {m['family']} forward of the safetensors export = train_gpt's "
           f"val loss", f"{ref:.9f} vs {expect:.9f}, |diff| {diff:.2g} " + ("<=" if diff <= tol else ">") + f" tol {tol:.2g}")


def main(argv):
    ap = argparse.ArgumentParser(prog="eval_reference.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("score", help="score every example of EVALFILE; one JSON line per example into OUT")
    p.add_argument("model_dir")
    p.add_argument("evalfile")
    p.add_argument("out")
    p = sub.add_parser("compare", help="train_gpt's eval log (OURS) against score's output (REF)")
    p.add_argument("ref")
    p.add_argument("ours")
    p.add_argument("--tol", type=float, default=1e-4, help="absolute tolerance of losses and near ties (1e-4)")
    p = sub.add_parser("agree", help="two devices' eval logs of the same weights: losses within D, the same predictions")
    p.add_argument("base")
    p.add_argument("other")
    p.add_argument("--max-diff", type=float, required=True, help="the largest mean-loss difference allowed")
    p = sub.add_parser("generate", help="greedy decoding, the generated ids on one line")
    p.add_argument("model_dir")
    p.add_argument("--prompt-ids", required=True, help="comma-separated token ids")
    p.add_argument("--tokens", type=int, required=True, help="how many tokens to generate (>= 1)")
    p = sub.add_parser("loss", help="the forward's mean loss over validation windows against train_gpt's")
    p.add_argument("model_dir")
    p.add_argument("val_shard")
    p.add_argument("T", type=int)
    p.add_argument("N", type=int)
    p.add_argument("expect", type=float)
    p.add_argument("--name", default="the export")
    p = sub.add_parser("make-evalset", help="a test eval file from a token shard: true continuation vs 3 distractors")
    p.add_argument("shard")
    p.add_argument("out")
    p.add_argument("--examples", type=int, default=20, help="how many examples (20)")
    p.add_argument("--context", type=int, default=20, help="context tokens per example (20)")
    p.add_argument("--completion", type=int, default=10, help="tokens per completion (10)")
    p.add_argument("--seed", type=int, default=1, help="random seed of the places and labels (1)")
    sub.add_parser("selftest", help="the internal checks")
    a = ap.parse_args(argv[1:])
    try:
        if a.cmd == "score":
            examples = parse_evalset(a.evalfile)
            records = score(load_model(a.model_dir), examples, a.evalfile)
            write_whole(a.out, "".join(json.dumps(r) + "\n" for r in records).encode())
            print(summary(records))
        elif a.cmd == "compare":
            if not (a.tol > 0 and math.isfinite(a.tol)):
                raise InputError(f"--tol {a.tol}: expected a positive number")
            for ok, name, detail in compare_records(read_jsonl(a.ref), read_jsonl(a.ours), a.tol):
                report(ok, name, detail)
        elif a.cmd == "agree":
            good, line = agree(read_jsonl(a.base), read_jsonl(a.other), a.max_diff)
            print(line)
            return 0 if good else 1
        elif a.cmd == "generate":
            if a.tokens < 1:
                raise InputError(f"--tokens {a.tokens}: expected at least 1")
            m = load_model(a.model_dir)
            print(",".join(str(t) for t in generate(m, parse_ids(a.prompt_ids, m["V"]), a.tokens)))
        elif a.cmd == "make-evalset":
            if min(a.examples, a.context, a.completion) < 1 or a.examples > 65535:
                raise InputError("--examples (1..65535), --context and --completion must be positive")
            print(make_evalset(a.shard, a.out, a.examples, a.context, a.completion, a.seed))
        elif a.cmd == "loss":
            if a.T < 1 or a.N < 1:
                raise InputError(f"T {a.T}, N {a.N}: expected positive counts")
            check_loss(a.model_dir, a.val_shard, a.T, a.N, a.expect, a.name)
        else:
            selftest()
    except InputError as e:
        print(f"eval_reference.py: error: {e}", file=sys.stderr)
        return 1
    return 1 if hf.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
