"""Graphs: a plan materialized and instantiated on one GPU, its slots bound
to buffers (torch.Tensors or int addresses), launched on a stream and rebound
between launches without re-instantiating."""
import ctypes

from . import _native as _n
from . import types as _t
from .errors import check
from .streams import pointer, stream_handle


class Graph:
    """tpg_graph. Graph(plan, device, bindings, comm=None): bindings maps slot
    ids or names to buffers, every non-scratch slot once. With collectives it
    is a collective call (every rank, same order).

    Buffers are borrowed, as in C: they must stay allocated while a launch that
    uses them may run. The Graph keeps a reference to the buffers bound now, so
    a tensor does not vanish under it; one rebound away is released, and must
    be kept alive by the caller until launches queued before the rebind ended."""

    def __init__(self, plan, device, bindings, comm=None, mode="explicit", flags=0):
        self._names = {}
        self._resolve_plan = plan
        b = self._bindings(bindings)
        cfg = _n.GraphConfig(ctypes.sizeof(_n.GraphConfig), _n.TPG_CONFIG_MAGIC, _n.VERSION_CODE, device,
                             comm.handle if comm is not None else None, b[0], b[1],
                             _t.enum(_t.MODE, mode, "mode"), flags)
        self._h = ctypes.c_void_p()
        check(_n.fn.graph_create(plan.handle, ctypes.byref(cfg), ctypes.byref(self._h)), "tpg_graph_create")
        self._resolve_plan = None  # the graph holds its own copy of the plan
        self._comm = comm          # borrowed by the C graph: keep it alive as long
        self._held = dict(b[2])

    @classmethod
    def _borrow(cls, handle, owner, names):
        """A graph owned by another object (an MlpBuckets): launch, rebind and
        info work; close() leaves it to its owner."""
        g = cls.__new__(cls)
        g._h = ctypes.c_void_p(handle)
        g._names = dict(names)
        g._resolve_plan = None
        g._comm = None
        g._held = {}
        g._owner = owner  # keeps the owner (and so the C graph) alive
        return g

    def _slot(self, key):
        if isinstance(key, str):
            if key not in self._names:
                if self._resolve_plan is None:
                    raise ValueError("binding %r: names resolve only at creation; rebind by slot id" % key)
                self._names[key] = self._resolve_plan.slot(key)
            return self._names[key]
        return int(key)

    def _bindings(self, bindings):
        items = list(bindings.items()) if hasattr(bindings, "items") else list(bindings)
        arr = (_n.Binding * max(len(items), 1))()
        held = []
        for i, (key, buf) in enumerate(items):
            slot = self._slot(key)
            arr[i].slot = slot
            arr[i].ptr = pointer(buf)
            held.append((slot, buf))
        return arr, len(items), held

    @property
    def handle(self):
        if not self._h.value:
            raise ValueError("graph: used after close()")
        return self._h

    def launch(self, stream=None):
        """Enqueues one run (asynchronous). stream: None = torch's current
        stream when torch is loaded, else the default stream."""
        check(_n.fn.graph_launch(self.handle, stream_handle(stream)), "tpg_graph_launch")

    def rebind(self, bindings):
        """Points slots (ids, or names used at creation) at other buffers for
        the next launches, through the exec node setters."""
        arr, n, held = self._bindings(bindings)
        check(_n.fn.graph_rebind(self.handle, arr, n), "tpg_graph_rebind")
        self._held.update(held)

    def update(self, plan=None, bindings=None):
        """Whole-graph update (cuGraphExecUpdate) from plan (None: its own)."""
        arr, n, held = self._bindings(bindings or {})
        check(_n.fn.graph_update(self.handle, plan.handle if plan is not None else None, arr if n else None, n),
              "tpg_graph_update")
        self._held.update(held)

    def info(self):
        gi = _n.GraphInfo()
        check(_n.fn.graph_info(self.handle, ctypes.byref(gi), ctypes.sizeof(gi)), "tpg_graph_get_info")
        return {f: getattr(gi, f) for f, _ in _n.GraphInfo._fields_}

    def write_dot(self, path):
        check(_n.fn.graph_write_dot(self.handle, str(path).encode()), "tpg_graph_write_dot")

    def close(self):
        """Waits for the graph's launches, then frees what it owns."""
        if getattr(self, "_owner", None) is not None:
            self._h = ctypes.c_void_p()  # borrowed: only forget it
            return
        if self._h.value:
            check(_n.fn.graph_destroy(self._h), "tpg_graph_destroy")
            self._h = ctypes.c_void_p()
            self._held.clear()
            self._comm = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if self._h.value and getattr(self, "_owner", None) is None:
                _n.fn.graph_destroy(self._h)
        except Exception:  # interpreter shutdown
            pass
