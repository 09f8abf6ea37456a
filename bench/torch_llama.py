"""PyTorch baseline for the Llama decode example: the tensor-parallel decode
step written the way a careful PyTorch user would, timed as a
torch.cuda.graph and under torch.compile captured in a torch.cuda.graph (the
strongest thing such a user has: gpt-fast's recipe), optionally eager, next
to the memory-bandwidth floor; with --ours, the example engine's own
--bench runs before PyTorch's points in every pass (alternating, same call,
same GPU), so one table holds every column.

Two kinds of run:
  the step      --layers L decoder layers (default 4) at each (batch, ctx)
                of --batch x --ctx, per layer
  --whole       the whole model of each --config: all its layers (8b 32,
                70b 80, 1b 16) plus the final norm and the LM head (vocab
                --vocab, vocab-parallel), per token: ms, tokens/s, bytes
                read a step and their share of the measured bandwidth

One process per GPU (torch.multiprocessing.spawn, or torchrun). Per rank and
layer (Megatron TP, R ranks, weights random, values irrelevant to time):
  h = rms_norm(x, attn_norm)
  q, k, v = split(h @ Wqkv_r^T)            fused column-parallel QKV
  q, k = rope(q), rope(k)                  Llama-3 RoPE, rotate_half layout
  K_r.index_copy_(2, pos, k); V_r ...      contiguous cache, append at pos
  o = sdpa(q, K_r, V_r)                    GQA (see --attn)
  x = x + all_reduce(o @ Wo_r^T)           row-parallel O projection (TP 1: no all-reduce)
  h = rms_norm(x, mlp_norm)
  g, u = chunk(h @ Wgu_r^T)                fused column-parallel gate/up
  x = x + all_reduce((silu(g) * u) @ Wdown_r^T)
then the final norm (and with --whole the logits, all-gathered at TP > 1).
Every sequence of the batch is at position ctx (ctx keys cached, one
appended; the cache holds exactly ctx + 1). The position lives in a device
tensor and the RoPE table is indexed on the device, so the captured graph is
the same step a real decoder would replay.

--attn: "gqa" is scaled_dot_product_attention(enable_gqa=True); "fold" puts
the query heads that share a KV head in the query-length dimension
([B, kv, group, hd] against [B, kv, n, hd]; exact for decode, which has no
causal mask inside one token) so any fused kernel reads each KV head once;
"repeat" is transformers' repeat_kv (expands K/V, reads the cache group
times). The default measures gqa and fold as graphs; the table takes the
faster, and the compiled step uses the form that is faster at that point.

--modes: "graph" (torch.cuda.graph of the plain step), "compile" (the step
under torch.compile, Inductor --compile-mode, then captured in
torch.cuda.graph: Inductor fuses RMSNorm, RoPE and SiLU * mul, GEMMs stay on
cuBLAS, attention on SDPA), "eager" (host-bound; off by default).
--compile-shapes: "static" compiles once per point (dynamic=False);
"class" (default) compiles once per shape class, batch 1 and batch > 1 per
model and attention form, with the batch and context dimensions dynamic
(torch._dynamo.maybe_mark_dynamic): the GEMMs and attention are the same
library calls either way and the fused element-wise kernels take their
sizes as arguments, so a class compile is what a serving user runs; the
JSON counts the graphs compiled and `--compile-shapes static` at a few
points checks it costs nothing.

Time: after --warmup runs, --iters runs of the whole step queued back to
back on the rank's stream, each between two CUDA events (no host sync in
between, as the engine's --bench does, so neither side pays the host's
launch latency), median; eager includes the Python launch cost, as a user
would see. Ranks start each measurement after a barrier. --passes P repeats
every measurement P times in turn (ours first in each) and reports the
median of the passes. Each point's caches are made, timed and freed before
the next (so the largest fits beside the engine's run), after a check of
the free memory: a point that cannot fit is skipped with the reason.

The floor = the bytes one rank must read a step (its weights, the K/V of the
ctx + 1 positions attended, bf16) over the bandwidth of a device-to-device
copy measured at the start (torch_timing.copy_bandwidth, as the engine's
--bench measures it; the engine's own figure is used where --ours ran).

With --weights DIR --out OUT it times nothing: it runs the steps of a
tests/gpu/llama_ref.py gen directory and writes y.s{s} / logits.s{s} as
the engine does, so `llama_ref.py check DIR OUT --tp N` judges this
baseline with the engine's test (the step we time is the Llama step).

Usage (from the repository root, the bundle in .gpu; {config} {tp} {layers}
{grid} {out} are filled in, {grid} as the engine's --sweep takes it):
  python3 bench/torch_llama.py --config 8b,70b --tp 1 --batch 1,8,32,64,128,256 --ctx 512,4096 \\
      --ours ".gpu/bin/llama --config {config} --layers {layers} --tp {tp} --bench --sweep {grid} --out {out}" \\
      --json decode.json
  python3 bench/torch_llama.py --whole --config 8b,1b --tp 1 --batch 1 --ctx 512 \\
      --ours ".gpu/bin/llama --config {config} --whole --tp {tp} --bench --sweep {grid} --out {out}" \\
      --json whole.json
(.gpu/bin on LD_LIBRARY_PATH, with cuBLAS and NCCL: tests/gpu/perf_sweep.sh
sets it up and runs both.)
"""
import argparse
import gc
import json
import math
import os
import shlex
import statistics
import subprocess
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from torch_timing import capture, compile_limits, copy_bandwidth, datasheet_bandwidth, timed

CONFIGS = {
    "8b": dict(hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336, layers=32),
    "70b": dict(hidden=8192, heads=64, kv_heads=8, head_dim=128, ffn=28672, layers=80),
    # Llama-3.2-1B's widths: head_dim 64 (its LM head is tied to the embedding: one matrix read a step).
    "1b": dict(hidden=2048, heads=32, kv_heads=8, head_dim=64, ffn=8192, layers=16),
}
WIDTHS = ("hidden", "heads", "kv_heads", "head_dim", "ffn")
EPS = 1e-5
THETA = 500000.0
GIB = float(1 << 30)
DEV = "cuda"  # where the timed models live (a test of this file's logic may set "cpu")


def weight_bytes(c, tp, layers, vocab):
    """One rank's weights: its shard of every layer, the final norm, its LM-head rows (bf16)."""
    H, hd = c["hidden"], c["head_dim"]
    hq, hk, f = c["heads"] // tp, c["kv_heads"] // tp, c["ffn"] // tp
    per_layer = H * (hq + 2 * hk) * hd + hq * hd * H + 3 * H * f + 2 * H
    return 2 * (layers * per_layer + H + (vocab // tp) * H)


def kv_bytes(c, tp, layers, batch, positions):
    """K and V of `positions` positions of one rank's KV heads in every layer (bf16)."""
    return 2 * 2 * layers * batch * (c["kv_heads"] // tp) * positions * c["head_dim"]


class Model:
    """One rank's shard of L layers (and with vocab > 0 its LM-head rows)."""

    def __init__(self, c, layers, tp, gen, dev="cuda", vocab=0):
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
        self.lm_head = w(vocab // tp, H) if vocab else None
        self.gen = gen

    def state(self, batch, ctx, capacity=0):
        """The step's inputs for `batch` sequences at position ctx: x, caches
        holding ctx positions (room for capacity, default ctx + 1), the RoPE
        tables and the position (a device tensor)."""
        dev, dt = self.dev, torch.bfloat16
        capacity = capacity or ctx + 1
        shape = (batch, self.hk, capacity, self.hd)
        st = dict(batch=batch, ctx=ctx)
        st["caches"] = [(torch.randn(shape, device=dev, generator=self.gen).to(dt),
                         torch.randn(shape, device=dev, generator=self.gen).to(dt)) for _ in self.layers]
        inv = 1.0 / (THETA ** (torch.arange(0, self.hd, 2, device=dev, dtype=torch.float32) / self.hd))
        ang = torch.arange(capacity, device=dev, dtype=torch.float32)[:, None] * inv[None, :]
        emb = torch.cat([ang, ang], dim=-1)
        st["cos"], st["sin"] = emb.cos().to(dt), emb.sin().to(dt)
        st["pos"] = torch.tensor([ctx], device=dev, dtype=torch.long)
        st["x"] = torch.randn(batch, self.H, device=dev, generator=self.gen).to(dt)
        return st

    @staticmethod
    def inputs(st):
        return st["x"], st["caches"], st["cos"], st["sin"], st["pos"]

    def step(self, x, caches, cos_t, sin_t, pos, attn, n=None):
        """One decode step of all layers: (residual stream after the last
        layer, its final norm, the logits or None). Sizes come from the
        tensors (so a compile can keep batch and context dynamic); the
        keys attended are the whole cache, or its first n positions."""
        B, H, hd, hq, hk = x.shape[0], self.H, self.hd, self.hq, self.hk
        cos = cos_t.index_select(0, pos).view(1, 1, 1, hd)
        sin = sin_t.index_select(0, pos).view(1, 1, 1, hd)

        def rope(t):
            t1, t2 = t[..., : hd // 2], t[..., hd // 2:]
            return t * cos + torch.cat([-t2, t1], dim=-1) * sin

        for l, (kc, vc) in zip(self.layers, caches):
            h = F.rms_norm(x, (H,), l["attn_norm"], EPS)
            q, k, v = (h @ l["wqkv"].t()).split([hq * hd, hk * hd, hk * hd], dim=-1)
            q = rope(q.view(B, hq, 1, hd))
            k = rope(k.view(B, hk, 1, hd))
            kc.index_copy_(2, pos, k)
            vc.index_copy_(2, pos, v.view(B, hk, 1, hd))
            K, V = (kc, vc) if n is None else (kc[:, :, :n], vc[:, :, :n])
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
        y = F.rms_norm(x, (H,), self.final_norm, EPS)
        logits = None
        if self.lm_head is not None:
            part = (y @ self.lm_head.t()).float()
            if self.tp > 1:
                whole = part.new_empty((self.tp,) + tuple(part.shape))
                dist.all_gather_into_tensor(whole, part)
                part = whole
            logits = part
        return x, y, logits


def mark_class(st):
    """--compile-shapes class: the context (and a batch > 1) dynamic, so one
    compile serves every point of the class."""
    md = torch._dynamo.maybe_mark_dynamic
    many = st["batch"] > 1
    for kc, vc in st["caches"]:
        for t in (kc, vc):
            md(t, 2)
            if many:
                md(t, 0)
    md(st["cos"], 0)
    md(st["sin"], 0)
    if many:
        md(st["x"], 0)


def graphs_compiled():
    try:
        return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    except Exception:  # the counter's home moved: report none rather than fail
        return -1


class Point:
    """One (batch, ctx) of one model: its state and every runnable form of its
    step (eager, the graphs of each attention form, the compiled step's
    graph), prepared, timed in one pass and freed."""

    def __init__(self, m, B, ctx, args, compiled, check):
        self.B, self.ctx = B, ctx
        self.st = m.state(B, ctx)
        ins = Model.inputs(self.st)
        self.runs, self.outs, self.notes, self.check, self.graphs = {}, {}, [], {}, []
        if "eager" in args.modes:
            for attn in args.attn:
                self.runs["eager-" + attn] = (lambda a=attn: m.step(*ins, a))
        ref = m.step(*ins, args.attn[0]) if check else None
        for attn in args.attn:
            g, out = capture(lambda a=attn: m.step(*ins, a)[1:])
            self.graphs.append(g)
            self.runs["graph-" + attn] = g.replay
            self.outs["graph-" + attn] = out
        self.attn_best = args.attn[0]
        if len(args.attn) > 1:
            t = {a: timed(self.runs["graph-" + a], max(20, args.iters // 4), 3) for a in args.attn}
            self.attn_best = min(t, key=t.get)
        if "graph" not in args.modes:
            for a in args.attn:
                del self.runs["graph-" + a]
        self.compile_s, self.graphs_compiled = None, None
        if compiled is not None:
            self.add_compiled(m, args, compiled, ins)
        for name, run in self.runs.items():
            if not name.startswith("eager"):
                run()
        torch.cuda.synchronize()
        if ref is not None:
            self.compare(ref)

    def add_compiled(self, m, args, compiled, ins):
        # The compiled step takes the attention form that is faster as a
        # plain graph here (a compile per form and class, not per point).
        if args.compile_shapes == "class":
            mark_class(self.st)
        t0 = time.time()
        try:
            g, out = capture(lambda: compiled(*ins, self.attn_best)[1:])
            self.graphs.append(g)
            self.runs["compile"] = g.replay
            self.outs["compile"] = out
        except Exception as e:  # report, keep the other columns
            self.notes.append("compile failed: %s" % str(e).splitlines()[0][:200])
        self.compile_s = time.time() - t0
        self.graphs_compiled = graphs_compiled()

    def compare(self, ref):
        # Outputs are final-normed (RMS ~1), and logits. A replay should equal
        # eager up to kernel choice (bf16 noise); forms differ in summation order.
        for name, out in self.outs.items():
            for i, what in ((0, "y"), (1, "logits")):
                if ref[1 + i] is None:
                    continue
                r, o = ref[1 + i].float(), out[i].float()
                self.check[name + ":" + what] = dict(
                    max_diff=(o - r).abs().max().item(), rel=((o - r).norm() / r.norm()).item(),
                    tol=2.0 ** -6 * r.abs().max().item(), finite=bool(torch.isfinite(o).all().item()))

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
    cfg = {k: c[k] for k in WIDTHS}
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
    st = m.state(B, ctx, ctx + steps)
    for i in range(c["layers"]):
        for j, name in enumerate(("k_cache", "v_cache")):
            full = read_raw(d, "l%d.%s" % (i, name), [B, c["kv_heads"], ctx, hd])
            st["caches"][i][j][:, :, :ctx] = shard(full, hk, 1)
    lm = read_raw(d, "lm_head", [c["vocab"], H]).to(dev) if c["vocab"] > 0 else None
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
    for s in range(steps):
        st["x"] = read_raw(d, "x.s%d" % s, [B, H]).to(dev)
        st["pos"].fill_(ctx + s)
        y, h, _ = m.step(*Model.inputs(st), args.attn[0], n=ctx + s + 1)
        if rank == 0:
            y.cpu().view(torch.int16).numpy().tofile(os.path.join(args.out, "y.s%d" % s))
            if lm is not None:
                (h @ lm.t()).float().cpu().numpy().tofile(os.path.join(args.out, "logits.s%d" % s))
    if rank == 0:
        print("verify: wrote %d steps of %s (TP=%d, attn %s) to %s" % (steps, d, tp, args.attn[0], args.out))


def run_ours(args, name, layers, rank):
    """The engine's bench for one model (rank 0 starts it; its ranks are its
    own processes): {(batch, ctx): its bench.json row}."""
    res = {}
    if rank == 0:
        out = tempfile.mkdtemp(prefix="ours.")
        grid = "%sx%s" % (",".join(map(str, args.batch)), ",".join(map(str, args.ctx)))
        cmd = args.ours.format(config=name, tp=args.tp, out=shlex.quote(out), layers=layers, grid=grid)
        try:
            r = subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=args.ours_timeout)
            text, rc = r.stdout, r.returncode
        except subprocess.TimeoutExpired as e:
            text, rc = e.stdout or "", -1
            if isinstance(text, bytes):
                text = text.decode(errors="replace")
            print("ours: `%s` ran past %d s" % (cmd, args.ours_timeout), flush=True)
        for line in text.splitlines():
            if line.startswith(("bench:", "llama:")) or "error" in line.lower():
                print("  ours| " + line, flush=True)
        try:
            with open(os.path.join(out, "bench.json")) as f:
                for row in json.load(f):
                    if "batch" in row:
                        res[(row["batch"], row["ctx"])] = row
        except (OSError, ValueError) as e:
            print("ours: no bench.json from `%s` (exit %d): %s" % (cmd, rc, e), flush=True)
    dist.barrier()
    return res


def all_ranks(flag):
    """True where every rank says True (a skip must be the same on all ranks)."""
    t = torch.tensor([1 if flag else 0], device=DEV)
    if dist.get_world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def point_row(name, c, L, vocab, args, peak, B, ctx):
    fl_bytes = weight_bytes(c, args.tp, L, vocab) + kv_bytes(c, args.tp, L, B, ctx + 1)
    return dict(config=name, tp=args.tp, layers=L, whole=args.whole, vocab=vocab, batch=B, ctx=ctx,
                bytes_per_step=fl_bytes, peak_bw=peak, floor_us=fl_bytes / peak * 1e6)


def time_point(m, name, c, L, vocab, args, compiled, peak, B, ctx, first, rank):
    """One point in one pass: (its row's fields, {run: us}), after a memory
    check; the state is freed before returning."""
    row = point_row(name, c, L, vocab, args, peak, B, ctx)
    torch.cuda.empty_cache()
    free = torch.cuda.mem_get_info()[0]
    # The caches, and for "repeat" one layer's K/V expanded group-fold;
    # the graphs' own intermediates are [B, hidden]-sized.
    kv = kv_bytes(c, args.tp, L, B, ctx + 1)
    need = kv * 1.05 + ("repeat" in args.attn) * kv / L * (c["heads"] // c["kv_heads"]) + 2 * GIB
    if not all_ranks(need <= free):
        row["skipped"] = "needs %.1f GiB for its caches and graphs; %.1f GiB free" % (need / GIB, free / GIB)
        return row, {}
    try:
        p = Point(m, B, ctx, args, compiled, first)
    except torch.OutOfMemoryError as e:  # the estimate above was short: say so, go on with the next point
        gc.collect()
        torch.cuda.empty_cache()
        row["skipped"] = "out of memory (%s)" % str(e).splitlines()[0][:160]
        return row, {}
    times = {k: timed(run, args.iters, args.warmup) for k, run in p.runs.items()}
    row.update(attn_compiled=p.attn_best if "compile" in p.runs else None, notes=p.notes,
               compile_s=p.compile_s, graphs_compiled=p.graphs_compiled)
    if first:
        row.update(check=p.check, ok={k: p.ok(k) for k in p.check})
    p.release()
    del p
    return row, times


def median_row(row, times, ours, L):
    """The pass medians of one point, ours beside them."""
    med = {k: statistics.median(v) for k, v in times.items()}
    row.update(us=med, us_per_layer={k: v / L for k, v in med.items()}, passes=times)
    g = {k: v for k, v in med.items() if k.startswith("graph-")}
    if g:
        row["graph_best"] = min(g, key=g.get)
    o = [r for r in ours if "median_us" in r]
    if o:
        row["ours_passes"] = [r["median_us"] for r in o]
        row["ours_us"] = statistics.median(row["ours_passes"])
        row["ours_us_per_layer"] = row["ours_us"] / L
        fl = o[0].get("floor_us", o[0].get("floor_us_per_layer", 0) * L)
        row["ours_floor_us"] = fl
        row["ours_peak_bw"] = o[0].get("peak_bw_measured")
        row["ours_peak_bw_datasheet"] = o[0].get("peak_bw_datasheet")
    elif ours and "skipped" in ours[0]:
        row["ours_skipped"] = ours[0]["skipped"]
    return row


def run_config(name, args, rank, peak, results, report_json):
    c = CONFIGS[name]
    L = c["layers"] if args.whole else args.layers
    vocab = args.vocab if args.whole else 0
    pts = [(B, ctx) for ctx in args.ctx for B in args.batch]
    torch.cuda.empty_cache()
    need, free = weight_bytes(c, args.tp, L, vocab) + 2 * GIB, torch.cuda.mem_get_info()[0]
    if not all_ranks(need <= free):
        why = "its weights need %.1f GiB a rank (and 2 to run); %.1f GiB free" % (need / GIB - 2, free / GIB)
        for B, ctx in pts:
            results.append(dict(point_row(name, c, L, vocab, args, peak, B, ctx), skipped=why))
        if rank == 0:
            print("%s: skipped: %s" % (name, why), flush=True)
        return
    m = Model(c, L, args.tp, torch.Generator(device=DEV).manual_seed(1234 + rank), DEV, vocab)
    compiled = None
    if "compile" in args.modes:
        compiled = torch.compile(m.step, dynamic=False if args.compile_shapes == "static" else None,
                                 mode=None if args.compile_mode == "default" else args.compile_mode)
    times, rows, ours = {pt: {} for pt in pts}, {}, {pt: [] for pt in pts}
    for ps in range(args.passes):
        if args.ours:
            torch.cuda.empty_cache()
            for k, v in run_ours(args, name, L, rank).items():
                if k in ours:
                    ours[k].append(v)
        for B, ctx in pts:
            t0 = time.time()
            row, t = time_point(m, name, c, L, vocab, args, compiled, peak, B, ctx, ps == 0, rank)
            rows.setdefault((B, ctx), row)
            for k, v in t.items():
                times[(B, ctx)].setdefault(k, []).append(v)
            if rank == 0:
                print("pass %d %s batch %d ctx %d: %s (%.0f s%s)" % (
                    ps + 1, name, B, ctx, row.get("skipped") or ", ".join(
                        "%s %.1f us" % (k, v) for k, v in sorted(t.items())),
                    time.time() - t0, ", compile %.0f s" % row["compile_s"] if ps == 0 and row.get("compile_s") else ""),
                    flush=True)
            if ps + 1 == args.passes:  # the point is done: into the JSON now (a timeout keeps what is done)
                results.append(median_row(rows[(B, ctx)], times[(B, ctx)], ours[(B, ctx)], L))
                report_json(results)
    del m, compiled
    torch._dynamo.reset()
    torch.cuda.empty_cache()


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
    compile_limits()  # a compile per (shape class or point, form), and never a quiet fallback to eager
    t0 = time.time()
    peak = copy_bandwidth()
    if rank == 0:
        print("peak: device-to-device copy %.3f TB/s (read + write); datasheet %s" % (
            peak / 1e12, "%.3f TB/s" % (datasheet_bandwidth() / 1e12) if datasheet_bandwidth() else "n/a"),
            flush=True)
    results = []

    def report_json(res):
        if rank == 0 and args.json:
            write_json(res, args, peak, time.time() - t0)

    for name in args.config:
        run_config(name, args, rank, peak, results, report_json)
    dist.barrier()
    if rank == 0:
        report(results, args, peak, time.time() - t0)
    dist.destroy_process_group()


def nccl_version():
    v = torch.cuda.nccl.version()
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def write_json(results, args, peak, seconds):
    meta = dict(torch=torch.__version__, cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0),
                nccl=nccl_version(), tp=args.tp, layers=args.layers, whole=args.whole, vocab=args.vocab,
                passes=args.passes, compile_mode=args.compile_mode, compile_shapes=args.compile_shapes,
                ours=args.ours, iters=args.iters, warmup=args.warmup, peak_bw_measured=peak,
                peak_bw_datasheet=datasheet_bandwidth(), seconds=seconds)
    tmp = args.json + ".tmp"
    with open(tmp, "w") as f:
        json.dump(dict(meta=meta, results=results), f, indent=1)
    os.replace(tmp, args.json)  # a run stopped by its timeout leaves the last whole file


def cells(r):
    """(ours, compile, best graph, floor) us a step of one row, nan where missing."""
    nan = float("nan")
    us = r.get("us", {})
    return (r.get("ours_us", nan), us.get("compile", nan), us.get(r.get("graph_best", ""), nan),
            r.get("ours_floor_us", r["floor_us"]))


def check_text(r):
    bad = [k for k, v in r.get("ok", {}).items() if not v]
    s = "ok" if not bad else "MISMATCH %s" % ", ".join("%s (max %.3g, rel %.3g, finite %s)" % (
        k, r["check"][k]["max_diff"], r["check"][k]["rel"], r["check"][k]["finite"]) for k in bad)
    return s + ("; " + "; ".join(r["notes"]) if r.get("notes") else "")


def report(results, args, peak, seconds):
    print("PyTorch %s decode %s, TP=%d, %s, %d pass(es), median of %d a pass; peak (copy) %.3f TB/s" % (
        torch.__version__, "whole model (all layers + LM head)" if args.whole else "step, %d layers" % args.layers,
        args.tp, torch.cuda.get_device_name(0), args.passes, args.iters, peak / 1e12))
    print("compile = torch.compile (%s, %s shapes) in torch.cuda.graph; graph = torch.cuda.graph, the faster "
          "attention form; ours/compile < 1: ours is faster" % (args.compile_mode, args.compile_shapes))
    if args.whole:
        print("%-4s %5s %5s | %9s %9s %9s | %9s | %8s %8s | %10s %6s %6s | %s" % (
            "cfg", "batch", "ctx", "ours ms", "compile", "graph", "floor ms", "ours/cmp", "ours/flr", "ours tok/s",
            "%peak", "cmp %", "check"))
    else:
        print("%-4s %5s %5s | %9s %9s %9s | %9s | %8s %8s | %s" % (
            "cfg", "batch", "ctx", "ours us/L", "compile", "graph", "floor", "ours/cmp", "ours/flr", "check"))
    for r in results:
        if r.get("skipped"):
            print("%-4s %5d %5d | skipped: %s" % (r["config"], r["batch"], r["ctx"], r["skipped"]))
            continue
        ours, cp, gb, fl = cells(r)
        if args.whole:
            by = r["bytes_per_step"]
            pk = r.get("ours_peak_bw") or peak
            print("%-4s %5d %5d | %9.3f %9.3f %9.3f | %9.3f | %8.3f %8.2f | %10.1f %6.1f %6.1f | %s" % (
                r["config"], r["batch"], r["ctx"], ours / 1e3, cp / 1e3, gb / 1e3, fl / 1e3, ours / cp, ours / fl,
                r["batch"] / (ours * 1e-6), 100 * by / (ours * 1e-6) / pk, 100 * by / (cp * 1e-6) / pk,
                check_text(r)))
        else:
            L = r["layers"]
            print("%-4s %5d %5d | %9.1f %9.1f %9.1f | %9.1f | %8.3f %8.2f | %s" % (
                r["config"], r["batch"], r["ctx"], ours / L, cp / L, gb / L, fl / L, ours / cp, ours / fl,
                check_text(r)))
    print("took %.0f s" % seconds)
    if args.json:
        write_json(results, args, peak, seconds)
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


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=names(sorted(CONFIGS)), default=["70b"], help="comma list of 8b,70b,1b")
    ap.add_argument("--layers", type=int, default=None, help="decoder layers in the timed step (default 4; not "
                    "with --whole)")
    ap.add_argument("--whole", action="store_true", help="the whole model: all layers of --config and the LM head")
    ap.add_argument("--vocab", type=int, default=128256, help="the LM head's vocabulary with --whole")
    ap.add_argument("--tp", type=int, default=0, help="ranks (default: every visible GPU)")
    ap.add_argument("--batch", type=ints, default=[1, 8, 32], help="comma list of batch sizes")
    ap.add_argument("--ctx", type=ints, default=[512, 4096], help="comma list of cached context lengths")
    ap.add_argument("--attn", type=names(["gqa", "fold", "repeat"]), default=["gqa", "fold"],
                    help="comma list of attention forms (see above)")
    ap.add_argument("--modes", type=names(["graph", "compile", "eager"]), default=["graph", "compile"],
                    help="comma list of graph,compile,eager (see above)")
    ap.add_argument("--compile-mode", default="default",
                    choices=["default", "max-autotune-no-cudagraphs"], help="torch.compile mode")
    ap.add_argument("--compile-shapes", default="class", choices=["class", "static"],
                    help="one compile per shape class (batch 1 / batch > 1, dynamic sizes) or per point")
    ap.add_argument("--passes", type=int, default=1, help="every measurement this many times in turn (median)")
    ap.add_argument("--ours", default="", help="shell command of the engine's bench, run before each pass; "
                    "{config} {tp} {layers} {grid} {out} are filled in, and {out}/bench.json is read")
    ap.add_argument("--ours-timeout", type=int, default=300, help="seconds one --ours run may take")
    ap.add_argument("--iters", type=int, default=200, help="timed runs per measurement (median)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed runs first")
    ap.add_argument("--json", default="", help="write the results here (rank 0; rewritten after each model)")
    ap.add_argument("--weights", default="", help="instead of timing: run a llama_ref.py gen directory's steps "
                    "with the first --attn form and write y.s*/logits.s* to --out, for llama_ref.py check")
    ap.add_argument("--out", default="", help="output directory for --weights")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu (gloo) only with --weights, to test this file without a GPU")
    args = ap.parse_args()
    if args.whole and args.layers is not None:
        ap.error("--whole runs every layer of --config; it does not go with --layers")
    args.layers = 4 if args.layers is None else args.layers
    if min(args.batch) < 1 or min(args.ctx) < 1 or args.iters < 1 or args.layers < 1 or args.passes < 1:
        ap.error("--batch, --ctx, --iters, --layers and --passes must be >= 1")
    return args


def main():
    args = parse_args()
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
        if c["kv_heads"] % args.tp or c["ffn"] % args.tp or (args.whole and args.vocab % args.tp):
            raise SystemExit("--tp %d does not divide %s's %d KV heads / ffn %d / vocab %d" %
                             (args.tp, name, c["kv_heads"], c["ffn"], args.vocab))
    init = "file://" + os.path.join(tempfile.mkdtemp(), "torch_llama_init")
    mp.spawn(worker, args=(args, init), nprocs=args.tp, join=True)


if __name__ == "__main__":
    main()
