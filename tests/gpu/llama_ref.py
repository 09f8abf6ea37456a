"""Reference for the Llama decode example: makes its weights and inputs, and
checks the engine's outputs against Hugging Face transformers' Llama layers.

The engine (examples/llama) and this script share only a directory of raw
little-endian tensors (bf16 unless said, PyTorch layouts, whole unsplit
weights) described in docs/llama_reference.md. Subcommands:

  gen   DIR --config 8b|70b|tiny --layers L --batch B --ctx C --steps S
        [--vocab V] [--seed N] [--max-ctx M] [--device D]
        random weights, initial K/V caches and per-step inputs.
  check DIR OUTDIR --tp N [--attn sdpa|eager] [--device D]
        runs the same weights through transformers' LlamaDecoderLayer,
        LlamaRotaryEmbedding and a DynamicCache pre-filled with the given K/V,
        step after step (so the engine's KV appends are checked by the later
        steps), then LlamaRMSNorm + the LM head, and compares the engine's
        y.s{s} / logits.s{s}. Prints a table, ends with "N passed, N failed",
        exits non-zero on any failure.
  fake  DIR OUTDIR [--rounding bf16|fp32] [--tp N] [--bug NAME]
        this file's own implementation of the step (plain torch, no
        transformers), written as if it were the engine: a stand-in to test
        `check` without the engine (--bug injects an engine mistake that
        `check` must catch), and a second reading of the file format.

Why the tolerance looks the way it does (see bound()):
the exact answer is not known, so the reference is computed twice. "ref" is
fp32 math on the very bf16 weights, caches and inputs (TF32 off; eager
attention, softmax in fp32): its own error is ~1e-6 relative, far below
anything bf16 can resolve. "dev" is the same transformers code run in bf16 as
users run it (sdpa): its distance from "ref" is what ordinary bf16 rounding
costs on this very data (activations rounded to 8 significant bits between
ops; u = 2^-8). The engine also keeps bf16 activations with fp32
accumulation, but rounds at other points (fused epilogues keep fp32 longer,
a TP all-reduce adds a rounding of the partial sums), so its error has the
same size but not the same value. Each error is a sum of many independent
roundings, so one path can be larger than the other by a modest factor
(measured on CPU with `fake --rounding bf16`, TP 1 and 2, tiny and 8b-sized
layers, ctx 1 to 1000: engine-like / transformers-bf16 between 0.7x and 1.0x
for the norm, 0.45x to 1.65x for the row maximum, a tail statistic; the
plain PyTorch step of bench/torch_llama.py on the same files: up to 1.2x
and 1.8x). The bound allows K_NORM = 2 and K_ROW = 3 times the bf16 deviation, plus an
absolute floor of what rounding the output once to bf16 costs (so a run
whose "dev" happens to be small is not held to an impossible bound).
Errors a real bug makes are far larger: the self-checks at the end require
that one column off by a quarter of the row's RMS, and RoPE at position + 1,
both FAIL; otherwise the check itself is broken and counts as failed.
"""
import argparse
import inspect
import math
import os
import sys

import numpy as np
import torch

CONFIGS = {
    "8b": dict(hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336),
    "70b": dict(hidden=8192, heads=64, kv_heads=8, head_dim=128, ffn=28672),
    # For testing this script on a CPU; the engine is built for head_dim 128.
    "tiny": dict(hidden=256, heads=4, kv_heads=2, head_dim=64, ffn=512),
}
EPS = 1e-5
THETA = 500000.0
CONFIG_KEYS = ["hidden", "heads", "kv_heads", "head_dim", "ffn", "layers", "vocab", "eps", "theta",
               "batch", "ctx", "steps", "max_ctx", "seed"]

# Weight scales: normal(0, 1) * gain / sqrt(fan_in), so every matmul maps
# RMS ~1 to RMS ~gain, as in a trained model. Q and K get gain 1.5 and the
# cached keys std 1.5, so attention scores have std ~2.25: softmax over the
# cache is peaked (its largest key holds ~5% at ctx 4096) rather than a flat
# average that would hide which keys were read. WO gets gain 2 so the attention
# branch adds O(1) to the residual even when it averages several values;
# a wrong attention result therefore shows in y. Norm weights are 1 + 0.1 N(0,1):
# a kernel that ignored them would be off by ~10%.
QK_GAIN = 1.5
WO_GAIN = 2.0
NORM_SPREAD = 0.1
# Decoding attends strongly to recent tokens; random data would not (the
# token just appended would be one key among thousands, and an engine that
# left it out, or lost earlier steps' appends, would still pass). So each
# query head's map is SELF_BETA times its KV head's key map plus noise: a
# token's query then scores its own key at ~SELF_BETA * sqrt(head_dim) *
# QK_GAIN^2 ~ 10 on average (head_dim 128), against log(ctx) + 2.5 for the
# log-sum of the random cached keys. Measured (8b, ctx 1000 and 4096): the
# new token holds ~45% of a head's weight on average (1% to 99% across
# heads), the cache the rest. The steps' inputs share a per-sequence
# component (X_SHARED of the variance), so the tokens appended at earlier
# steps score high as well (5-13% together), and later steps read them
# back from the cache.
SELF_BETA = 0.39
X_SHARED = 0.75

# Tolerances (see the module comment): engine vs fp32 reference must be
# within K x (bf16 transformers vs fp32 reference) + floor.
K_NORM = 2.0
K_ROW = 3.0
FLOOR_NORM = 2.0 ** -9   # ~ relative norm error of rounding O(1) values to bf16 once, with margin
FLOOR_ROW = 2.0 ** -6    # ~ the row maximum of that rounding (|x|max/rms ~ 4 times 2^-8)
CORRUPT_FRACTION = 0.25  # self-check: one column off by this fraction of its row's RMS

# Mistakes `fake --bug` can make: RoPE on interleaved pairs, query head j
# reading KV head j % kv_heads, attention that leaves out the token just
# appended, a cache that does not keep the appended entries for later steps,
# attention that loses the first half of the cached context (a split-KV
# combine that drops a split), the MLP norm without its weight.
BUGS = ["none", "rope-interleaved", "gqa-map", "skip-self", "no-append", "lost-split", "norm-weight"]


# ----------------------------------------------------------------- files

def write_tensor(path, t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        t.view(torch.int16).numpy().tofile(path)
    elif t.dtype == torch.float32:
        t.numpy().tofile(path)
    else:
        raise ValueError("write_tensor: unsupported dtype %s for %s" % (t.dtype, path))


def read_tensor(path, shape, dtype):
    """Reads a raw tensor; a missing or wrongly sized file raises ValueError naming it."""
    n = math.prod(shape)
    npdt = np.int16 if dtype == torch.bfloat16 else np.float32
    if not os.path.exists(path):
        raise ValueError("%s: missing" % path)
    size = os.path.getsize(path)
    if size != n * np.dtype(npdt).itemsize:
        raise ValueError("%s: %d bytes, expected %d (shape %s, %s)" %
                         (path, size, n * np.dtype(npdt).itemsize, list(shape), dtype))
    a = torch.from_numpy(np.fromfile(path, dtype=npdt))
    if dtype == torch.bfloat16:
        a = a.view(torch.bfloat16)
    return a.reshape(shape)


def read_config(d):
    path = os.path.join(d, "config.txt")
    c = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                c[parts[0]] = float(parts[1]) if parts[0] in ("eps", "theta") else int(parts[1])
    missing = [k for k in CONFIG_KEYS if k not in c]
    if missing:
        raise ValueError("%s: missing keys %s" % (path, missing))
    return c


def layer_shapes(c):
    H, hd = c["hidden"], c["head_dim"]
    return {
        "attn_norm": [H],
        "wq": [c["heads"] * hd, H],
        "wk": [c["kv_heads"] * hd, H],
        "wv": [c["kv_heads"] * hd, H],
        "wo": [H, c["heads"] * hd],
        "mlp_norm": [H],
        "w_gate": [c["ffn"], H],
        "w_up": [c["ffn"], H],
        "w_down": [H, c["ffn"]],
    }


def load_layer(d, c, i, device):
    return {k: read_tensor(os.path.join(d, "l%d.%s" % (i, k)), s, torch.bfloat16).to(device)
            for k, s in layer_shapes(c).items()}


def load_cache(d, c, i, device):
    s = [c["batch"], c["kv_heads"], c["ctx"], c["head_dim"]]
    return (read_tensor(os.path.join(d, "l%d.k_cache" % i), s, torch.bfloat16).to(device),
            read_tensor(os.path.join(d, "l%d.v_cache" % i), s, torch.bfloat16).to(device))


def load_inputs(d, c, device):
    return [read_tensor(os.path.join(d, "x.s%d" % s), [c["batch"], c["hidden"]], torch.bfloat16).to(device)
            for s in range(c["steps"])]


def default_device():
    return "cuda" if torch.cuda.is_available() else "cpu"


# ----------------------------------------------------------------- gen

def cmd_gen(a):
    c = dict(CONFIGS[a.config])
    c.update(layers=a.layers, vocab=a.vocab, eps=EPS, theta=THETA, batch=a.batch, ctx=a.ctx, steps=a.steps,
             max_ctx=a.max_ctx or a.ctx + a.steps, seed=a.seed)
    for k in ("layers", "batch", "ctx", "steps"):
        if c[k] < 1:
            sys.exit("gen: --%s must be >= 1 (got %d)" % (k, c[k]))
    if c["max_ctx"] < c["ctx"] + c["steps"]:
        sys.exit("gen: --max-ctx %d < ctx + steps = %d" % (c["max_ctx"], c["ctx"] + c["steps"]))
    os.makedirs(a.dir, exist_ok=True)
    dev = a.device or default_device()
    g = torch.Generator(device=dev).manual_seed(a.seed)

    def normal32(shape, std):
        return torch.randn(shape, generator=g, device=dev, dtype=torch.float32) * std

    def normal(shape, std):
        return normal32(shape, std).to(torch.bfloat16)

    def norm_weight(n):
        return (1.0 + NORM_SPREAD * torch.randn([n], generator=g, device=dev)).to(torch.bfloat16)

    H = c["hidden"]
    for i in range(c["layers"]):
        sh = layer_shapes(c)
        w = {
            "attn_norm": norm_weight(H),
            "wk": normal32(sh["wk"], QK_GAIN / math.sqrt(H)),
            "wv": normal(sh["wv"], 1.0 / math.sqrt(H)),
            "wq": normal32(sh["wq"], QK_GAIN * math.sqrt(1.0 - SELF_BETA ** 2) / math.sqrt(H)),
            "wo": normal(sh["wo"], WO_GAIN / math.sqrt(sh["wo"][1])),
            "mlp_norm": norm_weight(H),
            "w_gate": normal(sh["w_gate"], 1.0 / math.sqrt(H)),
            "w_up": normal(sh["w_up"], 1.0 / math.sqrt(H)),
            "w_down": normal(sh["w_down"], 1.0 / math.sqrt(c["ffn"])),
        }
        # Query head j = its KV head's key map (head j // group) times
        # SELF_BETA plus independent noise, so q and k stay std QK_GAIN.
        grp = c["heads"] // c["kv_heads"]
        wk_per_q = w["wk"].view(c["kv_heads"], 1, c["head_dim"], H).expand(-1, grp, -1, -1).reshape(sh["wq"])
        w["wq"] += SELF_BETA * wk_per_q
        for k, t in w.items():
            write_tensor(os.path.join(a.dir, "l%d.%s" % (i, k)), t.to(torch.bfloat16))
        del w
        cs = [c["batch"], c["kv_heads"], c["ctx"], c["head_dim"]]
        # Cached keys stand for keys already rotated at positions 0..ctx-1;
        # random data has no position, so any rotation of it is as random.
        write_tensor(os.path.join(a.dir, "l%d.k_cache" % i), normal(cs, QK_GAIN))
        write_tensor(os.path.join(a.dir, "l%d.v_cache" % i), normal(cs, 1.0))
    write_tensor(os.path.join(a.dir, "final_norm"), norm_weight(H))
    if c["vocab"] > 0:
        write_tensor(os.path.join(a.dir, "lm_head"), normal([c["vocab"], H], 1.0 / math.sqrt(H)))
    z = normal32([c["batch"], H], math.sqrt(X_SHARED))
    for s in range(c["steps"]):
        x = z + normal32([c["batch"], H], math.sqrt(1.0 - X_SHARED))
        write_tensor(os.path.join(a.dir, "x.s%d" % s), x.to(torch.bfloat16))
    with open(os.path.join(a.dir, "config.txt"), "w") as f:
        for k in CONFIG_KEYS:
            f.write("%s %s\n" % (k, repr(c[k]) if isinstance(c[k], float) else c[k]))
    print("gen: %s config %s layers %d batch %d ctx %d steps %d vocab %d seed %d (%s)" %
          (a.dir, a.config, c["layers"], c["batch"], c["ctx"], c["steps"], c["vocab"], a.seed, dev))


# ----------------------------------------------------------------- transformers reference

def hf_config(c, attn):
    """transformers 5.x config (rope_parameters; HFStack checks that theta landed in inv_freq)."""
    from transformers import LlamaConfig
    cfg = LlamaConfig(
        hidden_size=c["hidden"], intermediate_size=c["ffn"], num_hidden_layers=c["layers"],
        num_attention_heads=c["heads"], num_key_value_heads=c["kv_heads"], head_dim=c["head_dim"],
        rms_norm_eps=c["eps"], max_position_embeddings=max(c["max_ctx"], c["ctx"] + c["steps"]),
        vocab_size=max(c["vocab"], 1), hidden_act="silu", attention_bias=False, mlp_bias=False,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        rope_parameters={"rope_type": "default", "rope_theta": c["theta"]}, attn_implementation=attn)
    cfg._attn_implementation = attn
    return cfg


def inv_freq_exact(c):
    hd = c["head_dim"]
    return 1.0 / (c["theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))


class HFStack:
    """transformers' modules for one decoder layer at a time, in one dtype.

    The reference walks layer by layer (all steps of layer i, then layer i+1):
    a layer's step s needs only layer i-1's step s output and its own cache,
    so this is the same computation as step-by-step decoding while holding one
    layer's weights at a time (a 70B-like layer is 1.7 GB in bf16). Each layer
    therefore gets its own DynamicCache, used as layer 0 of that cache.
    """

    def __init__(self, c, dtype, attn, device):
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
        self.c, self.dtype, self.device = c, dtype, device
        self.cfg = hf_config(c, attn)
        self.layer_cls = LlamaDecoderLayer
        self.rotary = LlamaRotaryEmbedding(config=self.cfg).to(device)
        got = self.rotary.inv_freq.double().cpu()
        want = inv_freq_exact(c)
        if not torch.allclose(got, want, rtol=1e-6, atol=0):
            raise RuntimeError("transformers' rotary inv_freq does not match theta %g" % c["theta"])
        # 5.17 names the cache argument past_key_values, 5.24 cache (the old name deprecated).
        params = inspect.signature(LlamaDecoderLayer.forward).parameters
        self.cache_kw = "cache" if "cache" in params else "past_key_values"

    def layer(self, w):
        with torch.device("meta"):
            m = self.layer_cls(self.cfg, layer_idx=0)
        names = {
            "input_layernorm.weight": "attn_norm", "post_attention_layernorm.weight": "mlp_norm",
            "self_attn.q_proj.weight": "wq", "self_attn.k_proj.weight": "wk", "self_attn.v_proj.weight": "wv",
            "self_attn.o_proj.weight": "wo", "mlp.gate_proj.weight": "w_gate", "mlp.up_proj.weight": "w_up",
            "mlp.down_proj.weight": "w_down",
        }
        m.load_state_dict({k: w[v].to(self.dtype) for k, v in names.items()}, strict=True, assign=True)
        return m.eval()

    def cache(self, k, v):
        from transformers import DynamicCache
        cache = DynamicCache()
        cache.update(k.to(self.dtype), v.to(self.dtype), 0)
        return cache

    def step(self, m, cache, x, pos):
        """One decode step of one layer: x [B, hidden] at position pos."""
        B = x.shape[0]
        hs = x.to(self.dtype).unsqueeze(1)                        # [B, 1, hidden]
        pid = torch.full((B, 1), pos, dtype=torch.long, device=self.device)
        cos, sin = self.rotary(hs, pid)
        out = m(hs, attention_mask=None, position_ids=pid, use_cache=True, position_embeddings=(cos, sin),
                **{self.cache_kw: cache})
        if isinstance(out, tuple):
            out = out[0]
        return out.squeeze(1)

    def head(self, w_norm, lm_head, y):
        from transformers.models.llama.modeling_llama import LlamaRMSNorm
        with torch.device("meta"):
            n = LlamaRMSNorm(self.c["hidden"], eps=self.c["eps"])
        n.load_state_dict({"weight": w_norm.to(self.dtype)}, strict=True, assign=True)
        h = n(y.to(self.dtype))
        return (h @ lm_head.to(self.dtype).t()).float()


def run_hf(d, c, stack, pos_shift=0):
    """All steps through the transformers layers: returns ([y per step], [logits per step or None])."""
    xs = load_inputs(d, c, stack.device)
    for i in range(c["layers"]):
        w = load_layer(d, c, i, stack.device)
        m = stack.layer(w)
        del w
        cache = stack.cache(*load_cache(d, c, i, stack.device))
        xs = [stack.step(m, cache, xs[s], c["ctx"] + s + pos_shift) for s in range(c["steps"])]
        del m, cache
    logits = [None] * c["steps"]
    if c["vocab"] > 0:
        fn = read_tensor(os.path.join(d, "final_norm"), [c["hidden"]], torch.bfloat16).to(stack.device)
        lm = read_tensor(os.path.join(d, "lm_head"), [c["vocab"], c["hidden"]], torch.bfloat16).to(stack.device)
        logits = [stack.head(fn, lm, y) for y in xs]
    return [y.float() for y in xs], logits


# ----------------------------------------------------------------- own implementation (fake engine)

def own_forward(d, c, device, rounding, tp=1, bug="none"):
    """The decode step written from the definitions, without transformers.

    rounding "bf16" rounds where a fused bf16 engine would (normed inputs,
    projections, rotated q/k, cache entries, attention output, residual after
    each block, the SwiGLU product), accumulating in fp32 between; "fp32"
    rounds nothing after reading the bf16 files. tp > 1 splits the
    row-parallel projections (O and down) as a TP engine does. bug injects
    one of BUGS, mistakes an engine could make, to show that `check`
    catches them.
    """
    f32 = torch.float32
    r = (lambda t: t.to(torch.bfloat16).to(f32)) if rounding == "bf16" else (lambda t: t)
    H, Hq, Hk, hd, eps = c["hidden"], c["heads"], c["kv_heads"], c["head_dim"], c["eps"]
    inv = inv_freq_exact(c)

    def rms(x, wt):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * wt

    def row_parallel(a, wt):
        # tp shards the input dimension; each rank's partial sum is rounded
        # (an all-reduce carries bf16), then the partials are added in fp32.
        parts = [r(ai @ wi.t()) for ai, wi in zip(a.chunk(tp, -1), wt.chunk(tp, -1))]
        return sum(parts) if tp > 1 else a @ wt.t()

    def rope(t, pos):                                             # t [B, heads, hd], half-rotation layout
        ang = pos * inv
        if bug == "rope-interleaved":                             # pairs (2i, 2i+1) instead of (i, i + hd/2)
            cs = ang.cos().repeat_interleave(2).to(device, f32)
            sn = ang.sin().repeat_interleave(2).to(device, f32)
            rot = torch.stack([-t[..., 1::2], t[..., 0::2]], dim=-1).flatten(-2)
            return t * cs + rot * sn
        cs = torch.cat([ang.cos(), ang.cos()]).to(device, f32)
        sn = torch.cat([ang.sin(), ang.sin()]).to(device, f32)
        rot = torch.cat([-t[..., hd // 2:], t[..., :hd // 2]], dim=-1)
        return t * cs + rot * sn

    xs = [x.float() for x in load_inputs(d, c, device)]
    B = c["batch"]
    for i in range(c["layers"]):
        w = {k: v.float() for k, v in load_layer(d, c, i, device).items()}
        kc, vc = (t.float() for t in load_cache(d, c, i, device))
        out = []
        for s in range(c["steps"]):
            pos = c["ctx"] + s
            x = xs[s]
            h = r(rms(x, w["attn_norm"]))
            q = r(h @ w["wq"].t()).view(B, Hq, hd)
            k = r(h @ w["wk"].t()).view(B, Hk, hd)
            v = r(h @ w["wv"].t()).view(B, Hk, hd)
            q, k = r(rope(q, pos)), r(rope(k, pos))
            kn = torch.cat([kc, k.unsqueeze(2)], dim=2)           # append at position ctx + s
            vn = torch.cat([vc, v.unsqueeze(2)], dim=2)
            ka, va = (kc, vc) if bug == "skip-self" else (kn, vn)
            if bug == "lost-split":                               # a split-KV combine that drops the first half
                ka, va = ka[:, :, c["ctx"] // 2:], va[:, :, c["ctx"] // 2:]
            if bug != "no-append":
                kc, vc = kn, vn
            g = Hq // Hk                                          # GQA: query head j reads KV head j // g
            if bug == "gqa-map":                                  # ... or, wrongly, KV head j % Hk
                qg = q.view(B, g, Hk, hd).transpose(1, 2)
                o = (torch.softmax((qg @ ka.transpose(-1, -2)) / math.sqrt(hd), dim=-1) @ va).transpose(1, 2)
            else:
                qg = q.view(B, Hk, g, hd)
                o = torch.softmax((qg @ ka.transpose(-1, -2)) / math.sqrt(hd), dim=-1) @ va
            o = r(o.reshape(B, Hq * hd))
            x1 = r(x + row_parallel(o, w["wo"]))
            h2 = r(rms(x1, w["mlp_norm"] if bug != "norm-weight" else 1.0))
            gu = r(torch.nn.functional.silu(h2 @ w["w_gate"].t()) * (h2 @ w["w_up"].t()))
            out.append(r(x1 + row_parallel(gu, w["w_down"])))
        xs = out
    logits = [None] * c["steps"]
    if c["vocab"] > 0:
        fn = read_tensor(os.path.join(d, "final_norm"), [H], torch.bfloat16).to(device).float()
        lm = read_tensor(os.path.join(d, "lm_head"), [c["vocab"], H], torch.bfloat16).to(device).float()
        logits = [r(rms(y, fn)) @ lm.t() for y in xs]
    return xs, logits


def cmd_fake(a):
    c = read_config(a.dir)
    dev = a.device or default_device()
    set_precise()
    with torch.inference_mode():
        ys, logits = own_forward(a.dir, c, dev, a.rounding, a.tp, a.bug)
    os.makedirs(a.outdir, exist_ok=True)
    for s in range(c["steps"]):
        write_tensor(os.path.join(a.outdir, "y.s%d" % s), ys[s].to(torch.bfloat16))
        if logits[s] is not None:
            write_tensor(os.path.join(a.outdir, "logits.s%d" % s), logits[s].float())
    print("fake: wrote %d steps to %s (rounding %s, tp %d, bug %s)" % (c["steps"], a.outdir, a.rounding, a.tp, a.bug))


# ----------------------------------------------------------------- comparison

def metrics(out, ref):
    """max abs error, max over rows of (row's max abs error / row's RMS), relative Frobenius norm."""
    out, ref = out.double(), ref.double()
    e = (out - ref).abs()
    row_rms = ref.pow(2).mean(-1).sqrt().clamp_min(1e-30)
    return dict(max_abs=e.max().item(),
                row=(e.max(-1).values / row_rms).max().item(),
                norm=(e.norm() / ref.norm().clamp_min(1e-30)).item(),
                finite=bool(torch.isfinite(out).all().item()))


def bound(dev):
    return dict(row=K_ROW * dev["row"] + FLOOR_ROW, norm=K_NORM * dev["norm"] + FLOOR_NORM)


def verdict(m, b):
    """Within the bound: finite, and both the row maximum and the norm inside."""
    return m["finite"] and m["row"] <= b["row"] and m["norm"] <= b["norm"]


class Table:
    def __init__(self):
        self.passed = self.failed = 0
        print("%-30s %10s %9s %9s | %9s %9s | %9s %9s | %s" %
              ("test", "max_abs", "row_rel", "rel_norm", "bf16_row", "bf16_norm", "tol_row", "tol_norm", "result"))

    def row(self, name, m, b, dev=None, expect_fail=False, note=""):
        """One line; a self-check (expect_fail) passes when the bound rejects its output."""
        if m is None:
            ok, res = False, "FAIL  " + note
        else:
            within = verdict(m, b)
            ok = within != expect_fail
            if expect_fail:
                res = "PASS (rejected, as it must be)" if ok else "FAIL (accepted a wrong output: the check is blind)"
            else:
                res = ("PASS" if ok else "FAIL") + ("" if m["finite"] else "  non-finite values")
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        if m is None:
            print("%-30s %s" % (name, res))
            return
        dv = ("%9.2e %9.2e" % (dev["row"], dev["norm"])) if dev else "%9s %9s" % ("-", "-")
        print("%-30s %10.3e %9.2e %9.2e | %s | %9.2e %9.2e | %s" %
              (name, m["max_abs"], m["row"], m["norm"], dv, b["row"], b["norm"], res))


def set_precise():
    # The fp32 reference must be fp32: no TF32 in matmuls or convolutions.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def cmd_check(a):
    c = read_config(a.dir)
    dev = a.device or default_device()
    set_precise()
    print("check: %s vs engine output %s (TP=%d), hidden %d heads %d/%d ffn %d layers %d batch %d ctx %d steps %d "
          "vocab %d, device %s, transformers attention %s (bf16) / eager (fp32)" %
          (a.dir, a.outdir, a.tp, c["hidden"], c["heads"], c["kv_heads"], c["ffn"], c["layers"], c["batch"],
           c["ctx"], c["steps"], c["vocab"], dev, a.attn))
    with torch.inference_mode():
        ref = run_hf(a.dir, c, HFStack(c, torch.float32, "eager", dev))
        b16 = run_hf(a.dir, c, HFStack(c, torch.bfloat16, a.attn, dev))
        shifted = run_hf(a.dir, c, HFStack(c, torch.float32, "eager", dev), pos_shift=1)
        own = own_forward(a.dir, c, dev, "fp32")
    t = Table()
    names = [("y", 0, torch.bfloat16, [c["batch"], c["hidden"]])]
    if c["vocab"] > 0:
        names.append(("logits", 1, torch.float32, [c["batch"], c["vocab"]]))
    for s in range(c["steps"]):
        for name, idx, dt, shape in names:
            r = ref[idx][s]
            dev_m = metrics(b16[idx][s], r)
            label = "%s.s%d" % (name, s)
            try:
                out = read_tensor(os.path.join(a.outdir, label), shape, dt).to(dev).float()
            except ValueError as e:
                t.row("engine " + label, None, None, note=str(e))
                continue
            t.row("engine " + label, metrics(out, r), bound(dev_m), dev_m)
    # Self-checks. The reference itself: this file's own implementation
    # (plain torch from the definitions) must agree with transformers in fp32
    # to fp32 accuracy (RoPE angles are fp32 in transformers, fp64 here: ~1e-5
    # at position 1000), far inside bf16's 2^-8; a wiring error (theta, GQA
    # head map, norm placement, cache layout) would be O(1).
    own_bound = dict(row=2.0 ** -8, norm=2.0 ** -10)
    for s in range(c["steps"]):
        for name, idx, _, _ in names:
            t.row("self: own fp32 %s.s%d" % (name, s), metrics(own[idx][s], ref[idx][s]), own_bound)
    # The comparison must reject known-wrong outputs: the bf16 transformers
    # output (inside the bound by construction) with one column off by a
    # quarter of the row's RMS, and RoPE applied at position + 1 (fp32, so
    # the position error is all that differs).
    r, dev_m = ref[0][0], metrics(b16[0][0], ref[0][0])
    bad = b16[0][0].clone()
    col = c["hidden"] // 3
    bad[:, col] += CORRUPT_FRACTION * r.pow(2).mean(-1).sqrt()
    t.row("self: y.s0 col %d +%.2f rms" % (col, CORRUPT_FRACTION), metrics(bad, r), bound(dev_m), dev_m,
          expect_fail=True)
    for s in range(c["steps"]):
        dev_m = metrics(b16[0][s], ref[0][s])
        t.row("self: RoPE pos+1 y.s%d" % s, metrics(shifted[0][s], ref[0][s]), bound(dev_m), dev_m,
              expect_fail=True)
    print("%d passed, %d failed" % (t.passed, t.failed))
    return 1 if t.failed else 0


# ----------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen", help="write random weights, caches and inputs")
    g.add_argument("dir")
    g.add_argument("--config", choices=sorted(CONFIGS), required=True)
    g.add_argument("--layers", type=int, default=2)
    g.add_argument("--batch", type=int, default=1)
    g.add_argument("--ctx", type=int, default=512)
    g.add_argument("--steps", type=int, default=3)
    g.add_argument("--vocab", type=int, default=0)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--max-ctx", type=int, default=0, help="cache capacity written to config.txt (default ctx+steps)")
    g.add_argument("--device", default=None, help="where the random numbers are drawn (default cuda if present)")
    k = sub.add_parser("check", help="compare engine outputs with transformers")
    k.add_argument("dir")
    k.add_argument("outdir")
    k.add_argument("--tp", type=int, required=True, help="tensor-parallel size the engine ran with (for the report)")
    k.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa", help="attention of the bf16 transformers run")
    k.add_argument("--device", default=None)
    f = sub.add_parser("fake", help="write engine-like outputs from this file's own implementation")
    f.add_argument("dir")
    f.add_argument("outdir")
    f.add_argument("--rounding", choices=["bf16", "fp32"], default="bf16")
    f.add_argument("--tp", type=int, default=1, help="split O and down projections as TP ranks would")
    f.add_argument("--bug", choices=BUGS, default="none", help="inject a mistake that check must catch")
    f.add_argument("--device", default=None)
    a = ap.parse_args()
    if a.cmd == "gen":
        cmd_gen(a)
        return 0
    if a.cmd == "fake":
        cmd_fake(a)
        return 0
    return cmd_check(a)


if __name__ == "__main__":
    sys.exit(main())
