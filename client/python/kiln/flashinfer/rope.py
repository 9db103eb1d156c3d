"""flashinfer.rope's names on Kiln's in-place rotation (kiln.apply_rope,
kiln.apply_rope_with_cos_sin_cache). q and k are [nnz, heads, head_dim] fp16/bf16 (the cos/sin
cache forms take [nnz, heads * head_size] and view them as heads).

The out-of-place forms copy q and k (as FlashInfer allocates q_rope / k_rope like q / k) and
rotate the copies, so elements past rotary_dim keep their values, as in FlashInfer. The ragged
forms (apply_rope, apply_llama31_rope and their _inplace) turn (indptr, offsets) into one
position per token with torch ops on the device, without a host synchronization: token i of
request b is at offsets[b] + i - indptr[b].

rope_scale (FlashInfer divides every frequency by it: linear position interpolation) has no
parameter of its own in Kiln, but Kiln's Llama-3.1 scaling divides by `factor` every frequency
f whose wavelength 2π / f is longer than original_max_position / low_freq_factor. With
(factor=rope_scale, low_freq_factor=1, high_freq_factor=2, original_max_position=1) that is
every frequency whenever rope_theta >= 1 (each f = rope_theta^(-2i/rotary_dim) <= 1, so each
wavelength >= 2π > 1): exactly the linear scaling, with Kiln's exact angles.
"""
import math

from .. import rope as _rope
from ._refuse import refuse


def _torch():
    import torch
    return torch


def _rotary_dim(api, q, rotary_dim):
    """Kiln's rotary_dim: None is head_dim; 0 would mean head_dim to Kiln, not "rotate nothing"."""
    if rotary_dim is None:
        return int(q.shape[-1])
    if rotary_dim == 0:
        refuse(api, "rotary_dim", rotary_dim, "Kiln rotates an even rotary_dim of 2 .. head_dim (None: head_dim)")
    return int(rotary_dim)


def _check_scale(api, rope_scale):
    try:
        value = float(rope_scale)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"kiln.flashinfer.{api}: rope_scale: expected a finite number > 0, found {rope_scale!r}")


def _linear_scaling(api, rope_scale, rope_theta):
    """The Llama-3.1 scaling that equals FlashInfer's linear rope_scale (see the module's note)."""
    _check_scale(api, rope_scale)
    if rope_scale == 1:
        return None
    if not rope_theta >= 1:
        refuse(api, "rope_scale", rope_scale, f"with rope_theta={rope_theta!r} < 1 Kiln supports only rope_scale=1")
    return (float(rope_scale), 1.0, 2.0, 1)


def _llama31_scaling(api, rope_scale, low_freq_factor, high_freq_factor, old_context_len):
    _check_scale(api, rope_scale)
    if int(old_context_len) != old_context_len:
        refuse(api, "old_context_len", old_context_len, "Kiln takes a whole number of positions")
    return (float(rope_scale), float(low_freq_factor), float(high_freq_factor), int(old_context_len))


def _ragged_positions(indptr, offsets, nnz):
    """pos_ids [nnz] of the ragged forms: offsets[b] + i - indptr[b] for token i of request b."""
    torch = _torch()
    rows = torch.arange(nnz, device=indptr.device, dtype=indptr.dtype)
    if nnz == 0 or indptr.numel() < 2:
        return rows
    ends = indptr[1:].contiguous()
    # The request of token i: the first b with indptr[b + 1] > i (empty requests are skipped).
    b = torch.searchsorted(ends, rows, right=True).clamp_(max=ends.numel() - 1)
    return rows - indptr[b] + offsets[b].to(indptr.dtype)


def _rotate(q, k, pos_ids, rotary_dim, interleave, rope_theta, scaling):
    _rope.apply_rope(q, k, pos_ids, rotary_dim=rotary_dim, interleaved=bool(interleave), theta=float(rope_theta),
                     llama31=scaling)


def _copies(q, k):
    return q.clone(), k.clone()


# ---- positions per token -------------------------------------------------------------------------


def apply_rope_pos_ids(q, k, pos_ids, rotary_dim=None, interleave=False, rope_scale=1, rope_theta=1e4):
    """Returns (q_rope, k_rope): new tensors, q and k rotated at pos_ids [nnz] (int32/int64)."""
    api = "apply_rope_pos_ids"
    dim, scaling = _rotary_dim(api, q, rotary_dim), _linear_scaling(api, rope_scale, rope_theta)
    q_rope, k_rope = _copies(q, k)
    _rotate(q_rope, k_rope, pos_ids, dim, interleave, rope_theta, scaling)
    return q_rope, k_rope


def apply_rope_pos_ids_inplace(q, k, pos_ids, rotary_dim=None, interleave=False, rope_scale=1, rope_theta=1e4):
    """Rotates q and k in place at pos_ids [nnz]; returns None."""
    api = "apply_rope_pos_ids_inplace"
    dim, scaling = _rotary_dim(api, q, rotary_dim), _linear_scaling(api, rope_scale, rope_theta)
    _rotate(q, k, pos_ids, dim, interleave, rope_theta, scaling)


def apply_llama31_rope_pos_ids(q, k, pos_ids, rotary_dim=None, interleave=False, rope_scale=8, rope_theta=5e5,
                               low_freq_factor=1, high_freq_factor=4, old_context_len=8192):
    """As apply_rope_pos_ids with Llama-3.1 frequency scaling (rope_scale is its factor)."""
    api = "apply_llama31_rope_pos_ids"
    dim = _rotary_dim(api, q, rotary_dim)
    scaling = _llama31_scaling(api, rope_scale, low_freq_factor, high_freq_factor, old_context_len)
    q_rope, k_rope = _copies(q, k)
    _rotate(q_rope, k_rope, pos_ids, dim, interleave, rope_theta, scaling)
    return q_rope, k_rope


def apply_llama31_rope_pos_ids_inplace(q, k, pos_ids, rotary_dim=None, interleave=False, rope_scale=8,
                                       rope_theta=5e5, low_freq_factor=1, high_freq_factor=4, old_context_len=8192):
    """In place; returns None."""
    api = "apply_llama31_rope_pos_ids_inplace"
    dim = _rotary_dim(api, q, rotary_dim)
    scaling = _llama31_scaling(api, rope_scale, low_freq_factor, high_freq_factor, old_context_len)
    _rotate(q, k, pos_ids, dim, interleave, rope_theta, scaling)


# ---- ragged: indptr [batch + 1] and offsets [batch] ----------------------------------------------


def apply_rope(q, k, indptr, offsets, rotary_dim=None, interleave=False, rope_scale=1, rope_theta=1e4):
    """Returns (q_rope, k_rope); request b's tokens q[indptr[b]:indptr[b+1]] start at position offsets[b]."""
    api = "apply_rope"
    dim, scaling = _rotary_dim(api, q, rotary_dim), _linear_scaling(api, rope_scale, rope_theta)
    q_rope, k_rope = _copies(q, k)
    _rotate(q_rope, k_rope, _ragged_positions(indptr, offsets, q.shape[0]), dim, interleave, rope_theta, scaling)
    return q_rope, k_rope


def apply_rope_inplace(q, k, indptr, offsets, rotary_dim=None, interleave=False, rope_scale=1, rope_theta=1e4):
    """In place; returns None."""
    api = "apply_rope_inplace"
    dim, scaling = _rotary_dim(api, q, rotary_dim), _linear_scaling(api, rope_scale, rope_theta)
    _rotate(q, k, _ragged_positions(indptr, offsets, q.shape[0]), dim, interleave, rope_theta, scaling)


def apply_llama31_rope(q, k, indptr, offsets, rotary_dim=None, interleave=False, rope_scale=8, rope_theta=5e5,
                       low_freq_factor=1, high_freq_factor=4, old_context_len=8192):
    """Returns (q_rope, k_rope), Llama-3.1 scaled."""
    api = "apply_llama31_rope"
    dim = _rotary_dim(api, q, rotary_dim)
    scaling = _llama31_scaling(api, rope_scale, low_freq_factor, high_freq_factor, old_context_len)
    q_rope, k_rope = _copies(q, k)
    _rotate(q_rope, k_rope, _ragged_positions(indptr, offsets, q.shape[0]), dim, interleave, rope_theta, scaling)
    return q_rope, k_rope


def apply_llama31_rope_inplace(q, k, indptr, offsets, rotary_dim=None, interleave=False, rope_scale=8,
                               rope_theta=5e5, low_freq_factor=1, high_freq_factor=4, old_context_len=8192):
    """In place; returns None."""
    api = "apply_llama31_rope_inplace"
    dim = _rotary_dim(api, q, rotary_dim)
    scaling = _llama31_scaling(api, rope_scale, low_freq_factor, high_freq_factor, old_context_len)
    _rotate(q, k, _ragged_positions(indptr, offsets, q.shape[0]), dim, interleave, rope_theta, scaling)


# ---- cos/sin cache (SGLang / vLLM layout) --------------------------------------------------------


def _heads(x, head_size):
    return x.view(x.shape[0], -1, head_size)


def apply_rope_with_cos_sin_cache(positions, query, key, head_size, cos_sin_cache, is_neox=True):
    """Returns (query_out, key_out) like query [nnz, q_heads * head_size] and key; cos_sin_cache
    [max_position, rotary_dim] fp32, cos in the first half of a row, sin in the second.
    is_neox: halves rotated together (True) or adjacent pairs (False, GPT-J)."""
    query_out, key_out = _copies(query, key)
    _rope.apply_rope_with_cos_sin_cache(_heads(query_out, head_size), _heads(key_out, head_size), positions,
                                        cos_sin_cache, interleaved=not is_neox)
    return query_out, key_out


def apply_rope_with_cos_sin_cache_inplace(positions, query, key, head_size, cos_sin_cache, is_neox=True):
    """In place on query and key; returns None."""
    _rope.apply_rope_with_cos_sin_cache(_heads(query, head_size), _heads(key, head_size), positions, cos_sin_cache,
                                        interleaved=not is_neox)
