"""Graphs: a plan materialized and instantiated on one GPU, its slots bound
to buffers (torch.Tensors or int addresses), launched on a stream and rebound
between launches without re-instantiating."""
import ctypes

from . import _native as _n
from . import types as _t
from .bindings import binding_array, check_buffer, slot_table
from .errors import check
from .streams import stream_handle


class Graph:
    """tpg_graph. Graph(plan, device, bindings, comm=None): bindings maps slot
    ids or names to buffers, every non-scratch slot once. With collectives it
    is a collective call (every rank, same order).

    Every binding is checked against its slot before C sees it (dtype, size,
    device, pinned host memory: tpgraph.bindings), at creation, rebind and
    update, whether it is keyed by name or by slot id; names resolve at any
    time (the graph keeps its plan's slot table).

    Buffers are borrowed, as in C: they must stay allocated while a launch that
    uses them may run. The Graph keeps a reference to the buffers bound now, so
    a tensor does not vanish under it; one rebound away is released, and must
    be kept alive by the caller until launches queued before the rebind ended."""

    def __init__(self, plan, device, bindings, comm=None, mode="explicit", flags=0):
        self._device = _t.integer(device, "Graph(): device")
        self._set_slots(slot_table(plan.handle))
        b = self._bindings(bindings, "Graph()")
        cfg = _n.GraphConfig(ctypes.sizeof(_n.GraphConfig), _n.TPG_CONFIG_MAGIC, _n.VERSION_CODE, self._device,
                             comm.handle if comm is not None else None, b[0], b[1],
                             _t.enum(_t.MODE, mode, "mode"), _t.integer(flags, "Graph(): flags", _t.C_UINT32))
        self._h = ctypes.c_void_p()
        check(_n.fn.graph_create(plan.handle, ctypes.byref(cfg), ctypes.byref(self._h)), "tpg_graph_create")
        self._comm = comm          # borrowed by the C graph: keep it alive as long
        self._held = dict(b[2])

    @classmethod
    def _borrow(cls, handle, owner, slots, device):
        """A graph owned by another object (an MlpBuckets): launch, rebind and
        info work; close() leaves it to its owner."""
        g = cls.__new__(cls)
        g._h = ctypes.c_void_p(handle)
        g._device = device
        g._set_slots(slots)
        g._comm = None
        g._held = {}
        g._owner = owner  # keeps the owner (and so the C graph) alive
        return g

    def _set_slots(self, slots):
        self._slots = slots  # id -> SlotSpec

    def _bindings(self, bindings, call, slots=None):
        """(C array, count, [(slot, buffer)]) after checking each buffer
        against its slot of `slots` (default: the graph's)."""
        return binding_array(bindings, self._slots if slots is None else slots, self._device, call)

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
        """Points slots (ids or names) at other buffers for the next launches,
        through the exec node setters. Each buffer is checked as at creation."""
        arr, n, held = self._bindings(bindings, "Graph.rebind()")
        check(_n.fn.graph_rebind(self.handle, arr, n), "tpg_graph_rebind")
        self._held.update(held)

    def update(self, plan=None, bindings=None):
        """Whole-graph update (cuGraphExecUpdate) from plan (None: its own).
        New buffers are checked against the new plan's slots, and so are the
        tensors kept bound (a slot may have grown)."""
        call = "Graph.update()"
        slots = slot_table(plan.handle) if plan is not None else self._slots
        arr, n, held = self._bindings(bindings or {}, call, slots)
        rebound = {s for s, _ in held}
        for sid, buf in self._held.items():
            if sid not in rebound and sid in slots and slots[sid].where != _t.MEM_SCRATCH:
                check_buffer(buf, slots[sid], self._device, call)
        check(_n.fn.graph_update(self.handle, plan.handle if plan is not None else None, arr if n else None, n),
              "tpg_graph_update")
        self._held.update(held)
        self._set_slots(slots)

    def info(self):
        gi = _n.GraphInfo()
        check(_n.fn.graph_info(self.handle, ctypes.byref(gi), ctypes.sizeof(gi)), "tpg_graph_get_info")
        return {f: getattr(gi, f) for f, _ in _n.GraphInfo._fields_}

    def write_dot(self, path):
        check(_n.fn.graph_write_dot(self.handle, _t.cstr(str(path), "write_dot: path")), "tpg_graph_write_dot")

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
