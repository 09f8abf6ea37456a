"""tpgraph: tensor-parallel inference CUDA graphs built node by node.

A ctypes binding of libtpgraph.so (lib/tpgraph.h is the reference; each call
here is one C call). Load order for the library: $TPGRAPH_LIBRARY, a copy
beside this package, the dynamic loader's path.

    import torch, tpgraph as tpg
    plan = tpg.Plan()
    x = plan.add_slot("x", "bf16", T * K)        # slots: ints; names work too
    ...
    node = plan.add_linear("row", x="x", w="w", y="y", tokens=T, in_features=IN,
                           out_features=OUT, rank=rank, nranks=world)
    comm = tpg.Comm(id_bytes, rank, world, device=rank)
    g = tpg.Graph(plan, rank, {"x": x_t, "w": w_t, "y": y_t}, comm=comm)
    g.launch()                                   # on torch.cuda.current_stream()
    g.rebind({"x": x2_t})

Failures raise TpgError (InvalidArgument is also a ValueError; NoDevice when
there is no usable GPU) with the library's message.
"""
import ctypes

from . import _native
from .comm import Comm, comm_id_create, comm_id_read_file, comm_id_write_file
from .errors import InvalidArgument, NoDevice, TpgError, check
from .graph import Graph
from .layers import MlpBuckets, mlp_slot, shard_linear, shard_mlp_layer
from .plan import Plan, mlp_desc
from .types import *  # noqa: F401,F403 (the enum values)

__version__ = "%d.%d.%d" % (_native.VERSION_CODE // 10000, _native.VERSION_CODE // 100 % 100,
                            _native.VERSION_CODE % 100)
library_path = _native.path


def version():
    """The library's TPG_VERSION_CODE (e.g. 200 for 0.2.0)."""
    return _native.fn.version()


def runtime_info():
    """Versions, device count and the embedded kernels' targets; never raises
    for lack of a driver (driver_error says why)."""
    ri = _native.RuntimeInfo()
    check(_native.fn.runtime_query(ri, ctypes.sizeof(ri)), "tpg_runtime_get_info")
    return {"version": ri.version, "driver_version": ri.driver_version, "nccl_version": ri.nccl_version,
            "device_count": ri.device_count, "kernel_archs": ri.kernel_archs.decode(),
            "driver_error": ri.driver_error.decode(errors="replace"),
            "nccl_error": ri.nccl_error.decode(errors="replace")}


def device_info(device):
    from .types import integer
    di = _native.DeviceInfo()
    check(_native.fn.device_query(integer(device, "device_info: device"), di, ctypes.sizeof(di)),
          "tpg_device_get_info")
    return {"name": di.name.decode(errors="replace"), "sm_arch": di.sm_arch, "sm_count": di.sm_count,
            "total_memory": di.total_memory, "l2_bytes": di.l2_bytes, "kernels_supported": bool(di.kernels_supported)}


def dtype_size(dt):
    from .types import dtype
    return _native.fn.dtype_size(dtype(dt))
