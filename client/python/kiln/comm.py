"""Collectives between the GPUs of one node (kiln/comm.h, docs/comm.md): one process per GPU,
started with `kiln-launch -n N python3 script.py` (which gives each its rank, the world size and
a rendezvous address), over peer-mapped memory (NVLink P2P).

    comm = kiln.comm.Communicator.from_env()       # collective: every rank calls it
    comm.all_reduce(x, out=x)                      # x = sum over ranks of x, on x's stream
    comm.synchronize()                             # waits; raises if a peer was lost

As with NCCL, every call is collective: all ranks make it, in the same order, with the same sizes
and dtypes. Calls are asynchronous on the caller's stream (torch's current stream for torch
tensors) and capturable in a CUDA graph. A rank that dies does not hang the others: their
kernels give up after kernel_timeout_ms and every later call raises the error.
"""
from . import _native
from ._errors import InvalidArgument
from ._framework import allocate, dl_dtype, stream_of

ALGORITHMS = {"auto": 0, "one_shot": 1, "two_shot": 2}


def _options(api, device, buffer_bytes, setup_timeout_ms, kernel_timeout_ms):
    for name, value in (("device", device), ("buffer_bytes", buffer_bytes), ("setup_timeout_ms", setup_timeout_ms),
                        ("kernel_timeout_ms", kernel_timeout_ms)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{api}: {name} must be an int, not {type(value).__name__}")
    if buffer_bytes < 0:
        raise InvalidArgument(f"{api}: buffer_bytes must be 0 (the default, 64 MiB) or 1 MiB .. 16 GiB, found "
                              f"{buffer_bytes}", 1)
    return device, buffer_bytes, setup_timeout_ms, kernel_timeout_ms


class Communicator:
    """A communicator of `world_size` ranks (1..8) meeting at `address` (a unix socket path, or
    "@name" in the abstract namespace). Collective: every rank creates it with the same address
    and options. device -1: the current CUDA context's device (else 0); buffer_bytes 0: 64 MiB
    staging buffer per rank; setup_timeout_ms <= 0: 60 s; kernel_timeout_ms < 0: 30 s, 0: wait
    forever. Freed by close() (or `with`), else when garbage-collected."""

    def __init__(self, rank, world_size, address, *, device=-1, buffer_bytes=0, setup_timeout_ms=0,
                 kernel_timeout_ms=-1):
        api = "kiln.comm.Communicator"
        if not isinstance(address, str):
            raise TypeError(f"{api}: address must be a str, not {type(address).__name__}")
        for name, value in (("rank", rank), ("world_size", world_size)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{api}: {name} must be an int, not {type(value).__name__}")
        options = _options(api, device, buffer_bytes, setup_timeout_ms, kernel_timeout_ms)
        self._init(_native.comm_create(rank, world_size, address, *options))

    @classmethod
    def from_env(cls, *, device=-1, buffer_bytes=0, setup_timeout_ms=0, kernel_timeout_ms=-1):
        """From kiln-launch's environment: KILN_RANK, KILN_WORLD_SIZE, KILN_COMM_ADDRESS, and the
        device from KILN_LOCAL_RANK unless `device` says otherwise. A missing or malformed
        variable raises InvalidArgument naming it."""
        options = _options("kiln.comm.Communicator.from_env", device, buffer_bytes, setup_timeout_ms,
                           kernel_timeout_ms)
        self = cls.__new__(cls)
        self._init(_native.comm_create(0, 0, None, *options))
        return self

    def _init(self, capsule):
        self._comm = capsule
        self.rank, self.world_size, self.device = _native.comm_info(capsule)

    def close(self):
        """Waits for this rank's work on the communicator, then frees it (not collective).
        Refused (FailedPrecondition) while a tensor from registered_empty() is alive."""
        _native.comm_destroy(self._comm)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"kiln.comm.Communicator(rank={self.rank}, world_size={self.world_size}, device={self.device})"

    def all_reduce(self, input, *, out=None, algorithm="auto", stream=None):
        """out = sum over ranks of input (fp32/fp16/bf16, contiguous, on this rank's device);
        returns out (allocated like input when omitted; may be input). algorithm: "auto" (by
        message size), or "one_shot" / "two_shot" forced (diagnostics, benchmarks). An input in
        a registered_empty() buffer is read by the peers in place (no staging copy)."""
        if algorithm not in ALGORITHMS:
            raise InvalidArgument(f"kiln.comm.Communicator.all_reduce: algorithm {algorithm!r} is not one of "
                                  f"{', '.join(ALGORITHMS)}", 1)
        if out is None:
            out = allocate("kiln.comm.Communicator.all_reduce", "out", input)
        _native.all_reduce(self._comm, out, input, ALGORITHMS[algorithm], stream_of(stream, input))
        return out

    def all_reduce_add_rms_norm(self, input, residual, weight, eps=1e-6, *, out=None, stream=None):
        """The tensor-parallel layer end in one kernel: residual <- residual + sum over ranks of
        input; out <- rms_norm(residual) * weight. Returns out (allocated like input when
        omitted). A world of one rank raises Unimplemented (use kiln.fused_add_rms_norm)."""
        if out is None:
            out = allocate("kiln.comm.Communicator.all_reduce_add_rms_norm", "out", input)
        _native.all_reduce_add_rms_norm(self._comm, out, input, residual, weight, eps, stream_of(stream, input))
        return out

    def registered_empty(self, shape, dtype):
        """Collective: a new contiguous tensor of `shape`/`dtype` in memory every peer has mapped
        (every rank must ask in the same order with the same sizes). An all-reduce of it skips
        the staging copy. Its memory belongs to the communicator: close() is refused while it
        lives. A torch tensor when torch is in use, else a DLPack capsule. A world of one rank
        raises Unimplemented."""
        if isinstance(shape, int):
            shape = (shape,)
        code, bits = dl_dtype("kiln.comm.Communicator.registered_empty", dtype, "fp32, fp16 or bf16")
        capsule = _native.comm_alloc_registered(self._comm, tuple(shape), code, bits)
        torch = __import__("sys").modules.get("torch")
        return torch.utils.dlpack.from_dlpack(capsule) if torch is not None else capsule

    def synchronize(self, stream=None):
        """Waits for `stream` (None: torch's current stream on this rank's device when torch is
        in use, else the default stream), then raises the communicator's error if a peer was lost
        or a kernel gave up waiting."""
        if stream is None:
            torch = __import__("sys").modules.get("torch")
            if torch is not None and torch.cuda.is_available():
                stream = torch.cuda.current_stream(self.device).cuda_stream
        _native.comm_synchronize(self._comm, stream_of(stream, None))

    def check(self):
        """Raises the communicator's asynchronous error (a lost peer, a kernel that gave up
        waiting) if there is one; no waiting."""
        _native.comm_async_error(self._comm)


__all__ = ["Communicator", "ALGORITHMS"]
