"""The exceptions of the kiln package: one class per kiln_status code of the C ABI.

Every failed call raises a subclass of KilnError whose message is the library's own
(kiln_last_error(), unchanged) and whose `.code` is the kiln_status number.
"""
from . import _native


class KilnError(RuntimeError):
    """A kiln_* call failed; `code` is its kiln_status (kiln/c_abi.h), `str(e)` its message."""

    code = 13

    def __init__(self, message, code=None):
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def status_name(self):
        """"INVALID_ARGUMENT", "UNAVAILABLE", ... (kiln_status_name)."""
        return _native.status_name(self.code)


class InvalidArgument(KilnError, ValueError):
    """A bad tensor or value; nothing was launched."""
    code = 1


class NotFound(KilnError):
    code = 2


class FailedPrecondition(KilnError):
    """E.g. the op cannot be built for this GPU's architecture."""
    code = 3


class Unavailable(KilnError):
    """The daemon kilnd cannot be reached; the message names the socket and how to start it."""
    code = 4


class DeadlineExceeded(KilnError):
    code = 5


class DataLoss(KilnError):
    """A cubin failed its checksum."""
    code = 6


class NoDriver(KilnError):
    """No CUDA driver (libcuda.so.1) or no GPU."""
    code = 7


class CudaError(KilnError):
    """A CUDA driver call failed."""
    code = 8


class Internal(KilnError):
    code = 9


class Unimplemented(KilnError):
    code = 10


class ResourceExhausted(KilnError):
    code = 11


class PermissionDenied(KilnError):
    code = 12


class Unknown(KilnError):
    code = 13


# Indexed by kiln_status; 0 (KILN_OK) never raises.
BY_CODE = (KilnError, InvalidArgument, NotFound, FailedPrecondition, Unavailable, DeadlineExceeded, DataLoss,
           NoDriver, CudaError, Internal, Unimplemented, ResourceExhausted, PermissionDenied, Unknown)
_native._set_error_classes(BY_CODE)

__all__ = [c.__name__ for c in BY_CODE]
