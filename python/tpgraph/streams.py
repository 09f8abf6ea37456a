"""Streams and buffers from torch or plain ints, without importing torch:
torch is used only if the caller already imported it."""
import sys


def stream_handle(stream):
    """A CUstream for C. None: torch.cuda.current_stream() when torch is
    loaded, else the legacy default stream. A torch.cuda.Stream, or an int
    (cudaStream_t value)."""
    if stream is None:
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            return torch.cuda.current_stream().cuda_stream or None
        return None
    if isinstance(stream, int) and not isinstance(stream, bool):
        if not 0 <= stream < 2 ** 64:
            raise ValueError("stream: %d is not a cudaStream_t value (0..2^64-1)" % stream)
        return stream or None
    handle = getattr(stream, "cuda_stream", None)
    if handle is None:
        raise TypeError("stream: %r is neither a torch.cuda.Stream nor an int handle" % (stream,))
    return handle or None


def pointer(buf):
    """A device (or pinned host) address: a torch.Tensor (data_ptr), an object
    with __cuda_array_interface__, or an int."""
    if isinstance(buf, int):
        return buf
    data_ptr = getattr(buf, "data_ptr", None)
    if callable(data_ptr):
        if hasattr(buf, "is_contiguous") and not buf.is_contiguous():
            raise ValueError("binding: the tensor is not contiguous; tpgraph slots are dense buffers")
        return data_ptr()
    cai = getattr(buf, "__cuda_array_interface__", None)
    if cai is not None:
        return cai["data"][0]
    raise TypeError("binding: %r is not a tensor, a CUDA array or an int address" % (buf,))
