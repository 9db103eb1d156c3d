"""What the ops need from the caller's framework: the stream to launch on, and outputs to
allocate when none is given. torch is never imported here: it is used only when the caller's
tensors are torch tensors (torch is then already in sys.modules)."""
import sys

from . import _native
from ._errors import InvalidArgument

_torch_registered = False
_torch_current_stream = None  # device index -> CUstream of torch's current stream there
_is_compiling = None  # torch.compiler.is_compiling, once kiln.torch_ops has registered the ops
_compiled_ops = None  # torch.ops.kiln
_torch_module = None  # torch, for compiled_dtype


def torch_of(x):
    """The torch module when `x` is a torch tensor, else None."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        if not _torch_registered:
            _register_torch(torch)
        return torch
    return None


def _register_torch(torch):
    """Lets the extension export torch tensors with torch._C._to_dlpack (the C++ export that
    Tensor.__dlpack__ wraps in Python) instead of calling __dlpack__: about 5 us less per tensor
    on the H200 machine."""
    global _torch_registered, _torch_current_stream
    _torch_registered = True
    # torch.cuda.current_stream(device).cuda_stream without building a Stream object.
    _torch_current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
        lambda device: torch.cuda.current_stream(device).cuda_stream)
    to_dlpack = getattr(torch._C, "_to_dlpack", None)
    if to_dlpack is not None:
        _native._register_torch(torch.Tensor, to_dlpack)
    register_torch_ops()


compile_routing_error = None  # why torch.ops.kiln.* could not be registered (an older torch), else None


def register_torch_ops():
    """Imports kiln.torch_ops (torch.ops.kiln.*, and the routing under torch.compile). A torch
    without torch.library.custom_op (before 2.4) leaves the eager ops working: the reason is kept
    in compile_routing_error, and torch.compile then breaks the graph at kiln's calls."""
    global compile_routing_error
    try:
        from . import torch_ops  # noqa: F401
    except Exception as e:  # noqa: BLE001 - eager calls must keep working whatever this torch lacks
        compile_routing_error = f"{type(e).__name__}: {e}"


def enable_compile_routing(torch, ops):
    """Called by kiln.torch_ops once the ops are registered: from then on the package's functions
    call torch.ops.kiln.* (`ops`) while torch is compiling."""
    global _is_compiling, _compiled_ops, _torch_module
    _is_compiling, _compiled_ops, _torch_module = torch.compiler.is_compiling, ops, torch


def compiling():
    """Whether torch.compile is tracing the caller (the ops must then be the registered custom
    ops: dynamo cannot trace into the extension). False until kiln.torch_ops is imported."""
    return _is_compiling is not None and _is_compiling()


def compiled_ops():
    """torch.ops.kiln (valid when compiling() is True)."""
    return _compiled_ops


def compiled_dtype(name):
    """A dtype argument (a name or a torch dtype, or None) as a torch dtype, for the custom ops."""
    return torch_dtype(_torch_module, name)


def compiled_stream(api, stream):
    """Inside torch.compile the compiled graph runs on torch's current stream: a stream argument
    cannot be honoured, so it is refused rather than ignored."""
    if stream is not None:
        raise NotImplementedError(f"{api}: stream= inside torch.compile (the compiled graph launches on torch's "
                                  f"current stream: use torch.cuda.stream(...) around the compiled call)")


def compiled_result(api, result, out, stream):
    """The custom op's result as the function returns it: `out` filled from it when given."""
    compiled_stream(api, stream)
    if out is None:
        return result
    out.copy_(result)
    return out


def stream_of(stream, x):
    """The CUstream (an int, 0: the default stream) for a call on tensor `x`.

    stream: None (torch tensors: torch's current stream on x's device, as
    torch.cuda.current_stream(x.device).cuda_stream; CuPy arrays: CuPy's current stream; others:
    the default stream), an int (a CUstream / cudaStream_t), or a stream object with
    `cuda_stream` (torch.cuda.Stream) or `ptr` (cupy.cuda.Stream)."""
    if stream is None:
        torch = torch_of(x)
        if torch is not None:
            if x.is_cuda:
                return _torch_current_stream(x.get_device())
            return None  # a CPU tensor: the C ABI refuses it, naming the argument
        if type(x).__module__.startswith("cupy"):
            return sys.modules["cupy"].cuda.get_current_stream().ptr
        return None
    if isinstance(stream, int):
        return stream
    handle = getattr(stream, "cuda_stream", None)
    if handle is None:
        handle = getattr(stream, "ptr", None)
    if not isinstance(handle, int):
        raise TypeError(f"stream: expected None, an int (CUstream) or a stream object with cuda_stream or ptr, "
                        f"found {type(stream).__name__}")
    return handle


def allocate(api, name, like, shape=None, dtype=None):
    """A new output tensor for `api`'s argument `name`: torch.empty_like(like), or of `shape` /
    `dtype` (a torch dtype or a name: "float32", "int32", ...) on like's device. Only torch
    tensors can be allocated for; others need the argument."""
    torch = torch_of(like)
    if torch is None:
        raise InvalidArgument(
            f"{api}: {name}: not given, and it can only be allocated for torch tensors (found "
            f"{type(like).__module__}.{type(like).__name__}): pass {name}=", 1)
    if shape is None and dtype is None:
        return torch.empty_like(like)
    dtype = like.dtype if dtype is None else torch_dtype(torch, dtype)
    return torch.empty(tuple(like.shape) if shape is None else shape, dtype=dtype, device=like.device)


def torch_dtype(torch, name):
    """torch.float16 ... from "fp16"/"bf16"/"fp32"/"fp8_e4m3", a torch dtype passing through."""
    if name is None or isinstance(name, torch.dtype):
        return name
    table = {"fp32": torch.float32, "float32": torch.float32, "fp16": torch.float16, "float16": torch.float16,
             "bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "int32": torch.int32, "int64": torch.int64,
             "uint8": torch.uint8}
    if name not in table:
        raise InvalidArgument(f"kiln: dtype {name!r} is not one of {', '.join(table)}", 1)
    return table[name]


# DLPack (code, bits) of the dtypes the planners take.
_DL = {"fp16": (2, 16), "float16": (2, 16), "bf16": (4, 16), "bfloat16": (4, 16), "fp32": (2, 32),
       "float32": (2, 32)}


def dl_dtype(api, dtype, expected="fp16 or bf16"):
    """(code, bits) for a planner's dtype: "fp16"/"bf16" (or "float16"/"bfloat16"), a torch dtype,
    a NumPy dtype, or a (code, bits) pair; `expected` names what the caller takes, for the error."""
    if isinstance(dtype, tuple) and len(dtype) == 2:
        return dtype
    name = str(dtype)
    name = name[len("torch."):] if name.startswith("torch.") else name
    if name in _DL:
        return _DL[name]
    raise InvalidArgument(f"{api}: dtype: expected {expected} (a name, a torch dtype or (code, bits)), "
                          f"found {dtype!r}", 1)
