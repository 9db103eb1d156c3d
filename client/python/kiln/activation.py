"""Gated activations (kiln/ops/activation.h): input [..., 2d] = [x | y] per row, out [..., d]."""
from . import _native
from ._framework import allocate, compiled_ops, compiled_result, compiling, stream_of


def _gated(api, native, input, out, stream):
    if compiling():
        op = getattr(compiled_ops(), api[len("kiln."):])
        return compiled_result(api, op(input), out, stream)
    if out is None:
        shape = tuple(input.shape)
        out = allocate(api, "out", input, shape=shape[:-1] + (shape[-1] // 2,))
    native(out, input, stream_of(stream, input))
    return out


def silu_and_mul(input, *, out=None, stream=None):
    """out = silu(x) * y (fp16/bf16, computed in fp32); returns out."""
    return _gated("kiln.silu_and_mul", _native.silu_and_mul, input, out, stream)


def gelu_and_mul(input, *, out=None, stream=None):
    """out = gelu(x) * y, exact gelu (erf); returns out."""
    return _gated("kiln.gelu_and_mul", _native.gelu_and_mul, input, out, stream)


def gelu_tanh_and_mul(input, *, out=None, stream=None):
    """out = gelu_tanh(x) * y; returns out."""
    return _gated("kiln.gelu_tanh_and_mul", _native.gelu_tanh_and_mul, input, out, stream)
