"""What CUDA-graph capture costs PyTorch for vLLM's batch sizes: seconds to
capture and device memory held, for the plain step and under torch.compile
with a dynamic batch dimension, beside tpgraph's build time and memory for
the same sizes (--ours) in the same call.

The step is bench/torch_llama.py's Llama decode step (its Model: random
bf16 weights, TP 1), 32 layers at the 8B widths by default, every sequence
at position --ctx (512) of a KV cache sized for the largest batch: one
cache of [max batch, kv heads, ctx + 1, head dim] per layer, which each
batch size uses the first rows of (about 17 GB at 256 x 513 for 8B; the
weights about 14 GB), so it runs on an 80 GB H100.

Capture as vLLM does it: sizes largest first, every graph into ONE memory
pool (torch.cuda.graph_pool_handle()), each after --warmup eager runs of
its size on a side stream; the graphs and their outputs are kept alive, as
a serving engine keeps them. Measured per mode:
  seconds    wall time of the warm-ups and captures of all sizes (for
             "compile" the first runs compile: that is in it, and apart as
             compile_s)
  reserved   torch.cuda.memory_reserved() after less before: the pool and
             what the warm-ups left in the caching allocator
  device     free device memory before less after (torch.cuda.mem_get_info):
             the above plus what the driver allocated for the graph execs,
             cuBLAS workspaces and compiled kernels
"compile" is torch.compile(step, dynamic=True) with the batch dimension
marked dynamic (vLLM compiles once for a symbolic batch size and captures a
graph per size); --compile-per-size compiles each size on its own instead
(dynamic=False), and the script falls back to that when the dynamic
compile fails. A replay of one size is checked against the eager step.

--ours CMD runs CMD (with {out} replaced by a JSON path) between the modes
and reads tpgraph's figures from it: bench/set_bench's JSON ("graph per
size") or any JSON with top-level "build_s" and "measured_bytes".

  python3 bench/torch_capture.py --json torch_capture.json
  python3 bench/torch_capture.py --sizes 1,2,4,8 --layers 4 --modes plain   # a quick look
  python3 bench/torch_capture.py --ours ".gpu/bin/set_bench --json {out}"
"""
import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_llama import CONFIGS, EPS, THETA, Model  # noqa: E402

VLLM_SIZES = [1, 2, 4] + list(range(8, 257, 8))  # vLLM's 35 capture sizes


class Step:
    """The decode step over the first B rows of caches sized for max_batch:
    torch_llama.Model's math, with the batch taken from the input's shape
    (so one compile can serve every size)."""

    def __init__(self, m, max_batch, ctx, gen):
        dev, dt = m.dev, torch.bfloat16
        self.m, self.ctx, self.n = m, ctx, ctx + 1
        shape = (max_batch, m.hk, ctx + 1, m.hd)
        self.caches = [(torch.randn(shape, device=dev, generator=gen).to(dt),
                        torch.randn(shape, device=dev, generator=gen).to(dt)) for _ in m.layers]
        inv = 1.0 / (THETA ** (torch.arange(0, m.hd, 2, device=dev, dtype=torch.float32) / m.hd))
        ang = torch.arange(ctx + 1, device=dev, dtype=torch.float32)[:, None] * inv[None, :]
        emb = torch.cat([ang, ang], dim=-1)
        self.cos, self.sin = emb.cos().to(dt), emb.sin().to(dt)
        self.pos = torch.tensor([ctx], device=dev, dtype=torch.long)
        self.x = torch.randn(max_batch, m.H, device=dev, generator=gen).to(dt)  # the static input

    def __call__(self, x):
        m, B, hd, hq, hk, H = self.m, x.shape[0], self.m.hd, self.m.hq, self.m.hk, self.m.H
        cos = self.cos.index_select(0, self.pos).view(1, 1, 1, hd)
        sin = self.sin.index_select(0, self.pos).view(1, 1, 1, hd)

        def rope(t):
            t1, t2 = t[..., : hd // 2], t[..., hd // 2:]
            return t * cos + torch.cat([-t2, t1], dim=-1) * sin

        for l, (kc, vc) in zip(m.layers, self.caches):
            h = F.rms_norm(x, (H,), l["attn_norm"], EPS)
            q, k, v = (h @ l["wqkv"].t()).split([hq * hd, hk * hd, hk * hd], dim=-1)
            q = rope(q.view(B, hq, 1, hd))
            k = rope(k.view(B, hk, 1, hd))
            kb, vb = kc[:B], vc[:B]
            kb.index_copy_(2, self.pos, k)
            vb.index_copy_(2, self.pos, v.view(B, hk, 1, hd))
            o = F.scaled_dot_product_attention(q, kb[:, :, : self.n], vb[:, :, : self.n], enable_gqa=True)
            x = x + o.reshape(B, hq * hd) @ l["wo"].t()
            h = F.rms_norm(x, (H,), l["mlp_norm"], EPS)
            gate, up = (h @ l["wgu"].t()).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ l["wdown"].t()
        return F.rms_norm(x, (H,), m.final_norm, EPS)


def mem():
    """Free device memory and the caching allocator's reserve, with the
    cache's unused blocks given back first: torch.cuda.graph's entry does the
    same (gc, empty_cache), so blocks cached before the first capture would
    otherwise count against the captures (the difference came out negative)."""
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return torch.cuda.mem_get_info()[0], torch.cuda.memory_reserved()


def capture_all(fn, step, sizes, warmup, compiled):
    """Warm-ups and captures of every size, largest first, into one pool.
    Returns (graphs, outputs, seconds, compile seconds)."""
    pool = torch.cuda.graph_pool_handle()
    graphs, outs = {}, {}
    compile_s = 0.0
    t0 = time.perf_counter()
    side = torch.cuda.Stream()
    for B in sorted(sizes, reverse=True):
        x = step.x[:B]
        if compiled and B >= 2:  # a dimension of 1 is specialized by Dynamo: marking it would be an error
            torch._dynamo.mark_dynamic(x, 0)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(warmup):
                tw = time.perf_counter()
                fn(x)
                if compiled and i == 0:
                    torch.cuda.synchronize()
                    compile_s += time.perf_counter() - tw  # the first run of a shape compiles (or looks up)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            outs[B] = fn(x)
        graphs[B] = g
    torch.cuda.synchronize()
    return graphs, outs, time.perf_counter() - t0, compile_s


def check(step, graphs, outs, B):
    """One size's replay against the eager step (bf16 noise: other kernels
    round differently; a wrong step is off by far more)."""
    graphs[B].replay()
    torch.cuda.synchronize()
    got = outs[B].float().clone()
    ref = step(step.x[:B]).float()
    diff = (got - ref).abs().max().item()
    rel = ((got - ref).norm() / ref.norm()).item()
    return dict(batch=B, max_diff=diff, rel=rel, ok=bool(torch.isfinite(got).all().item()) and rel < 0.02)


def run_mode(mode, step, args):
    torch._dynamo.reset()
    fn, compiled = step, False
    if mode == "compile":
        torch._dynamo.config.cache_size_limit = 1024
        torch._dynamo.config.accumulated_cache_size_limit = 4096
        fn = torch.compile(step, dynamic=not args.compile_per_size)
        compiled = not args.compile_per_size
    free0, res0 = mem()
    note = ""
    try:
        graphs, outs, secs, csecs = capture_all(fn, step, args.sizes, args.warmup, compiled)
    except Exception as e:  # noqa: BLE001 - the dynamic compile failing is a result, then per size
        if mode != "compile" or args.compile_per_size:
            raise
        note = "dynamic compile failed (%s); compiled per size" % str(e).splitlines()[0][:160]
        print("torch_capture: " + note, flush=True)
        torch._dynamo.reset()
        torch.cuda.empty_cache()
        free0, res0 = mem()
        fn = torch.compile(step, dynamic=False)
        graphs, outs, secs, csecs = capture_all(fn, step, args.sizes, args.warmup, False)
    free1, res1 = mem()
    row = dict(mode=mode, sizes=len(args.sizes), seconds=secs, compile_s=csecs, reserved_bytes=res1 - res0,
               device_bytes=free0 - free1, check=check(step, graphs, outs, min(8, max(args.sizes))), note=note)
    del graphs, outs, fn
    torch._dynamo.reset()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return row


def run_ours(cmd):
    with tempfile.NamedTemporaryFile(suffix=".json", prefix="ours.", delete=False) as f:
        out = f.name
    r = subprocess.run(cmd.format(out=out), shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in r.stdout.splitlines()[-12:]:
        print("  ours| " + line, flush=True)
    try:
        with open(out) as f:
            j = json.load(f)
    except (OSError, ValueError) as e:
        return dict(mode="tpgraph", error="no JSON from `%s` (exit %d): %s" % (cmd, r.returncode, e))
    if "results" in j:  # bench/set_bench
        j = next(x for x in j["results"] if x["name"] == "graph per size")
    return dict(mode="tpgraph", seconds=j["build_s"], device_bytes=j["measured_bytes"],
                reserved_bytes=j.get("arena_bytes", 0), compile_s=0.0, sizes=None, note="")


def parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="8b", choices=sorted(CONFIGS))
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--sizes", default=",".join(map(str, VLLM_SIZES)),
                    help="batch sizes (default: vLLM's 35, 1..256)")
    ap.add_argument("--modes", default="plain,compile")
    ap.add_argument("--warmup", type=int, default=2, help="eager runs of each size before its capture")
    ap.add_argument("--compile-per-size", action="store_true", help="static shapes: one compile per size")
    ap.add_argument("--ours", default="", help="command writing tpgraph's JSON to {out}")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    try:
        args.sizes = sorted({int(s) for s in args.sizes.split(",") if s})
    except ValueError:
        ap.error("--sizes: expected integers separated by commas, e.g. 1,2,4,8")
    if not args.sizes or args.sizes[0] < 1 or args.layers < 1 or args.ctx < 1 or args.warmup < 1:
        ap.error("--sizes, --layers, --ctx and --warmup must be >= 1")
    args.modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in args.modes if m not in ("plain", "compile")]
    if bad:
        ap.error("--modes: unknown %s (expected plain, compile)" % ",".join(bad))
    return args


def main():
    args = parse()
    if not torch.cuda.is_available():
        raise SystemExit("torch_capture: no GPU")
    gen = torch.Generator(device="cuda").manual_seed(1234)
    m = Model(CONFIGS[args.config], args.layers, 1, gen)
    step = Step(m, max(args.sizes), args.ctx, gen)
    torch.cuda.synchronize()
    rows = []
    for i, mode in enumerate(args.modes):
        rows.append(run_mode(mode, step, args))
        print("%s: %.2f s, reserved %.1f MiB, device %.1f MiB, check %s" % (
            mode, rows[-1]["seconds"], rows[-1]["reserved_bytes"] / 2**20, rows[-1]["device_bytes"] / 2**20,
            "ok" if rows[-1]["check"]["ok"] else "WRONG %s" % rows[-1]["check"]), flush=True)
        if args.ours and i == 0:
            rows.append(run_ours(args.ours))
    if args.ours and not args.modes:
        rows.append(run_ours(args.ours))
    meta = dict(torch=torch.__version__, gpu=torch.cuda.get_device_name(0), config=args.config, layers=args.layers,
                ctx=args.ctx, sizes=args.sizes, warmup=args.warmup, date=time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                       time.gmtime()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, results=rows), f, indent=1)
    print("\nCUDA-graph capture, %s, %d layers (%s), ctx %d, %d sizes %d..%d, one pool, largest first (%s)" % (
        meta["gpu"], args.layers, args.config, args.ctx, len(args.sizes), args.sizes[0], args.sizes[-1],
        meta["torch"]))
    print("%-10s %10s %10s %14s %14s  %s" % ("mode", "seconds", "compile s", "reserved MiB", "device MiB", "check"))
    for r in rows:
        if "error" in r:
            print("%-10s %s" % (r["mode"], r["error"]))
            continue
        c = r.get("check")
        print("%-10s %10.2f %10.2f %14.1f %14.1f  %s%s" % (
            r["mode"], r["seconds"], r["compile_s"], r["reserved_bytes"] / 2**20, r["device_bytes"] / 2**20,
            "-" if not c else "ok (rel %.1e)" % c["rel"] if c["ok"] else "WRONG (rel %.1e)" % c["rel"],
            "; " + r["note"] if r.get("note") else ""))


if __name__ == "__main__":
    main()
