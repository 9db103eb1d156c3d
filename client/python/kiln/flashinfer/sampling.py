"""flashinfer.sampling's samplers from probabilities on Kiln's (kiln.top_k_sampling, ...,
docs/kernels-sampling.md). probs [batch, vocab] is read as fp32 (converted like FlashInfer
does when it is not); samples are int32 [batch] (indices' dtype when indices is given).

Randomness: Kiln draws deterministically from (seed, offset). When seed or offset is None,
both come from the torch generator (`generator`, else torch's default CUDA generator of probs'
device) as FlashInfer takes them: the generator's Philox (seed, offset) state, its offset first
advanced by FlashInfer's increment for the op, so successive calls draw anew and the
generator's state moves exactly as under FlashInfer. The tokens drawn for a given (seed,
offset) differ from FlashInfer's (Kiln races exponential tickets; FlashInfer inverts the CDF
with rejection rounds); the distribution is the same.

deterministic: Kiln's samplers are always deterministic, so True and False both run them.
indices: output row i samples probs[indices[i]] (and that row's top_k / top_p / min_p), done
by gathering those rows first (a [len(indices), vocab] copy).
return_valid: valid[i] says whether the row has a positive value; a row without gives token 0
in both libraries.

probs rows are expected normalized, as FlashInfer requires; Kiln's top-p threshold is relative
to the row sum, so the two agree on normalized rows. A top_k entry of 0 in a per-request tensor
means "no top-k" to Kiln (a scalar 0 is refused: FlashInfer gives it no meaning)."""
from .. import sampling as _sampling
from ._refuse import refuse

_ONE_SEED = "Kiln takes one int seed and one int offset per call (or None: from the torch generator)"


def _seed_and_offset(torch, increment, generator, device):
    """FlashInfer's draw of (seed, offset) from a torch CUDA generator: its state's two int64,
    the offset advanced by `increment` rounded up to 4 (Philox's outputs per counter)."""
    if generator is None:
        torch.cuda.init()
        generator = torch.cuda.default_generators[device.index if device.index is not None else 0]
    seed, offset = (int(x) for x in generator.get_state().view(torch.int64))
    offset += (increment + 3) // 4 * 4
    generator.set_state(torch.tensor([seed, offset], dtype=torch.int64).view(torch.uint8))
    return seed, offset


def _per_row(value, kind):
    """A per-request parameter as Kiln takes it: an int32 / fp32 tensor, or a Python number."""
    if hasattr(value, "__dlpack__"):
        return (value.int() if kind is int else value.float()).contiguous()
    return kind(value)


def _sample(api, draw, probs, params, indices, generator, check_nan, seed, offset, return_valid, increment):
    """The steps every sampler shares; `draw(probs, *params, seed=, offset=, samples=)` is Kiln's op
    and `increment(batch)` FlashInfer's generator increment for it."""
    for name, value in (("seed", seed), ("offset", offset)):
        if hasattr(value, "__dlpack__"):
            refuse(api, name, value, _ONE_SEED)
    import torch
    if check_nan and bool(torch.isnan(probs).any()):
        raise ValueError("Input probs contains NaN.")
    probs = probs.float()
    params = [_per_row(value, kind) for value, kind in params]
    out_dtype = torch.int32
    if indices is not None:
        rows = indices.long()
        probs = probs.index_select(0, rows)
        params = [p.index_select(0, rows) if hasattr(p, "__dlpack__") else p for p in params]
        out_dtype = indices.dtype
    batch = probs.shape[0]
    if seed is None or offset is None:
        seed, offset = _seed_and_offset(torch, increment(batch), generator, probs.device)
    samples = torch.empty(batch, dtype=out_dtype, device=probs.device)
    draw(probs, *params, seed=int(seed), offset=int(offset), samples=samples)
    if return_valid:
        return samples, (probs > 0).any(dim=-1)
    return samples


def _check_top_k(api, top_k):
    # Kiln reads k = 0 as "no top-k"; FlashInfer gives it no meaning (its pivot search never
    # accepts a token). A tensor's entries live on the device and are not checked.
    if not hasattr(top_k, "__dlpack__") and top_k == 0:
        refuse(api, "top_k", top_k, "Kiln takes top_k >= 1 (top_k >= vocab for no top-k)")


def _per_batch(batch):
    return batch


def _per_batch_32(batch):
    return batch * 32


def _plain(probs, *, seed, offset, samples):
    # top_k 0 is no top-k: a draw over every token in proportion to its value.
    _sampling.top_k_sampling(probs, 0, seed=seed, offset=offset, samples=samples)


def sampling_from_probs(probs, indices=None, deterministic=True, generator=None, check_nan=False, seed=None,
                        offset=None, return_valid=False):
    """A token per row in proportion to probs; samples (or (samples, valid) with return_valid)."""
    return _sample("sampling_from_probs", _plain, probs, [], indices, generator, check_nan, seed, offset,
                   return_valid, _per_batch)


def top_p_sampling_from_probs(probs, top_p, indices=None, deterministic=True, generator=None, check_nan=False,
                              seed=None, offset=None, return_valid=False):
    """A token of the nucleus: (sum of probs above it) < top_p * row sum. top_p: a float or fp32 [batch]."""
    return _sample("top_p_sampling_from_probs", _sampling.top_p_sampling, probs, [(top_p, float)], indices,
                   generator, check_nan, seed, offset, return_valid, _per_batch_32)


def top_k_sampling_from_probs(probs, top_k, indices=None, deterministic=True, generator=None, check_nan=False,
                              seed=None, offset=None, return_valid=False):
    """A token among the top_k largest (ties at the k-th all kept). top_k: an int or int32 [batch]."""
    _check_top_k("top_k_sampling_from_probs", top_k)
    return _sample("top_k_sampling_from_probs", _sampling.top_k_sampling, probs, [(top_k, int)], indices,
                   generator, check_nan, seed, offset, return_valid, _per_batch_32)


def min_p_sampling_from_probs(probs, min_p, indices=None, deterministic=True, generator=None, check_nan=False,
                              seed=None, offset=None, return_valid=False):
    """A token with prob >= min_p * row max. min_p: a float or fp32 [batch]."""
    return _sample("min_p_sampling_from_probs", _sampling.min_p_sampling, probs, [(min_p, float)], indices,
                   generator, check_nan, seed, offset, return_valid, _per_batch)


def top_k_top_p_sampling_from_probs(probs, top_k, top_p, indices=None, filter_apply_order="top_k_first",
                                    deterministic=True, generator=None, check_nan=False, seed=None, offset=None,
                                    return_valid=False):
    """Top-k, then top-p over the renormalized top-k set (filter_apply_order="top_k_first")."""
    api = "top_k_top_p_sampling_from_probs"
    if filter_apply_order == "joint":
        refuse(api, "filter_apply_order", filter_apply_order,
               "Kiln applies top-p to the renormalized top-k set ('top_k_first')")
    if filter_apply_order != "top_k_first":
        raise ValueError(f"Invalid filter_apply_order: {filter_apply_order}")
    _check_top_k(api, top_k)
    return _sample(api, _sampling.top_k_top_p_sampling, probs, [(top_k, int), (top_p, float)], indices, generator,
                   check_nan, seed, offset, return_valid, _per_batch_32)
