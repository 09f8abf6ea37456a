"""Enum values of lib/tpgraph.h and the conversions every call shares (dtype
names or torch dtypes, views, dependency lists)."""
import ctypes

from . import _native as _n

F32, F16, BF16 = 0, 1, 2
MEM_DEVICE, MEM_HOST, MEM_SCRATCH = 0, 1, 2
EPILOGUE = {"none": 0, "bias": 1, "bias_gelu": 2, "bias_silu": 3, "swiglu": 4, "residual": 5, "f32_partial": 6}
ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER = 0, 1, 2
ALGO = {"auto": 0, "nccl": 1, "oneshot": 2, "twoshot": 3}
LINEAR = {"column": 0, "row": 1}
ACTIVATION = {"none": 0, "gelu": 1, "silu": 2, "swiglu": 3}
MLP = {"gelu": 0, "swiglu": 1}
OVERLAP = {"auto": 0, "none": 1, "chunked": 2}
MODE = {"explicit": 0, "capture": 1, "eager": 2}
GRAPH_NCCL_SYMMETRIC = 0x1
GRAPH_PDL = 0x2

_DTYPES = {"f32": F32, "float32": F32, "f16": F16, "float16": F16, "half": F16, "bf16": BF16, "bfloat16": BF16}
DTYPE_BYTES = {F32: 4, F16: 2, BF16: 2}
_NAMES = {F32: "f32", F16: "f16", BF16: "bf16"}
# torch dtype names (without "torch.") <-> tpgraph dtypes, both ways; any
# other torch dtype has no tpgraph dtype and is refused for every slot.
TORCH_DTYPES = {"float32": F32, "float16": F16, "bfloat16": BF16}
_TORCH_NAMES = {v: k for k, v in TORCH_DTYPES.items()}
_MEMORY = {"device": MEM_DEVICE, "host": MEM_HOST, "scratch": MEM_SCRATCH}


def _lookup(table, value, what):
    if isinstance(value, int):
        return value
    try:
        return table[str(value).lower()]
    except KeyError:
        raise ValueError("%s: %r is not one of %s" % (what, value, ", ".join(sorted(table)))) from None


def dtype(value):
    """F32/F16/BF16, a name ("bf16", "float16"), or a torch dtype."""
    if isinstance(value, int):
        return value
    name = str(value)
    if name.startswith("torch."):
        name = name[len("torch."):]
    return _lookup(_DTYPES, name, "dtype")


def dtype_name(code):
    """"bf16", "f16", "f32" (or "dtype N" for a value the header lacks)."""
    return _NAMES.get(code, "dtype %d" % code)


def torch_dtype(code):
    """The torch dtype of a tpgraph dtype (imports torch)."""
    import torch
    return getattr(torch, _TORCH_NAMES[code])


def memory(value):
    return _lookup(_MEMORY, value, "memory")


def enum(table, value, what):
    return _lookup(table, value, what)


def view(v, resolve=None):
    """A tpg_view from a slot id, a (slot, offset) pair, a slot name (through
    resolve), None (no slot) or a View."""
    if v is None:
        return _n.View(0, 0, 0)
    if isinstance(v, _n.View):
        return v
    off = 0
    if isinstance(v, tuple):
        v, off = v
    if isinstance(v, str):
        if resolve is None:
            raise ValueError("view: slot name %r needs a plan to look it up" % v)
        v = resolve(v)
    if not isinstance(v, int) or v < 0:
        raise ValueError("view: %r is not a slot id" % (v,))
    return _n.View(v, 0, off)


def deps(d):
    """(array, count) for a C deps argument from None, a node or a list."""
    if d is None:
        return None, 0
    if isinstance(d, int):
        d = [d]
    d = list(d)
    if not d:
        return None, 0
    return (ctypes.c_uint64 * len(d))(*d), len(d)
