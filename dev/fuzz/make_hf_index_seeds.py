#!/usr/bin/env python3
"""Writes the seeds of dev/fuzz/fuzz_hf_index.c into dev/fuzz/corpus/hf_index/ (run from the
repository root): small Hugging Face models as the harness reads its input, files one after
another, each "--- NAME\\n" and then its bytes, a newline between two files.

    llama_2shards   a Llama 3 (2 layers, GQA) as model.safetensors.index.json, config.json and
                    two shards (F32 and BF16)
    llama_tied      one model.safetensors without lm_head.weight, config.json with
                    tie_word_embeddings true and Llama 3.1's rope_scaling
    gpt2_lmhead     GPT2LMHeadModel's names ("transformer.", attn.bias buffers, lm_head.weight =
                    wte.weight) in F16 beside save_pretrained's config.json
    gpt2_untied     GPT2Model's names with __metadata__ n_head, config.json saying
                    tie_word_embeddings false, lm_head.weight equal to wte.weight
Each is imported by `ckpt import` as it stands (test by hand after a change of format).
"""
import json
import os
import struct

import numpy as np

OUT = "dev/fuzz/corpus/hf_index"
rng = np.random.default_rng(0)


def safetensors(tensors, dtype="F32", metadata=None):
    """A safetensors file of {name: array}: F32, F16 or BF16 (fp32 truncated)."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype=np.float32)
        if dtype == "F16":
            raw = a.astype(np.float16).tobytes()
        elif dtype == "BF16":
            raw = (a.view(np.uint32) >> 16).astype(np.uint16).tobytes()
        else:
            raw = a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def seed(name, files):
    parts = [b"--- " + fname.encode() + b"\n" + (data if isinstance(data, bytes) else json.dumps(data, indent=2).encode())
             for fname, data in files]
    assert not any(b"\n--- " in part for part in parts), name   # (the harness would split it there)
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(b"\n".join(parts))


def w(*shape):
    return rng.standard_normal(shape).astype(np.float32) * 0.1


# Llama: V 16, C 8, 2 heads of 4, 1 kv head, F 16, 2 layers.
V, C, KV, F, L = 16, 8, 4, 16, 2
llama = {"model.embed_tokens.weight": w(V, C)}
for l in range(L):
    p = f"model.layers.{l}."
    llama.update({p + "input_layernorm.weight": 1 + w(C), p + "self_attn.q_proj.weight": w(C, C),
                  p + "self_attn.k_proj.weight": w(KV, C), p + "self_attn.v_proj.weight": w(KV, C),
                  p + "self_attn.o_proj.weight": w(C, C), p + "post_attention_layernorm.weight": 1 + w(C),
                  p + "mlp.gate_proj.weight": w(F, C), p + "mlp.up_proj.weight": w(F, C),
                  p + "mlp.down_proj.weight": w(C, F)})
llama.update({"model.norm.weight": 1 + w(C), "lm_head.weight": w(V, C)})
llama_config = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "head_dim": 4, "hidden_act": "silu",
                "hidden_size": C, "intermediate_size": F, "max_position_embeddings": 16, "mlp_bias": False,
                "model_type": "llama", "num_attention_heads": 2, "num_hidden_layers": L, "num_key_value_heads": 1,
                "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 500000.0, "tie_word_embeddings": False,
                "torch_dtype": "float32", "vocab_size": V}
names = list(llama)
first = {k: llama[k] for k in names if k.startswith(("model.embed_tokens", "model.layers.0."))}
second = {k: llama[k] for k in names if k not in first}
shard = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
index = {"metadata": {"total_size": 4 * sum(a.size for a in llama.values())},
         "weight_map": dict([(k, shard[0]) for k in first] + [(k, shard[1]) for k in second])}
seed("llama_2shards", [("model.safetensors.index.json", index), ("config.json", llama_config),
                       (shard[0], safetensors(first)), (shard[1], safetensors(second, "BF16"))])
tied = {k: v for k, v in llama.items() if k != "lm_head.weight"}
scaled = dict(llama_config, tie_word_embeddings=True,
              rope_scaling={"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                            "original_max_position_embeddings": 8, "rope_type": "llama3"})
seed("llama_tied", [("config.json", scaled), ("model.safetensors", safetensors(tied))])

# GPT-2: V 16, C 8, 2 heads, 8 positions, 1 layer.
V, C, T = 16, 8, 8
gpt2 = {"wte.weight": w(V, C), "wpe.weight": w(T, C)}
p = "h.0."
gpt2.update({p + "ln_1.weight": 1 + w(C), p + "ln_1.bias": w(C), p + "attn.c_attn.weight": w(C, 3 * C),
             p + "attn.c_attn.bias": w(3 * C), p + "attn.c_proj.weight": w(C, C), p + "attn.c_proj.bias": w(C),
             p + "ln_2.weight": 1 + w(C), p + "ln_2.bias": w(C), p + "mlp.c_fc.weight": w(C, 4 * C),
             p + "mlp.c_fc.bias": w(4 * C), p + "mlp.c_proj.weight": w(4 * C, C), p + "mlp.c_proj.bias": w(C)})
gpt2.update({"ln_f.weight": 1 + w(C), "ln_f.bias": w(C)})
gpt2_config = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
               "bos_token_id": None, "embd_pdrop": 0.1, "eos_token_id": None, "initializer_range": 0.02,
               "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": T, "n_embd": C, "n_head": 2, "n_inner": None,
               "n_layer": 1, "n_positions": T, "reorder_and_upcast_attn": False, "resid_pdrop": 0.1,
               "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True, "summary_activation": None,
               "summary_first_dropout": 0.1, "summary_proj_to_labels": True, "summary_type": "cls_index",
               "summary_use_proj": True, "tie_word_embeddings": True, "torch_dtype": "float32", "use_cache": True,
               "vocab_size": V}
lmhead = {"transformer." + k: v for k, v in gpt2.items()}
lmhead["transformer.h.0.attn.bias"] = np.tril(np.ones((T, T), dtype=np.float32))
lmhead["lm_head.weight"] = gpt2["wte.weight"]
seed("gpt2_lmhead", [("config.json", gpt2_config), ("model.safetensors", safetensors(lmhead, "F16"))])
untied = dict(gpt2, **{"lm_head.weight": gpt2["wte.weight"]})
meta = {"format": "pt", "n_head": "2", "n_layer": "1", "n_embd": str(C)}
seed("gpt2_untied", [("config.json", dict(gpt2_config, tie_word_embeddings=False)),
                     ("model.safetensors", safetensors(untied, metadata=meta))])
