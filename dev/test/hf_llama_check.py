#!/usr/bin/env python3
"""Python side of the Llama checks of dev/test/test_ckpt_tool.sh: a Hugging Face Llama
safetensors file (`ckpt export --safetensors` of a Llama 3 checkpoint, config.json beside it)
read with the `safetensors` package and run by an independent forward in Hugging Face's own
convention, numpy in float64.

Hugging Face's LlamaForCausalLM rotates the two halves of each head (rotate_half: x*cos +
rotate_half(x)*sin, cos and sin repeated over both halves) where fsdp.c rotates interleaved
pairs (2i, 2i+1); its conversion script permutes the rows of q_proj and k_proj so that the two
agree. This forward knows only Hugging Face's convention: it agrees with fsdp.c's loss on the
same weights only when the exporter permuted q and k as Hugging Face expects. The inverse
frequencies are computed as kernels/rope.h does (double, rounded to float; Llama 3.1's
scaling when config.json's rope_scaling is "llama3"). Query head h reads kv head
h // (heads / kv heads) (Hugging Face's repeat_kv).

    hf_llama_check.py names ST
        ST's tensors against config.json: the LlamaForCausalLM names, [out, in] shapes, F32, the
        config.json keys (save_pretrained's) and the __metadata__ essentials.
    hf_llama_check.py loss ST VAL_SHARD B T N EXPECT NAME
        The mean next-token loss over windows 0..N-1 of VAL_SHARD (window w: tokens w*T ..
        w*T+T, as train_gpt's unshuffled validation reads them; N = --val-steps x B on one rank)
        against EXPECT (train_gpt's val_loss on the same weights); with --bug also the loss of an
        emulated exporter bug (q and k left in fsdp.c's row order), which must miss EXPECT.
    hf_llama_check.py sharpen ST OUT_DIR
        OUT_DIR/model.safetensors and config.json: ST with q_proj and k_proj scaled up (sharp
        attention: the rotary convention then moves the loss well beyond float32 rounding),
        o_proj and lm_head too (the attention's effect on logits far from uniform).
    hf_llama_check.py same A B
        A and B hold the same tensors, bitwise (names, shapes, dtypes, values).
    hf_llama_check.py variants ST DIR
        Malformed copies of the save_pretrained directory of ST for the importer's refusals:
        DIR/NAME/model.safetensors (+ config.json). Also DIR/tied (no lm_head.weight,
        tie_word_embeddings true, lm_head = embed_tokens: imports like ST), DIR/scaled
        (rope_scaling llama3 in config.json) and DIR/custom (RoPE scaling factor 16, low 2, high 8,
        original 4096; rms_norm_eps 1e-6, transformers' default; 2^21 positions, beyond what
        --max-seq once took).
    hf_llama_check.py shard ST OUT_DIR N
        OUT_DIR: ST split as save_pretrained shards a large model: N files
        model-0000i-of-0000N.safetensors (consecutive tensors, about as many in each), a
        model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map"}) and config.json.
    hf_llama_check.py shard_variants SHARDED_DIR DIR
        Malformed copies of a `shard` directory for the importer's refusals: DIR/NAME with the
        shards, config.json and a rewritten index (or a shard rewritten).

Prints `ok - ...` / `not ok - ...` lines; exits 1 if a check failed.
"""
import json
import math
import os
import shutil
import sys

import numpy as np

failed = False


def report(ok, name, detail=""):
    global failed
    if ok:
        print(f"ok - {name}" + (f" ({detail})" if detail else ""))
    else:
        failed = True
        print(f"not ok - {name}: {detail}")
    sys.stdout.flush()


def load(st_path):
    from safetensors.numpy import load_file
    with open(os.path.join(os.path.dirname(os.path.abspath(st_path)), "config.json")) as f:
        cfg = json.load(f)
    return load_file(st_path), cfg


def expected_shapes(cfg):
    C, F, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    NH, KVH = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hs = C // NH
    out = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,), "lm_head.weight": (V, C)}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        out.update({p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,),
                    p + "self_attn.q_proj.weight": (NH * hs, C), p + "self_attn.k_proj.weight": (KVH * hs, C),
                    p + "self_attn.v_proj.weight": (KVH * hs, C), p + "self_attn.o_proj.weight": (C, NH * hs),
                    p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C),
                    p + "mlp.down_proj.weight": (C, F)})
    return out


def check_names(st_path):
    import safetensors
    st, cfg = load(st_path)
    problems = []
    want_cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
                "tie_word_embeddings": False, "rms_norm_eps": 1e-05}
    for k, v in want_cfg.items():
        if cfg.get(k) != v:
            problems.append(f"config.json {k} = {cfg.get(k)!r}, expected {v!r}")
    for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers",
              "vocab_size", "max_position_embeddings", "rope_theta", "rope_scaling"):
        if k not in cfg:
            problems.append(f"config.json has no {k}")
    if problems:
        report(False, "config.json beside the export", "; ".join(problems))
        return
    if not isinstance(cfg["rope_theta"], float):
        problems.append(f"rope_theta {cfg['rope_theta']!r} is not written as a float")
    want = expected_shapes(cfg)
    if set(st) != set(want):
        problems.append(f"names: missing {sorted(set(want) - set(st))[:4]}, extra {sorted(set(st) - set(want))[:4]}")
    for k, shape in want.items():
        if k in st and (tuple(st[k].shape) != shape or st[k].dtype != np.float32):
            problems.append(f"{k}: {st[k].dtype} {tuple(st[k].shape)}, expected float32 {shape}")
    with safetensors.safe_open(st_path, "np") as f:
        meta = f.metadata() or {}
    for k in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size", "intermediate_size",
              "vocab_size", "max_position_embeddings"):
        if meta.get(k) != str(cfg[k]):
            problems.append(f"__metadata__ {k} = {meta.get(k)!r}, config.json says {cfg[k]}")
    if meta.get("format") != "pt" or float(meta.get("rope_theta", "nan")) != cfg["rope_theta"]:
        problems.append(f"__metadata__ format/rope_theta: {meta.get('format')!r}, {meta.get('rope_theta')!r}")
    report(not problems, f"Llama export loads with safetensors {safetensors.__version__}: {len(want)} LlamaForCausalLM "
           f"tensors, names/shapes/F32, config.json (KVH {cfg['num_key_value_heads']} of {cfg['num_attention_heads']} heads, "
           f"F {cfg['intermediate_size']}) and __metadata__", "; ".join(problems[:4]))


# ---- the forward, Hugging Face's convention

def rope_inv_freq(hs, cfg):
    """kernels/rope.h's rope_inv_freq for pairs 0..hs/2-1 (double, rounded to float32)."""
    theta = float(cfg["rope_theta"])
    rs = cfg.get("rope_scaling")
    out = []
    for i in range(hs // 2):
        f = theta ** (-2.0 * i / hs)
        if rs and rs.get("rope_type", rs.get("type")) == "llama3" and rs["factor"] > 1:
            factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
            orig = rs["original_max_position_embeddings"]
            wavelen = 2 * math.pi / f
            if wavelen > orig / lo:
                f = f / factor
            elif wavelen >= orig / hi:
                smooth = (orig / wavelen - lo) / (hi - lo)
                f = (1 - smooth) * f / factor + smooth * f
        out.append(np.float32(f))
    return np.array(out, dtype=np.float64)


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def unpermute(w, heads):
    """HF rows (halves) -> fsdp.c's rows (interleaved pairs): what an exporter that forgot the
    permutation would have written."""
    rows, cols = w.shape
    hs = rows // heads
    return w.reshape(heads, 2, hs // 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def hf_loss(st, cfg, inputs, targets, bug=False):
    """Mean cross-entropy of LlamaForCausalLM (float64) on inputs/targets [B, T]."""
    W = {k: v.astype(np.float64) for k, v in st.items()}
    C, NH, KVH = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hs, eps = C // NH, float(cfg["rms_norm_eps"])
    B, T = inputs.shape
    angle = np.arange(T, dtype=np.float64)[:, None] * rope_inv_freq(hs, cfg)[None, :]   # [T, hs/2]
    cos = np.concatenate([np.cos(angle)] * 2, axis=-1)                                  # [T, hs]
    sin = np.concatenate([np.sin(angle)] * 2, axis=-1)
    mask = np.triu(np.full((T, T), -np.inf), 1)
    x = W["model.embed_tokens.weight"][inputs]                                          # [B, T, C]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        wq, wk = W[p + "self_attn.q_proj.weight"], W[p + "self_attn.k_proj.weight"]
        if bug:
            wq, wk = unpermute(wq, NH), unpermute(wk, KVH)
        h = rmsnorm(x, W[p + "input_layernorm.weight"], eps)
        q = (h @ wq.T).reshape(B, T, NH, hs).transpose(0, 2, 1, 3)                     # [B, NH, T, hs]
        k = (h @ wk.T).reshape(B, T, KVH, hs).transpose(0, 2, 1, 3)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(B, T, KVH, hs).transpose(0, 2, 1, 3)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = np.repeat(k, NH // KVH, axis=1), np.repeat(v, NH // KVH, axis=1)        # repeat_kv
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hs) + mask
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        y = (s / s.sum(axis=-1, keepdims=True)) @ v                                      # [B, NH, T, hs]
        x = x + y.transpose(0, 2, 1, 3).reshape(B, T, C) @ W[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, W[p + "post_attention_layernorm.weight"], eps)
        g, u = h @ W[p + "mlp.gate_proj.weight"].T, h @ W[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ W[p + "mlp.down_proj.weight"].T
    logits = rmsnorm(x, W["model.norm.weight"], eps) @ W["lm_head.weight"].T             # [B, T, V]
    m = logits.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(logits - m).sum(axis=-1)) + m[..., 0]
    picked = np.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return float(np.mean(lse - picked))


def val_windows(shard, T, n):
    hdr = np.fromfile(shard, dtype="<i4", count=256)
    dtype = {20240520: "<u2", 20240801: "<u4"}[int(hdr[0])]
    tok = np.fromfile(shard, dtype=dtype, offset=1024, count=n * T + 1).astype(np.int64)
    inputs = np.stack([tok[w * T: w * T + T] for w in range(n)])
    targets = np.stack([tok[w * T + 1: w * T + T + 1] for w in range(n)])
    return inputs, targets


# float32 forward (fsdp.c) vs float64 (here): the losses agree to float32 rounding of logits of
# a few units, far inside this; the emulated bug must miss by more than 10x it.
LOSS_RTOL, LOSS_ATOL = 2e-6, 2e-6


def check_loss(st_path, shard, B, T, n, expect, name, bug):
    st, cfg = load(st_path)
    inputs, targets = val_windows(shard, T, n)
    ref = hf_loss(st, cfg, inputs, targets)
    tol = LOSS_RTOL * abs(expect) + LOSS_ATOL
    diff = abs(ref - expect)
    report(diff <= tol, f"{name}: Hugging Face-convention forward (rotate_half) of the safetensors = train_gpt's val "
           f"loss", f"{ref:.9f} vs {expect:.9f}, |diff| {diff:.2g} <= tol {tol:.2g}" if diff <= tol else
           f"{ref:.9f} vs {expect:.9f}, |diff| {diff:.3g} > tol {tol:.3g}")
    if bug:
        wrong = hf_loss(st, cfg, inputs, targets, bug=True)
        d = abs(wrong - expect)
        report(d > 10 * tol, f"{name}: the check catches q/k left unpermuted (emulated exporter bug)",
               f"loss {wrong:.6f}, |diff| {d:.3g} vs tol {tol:.2g}")


def save(st, cfg, d, name="model.safetensors", metadata=None):
    from safetensors.numpy import save_file
    os.makedirs(d, exist_ok=True)
    save_file(st, os.path.join(d, name), metadata=metadata or {"format": "pt"})
    if cfg is not None:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)


def sharpen(st_path, out_dir):
    st, cfg = load(st_path)
    scale = {"self_attn.q_proj.weight": 10.0, "self_attn.k_proj.weight": 10.0, "self_attn.o_proj.weight": 8.0,
             "lm_head.weight": 30.0}
    out = {}
    for k, v in st.items():
        f = next((s for suffix, s in scale.items() if k.endswith(suffix)), 1.0)
        out[k] = (v * np.float32(f)).astype(np.float32)
    save(out, cfg, out_dir)


def same(a, b):
    from safetensors.numpy import load_file
    x, y = load_file(a), load_file(b)
    bad = sorted(k for k in set(x) | set(y)
                 if k not in x or k not in y or x[k].dtype != y[k].dtype or x[k].shape != y[k].shape
                 or x[k].tobytes() != y[k].tobytes())
    report(not bad, f"{os.path.basename(os.path.dirname(b))}/{os.path.basename(b)} holds the tensors of "
           f"{os.path.basename(os.path.dirname(a))}/{os.path.basename(a)} bitwise", f"differ: {bad[:4]}" if bad else "")


def variants(st_path, d):
    """Malformed save_pretrained directories: d/NAME/{model.safetensors, config.json}."""
    st, cfg = load(st_path)
    NH, KVH = cfg["num_attention_heads"], cfg["num_key_value_heads"]

    def make(name, tensors=None, config=None, raw_config=None, no_config=False):
        sub = os.path.join(d, name)
        save(st if tensors is None else tensors, None, sub)
        if no_config:
            return
        with open(os.path.join(sub, "config.json"), "w") as f:
            f.write(raw_config if raw_config is not None else json.dumps(cfg if config is None else config, indent=2))

    make("noconfig", no_config=True)
    make("kv3", config=dict(cfg, num_key_value_heads=3))                         # 3 does not divide 4
    make("heads3", config=dict(cfg, num_attention_heads=3))                      # 3 does not divide C
    make("kv_more", config=dict(cfg, num_key_value_heads=2 * NH))
    t = dict(st)
    k0 = "model.layers.0.self_attn.k_proj.weight"
    t[k0] = np.concatenate([t[k0], t[k0][:2]])                                   # two rows too many
    make("kshape", tensors=t)
    t = dict(st)
    del t[f"model.layers.{cfg['num_hidden_layers'] - 1}.mlp.up_proj.weight"]
    make("missing", tensors=t)
    t = dict(st)
    del t["lm_head.weight"]
    make("nohead", tensors=t)                                                     # untied, no head
    t = dict(st)
    del t["model.embed_tokens.weight"]
    del t["lm_head.weight"]
    make("tie_noembed", tensors=t, config=dict(cfg, tie_word_embeddings=True))
    t = dict(st)
    t["lm_head.weight"] = t["model.embed_tokens.weight"]
    save(t, None, os.path.join(d, "tied_ref"))                                   # (the weights `tied` gives)
    del t["lm_head.weight"]
    make("tied", tensors=t, config=dict(cfg, tie_word_embeddings=True))
    make("badjson", raw_config=json.dumps(cfg)[:-20])
    make("theta_inf", raw_config=json.dumps(cfg).replace('"rope_theta": ' + json.dumps(cfg["rope_theta"]),
                                                         '"rope_theta": 1e999'))
    make("theta_nan", raw_config=json.dumps(dict(cfg, rope_theta=float("nan"))))   # Python writes NaN: not JSON
    c = dict(cfg)
    del c["rope_scaling"]
    make("noscaling", config=c)
    make("yarn", config=dict(cfg, rope_scaling={"rope_type": "yarn", "factor": 4.0}))
    make("eps_zero", config=dict(cfg, rms_norm_eps=0.0))
    make("hidden_mismatch", config=dict(cfg, hidden_size=2 * cfg["hidden_size"]))
    t = dict(st)
    t["model.layers.0.self_attn.q_proj.bias"] = np.zeros(cfg["hidden_size"], dtype=np.float32)
    make("extra", tensors=t)
    make("scaled", config=dict(cfg, rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                                  "original_max_position_embeddings": 8192, "rope_type": "llama3"}))
    make("custom", config=dict(cfg, rope_scaling={"factor": 16.0, "high_freq_factor": 8.0, "low_freq_factor": 2.0,
                                                  "original_max_position_embeddings": 4096, "rope_type": "llama3"},
                               rms_norm_eps=1e-6, max_position_embeddings=1 << 21))
    # overlapping data: the header of a copy rewritten so that two tensors share bytes
    src = os.path.join(d, "extra", "model.safetensors")
    with open(src, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    a, b = "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight"
    header[b]["data_offsets"] = list(header[a]["data_offsets"])
    del header["model.layers.0.self_attn.q_proj.bias"]
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    os.makedirs(os.path.join(d, "overlap"), exist_ok=True)
    with open(os.path.join(d, "overlap", "model.safetensors"), "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + data)
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(st_path)), "config.json"), os.path.join(d, "overlap"))


def write_index(d, weight_map, total_size, raw=None):
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        if raw is not None:
            f.write(raw)
        else:
            json.dump({"metadata": {"total_size": total_size}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)


def shard(st_path, out_dir, n):
    from safetensors import safe_open
    st, cfg = load(st_path)
    with safe_open(st_path, "np") as f:
        names = list(f.keys())                       # (the file's order: sorted names)
    total = sum(st[k].nbytes for k in names)
    # consecutive names, about len / n each (by count, not bytes as save_pretrained does: the test
    # models' vocabulary-sized tensors would each take a shard alone)
    groups = [names[len(names) * i // n:len(names) * (i + 1) // n] for i in range(n)]
    assert len(groups) == n and all(groups), [len(g) for g in groups]
    weight_map = {}
    for i, g in enumerate(groups):
        name = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        save({k: st[k] for k in g}, None, out_dir, name)
        weight_map.update({k: name for k in g})
    write_index(out_dir, weight_map, total)
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(st_path)), "config.json"), out_dir)


def shard_variants(src, d):
    """Malformed copies of a `shard` directory: d/NAME/{shards, config.json, index}."""
    from safetensors.numpy import load_file
    with open(os.path.join(src, "model.safetensors.index.json")) as f:
        index = json.load(f)
    wm, total = index["weight_map"], index["metadata"]["total_size"]
    files = sorted(set(wm.values()))
    assert len(files) >= 2

    def make(name, weight_map=None, raw=None, shards=None):
        sub = os.path.join(d, name)
        os.makedirs(sub, exist_ok=True)
        for fn in files:
            shutil.copy(os.path.join(src, fn), sub)
        shutil.copy(os.path.join(src, "config.json"), sub)
        for fn, tensors in (shards or {}).items():
            save(tensors, None, sub, fn)
        write_index(sub, wm if weight_map is None else weight_map, total, raw)

    first = sorted(k for k in wm if wm[k] == files[0])[0]      # a tensor of the first shard
    second = sorted(k for k in wm if wm[k] == files[1])[0]     # and one of the second
    make("dotdot", weight_map=dict(wm, **{first: "../" + files[0]}))
    make("noshard", weight_map=dict(wm, **{first: "model-00009-of-00009.safetensors"}))
    make("wrongshard", weight_map=dict(wm, **{first: files[1]}))
    t = load_file(os.path.join(src, files[1]))
    t[first] = load_file(os.path.join(src, files[0]))[first]
    make("twoshards", shards={files[1]: t})                     # first: in its shard and in the second
    make("unlisted", weight_map={k: v for k, v in wm.items() if k != second})
    t = load_file(os.path.join(src, files[1]))
    del t[second]
    make("missing", weight_map={k: v for k, v in wm.items() if k != second}, shards={files[1]: t})
    make("badjson", raw=json.dumps({"metadata": {"total_size": total}, "weight_map": wm})[:-30])
    make("nomap", raw=json.dumps({"metadata": {"total_size": total}}))
    make("notsafetensors", weight_map=dict(wm, **{first: "pytorch_model-00001-of-00002.bin"}))
    make("noconfig")
    os.remove(os.path.join(d, "noconfig", "config.json"))
    print(json.dumps({"first": first, "second": second, "files": files}))


def main(argv):
    if len(argv) == 3 and argv[1] == "names":
        check_names(argv[2])
    elif len(argv) in (9, 10) and argv[1] == "loss":
        check_loss(argv[2], argv[3], int(argv[4]), int(argv[5]), int(argv[6]), float(argv[7]), argv[8],
                   bug=len(argv) == 10 and argv[9] == "--bug")
    elif len(argv) == 4 and argv[1] == "sharpen":
        sharpen(argv[2], argv[3])
    elif len(argv) == 4 and argv[1] == "same":
        same(argv[2], argv[3])
    elif len(argv) == 4 and argv[1] == "variants":
        variants(argv[2], argv[3])
    elif len(argv) == 5 and argv[1] == "shard":
        shard(argv[2], argv[3], int(argv[4]))
    elif len(argv) == 4 and argv[1] == "shard_variants":
        shard_variants(argv[2], argv[3])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
