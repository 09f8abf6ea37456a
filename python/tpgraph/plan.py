"""Plans: the CPU-side description of a graph (no CUDA calls). A thin layer
over tpg_plan_*: every method is one C call, slots are ints (tpg_slot), nodes
are ints (tpg_node), and anything the library refuses raises with its message.
Views are a slot id, a slot name, or (slot, offset-in-elements). Every int
and string is checked against its C type first (types.integer, types.cstr)."""
import ctypes

from . import _native as _n
from . import types as _t
from .errors import check
from .types import C_SIZE, C_UINT32, C_UINT64, cstr, integer


class Plan:
    """tpg_plan. Use as a context manager or call close(); a graph copies the
    plan, so it may be closed once its graphs are created."""

    def __init__(self, _handle=None):
        self._h = ctypes.c_void_p(_handle)
        if _handle is None:
            check(_n.fn.plan_create(ctypes.byref(self._h)), "tpg_plan_create")

    @classmethod
    def mlp(cls, kind="gelu", layers=1, tokens=1, hidden=0, ffn=0, rank=0, nranks=1, dtype="bf16", bias=True,
            collectives=True, overlap="auto", chunks=0, sm_reserve=0, allreduce="auto"):
        """tpg_plan_mlp: one rank's part of a tensor-parallel MLP stack. Slots
        are found by name ("x", "y", "l0.w1", ...)."""
        d = mlp_desc(kind, layers, tokens, hidden, ffn, rank, nranks, dtype, bias, collectives, overlap, chunks,
                     sm_reserve, allreduce)
        h = ctypes.c_void_p()
        check(_n.fn.plan_mlp(ctypes.byref(d), ctypes.byref(h)), "tpg_plan_mlp")
        return cls(h.value)

    @property
    def handle(self):
        if not self._h.value:
            raise ValueError("plan: used after close()")
        return self._h

    def close(self):
        if self._h.value:
            _n.fn.plan_destroy(self._h)
            self._h = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- slots ------------------------------------------------------------------
    def add_slot(self, name, dtype, count, memory="device"):
        out = ctypes.c_uint32()
        check(_n.fn.plan_add_slot(self.handle, cstr(name, "add_slot: name"), _t.dtype(dtype), _t.memory(memory),
                                  integer(count, "add_slot: count", C_SIZE), ctypes.byref(out)), "tpg_plan_add_slot")
        return out.value

    def slot(self, name):
        out = ctypes.c_uint32()
        check(_n.fn.plan_find_slot(self.handle, cstr(name, "slot: name"), ctypes.byref(out)), "tpg_plan_find_slot")
        return out.value

    def slot_info(self, slot):
        """{"id", "name", "dtype" ("bf16", ...), "memory" ("device", ...),
        "count", "bytes"} of a slot id or name (tpg_plan_get_slot_info)."""
        from .bindings import slot_table
        sid = self.slot(slot) if isinstance(slot, str) else integer(slot, "slot_info: slot", C_UINT32)
        table = slot_table(self.handle)
        if sid not in table:
            raise ValueError("slot_info: %r is not a slot of the plan (ids 1..%d)" % (slot, len(table)))
        sp = table[sid]
        mem = {v: k for k, v in _t._MEMORY.items()}.get(sp.where, sp.where)
        return {"id": sid, "name": sp.name, "dtype": _t.dtype_name(sp.dtype), "memory": mem, "count": sp.count,
                "bytes": sp.nbytes}

    def _v(self, v):
        return _t.view(v, self.slot)

    def _add(self, name, call, *args, deps=None):
        arr, n = _t.deps(deps)
        out = ctypes.c_uint64()
        check(call(self.handle, *args, arr, n, ctypes.byref(out)), name)
        return out.value

    # ---- nodes --------------------------------------------------------------------
    def _x_norm(self, x_norm, what):
        """A folded RMSNorm's consumer (tpg_x_norm) from (ssq, weight, eps); None: none."""
        if x_norm is None:
            return _n.XNorm()
        if not isinstance(x_norm, (tuple, list)) or len(x_norm) != 3:
            raise TypeError("%s: x_norm is %r: expected (ssq, weight, eps)" % (what, x_norm))
        try:
            eps = float(x_norm[2])
        except (TypeError, ValueError):
            raise TypeError("%s: x_norm's eps is %r: expected a number" % (what, x_norm[2])) from None
        return _n.XNorm(self._v(x_norm[0]), self._v(x_norm[1]), eps)

    def add_gemm(self, m, n, k, x, w, y, dtype="bf16", epilogue="none", bias=None, residual=None, sm_reserve=0,
                 deps=None, y_ssq=None, x_norm=None):
        """y[m, n] = epilogue(x[m, k] w[n, k]^T). A folded RMSNorm (up to 16
        rows, our decode GEMV): y_ssq, an fp32 view of [m, ceil(n / 16)],
        gets the sums of squares of the rows y stores; x_norm = (ssq, weight,
        eps) normalizes x as it is read, ssq being the y_ssq of the GEMM
        that wrote x."""
        d = _n.GemmDesc(ctypes.sizeof(_n.GemmDesc), integer(m, "add_gemm: m"), integer(n, "add_gemm: n"),
                        integer(k, "add_gemm: k"), _t.dtype(dtype), _t.enum(_t.EPILOGUE, epilogue, "epilogue"),
                        self._v(x), self._v(w), self._v(y), self._v(bias), self._v(residual),
                        integer(sm_reserve, "add_gemm: sm_reserve"), self._v(y_ssq),
                        self._x_norm(x_norm, "add_gemm"))
        return self._add("tpg_plan_add_gemm", _n.fn.plan_add_gemm, ctypes.byref(d), deps=deps)

    def add_axpby(self, y, x, count, alpha=1.0, beta=1.0, deps=None):
        return self._add("tpg_plan_add_axpby", _n.fn.plan_add_axpby, self._v(y), self._v(x),
                         integer(count, "add_axpby: count", C_SIZE), alpha, beta, deps=deps)

    def add_memset(self, dst, value, count, deps=None):
        return self._add("tpg_plan_add_memset", _n.fn.plan_add_memset, self._v(dst),
                         integer(value, "add_memset: value", C_UINT32), integer(count, "add_memset: count", C_SIZE),
                         deps=deps)

    def add_memcpy(self, dst, src, count, deps=None):
        return self._add("tpg_plan_add_memcpy", _n.fn.plan_add_memcpy, self._v(dst), self._v(src),
                         integer(count, "add_memcpy: count", C_SIZE), deps=deps)

    def add_empty(self, deps=None):
        return self._add("tpg_plan_add_empty", _n.fn.plan_add_empty, deps=deps)

    def add_collective(self, kind, send, recv, count, algo="auto", hidden=0, bias=None, residual=None,
                       residual_out=None, norm_weight=None, norm_eps=1e-6, deps=None):
        """kind: "all_reduce", "all_gather", "reduce_scatter" (or the int)."""
        kinds = {"all_reduce": _t.ALL_REDUCE, "all_gather": _t.ALL_GATHER, "reduce_scatter": _t.REDUCE_SCATTER}
        d = _n.CollectiveDesc(ctypes.sizeof(_n.CollectiveDesc), _t.enum(kinds, kind, "kind"), self._v(send),
                              self._v(recv), integer(count, "add_collective: count", C_SIZE),
                              _t.enum(_t.ALGO, algo, "algo"), integer(hidden, "add_collective: hidden", C_SIZE),
                              self._v(bias),
                              self._v(residual), self._v(residual_out), self._v(norm_weight), norm_eps)
        return self._add("tpg_plan_add_collective", _n.fn.plan_add_collective, ctypes.byref(d), deps=deps)

    def _linear_desc(self, what, kind, x, w, y, tokens, in_features, out_features, rank, nranks, dtype, bias,
                     residual, activation, gather, work, algo, name, x_norm):
        return _n.LinearDesc(ctypes.sizeof(_n.LinearDesc), _t.enum(_t.LINEAR, kind, "kind"),
                             *linear_ints(what, rank, nranks, tokens, in_features, out_features),
                             _t.dtype(dtype), int(bool(gather)),
                             _t.enum(_t.ACTIVATION, activation, "activation"), _t.enum(_t.ALGO, algo, "algo"),
                             cstr(name, what + ": name") if name else None, self._v(x), self._v(w), self._v(bias),
                             self._v(residual), self._v(y), self._v(work), self._x_norm(x_norm, what))

    def add_linear(self, kind, x, w, y, tokens, in_features, out_features, rank=0, nranks=1, dtype="bf16",
                   bias=None, residual=None, activation="none", gather=False, work=None, algo="auto", name=None,
                   deps=None, x_norm=None):
        """One rank's part of a tensor-parallel linear (tpg_plan_add_linear):
        kind "column" (W split by output rows) or "row" (by input columns,
        then an all-reduce). x_norm = (ssq, weight, eps): the RMSNorm that
        add_linear_norm(ssq=...) folded into this layer (one rank, up to 16
        tokens). Returns the layer's last node."""
        d = self._linear_desc("add_linear", kind, x, w, y, tokens, in_features, out_features, rank, nranks, dtype,
                              bias, residual, activation, gather, work, algo, name, x_norm)
        return self._add("tpg_plan_add_linear", _n.fn.plan_add_linear, ctypes.byref(d), deps=deps)

    def add_linear_norm(self, x, w, y, tokens, in_features, out_features, partial=None, rank=0, nranks=1,
                        dtype="bf16", bias=None, residual=None, algo="auto", name=None, residual_out=None,
                        norm_weight=None, norm_eps=1e-6, ssq=None, deps=None):
        """A row-parallel linear whose all-reduce finishes the block
        (tpg_plan_add_linear_norm): bias and residual added once, h kept in
        residual_out, RMSNorm(h) (norm_weight, norm_eps) into y. partial is
        this rank's GEMM output, the all-reduce's send. With ssq (fp32
        [tokens, ceil(out_features / 16)]; one rank, up to 16 tokens) the
        norm is folded: the GEMM writes h and its rows' sums of squares, y
        is not written (pass y=None) nor partial, and the next add_linear
        reads residual_out with x_norm=(ssq, norm_weight, norm_eps).
        Returns the layer's last node."""
        d = self._linear_desc("add_linear_norm", "row", x, w, y, tokens, in_features, out_features, rank, nranks,
                              dtype, bias, residual, "none", False, None, algo, name, None)
        e = _n.LinearNorm(ctypes.sizeof(_n.LinearNorm), self._v(partial), self._v(residual_out),
                          self._v(norm_weight), float(norm_eps), self._v(ssq))
        return self._add("tpg_plan_add_linear_norm", _n.fn.plan_add_linear_norm, ctypes.byref(d), ctypes.byref(e),
                         deps=deps)

    def add_concat_cols(self, dst, src, blocks, rows, cols, deps=None):
        return self._add("tpg_plan_add_concat_cols", _n.fn.plan_add_concat_cols, self._v(dst), self._v(src),
                         integer(blocks, "add_concat_cols: blocks"), integer(rows, "add_concat_cols: rows"),
                         integer(cols, "add_concat_cols: cols"), deps=deps)

    def add_dependency(self, before, after):
        check(_n.fn.plan_add_dependency(self.handle, integer(before, "add_dependency: before", C_UINT64),
                                        integer(after, "add_dependency: after", C_UINT64)), "tpg_plan_add_dependency")

    def set_node_name(self, node, name):
        check(_n.fn.plan_set_node_name(self.handle, integer(node, "set_node_name: node", C_UINT64),
                                       cstr(name, "set_node_name: name")), "tpg_plan_set_node_name")

    # ---- whole plan -----------------------------------------------------------------
    def validate(self):
        check(_n.fn.plan_validate(self.handle), "tpg_plan_validate")

    def stats(self):
        """{"nodes", "slots", "collectives"}"""
        a, b, c = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        check(_n.fn.plan_stats(self.handle, ctypes.byref(a), ctypes.byref(b), ctypes.byref(c)), "tpg_plan_get_stats")
        return {"nodes": a.value, "slots": b.value, "collectives": c.value}

    def set_ranks(self, nranks):
        """The rank count this plan is sharded for: its graph then needs a comm of that many ranks."""
        check(_n.fn.plan_set_ranks(self.handle, integer(nranks, "set_ranks: nranks")), "tpg_plan_set_ranks")

    def dot(self):
        """The plan as Graphviz DOT text."""
        need = ctypes.c_size_t()
        check(_n.fn.plan_dot(self.handle, None, 0, ctypes.byref(need)), "tpg_plan_dot")
        buf = ctypes.create_string_buffer(need.value)
        check(_n.fn.plan_dot(self.handle, buf, need.value, ctypes.byref(need)), "tpg_plan_dot")
        return buf.value.decode()


def linear_ints(call, rank, nranks, tokens, in_features, out_features):
    """A linear layer's int fields, each checked as a C int."""
    return [integer(v, "%s: %s" % (call, n)) for v, n in ((rank, "rank"), (nranks, "nranks"), (tokens, "tokens"),
                                                          (in_features, "in_features"),
                                                          (out_features, "out_features"))]


def mlp_desc(kind="gelu", layers=1, tokens=1, hidden=0, ffn=0, rank=0, nranks=1, dtype="bf16", bias=True,
             collectives=True, overlap="auto", chunks=0, sm_reserve=0, allreduce="auto"):
    def i(v, name):
        return integer(v, "mlp: " + name)
    return _n.MlpDesc(ctypes.sizeof(_n.MlpDesc), _t.enum(_t.MLP, kind, "kind"), i(layers, "layers"),
                      i(tokens, "tokens"), i(hidden, "hidden"), i(ffn, "ffn"), i(rank, "rank"), i(nranks, "nranks"),
                      _t.dtype(dtype), int(bool(bias)), int(bool(collectives)),
                      _t.enum(_t.OVERLAP, overlap, "overlap"), i(chunks, "chunks"), i(sm_reserve, "sm_reserve"),
                      _t.enum(_t.ALGO, allreduce, "allreduce"))
