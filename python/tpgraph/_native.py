"""The C ABI of libtpgraph.so as ctypes sees it: loading, struct mirrors, and
the one table of bound functions.

Everything that names a C symbol or lays out a C struct is in this file, so a
renamed function is a one-line change to SYMBOLS and a grown struct one change
to its mirror. tests/test_cpu.py compiles a C program against tpgraph.h and
checks every mirror's size and field offsets, so a layout drift fails CI
instead of corrupting memory.
"""
import ctypes
import ctypes.util
import os

# ---- loading ---------------------------------------------------------------

_NAMES = ("libtpgraph.so",)  # versioned names (libtpgraph.so.X.Y) come from find_library


def _load():
    """$TPGRAPH_LIBRARY (a path), else a copy beside this package, else the
    dynamic loader's search (LD_LIBRARY_PATH, ldconfig)."""
    tried = []
    env = os.environ.get("TPGRAPH_LIBRARY")
    if env:
        try:
            return ctypes.CDLL(env), env
        except OSError as e:
            raise ImportError("tpgraph: TPGRAPH_LIBRARY=%s cannot be loaded: %s" % (env, e)) from None
    here = os.path.dirname(os.path.abspath(__file__))
    cands = [os.path.join(here, n) for n in _NAMES] + list(_NAMES)
    found = ctypes.util.find_library("tpgraph")
    if found:
        cands.append(found)
    for c in cands:
        if os.sep in c and not os.path.exists(c):
            continue
        try:
            return ctypes.CDLL(c), c
        except OSError as e:
            tried.append("%s (%s)" % (c, e))
    raise ImportError("tpgraph: libtpgraph.so not found. Build it (bazel build //lib:libtpgraph.so, or the "
                      "CMake install) and set TPGRAPH_LIBRARY to its path, or put its folder on "
                      "LD_LIBRARY_PATH. Tried: " + "; ".join(tried or cands))


lib, path = _load()

# ---- struct mirrors (lib/tpgraph.h) ------------------------------------------

c_size_t = ctypes.c_size_t
c_int = ctypes.c_int
c_uint = ctypes.c_uint
c_void_p = ctypes.c_void_p

TPG_CONFIG_MAGIC = 0x74706731
TPG_COMM_ID_BYTES = 128


class View(ctypes.Structure):
    _fields_ = [("slot", ctypes.c_uint32), ("reserved_", ctypes.c_uint32), ("offset", ctypes.c_uint64)]


class RuntimeInfo(ctypes.Structure):
    _fields_ = [("version", c_int), ("driver_version", c_int), ("nccl_version", c_int), ("device_count", c_int),
                ("kernel_archs", ctypes.c_char * 64), ("driver_error", ctypes.c_char * 256),
                ("nccl_error", ctypes.c_char * 320)]


class DeviceInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 96), ("sm_arch", c_int), ("sm_count", c_int), ("total_memory", c_size_t),
                ("l2_bytes", c_size_t), ("kernels_supported", c_int)]


class CommId(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_ubyte * TPG_COMM_ID_BYTES)]


class CommConfig(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("magic", c_uint), ("version", c_int), ("device", c_int), ("rank", c_int),
                ("nranks", c_int), ("timeout_ms", c_int)]


class XNorm(ctypes.Structure):
    _fields_ = [("ssq", View), ("weight", View), ("eps", ctypes.c_float)]


class GemmDesc(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("m", c_int), ("n", c_int), ("k", c_int), ("dtype", c_int), ("epilogue", c_int),
                ("x", View), ("w", View), ("y", View), ("bias", View), ("residual", View), ("sm_reserve", c_int),
                ("y_ssq", View), ("x_norm", XNorm)]


class CollectiveDesc(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("kind", c_int), ("send", View), ("recv", View), ("count", c_size_t),
                ("algo", c_int), ("hidden", c_size_t), ("bias", View), ("residual", View), ("residual_out", View),
                ("norm_weight", View), ("norm_eps", ctypes.c_float)]


class MlpDesc(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("kind", c_int), ("layers", c_int), ("tokens", c_int), ("hidden", c_int),
                ("ffn", c_int), ("rank", c_int), ("nranks", c_int), ("dtype", c_int), ("bias", c_int),
                ("collectives", c_int), ("overlap", c_int), ("chunks", c_int), ("sm_reserve", c_int),
                ("allreduce", c_int)]


class LinearDesc(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("kind", c_int), ("rank", c_int), ("nranks", c_int), ("tokens", c_int),
                ("in_features", c_int), ("out_features", c_int), ("dtype", c_int), ("gather", c_int),
                ("activation", c_int), ("algo", c_int), ("name", ctypes.c_char_p), ("x", View), ("w", View),
                ("bias", View), ("residual", View), ("y", View), ("work", View), ("x_norm", XNorm)]


class LinearNorm(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("partial", View), ("residual_out", View), ("norm_weight", View),
                ("norm_eps", ctypes.c_float), ("ssq", View)]


class SlotInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", c_int), ("where", c_int), ("count", c_size_t)]


class Binding(ctypes.Structure):
    _fields_ = [("slot", ctypes.c_uint32), ("ptr", c_void_p)]


class GraphConfig(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("magic", c_uint), ("version", c_int), ("device", c_int), ("comm", c_void_p),
                ("bindings", ctypes.POINTER(Binding)), ("nbindings", c_int), ("mode", c_int), ("flags", c_uint),
                ("allreduce_push_max", c_size_t), ("allreduce_twoshot_max", c_size_t),
                ("allreduce_twoshot_blocks", c_int), ("gemm_streamk", c_int), ("pdl_prefetch", c_int),
                ("gemm_tune", c_int), ("gemm_tune_cache", ctypes.c_char_p), ("gemm_tune_budget_ms", c_int)]


class GraphInfo(ctypes.Structure):
    _fields_ = [("nodes", c_int), ("kernel_nodes", c_int), ("memset_nodes", c_int), ("memcpy_nodes", c_int),
                ("empty_nodes", c_int), ("child_nodes", c_int), ("workspace_bytes", c_size_t),
                ("materialize_us", ctypes.c_double), ("instantiate_us", ctypes.c_double),
                ("programmatic_edges", c_int), ("user_kernel_nodes", c_int), ("captured_nodes", c_int),
                ("host_nodes", c_int), ("event_nodes", c_int), ("gemm_tune_us", ctypes.c_double),
                ("gemm_tuned", c_int), ("gemm_tune_cached", c_int), ("prepare_us", ctypes.c_double),
                ("kernel_load_us", ctypes.c_double), ("collective_nodes", c_int), ("gemm_ours_nodes", c_int),
                ("gemm_cutlass_nodes", c_int), ("gemm_cublaslt_nodes", c_int), ("gemm_workspaces", c_int),
                ("gemm_workspace_bytes", c_size_t)]


class MlpWholeLayer(ctypes.Structure):
    _fields_ = [("w1", c_void_p), ("w1_up", c_void_p), ("b1", c_void_p), ("b1_up", c_void_p), ("w2", c_void_p),
                ("b2", c_void_p)]


class MlpRankLayer(ctypes.Structure):
    _fields_ = [("w1", c_void_p), ("b1", c_void_p), ("w2", c_void_p), ("b2", c_void_p)]


class LinearWhole(ctypes.Structure):
    _fields_ = [("w", c_void_p), ("w_up", c_void_p), ("bias", c_void_p), ("bias_up", c_void_p)]


class LinearPart(ctypes.Structure):
    _fields_ = [("w", c_void_p), ("bias", c_void_p)]


# C type name -> mirror, for the layout test.
STRUCTS = {
    "tpg_view": View, "tpg_runtime_info": RuntimeInfo, "tpg_device_info": DeviceInfo, "tpg_comm_id": CommId,
    "tpg_comm_config": CommConfig, "tpg_gemm_desc": GemmDesc, "tpg_collective_desc": CollectiveDesc,
    "tpg_mlp_desc": MlpDesc, "tpg_linear_desc": LinearDesc, "tpg_binding": Binding,
    "tpg_graph_config": GraphConfig, "tpg_graph_info": GraphInfo, "tpg_mlp_whole_layer": MlpWholeLayer,
    "tpg_mlp_rank_layer": MlpRankLayer, "tpg_linear_whole": LinearWhole, "tpg_linear_part": LinearPart,
    "tpg_slot_info": SlotInfo, "tpg_linear_norm": LinearNorm,
}

# ---- functions -----------------------------------------------------------------

P = ctypes.POINTER
_st = c_int                 # tpg_status
_h = c_void_p               # any opaque handle
_node = ctypes.c_uint64     # tpg_node
_nodes = P(_node)

# Python name -> (C symbol, restype, argtypes). The only place C names appear.
SYMBOLS = {
    "version": ("tpg_version", c_int, []),
    "status_string": ("tpg_status_string", ctypes.c_char_p, [c_int]),
    "last_error": ("tpg_last_error", ctypes.c_char_p, []),
    "dtype_size": ("tpg_dtype_size", c_size_t, [c_int]),
    "runtime_query": ("tpg_runtime_get_info", _st, [P(RuntimeInfo), c_size_t]),
    "device_query": ("tpg_device_get_info", _st, [c_int, P(DeviceInfo), c_size_t]),
    "comm_id_create": ("tpg_comm_id_create", _st, [P(CommId)]),
    "comm_id_write_file": ("tpg_comm_id_write_file", _st, [P(CommId), ctypes.c_char_p]),
    "comm_id_read_file": ("tpg_comm_id_read_file", _st, [ctypes.c_char_p, c_int, P(CommId)]),
    "comm_create": ("tpg_comm_create", _st, [P(CommId), P(CommConfig), P(_h)]),
    "comm_destroy": ("tpg_comm_destroy", _st, [_h]),
    "comm_abort": ("tpg_comm_abort", _st, [_h]),
    "comm_info": ("tpg_comm_get_info", _st, [_h, P(c_int), P(c_int), P(c_int)]),
    "comm_wait": ("tpg_comm_wait", _st, [_h, c_void_p]),
    "plan_create": ("tpg_plan_create", _st, [P(_h)]),
    "plan_destroy": ("tpg_plan_destroy", _st, [_h]),
    "plan_add_slot": ("tpg_plan_add_slot", _st, [_h, ctypes.c_char_p, c_int, c_int, c_size_t, P(ctypes.c_uint32)]),
    "plan_find_slot": ("tpg_plan_find_slot", _st, [_h, ctypes.c_char_p, P(ctypes.c_uint32)]),
    "plan_slot_info": ("tpg_plan_get_slot_info", _st, [_h, ctypes.c_uint32, P(SlotInfo), c_size_t]),
    "plan_add_gemm": ("tpg_plan_add_gemm", _st, [_h, P(GemmDesc), _nodes, c_int, _nodes]),
    "plan_add_axpby": ("tpg_plan_add_axpby", _st,
                       [_h, View, View, c_size_t, ctypes.c_float, ctypes.c_float, _nodes, c_int, _nodes]),
    "plan_add_memset": ("tpg_plan_add_memset", _st, [_h, View, ctypes.c_uint32, c_size_t, _nodes, c_int, _nodes]),
    "plan_add_memcpy": ("tpg_plan_add_memcpy", _st, [_h, View, View, c_size_t, _nodes, c_int, _nodes]),
    "plan_add_empty": ("tpg_plan_add_empty", _st, [_h, _nodes, c_int, _nodes]),
    "plan_add_collective": ("tpg_plan_add_collective", _st, [_h, P(CollectiveDesc), _nodes, c_int, _nodes]),
    "plan_add_dependency": ("tpg_plan_add_dependency", _st, [_h, _node, _node]),
    "plan_set_node_name": ("tpg_plan_set_node_name", _st, [_h, _node, ctypes.c_char_p]),
    "plan_validate": ("tpg_plan_validate", _st, [_h]),
    "plan_stats": ("tpg_plan_get_stats", _st, [_h, P(c_int), P(c_int), P(c_int)]),
    "plan_set_ranks": ("tpg_plan_set_ranks", _st, [_h, c_int]),
    "plan_dot": ("tpg_plan_dot", _st, [_h, ctypes.c_char_p, c_size_t, P(c_size_t)]),
    "plan_mlp": ("tpg_plan_mlp", _st, [P(MlpDesc), P(_h)]),
    "mlp_slot": ("tpg_mlp_find_slot", _st, [P(MlpDesc), ctypes.c_char_p, P(ctypes.c_uint32)]),
    "plan_add_linear": ("tpg_plan_add_linear", _st, [_h, P(LinearDesc), _nodes, c_int, _nodes]),
    "plan_add_linear_norm": ("tpg_plan_add_linear_norm", _st,
                             [_h, P(LinearDesc), P(LinearNorm), _nodes, c_int, _nodes]),
    "plan_add_concat_cols": ("tpg_plan_add_concat_cols", _st,
                             [_h, View, View, c_int, c_int, c_int, _nodes, c_int, _nodes]),
    "mlp_shard_layer": ("tpg_mlp_shard_layer", _st, [P(MlpDesc), c_int, P(MlpWholeLayer), P(MlpRankLayer), c_void_p]),
    "linear_shard": ("tpg_linear_shard", _st, [P(LinearDesc), c_int, P(LinearWhole), P(LinearPart), c_void_p]),
    "mlp_buckets_create": ("tpg_mlp_buckets_create", _st, [P(MlpDesc), P(c_int), c_int, P(GraphConfig), P(_h)]),
    "mlp_buckets_destroy": ("tpg_mlp_buckets_destroy", _st, [_h]),
    "mlp_buckets_pick": ("tpg_mlp_buckets_pick", _st, [_h, c_int, P(c_int), P(_h)]),
    "mlp_buckets_info": ("tpg_mlp_buckets_get_info", _st, [_h, c_int, P(c_int), P(c_int), P(c_size_t)]),
    "graph_create": ("tpg_graph_create", _st, [_h, P(GraphConfig), P(_h)]),
    "graph_destroy": ("tpg_graph_destroy", _st, [_h]),
    "graph_launch": ("tpg_graph_launch", _st, [_h, c_void_p]),
    "graph_rebind": ("tpg_graph_rebind", _st, [_h, P(Binding), c_int]),
    "graph_update": ("tpg_graph_update", _st, [_h, _h, P(Binding), c_int]),
    "graph_info": ("tpg_graph_get_info", _st, [_h, P(GraphInfo), c_size_t]),
    "graph_write_dot": ("tpg_graph_write_dot", _st, [_h, ctypes.c_char_p]),
}


class _Functions:
    pass


fn = _Functions()
for _py, (_c, _res, _args) in SYMBOLS.items():
    _f = getattr(lib, _c)  # AttributeError here names the symbol the library lacks
    _f.restype = _res
    _f.argtypes = _args
    setattr(fn, _py, _f)

VERSION_CODE = fn.version()
