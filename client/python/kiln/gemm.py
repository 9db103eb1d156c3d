"""GEMM (kiln/ops/gemm.h, docs/kernels-gemm.md): d = a . b^T on sm_90a devices. a [..., K] and
b [N, K] are K-major; d is allocated (a's dtype, or out_dtype) when omitted."""
from . import _native
from ._framework import allocate, compiled_dtype, compiled_ops, compiled_result, compiling, stream_of


def _out(api, a, rows_shape, n, out, out_dtype):
    if out is None:
        out = allocate(api, "out", a, shape=tuple(rows_shape) + (n,), dtype=out_dtype)
    return out


def gemm(a, b, *, bias=None, c=None, beta=0.0, out=None, out_dtype=None, stream=None):
    """d [..., N] = a . b^T (+ bias [N]) (+ beta * c); bf16/fp16 inputs, d bf16/fp16/fp32."""
    if compiling():
        d = compiled_ops().gemm(a, b, bias, c, float(beta), compiled_dtype(out_dtype))
        return compiled_result("kiln.gemm", d, out, stream)
    d = _out("kiln.gemm", a, a.shape[:-1], b.shape[0], out, out_dtype)
    _native.gemm(d, a, b, bias, c, beta, stream_of(stream, a))
    return d


def grouped_gemm(a, b, m_indptr, *, out=None, out_dtype=None, stream=None):
    """d [T, N]: rows m_indptr[e] .. m_indptr[e+1] of a [T, K] times b[e]^T (b [E, N, K])."""
    d = _out("kiln.grouped_gemm", a, a.shape[:1], b.shape[1], out, out_dtype)
    _native.grouped_gemm(d, a, b, m_indptr, stream_of(stream, a))
    return d


def grouped_gemm_masked(a, b, masked_m, *, out=None, out_dtype=None, stream=None):
    """d [E, M_max, N]: the first masked_m[e] rows of a[e] (a [E, M_max, K]) times b[e]^T."""
    d = _out("kiln.grouped_gemm_masked", a, a.shape[:2], b.shape[1], out, out_dtype)
    _native.grouped_gemm_masked(d, a, b, masked_m, stream_of(stream, a))
    return d


def fp8_gemm(a, b, a_scales, b_scales, *, out=None, out_dtype="bfloat16", stream=None):
    """Block-scaled fp8_e4m3: d [..., N] (bf16/fp32) = (a * a_scales) . (b * b_scales)^T, scales
    fp32 per 128 columns of a and per 128x128 block of b."""
    d = _out("kiln.fp8_gemm", a, a.shape[:-1], b.shape[0], out, out_dtype)
    _native.fp8_gemm(d, a, b, a_scales, b_scales, stream_of(stream, a))
    return d


def grouped_fp8_gemm(a, b, a_scales, b_scales, m_indptr, *, out=None, out_dtype="bfloat16", stream=None):
    """Grouped block-scaled fp8: d [T, N], groups by m_indptr [E + 1] (int32)."""
    d = _out("kiln.grouped_fp8_gemm", a, a.shape[:1], b.shape[1], out, out_dtype)
    _native.grouped_fp8_gemm(d, a, b, a_scales, b_scales, m_indptr, stream_of(stream, a))
    return d


def grouped_fp8_gemm_masked(a, b, a_scales, b_scales, masked_m, *, out=None, out_dtype="bfloat16", stream=None):
    """Grouped, masked block-scaled fp8: d [E, M_max, N]."""
    d = _out("kiln.grouped_fp8_gemm_masked", a, a.shape[:2], b.shape[1], out, out_dtype)
    _native.grouped_fp8_gemm_masked(d, a, b, a_scales, b_scales, masked_m, stream_of(stream, a))
    return d
