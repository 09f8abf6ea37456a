"""How the PyTorch baselines (torch_llama.py, torch_mlp.py) time and capture
a step, in one place, so both measure the way the engine's --bench and
tpbench time ours: runs queued back to back on the stream, each between two
CUDA events, no host sync in between (a sync per run would add the host's
launch latency to PyTorch's side only), ranks starting together."""
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
