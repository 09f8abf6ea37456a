"""Time to first token: the example engine's prefill (llama --model, its
M-row graphs) against PyTorch in one call, beside a compute floor.

One GPU (TP 1). For each --config, a Llama-3-like checkpoint written here
with save_pretrained (random weights, bf16, the real widths and --layers
layers, vocabulary --vocab; tied embeddings at 1b, as Llama-3.2-1B): the
engine reads it with --model; PyTorch runs the same weights. Each form does
the whole prefill of one prompt: embedding, the layers (K and V written to a
cache), the final norm and the LM head on the last row, the first token:
  lean compile  the layer stack written directly in torch (lean.py's way:
                RMSNorm, one fused QKV GEMM, RoPE, SDPA causal on the flash
                backend with GQA, O, one fused gate/up GEMM, SiLU * up, down)
                under torch.compile (Inductor, --compile-shapes: static, one
                compile per prompt length, or class: one per model with the
                prompt length dynamic) captured in torch.cuda.graph: the
                strongest PyTorch form, the baseline of the targets
  lean graph    the same step captured in torch.cuda.graph, no compile
  hf eager      transformers' LlamaForCausalLM (attn_implementation "sdpa"):
                model(ids, use_cache=True, logits_to_keep=1), then argmax
  hf compile    the same under torch.compile (--hf eager,compile; slow to
                compile, off unless asked)
  ours          llama --model DIR --prompt-ids ... --max-new-tokens 1
                --iters N --prefill-chunk C for each C of --chunks: the
                engine's median device time from the first launch to the
                last node (it includes one graph launch's latency), and its
                host time (to the token on the host)
PyTorch is timed with torch_timing.timed (runs queued back to back, each
between two events, median) after --warmup runs. --passes P alternates ours
and PyTorch P times and reports the median of the passes. The lean step is
checked against transformers on the same prompt (first token, last-row
logits within bf16 noise), so it is the model, not something cheaper.

The floor: the prompt's FLOPs (per layer 2 P x weights plus causal
attention 4 P (P + 1) / 2 x head_dim x heads; the LM head on one row) at the
bf16 GEMM rate measured here (torch.mm of 8192^3, median of 10).

Usage (from the repository root, the bundle unpacked in .gpu):
  python3 bench/torch_prefill.py --config 1b,8b,14b,70b --layers 4 --prompts 512,2048 --chunks 2048 \\
      --ours ".gpu/bin/llama" --json prefill.json
  (.gpu/bin and cuBLAS on LD_LIBRARY_PATH: tests/gpu/perf_sweep.sh sets it up)
"""
import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_timing import capture, compile_limits, timed  # noqa: E402

CONFIGS = {
    "8b": dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
               intermediate_size=14336),
    "70b": dict(hidden_size=8192, num_attention_heads=64, num_key_value_heads=8, head_dim=128,
                intermediate_size=28672),
    # Llama-3.2-1B's widths: head_dim 64, embeddings tied.
    "1b": dict(hidden_size=2048, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
               intermediate_size=8192),
    # Qwen2.5-14B's widths as a Llama (no biases): a group of 5 (40 / 8).
    "14b": dict(hidden_size=5120, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
                intermediate_size=13824),
}
THETA = 500000.0
EPS = 1e-5
DEV = "cuda"  # where the models live (a test of this file's logic may set "cpu")


def flops(c, layers, vocab, P):
    H, D, F_ = c["hidden_size"], c["head_dim"], c["intermediate_size"]
    nq, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    weights = H * (nq + 2 * nkv) * D + nq * D * H + 3 * H * F_
    attn = 4 * D * nq * P * (P + 1) / 2
    return layers * (2 * P * weights + attn) + 2 * H * vocab


def gemm_rate():
    """bf16 GEMM FLOP/s this GPU reaches: torch.mm of 8192^3, median of 10."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t = timed(lambda: torch.mm(a, b), 10, 3) * 1e-6
    return 2 * 8192 ** 3 / t


def make_model(a, name, d):
    """transformers' model of config `name` on the GPU, saved to d for the engine."""
    import transformers
    cfg = transformers.LlamaConfig(num_hidden_layers=a.layers, vocab_size=a.vocab, rms_norm_eps=EPS,
                                   max_position_embeddings=8192, tie_word_embeddings=name == "1b",
                                   rope_parameters={"rope_type": "default", "rope_theta": THETA},
                                   attn_implementation="sdpa", **CONFIGS[name])
    torch.manual_seed(a.seed)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # initialised in bf16: no fp32 copy of a 70B-wide model
    try:
        with torch.device(DEV):
            m = transformers.LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    m = m.to(torch.bfloat16).eval().requires_grad_(False)
    exact_rope(m)
    m.save_pretrained(d)
    return m


def exact_rope(m):
    """Puts the fp32 RoPE table back: .to(bfloat16) casts the rotary's
    inv_freq buffer with the weights, and at bf16's 8 bits the angles are off
    by radians from position ~1000 on (transformers' logits then drift from
    every correct prefill as the prompt grows). Checked against theta, as
    tests/gpu/llama_ref.py checks its own."""
    rot = m.model.rotary_emb
    D = m.config.head_dim
    exact = 1.0 / (THETA ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    rot.inv_freq = exact.to(device=rot.inv_freq.device, dtype=torch.float32)
    if hasattr(rot, "original_inv_freq"):
        rot.original_inv_freq = rot.inv_freq
    if not torch.allclose(rot.inv_freq.double().cpu(), exact, rtol=1e-6, atol=0):
        raise RuntimeError("transformers' rotary inv_freq does not match theta %g" % THETA)


class Lean:
    """The prefill written directly in torch over the model's own tensors
    (QKV and gate/up concatenated once, as a careful user fuses them), with a
    static KV cache: __call__(ids [P]) -> (first token, last-row logits)."""

    def __init__(self, hf, max_p):
        c = hf.config
        m = hf.model
        self.H, self.D = c.hidden_size, c.head_dim
        self.nq, self.nkv = c.num_attention_heads, c.num_key_value_heads
        self.embed, self.norm, self.lm = m.embed_tokens.weight, m.norm.weight, hf.lm_head.weight
        dev = self.embed.device
        self.layers = []
        for l in m.layers:
            at, mlp = l.self_attn, l.mlp
            self.layers.append(dict(
                attn_norm=l.input_layernorm.weight, mlp_norm=l.post_attention_layernorm.weight,
                wqkv=torch.cat([at.q_proj.weight, at.k_proj.weight, at.v_proj.weight]).contiguous(),
                wo=at.o_proj.weight, wgu=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).contiguous(),
                wdown=mlp.down_proj.weight,
                k=torch.zeros(self.nkv, max_p, self.D, device=dev, dtype=torch.bfloat16),
                v=torch.zeros(self.nkv, max_p, self.D, device=dev, dtype=torch.bfloat16)))
        inv = 1.0 / (THETA ** (torch.arange(0, self.D, 2, device=dev, dtype=torch.float32) / self.D))
        ang = torch.arange(max_p, device=dev, dtype=torch.float32)[:, None] * inv[None, :]
        emb = torch.cat([ang, ang], dim=-1)
        self.cos, self.sin = emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)
        self.gqa = True  # SDPA's flash kernel takes the KV heads as they are; else K/V are expanded (probe)
        self.sdpa_note = ""

    def __call__(self, ids):
        P, H, D, nq, nkv = ids.shape[0], self.H, self.D, self.nq, self.nkv
        cos, sin = self.cos[:P], self.sin[:P]

        def rope(t):  # [heads, P, D], rotate_half layout
            t1, t2 = t[..., : D // 2], t[..., D // 2:]
            return t * cos + torch.cat([-t2, t1], dim=-1) * sin

        x = F.embedding(ids, self.embed)
        for l in self.layers:
            h = F.rms_norm(x, (H,), l["attn_norm"], EPS)
            q, k, v = (h @ l["wqkv"].t()).split([nq * D, nkv * D, nkv * D], dim=-1)
            q = rope(q.view(P, nq, D).transpose(0, 1))
            k = rope(k.view(P, nkv, D).transpose(0, 1))
            v = v.view(P, nkv, D).transpose(0, 1)
            l["k"][:, :P].copy_(k)
            l["v"][:, :P].copy_(v)
            if self.gqa:
                o = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True, enable_gqa=True)
            else:
                g = nq // nkv
                o = F.scaled_dot_product_attention(q[None], k.repeat_interleave(g, 0)[None],
                                                   v.repeat_interleave(g, 0)[None], is_causal=True)
            x = x + o[0].transpose(0, 1).reshape(P, nq * D) @ l["wo"].t()
            h = F.rms_norm(x, (H,), l["mlp_norm"], EPS)
            gate, up = (h @ l["wgu"].t()).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ l["wdown"].t()
        y = F.rms_norm(x[-1:], (H,), self.norm, EPS)
        logits = (y @ self.lm.t()).float()[0]
        return logits.argmax(), logits

    def probe(self, ids):
        """Whether the flash kernel runs GQA as is; if not, K/V are expanded."""
        try:
            with torch.no_grad(), sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                self(ids[:128])
        except RuntimeError as e:
            self.gqa = False
            return "flash without enable_gqa (%s): K/V expanded" % str(e).splitlines()[0][:120]
        return "flash with enable_gqa"


def run_ours(a, d, ids, chunk):
    """The engine's prefill of ids: (host ms, device ms, first token), from its output."""
    # through env(1), so that the command may start with VAR=value settings
    cmd = ["env"] + shlex.split(a.ours) + ["--model", d, "--prompt-ids", ",".join(map(str, ids)),
                                           "--max-new-tokens", "1", "--iters", str(a.iters_ours),
                                           "--prefill-chunk", str(chunk)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.ours_timeout)
    except subprocess.TimeoutExpired:
        sys.stderr.write("ours ran past %d s\n" % a.ours_timeout)
        return None
    m = re.search(r"prefill of (\d+) tokens in (\d+) chunk\(s\) of up to (\d+) rows.*?: ([0-9.]+) ms, device "
                  r"([0-9.]+) ms", r.stdout)
    if r.returncode or not m:
        sys.stderr.write("ours failed (rc %d):\n%s\n%s\n" % (r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
        return None
    t = re.search(r"^new ids: ?(\d+)", r.stdout, re.M)
    return float(m.group(4)), float(m.group(5)), int(t.group(1)) if t else None


class Forms:
    """Every PyTorch form of one prompt's prefill, ready to time: {name: fn}."""

    def __init__(self, a, hf, lean, lean_c, hf_c, x, ids):
        self.runs, self.tokens, self.notes, self.compile_s = {}, {}, [], {}

        def hf_prefill(m):
            with torch.no_grad():
                return m(x, use_cache=True, logits_to_keep=1).logits[0, -1].float()

        with torch.no_grad(), sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            if a.compile_shapes == "class":  # one compile for every prompt length
                torch._dynamo.maybe_mark_dynamic(ids, 0)
            g, out = capture(lambda: lean(ids))
            self.graph_out = out
            self.runs["lean graph"] = g.replay
            self.keep = [g]
            if lean_c is not None:
                t0 = time.time()
                try:
                    g, out = capture(lambda: lean_c(ids))
                    self.runs["lean compile"] = g.replay
                    self.compile_out = out
                    self.keep.append(g)
                except Exception as e:  # report, keep the other columns
                    self.notes.append("lean compile failed: %s" % str(e).splitlines()[0][:200])
                self.compile_s["lean"] = time.time() - t0
            self.lean_eager = lean(ids)
        self.hf_logits = hf_prefill(hf) if "eager" in a.hf or "compile" in a.hf else None
        if "eager" in a.hf:
            self.runs["hf eager"] = lambda: hf_prefill(hf)
        if hf_c is not None:
            t0 = time.time()
            try:
                hf_prefill(hf_c)
                self.runs["hf compile"] = lambda: hf_prefill(hf_c)
            except Exception as e:
                self.notes.append("hf compile failed: %s" % str(e).splitlines()[0][:200])
            self.compile_s["hf"] = time.time() - t0
        torch.cuda.synchronize()

    def check(self):
        """The lean forms against transformers: the first token and the
        last-row logits (bf16 noise: 3% of the norm; random weights make
        near ties, so a different token is reported with its margin)."""
        out = {}
        ref = self.hf_logits
        for name, res in (("lean eager", self.lean_eager), ("lean graph", self.graph_out),
                          ("lean compile", getattr(self, "compile_out", None))):
            if res is None or ref is None:
                continue
            tok, lg = res
            rel = ((lg - ref).norm() / ref.norm()).item()
            top2 = ref.topk(2).values
            out[name] = dict(token=int(tok), hf_token=int(ref.argmax()), rel=rel,
                             hf_margin=(top2[0] - top2[1]).item(), ok=rel < 0.03)
        return out


def time_prompt(a, name, hf, lean, lean_c, hf_c, d, P, gen, rate):
    ids = torch.randint(0, a.vocab, (P,), generator=gen).tolist()
    x = torch.tensor([ids], device=DEV)
    idt = torch.tensor(ids, device=DEV)
    fm = Forms(a, hf, lean, lean_c, hf_c, x, idt)
    res = {k: [] for k in fm.runs}
    ours = {c: [] for c in a.chunks}
    for _ in range(a.passes):
        for c in ours:
            if a.ours:
                r = run_ours(a, d, ids, c)
                if r:
                    ours[c].append(r)
        with torch.no_grad():  # the lean forms are graphs (their attention kernel chosen when captured)
            for k, fn in fm.runs.items():
                res[k].append(timed(fn, a.iters, a.warmup) / 1e3)
    row = dict(config=name, layers=a.layers, vocab=a.vocab, prompt=P,
               floor_ms=flops(CONFIGS[name], a.layers, a.vocab, P) / rate * 1e3, gemm_rate=rate,
               torch_ms={k: statistics.median(v) for k, v in res.items() if v}, torch_passes=res,
               compile_s=fm.compile_s, notes=fm.notes, check=fm.check(), sdpa=lean.sdpa_note,
               ours={str(c): dict(host_ms=statistics.median(v[0] for v in ours[c]),
                                  device_ms=statistics.median(v[1] for v in ours[c]),
                                  token=ours[c][0][2], passes=[v[1] for v in ours[c]])
                     for c in ours if ours[c]})
    fm.keep = []
    return row


def print_row(r):
    t = r["torch_ms"]
    line = "prefill %-3s L%d P %5d: floor %7.2f ms" % (r["config"], r["layers"], r["prompt"], r["floor_ms"])
    for k in ("lean compile", "lean graph", "hf eager", "hf compile"):
        if k in t:
            line += " | %s %7.2f" % (k, t[k])
    for c, v in r["ours"].items():
        line += " | ours chunk %s: device %7.2f ms (host %7.2f)" % (c, v["device_ms"], v["host_ms"])
        if "lean compile" in t:
            line += ", lean compile / ours %.3f" % (t["lean compile"] / v["device_ms"])
    bad = [k for k, v in r["check"].items() if not v["ok"]]
    line += " | check %s" % ("ok" if not bad else "MISMATCH " + ", ".join(
        "%s (rel %.3g)" % (k, r["check"][k]["rel"]) for k in bad))
    if r["notes"]:
        line += " | " + "; ".join(r["notes"])
    print(line, flush=True)


def run_config(a, name, rows, gen, rate, write):
    t0 = time.time()
    d = tempfile.mkdtemp(prefix="torch_prefill.%s." % name, dir=a.dir)
    try:
        hf = make_model(a, name, d)
        lean = Lean(hf, max(a.prompts))
        lean.sdpa_note = lean.probe(torch.randint(0, a.vocab, (max(a.prompts),), device=DEV))
        lean_c = None
        if not a.no_compile:
            lean_c = torch.compile(lean.__call__, dynamic=False if a.compile_shapes == "static" else None)
        hf_c = torch.compile(hf, dynamic=False) if "compile" in a.hf else None
        print("%s: model of %d layers written and loaded (%.0f s); attention: %s" % (
            name, a.layers, time.time() - t0, lean.sdpa_note), flush=True)
        for P in a.prompts:
            row = time_prompt(a, name, hf, lean, lean_c, hf_c, d, P, gen, rate)
            rows.append(row)
            print_row(row)
            write(rows)
        del hf, lean, lean_c, hf_c
    finally:
        shutil.rmtree(d, ignore_errors=True)
        torch._dynamo.reset()
        torch.cuda.empty_cache()


def table(rows):
    """The short table: lean compile + graph against ours (device time)."""
    print("config prompt | ours ms | lean compile ms | lean graph | hf eager | floor | lean/ours | check | ours' token")
    for r in rows:
        t = r["torch_ms"]
        o = min((v["device_ms"] for v in r["ours"].values()), default=float("nan"))
        lc = t.get("lean compile", float("nan"))
        ok = all(v["ok"] for v in r["check"].values())
        ref = next(iter(r["check"].values()), {})
        toks = [v["token"] for v in r["ours"].values() if v.get("token") is not None]
        same = "-" if not toks or "hf_token" not in ref else "= transformers'" if set(toks) == {ref["hf_token"]} else (
            "differs (transformers' top-2 margin %.3g)" % ref["hf_margin"])
        print("%-6s %6d | %7.2f | %15.2f | %10.2f | %8.2f | %5.2f | %9.3f | %-5s | %s" % (
            r["config"], r["prompt"], o, lc, t.get("lean graph", float("nan")), t.get("hf eager", float("nan")),
            r["floor_ms"], lc / o, "ok" if ok else "MISMATCH", same))
    print("lean/ours > 1: ours is faster by that factor (the target: >= 1.10)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="8b", help="comma list of %s" % ",".join(sorted(CONFIGS)))
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--prompts", default="512,2048")
    p.add_argument("--chunks", default="2048", help="the engine's --prefill-chunk values to time")
    p.add_argument("--ours", default="", help="the engine's command (without --model ...); empty: PyTorch only")
    p.add_argument("--ours-timeout", type=int, default=300)
    p.add_argument("--hf", default="eager", help="transformers' forms: comma list of eager,compile, or none")
    p.add_argument("--compile-shapes", default="static", choices=["static", "class"],
                   help="the lean step: a compile per prompt length, or one with the length dynamic")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--iters-ours", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--passes", type=int, default=1)
    p.add_argument("--no-compile", action="store_true", help="no lean compile")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dir", help="where the checkpoints go (default: the system's temporary directory)")
    p.add_argument("--json")
    a = p.parse_args()
    a.config = [c for c in a.config.split(",") if c]
    bad = [c for c in a.config if c not in CONFIGS]
    if bad or not a.config:
        p.error("--config: unknown %s (choose from %s)" % (bad, ",".join(sorted(CONFIGS))))
    a.hf = [] if a.hf == "none" else a.hf.split(",")
    if any(f not in ("eager", "compile") for f in a.hf):
        p.error("--hf: expected a comma list of eager,compile, or none")
    a.prompts = [int(x) for x in a.prompts.split(",")]
    a.chunks = [int(x) for x in a.chunks.split(",")]
    if min(a.prompts) < 128 or a.layers < 1 or a.iters < 1 or a.passes < 1:
        p.error("--prompts must be >= 128 tokens; --layers, --iters, --passes >= 1")
    if not dist.is_initialized():  # torch_timing.timed starts every measurement with a barrier
        store = tempfile.mktemp(prefix="torch_prefill_store.")
        dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=1)
    compile_limits()
    rate = gemm_rate()
    print("PyTorch %s on %s: bf16 GEMM %.0f TFLOP/s measured (the floor's rate)" % (
        torch.__version__, torch.cuda.get_device_name(0), rate / 1e12), flush=True)
    t0 = time.time()

    def write(rows):
        if a.json:
            meta = dict(torch=torch.__version__, gpu=torch.cuda.get_device_name(0), gemm_rate=rate,
                        layers=a.layers, vocab=a.vocab, compile_shapes=a.compile_shapes, hf=a.hf, ours=a.ours,
                        iters=a.iters, iters_ours=a.iters_ours, passes=a.passes, seconds=time.time() - t0)
            with open(a.json + ".tmp", "w") as f:
                json.dump(dict(meta=meta, results=rows), f, indent=1)
            os.replace(a.json + ".tmp", a.json)  # a run stopped by its timeout leaves the last whole file

    g = torch.Generator().manual_seed(a.seed + 1)
    rows = []
    for name in a.config:
        run_config(a, name, rows, g, rate, write)
    table(rows)
    print("took %.0f s" % (time.time() - t0))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
