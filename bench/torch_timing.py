"""How the PyTorch baselines (torch_llama.py, torch_mlp.py, torch_prefill.py)
time and capture a step, in one place, so they measure the way the engine's
--bench and tpbench time ours: runs queued back to back on the stream, each
between two CUDA events, no host sync in between (a sync per run would add
the host's launch latency to PyTorch's side only), ranks starting together;
and the bandwidth the floors are computed at, measured as the engine does."""
import statistics

import torch
import torch.distributed as dist


def timed(fn, iters, warmup=0):
    """Median (us) of iters runs of fn queued back to back, each between two events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for s, e in ev:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1000.0 for s, e in ev)


def capture(fn):
    """fn captured in a torch.cuda.graph after a warm-up on a side stream
    (torch.cuda.graph's rules; a compiled fn compiles there), replayed once:
    (graph, the output of the captured call)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    g.replay()
    torch.cuda.synchronize()
    return g, out


def copy_bandwidth(nbytes=1 << 30, reps=20):
    """The device's practical HBM bandwidth, as the engine's --bench measures
    it: a device-to-device copy of nbytes (far beyond L2), bytes read plus
    bytes written over the median time of reps copies (bytes/s)."""
    a = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, e in ev:
        s.record()
        b.copy_(a)
        e.record()
    torch.cuda.synchronize()
    t = statistics.median(s.elapsed_time(e) for s, e in ev) * 1e-3
    del a, b
    torch.cuda.empty_cache()
    return 2.0 * nbytes / t


def datasheet_bandwidth():
    """Memory clock x bus width (bytes/s) where this PyTorch reports them, else 0."""
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    clk, bits = getattr(p, "memory_clock_rate", 0), getattr(p, "memory_bus_width", 0)
    return 2.0 * clk * 1e3 * bits / 8 if clk and bits else 0.0


def compile_limits(limit=1024):
    """torch.compile quietly runs a function eagerly once it has been
    recompiled recompile_limit times (8): a "compile" column would then time
    eager code in a graph. Raise the limit to what a sweep needs, and make a
    hit an error (reported as a failed compile) where this PyTorch can."""
    cfg = torch._dynamo.config
    for name, v in (("recompile_limit", limit), ("accumulated_recompile_limit", 4 * limit),
                    ("fail_on_recompile_limit_hit", True)):
        if hasattr(cfg, name):
            setattr(cfg, name, v)
    if not hasattr(cfg, "recompile_limit"):  # older names
        cfg.cache_size_limit = limit
        cfg.accumulated_cache_size_limit = 4 * limit
