"""A row-parallel linear + all-reduce through the binding on 2 GPUs, checked
against an fp64 torch reference, one process per GPU (torch.multiprocessing)
with the comm id's bytes passed by torch.distributed (gloo, no GPU needed for
that). Runs under pytest or alone:

    TPGRAPH_LIBRARY=.../libtpgraph.so python python/tests/test_gpu_tp.py

Per rank r of R=2: x_r = X[:, r*K:(r+1)*K], w_r = W[:, r*K:(r+1)*K] (K = IN/R);
tpgraph computes y = sum_r x_r w_r^T + b + residual on every rank (rank 0's
GEMM adds b and the residual, then the all-reduce). Bound per element, with
u = 2^-8 (bf16 rounding): each rank's partial p_r is rounded once and the sum
once, and fp32 accumulation over K adds at most K * 2^-23 * sum |x||w|:
    |y - ref| <= u * (|p_0| + |p_1| + |ref|) + K * 2^-23 * (|x| |w|^T)
Outputs are poisoned with NaN before every launch, so a node that did not
run fails the check. Checked for algo auto (our one-shot kernel at this size)
and nccl, for a first launch, after a rebind of x, and on a side stream."""
import os
import socket
import sys

try:  # pytest is optional: the GPU machine may run this file alone
    import pytest
except ImportError:
    pytest = None
try:
    import torch
except ImportError:
    if pytest is None or __name__ == "__main__":
        raise
    pytest.skip("needs torch", allow_module_level=True)

R = 2
T, IN, OUT = 8, 2048, 1024
U = 2.0 ** -8


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _data(seed):
    g = torch.Generator().manual_seed(seed)
    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(torch.bfloat16)
    return rnd(T, IN), rnd(OUT, IN, scale=IN ** -0.5), rnd(OUT), rnd(T, OUT)


def _check(rank, y, X, W, b, res, what):
    K = IN // R
    Xd, Wd = X.double(), W.double()
    parts = [Xd[:, i * K:(i + 1) * K] @ Wd[:, i * K:(i + 1) * K].T for i in range(R)]
    parts[0] = parts[0] + b.double() + res.double()
    ref = sum(parts)
    absprod = Xd.abs() @ Wd.abs().T
    # (1 + U): the sum is rounded from the rounded partials, not from ref.
    tol = U * (1 + U) * (sum(p.abs() for p in parts) + ref.abs()) + K * 2.0 ** -23 * absprod
    got = y.double().cpu()
    err = (got - ref).abs()
    nan = torch.isnan(got).sum().item()
    excess = (err - tol).max().item()
    rel = (torch.linalg.norm(got - ref) / torch.linalg.norm(ref)).item()
    # torch's own bf16 linear on one GPU, for scale: its error against fp64.
    tb = (torch.nn.functional.linear(X.cuda(rank), W.cuda(rank), b.cuda(rank)) + res.cuda(rank)).double().cpu()
    terr = (tb - ref).abs().max().item()
    print("rank %d %-22s max err %.3e (bound %.3e), rel norm %.2e, torch bf16 max err %.3e, NaN %d"
          % (rank, what, err.max().item(), tol.max().item(), rel, terr, nan), flush=True)
    assert nan == 0, "%s: %d outputs never written" % (what, nan)
    assert excess <= 0, "%s: error exceeds the bound by %.3e" % (what, excess)


def _rank(rank, port):
    import torch.distributed as dist
    import tpgraph as tpg

    torch.cuda.set_device(rank)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=R)
    box = [tpg.comm_id_create() if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    comm = tpg.Comm(box[0], rank, R, device=rank)
    if rank == 0:
        # In a torch process tpgraph shares torch's libnccl.so.2 (same soname,
        # loaded first): say which NCCL actually ran.
        ri = tpg.runtime_info()
        print("tpgraph %s from %s: NCCL %d (torch's %s), driver %d, kernels %s"
              % (tpg.__version__, tpg.library_path, ri["nccl_version"], ".".join(map(str, torch.cuda.nccl.version())),
                 ri["driver_version"], ri["kernel_archs"]), flush=True)
    K = IN // R
    dev = torch.device("cuda", rank)
    X, W, b, res = _data(1)
    X2 = _data(2)[0]
    x = X[:, rank * K:(rank + 1) * K].contiguous().to(dev)
    x2 = X2[:, rank * K:(rank + 1) * K].contiguous().to(dev)
    w = W[:, rank * K:(rank + 1) * K].contiguous().to(dev)
    bd, rd = b.to(dev), res.to(dev)
    y = torch.empty(T, OUT, dtype=torch.bfloat16, device=dev)
    for algo in ("auto", "nccl"):
        with tpg.Plan() as plan:
            plan.add_slot("x", "bf16", T * K)
            plan.add_slot("w", "bf16", OUT * K)
            plan.add_slot("b", "bf16", OUT)
            plan.add_slot("res", "bf16", T * OUT)
            plan.add_slot("y", "bf16", T * OUT)
            plan.add_linear("row", x="x", w="w", y="y", bias="b", residual="res", tokens=T, in_features=IN,
                            out_features=OUT, rank=rank, nranks=R, dtype=torch.bfloat16, algo=algo)
            graph = tpg.Graph(plan, rank, {"x": x, "w": w, "b": bd, "res": rd, "y": y}, comm=comm)
        info = graph.info()
        print("rank %d algo %s: %d nodes (%d kernel, %d NCCL child), workspace %d bytes"
              % (rank, algo, info["nodes"], info["kernel_nodes"], info["child_nodes"], info["workspace_bytes"]))
        y.fill_(float("nan"))
        graph.launch()                       # torch.cuda.current_stream()
        comm.wait()
        _check(rank, y, X, W, b, res, algo + " launch")
        graph.rebind({"x": x2})
        y.fill_(float("nan"))
        graph.launch()
        torch.cuda.current_stream().synchronize()
        _check(rank, y, X2, W, b, res, algo + " after rebind")
        side = torch.cuda.Stream()
        y.fill_(float("nan"))
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                graph.launch()               # on the side stream, torch's current one here
        side.synchronize()
        _check(rank, y, X2, W, b, res, algo + " side stream x3")
        graph.close()
    comm.close()
    dist.destroy_process_group()


def _skip_reason():
    if not torch.cuda.is_available() or torch.cuda.device_count() < R:
        return "needs %d GPUs" % R
    if min(torch.cuda.get_device_capability(i)[0] for i in range(R)) < 8:
        return "needs sm_80 or newer"
    return None


def test_row_parallel_linear_two_gpus():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    import torch.multiprocessing as mp
    mp.spawn(_rank, args=(_free_port(),), nprocs=R, join=True)


if __name__ == "__main__":
    reason = _skip_reason()
    if reason:
        print("python gpu test: SKIPPED (%s)" % reason)
        sys.exit(0)
    import torch.multiprocessing as mp
    mp.spawn(_rank, args=(_free_port(),), nprocs=R, join=True)
    print("python gpu test: passed (%d ranks, row-parallel linear %dx%d, T=%d, auto + nccl, rebind, side stream)"
          % (R, OUT, IN, T))
