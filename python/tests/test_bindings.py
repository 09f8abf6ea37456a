"""Every binding checked against its slot, on a machine without a GPU (CI):
the table of wrong bindings (WRONG) with stand-in tensors (objects with
torch's tensor attributes; torch itself is not needed). A refused binding raises
InvalidArgument (a ValueError) naming the slot, what it expected and what it
got, before C sees it; a legal one passes the Python checks and reaches C,
which then says there is no GPU (creation) or no live graph (rebind on a
handle that is not a graph). test_gpu_bindings.py runs the same table with
real torch tensors on a GPU."""

import pytest

import tpgraph as tpg
from tpgraph.bindings import check_buffer, slot_table

M, N, K = 16, 64, 32


class Dev:
    def __init__(self, type_, index=None):
        self.type, self.index = type_, index

    def __str__(self):
        return self.type if self.index is None else "%s:%d" % (self.type, self.index)


class FakeTensor:
    """What the checks read of a torch.Tensor: dtype, numel, element_size,
    device, data_ptr, is_contiguous, stride, is_pinned."""
    SIZES = {"torch.bfloat16": 2, "torch.float16": 2, "torch.float32": 4, "torch.int8": 1, "torch.float64": 8}

    def __init__(self, dtype, numel, device="cuda:0", ptr=0x7f0000000000, contiguous=True, pinned=False):
        self.dtype = dtype
        self._n = numel
        t, _, i = device.partition(":")
        self.device = Dev(t, int(i) if i else (0 if t == "cuda" else None))
        self._ptr, self._contig, self._pinned = ptr, contiguous, pinned

    def data_ptr(self):
        return self._ptr

    def numel(self):
        return self._n

    def element_size(self):
        return self.SIZES[self.dtype]

    def is_contiguous(self):
        return self._contig

    def stride(self):
        return (1, 2) if not self._contig else (1,)

    def is_pinned(self):
        return self._pinned


class Cai:
    def __init__(self, typestr, shape, strides=None):
        self.__cuda_array_interface__ = {"data": (0x7e0000000000, False), "shape": shape, "typestr": typestr,
                                         "strides": strides, "version": 3}


def gemm_plan(host_y=False):
    p = tpg.Plan()
    p.add_slot("x", "bf16", M * K)
    p.add_slot("w", "bf16", N * K)
    p.add_slot("y", "bf16", M * N, memory="host" if host_y else "device")
    if not host_y:
        p.add_gemm(M, N, K, "x", "w", "y")
    return p


def good():
    return {"x": FakeTensor("torch.bfloat16", M * K), "w": FakeTensor("torch.bfloat16", N * K),
            "y": FakeTensor("torch.bfloat16", M * N)}


# (slot, buffer, words the message must hold) for every kind of wrong binding:
# too few elements, wrong dtype, wrong device, not contiguous, through torch's
# tensor attributes and through __cuda_array_interface__.
WRONG = [
    ("x", FakeTensor("torch.bfloat16", M * K // 2), ["at least %d elements" % (M * K), "%d elements" % (M * K // 2)]),
    ("x", FakeTensor("torch.float32", M * K), ["bf16", "torch.float32"]),
    ("x", FakeTensor("torch.float16", M * K), ["bf16", "torch.float16"]),
    ("y", FakeTensor("torch.int8", M * N * 2), ["bf16", "torch.int8"]),
    ("x", FakeTensor("torch.bfloat16", M * K, device="cpu"), ["device memory of GPU 0", "on cpu"]),
    ("x", FakeTensor("torch.bfloat16", M * K, device="cuda:1"), ["device memory of GPU 0", "cuda:1"]),
    ("x", FakeTensor("torch.bfloat16", M * K, contiguous=False), ["non-contiguous"]),
    ("x", FakeTensor("torch.float64", M * K // 4), ["bf16", "torch.float64"]),
    ("x", Cai("<f4", (M * K,)), ["bf16", "'<f4'"]),
    ("x", Cai("<V2", (M * K // 2,)), ["at least %d elements" % (M * K)]),
    ("x", Cai("<V2", (K, M), strides=(2, 2 * K)), ["not C-contiguous"]),
]


def _refused(excinfo, call, slot, words):
    msg = str(excinfo.value)
    assert isinstance(excinfo.value, ValueError) and excinfo.value.status == tpg.errors.INVALID_ARGUMENT
    assert msg.startswith("TPG_ERROR_INVALID_ARGUMENT: %s: binding of slot \"%s\": expected " % (call, slot)), msg
    for w in words:
        assert w in msg, "%r not in %r" % (w, msg)


def _no_gpu():
    return tpg.runtime_info()["device_count"] == 0


@pytest.mark.parametrize("slot,buf,words", WRONG, ids=[str(i) for i in range(len(WRONG))])
def test_wrong_binding_refused_at_create(slot, buf, words):
    with gemm_plan() as p:
        b = good()
        b[slot] = buf
        with pytest.raises(tpg.InvalidArgument) as e:
            tpg.Graph(p, 0, b)
        _refused(e, "Graph()", slot, words)


@pytest.mark.parametrize("slot,buf,words", WRONG, ids=[str(i) for i in range(len(WRONG))])
def test_wrong_binding_refused_at_rebind_and_update(slot, buf, words):
    # A graph handle that is not live: C refuses it without reading it, so
    # a binding that passes the Python checks ends in that message instead.
    with gemm_plan() as p:
        g = tpg.Graph._borrow(0x10, None, slot_table(p.handle), 0)
        with pytest.raises(tpg.InvalidArgument) as e:
            g.rebind({slot: buf})
        _refused(e, "Graph.rebind()", slot, words)
        with pytest.raises(tpg.InvalidArgument) as e:
            g.update(bindings={slot: buf})
        _refused(e, "Graph.update()", slot, words)
        with pytest.raises(tpg.InvalidArgument, match="not a live tpg_graph"):
            g.rebind({slot: good()[slot]})  # legal: passes, by name, after creation


def test_legal_bindings_reach_c():
    # A view at an offset of a bigger tensor is a tensor of its own size;
    # a larger buffer than the slot is fine; int addresses are not checked.
    with gemm_plan() as p:
        b = good()
        b["x"] = FakeTensor("torch.bfloat16", M * K, ptr=0x7f0000000000 + 128)
        b["w"] = FakeTensor("torch.bfloat16", N * K + 100)
        b["y"] = 0x7f0000100000
        if _no_gpu():
            with pytest.raises(tpg.NoDevice):
                tpg.Graph(p, 0, b)
        g = tpg.Graph._borrow(0x10, None, slot_table(p.handle), 0)
        with pytest.raises(tpg.InvalidArgument, match="not a live tpg_graph"):
            g.rebind({"x": b["x"], 2: b["w"], "y": 0x7f0000200000})


def test_unknown_names_and_non_buffers():
    with gemm_plan() as p:
        g = tpg.Graph._borrow(0x10, None, slot_table(p.handle), 0)
        with pytest.raises(tpg.InvalidArgument, match='no slot named "z"'):
            g.rebind({"z": 0x1000})
        for bad in ("a string", 1.5, True, None):
            with pytest.raises(TypeError, match='slot "x"'):
                g.rebind({"x": bad})
        # The int 0 passes Python and is C's to refuse (a NULL pointer).
        with pytest.raises(tpg.InvalidArgument, match="not a live tpg_graph"):
            g.rebind({"x": 0})


def test_host_slot_needs_pinned_memory():
    with gemm_plan(host_y=True) as p:
        spec = slot_table(p.handle)[3]
        assert spec.name == "y" and spec.where == tpg.MEM_HOST
        for buf, word in ((FakeTensor("torch.bfloat16", M * N, device="cpu"), "not pinned"),
                          (FakeTensor("torch.bfloat16", M * N), "cuda:0"),
                          (Cai("<V2", (M * N,)), "CUDA array")):
            with pytest.raises(tpg.InvalidArgument, match="pinned host memory") as e:
                check_buffer(buf, spec, 0, "Graph()")
            assert word in str(e.value)
        assert check_buffer(FakeTensor("torch.bfloat16", M * N, device="cpu", pinned=True, ptr=0x5000), spec, 0,
                            "Graph()") == 0x5000


def test_update_checks_kept_tensors_against_the_new_plan():
    # The new plan's x is larger: the tensor kept bound to x no longer covers it.
    with gemm_plan() as p, tpg.Plan() as bigger:
        bigger.add_slot("x", "bf16", 2 * M * K)
        bigger.add_slot("w", "bf16", N * K)
        bigger.add_slot("y", "bf16", M * N)
        bigger.add_gemm(M, N, K, "x", "w", "y")
        g = tpg.Graph._borrow(0x10, None, slot_table(p.handle), 0)
        g._held.update({1: FakeTensor("torch.bfloat16", M * K)})
        with pytest.raises(tpg.InvalidArgument) as e:
            g.update(bigger)
        _refused(e, "Graph.update()", "x", ["at least %d elements" % (2 * M * K)])
        with pytest.raises(tpg.InvalidArgument, match="not a live tpg_graph"):
            g.update(bigger, {"x": FakeTensor("torch.bfloat16", 2 * M * K)})


def test_buckets_check_their_bindings():
    mlp = dict(kind="gelu", layers=1, tokens=16, hidden=64, ffn=256, rank=0, nranks=1)
    with tpg.Plan.mlp(**mlp) as p:
        slots = {s.name: s for s in slot_table(p.handle).values()}
    b = {n: FakeTensor("torch.bfloat16", s.count) for n, s in slots.items() if s.where != tpg.MEM_SCRATCH}
    b["x"] = FakeTensor("torch.bfloat16", 8 * 64)  # a bucket's size, not the largest
    with pytest.raises(tpg.InvalidArgument) as e:
        tpg.MlpBuckets([4, 8], 0, b, **mlp)
    _refused(e, "MlpBuckets()", "x", ["at least %d elements" % (16 * 64)])
    b["x"] = FakeTensor("torch.float16", 16 * 64)
    with pytest.raises(tpg.InvalidArgument, match="torch.float16"):
        tpg.MlpBuckets([4, 8], 0, b, **mlp)


def test_slot_info_and_dtype_mapping():
    with gemm_plan() as p:
        assert p.slot_info("x") == {"id": 1, "name": "x", "dtype": "bf16", "memory": "device", "count": M * K,
                                    "bytes": 2 * M * K}
        assert p.slot_info(3)["name"] == "y"
        with pytest.raises(ValueError):
            p.slot_info(9)
    assert [tpg.dtype_name(d) for d in (tpg.F32, tpg.F16, tpg.BF16)] == ["f32", "f16", "bf16"]
    assert tpg.types.dtype("torch.bfloat16") == tpg.BF16 and tpg.TORCH_DTYPES["float16"] == tpg.F16

