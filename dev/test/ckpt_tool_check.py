#!/usr/bin/env python3
"""Python side of dev/test/test_ckpt_tool.sh (the `ckpt` tool's tests).

    ckpt_tool_check.py safetensors ST LLMC STATE
        ST: `ckpt export --safetensors` output; LLMC: `ckpt export --llmc` of the same
        checkpoint; STATE: `build/test_gpt2 dump` on LLMC (the C model's logits on a batch).
        Checks that ST loads with the safetensors package with Hugging Face GPT2Model names,
        shapes and dtypes, that its weights are LLMC's (Conv1D weights transposed back, wte's
        real rows), and that the PyTorch reference (torch_gpt2.py) built from ST's weights
        gives the C model's logits (torch_reference.py's tolerance). Then that the logits
        check fails for an emulated exporter bug (a Conv1D weight left untransposed).
    ckpt_tool_check.py flip STEP_DIR RANK
        Flips one byte in the middle of the first parameter chunk that rank file RANK holds
        (found through manifest.json) and prints the chunk's tensor name.
    ckpt_tool_check.py poison STEP_DIR TENSOR KIND ELEMENT VALUE
        Writes VALUE (nan, inf, -inf, or a number) as element ELEMENT of TENSOR's KIND (param,
        m, v) into the raw chunk that holds it and rewrites that chunk's XXH64 in manifest.json:
        the checksums match, only the value is wrong. Used by test_untrusted_ckpt and test_asan.
    ckpt_tool_check.py variants ST DIR
        Writes variants of the safetensors file ST into DIR: malformed ones (st_*.safetensors)
        and two valid ones an importer must accept: hf.safetensors, named as a Hugging Face
        GPT2LMHeadModel saves it ("transformer." prefix, the attn.bias mask buffers, a tied
        lm_head.weight, no n_head metadata), and bf16.safetensors (BF16, rounded to nearest even).
        Also save_pretrained-style directories DIR/hf_dir*/model.safetensors (hf.safetensors)
        with the config.json transformers writes (hf_dir), one with a wrong n_embd, one with
        n_head 0, one without config.json, and one whose metadata n_head disagrees with it;
        and DIR/hf_cfg_*/ with config.json fields that change the math (transformers' GPT-2 config), each
        either what fsdp.c computes (imported) or not (refused): see CFG_VARIANTS.
    ckpt_tool_check.py config DIR
        DIR/config.json (a GPT-2 `ckpt export --safetensors DIR/model.safetensors`) holds exactly
        the keys and values transformers' save_pretrained writes for a GPT-2 of that shape
        (REFERENCE_CONFIG, written down from transformers 4.39), plus n_ctx and
        tie_word_embeddings.
    ckpt_tool_check.py transformers load DIR LLMC STATE | save DIR | same HF_ST OUR_ST
        With Hugging Face transformers importable (else one `ok - ... # skip` line):
        load: GPT2LMHeadModel.from_pretrained(DIR) loads the export with no missing, unexpected
        or mismatched tensor, lm_head tied to wte, and gives the C model's logits (STATE, as
        `safetensors` above). save: writes DIR/tied and DIR/untied, save_pretrained of a small
        random GPT2LMHeadModel (tie_word_embeddings true; false with a head of its own).
        same: the tensors of HF_ST (transformers') and OUR_ST (an export) are equal, names
        compared without "transformer.".

Prints `ok - ...` / `not ok - ...` lines; exits 1 if a check failed.
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
failed = False


def report(ok, name, detail=""):
    global failed
    if ok:
        print(f"ok - {name}" + (f" ({detail})" if detail else ""))
    else:
        failed = True
        print(f"not ok - {name}: {detail}")
    sys.stdout.flush()


def hf_expected(cfg):
    """{HF name: shape} of GPT2Model for an llm.c config."""
    C = cfg.C
    out = {"wte.weight": (cfg.V, C), "wpe.weight": (cfg.maxT, C), "ln_f.weight": (C,), "ln_f.bias": (C,)}
    for l in range(cfg.L):
        p = f"h.{l}."
        out.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
                    p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
                    p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
                    p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
                    p + "mlp.c_fc.weight": (C, 4 * C), p + "mlp.c_fc.bias": (4 * C,),
                    p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,)})
    return out


def to_llmc_arrays(cfg, st, untransposed=()):
    """safetensors tensors -> llm.c arrays (LLMC_TENSORS order, stacked over layers)."""
    import torch_gpt2 as tg
    out = []
    for _, pattern, _ in tg.LLMC_TENSORS:
        if tg.llmc_is_layered(pattern):
            per = []
            for l in range(cfg.L):
                name = pattern.format(l)
                a = st[name]
                if name.endswith(CONV1D) and name.split(".", 2)[2] not in untransposed:
                    a = a.T  # HF Conv1D [in, out] -> ours [out, in]
                per.append(np.ascontiguousarray(a))
            out.append(np.stack(per))
        elif pattern == "wte.weight":
            w = np.zeros((cfg.Vp, cfg.C), dtype=np.float32)
            w[: cfg.V] = st[pattern]
            out.append(w)
        else:
            out.append(np.ascontiguousarray(st[pattern]))
    return out


def torch_logits(cfg, arrays, x, B, T):
    import torch
    import torch_gpt2 as tg
    model = tg.GPT2(cfg).load_llmc(arrays)
    with torch.no_grad():
        logits, _ = model(torch.from_numpy(x.astype(np.int64)).view(B, T))
    return logits.numpy()


def check_safetensors(st_path, llmc_path, state_path):
    import safetensors
    from safetensors.numpy import load_file
    import torch_gpt2 as tg
    import torch_reference as tr

    cfg, llmc = tg.read_model_file(llmc_path)
    st = load_file(st_path)
    want = hf_expected(cfg)
    problems = []
    if set(st) != set(want):
        problems.append(f"names: missing {sorted(set(want) - set(st))[:4]}, extra {sorted(set(st) - set(want))[:4]}")
    for k, shape in want.items():
        if k in st and (tuple(st[k].shape) != shape or st[k].dtype != np.float32):
            problems.append(f"{k}: {st[k].dtype} {tuple(st[k].shape)}, expected float32 {shape}")
    with safetensors.safe_open(st_path, "np") as f:
        meta = f.metadata() or {}
    if meta.get("format") != "pt":
        problems.append(f"__metadata__ format is {meta.get('format')!r}, expected 'pt'")
    report(not problems, f"safetensors export loads with safetensors {safetensors.__version__}: "
           f"{len(want)} GPT2Model tensors, names/shapes/F32", "; ".join(problems[:4]) or f"{len(st)} tensors")
    if problems:
        return

    arrays = to_llmc_arrays(cfg, st)
    bad = [name for (name, _), a, b in zip(tg.llmc_shapes(cfg), arrays, llmc) if not np.array_equal(a, b)]
    report(not bad, "safetensors weights equal the llm.c export's (Conv1D transposed back, wte real rows)",
           f"differ: {bad}" if bad else "")
    pad = llmc[0][cfg.V:]
    report(not pad.any(), f"the llm.c export's {cfg.Vp - cfg.V} padded wte rows are zero (safetensors drops them)",
           f"max |pad| {np.abs(pad).max()}" if pad.any() else "")

    state = tr.read_state(state_path, cfg)

    def logits_check(arrs):
        ref = torch_logits(cfg, arrs, state["x"], state["B"], state["T"]).astype(np.float64)
        c = state["logits"].astype(np.float64)
        diff = float(np.abs(c - ref).max())
        tol = tr.LOGITS_RTOL * float(np.abs(ref).max()) + tr.LOGITS_ATOL
        return diff <= tol, diff, tol

    ok, diff, tol = logits_check(arrays)
    report(ok, f"PyTorch GPT-2 from the safetensors weights gives train_gpt's logits "
           f"[{state['B']}x{state['T']}x{cfg.Vp}]", f"max|diff| {diff:.3g} <= tol {tol:.3g}" if ok else
           f"max|diff| {diff:.3g} > tol {tol:.3g}")
    # The check can fail: an exporter that forgot to transpose attn.c_proj (square, so the
    # shapes still fit) must be caught.
    ok_bug, diff, tol = logits_check(to_llmc_arrays(cfg, st, untransposed=("attn.c_proj.weight",)))
    report(not ok_bug, "the logits check catches an untransposed Conv1D weight (emulated exporter bug)",
           f"max|diff| {diff:.3g} vs tol {tol:.3g}")


def flip(step_dir, rank):
    with open(os.path.join(step_dir, "manifest.json")) as f:
        man = json.load(f)
    fields = man["chunk_fields"].split(",")
    rows = [dict(zip(fields, row)) for row in man["chunks"]]
    ch = next(r for r in rows if r["kind"] == "param" and int(r["file"]) == rank)
    path = os.path.join(step_dir, f"rank_{rank:05d}.bin")
    at = int(ch["offset"]) + int(ch["bytes"]) // 2
    print(ch["tensor"])
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x5A]))


def poison(step_dir, tensor, kind, element, value):
    import ctypes
    xx = ctypes.CDLL("libxxhash.so.0")   # what the C reader checks with
    xx.XXH64.restype = ctypes.c_uint64
    xx.XXH64.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
    path = os.path.join(step_dir, "manifest.json")
    with open(path) as f:
        man = json.load(f)
    fields = man["chunk_fields"].split(",")
    col = fields.index
    row = next(r for r in man["chunks"] if r[col("tensor")] == tensor and r[col("kind")] == kind
               and int(r[col("lo")]) <= element < int(r[col("hi")]))
    assert row[col("codec")] == "raw", row
    rank_file = os.path.join(step_dir, "rank_%05d.bin" % int(row[col("file")]))
    with open(rank_file, "r+b") as f:
        f.seek(int(row[col("offset")]) + 4 * (element - int(row[col("lo")])))
        f.write(struct.pack("<f", float(value)))
        f.seek(int(row[col("offset")]))
        stored = f.read(int(row[col("bytes")]))
    row[col("xxh64")] = "%016x" % xx.XXH64(stored, len(stored), 0)
    with open(path, "w") as f:
        json.dump(man, f)


def safetensors_variants(src, d):
    with open(src, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()

    def write(name, hdr, payload, raw_header=None):
        text = raw_header if raw_header is not None else json.dumps(hdr, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(d, name), "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            f.write(payload)

    # valid variants
    from safetensors.numpy import load_file, save_file
    t = load_file(src)
    hf = {"transformer." + k: v for k, v in t.items()}
    L = 1 + max(int(k.split(".")[1]) for k in t if k.startswith("h."))
    for l in range(L):
        hf[f"transformer.h.{l}.attn.bias"] = np.tril(np.ones((4, 4), dtype=np.float32)).reshape(1, 1, 4, 4)
    hf["lm_head.weight"] = t["wte.weight"]
    save_file(hf, os.path.join(d, "hf.safetensors"), metadata={"format": "pt"})
    bf = {}
    for k, v in t.items():
        u = v.view(np.uint32).astype(np.uint64)
        bf[k] = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    hdr, off, blobs = {"__metadata__": header["__metadata__"]}, 0, []
    for k, v in bf.items():
        hdr[k] = {"dtype": "BF16", "shape": list(v.shape), "data_offsets": [off, off + v.nbytes]}
        off += v.nbytes
        blobs.append(v.tobytes())
    write("bf16.safetensors", hdr, b"".join(blobs))

    h = dict(header); del h["h.1.mlp.c_fc.bias"]
    write("st_missing.safetensors", h, data)
    h = json.loads(json.dumps(header)); h["h.0.attn.c_attn.weight"]["shape"] = list(reversed(h["h.0.attn.c_attn.weight"]["shape"]))
    write("st_shape.safetensors", h, data)
    h = json.loads(json.dumps(header)); h["h.0.ln_1.bias"]["dtype"] = "I32"
    write("st_dtype.safetensors", h, data)
    write("st_truncated.safetensors", header, data[: len(data) // 2])
    # an unknown tensor with bytes of its own (sharing another's would be an overlap, refused first)
    h = json.loads(json.dumps(header)); h["h.0.extra.weight"] = {"dtype": "F32", "shape": [1], "data_offsets": [len(data), len(data) + 4]}
    write("st_extra.safetensors", h, data + b"\0" * 4)
    # one tensor under both GPT2Model's name and GPT2LMHeadModel's ("transformer."), bytes of its own
    h = json.loads(json.dumps(header)); b = h["h.0.ln_1.bias"]
    size = b["data_offsets"][1] - b["data_offsets"][0]
    h["transformer.h.0.ln_1.bias"] = {"dtype": "F32", "shape": b["shape"], "data_offsets": [len(data), len(data) + size]}
    write("st_twice.safetensors", h, data + b"\0" * size)
    # two tensors sharing bytes: h.0.ln_1.bias's offsets moved 4 bytes into h.0.ln_1.weight's
    h = json.loads(json.dumps(header))
    w0, b0 = h["h.0.ln_1.weight"]["data_offsets"], h["h.0.ln_1.bias"]["data_offsets"]
    if w0[1] == b0[0]:
        h["h.0.ln_1.bias"]["data_offsets"] = [b0[0] - 4, b0[1] - 4]
    else:
        h["h.0.ln_1.bias"]["data_offsets"] = [w0[0], w0[0] + (b0[1] - b0[0])]
    write("st_overlap.safetensors", h, data)
    h = json.loads(json.dumps(header)); h["__metadata__"]["n_head"] = "0"
    write("st_nhead0.safetensors", h, data)
    h = json.loads(json.dumps(header)); h["__metadata__"]["n_head"] = "4x"
    write("st_nhead_junk.safetensors", h, data)
    # A Hugging Face save_pretrained directory: model.safetensors without n_head metadata (the
    # GPT2LMHeadModel names of hf.safetensors) and the config.json transformers writes beside it.
    meta = header["__metadata__"]
    L, C = int(meta["n_layer"]), int(meta["n_embd"])
    config = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
              "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
              "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": int(meta["n_positions"]), "n_embd": C,
              "n_head": int(meta["n_head"]), "n_inner": None, "n_layer": L, "n_positions": int(meta["n_positions"]),
              "reorder_and_upcast_attn": False, "resid_pdrop": 0.1, "scale_attn_by_inverse_layer_idx": False,
              "scale_attn_weights": True, "summary_activation": None, "summary_first_dropout": 0.1,
              "summary_proj_to_labels": True, "summary_type": "cls_index", "summary_use_proj": True,
              "torch_dtype": "float32", "transformers_version": "4.46.3", "use_cache": True,
              "vocab_size": int(meta["vocab_size"])}
    for sub, edit in (("hf_dir", {}), ("hf_dir_badembd", {"n_embd": 2 * C}), ("hf_dir_nhead0", {"n_head": 0}),
                      ("hf_dir_noconfig", None)):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
        shutil.copy(os.path.join(d, "hf.safetensors"), os.path.join(d, sub, "model.safetensors"))
        if edit is not None:
            with open(os.path.join(d, sub, "config.json"), "w") as f:
                json.dump(dict(config, **edit), f, indent=2)
    # the metadata's n_head and config.json's disagree
    os.makedirs(os.path.join(d, "hf_dir_disagree"), exist_ok=True)
    h = json.loads(json.dumps(header)); h["__metadata__"]["n_head"] = "2"
    write(os.path.join("hf_dir_disagree", "model.safetensors"), h, data)
    with open(os.path.join(d, "hf_dir_disagree", "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    # The LayerNorms' epsilon: layer_norm_epsilon 1e-6 (imported, trained and exported with it), 0
    # (refused), and our export's metadata (src's: 1e-05) disagreeing with config.json's 1e-6.
    for sub, eps, weights in (("hf_dir_eps", 1e-6, os.path.join(d, "hf.safetensors")),
                              ("hf_dir_eps0", 0.0, os.path.join(d, "hf.safetensors")), ("hf_dir_eps_disagree", 1e-6, src)):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
        shutil.copy(weights, os.path.join(d, sub, "model.safetensors"))
        with open(os.path.join(d, sub, "config.json"), "w") as f:
            json.dump(dict(config, layer_norm_epsilon=eps), f, indent=2)
    write("st_badjson.safetensors", None, data, raw_header=b'{"wte.weight": {"dtype": "F32", ')
    # The config fields that change the math (model/gpt2.c's gpt2_hf_math and gpt2_hf_head).
    # A head of its own: lm_head.weight one element away from wte.weight.
    head = hf["lm_head.weight"].copy()
    head[7, 3] += 1e-3
    save_file(dict(hf, **{"lm_head.weight": head}), os.path.join(d, "st_head_diff.safetensors"), metadata={"format": "pt"})
    nohead = {k: v for k, v in hf.items() if k != "lm_head.weight"}
    for sub, edit, weights in CFG_VARIANTS:
        os.makedirs(os.path.join(d, sub), exist_ok=True)
        cfg = {"model_type": "gpt2", "n_head": config["n_head"]} if edit == "minimal" else dict(config, **edit)
        for k, v in list(cfg.items()):
            if v == "4C":
                cfg[k] = 4 * C
            if v is DELETE:
                del cfg[k]
        with open(os.path.join(d, sub, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        path = os.path.join(d, sub, "model.safetensors")
        if weights == "hf":
            shutil.copy(os.path.join(d, "hf.safetensors"), path)
        elif weights == "head_diff":
            shutil.copy(os.path.join(d, "st_head_diff.safetensors"), path)
        else:
            save_file(nohead, path, metadata={"format": "pt"})


DELETE = object()
# (directory, config.json edit, weights): "minimal" is a config.json of model_type and n_head
# alone (every other key transformers' default); weights "hf" is hf.safetensors (lm_head.weight =
# wte.weight), "head_diff" its head one element off, "nohead" without lm_head.weight. The ones
# test_ckpt_tool.sh expects imported, then refused.
CFG_VARIANTS = (
    ("hf_cfg_minimal", "minimal", "hf"),
    ("hf_cfg_tanh", {"activation_function": "gelu_pytorch_tanh", "n_inner": "4C", "reorder_and_upcast_attn": True}, "hf"),
    ("hf_cfg_untied_same", {"tie_word_embeddings": False}, "hf"),
    ("hf_cfg_act", {"activation_function": "gelu"}, "hf"),
    ("hf_cfg_inner", {"n_inner": 100}, "hf"),
    ("hf_cfg_scale", {"scale_attn_weights": False}, "hf"),
    ("hf_cfg_layeridx", {"scale_attn_by_inverse_layer_idx": True}, "hf"),
    ("hf_cfg_cross", {"add_cross_attention": True}, "hf"),
    ("hf_cfg_bool", {"scale_attn_weights": "yes"}, "hf"),
    ("hf_cfg_untied_diff", {"tie_word_embeddings": False}, "head_diff"),
    ("hf_cfg_tied_diff", {"tie_word_embeddings": True}, "head_diff"),
    ("hf_cfg_untied_nohead", {"tie_word_embeddings": False}, "nohead"),
)

# What transformers 4.39's save_pretrained writes for a GPT-2 of this shape (the
# defaults: what fsdp.c's GPT-2 computes), with transformers_version left out; the export adds
# n_ctx (OpenAI's files' name of n_positions) and tie_word_embeddings (save_pretrained leaves
# out a value equal to PretrainedConfig's default).
def reference_config(L, C, NH, maxT, V):
    return {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
            "bos_token_id": 50256 if V == 50257 else None, "embd_pdrop": 0.1,
            "eos_token_id": 50256 if V == 50257 else None, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05,
            "model_type": "gpt2", "n_embd": C, "n_head": NH, "n_inner": None, "n_layer": L, "n_positions": maxT,
            "reorder_and_upcast_attn": False, "resid_pdrop": 0.1, "scale_attn_by_inverse_layer_idx": False,
            "scale_attn_weights": True, "summary_activation": None, "summary_first_dropout": 0.1,
            "summary_proj_to_labels": True, "summary_type": "cls_index", "summary_use_proj": True,
            "torch_dtype": "float32", "use_cache": True, "vocab_size": V}


def check_config(d):
    import safetensors
    with safetensors.safe_open(os.path.join(d, "model.safetensors"), "np") as f:
        meta = f.metadata()
    L, C, NH, maxT, V = (int(meta[k]) for k in ("n_layer", "n_embd", "n_head", "n_positions", "vocab_size"))
    with open(os.path.join(d, "config.json")) as f:
        got = json.load(f)
    want = dict(reference_config(L, C, NH, maxT, V), n_ctx=maxT, tie_word_embeddings=True)
    # equal values of equal JSON types (True is not 1, 0.1 not "0.1")
    bad = sorted(k for k in set(got) | set(want)
                 if k not in got or k not in want or got[k] != want[k] or type(got[k]) is not type(want[k]))
    report(not bad, f"config.json of the GPT-2 export: the {len(want)} keys of transformers' save_pretrained "
           f"(L={L} C={C} NH={NH} maxT={maxT} V={V})", "; ".join(f"{k}: {got.get(k, '(absent)')!r}, expected "
                                                            f"{want.get(k, '(absent)')!r}" for k in bad[:4]))


def transformers_check(argv):
    try:
        import torch
        import transformers
        from transformers import AutoConfig, GPT2LMHeadModel
    except Exception as e:  # absent, or too old for this torch
        what = {"load": "GPT2LMHeadModel.from_pretrained of the GPT-2 export and its logits",
                "save": "the import of transformers' save_pretrained (tied, untied)"}.get(argv[0], argv[0])
        print(f"ok - transformers: {what} # skip transformers cannot be imported ({type(e).__name__}: {e})"[:300])
        return
    transformers.logging.set_verbosity_error()
    if argv[0] == "load" and len(argv) == 4:
        import torch_gpt2 as tg
        import torch_reference as tr
        d, llmc_path, state_path = argv[1:]
        m, info = GPT2LMHeadModel.from_pretrained(d, output_loading_info=True)
        m.eval()
        bad = {k: v for k, v in info.items() if v}
        tied = m.lm_head.weight.data_ptr() == m.transformer.wte.weight.data_ptr()
        report(not bad and tied, f"transformers {transformers.__version__}: GPT2LMHeadModel.from_pretrained loads "
               f"the export (config.json + GPT2Model names), every tensor, lm_head tied to wte",
               f"loading info {bad}, lm_head tied: {tied}")
        cfg, _ = tg.read_model_file(llmc_path)
        state = tr.read_state(state_path, cfg)
        x = torch.from_numpy(state["x"].astype(np.int64)).view(state["B"], state["T"])
        with torch.no_grad():
            ref = m(x).logits.double().numpy()
        c = state["logits"].astype(np.float64).reshape(state["B"], state["T"], cfg.Vp)[:, :, :cfg.V]
        diff = float(np.abs(c - ref).max())
        tol = tr.LOGITS_RTOL * float(np.abs(ref).max()) + tr.LOGITS_ATOL
        report(diff <= tol, f"transformers' logits on the export = train_gpt's [{state['B']}x{state['T']}x{cfg.V}]",
               f"max|diff| {diff:.3g} {'<=' if diff <= tol else '>'} tol {tol:.3g}")
    elif argv[0] == "save" and len(argv) == 2:
        torch.manual_seed(0)
        for sub, tie in (("tied", True), ("untied", False)):
            c = AutoConfig.for_model("gpt2", n_layer=2, n_head=4, n_embd=64, n_positions=64, tie_word_embeddings=tie)
            GPT2LMHeadModel(c).save_pretrained(os.path.join(argv[1], sub))
        print(f"ok - transformers {transformers.__version__}: save_pretrained of a tied and an untied GPT2LMHeadModel")
    elif argv[0] == "same" and len(argv) == 3:
        from safetensors.numpy import load_file
        a = {k.removeprefix("transformer."): v for k, v in load_file(argv[1]).items()}
        b = load_file(argv[2])
        differ = sorted(k for k in set(a) | set(b) if k not in a or k not in b or not np.array_equal(a[k], b[k]))
        report(not differ, f"the import of transformers' save_pretrained exports its {len(b)} tensors bitwise",
               f"differ: {differ[:4]}")
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


def main(argv):
    if len(argv) >= 2 and argv[1] == "safetensors" and len(argv) == 5:
        check_safetensors(argv[2], argv[3], argv[4])
    elif len(argv) == 4 and argv[1] == "flip":
        flip(argv[2], int(argv[3]))
    elif len(argv) == 7 and argv[1] == "poison":
        poison(argv[2], argv[3], argv[4], int(argv[5]), argv[6])
    elif len(argv) == 4 and argv[1] == "variants":
        safetensors_variants(argv[2], argv[3])
    elif len(argv) == 3 and argv[1] == "config":
        check_config(argv[2])
    elif len(argv) >= 3 and argv[1] == "transformers":
        transformers_check(argv[2:])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
