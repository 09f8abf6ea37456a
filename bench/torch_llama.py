"""PyTorch baseline for the Llama decode example: the tensor-parallel decode
step written the way a careful PyTorch user would, timed as a
torch.cuda.graph, under torch.compile captured in a torch.cuda.graph (the
strongest thing such a user has: gpt-fast's recipe), and optionally eager,
next to the memory-bandwidth floor; with --ours, the example engine's own
--bench --sweep runs between its passes (alternating, same call), so one
table holds every column.

One process per GPU (torch.multiprocessing.spawn, or torchrun). Per rank and
layer (Megatron TP, R ranks, weights random, values irrelevant to time):
  h = rms_norm(x, attn_norm)
  q, k, v = split(h @ Wqkv_r^T)            fused column-parallel QKV
  q, k = rope(q), rope(k)                  Llama-3 RoPE, rotate_half layout
  K_r.index_copy_(2, pos, k); V_r ...      contiguous cache, append at pos
  o = sdpa(q, K_r[:, :, :ctx+1], V_r[...]) GQA (see --attn)
  x = x + all_reduce(o @ Wo_r^T)           row-parallel O projection (TP 1: no all-reduce)
  h = rms_norm(x, mlp_norm)
  g, u = chunk(h @ Wgu_r^T)                fused column-parallel gate/up
  x = x + all_reduce((silu(g) * u) @ Wdown_r^T)
then the final norm. Every sequence of the batch is at position ctx (ctx
keys cached, one appended). The position lives in a device tensor and the
RoPE table is indexed on the device, so the captured graph is the same
step a real decoder would replay.

--attn: "gqa" is scaled_dot_product_attention(enable_gqa=True); "fold" puts
the query heads that share a KV head in the query-length dimension
([B, kv, group, hd] against [B, kv, n, hd]; exact for decode, which has no
causal mask inside one token) so any fused kernel reads each KV head once;
"repeat" is transformers' repeat_kv (expands K/V, reads the cache group
times). The default measures gqa and fold as graphs; the table marks the
faster, and the compiled step uses that form.

--modes: "graph" (torch.cuda.graph of the plain step), "compile" (the step
under torch.compile, Inductor --compile-mode, static shapes, one compile per
shape, then captured in torch.cuda.graph: Inductor fuses RMSNorm, RoPE and
SiLU * mul, GEMMs stay on cuBLAS, attention on SDPA), "eager" (host-bound;
off by default).

Time: after --warmup runs, --iters runs of the whole L-layer step queued
back to back on the rank's stream, each between two CUDA events (no host
sync in between, as the engine's --bench does, so neither side pays the
host's launch latency), median; eager includes the Python launch cost, as
a user would see. Ranks start each measurement after a barrier. Reported
per layer and per token (= per step). --passes P repeats every measurement
P times in turn (and --ours between them) and reports the median of the
passes. The floor per layer = (per-rank weight bytes
+ K/V bytes of the ctx + 1 positions attended) / 4.3 TB/s, the H200's
achievable HBM bandwidth (70b, TP 2, batch 1, ctx 4096: 200.9 us); the
engine's --bench (examples/llama) counts the same bytes.

With --weights DIR --out OUT it times nothing: it runs the steps of a
tests/gpu/llama_ref.py gen directory and writes y.s{s} / logits.s{s} as
the engine does, so `llama_ref.py check DIR OUT --tp N` judges this
baseline with the engine's test (the step we time is the Llama step).

Usage (2 GPUs, about 2 minutes without compile; compiling adds ~10-20 s a
shape):
  python3 bench/torch_llama.py --config 70b,8b --layers 4 --tp 2 \\
      --batch 1,8,32 --ctx 512,4096 --json torch_llama.json
  # the main job's table: ours (examples/llama) alternated with PyTorch
  python3 bench/torch_llama.py --config 8b,70b --tp 1 --passes 2 \\
      --ours "LD_LIBRARY_PATH=.gpu/bin bash .gpu/run.sh llama --config {config} --layers 4 --tp {tp} --bench --sweep --out {out}"
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from torch_timing import capture, timed

CONFIGS = {
    "8b": dict(hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336),
    "70b": dict(hidden=8192, heads=64, kv_heads=8, head_dim=128, ffn=28672),
}
EPS = 1e-5
THETA = 500000.0
HBM_BYTES_PER_S = 4.3e12


def floor_us_per_layer(c, tp, batch, ctx):
    """Bytes one rank must read per layer, over the HBM bandwidth (bf16 everywhere)."""
    H, hd = c["hidden"], c["head_dim"]
    hq, hk, f = c["heads"] // tp, c["kv_heads"] // tp, c["ffn"] // tp
    weights = H * (hq + 2 * hk) * hd + hq * hd * H + 3 * H * f + 2 * H
    kv = 2 * batch * hk * (ctx + 1) * hd                  # k and v of the ctx + 1 positions attended
    return 2 * (weights + kv) / HBM_BYTES_PER_S * 1e6


class Model:
    """One rank's shard of L layers, its KV caches and the RoPE table."""

    def __init__(self, c, layers, tp, gen, dev="cuda"):
        dt = torch.bfloat16
        H, hd = c["hidden"], c["head_dim"]
        self.c, self.H, self.hd, self.dev, self.tp = c, H, hd, dev, tp
        self.hq, self.hk, self.f = c["heads"] // tp, c["kv_heads"] // tp, c["ffn"] // tp

        def w(rows, cols):
            return (torch.randn(rows, cols, device=dev, generator=gen) / math.sqrt(cols)).to(dt)

        def norm():
            return (1.0 + 0.1 * torch.randn(H, device=dev, generator=gen)).to(dt)

        self.layers = []
        for _ in range(layers):
            self.layers.append(dict(
                attn_norm=norm(),
                wqkv=w((self.hq + 2 * self.hk) * hd, H),
                wo=w(H, self.hq * hd),
                mlp_norm=norm(),
                wgu=w(2 * self.f, H),
                wdown=w(H, self.f)))
        self.final_norm = norm()
        self.gen = gen

    def set_context(self, batch, ctx, capacity=0):
        """Caches holding ctx positions (room for capacity, default ctx + 1) and the step's static state.
        Returns that state (a dict) so several contexts can be kept and switched with use()."""
        dev, dt = self.dev, torch.bfloat16
        capacity = capacity or ctx + 1
        shape = (batch, self.hk, capacity, self.hd)
        st = dict(batch=batch, n=ctx + 1)
        st["caches"] = [(torch.randn(shape, device=dev, generator=self.gen).to(dt),
                         torch.randn(shape, device=dev, generator=self.gen).to(dt)) for _ in self.layers]
        inv = 1.0 / (THETA ** (torch.arange(0, self.hd, 2, device=dev, dtype=torch.float32) / self.hd))
        ang = torch.arange(capacity, device=dev, dtype=torch.float32)[:, None] * inv[None, :]
        emb = torch.cat([ang, ang], dim=-1)
        st["cos"], st["sin"] = emb.cos().to(dt), emb.sin().to(dt)
        st["pos"] = torch.tensor([ctx], device=dev, dtype=torch.long)
        st["x"] = torch.randn(batch, self.H, device=dev, generator=self.gen).to(dt)
        self.use(st)
        return st

    def use(self, st):
        self.batch, self.n, self.caches = st["batch"], st["n"], st["caches"]
        self.cos, self.sin, self.pos, self.x = st["cos"], st["sin"], st["pos"], st["x"]

    def step(self, attn):
        """One decode step of all layers: (residual stream after the last layer, its final norm)."""
        B, H, hd, hq, hk, n = self.batch, self.H, self.hd, self.hq, self.hk, self.n
        cos = self.cos.index_select(0, self.pos).view(1, 1, 1, hd)
        sin = self.sin.index_select(0, self.pos).view(1, 1, 1, hd)

        def rope(t):
            t1, t2 = t[..., : hd // 2], t[..., hd // 2:]
            return t * cos + torch.cat([-t2, t1], dim=-1) * sin

        x = self.x
        for l, (kc, vc) in zip(self.layers, self.caches):
            h = F.rms_norm(x, (H,), l["attn_norm"], EPS)
            q, k, v = (h @ l["wqkv"].t()).split([hq * hd, hk * hd, hk * hd], dim=-1)
            q = rope(q.view(B, hq, 1, hd))
            k = rope(k.view(B, hk, 1, hd))
            kc.index_copy_(2, self.pos, k)
            vc.index_copy_(2, self.pos, v.view(B, hk, 1, hd))
            K, V = kc[:, :, :n], vc[:, :, :n]
            if attn == "gqa":
                o = F.scaled_dot_product_attention(q, K, V, enable_gqa=True)
            elif attn == "fold":
                o = F.scaled_dot_product_attention(q.view(B, hk, hq // hk, hd), K, V)
            else:
                g = hq // hk
                o = F.scaled_dot_product_attention(q, K.repeat_interleave(g, dim=1), V.repeat_interleave(g, dim=1))
            o = o.reshape(B, hq * hd) @ l["wo"].t()
            if self.tp > 1:  # one rank has nothing to reduce: a TP-1 user calls no collective
                dist.all_reduce(o)
            x = x + o
            h = F.rms_norm(x, (H,), l["mlp_norm"], EPS)
            gate, up = (h @ l["wgu"].t()).chunk(2, dim=-1)
            d = (F.silu(gate) * up) @ l["wdown"].t()
            if self.tp > 1:
                dist.all_reduce(d)
            x = x + d
        return x, F.rms_norm(x, (H,), self.final_norm, EPS)


class Point:
    """One (batch, ctx) of one model: its context state and every runnable
    form of its step (eager, the graphs of each attention form, the compiled
    step's graph), prepared once and timed in every pass."""

    def __init__(self, m, B, ctx, args, compiled):
        self.B, self.ctx = B, ctx
        self.st = m.set_context(B, ctx)
        self.runs = {}     # name -> callable (a graph's replay, or the eager step)
        self.outs = {}     # name -> the final-normed output of one run, fp32
        self.notes = []
        m.use(self.st)
        if "eager" in args.modes:
            for attn in args.attn:
                self.runs["eager-" + attn] = (lambda a=attn: m.step(a))
        y_eager = {}
        for attn in args.attn:
            y_eager[attn] = m.step(attn)[1].float()
        self.y_ref = y_eager[args.attn[0]]
        self.graphs = []
        if "graph" in args.modes or "compile" in args.modes:
            for attn in args.attn:
                g, out = capture(lambda a=attn: m.step(a)[1])
                self.graphs.append(g)
                self.runs["graph-" + attn] = g.replay
                self.outs["graph-" + attn] = out
        self.attn_best = args.attn[0]
        if "compile" in args.modes:
            # The compiled step takes the attention form that is faster as a
            # plain graph here (one compile per shape, not per form).
            if len(args.attn) > 1:
                t = {a: timed(self.runs["graph-" + a], max(20, args.iters // 4), 3) for a in args.attn}
                self.attn_best = min(t, key=t.get)
            t0 = time.time()
            try:
                g, out = capture(lambda: compiled(self.attn_best)[1])
                self.graphs.append(g)
                self.runs["compile"] = g.replay
                self.outs["compile"] = out
            except Exception as e:  # report, keep the other columns
                self.notes.append("compile failed: %s" % str(e).splitlines()[0][:200])
            self.compile_s = time.time() - t0
        for name, run in self.runs.items():
            if name.startswith("eager"):
                continue
            run()
        torch.cuda.synchronize()
        self.check = {}
        for name, out in self.outs.items():
            # Outputs are final-normed (RMS ~1). A replay should equal eager up
            # to kernel choice (bf16 noise); forms differ in summation order.
            o = out.float()
            self.check[name] = dict(max_diff=(o - self.y_ref).abs().max().item(),
                                    rel=((o - self.y_ref).norm() / self.y_ref.norm()).item(),
                                    tol=2.0 ** -6 * self.y_ref.abs().max().item(),
                                    finite=bool(torch.isfinite(o).all().item()))

    def ok(self, name):
        # bf16 noise: other kernels (Inductor's fused RMSNorm, another cuBLAS
        # or SDPA kernel) round differently; allow 2 bf16 ulps of the largest
        # output element and 2% of the norm. A wrong step is off by far more.
        c = self.check.get(name)
        return c is None or (c["finite"] and c["max_diff"] <= max(0.05, c["tol"]) and c["rel"] < 0.02)

    def release(self):
        self.runs, self.outs, self.graphs, self.st = {}, {}, [], None


def read_raw(d, name, shape, dt=torch.bfloat16):
    t = torch.from_file(os.path.join(d, name), size=math.prod(shape), dtype=dt)
    return t.view(shape)


def verify(rank, args):
    """Runs the real weights of a tests/gpu/llama_ref.py directory through
    this baseline (TP shards cut here) and writes y.s{s} / logits.s{s} like
    the engine does, so `llama_ref.py check` judges the baseline too: the
    step we time is the Llama step, not something cheaper."""
    d = args.weights
    c = {}
    with open(os.path.join(d, "config.txt")) as f:
        for line in f:
            k, v = line.split()
            c[k] = float(v) if k in ("eps", "theta") else int(v)
    if abs(c["theta"] - THETA) > 0 or abs(c["eps"] - EPS) > 0:
        raise SystemExit("%s: theta %g eps %g, this baseline is built for %g / %g" %
                         (d, c["theta"], c["eps"], THETA, EPS))
    cfg = {k: c[k] for k in ("hidden", "heads", "kv_heads", "head_dim", "ffn")}
    tp, dev = args.tp, args.device
    if c["kv_heads"] % tp or c["ffn"] % tp:
        raise SystemExit("%s: TP %d does not divide %d KV heads / ffn %d" % (d, tp, c["kv_heads"], c["ffn"]))
    m = Model(cfg, c["layers"], tp, torch.Generator(device=dev).manual_seed(0), dev)
    hq, hk, f, hd, H = m.hq, m.hk, m.f, m.hd, m.H

    def shard(t, n, dim=0):
        return t.narrow(dim, rank * n, n).contiguous().to(dev)

    for i, l in enumerate(m.layers):
        w = {k: read_raw(d, "l%d.%s" % (i, k), shape) for k, shape in (
            ("attn_norm", [H]), ("mlp_norm", [H]), ("wq", [c["heads"] * hd, H]), ("wk", [c["kv_heads"] * hd, H]),
            ("wv", [c["kv_heads"] * hd, H]), ("wo", [H, c["heads"] * hd]), ("w_gate", [c["ffn"], H]),
            ("w_up", [c["ffn"], H]), ("w_down", [H, c["ffn"]]))}
        l.update(attn_norm=w["attn_norm"].to(dev), mlp_norm=w["mlp_norm"].to(dev),
                 wqkv=torch.cat([shard(w["wq"], hq * hd), shard(w["wk"], hk * hd), shard(w["wv"], hk * hd)]),
                 wo=shard(w["wo"], hq * hd, 1), wgu=torch.cat([shard(w["w_gate"], f), shard(w["w_up"], f)]),
                 wdown=shard(w["w_down"], f, 1))
    m.final_norm = read_raw(d, "final_norm", [H]).to(dev)
    B, ctx, steps = c["batch"], c["ctx"], c["steps"]
    m.set_context(B, ctx, ctx + steps)
    for i in range(c["layers"]):
        for j, name in enumerate(("k_cache", "v_cache")):
            full = read_raw(d, "l%d.%s" % (i, name), [B, c["kv_heads"], ctx, hd])
            m.caches[i][j][:, :, :ctx] = shard(full, hk, 1)
    lm = read_raw(d, "lm_head", [c["vocab"], H]).to(dev) if c["vocab"] > 0 else None
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
    for s in range(steps):
        m.x = read_raw(d, "x.s%d" % s, [B, H]).to(dev)
        m.pos.fill_(ctx + s)
        m.n = ctx + s + 1
        y, h = m.step(args.attn[0])
        if rank == 0:
            y.cpu().view(torch.int16).numpy().tofile(os.path.join(args.out, "y.s%d" % s))
            if lm is not None:
                (h @ lm.t()).float().cpu().numpy().tofile(os.path.join(args.out, "logits.s%d" % s))
    if rank == 0:
        print("verify: wrote %d steps of %s (TP=%d, attn %s) to %s" % (steps, d, tp, args.attn[0], args.out))


def run_ours(args, name, rank):
    """The engine's sweep for one model (rank 0 starts it; its ranks are its
    own processes): {(batch, ctx): (us per layer, its floor)} from bench.json."""
    res = {}
    if rank == 0:
        out = tempfile.mkdtemp(prefix="ours.")
        cmd = args.ours.format(config=name, tp=args.tp, out=out, layers=args.layers)
        r = subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=args.ours_timeout)
        for line in r.stdout.splitlines():
            if line.startswith(("bench:", "llama:")) or "error" in line.lower():
                print("  ours| " + line, flush=True)
        try:
            with open(os.path.join(out, "bench.json")) as f:
                for row in json.load(f):
                    res[(row["batch"], row["ctx"])] = (row["us_per_layer"], row["floor_us_per_layer"])
        except (OSError, ValueError) as e:
            print("ours: no bench.json from `%s` (exit %d): %s" % (cmd, r.returncode, e), flush=True)
    dist.barrier()
    return res


def worker(rank, args, init):
    if args.device == "cuda":
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method=init, rank=rank, world_size=args.tp,
                                device_id=torch.device("cuda", rank))
    else:                                   # --weights on a machine without a GPU (tests this file)
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=args.tp)
    if args.weights:
        verify(rank, args)
        dist.barrier()
        dist.destroy_process_group()
        return
    torch._dynamo.config.cache_size_limit = 1024       # one compile per (shape, form): no fallback to eager
    torch._dynamo.config.accumulated_cache_size_limit = 4096
    gen = torch.Generator(device="cuda").manual_seed(1234 + rank)
    results = []
    t0 = time.time()
    L = args.layers
    for name in args.config:
        c = CONFIGS[name]
        m = Model(c, args.layers, args.tp, gen)
        compiled = None
        if "compile" in args.modes:
            compiled = torch.compile(m.step, dynamic=False,
                                     mode=None if args.compile_mode == "default" else args.compile_mode)
        points = []
        for B in args.batch:
            for ctx in args.ctx:
                p = Point(m, B, ctx, args, compiled)
                points.append(p)
                if rank == 0:
                    print("prepared %s batch %d ctx %d%s%s" % (
                        name, B, ctx, " (compile %.0f s, attn %s)" % (p.compile_s, p.attn_best)
                        if hasattr(p, "compile_s") else "", "; " + "; ".join(p.notes) if p.notes else ""),
                          flush=True)
        times = {id(p): {} for p in points}
        ours = {}
        for ps in range(args.passes):
            if args.ours:
                for k, v in run_ours(args, name, rank).items():
                    ours.setdefault(k, []).append(v)
            for p in points:
                m.use(p.st)
                for run_name, run in p.runs.items():
                    times[id(p)].setdefault(run_name, []).append(timed(run, args.iters, args.warmup))
        for p in points:
            fl = floor_us_per_layer(c, args.tp, p.B, p.ctx)
            med = {k: statistics.median(v) / L for k, v in times[id(p)].items()}
            row = dict(config=name, tp=args.tp, layers=L, batch=p.B, ctx=p.ctx, floor_us_per_layer=fl,
                       us_per_layer=med, passes={k: [t / L for t in v] for k, v in times[id(p)].items()},
                       attn_compiled=p.attn_best if "compile" in med else None, check=p.check,
                       ok={k: p.ok(k) for k in p.check}, notes=p.notes)
            g = {k: v for k, v in med.items() if k.startswith("graph-")}
            if g:
                row["graph_best"] = min(g, key=g.get)
            o = ours.get((p.B, p.ctx))
            if o:
                row["ours_passes"] = [v[0] for v in o]
                row["ours_us_per_layer"] = statistics.median(v[0] for v in o)
                row["ours_floor_us_per_layer"] = o[0][1]
            results.append(row)
            p.release()
        del points, compiled, m
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    dist.barrier()
    if rank == 0:
        report(results, args, time.time() - t0)
    dist.destroy_process_group()


def nccl_version():
    v = torch.cuda.nccl.version()
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def report(results, args, seconds):
    print("PyTorch %s TP decode step, %d layers, TP=%d, %s, %d passes, median of %d per pass (us per layer)" %
          (torch.__version__, args.layers, args.tp, torch.cuda.get_device_name(0), args.passes, args.iters))
    print("compile = torch.compile (%s, static shapes) captured in torch.cuda.graph; graph = torch.cuda.graph, "
          "faster attention form; best torch = the faster of the two" % args.compile_mode)
    hdr = "%-4s %5s %5s | %8s %8s %8s %8s | %8s | %8s %10s %10s | %s"
    print(hdr % ("cfg", "batch", "ctx", "ours", "compile", "graph", "eager", "floor", "ours/flr",
                 "best/ours", "which", "check"))
    for r in results:
        med = r["us_per_layer"]
        fl = r["floor_us_per_layer"]
        gb = med.get(r.get("graph_best", ""), float("nan"))
        cp = med.get("compile", float("nan"))
        eg = min([v for k, v in med.items() if k.startswith("eager")] or [float("nan")])
        ours = r.get("ours_us_per_layer", float("nan"))
        best_name, best = ("compile", cp) if not (gb < cp) else ("graph-" + r["graph_best"][6:], gb)
        bad = [k for k, v in r["ok"].items() if not v]
        chk = "ok" if not bad else "MISMATCH %s" % ", ".join("%s (max %.3g, rel %.3g, finite %s)" % (
            k, r["check"][k]["max_diff"], r["check"][k]["rel"], r["check"][k]["finite"]) for k in bad)
        if r["notes"]:
            chk += " " + "; ".join(r["notes"])
        print("%-4s %5d %5d | %8.1f %8.1f %8.1f %8.1f | %8.1f | %8.2f %10.3f %10s | %s" %
              (r["config"], r["batch"], r["ctx"], ours, cp, gb, eg, fl, ours / fl, best / ours, best_name, chk))
    print("best/ours > 1: ours is faster by that factor. sweep took %.0f s" % seconds)
    if args.json:
        meta = dict(torch=torch.__version__, cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0),
                    nccl=nccl_version(), tp=args.tp, layers=args.layers, passes=args.passes,
                    compile_mode=args.compile_mode, ours=args.ours,
                    iters=args.iters, warmup=args.warmup, hbm_bytes_per_s=HBM_BYTES_PER_S)
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, results=results), f, indent=1)
        print("wrote %s" % args.json)


def ints(s):
    return [int(v) for v in s.split(",") if v]


def names(choices):
    def parse(s):
        out = [v for v in s.split(",") if v]
        bad = [v for v in out if v not in choices]
        if bad or not out:
            raise argparse.ArgumentTypeError("unknown %s (choose from %s)" % (bad, ",".join(choices)))
        return out
    return parse


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=names(sorted(CONFIGS)), default=["70b"], help="comma list of 8b,70b")
    ap.add_argument("--layers", type=int, default=4, help="decoder layers in the timed step")
    ap.add_argument("--tp", type=int, default=0, help="ranks (default: every visible GPU)")
    ap.add_argument("--batch", type=ints, default=[1, 8, 32], help="comma list of batch sizes")
    ap.add_argument("--ctx", type=ints, default=[512, 4096], help="comma list of cached context lengths")
    ap.add_argument("--attn", type=names(["gqa", "fold", "repeat"]), default=["gqa", "fold"],
                    help="comma list of attention forms (see above)")
    ap.add_argument("--modes", type=names(["graph", "compile", "eager"]), default=["graph", "compile"],
                    help="comma list of graph,compile,eager (see above)")
    ap.add_argument("--compile-mode", default="default",
                    choices=["default", "max-autotune-no-cudagraphs"], help="torch.compile mode")
    ap.add_argument("--passes", type=int, default=1, help="every measurement this many times in turn (median)")
    ap.add_argument("--ours", default="", help="shell command of the engine's sweep, run before each pass; "
                    "{config} {tp} {layers} {out} are filled in, and {out}/bench.json is read")
    ap.add_argument("--ours-timeout", type=int, default=300, help="seconds one --ours run may take")
    ap.add_argument("--iters", type=int, default=200, help="timed runs per measurement (median)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed runs first")
    ap.add_argument("--json", default="", help="write the results here (rank 0)")
    ap.add_argument("--weights", default="", help="instead of timing: run a llama_ref.py gen directory's steps "
                    "with the first --attn form and write y.s*/logits.s* to --out, for llama_ref.py check")
    ap.add_argument("--out", default="", help="output directory for --weights")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu (gloo) only with --weights, to test this file without a GPU")
    args = ap.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:          # under torchrun
        args.tp = int(os.environ["WORLD_SIZE"])
        worker(int(os.environ.get("LOCAL_RANK", os.environ["RANK"])), args, "env://")
        return
    if args.device == "cpu":
        if not args.weights:
            raise SystemExit("--device cpu: timing needs CUDA; cpu runs only --weights")
        args.tp = args.tp or 1
    else:
        args.tp = args.tp or torch.cuda.device_count()
        if args.tp < 1 or args.tp > torch.cuda.device_count():
            raise SystemExit("--tp %d: %d GPUs visible" % (args.tp, torch.cuda.device_count()))
    if args.weights and not args.out:
        raise SystemExit("--weights needs --out")
    for name in args.config:
        c = CONFIGS[name]
        if c["kv_heads"] % args.tp or c["ffn"] % args.tp:
            raise SystemExit("--tp %d does not divide %s's %d KV heads / ffn %d" %
                             (args.tp, name, c["kv_heads"], c["ffn"]))
    if min(args.batch) < 1 or min(args.ctx) < 1 or args.iters < 1 or args.layers < 1 or args.passes < 1:
        raise SystemExit("--batch, --ctx, --iters, --layers and --passes must be >= 1")
    init = "file://" + os.path.join(tempfile.mkdtemp(), "torch_llama_init")
    mp.spawn(worker, args=(args, init), nprocs=args.tp, join=True)


if __name__ == "__main__":
    main()
