"""Fake DLPack tensors for the CPU tests: objects whose __dlpack__ describes memory that is never
touched (made-up addresses on a made-up CUDA device, or on the CPU), so that the C ABI's
argument checks run exactly as for real tensors on a machine without a GPU. Every check runs
before the driver is touched, so a fake tensor is never dereferenced; a test that would pass
every check runs only where no CUDA driver exists (NO_DRIVER stops it before any launch)."""
import ctypes
import itertools

KDL_CPU, KDL_CUDA = 1, 2
DTYPES = {"fp32": (2, 32), "fp16": (2, 16), "bf16": (4, 16), "int32": (0, 32), "int64": (0, 64), "int8": (0, 8),
          "uint8": (1, 8), "fp8_e4m3": (10, 8), "fp64": (2, 64)}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_NAME = b"dltensor"  # kept alive: the capsule keeps a pointer to it

# Far apart, 256-byte aligned, never dereferenced: distinct tensors never overlap.
_addresses = itertools.count(0x7f0000000000, 1 << 32)


class FakeTensor:
    """shape, dtype name; strides in elements (None: row-major); device_type 2 (CUDA) or 1 (CPU)."""

    def __init__(self, shape, dtype="fp16", strides=None, device_type=KDL_CUDA, device_id=0, data=None):
        self.shape = tuple(shape)
        self.dtype = dtype
        n = len(self.shape)
        self._shape = (ctypes.c_int64 * max(n, 1))(*self.shape)
        self._strides = None if strides is None else (ctypes.c_int64 * max(n, 1))(*strides)
        code, bits = DTYPES[dtype]
        self._managed = DLManagedTensor()
        t = self._managed.dl_tensor
        t.data = next(_addresses) if data is None else data
        t.device = DLDevice(device_type, device_id)
        t.ndim = n
        t.dtype = DLDataType(code, bits, 1)
        t.shape = self._shape
        t.strides = ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64)) if self._strides is not None else None
        self.calls = 0

    def __dlpack__(self, stream=None):
        # No destructor: this object owns the struct and outlives the call.
        self.calls += 1
        return _capsule_new(ctypes.addressof(self._managed), _NAME, None)

    def __dlpack_device__(self):
        return (self._managed.dl_tensor.device.device_type, self._managed.dl_tensor.device.device_id)


def cuda(shape, dtype="fp16", strides=None):
    return FakeTensor(shape, dtype, strides)
