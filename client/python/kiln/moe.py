"""Mixture of experts (kiln/ops/moe.h, docs/kernels-moe.md): moe_route, the router's choice of
top_k experts per token from logits [T, E] (fp32/fp16/bf16, E <= 256). topk_ids [T, top_k] int32
and topk_weights [T, top_k] fp32 are allocated when omitted (torch tensors only)."""
from . import _native
from ._errors import InvalidArgument
from ._framework import allocate, stream_of

_SCORING = {"softmax": 0, "sigmoid": 1}


def moe_route(logits, top_k=None, *, correction_bias=None, scoring="softmax", renormalize=True, n_group=1,
              topk_group=1, routed_scaling_factor=1.0, topk_ids=None, topk_weights=None, stream=None):
    """(topk_ids, topk_weights): per token the top_k experts of largest score (+ correction_bias,
    for the choice only), best first, ties to the lower id; scoring "softmax" (Mixtral, Qwen3) or
    "sigmoid" (DeepSeek-V3: with correction_bias, n_group=8, topk_group=4, routed_scaling_factor=2.5).
    top_k may be left out when topk_ids is given (its dim 1)."""
    api = "kiln.moe_route"
    if scoring not in _SCORING:
        raise InvalidArgument(f"{api}: scoring: expected 'softmax' or 'sigmoid', found {scoring!r}", 1)
    if top_k is None:
        if topk_ids is None:
            raise InvalidArgument(f"{api}: top_k: give top_k, or topk_ids (its dim 1 is top_k)", 1)
        top_k = topk_ids.shape[1]
    rows = logits.shape[0]
    if topk_ids is None:
        topk_ids = allocate(api, "topk_ids", logits, shape=(rows, int(top_k)), dtype="int32")
    if topk_weights is None:
        topk_weights = allocate(api, "topk_weights", logits, shape=(rows, int(top_k)), dtype="fp32")
    _native.moe_route(topk_ids, topk_weights, logits, correction_bias, _SCORING[scoring], bool(renormalize),
                      int(n_group), int(topk_group), float(routed_scaling_factor), stream_of(stream, logits))
    return topk_ids, topk_weights
