"""Rotary position embedding (kiln/ops/rope.h), in place on q and k."""
from typing import NamedTuple

from . import _native
from ._framework import compiled_ops, compiled_stream, compiling, stream_of


class Llama31RopeScaling(NamedTuple):
    """Llama-3.1's frequency scaling; the defaults are the published ones."""
    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192


def _scaling(llama31):
    if llama31 is None or llama31 is False:
        return None
    if llama31 is True:
        return tuple(Llama31RopeScaling())
    if isinstance(llama31, dict):
        return tuple(Llama31RopeScaling(**llama31))
    return tuple(llama31)


def apply_rope(q, k, positions, *, rotary_dim=0, interleaved=False, theta=10000.0, llama31=None, stream=None):
    """Rotates q [tokens, q_heads, head_dim] and k [tokens, k_heads, head_dim] (fp16/bf16) in
    place by positions [tokens] (int32/int64). rotary_dim 0: head_dim. interleaved: GPT-J pairs
    (2i, 2i+1), else NeoX (i, i + rotary_dim/2). llama31: None, True (the published defaults),
    a Llama31RopeScaling, a dict of its fields or a 4-tuple."""
    if compiling():
        compiled_stream("kiln.apply_rope", stream)
        scaling = _scaling(llama31)
        compiled_ops().apply_rope(q, k, positions, int(rotary_dim), bool(interleaved), float(theta),
                                  None if scaling is None else [float(x) for x in scaling])
        return
    _native.apply_rope(q, k, positions, rotary_dim, interleaved, theta, _scaling(llama31), stream_of(stream, q))


def apply_rope_with_cos_sin_cache(q, k, positions, cos_sin_cache, *, interleaved=False, stream=None):
    """As apply_rope, with cos and sin read from cos_sin_cache [max_position, rotary_dim] fp32
    (vLLM's layout: cos in the first half of each row, sin in the second)."""
    if compiling():
        compiled_stream("kiln.apply_rope_with_cos_sin_cache", stream)
        compiled_ops().apply_rope_with_cos_sin_cache(q, k, positions, cos_sin_cache, bool(interleaved))
        return
    _native.apply_rope_with_cos_sin_cache(q, k, positions, cos_sin_cache, interleaved, stream_of(stream, q))
