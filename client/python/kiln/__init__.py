"""kiln: Kiln's JIT-compiled CUDA kernels on any DLPack tensor (torch, CuPy, JAX ...).

Every op calls libkiln_client's C ABI (kiln/kiln.h) through the extension kiln._native: the
tensors' DLPack capsules are read in C, nothing is copied, and the messages of failed calls are
the library's own, raised as KilnError subclasses carrying the kiln_status code. Kernels come
from the kilnd daemon (KILN_SOCKET, or kiln.connect(...)), or with no daemon from the embedded
engine in this process (KILN_MODE, kiln.set_mode(...)). torch is not imported here: it is used
only when the caller's tensors are torch tensors (streams, outputs allocated when omitted).
docs/python.md.
"""
try:
    from . import _native
except ImportError as e:  # the extension or libkiln_client.so.0.1 cannot be loaded
    raise ImportError(
        f"kiln: the extension kiln._native cannot be loaded ({e}). Reinstall the package "
        "(pip install client/python, or pip install -e client/python --no-build-isolation after "
        "building the client: ninja -C build kiln_client)") from e

from ._errors import (BY_CODE, CudaError, DataLoss, DeadlineExceeded, FailedPrecondition, Internal, InvalidArgument,
                      KilnError, NoDriver, NotFound, PermissionDenied, ResourceExhausted, Unavailable, Unimplemented,
                      Unknown)
from . import comm
from .activation import gelu_and_mul, gelu_tanh_and_mul, silu_and_mul
from .decode import BatchDecodePlan, append_paged_kv, batch_decode
from .gemm import fp8_gemm, gemm, grouped_fp8_gemm, grouped_fp8_gemm_masked, grouped_gemm, grouped_gemm_masked
from .moe import fused_moe, fused_moe_fp8, fused_moe_fp8_workspace_bytes, fused_moe_workspace_bytes, moe_permute, moe_permute_rows, moe_route, moe_unpermute
from .norm import fused_add_rms_norm, rms_norm
from .prefill import BatchPrefillPlan, batch_prefill_paged, batch_prefill_ragged
from .rope import Llama31RopeScaling, apply_rope, apply_rope_with_cos_sin_cache
from .sampling import argmax, min_p_sampling, top_k_sampling, top_k_top_p_sampling, top_p_sampling

__version__ = _native.header_version

if "torch" in __import__("sys").modules:  # torch first: its custom ops now (torch.compile routing)
    from ._framework import register_torch_ops
    register_torch_ops()


def version():
    """The loaded libkiln_client's version (kiln_version()); __version__ is the headers' one."""
    return _native.version()


def set_socket(socket=None):
    """Chooses the daemon for later requests: a unix socket path or a gRPC target ("unix:/path",
    "host:port"); None goes back to KILN_SOCKET / the default socket (kiln_set_socket)."""
    _native.connect(socket, -1)


def connect(socket=None, timeout_ms=5000):
    """set_socket(socket), then checks that the daemon answers within timeout_ms (kiln_connect);
    raises Unavailable naming the socket and how to start kilnd."""
    _native.connect(socket, max(int(timeout_ms), 0))


def set_mode(mode=None):
    """Where later kernel requests go: "auto" (the daemon when one listens at the unix socket,
    else the embedded engine compiling in this process), "daemon" or "embedded"; None goes back
    to KILN_MODE (kiln_set_mode). Another word raises InvalidArgument and changes nothing."""
    if mode is not None and not isinstance(mode, str):
        raise TypeError(f"kiln.set_mode: mode must be a str or None, not {type(mode).__name__}")
    _native.set_mode(mode)


def describe_mode():
    """Which mode kernel requests use and why (kiln_describe_mode), deciding it now if no request
    has: "daemon at unix:/run/kiln/kilnd.sock (...)" or "embedded: compiling in this process, ..."."""
    return _native.describe_mode()


def prefetch(op, arch, **params):
    """Fetches the cubin of a library op (its daemon name: "rmsnorm", "batch_decode", ...) for an
    explicit arch ("sm_90a") without loading it, so no GPU is needed (kiln_prefetch): it warms the
    daemon's cache, or in embedded mode this process's cache folder. params are the op's spec
    params (`kiln ops OP` lists them; docs/ops.md). Returns a dict: uri, arch, origin ("compiled",
    "memory", "disk", ...), key, sha256, bytes (an int)."""
    words = []
    for key, value in params.items():
        text = str(value)
        if not text or any(c.isspace() for c in text):
            raise InvalidArgument(f"kiln.prefetch: {key}={text!r} is empty or holds white space")
        words.append(f"{key}={text}")
    summary = _native.prefetch(str(op), " ".join(words), str(arch))
    info = dict(word.split("=", 1) for word in summary.split())
    info["bytes"] = int(info["bytes"])
    return info


__all__ = [
    # errors
    "KilnError", "InvalidArgument", "NotFound", "FailedPrecondition", "Unavailable", "DeadlineExceeded", "DataLoss",
    "NoDriver", "CudaError", "Internal", "Unimplemented", "ResourceExhausted", "PermissionDenied", "Unknown",
    # connection
    "version", "set_socket", "connect", "set_mode", "describe_mode", "prefetch",
    # ops
    "rms_norm", "fused_add_rms_norm", "silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul", "apply_rope",
    "apply_rope_with_cos_sin_cache", "Llama31RopeScaling", "append_paged_kv", "BatchDecodePlan", "batch_decode",
    "BatchPrefillPlan", "batch_prefill_ragged", "batch_prefill_paged", "top_k_sampling", "top_p_sampling",
    "top_k_top_p_sampling", "min_p_sampling", "argmax", "gemm", "grouped_gemm", "grouped_gemm_masked", "fp8_gemm",
    "grouped_fp8_gemm", "grouped_fp8_gemm_masked", "moe_route", "moe_permute", "moe_permute_rows",
    "moe_unpermute", "fused_moe", "fused_moe_workspace_bytes", "fused_moe_fp8", "fused_moe_fp8_workspace_bytes",
    # collectives (kiln.comm.Communicator)
    "comm",
]
del BY_CODE
