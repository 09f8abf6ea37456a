"""Communicators. One process per GPU: rank 0 makes the id (comm_id_create),
passes its 128 bytes to the other ranks over any channel (torch.distributed,
the launcher, a file), and every rank builds a Comm from them."""
import ctypes

from . import _native as _n
from .errors import check
from .types import cstr, integer
from .streams import stream_handle


def comm_id_create():
    """A new communicator id, as 128 bytes (on one rank only)."""
    cid = _n.CommId()
    check(_n.fn.comm_id_create(ctypes.byref(cid)), "tpg_comm_id_create")
    return bytes(cid.bytes)


def _to_id(data):
    data = bytes(data)
    if len(data) != _n.TPG_COMM_ID_BYTES:
        raise ValueError("comm id: %d bytes, expected %d (from comm_id_create)" % (len(data), _n.TPG_COMM_ID_BYTES))
    cid = _n.CommId()
    ctypes.memmove(cid.bytes, data, len(data))
    return cid


def comm_id_write_file(data, path):
    cid = _to_id(data)
    check(_n.fn.comm_id_write_file(ctypes.byref(cid), cstr(str(path), "comm_id_write_file: path")),
          "tpg_comm_id_write_file")


def comm_id_read_file(path, timeout_ms=30000):
    cid = _n.CommId()
    check(_n.fn.comm_id_read_file(cstr(str(path), "comm_id_read_file: path"),
                                  integer(timeout_ms, "comm_id_read_file: timeout_ms"), ctypes.byref(cid)),
          "tpg_comm_id_read_file")
    return bytes(cid.bytes)


class Comm:
    """tpg_comm for one rank: Comm(id_bytes, rank, nranks, device). A
    collective call: every rank calls it with the same id. Close it after every
    graph that uses it (close() refuses otherwise, leaving it intact)."""

    def __init__(self, comm_id, rank, nranks, device, timeout_ms=0):
        cid = _to_id(comm_id)
        cfg = _n.CommConfig(ctypes.sizeof(_n.CommConfig), _n.TPG_CONFIG_MAGIC, _n.VERSION_CODE,
                            *[integer(v, "Comm(): " + n) for v, n in ((device, "device"), (rank, "rank"),
                                                                      (nranks, "nranks"), (timeout_ms, "timeout_ms"))])
        self._h = ctypes.c_void_p()
        check(_n.fn.comm_create(ctypes.byref(cid), ctypes.byref(cfg), ctypes.byref(self._h)), "tpg_comm_create")

    @property
    def handle(self):
        if not self._h.value:
            raise ValueError("comm: used after close()")
        return self._h

    def info(self):
        """{"rank", "nranks", "device"}"""
        r, n, d = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        check(_n.fn.comm_info(self.handle, ctypes.byref(r), ctypes.byref(n), ctypes.byref(d)), "tpg_comm_get_info")
        return {"rank": r.value, "nranks": n.value, "device": d.value}

    def wait(self, stream=None):
        """Waits for the stream's work with the comm's deadline; a dead peer
        raises (TPG_ERROR_PEER / TIMEOUT) instead of hanging."""
        check(_n.fn.comm_wait(self.handle, stream_handle(stream)), "tpg_comm_wait")

    def abort(self):
        check(_n.fn.comm_abort(self.handle), "tpg_comm_abort")

    def close(self):
        if self._h.value:
            check(_n.fn.comm_destroy(self._h), "tpg_comm_destroy")
            self._h = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
