"""Errors: every failed C call becomes a TpgError carrying the status and the
library's message (which names the argument that was wrong). The library's
message is per thread and cleared by the next call, so it is copied at once."""
from . import _native as _n

# tpg_status values (lib/tpgraph.h).
SUCCESS = 0
INVALID_ARGUMENT = 1
INVALID_STATE = 2
OUT_OF_MEMORY = 3
NO_DRIVER = 4
NO_DEVICE = 5
CUDA = 6
NCCL = 7
UNSUPPORTED = 8
TIMEOUT = 9
PEER = 10
INTERNAL = 11


class TpgError(RuntimeError):
    """A tpgraph call failed. .status is the tpg_status value, .name its name
    (e.g. "TPG_ERROR_NO_DRIVER"), .message the library's explanation."""

    def __init__(self, status, message, call=""):
        self.status = status
        self.name = _n.fn.status_string(status).decode().split(":")[0]
        self.message = message
        self.call = call
        # The message already names the C function; call stays an attribute.
        super().__init__("%s: %s" % (self.name, message))


class InvalidArgument(TpgError, ValueError):
    """TPG_ERROR_INVALID_ARGUMENT: also a ValueError."""


class NoDevice(TpgError):
    """TPG_ERROR_NO_DRIVER or TPG_ERROR_NO_DEVICE: no usable GPU here."""


def check(status, call=""):
    """Raises the error for a tpg_status (nothing for TPG_SUCCESS)."""
    if status == SUCCESS:
        return
    msg = (_n.fn.last_error() or b"").decode(errors="replace")
    cls = TpgError
    if status == INVALID_ARGUMENT:
        cls = InvalidArgument
    elif status in (NO_DRIVER, NO_DEVICE):
        cls = NoDevice
    raise cls(status, msg, call)
