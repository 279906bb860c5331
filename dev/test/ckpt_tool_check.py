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
    ckpt_tool_check.py variants ST DIR
        Writes variants of the safetensors file ST into DIR: malformed ones (st_*.safetensors)
        and two valid ones an importer must accept: hf.safetensors, named as a Hugging Face
        GPT2LMHeadModel saves it ("transformer." prefix, the attn.bias mask buffers, a tied
        lm_head.weight, no n_head metadata), and bf16.safetensors (BF16, rounded to nearest even).
        Also save_pretrained-style directories DIR/hf_dir*/model.safetensors (hf.safetensors)
        with the config.json transformers writes (hf_dir), one with a wrong n_embd, one with
        n_head 0, one without config.json, and one whose metadata n_head disagrees with it.

Prints `ok - ...` / `not ok - ...` lines; exits 1 if a check failed.
"""
import json
import os
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
    import shutil
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


def main(argv):
    if len(argv) >= 2 and argv[1] == "safetensors" and len(argv) == 5:
        check_safetensors(argv[2], argv[3], argv[4])
    elif len(argv) == 4 and argv[1] == "flip":
        flip(argv[2], int(argv[3]))
    elif len(argv) == 4 and argv[1] == "variants":
        safetensors_variants(argv[2], argv[3])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
