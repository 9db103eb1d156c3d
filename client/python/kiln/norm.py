"""RMSNorm (kiln/ops/norm.h): rms_norm, fused_add_rms_norm."""
from . import _native
from ._framework import allocate, compiled_ops, compiled_result, compiled_stream, compiling, stream_of


def rms_norm(input, weight, eps=1e-6, *, out=None, stream=None):
    """out = input / sqrt(mean(input^2, last dim) + eps) * weight; returns out.

    input [..., hidden] fp32/fp16/bf16 (leading dims flattened by strides, last dim stride 1),
    weight [hidden] of the same dtype; out like input (allocated with torch.empty_like when
    omitted; may be input itself)."""
    if compiling():
        return compiled_result("kiln.rms_norm", compiled_ops().rms_norm(input, weight, eps), out, stream)
    if out is None:
        out = allocate("kiln.rms_norm", "out", input)
    _native.rms_norm(out, input, weight, eps, stream_of(stream, input))
    return out


def fused_add_rms_norm(input, residual, weight, eps=1e-6, *, stream=None):
    """residual <- input + residual; input <- rms_norm(residual) * weight; both in place."""
    if compiling():
        compiled_stream("kiln.fused_add_rms_norm", stream)
        compiled_ops().fused_add_rms_norm(input, residual, weight, eps)
        return
    _native.fused_add_rms_norm(input, residual, weight, eps, stream_of(stream, input))
