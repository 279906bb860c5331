#!/usr/bin/env python3
"""PyTorch GPU baseline for train_gpt: GPT-2 trained the strongest practical way in PyTorch 2.x.

    python3 dev/bench/torch_gpt2_fsdp2.py --model d12 -b 32 -t 1024 --steps 20 --warmup 5 \\
        [--data SHARD.bin] [--compile-mode MODE | --no-compile] [--no-fsdp] [--peak-tflops 989]
    torchrun --nproc-per-node 8 dev/bench/torch_gpt2_fsdp2.py --model d48 -b 8     # several GPUs
    python3 dev/bench/torch_gpt2_fsdp2.py --cpu-smoke       # tiny model on the CPU, any torch >= 1.13

The model is train_gpt's GPT-2 (and llm.c's): learned token and position embeddings, pre-LN
blocks x += attn(ln_1(x)); x += mlp(ln_2(x)) with tanh GELU, final LayerNorm, LM head tied to
wte, vocabulary 50257 padded to 50304 (a multiple of 128; the loss uses the first 50257
logits), no dropout, LayerNorm eps 1e-5, GPT-2 initialisation.

How it runs (PyTorch >= 2.4; the public torch.distributed.fsdp names from 2.6):
  - FSDP2: fully_shard on every block (the last one keeps its parameters gathered after
    forward, since its backward comes next) and then on the root, with
    MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=--reduce-dtype): bf16 gathered
    parameters, activations and gradients, fp32 sharded master weights, gradients and
    Adam state (no autocast). One process is a world of 1 (an in-memory store, no network);
    under torchrun WORLD_SIZE/RANK/LOCAL_RANK come from the environment.
  - torch.compile of every block and of the head (ln_f + LM head + cross-entropy), as
    torchtitan does with FSDP2 (FSDP's hooks stay outside the compiled graphs), in
    --compile-mode (default, reduce-overhead, max-autotune-no-cudagraphs, max-autotune: the
    modes with CUDA graphs mark each step's start and copy the loss out of the graph's
    buffer); --no-compile runs eagerly.
  - attention through F.scaled_dot_product_attention(is_causal=True) (flash attention on
    bf16; --sdpa picks a backend).
  - fused AdamW (lr 6e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on the 2-D tensors
    only), gradient clipping at 1.0 as train_gpt does by default.
--no-fsdp instead keeps fp32 parameters on one device under bf16 autocast (nanoGPT style).

Input: an llm.c token shard (--data: 256 int32 header, magic 20240520, version 1, token
count; then uint16 tokens), read in consecutive B*T windows, wrapping; else random tokens.
The shard is copied to the GPU once, so no host transfer is timed.

Timing: --warmup steps first (compilation happens there), then --steps steps timed as one
window between two device synchronisations (no synchronisation inside it, as a real
training loop would run). Diagnostics go to stderr; stdout gets one line:

  RESULT framework=pytorch-fsdp2 model=d12 B=32 T=1024 tok_per_s=.. mfu=.. peak_mem_gib=.. step_ms=.. ...

tok_per_s counts every rank's tokens; mfu is a fraction: tok_per_s x (6N + 6LCT) /
(peak x ranks), N the parameter count (tied wte counted once, padded rows included, as
train_gpt counts), peak --peak-tflops (989: H100/H200 SXM dense bf16). peak_mem_gib is
torch.cuda.max_memory_allocated (rank 0); peak_reserved_gib the caching allocator's peak;
gpu_used_gib is cudaMemGetInfo's used memory at the end above what was used when the
context had been created (the measure train_gpt reports as its peak GPU memory).

--cpu-smoke: a 2-layer model on the CPU for a few steps, no FSDP, no compile, fp32, manual
attention where SDPA is missing (PyTorch 1.13): checks the model, the data path and the
output line anywhere. --device cpu alone runs the full FSDP2 (gloo) + compile path on the
CPU with PyTorch 2.x (slow; for checking the code without a GPU).
"""
import argparse
import math
import os
import sys
import time

SHARD_MAGIC = 20240520
GPT2_VOCAB = 50257
# torch.compile's modes, strongest first: max-autotune (Triton/cuBLAS templates autotuned per
# shape, CUDA graphs), the same without CUDA graphs, reduce-overhead (CUDA graphs, default
# kernels), default.
COMPILE_MODES = ("max-autotune", "max-autotune-no-cudagraphs", "reduce-overhead", "default")
PRESETS = {  # name: (layers, channels, heads), as train_gpt's -m
    "d12": (12, 768, 12),
    "d24": (24, 1024, 16),
    "d36": (36, 1280, 20),
    "d48": (48, 1600, 25),
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", "-m", default="d12", choices=sorted(PRESETS),
                    help="GPT-2 preset, as train_gpt -m [d12]")
    ap.add_argument("--layers", type=int, help="override the preset's layer count")
    ap.add_argument("--channels", type=int, help="override the preset's channels")
    ap.add_argument("--heads", type=int, help="override the preset's heads")
    ap.add_argument("--max-seq", type=int, default=1024, help="learned positions [1024]")
    ap.add_argument("-b", "--batch-size", type=int, default=None, help="micro-batch per rank [8]")
    ap.add_argument("-t", "--seq-len", type=int, default=None, help="sequence length [1024]")
    ap.add_argument("--steps", type=int, default=None, help="timed steps [20]")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps first [5]")
    ap.add_argument("--data", help="llm.c token shard (default: random tokens)")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0, help="0 disables [1.0]")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--peak-tflops", type=float, default=989.0,
                    help="peak dense BF16 TFLOP/s of one device, for MFU [989: H100/H200 SXM]")
    ap.add_argument("--no-compile", action="store_true", help="run eagerly (no torch.compile)")
    ap.add_argument("--compile-mode", default="default",
                    choices=list(COMPILE_MODES),
                    help="torch.compile mode [default]; dev/bench/bench_gpu.sh asks for max-autotune "
                         "and falls back along %s" % " > ".join(COMPILE_MODES))
    ap.add_argument("--fullgraph", action="store_true",
                    help="torch.compile(fullgraph=True): fail instead of falling back on a graph break")
    ap.add_argument("--no-fsdp", action="store_true",
                    help="no FSDP2: fp32 parameters under bf16 autocast on one device")
    ap.add_argument("--reduce-dtype", default="fp32", choices=["fp32", "bf16"],
                    help="FSDP2 gradient reduce-scatter dtype [fp32]")
    ap.add_argument("--no-reshard-after-forward", action="store_true",
                    help="FSDP2 blocks keep their gathered parameters until backward (ZeRO-2 style)")
    ap.add_argument("--sdpa", default="auto", choices=["auto", "flash", "cudnn", "efficient", "math"],
                    help="scaled_dot_product_attention backend [auto: PyTorch's choice]")
    ap.add_argument("--optimizer-impl", default="fused", choices=["fused", "foreach", "for-loop"],
                    help="AdamW implementation [fused; foreach if fused fails]")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="[cuda]")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="tiny model on the CPU: --device cpu --no-fsdp --no-compile, fp32, "
                         "2 layers of 64 channels, B=2 T=32, 1 warmup + 3 steps unless given")
    a = ap.parse_args(argv)

    L, C, NH = PRESETS[a.model]
    custom = any(v is not None for v in (a.layers, a.channels, a.heads))
    if a.cpu_smoke:
        a.device, a.no_fsdp, a.no_compile = "cpu", True, True
        if not custom:
            L, C, NH = 2, 64, 4
            custom = True
        if a.max_seq == 1024:
            a.max_seq = 64
        defaults = dict(batch_size=2, seq_len=32, steps=3, warmup=1)
    else:
        defaults = dict(batch_size=8, seq_len=1024, steps=20, warmup=5)
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.L = a.layers or L
    a.C = a.channels or C
    a.NH = a.heads or NH
    a.model_name = a.model if not custom else f"L{a.L}C{a.C}H{a.NH}"
    for k in ("L", "C", "NH", "batch_size", "seq_len", "steps", "max_seq"):
        if getattr(a, k) <= 0:
            ap.error(f"{k} must be positive")
    if a.warmup < 0:
        ap.error("--warmup must be >= 0")
    if a.C % a.NH:
        ap.error(f"channels {a.C} not divisible by heads {a.NH}")
    if a.seq_len > a.max_seq:
        ap.error(f"-t {a.seq_len} exceeds --max-seq {a.max_seq}")
    if a.peak_tflops <= 0:
        ap.error("--peak-tflops must be positive")
    return a


args = parse_args() if __name__ == "__main__" else None

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

TORCH_MAJOR = int(torch.__version__.split(".")[0])
HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")
RANK = int(os.environ.get("RANK", "0"))


def log(*a):
    if RANK == 0:
        print(*a, file=sys.stderr, flush=True)


def die(msg):
    print(f"torch_gpt2_fsdp2: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


# ------------------------------------------------------------------------------------------
# the model


def causal_attention(q, k, v):
    """q, k, v: [B, NH, T, hs] -> [B, NH, T, hs], causal, scale 1/sqrt(hs)."""
    if HAVE_SDPA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T, hs = q.size(-2), q.size(-1)  # PyTorch 1.x: the same function, materialised
    att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu_(1)
    att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
    return torch.matmul(att, v)


class Attention(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.C, self.NH = C, NH
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.NH
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.NH, hs).transpose(1, 2)
        k = k.view(B, T, self.NH, hs).transpose(1, 2)
        v = v.view(B, T, self.NH, hs).transpose(1, 2)
        y = causal_attention(q, k, v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = Attention(C, NH)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


def head_loss(x, ln_w, ln_b, wte, targets, V):
    """ln_f, the tied LM head over all Vp columns, mean cross-entropy over the first V in fp32."""
    x = F.layer_norm(x, (x.size(-1),), ln_w, ln_b, 1e-5)
    logits = F.linear(x, wte)
    logits = logits[..., :V].reshape(-1, V)
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    return F.cross_entropy(logits, targets.reshape(-1))


class GPT2(nn.Module):
    def __init__(self, L, C, NH, max_seq, V=GPT2_VOCAB):
        super().__init__()
        self.L, self.C, self.NH, self.V = L, C, NH, V
        self.Vp = (V + 127) // 128 * 128
        self.wte = nn.Embedding(self.Vp, C)
        self.wpe = nn.Embedding(max_seq, C)
        self.h = nn.ModuleList([Block(C, NH) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        self.head = head_loss  # replaced by its compiled version

    @torch.no_grad()
    def init_weights(self, seed):
        """GPT-2 init (llm.c's train_gpt2.py): N(0, 0.02) for matrices and embeddings,
        0.02/sqrt(2L) for the residual projections, zero biases, unit LayerNorm weights, zero
        padded vocabulary rows."""
        g = torch.Generator(device=self.wte.weight.device)
        g.manual_seed(seed)
        std_res = 0.02 / math.sqrt(2 * self.L)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                p.normal_(0.0, std_res, generator=g)
            elif p.dim() == 2:
                p.normal_(0.0, 0.02, generator=g)
            elif "ln" in name and name.endswith(".weight"):
                p.fill_(1.0)
            else:
                p.zero_()
        self.wte.weight[self.V:].zero_()
        return self

    def forward(self, idx, targets):
        T = idx.size(1)
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.h:
            x = blk(x)
        return self.head(x, self.ln_f.weight, self.ln_f.bias, self.wte.weight, targets, self.V)


def num_parameters(model):
    """Unique parameters (the tied wte once), global sizes (DTensors report theirs)."""
    return sum(p.numel() for p in model.parameters())


def flops_per_token(nparams, L, C, T):
    """6N + 6LCT: forward and backward of every weight plus attention's two matmuls."""
    return 6.0 * nparams + 6.0 * L * C * T


# ------------------------------------------------------------------------------------------
# data


def load_shard(path):
    """An llm.c token shard's tokens as int32 numpy."""
    hdr = np.fromfile(path, dtype="<i4", count=256)
    if hdr.size < 256 or hdr[0] != SHARD_MAGIC:
        die(f"{path}: not an llm.c token shard (magic {hdr[0] if hdr.size else '?'}, "
            f"expected {SHARD_MAGIC})")
    if hdr[1] != 1:
        die(f"{path}: token shard version {hdr[1]}, expected 1")
    ntok = int(hdr[2])
    toks = np.fromfile(path, dtype="<u2", offset=1024)
    if toks.size != ntok:
        die(f"{path}: header says {ntok} tokens, the file holds {toks.size}")
    return toks.astype(np.int32)


class Batches:
    """Consecutive [B, T] windows (inputs, next-token targets) of a shard held on the device,
    each rank its own window, wrapping at the end; or random tokens."""

    def __init__(self, path, B, T, V, device, rank, world, seed):
        self.B, self.T, self.V, self.device = B, T, V, device
        self.rank, self.world = rank, world
        self.toks = None
        if path:
            toks = load_shard(path)
            if toks.size < B * T + 1:
                die(f"{path}: {toks.size} tokens, need at least {B * T + 1}")
            if toks.max() >= V:
                die(f"{path}: token {toks.max()} out of the vocabulary ({V})")
            self.toks = torch.from_numpy(toks).to(device)
            self.pos = rank * B * T
        else:
            self.g = torch.Generator(device=device)
            self.g.manual_seed(seed + 1 + rank)

    def next(self):
        B, T = self.B, self.T
        if self.toks is None:
            buf = torch.randint(0, self.V, (B * T + 1,), generator=self.g, device=self.device)
        else:
            n = self.toks.numel()
            if self.pos + B * T + 1 > n:
                self.pos = (self.rank * B * T) % (n - B * T)
            buf = self.toks[self.pos:self.pos + B * T + 1].long()
            self.pos += self.world * B * T
        return buf[:-1].view(B, T), buf[1:].view(B, T)


# ------------------------------------------------------------------------------------------
# distributed, FSDP2, compile


def fsdp2_api():
    try:  # PyTorch >= 2.6
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:
        try:  # 2.4, 2.5
            from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
        except ImportError:
            die(f"PyTorch {torch.__version__} has no FSDP2 (fully_shard needs >= 2.4); use --no-fsdp")
    return fully_shard, MixedPrecisionPolicy


def init_distributed(a):
    """Returns (rank, world, local_rank, device). A plain run is a world of 1 that needs no
    network (an in-memory store); torchrun's variables make it a real one."""
    import torch.distributed as dist
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if a.device == "cuda":
        if not torch.cuda.is_available():
            die("CUDA is not available to this PyTorch (use --device cpu or --cpu-smoke)")
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    if a.no_fsdp:
        if world > 1:
            die("--no-fsdp runs one process; launch without torchrun")
        return 0, 1, local, device
    if not dist.is_available():
        die("this PyTorch has no torch.distributed; use --no-fsdp")
    if world > 1 or "MASTER_ADDR" in os.environ:
        dist.init_process_group(backend=backend)  # env://
    else:
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    return dist.get_rank(), dist.get_world_size(), local, device


def build_model(a, device, world):
    with torch.device(device) if TORCH_MAJOR >= 2 else _nullcontext():
        model = GPT2(a.L, a.C, a.NH, a.max_seq)
    model.to(device)
    model.init_weights(a.seed)
    nparams = num_parameters(model)

    if not a.no_compile:
        if not hasattr(torch, "compile"):
            die(f"PyTorch {torch.__version__} has no torch.compile; use --no-compile")
        import torch._dynamo as dynamo
        # Every block is its own compiled module: room for one cache entry per block should
        # they not share one, so that none silently falls back to eager.
        for knob in ("cache_size_limit", "accumulated_cache_size_limit"):
            if hasattr(dynamo.config, knob):
                setattr(dynamo.config, knob, max(getattr(dynamo.config, knob), 8 * (a.L + 8)))
        ckw = dict(mode=a.compile_mode, fullgraph=a.fullgraph)
        for i in range(len(model.h)):
            model.h[i] = torch.compile(model.h[i], **ckw)
        model.head = torch.compile(head_loss, **ckw)

    if not a.no_fsdp:
        fully_shard, MixedPrecisionPolicy = fsdp2_api()
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh(device.type, (world,))
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                  reduce_dtype=torch.float32 if a.reduce_dtype == "fp32" else torch.bfloat16)
        reshard = not a.no_reshard_after_forward
        for i, blk in enumerate(model.h):
            # The last block's backward starts right after forward: keep it gathered.
            fully_shard(blk, mesh=mesh, mp_policy=mp,
                        reshard_after_forward=reshard and i < len(model.h) - 1)
        fully_shard(model, mesh=mesh, mp_policy=mp)  # the root: wte, wpe, ln_f
    return model, nparams


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def build_optimizer(a, model, impl):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": a.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    kw = dict(lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    if impl == "fused":
        kw["fused"] = True
    elif impl == "foreach":
        kw["foreach"] = True
    else:
        kw["foreach"] = False
    return torch.optim.AdamW(groups, **kw)


def clip_grads(params, max_norm):
    """Global gradient-norm clipping; with FSDP2's DTensor gradients the norm is made whole
    across ranks first (as torchtitan does)."""
    nn_utils = torch.nn.utils
    if hasattr(nn_utils, "get_total_norm") and hasattr(nn_utils, "clip_grads_with_norm_"):
        grads = [p.grad for p in params if p.grad is not None]
        total = nn_utils.get_total_norm(grads, 2.0, False, True)
        if hasattr(total, "full_tensor"):
            total = total.full_tensor()
        nn_utils.clip_grads_with_norm_(params, max_norm, total, True)
        return total
    return nn_utils.clip_grad_norm_(params, max_norm)


def sdpa_context(name, device):
    if name == "auto" or not HAVE_SDPA:
        return _nullcontext()
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        die(f"--sdpa {name} needs torch.nn.attention (PyTorch >= 2.3)")
    backend = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION",
               "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}[name]
    if not hasattr(SDPBackend, backend):
        die(f"this PyTorch has no SDPA backend {backend}")
    return sdpa_kernel(getattr(SDPBackend, backend))


def device_used_bytes(device):
    if device.type != "cuda":
        return 0
    free, total = torch.cuda.mem_get_info(device)
    return total - free


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ------------------------------------------------------------------------------------------


def main(a):
    torch.manual_seed(a.seed)
    rank, world, local, device = init_distributed(a)
    on_cuda = device.type == "cuda"
    baseline_used = 0
    if on_cuda:
        torch.empty(1, device=device)  # the context exists from here on
        baseline_used = device_used_bytes(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    fsdp = not a.no_fsdp
    autocast_bf16 = a.no_fsdp and not a.cpu_smoke
    framework = ("pytorch-fsdp2" if fsdp else "pytorch-autocast" if autocast_bf16 else "pytorch-fp32")
    B, T = a.batch_size, a.seq_len

    t_build = time.perf_counter()
    model, nparams = build_model(a, device, world)
    model.train()
    impl = a.optimizer_impl
    if impl == "fused" and TORCH_MAJOR < 2:
        impl = "foreach"
    try:
        opt = build_optimizer(a, model, impl)
    except (RuntimeError, TypeError, ValueError) as e:
        if impl != "fused":
            raise
        log(f"fused AdamW refused ({type(e).__name__}: {str(e).splitlines()[0][:200]}); using foreach")
        impl = "foreach"
        opt = build_optimizer(a, model, impl)
    params = [p for p in model.parameters()]
    data = Batches(a.data, B, T, GPT2_VOCAB, device, rank, world, a.seed)
    sync(device)
    build_s = time.perf_counter() - t_build

    fpt = flops_per_token(nparams, a.L, a.C, T)
    dev_name = torch.cuda.get_device_name(device) if on_cuda else "cpu"
    log(f"torch {torch.__version__} on {dev_name} | {framework} | world {world} | "
        f"compile {'off' if a.no_compile else a.compile_mode} | sdpa {a.sdpa if HAVE_SDPA else 'none (manual)'} | "
        f"AdamW {impl} | reduce {a.reduce_dtype if fsdp else '-'}")
    log(f"model {a.model_name}: L={a.L} C={a.C} NH={a.NH} Vp={model.Vp} "
        f"maxT={a.max_seq}: {nparams} parameters; B={B} T={T} per rank; "
        f"{a.warmup} warmup + {a.steps} timed steps; data {a.data or 'random tokens'}; built in {build_s:.1f} s")

    def opt_step():
        nonlocal opt, impl
        try:
            opt.step()
        except (RuntimeError, TypeError, NotImplementedError) as e:
            if impl == "foreach" or impl == "for-loop" or opt_state["steps"] > 0:
                raise
            log(f"fused AdamW failed ({type(e).__name__}: {str(e).splitlines()[0][:200]}); using foreach")
            impl = "foreach"
            opt = build_optimizer(a, model, impl)
            opt.step()
        opt_state["steps"] += 1

    opt_state = {"steps": 0}

    # CUDA graph trees (max-autotune, reduce-overhead) replay into static buffers: each step
    # is marked as a new one, and the loss is copied out before the next replay overwrites it.
    cudagraphs = (not a.no_compile and a.compile_mode in ("max-autotune", "reduce-overhead")
                  and hasattr(torch, "compiler") and hasattr(torch.compiler, "cudagraph_mark_step_begin"))

    def train_step():
        if cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()
        x, y = data.next()
        with sdpa_context(a.sdpa, device):
            if autocast_bf16:
                with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
                    loss = model(x, y)
            else:
                loss = model(x, y)
            loss.backward()
        if a.grad_clip > 0:
            clip_grads(params, a.grad_clip)
        opt_step()
        opt.zero_grad(set_to_none=True)
        return loss.detach().clone() if cudagraphs else loss.detach()

    losses = []
    t_first = time.perf_counter()
    for step in range(1, a.warmup + 1):
        t0 = time.perf_counter()
        losses.append(train_step())
        sync(device)
        log(f"warmup step {step}/{a.warmup}: loss {losses[-1].item():.4f}, "
            f"{(time.perf_counter() - t0) * 1000:.1f} ms")
    warm_s = time.perf_counter() - t_first
    if not a.no_compile:
        try:  # a graph break or a block that did not share the compiled graph shows here
            from torch._dynamo.utils import counters
            breaks = sum(counters["graph_break"].values())
            log(f"torch.compile: {counters['stats'].get('unique_graphs', '?')} unique graph(s), "
                f"{breaks} graph break(s)" + (f": {dict(counters['graph_break'])}" if breaks else ""))
        except Exception as e:  # diagnostics only
            log(f"torch.compile: no counters ({type(e).__name__})")

    if on_cuda:
        start_ev = torch.cuda.Event(enable_timing=True)
        end_ev = torch.cuda.Event(enable_timing=True)
    sync(device)
    t0 = time.perf_counter()
    if on_cuda:
        start_ev.record()
    for _ in range(a.steps):
        losses.append(train_step())
    if on_cuda:
        end_ev.record()
    sync(device)
    wall_ms = (time.perf_counter() - t0) * 1000.0
    dev_ms = start_ev.elapsed_time(end_ev) if on_cuda else wall_ms
    step_ms = wall_ms / a.steps
    loss_vals = [float(v) for v in torch.stack(losses).float().cpu()]
    for i, lv in enumerate(loss_vals[a.warmup:]):
        log(f"step {a.warmup + i + 1}: loss {lv:.4f}")

    tokens = B * T * world
    tok_s = tokens / (step_ms / 1000.0)
    mfu = tok_s * fpt / (a.peak_tflops * 1e12 * world)
    peak_alloc = torch.cuda.max_memory_allocated(device) / 2**30 if on_cuda else 0.0
    peak_res = torch.cuda.max_memory_reserved(device) / 2**30 if on_cuda else 0.0
    used = (device_used_bytes(device) - baseline_used) / 2**30 if on_cuda else 0.0
    finite = all(math.isfinite(v) for v in loss_vals)
    log(f"timed {a.steps} steps: {wall_ms:.1f} ms wall ({dev_ms:.1f} ms between device events), "
        f"{step_ms:.2f} ms/step, {tok_s:.0f} tok/s, MFU {100 * mfu:.1f}% of {a.peak_tflops:g} TFLOP/s x {world}; "
        f"warmup (compilation included) {warm_s:.1f} s; peak allocated {peak_alloc:.2f} GiB, "
        f"reserved {peak_res:.2f} GiB, device used {used:.2f} GiB")
    if rank == 0:
        fields = [
            ("framework", framework), ("model", a.model_name), ("B", B), ("T", T),
            ("tok_per_s", f"{tok_s:.1f}"), ("mfu", f"{mfu:.4g}"), ("peak_mem_gib", f"{peak_alloc:.3f}"),
            ("step_ms", f"{step_ms:.3f}"), ("peak_reserved_gib", f"{peak_res:.3f}"),
            ("gpu_used_gib", f"{used:.3f}"), ("world", world), ("params", nparams),
            ("flops_per_token", f"{fpt:.6g}"), ("peak_tflops", f"{a.peak_tflops:g}"),
            ("compile", "off" if a.no_compile else a.compile_mode), ("sdpa", a.sdpa if HAVE_SDPA else "manual"),
            ("adamw", impl), ("reduce", a.reduce_dtype if fsdp else "-"), ("steps", a.steps),
            ("warmup", a.warmup), ("warmup_s", f"{warm_s:.1f}"), ("loss_first", f"{loss_vals[0]:.4f}"),
            ("loss_last", f"{loss_vals[-1]:.4f}"), ("device", dev_name.replace(" ", "_")),
            ("torch", torch.__version__),
        ]
        print("RESULT " + " ".join(f"{k}={v}" for k, v in fields), flush=True)
    if fsdp:
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()
    if not finite:
        die("non-finite loss")


if __name__ == "__main__":
    main(args)
