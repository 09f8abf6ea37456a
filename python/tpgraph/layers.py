"""Helpers of the tensor-parallel layers: copying one rank's part out of a
whole (unsplit) weight on the GPU, MLP slot ids, and token-count buckets (one
graph per bucket size of an MLP stack, bound to the same buffers)."""
import ctypes

from . import _native as _n
from . import types as _t
from .errors import check
from .bindings import check_buffer, slot_table
from .errors import INVALID_ARGUMENT, InvalidArgument
from .graph import Graph
from .plan import Plan, mlp_desc
from .streams import pointer, stream_handle


def _ptr(v):
    return None if v is None else pointer(v)


def mlp_slot(name, **mlp):
    """The slot id of a named slot of tpg_plan_mlp's stack ("x", "l0.w1", ...);
    mlp: Plan.mlp's keyword arguments."""
    d = mlp_desc(**mlp)
    out = ctypes.c_uint32()
    check(_n.fn.mlp_slot(ctypes.byref(d), name.encode(), ctypes.byref(out)), "tpg_mlp_find_slot")
    return out.value


def shard_mlp_layer(device, whole, part, stream=None, **mlp):
    """tpg_mlp_shard_layer: copies mlp["rank"]'s part of one layer's whole
    weights (whole: w1, w1_up, b1, b1_up, w2, b2) into part's buffers (w1, b1,
    w2, b2), on the GPU, asynchronously on stream."""
    d = mlp_desc(**mlp)
    w = _n.MlpWholeLayer(*[_ptr(whole.get(k)) for k, _ in _n.MlpWholeLayer._fields_])
    r = _n.MlpRankLayer(*[_ptr(part.get(k)) for k, _ in _n.MlpRankLayer._fields_])
    check(_n.fn.mlp_shard_layer(ctypes.byref(d), device, ctypes.byref(w), ctypes.byref(r), stream_handle(stream)),
          "tpg_mlp_shard_layer")


def shard_linear(kind, tokens, in_features, out_features, rank, nranks, device, whole, part, dtype="bf16",
                 activation="none", bias=False, stream=None):
    """tpg_linear_shard: copies rank's part of a whole linear layer (whole: w,
    w_up, bias, bias_up) into part's buffers (w, bias), laid out as
    Plan.add_linear expects. bias: whether the layer has one."""
    d = _n.LinearDesc(ctypes.sizeof(_n.LinearDesc), _t.enum(_t.LINEAR, kind, "kind"), rank, nranks, tokens,
                      in_features, out_features, _t.dtype(dtype), 0, _t.enum(_t.ACTIVATION, activation, "activation"),
                      0, None, _n.View(), _n.View(), _n.View(1 if bias else 0, 0, 0), _n.View(), _n.View(), _n.View())
    w = _n.LinearWhole(*[_ptr(whole.get(k)) for k, _ in _n.LinearWhole._fields_])
    p = _n.LinearPart(*[_ptr(part.get(k)) for k, _ in _n.LinearPart._fields_])
    check(_n.fn.linear_shard(ctypes.byref(d), device, ctypes.byref(w), ctypes.byref(p), stream_handle(stream)),
          "tpg_linear_shard")


class MlpBuckets:
    """tpg_mlp_buckets: one graph per token-count bucket of an MLP stack, all
    bound to the same buffers (x and y sized for the largest). bindings map
    the stack's slot names (or ids) to buffers, checked against the largest
    bucket's slots as Graph checks them. Collective like Graph."""

    def __init__(self, sizes, device, bindings, comm=None, mode="explicit", flags=0, **mlp):
        d = mlp_desc(**mlp)
        self._desc = d
        self._mlp = dict(mlp)
        self._device = int(device)
        with Plan.mlp(**mlp) as p:   # the largest bucket's slots (desc tokens)
            slots = slot_table(p.handle)
        names = {s.name: i for i, s in slots.items()}
        items = list(bindings.items()) if hasattr(bindings, "items") else list(bindings)
        arr = (_n.Binding * max(len(items), 1))()
        for i, (key, buf) in enumerate(items):
            if isinstance(key, str):
                if key not in names:
                    raise InvalidArgument(INVALID_ARGUMENT, 'MlpBuckets(): no slot named "%s" (slots: %s)'
                                          % (key, ", ".join(sorted(names))), "MlpBuckets()")
                key = names[key]
            arr[i].slot = key
            spec = slots.get(key)
            arr[i].ptr = check_buffer(buf, spec, self._device, "MlpBuckets()") if spec is not None else pointer(buf)
        self._held = [buf for _, buf in items]
        self._slots = {}            # bucket tokens -> that bucket's slot table
        cfg = _n.GraphConfig(ctypes.sizeof(_n.GraphConfig), _n.TPG_CONFIG_MAGIC, _n.VERSION_CODE, device,
                             comm.handle if comm is not None else None, arr, len(items),
                             _t.enum(_t.MODE, mode, "mode"), flags)
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
        check(_n.fn.mlp_buckets_pick(self.handle, tokens, ctypes.byref(bt), ctypes.byref(g)), "tpg_mlp_buckets_pick")
        return bt.value, Graph._borrow(g.value, self, self._bucket_slots(bt.value), self._device)

    def __len__(self):
        n = ctypes.c_int()
        check(_n.fn.mlp_buckets_info(self.handle, 0, ctypes.byref(n), None, None), "tpg_mlp_buckets_get_info")
        return n.value

    def info(self, i):
        """{"tokens", "device_bytes"} of bucket i (ascending)."""
        t, b = ctypes.c_int(), ctypes.c_size_t()
        check(_n.fn.mlp_buckets_info(self.handle, i, None, ctypes.byref(t), ctypes.byref(b)), "tpg_mlp_buckets_get_info")
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
