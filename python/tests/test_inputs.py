"""Every value that crosses ctypes is checked first, on a machine without a
GPU (CI): ctypes wraps an int into its C type (2**64 + 16 became a count of
16; slot + 2**32 became slot, skipping that slot's buffer check) and ends a
string at its first NUL ("y\\0evil" named the slot "y"). Each case must be
refused in Python, before C runs, with InvalidArgument (a ValueError) or
TypeError naming the argument; a legal value still reaches C."""

import ctypes

import pytest

import tpgraph as tpg
from tpgraph.bindings import slot_table

from test_bindings import FakeTensor, gemm_plan, good, M, N, K


def invalid(match):
    return pytest.raises(tpg.InvalidArgument, match=match)


def test_counts_wider_than_size_t_or_negative():
    with tpg.Plan() as p:
        with invalid(r"add_slot: count: 18446744073709551632 is outside 0\.\.18446744073709551615"):
            p.add_slot("x", "bf16", 2 ** 64 + 16)
        with invalid("add_slot: count: -1 is outside"):
            p.add_slot("x", "bf16", -1)
        with pytest.raises(TypeError, match="add_slot: count: 16.0 is not an integer"):
            p.add_slot("x", "bf16", 16.0)
        with pytest.raises(TypeError, match="add_slot: count: True is a bool"):
            p.add_slot("x", "bf16", True)
        x = p.add_slot("x", "f32", 64)
        with invalid("add_memset: value: 4294967296 is outside"):
            p.add_memset(x, 2 ** 32, 64)
        with invalid("add_memcpy: count"):
            p.add_memcpy(x, x, 2 ** 64)
        with invalid("add_axpby: count"):
            p.add_axpby(x, x, -64)
        with invalid("add_gemm: m: 2147483648 is outside"):
            p.add_gemm(2 ** 31, 8, 8, x, x, x)
        with invalid("add_collective: count"):
            p.add_collective("all_reduce", x, x, 2 ** 64 + 64)
        with invalid("add_concat_cols: rows"):
            p.add_concat_cols(x, x, 2, 2 ** 32 + 4, 8)
        with invalid("set_ranks: nranks: 4294967298 is outside"):
            p.set_ranks(2 ** 32 + 2)
        assert p.stats()["slots"] == 1  # nothing above reached C


def test_slot_ids_views_and_nodes_in_range():
    with tpg.Plan() as p:
        x = p.add_slot("x", "f32", 64)
        with invalid("view: slot id: 4294967297 is outside"):
            p.add_memset(x + 2 ** 32, 0, 64)    # would have been slot x
        with invalid("view: slot id: -1 is outside"):
            p.add_memset(-1, 0, 64)
        with invalid("view: offset: 18446744073709551616 is outside"):
            p.add_memset((x, 2 ** 64), 0, 64)
        n = p.add_memset(x, 0, 64)
        with invalid(r"deps\[1\]: 18446744073709551616 is outside"):
            p.add_empty(deps=[n, 2 ** 64])
        with invalid("add_dependency: before: -1 is outside"):
            p.add_dependency(-1, n)
        with invalid("set_node_name: node"):
            p.set_node_name(n + 2 ** 64, "a")
        with invalid("slot_info: slot: 4294967297"):
            p.slot_info(x + 2 ** 32)
        with invalid("dtype: 4294967298 is outside"):
            p.add_slot("y", 2 ** 32 + 2, 8)         # would have been bf16
        with invalid("memory: -4294967296 is outside"):
            p.add_slot("y", "bf16", 8, memory=-2 ** 32)


def test_names_with_nul_refused():
    with tpg.Plan() as p:
        with invalid(r"add_slot: name: 'y\\x00evil' holds a NUL byte \(C would read only b'y'\)"):
            p.add_slot("y\0evil", "bf16", 16)
        p.add_slot("y", "bf16", 16)
        with invalid("slot: name: .* holds a NUL byte"):
            p.slot("y\0")
        n = p.add_memset("y", 0, 16)
        with invalid("set_node_name: name"):
            p.set_node_name(n, "a\0b")
        with pytest.raises(TypeError, match="add_slot: name: 5 is not a string"):
            p.add_slot(5, "bf16", 16)
        assert p.stats()["slots"] == 1
    with invalid("add_linear: name"):
        with tpg.Plan() as q:
            for s in ("x", "w", "y"):
                q.add_slot(s, "bf16", 64 * 64)
            q.add_linear("column", "x", "w", "y", 8, 64, 64, name="proj\0x")
    with invalid("mlp_slot: name"):
        tpg.mlp_slot("x\0y", kind="gelu", layers=1, tokens=8, hidden=64, ffn=256)
    with invalid("comm_id_write_file: path"):
        tpg.comm_id_write_file(bytes(128), "/tmp/id\0x")
    with invalid("comm_id_read_file: path"):
        tpg.comm_id_read_file("/tmp/id\0x")


def test_every_binding_checked_whatever_its_key():
    # slot + 2**32 was narrowed to slot by ctypes after the Python lookup
    # missed it: a 4-element f32 tensor reached a bf16 slot unchecked.
    with gemm_plan() as p:
        x = p.slot("x")
        small = FakeTensor("torch.float32", 4)
        for key in (x + 2 ** 32, -1):
            b = good()
            b[key] = small
            with invalid(r"Graph\(\): binding key"):
                tpg.Graph(p, 0, b)
        b = good()
        b[x] = small  # the id itself: the buffer's check applies
        with invalid('Graph\\(\\): binding of slot "x": expected bf16'):
            tpg.Graph(p, 0, b)
        g = tpg.Graph._borrow(0x10, None, slot_table(p.handle), 0)
        for key in (True, 1.0):
            with pytest.raises(TypeError, match="binding key"):
                g.rebind({key: good()["x"]})
        with invalid(r"Graph.rebind\(\): binding of slot \"x\": address: 18446744073709551616 is outside"):
            g.rebind({"x": 2 ** 64})
        with invalid("binding of slot id 9: address"):
            g.rebind({9: -5})
        with invalid("not a live tpg_graph"):
            g.rebind({9: 0x1000})  # an id the plan lacks: C's to refuse, by name
        with invalid("flags"):
            tpg.Graph(p, 0, good(), flags=2 ** 32)
        with invalid("Graph\\(\\): device"):
            tpg.Graph(p, 2 ** 32, good())


def test_buckets_sizes_and_bindings():
    mlp = dict(kind="gelu", layers=1, tokens=16, hidden=64, ffn=256, rank=0, nranks=1)
    with tpg.Plan.mlp(**mlp) as p:
        slots = {s.name: s for s in slot_table(p.handle).values()}
    b = {n: FakeTensor("torch.bfloat16", s.count) for n, s in slots.items() if s.where != tpg.MEM_SCRATCH}
    with invalid(r"MlpBuckets\(\): sizes\[1\]: 4294967304 is outside"):
        tpg.MlpBuckets([4, 2 ** 32 + 8], 0, b, **mlp)
    b[slots["x"].id + 2 ** 32] = FakeTensor("torch.float32", 4)
    with invalid(r"MlpBuckets\(\): binding key"):
        tpg.MlpBuckets([4, 8], 0, b, **mlp)
    with invalid("mlp: tokens: 4294967312 is outside"):
        tpg.Plan.mlp(**dict(mlp, tokens=2 ** 32 + 16))


def test_comm_and_device_ints():
    cid = tpg.comm_id_create()
    with invalid(r"Comm\(\): rank: 4294967296 is outside"):
        tpg.Comm(cid, 2 ** 32, 2, 0)
    with invalid(r"Comm\(\): timeout_ms"):
        tpg.Comm(cid, 0, 2, 0, timeout_ms=-2 ** 40)
    with invalid("comm_id_read_file: timeout_ms"):
        tpg.comm_id_read_file("/nonexistent/id", 2 ** 31)
    with invalid("device_info: device: 4294967296 is outside"):
        tpg.device_info(2 ** 32)
    with pytest.raises(ValueError, match="stream"):
        from tpgraph.streams import stream_handle
        stream_handle(2 ** 64)


def test_shard_helpers_check_their_buffers():
    # tpg_linear_shard and tpg_mlp_shard_layer copy on the GPU from and into
    # plain addresses: a tensor of the wrong dtype or too few elements is
    # refused here, as Graph refuses it, before C sees it.
    IN, OUT, R = 64, 32, 2
    whole = {"w": FakeTensor("torch.bfloat16", OUT * IN), "bias": FakeTensor("torch.bfloat16", OUT)}
    part = {"w": FakeTensor("torch.bfloat16", OUT // R * IN), "bias": FakeTensor("torch.bfloat16", OUT // R)}
    args = ("column", 4, IN, OUT, 0, R, 0)
    with invalid(r"shard_linear\(\): whole\['w'\]: expected bf16 device memory of GPU 0, at least 2048 elements"):
        tpg.shard_linear(*args, dict(whole, w=FakeTensor("torch.bfloat16", OUT * IN - 8)), part, bias=True)
    with invalid(r"shard_linear\(\): part\['w'\]: expected bf16.*torch.float32"):
        tpg.shard_linear(*args, whole, dict(part, w=FakeTensor("torch.float32", OUT * IN)), bias=True)
    with invalid(r"shard_linear\(\): part\['bias'\]: expected bf16 device memory of GPU 0, at least 16"):
        tpg.shard_linear(*args, whole, dict(part, bias=FakeTensor("torch.bfloat16", 8)), bias=True)
    with invalid(r"part\['w'\].*cuda:1"):
        tpg.shard_linear(*args, whole, dict(part, w=FakeTensor("torch.bfloat16", OUT * IN, device="cuda:1")),
                         bias=True)
    with invalid(r"shard_linear\(\): whole\['weight'\]: not one of"):
        tpg.shard_linear(*args, {"weight": whole["w"]}, part)
    with invalid(r"shard_linear\(\): rank: 4294967296"):
        tpg.shard_linear("column", 4, IN, OUT, 2 ** 32, R, 0, whole, part)
    # ROW: the part is [out, in/R], the bias whole
    with invalid(r"part\['w'\]: expected bf16 device memory of GPU 0, at least 1024 elements"):
        tpg.shard_linear("row", 4, IN, OUT, 0, R, 0, whole, dict(part, w=FakeTensor("torch.bfloat16", 1000)))
    mlp = dict(kind="swiglu", layers=1, tokens=4, hidden=64, ffn=256, rank=0, nranks=2, bias=False)
    w = {"w1": FakeTensor("torch.bfloat16", 256 * 64), "w1_up": FakeTensor("torch.bfloat16", 256 * 64),
         "w2": FakeTensor("torch.bfloat16", 64 * 256)}
    r = {"w1": FakeTensor("torch.bfloat16", 128 * 64), "w2": FakeTensor("torch.bfloat16", 64 * 128)}
    with invalid(r"shard_mlp_layer\(\): part\['w1'\]: expected bf16 device memory of GPU 0, at least 16384"):
        tpg.shard_mlp_layer(0, w, dict(r, w1=FakeTensor("torch.bfloat16", 128 * 64)), **mlp)
    r["w1"] = FakeTensor("torch.bfloat16", 2 * 128 * 64)  # SWIGLU: gate rows, then up rows
    with invalid(r"shard_mlp_layer\(\): whole\['w1_up'\]: expected bf16.*torch.float16"):
        tpg.shard_mlp_layer(0, dict(w, w1_up=FakeTensor("torch.float16", 256 * 64)), r, **mlp)
    if tpg.runtime_info()["device_count"] == 0:  # the right buffers reach C, which has no GPU
        with pytest.raises(tpg.NoDevice):
            tpg.shard_mlp_layer(0, w, r, **mlp)
        with pytest.raises(tpg.NoDevice):
            tpg.shard_linear(*args, whole, part, bias=True)


def test_c_would_have_wrapped_these():
    # What the checks stop, shown with ctypes alone.
    b = tpg._native.Binding()
    b.slot = 7 + 2 ** 32
    assert b.slot == 7
    d = ctypes.c_size_t(2 ** 64 + 16)
    assert d.value == 16
    assert ctypes.c_char_p(b"y\0evil").value == b"y"
