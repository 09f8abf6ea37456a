"""Enum values of lib/tpgraph.h and the conversions every call shares (dtype
names or torch dtypes, views, dependency lists), and the checks every value
passes before it crosses into C.

ctypes converts a Python int to a C integer by wrapping it: 2**64 + 16 becomes
a count of 16, slot + 2**32 becomes slot, and a str with a NUL becomes the C
string before the NUL. So every integer that crosses (counts, sizes, slot ids,
node handles, token counts, ranks, addresses) goes through integer() with the
C type's range first, and every string through cstr(); both raise
InvalidArgument (a ValueError) naming the argument, or TypeError for a value
that is no integer (a bool or a float is refused, not truncated)."""
import ctypes
import operator

from . import _native as _n
from .errors import INVALID_ARGUMENT, InvalidArgument

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


# The ranges of the C types values cross as, (lo, hi).
C_INT = (-2 ** 31, 2 ** 31 - 1)                                   # int, C enums
C_UINT32 = (0, 2 ** 32 - 1)                                       # uint32_t (slot ids), unsigned
C_SIZE = (0, 2 ** (8 * ctypes.sizeof(ctypes.c_size_t)) - 1)       # size_t
C_UINT64 = (0, 2 ** 64 - 1)                                       # uint64_t (nodes, view offsets)
C_POINTER = (0, 2 ** (8 * ctypes.sizeof(ctypes.c_void_p)) - 1)    # an address


def _invalid(what, message):
    return InvalidArgument(INVALID_ARGUMENT, "%s: %s" % (what, message), what)


def integer(value, what, c_range=C_INT):
    """value as an int within c_range (lo, hi): a bool, a float or anything
    without __index__ raises TypeError, an int out of range InvalidArgument;
    both name `what`."""
    if isinstance(value, bool):
        raise TypeError("%s: %r is a bool, not an integer" % (what, value))
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError("%s: %r is not an integer" % (what, value)) from None
    lo, hi = c_range
    if not lo <= v <= hi:
        raise _invalid(what, "%d is outside %d..%d (the C type's range; ctypes would wrap it)" % (v, lo, hi))
    return v


def cstr(value, what):
    """A str (or bytes) as a C string's bytes: UTF-8, no NUL (C would stop
    there: "y\\0evil" would name the slot "y")."""
    if isinstance(value, str):
        data = value.encode()
    elif isinstance(value, bytes):
        data = value
    else:
        raise TypeError("%s: %r is not a string" % (what, value))
    if b"\0" in data:
        raise _invalid(what, "%r holds a NUL byte (C would read only %r)" % (value, data.split(b"\0")[0]))
    return data


def _lookup(table, value, what):
    if isinstance(value, int):
        return integer(value, what)
    try:
        return table[str(value).lower()]
    except KeyError:
        raise ValueError("%s: %r is not one of %s" % (what, value, ", ".join(sorted(table)))) from None


def dtype(value):
    """F32/F16/BF16, a name ("bf16", "float16"), or a torch dtype."""
    if isinstance(value, int):
        return integer(value, "dtype")
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
    return _n.View(integer(v, "view: slot id", C_UINT32), 0, integer(off, "view: offset", C_UINT64))


def deps(d):
    """(array, count) for a C deps argument from None, a node or a list."""
    if d is None:
        return None, 0
    if isinstance(d, int):
        d = [d]
    d = [integer(x, "deps[%d]" % i, C_UINT64) for i, x in enumerate(d)]
    if not d:
        return None, 0
    if len(d) > C_INT[1]:
        raise _invalid("deps", "%d nodes: more than an int counts" % len(d))
    return (ctypes.c_uint64 * len(d))(*d), len(d)
