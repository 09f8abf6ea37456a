"""The binding on a machine without a GPU (CI): the ABI mirrors match the
header, plans build and print, bad input raises with the library's message,
and anything that needs a GPU says clearly that there is none."""
import ctypes
import os
import re
import shutil
import subprocess
import tempfile

import pytest

import tpgraph as tpg
from tpgraph import _native

from conftest import HEADER_DIR

HEADER = os.path.join(HEADER_DIR, "tpgraph.h")


def test_version_matches_header():
    text = open(HEADER).read()
    code = [int(re.search(r"#define TPG_VERSION_%s (\d+)" % p, text).group(1)) for p in ("MAJOR", "MINOR", "PATCH")]
    assert tpg.version() == code[0] * 10000 + code[1] * 100 + code[2]
    assert tpg.__version__ == "%d.%d.%d" % tuple(code)


def test_package_version_is_the_headers():
    # pyproject.toml cannot read the header at build time: a header bump must
    # bump it too, and this says so.
    pyproject = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyproject.toml")
    if not os.path.exists(pyproject):
        pytest.skip("no pyproject.toml beside the tests")
    version = re.search(r'^version = "([^"]+)"', open(pyproject).read(), re.M).group(1)
    assert version == tpg.__version__, "python/pyproject.toml says %s, the library %s" % (version, tpg.__version__)


def test_every_bound_symbol_is_in_the_header():
    text = open(HEADER).read()
    declared = set(re.findall(r"TPG_API [^;]*?\b(tpg_\w+)\s*\(", text, re.S))
    bound = {c for c, _, _ in _native.SYMBOLS.values()}
    assert bound <= declared, "bound but not declared: %s" % sorted(bound - declared)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_struct_layouts_match_the_header():
    # A C program prints sizeof and every field's offset; ctypes must agree.
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "tpgraph.h"', "int main(void) {"]
    for cname, py in _native.STRUCTS.items():
        lines.append('  printf("%s %%zu\\n", sizeof(%s));' % (cname, cname))
        for f, _ in py._fields_:
            lines.append('  printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (cname, f, cname, f))
    lines += ["  return 0;", "}"]
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "layout.c"), os.path.join(d, "layout")
        open(src, "w").write("\n".join(lines) + "\n")
        subprocess.run(["cc", "-std=c11", "-I", HEADER_DIR, src, "-o", exe], check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    c = dict(line.rsplit(" ", 1) for line in out.splitlines())
    for cname, py in _native.STRUCTS.items():
        assert int(c[cname]) == ctypes.sizeof(py), cname
        for f, _ in py._fields_:
            assert int(c["%s.%s" % (cname, f)]) == getattr(py, f).offset, "%s.%s" % (cname, f)


def test_runtime_info_without_driver():
    ri = tpg.runtime_info()
    assert ri["version"] == tpg.version()
    assert ri["nccl_version"] >= 22000
    assert "sm_" in ri["kernel_archs"] or "compute_" in ri["kernel_archs"]
    if ri["device_count"] == 0:
        assert ri["driver_error"]
        with pytest.raises(tpg.NoDevice) as e:
            tpg.device_info(0)
        assert e.value.status in (tpg.errors.NO_DRIVER, tpg.errors.NO_DEVICE) and e.value.message


def row_linear_plan(rank=0, nranks=2, T=4, IN=64, OUT=32):
    p = tpg.Plan()
    p.add_slot("x", "bf16", T * IN // nranks)
    p.add_slot("w", "bfloat16", OUT * IN // nranks)
    p.add_slot("b", tpg.BF16, OUT)
    p.add_slot("y", "bf16", T * OUT)
    node = p.add_linear("row", x="x", w="w", y="y", bias="b", tokens=T, in_features=IN, out_features=OUT,
                        rank=rank, nranks=nranks, name="proj")
    return p, node


def test_plan_row_linear_dot_and_stats():
    p, node = row_linear_plan()
    p.validate()
    assert p.stats() == {"nodes": 2, "slots": 4, "collectives": 1}
    dot = p.dot()
    assert dot.startswith("digraph") and "proj" in dot
    assert isinstance(node, int) and node != 0
    p.close()
    p.close()  # twice is fine, like destroy(NULL)
    with pytest.raises(ValueError, match="after close"):
        p.stats()


def test_plan_sharded_for_ranks():
    # row_linear_plan's layer is one rank of 2 with an all-reduce: the plan says 2
    p, _ = row_linear_plan()
    p.set_ranks(2)  # the same count again is fine
    with pytest.raises(tpg.InvalidArgument, match="already sharded for 2 ranks"):
        p.set_ranks(4)
    p.close()
    with tpg.Plan() as q:
        with pytest.raises(tpg.InvalidArgument, match="nranks is 0"):
            q.set_ranks(0)
        q.set_ranks(8)


def test_plan_nodes_views_and_deps():
    with tpg.Plan() as p:
        a = p.add_slot("a", "f32", 256)
        b = p.add_slot("b", "f32", 256, memory="scratch")
        n1 = p.add_memset((a, 128), 0, 128)
        n2 = p.add_memcpy(b, a, 256, deps=n1)
        n3 = p.add_axpby("a", "b", 256, alpha=2.0, beta=0.5, deps=[n2])
        e = p.add_empty(deps=[n1, n3])
        p.set_node_name(e, "join")
        p.validate()
        assert p.slot("b") == b
        assert "join" in p.dot()
        assert p.stats()["nodes"] == 4


def test_mlp_plan_by_name():
    with tpg.Plan.mlp("swiglu", layers=2, tokens=8, hidden=64, ffn=256, rank=1, nranks=2, bias=False) as p:
        s = p.stats()
        assert s["collectives"] == 2 and s["nodes"] >= 6
        p.slot("l1.w2")


def test_bad_arguments_name_the_argument():
    with tpg.Plan() as p:
        p.add_slot("x", "bf16", 64)
        with pytest.raises(tpg.InvalidArgument, match='"x"') as e:
            p.add_slot("x", "bf16", 64)
        assert isinstance(e.value, ValueError) and e.value.status == tpg.errors.INVALID_ARGUMENT
        with pytest.raises(tpg.InvalidArgument, match="n"):
            p.add_gemm(4, 12, 16, "x", "x", "x")  # n not a multiple of 8
        with pytest.raises(tpg.InvalidArgument):
            p.slot("nope")
        with pytest.raises(ValueError, match="dtype"):
            p.add_slot("z", "int8", 4)
        with pytest.raises(ValueError, match="algo"):
            p.add_collective("all_reduce", "x", "x", 64, algo="fastest")
        with pytest.raises(tpg.InvalidArgument, match="nranks"):
            row_linear_plan(nranks=3)


def test_folded_norm_plans():
    # The block's end with its RMSNorm folded into the next linear (one rank,
    # up to 16 tokens): one GEMM node each, no norm kernel, no collective.
    T, H, F = 4, 64, 128
    with tpg.Plan() as p:
        for name, dt, n in (("a", "bf16", T * H), ("wo", "bf16", H * H), ("x", "bf16", T * H), ("nw", "bf16", H),
                            ("ssq", "f32", T * H // 16), ("w1", "bf16", F * H), ("act", "bf16", T * F)):
            p.add_slot(name, dt, n)
        p.add_slot("ssq16", "bf16", T * H // 16)  # the sums in the wrong type
        p.add_slot("ssq1", "f32", T * H // 16 - 1)  # one sum short
        p.add_slot("h2", "bf16", T * H)
        last = p.add_linear_norm("a", "wo", None, T, H, H, residual="x", residual_out="x", norm_weight="nw",
                                 norm_eps=1e-5, ssq="ssq")
        p.add_linear("column", "x", "w1", "act", T, H, F, x_norm=("ssq", "nw", 1e-5), deps=last)
        p.validate()
        assert p.stats() == {"nodes": 2, "slots": 10, "collectives": 0}
        with pytest.raises(tpg.InvalidArgument, match=r"desc->y.slot is \d+ with norm->ssq set"):
            p.add_linear_norm("a", "wo", "act", T, H, H, residual="x", residual_out="x", norm_weight="nw", ssq="ssq")
        with pytest.raises(tpg.InvalidArgument, match=r"norm->partial.slot is 0"):  # unfolded: partial needed
            p.add_linear_norm("a", "wo", "h2", T, H, H, residual="x", residual_out="x", norm_weight="nw")
        with pytest.raises(tpg.InvalidArgument, match="row-parallel layer over 2 ranks"):
            p.add_linear("row", "x", "w1", "act", T, F, H, nranks=2, x_norm=("ssq", "nw", 1e-5))
        with pytest.raises(tpg.InvalidArgument, match=r"desc->y_ssq: slot \"ssq16\" holds bf16: expected f32"):
            p.add_gemm(T, H, H, "a", "wo", "x", y_ssq="ssq16")
        with pytest.raises(tpg.InvalidArgument, match=r"x_norm.ssq.*ssq1"):
            p.add_linear("column", "x", "w1", "act", T, H, F, x_norm=("ssq1", "nw", 1e-5))
        assert p.stats()["nodes"] == 2  # each refusal left the plan as it was
    with tpg.Plan() as p:  # the same by hand: a GEMM writes h and its sums, the next reads them
        for name, dt, n in (("a", "bf16", 32 * H), ("wo", "bf16", H * H), ("h", "bf16", 32 * H), ("nw", "bf16", H),
                            ("ssq", "f32", 32 * H // 16), ("w1", "bf16", F * H), ("act", "bf16", 32 * F)):
            p.add_slot(name, dt, n)
        g = p.add_gemm(T, H, H, "a", "wo", "h", epilogue="residual", residual="h", y_ssq="ssq")
        p.add_gemm(T, F, H, "h", "w1", "act", x_norm=("ssq", "nw", 1e-5), deps=g)
        assert p.stats()["nodes"] == 2
        with pytest.raises(TypeError, match=r"expected \(ssq, weight, eps\)"):
            p.add_gemm(T, F, H, "h", "w1", "act", x_norm="ssq")
        with pytest.raises(TypeError, match="x_norm's eps is 'tiny'"):
            p.add_gemm(T, F, H, "h", "w1", "act", x_norm=("ssq", "nw", "tiny"))
        with pytest.raises(tpg.InvalidArgument, match="x_norm.weight"):
            p.add_gemm(T, F, H, "h", "w1", "act", x_norm=("ssq", None, 1e-5))
        with pytest.raises(tpg.InvalidArgument, match="folded norm"):
            p.add_gemm(32, H, H, "a", "wo", "h", y_ssq="ssq")
        with pytest.raises(tpg.InvalidArgument, match="eps"):
            p.add_gemm(T, F, H, "h", "w1", "act", x_norm=("ssq", "nw", -1.0))
        assert p.stats()["nodes"] == 2  # each refusal left the plan as it was


def test_comm_id_and_config_checks():
    cid = tpg.comm_id_create()
    assert isinstance(cid, bytes) and len(cid) == 128
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "id")
        tpg.comm_id_write_file(cid, path)
        assert tpg.comm_id_read_file(path, 1000) == cid
    with pytest.raises(ValueError, match="128"):
        tpg.Comm(b"short", 0, 2, 0)
    with pytest.raises(tpg.InvalidArgument, match="rank"):
        tpg.Comm(cid, 5, 2, 0)


def test_graph_without_gpu_is_a_clear_error():
    if tpg.runtime_info()["device_count"] > 0:
        pytest.skip("a GPU is visible: the GPU test covers graphs")
    p, _ = row_linear_plan(nranks=1)
    buf = ctypes.create_string_buffer(1 << 16)
    base = (ctypes.addressof(buf) + 255) // 256 * 256
    with pytest.raises(tpg.NoDevice, match="driver"):
        tpg.Graph(p, 0, {"x": base, "w": base + 4096, "b": base + 8192, "y": base + 12288})
    with pytest.raises(TypeError, match="tensor"):
        tpg.Graph(p, 0, {"x": "not a buffer"})


def test_buffers_and_streams_without_torch():
    from tpgraph.streams import pointer, stream_handle

    class Cai:
        __cuda_array_interface__ = {"data": (0x7000, False), "shape": (4,), "typestr": "<f4", "version": 3}

    class Strided:
        def data_ptr(self):
            return 0x8000

        def is_contiguous(self):
            return False

    class Stream:
        cuda_stream = 0x1234

    assert pointer(0x5000) == 0x5000
    assert pointer(Cai()) == 0x7000
    with pytest.raises(ValueError, match="contiguous"):
        pointer(Strided())
    assert stream_handle(Stream()) == 0x1234
    assert stream_handle(0) is None and stream_handle(7) == 7
    with pytest.raises(TypeError, match="stream"):
        stream_handle("default")


def test_layer_helpers_without_gpu():
    mlp = dict(kind="gelu", layers=2, tokens=16, hidden=64, ffn=256, rank=0, nranks=2)
    x, w2 = tpg.mlp_slot("x", **mlp), tpg.mlp_slot("l1.w2", **mlp)
    with tpg.Plan.mlp(**mlp) as p:
        assert (p.slot("x"), p.slot("l1.w2")) == (x, w2)
    with pytest.raises(tpg.InvalidArgument, match="nope"):
        tpg.mlp_slot("nope", **mlp)
    with pytest.raises(tpg.InvalidArgument, match="ffn"):
        tpg.mlp_slot("x", **dict(mlp, ffn=100))
    if tpg.runtime_info()["device_count"] > 0:
        pytest.skip("a GPU is visible: the no-GPU errors below do not apply")
    with pytest.raises(tpg.NoDevice):
        tpg.MlpBuckets([1, 4], 0, {"x": 0x10000, "y": 0x20000}, **mlp)
    with pytest.raises(tpg.NoDevice):
        tpg.shard_mlp_layer(0, {"w1": 0x1000, "b1": 0x2000, "w2": 0x3000, "b2": 0x4000},
                            {"w1": 0x5000, "b1": 0x6000, "w2": 0x7000, "b2": 0x8000}, **mlp)
    with pytest.raises(tpg.InvalidArgument, match="whole"):
        tpg.shard_linear("row", 4, 64, 32, 0, 2, 0, {}, {"w": 0x5000})
