"""Sampling (kiln/ops/sampling.h, docs/kernels-sampling.md): one token per row of probs [B, V]
fp32. Deterministic: the same (seed, offset) and inputs give the same samples. A per-request
parameter is a tensor [B] on probs' device (int32 top_k, fp32 top_p / min_p) or a Python
number for every row. samples [B] int32 (or int64 when given) is allocated when omitted."""
from . import _native
from ._framework import allocate, compiled_ops, compiled_result, compiling, stream_of


def _samples(api, probs, samples):
    if samples is None:
        samples = allocate(api, "samples", probs, shape=(probs.shape[0],), dtype="int32")
    return samples


def _split(value):
    """(tensor or None, scalar) for a parameter given as a number or as a tensor."""
    if isinstance(value, (int, float)):
        return None, value
    return value, 0


def top_k_sampling(probs, top_k, *, seed=0, offset=0, samples=None, stream=None):
    """A token among the values >= the k-th largest; top_k 0: no top-k."""
    t, k = _split(top_k)
    if compiling():
        return compiled_result("kiln.top_k_sampling", compiled_ops().top_k_sampling(probs, t, int(k), seed, offset),
                               samples, stream)
    samples = _samples("kiln.top_k_sampling", probs, samples)
    _native.top_k_sampling(samples, probs, t, int(k), seed, offset, stream_of(stream, probs))
    return samples


def top_p_sampling(probs, top_p, *, seed=0, offset=0, samples=None, stream=None):
    """A token from the nucleus: (sum of values > v) < top_p * row sum; 0 < top_p <= 1."""
    t, p = _split(top_p)
    if compiling():
        return compiled_result("kiln.top_p_sampling",
                               compiled_ops().top_p_sampling(probs, t, float(p) if t is None else 1.0, seed, offset),
                               samples, stream)
    samples = _samples("kiln.top_p_sampling", probs, samples)
    _native.top_p_sampling(samples, probs, t, float(p) if t is None else 1.0, seed, offset, stream_of(stream, probs))
    return samples


def top_k_top_p_sampling(probs, top_k, top_p, *, seed=0, offset=0, samples=None, stream=None):
    """Top-k, then top-p over the renormalized top-k set."""
    tk, k = _split(top_k)
    tp, p = _split(top_p)
    if compiling():
        result = compiled_ops().top_k_top_p_sampling(probs, tk, int(k), tp, float(p) if tp is None else 1.0, seed,
                                                     offset)
        return compiled_result("kiln.top_k_top_p_sampling", result, samples, stream)
    samples = _samples("kiln.top_k_top_p_sampling", probs, samples)
    _native.top_k_top_p_sampling(samples, probs, tk, int(k), tp, float(p) if tp is None else 1.0, seed, offset,
                                 stream_of(stream, probs))
    return samples


def min_p_sampling(probs, min_p, *, seed=0, offset=0, samples=None, stream=None):
    """A token among the values >= min_p * row max; 0 <= min_p <= 1."""
    t, p = _split(min_p)
    if compiling():
        return compiled_result("kiln.min_p_sampling", compiled_ops().min_p_sampling(probs, t, float(p), seed, offset),
                               samples, stream)
    samples = _samples("kiln.min_p_sampling", probs, samples)
    _native.min_p_sampling(samples, probs, t, float(p), seed, offset, stream_of(stream, probs))
    return samples


def argmax(probs, *, samples=None, stream=None):
    """The index of the largest value per row (NaN largest; ties: the lowest index)."""
    if compiling():
        return compiled_result("kiln.argmax", compiled_ops().argmax(probs), samples, stream)
    samples = _samples("kiln.argmax", probs, samples)
    _native.argmax(samples, probs, stream_of(stream, probs))
    return samples
