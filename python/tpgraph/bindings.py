"""Checking a buffer against the slot it is bound to, before C sees it.

The C library checks what the driver can tell (memory kind, device,
alignment, and that the *allocation* covers the slot), but a tensor from
PyTorch's caching allocator lies inside a larger cached block: half the
elements, or the right bytes in the wrong dtype, look fine to the driver and
the graph then reads past the tensor or misreads it. The tensor itself knows
its dtype, element count and device, so every binding (Graph creation,
rebind, update, MlpBuckets) is checked here against the slot's declaration
(tpg_plan_get_slot_info) and refused with InvalidArgument (a ValueError)
naming the slot, what it expected and what it got.

What is checked, by kind of buffer:
  torch.Tensor (or anything with data_ptr/dtype/numel/device): contiguous;
      dtype equal to the slot's (bf16 <-> torch.bfloat16, f16 <-> float16,
      f32 <-> float32; no reinterpretation); at least the slot's elements
      (a contiguous view at an offset of a bigger tensor is fine: its own
      elements count); on the graph's GPU for device slots, pinned CPU
      memory for host slots.
  __cuda_array_interface__ objects: C-contiguous, typestr equal to the
      slot's ("<f4" f32, "<f2" f16; bf16 has no typestr of its own, so a
      2-byte "V2" void type is taken for it), at least the slot's bytes;
      device memory only (the interface carries no device: C checks it).
  int addresses: only that they are addresses (0..2^64-1, not a bool); the
      rest is the caller's responsibility, and C still checks what the
      driver reports for them.

Every binding is checked whatever key it came under: a name, or a slot id
taken as the uint32 C sees (an id past 2^32 is refused, not wrapped onto
another slot whose check it would skip).
"""
import ctypes

from . import _native as _n
from . import types as _t
from .errors import INVALID_ARGUMENT, InvalidArgument, check
from .streams import pointer


class SlotSpec:
    """A slot as its plan declared it (tpg_slot_info), or a buffer another
    call expects (label: how messages name it; default the slot's binding)."""

    __slots__ = ("id", "name", "dtype", "where", "count", "label")

    def __init__(self, slot_id, name, dtype, where, count, label=None):
        self.id, self.name, self.dtype, self.where, self.count = slot_id, name, dtype, where, count
        self.label = label or 'binding of slot "%s"' % name

    @property
    def nbytes(self):
        return self.count * _t.DTYPE_BYTES.get(self.dtype, 0)

    def describe(self, device):
        where = {_t.MEM_DEVICE: "device memory of GPU %d" % device, _t.MEM_HOST: "pinned host memory",
                 _t.MEM_SCRATCH: "scratch (owned by the graph)"}.get(self.where, "memory kind %d" % self.where)
        return "%s %s, at least %d elements (%d bytes)" % (_t.dtype_name(self.dtype), where, self.count, self.nbytes)


def slot_table(plan_handle):
    """{slot id: SlotSpec} of every slot of a plan (a C tpg_plan handle)."""
    n = ctypes.c_int()
    check(_n.fn.plan_stats(plan_handle, None, ctypes.byref(n), None), "tpg_plan_get_stats")
    table = {}
    for sid in range(1, n.value + 1):
        info = _n.SlotInfo()
        check(_n.fn.plan_slot_info(plan_handle, sid, ctypes.byref(info), ctypes.sizeof(info)),
              "tpg_plan_get_slot_info")
        table[sid] = SlotSpec(sid, info.name.decode(errors="replace"), info.dtype, info.where, info.count)
    return table


def _refuse(call, spec, device, got):
    msg = '%s: %s: expected %s; got %s' % (call, spec.label, spec.describe(device), got)
    raise InvalidArgument(INVALID_ARGUMENT, msg, call)


def _tensor_dtype(t):
    name = str(t.dtype)
    return _t.TORCH_DTYPES.get(name[len("torch."):] if name.startswith("torch.") else name)


def _check_tensor(buf, spec, device, call):
    if hasattr(buf, "is_contiguous") and not buf.is_contiguous():
        _refuse(call, spec, device, "a non-contiguous tensor (strides %s): tpgraph slots are dense buffers"
                % (tuple(buf.stride()) if hasattr(buf, "stride") else "?",))
    dev = getattr(buf, "device", None)
    dev_type = getattr(dev, "type", str(dev))
    dev_index = getattr(dev, "index", None)
    numel = int(buf.numel())
    got = "a %s tensor of %d elements (%d bytes) on %s" % (buf.dtype, numel, numel * int(buf.element_size()), dev)
    if spec.where == _t.MEM_DEVICE:
        if dev_type != "cuda" or (dev_index if dev_index is not None else -1) != device:
            _refuse(call, spec, device, got)
    elif spec.where == _t.MEM_HOST:
        pinned = dev_type == "cpu" and bool(getattr(buf, "is_pinned", lambda: False)())
        if not pinned:
            _refuse(call, spec, device, got + ("" if dev_type != "cpu" else ", not pinned (tensor.pin_memory())"))
    if _tensor_dtype(buf) != spec.dtype:
        _refuse(call, spec, device, got)
    if numel < spec.count:
        _refuse(call, spec, device, got)
    return int(buf.data_ptr())


def _cai_dtype(typestr):
    kind_size = typestr[1:] if typestr[:1] in "<>|=" else typestr
    return {"f4": _t.F32, "f2": _t.F16, "V2": _t.BF16}.get(kind_size)


def _check_cai(buf, cai, spec, device, call):
    shape = tuple(cai.get("shape", ()))
    typestr = cai.get("typestr", "?")
    itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 0
    numel = 1
    for s in shape:
        numel *= int(s)
    got = "a CUDA array (__cuda_array_interface__) of shape %s, typestr %r (%d bytes)" % (shape, typestr,
                                                                                         numel * itemsize)
    strides = cai.get("strides")
    if strides is not None:
        want, acc = [], itemsize
        for s in reversed(shape):
            want.append(acc)
            acc *= int(s)
        if tuple(reversed(want)) != tuple(strides) and numel > 1:
            _refuse(call, spec, device, got + " with strides %s: not C-contiguous" % (tuple(strides),))
    if spec.where != _t.MEM_DEVICE:
        _refuse(call, spec, device, got + " (device memory)")
    if _cai_dtype(typestr) != spec.dtype or numel * itemsize < spec.nbytes:
        _refuse(call, spec, device, got)
    return _t.integer(cai["data"][0], "%s: %s: address" % (call, spec.label), _t.C_POINTER)


def check_buffer(buf, spec, device, call):
    """The address to bind `buf` to slot `spec` at, after checking it (module
    docstring). Raises InvalidArgument (a ValueError) naming the slot, or
    TypeError for something that is no buffer at all."""
    if isinstance(buf, bool):
        raise TypeError('%s: %s: %r is not a tensor, a CUDA array or an int address' % (call, spec.label, buf))
    if isinstance(buf, int):
        return _t.integer(buf, "%s: %s: address" % (call, spec.label), _t.C_POINTER)
    if callable(getattr(buf, "data_ptr", None)) and hasattr(buf, "dtype") and hasattr(buf, "numel"):
        return _check_tensor(buf, spec, device, call)
    cai = getattr(buf, "__cuda_array_interface__", None)
    if cai is not None:
        return _check_cai(buf, cai, spec, device, call)
    raise TypeError('%s: %s: %r is not a tensor, a CUDA array or an int address' % (call, spec.label, buf))


def address(buf, call, what):
    """The address of a buffer no slot describes (the C call checks it):
    an int in 0..2^64-1, a tensor's data_ptr, a CUDA array's pointer."""
    if isinstance(buf, bool) or not (isinstance(buf, int) or hasattr(buf, "data_ptr")
                                     or hasattr(buf, "__cuda_array_interface__")):
        raise TypeError("%s: %s: %r is not a tensor, a CUDA array or an int address" % (call, what, buf))
    return _t.integer(pointer(buf), "%s: %s: address" % (call, what), _t.C_POINTER)


def binding_array(bindings, slots, device, call):
    """(C array, count, [(slot id, buffer)]) for bindings (a mapping or pairs
    of slot name or id -> buffer), each buffer checked against its slot of
    `slots` ({id: SlotSpec}). An id the plan lacks is C's to refuse (its
    message names the binding); its buffer is then only an address."""
    names = {s.name: i for i, s in slots.items()}
    items = list(bindings.items()) if hasattr(bindings, "items") else list(bindings)
    if len(items) > _t.C_INT[1]:
        raise InvalidArgument(INVALID_ARGUMENT, "%s: %d bindings: more than an int counts" % (call, len(items)), call)
    arr = (_n.Binding * max(len(items), 1))()
    held = []
    for i, (key, buf) in enumerate(items):
        if isinstance(key, str):
            if key not in names:
                raise InvalidArgument(INVALID_ARGUMENT, '%s: no slot named "%s" (slots: %s)'
                                      % (call, key, ", ".join(sorted(names)) or "none"), call)
            slot = names[key]
        else:
            slot = _t.integer(key, "%s: binding key %r" % (call, key), _t.C_UINT32)
        spec = slots.get(slot)
        arr[i].slot = slot
        arr[i].ptr = check_buffer(buf, spec, device, call) if spec is not None else \
            address(buf, call, "binding of slot id %d" % slot)
        held.append((slot, buf))
    return arr, len(items), held
