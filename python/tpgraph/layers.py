"""Helpers of the tensor-parallel layers: copying one rank's part out of a
whole (unsplit) weight on the GPU, MLP slot ids, and token-count buckets (one
graph per bucket size of an MLP stack, bound to the same buffers).

The sharding helpers check their buffers as Graph checks bindings (dtype,
elements, device: tpgraph.bindings), against the sizes the header gives each
whole weight and each rank's part, before C copies anything: C sees only
addresses, and a buffer too small would be overrun on the GPU."""
import ctypes

from . import _native as _n
from . import types as _t
from .errors import check
from .bindings import SlotSpec, address, binding_array, check_buffer, slot_table
from .errors import INVALID_ARGUMENT, InvalidArgument
from .graph import Graph
from .plan import Plan, linear_ints, mlp_desc
from .streams import stream_handle


def mlp_slot(name, **mlp):
    """The slot id of a named slot of tpg_plan_mlp's stack ("x", "l0.w1", ...);
    mlp: Plan.mlp's keyword arguments."""
    d = mlp_desc(**mlp)
    out = ctypes.c_uint32()
    check(_n.fn.mlp_slot(ctypes.byref(d), _t.cstr(name, "mlp_slot: name"), ctypes.byref(out)), "tpg_mlp_find_slot")
    return out.value


def _buffers(struct, given, sizes, dtype, device, call, what):
    """struct's pointer fields from the dict `given`, each buffer checked as a
    `dtype` device buffer of at least sizes[field] elements (sizes None: the
    shape is one C refuses; only addresses are checked then). A key the
    struct lacks is refused: it would be dropped silently."""
    fields = [f for f, _ in struct._fields_]
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise InvalidArgument(INVALID_ARGUMENT, "%s: %s[%r]: not one of %s" % (call, what, unknown[0], fields), call)
    ptrs = []
    for f in fields:
        buf = given.get(f)
        label = "%s[%r]" % (what, f)
        if buf is None:
            ptrs.append(None)
        elif sizes is not None and sizes.get(f):
            ptrs.append(check_buffer(buf, SlotSpec(0, f, dtype, _t.MEM_DEVICE, sizes[f], label), device, call))
        else:
            ptrs.append(address(buf, call, label))
    return struct(*ptrs)


def _mlp_sizes(d):
    """({whole field: elements}, {part field: elements}) of tpg_mlp_shard_layer,
    or (None, None) when nranks does not split ffn (C refuses it)."""
    if d.nranks < 1 or d.ffn % d.nranks or d.hidden < 1 or d.ffn < 1:
        return None, None
    H, ffn, F = d.hidden, d.ffn, d.ffn // d.nranks
    swiglu, bias = d.kind == _t.MLP["swiglu"], bool(d.bias)
    f1 = 2 * F if swiglu else F
    whole = {"w1": ffn * H, "w1_up": ffn * H if swiglu else 0, "b1": ffn if bias else 0,
             "b1_up": ffn if bias and swiglu else 0, "w2": H * ffn, "b2": H if bias else 0}
    part = {"w1": f1 * H, "b1": f1 if bias else 0, "w2": H * F, "b2": H if bias else 0}
    return whole, part


def shard_mlp_layer(device, whole, part, stream=None, **mlp):
    """tpg_mlp_shard_layer: copies mlp["rank"]'s part of one layer's whole
    weights (whole: w1, w1_up, b1, b1_up, w2, b2) into part's buffers (w1, b1,
    w2, b2), on the GPU, asynchronously on stream. Each buffer is checked
    against the size the header gives it (tensors; int addresses are the
    caller's)."""
    call = "shard_mlp_layer()"
    d = mlp_desc(**mlp)
    device = _t.integer(device, call + ": device")
    ws, ps = _mlp_sizes(d)
    w = _buffers(_n.MlpWholeLayer, whole, ws, d.dtype, device, call, "whole")
    r = _buffers(_n.MlpRankLayer, part, ps, d.dtype, device, call, "part")
    check(_n.fn.mlp_shard_layer(ctypes.byref(d), device, ctypes.byref(w), ctypes.byref(r), stream_handle(stream)),
          "tpg_mlp_shard_layer")


def _linear_sizes(kind, in_features, out_features, nranks, swiglu, bias):
    """As _mlp_sizes, for tpg_linear_shard (its header's shapes)."""
    split = out_features if kind == _t.LINEAR["column"] else in_features
    if nranks < 1 or in_features < 1 or out_features < 1 or split % nranks:
        return None, None
    whole = {"w": out_features * in_features, "w_up": out_features * in_features if swiglu else 0,
             "bias": out_features if bias else 0, "bias_up": out_features if bias and swiglu else 0}
    if kind == _t.LINEAR["column"]:
        rows = (2 if swiglu else 1) * (out_features // nranks)
        part = {"w": rows * in_features, "bias": rows if bias else 0}
    else:
        part = {"w": out_features * (in_features // nranks), "bias": out_features if bias else 0}
    return whole, part


def shard_linear(kind, tokens, in_features, out_features, rank, nranks, device, whole, part, dtype="bf16",
                 activation="none", bias=False, stream=None):
    """tpg_linear_shard: copies rank's part of a whole linear layer (whole: w,
    w_up, bias, bias_up) into part's buffers (w, bias), laid out as
    Plan.add_linear expects. bias: whether the layer has one. Buffers are
    checked as shard_mlp_layer's are."""
    call = "shard_linear()"
    k, act, dt = _t.enum(_t.LINEAR, kind, "kind"), _t.enum(_t.ACTIVATION, activation, "activation"), _t.dtype(dtype)
    ints = linear_ints(call, rank, nranks, tokens, in_features, out_features)
    device = _t.integer(device, call + ": device")
    d = _n.LinearDesc(ctypes.sizeof(_n.LinearDesc), k, *ints, dt, 0, act, 0, None, _n.View(), _n.View(),
                      _n.View(1 if bias else 0, 0, 0), _n.View(), _n.View(), _n.View())
    ws, ps = _linear_sizes(k, ints[3], ints[4], ints[1], act == _t.ACTIVATION["swiglu"], bool(bias))
    w = _buffers(_n.LinearWhole, whole, ws, dt, device, call, "whole")
    p = _buffers(_n.LinearPart, part, ps, dt, device, call, "part")
    check(_n.fn.linear_shard(ctypes.byref(d), device, ctypes.byref(w), ctypes.byref(p), stream_handle(stream)),
          "tpg_linear_shard")


class MlpBuckets:
    """tpg_mlp_buckets: one graph per token-count bucket of an MLP stack, all
    bound to the same buffers (x and y sized for the largest). bindings map
    the stack's slot names (or ids) to buffers, checked against the largest
    bucket's slots as Graph checks them. Collective like Graph."""

    def __init__(self, sizes, device, bindings, comm=None, mode="explicit", flags=0, **mlp):
        call = "MlpBuckets()"
        d = mlp_desc(**mlp)
        self._desc = d
        self._mlp = dict(mlp)
        self._device = _t.integer(device, call + ": device")
        with Plan.mlp(**mlp) as p:   # the largest bucket's slots (desc tokens)
            slots = slot_table(p.handle)
        arr, n, held = binding_array(bindings, slots, self._device, call)
        self._held = [buf for _, buf in held]
        self._slots = {}            # bucket tokens -> that bucket's slot table
        cfg = _n.GraphConfig(ctypes.sizeof(_n.GraphConfig), _n.TPG_CONFIG_MAGIC, _n.VERSION_CODE, self._device,
                             comm.handle if comm is not None else None, arr, n,
                             _t.enum(_t.MODE, mode, "mode"), _t.integer(flags, call + ": flags", _t.C_UINT32))
        sizes = [_t.integer(t, "%s: sizes[%d]" % (call, i)) for i, t in enumerate(sizes)]
        sz = (ctypes.c_int * max(len(sizes), 1))(*sizes)
        self._comm = comm
        self._h = ctypes.c_void_p()
        check(_n.fn.mlp_buckets_create(ctypes.byref(d), sz, len(sizes), ctypes.byref(cfg), ctypes.byref(self._h)),
              "tpg_mlp_buckets_create")

    def _bucket_slots(self, tokens):
        """The slot table of the bucket of `tokens` tokens (its x and y are
        that many rows), so a rebind of its graph is checked at its size."""
        if tokens not in self._slots:
            with Plan.mlp(**dict(self._mlp, tokens=tokens)) as p:
                self._slots[tokens] = slot_table(p.handle)
        return self._slots[tokens]

    @property
    def handle(self):
        if not self._h.value:
            raise ValueError("buckets: used after close()")
        return self._h

    def pick(self, tokens):
        """(bucket size, Graph) for a batch of `tokens`; the graph stays owned
        by these buckets."""
        bt, g = ctypes.c_int(), ctypes.c_void_p()
        check(_n.fn.mlp_buckets_pick(self.handle, _t.integer(tokens, "pick: tokens"), ctypes.byref(bt),
                                     ctypes.byref(g)), "tpg_mlp_buckets_pick")
        return bt.value, Graph._borrow(g.value, self, self._bucket_slots(bt.value), self._device)

    def __len__(self):
        n = ctypes.c_int()
        check(_n.fn.mlp_buckets_info(self.handle, 0, ctypes.byref(n), None, None), "tpg_mlp_buckets_get_info")
        return n.value

    def info(self, i):
        """{"tokens", "device_bytes"} of bucket i (ascending)."""
        t, b = ctypes.c_int(), ctypes.c_size_t()
        check(_n.fn.mlp_buckets_info(self.handle, _t.integer(i, "info: i"), None, ctypes.byref(t), ctypes.byref(b)),
              "tpg_mlp_buckets_get_info")
        return {"tokens": t.value, "device_bytes": b.value}

    def close(self):
        if self._h.value:
            check(_n.fn.mlp_buckets_destroy(self._h), "tpg_mlp_buckets_destroy")
            self._h = ctypes.c_void_p()
            self._held = []
            self._comm = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if self._h.value:
                _n.fn.mlp_buckets_destroy(self._h)
        except Exception:
            pass
