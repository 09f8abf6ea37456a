"""PyTorch baseline for tpbench: the same tensor-parallel MLP stack, one
process per GPU, eager, torch.cuda.graph, and the stack under torch.compile
(Inductor, default mode, static shapes) captured in torch.cuda.graph, each
with and without the all-reduce (at TP 1 there is none: a TP-1 user calls no
collective, so both columns are the same stack).

Per rank and layer (Megatron):  h = gelu_tanh(x W1_r^T + b1_r); p = h W2_r^T;
all_reduce(p); x = x + p + b2.  SwiGLU: h = silu(x Wg_r^T) * (x Wu_r^T).
Prints one line per (hidden, ffn, tokens) from rank 0:
    TORCH hidden ffn tokens eager_us graph_us eager_noar_us graph_noar_us compile_us compile_noar_us
(microseconds per layer, median of --reps runs of the whole stack queued
back to back between events; --no-compile leaves the last two out).
"""
import argparse
import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from torch_timing import capture, timed


def stack(x, layers, kind, comm):
    for w1, b1, w2, b2 in layers:
        if kind == "gelu":
            h = torch.nn.functional.gelu(torch.addmm(b1, x, w1.t()), approximate="tanh")
        else:
            gu = x @ w1.t()
            g, u = gu.chunk(2, dim=-1)
            h = torch.nn.functional.silu(g) * u
        p = h @ w2.t()
        if comm and dist.get_world_size() > 1:
            dist.all_reduce(p)
        x = x + p if b2 is None else x + p + b2
    return x


def worker(rank, args, initfile):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="file://" + initfile, rank=rank, world_size=args.tp,
                            device_id=torch.device("cuda", rank))
    dt = torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(1234 + rank)
    compiled = None
    if not args.no_compile:
        torch._dynamo.config.cache_size_limit = 1024  # one compile per (shape, token count, comm)
        torch._dynamo.config.accumulated_cache_size_limit = 4096
        compiled = torch.compile(stack, dynamic=False)
    for H, F in zip(args.hidden, args.ffn):
        Fr = F // args.tp
        F1 = 2 * Fr if args.kind == "swiglu" else Fr
        layers = []
        for _ in range(args.layers):
            w1 = (torch.rand(F1, H, device="cuda", generator=gen, dtype=dt) - 0.5) * 0.02
            w2 = (torch.rand(H, Fr, device="cuda", generator=gen, dtype=dt) - 0.5) * 0.02
            b1 = torch.rand(F1, device="cuda", generator=gen, dtype=dt) * 0.01 if args.kind == "gelu" else None
            b2 = torch.rand(H, device="cuda", generator=gen, dtype=dt) * 0.01 if args.kind == "gelu" else None
            layers.append((w1, b1, w2, b2))
        for M in args.tokens:
            x = torch.rand(M, H, device="cuda", generator=gen, dtype=dt)
            out = {}
            for comm in (True, False):
                for _ in range(3):
                    stack(x, layers, args.kind, comm)
                torch.cuda.synchronize()
                out[("eager", comm)] = timed(lambda: stack(x, layers, args.kind, comm), args.reps)
                g, _ = capture(lambda: stack(x, layers, args.kind, comm))
                out[("graph", comm)] = timed(g.replay, args.reps)
                del g
                if compiled:
                    g, _ = capture(lambda: compiled(x, layers, args.kind, comm))
                    out[("compile", comm)] = timed(g.replay, args.reps)
                    del g
            if rank == 0:
                L = args.layers
                cols = [out[("eager", True)], out[("graph", True)], out[("eager", False)], out[("graph", False)]]
                if compiled:
                    cols += [out[("compile", True)], out[("compile", False)]]
                print("TORCH %d %d %d " % (H, F, M) + " ".join("%.2f" % (v / L) for v in cols), flush=True)
        del layers
        torch.cuda.empty_cache()
    dist.barrier()
    dist.destroy_process_group()


def ints(s):
    return [int(v) for v in s.split(",") if v]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tp", type=int, default=torch.cuda.device_count())
    ap.add_argument("--hidden", type=ints, default=[8192, 4096])
    ap.add_argument("--ffn", type=ints, default=[28672, 14336])
    ap.add_argument("--tokens", type=ints, default=[1, 16, 128, 1024])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--kind", choices=["gelu", "swiglu"], default="gelu")
    ap.add_argument("--no-compile", action="store_true", help="leave out the torch.compile + graph columns")
    args = ap.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    initfile = os.path.join(tempfile.mkdtemp(), "torch_mlp_init")
    mp.spawn(worker, args=(args, initfile), nprocs=args.tp, join=True)


if __name__ == "__main__":
    main()
