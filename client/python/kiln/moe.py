"""Mixture of experts (kiln/ops/moe.h, docs/kernels-moe.md): moe_route, the router's choice of
top_k experts per token from logits [T, E] (fp32/fp16/bf16, E <= 256); moe_permute, those
choices as the contiguous grouped layout of grouped_gemm (m_indptr, the row map and its inverse),
with an optional gather of the tokens' rows; moe_unpermute, the combine of the experts' output
rows back into one weighted row per token; fused_moe, a whole expert layer on routed tokens (the
permutation, the two grouped GEMMs with silu_and_mul between them, the combine, over one
workspace); fused_moe_fp8, the same on block-scaled fp8 experts. Outputs (and the layers'
workspaces) are allocated when omitted (torch tensors only)."""
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


def moe_permute_rows(tokens, top_k, num_experts, align=1):
    """The rows row_to_slot and permuted_x need at most: tokens * top_k, plus num_experts * (align - 1)
    when align > 1 (kiln::ops::moe_permute_rows)."""
    return int(tokens) * int(top_k) + (int(num_experts) * (int(align) - 1) if int(align) > 1 else 0)


def moe_permute(topk_ids, num_experts=None, *, align=1, x=None, expert_counts=None, m_indptr=None, row_to_slot=None,
                slot_to_row=None, permuted_x=None, stream=None):
    """(expert_counts, m_indptr, row_to_slot, slot_to_row), plus permuted_x when x is given: topk_ids
    [T, top_k] int32 as the contiguous grouped layout of grouped_gemm. Group e is rows
    m_indptr[e] .. m_indptr[e + 1] - 1, its slots (t * top_k + j) in ascending order, padded to a
    multiple of align (1, or a power of two up to 256); row_to_slot -1 for padding and for rows
    from m_indptr[E] on; slot_to_row the inverse (-1 for an id outside [0, E)). x [T, H] bf16/fp16:
    permuted_x[r] = x[row_to_slot[r] // top_k], padding rows zero, rows from m_indptr[E] on not
    written; permuted_x is grouped_gemm's a. num_experts may be left out when expert_counts is
    given (its length). Allocated outputs have moe_permute_rows(...) rows."""
    api = "kiln.moe_permute"
    if num_experts is None:
        if expert_counts is None:
            raise InvalidArgument(f"{api}: num_experts: give num_experts, or expert_counts (its length is E)", 1)
        num_experts = expert_counts.shape[0]
    tokens, top_k = topk_ids.shape[0], topk_ids.shape[1]
    rows = moe_permute_rows(tokens, top_k, num_experts, align)
    if expert_counts is None:
        expert_counts = allocate(api, "expert_counts", topk_ids, shape=(int(num_experts),), dtype="int32")
    if m_indptr is None:
        m_indptr = allocate(api, "m_indptr", topk_ids, shape=(int(num_experts) + 1,), dtype="int32")
    if row_to_slot is None:
        row_to_slot = allocate(api, "row_to_slot", topk_ids, shape=(rows,), dtype="int32")
    if slot_to_row is None:
        slot_to_row = allocate(api, "slot_to_row", topk_ids, shape=(tokens, top_k), dtype="int32")
    if x is not None and permuted_x is None:
        permuted_x = allocate(api, "permuted_x", x, shape=(rows, x.shape[1]))
    _native.moe_permute(expert_counts, m_indptr, row_to_slot, slot_to_row, permuted_x, topk_ids, x, int(align),
                        stream_of(stream, topk_ids))
    if x is None:
        return expert_counts, m_indptr, row_to_slot, slot_to_row
    return expert_counts, m_indptr, row_to_slot, slot_to_row, permuted_x


def moe_unpermute(expert_out, slot_to_row, topk_weights, out=None, *, stream=None):
    """out [T, H]: out[t] = sum over j of topk_weights[t, j] * expert_out[slot_to_row[t, j]], in fp32 in
    the order of j, rounded once to expert_out's dtype (bf16/fp16). expert_out [R, H] holds the
    experts' output rows in moe_permute's layout (grouped_gemm's output on its permuted_x);
    slot_to_row [T, top_k] int32 is moe_permute's, topk_weights [T, top_k] fp32 moe_route's. An
    index outside [0, R) (-1) contributes nothing and is never read; a token without a valid row
    gets zeros. out is allocated as [T, H] of expert_out's dtype when omitted."""
    api = "kiln.moe_unpermute"
    if out is None:
        out = allocate(api, "out", expert_out, shape=(int(slot_to_row.shape[0]), int(expert_out.shape[1])))
    _native.moe_unpermute(out, expert_out, slot_to_row, topk_weights, stream_of(stream, expert_out))
    return out


def fused_moe_workspace_bytes(tokens, top_k, experts, hidden, intermediate):
    """The bytes fused_moe's workspace needs (kiln::ops::fused_moe_workspace_bytes,
    KILN_FUSED_MOE_WORKSPACE_BYTES): for R = tokens * top_k rows, the 256-byte aligned regions
    expert_counts [E], m_indptr [E + 1], row_to_slot [R], slot_to_row [R] (int32), the gathered
    rows [R, hidden], the activations [R, intermediate] (2 bytes an element: bf16, fp16) and the
    decode path's counters (uint32, one per 32 columns of hidden)."""
    def region(nbytes):
        return (nbytes + 255) // 256 * 256

    rows = int(tokens) * int(top_k)
    experts = int(experts)
    return (region(4 * experts) + region(4 * (experts + 1)) + region(4 * rows) + region(4 * rows) +
            region(2 * rows * int(hidden)) + region(2 * rows * int(intermediate)) +
            region(4 * ((int(hidden) + 31) // 32)))


_ROUTE_OPTIONS = ("correction_bias", "scoring", "renormalize", "n_group", "topk_group", "routed_scaling_factor")


def _dim(t, i):
    """Dim i of t's shape, 0 where t has fewer dims (the library then names the bad rank)."""
    shape = t.shape
    return int(shape[i]) if len(shape) > i else 0


def _choices(api, topk_ids, topk_weights, router_logits, top_k, stream, route_options):
    """(topk_ids, topk_weights) of a fused layer's call: the given choices, or router_logits routed
    here by moe_route with route_options; each misuse refused naming the argument."""
    unknown = [name for name in route_options if name not in _ROUTE_OPTIONS]
    if unknown:
        raise TypeError(f"{api}() got an unexpected keyword argument {unknown[0]!r} (routing options: "
                        f"{', '.join(_ROUTE_OPTIONS)})")
    if router_logits is not None:
        if topk_ids is not None or topk_weights is not None:
            raise InvalidArgument(f"{api}: router_logits: give topk_ids and topk_weights (the choices), or "
                                  f"router_logits and top_k (routed here), not both", 1)
        if top_k is None:
            raise InvalidArgument(f"{api}: top_k: router_logits needs top_k (the experts per token)", 1)
        topk_ids, topk_weights = moe_route(router_logits, top_k, stream=stream, **route_options)
    else:
        if topk_ids is None or topk_weights is None:
            missing = "topk_ids" if topk_ids is None else "topk_weights"
            raise InvalidArgument(f"{api}: {missing}: give topk_ids and topk_weights (moe_route's outputs), or "
                                  f"router_logits= and top_k= to route here", 1)
        if route_options:
            raise InvalidArgument(f"{api}: {next(iter(route_options))}: a routing option, taken only with "
                                  f"router_logits= (the choices were given)", 1)
        if top_k is not None and int(top_k) != _dim(topk_ids, 1):
            raise InvalidArgument(f"{api}: top_k: {int(top_k)} is not topk_ids' dim 1 ({_dim(topk_ids, 1)}); "
                                  f"leave it out with given choices", 1)
    return topk_ids, topk_weights


def fused_moe(x, w13, w2, topk_ids=None, topk_weights=None, *, router_logits=None, top_k=None, out=None,
              workspace=None, stream=None, **route_options):
    """out [T, H]: a whole MoE layer, out[t] = sum over j of topk_weights[t, j] * w2[e] .
    (silu(w13[e, :I] . x[t]) * (w13[e, I:] . x[t])), e = topk_ids[t, j]; ids outside [0, E) are
    dropped. x [T, H] bf16/fp16 (H a multiple of 8); w13 [E, 2I, H] of x's dtype, each expert's I
    gate rows then its I up rows (I a multiple of 8, E <= 256); w2 [E, H, I]. The choices are
    topk_ids [T, top_k] int32 and topk_weights [T, top_k] fp32 (moe_route's outputs), or
    router_logits [T, E] with top_k, routed here by moe_route first with route_options (scoring,
    renormalize, n_group, topk_group, routed_scaling_factor, correction_bias: moe_route's), not
    both. The activation and each expert's output row are rounded to x's dtype, the combine is
    in fp32 in the order of j (deterministic). out may be x itself (in place); allocated as
    [T, H] of x's dtype when omitted. workspace: uint8 scratch of at least
    fused_moe_workspace_bytes(T, top_k, E, H, I) bytes, 256-byte aligned, allocated when
    omitted (give one to reuse it, or inside a CUDA-graph capture)."""
    api = "kiln.fused_moe"
    topk_ids, topk_weights = _choices(api, topk_ids, topk_weights, router_logits, top_k, stream, route_options)
    if out is None:
        out = allocate(api, "out", x, shape=(_dim(x, 0), _dim(x, 1)))
    if workspace is None:
        nbytes = fused_moe_workspace_bytes(_dim(x, 0), _dim(topk_ids, 1), _dim(w13, 0), _dim(x, 1),
                                           _dim(w13, 1) // 2)
        workspace = allocate(api, "workspace", x, shape=(nbytes,), dtype="uint8")
    _native.fused_moe(out, x, w13, w2, topk_ids, topk_weights, workspace, stream_of(stream, x))
    return out


def fused_moe_fp8_workspace_bytes(tokens, top_k, experts, hidden, intermediate):
    """The bytes fused_moe_fp8's workspace needs (kiln::ops::fused_moe_fp8_workspace_bytes,
    KILN_FUSED_MOE_FP8_WORKSPACE_BYTES): for R = tokens * top_k rows, the 256-byte aligned regions
    expert_counts [E], m_indptr [E + 1], row_to_slot [R], slot_to_row [R] (int32); one region for
    the quantized gathered rows [R, hidden] (1 byte), their fp32 scales [R, ceil(hidden / 128)] and
    the first GEMM's bf16 rows [R, 2 * intermediate], which the second GEMM's bf16 rows [R, hidden]
    later overwrite (the larger of the two); the quantized activations [R, intermediate] and their
    scales [R, ceil(intermediate / 128)]."""
    def region(nbytes):
        return (nbytes + 255) // 256 * 256

    rows = int(tokens) * int(top_k)
    experts, hidden, inter = int(experts), int(hidden), int(intermediate)
    first = region(rows * hidden) + region(4 * rows * ((hidden + 127) // 128)) + region(4 * rows * inter)
    shared = max(first, region(2 * rows * hidden))
    return (region(4 * experts) + region(4 * (experts + 1)) + region(4 * rows) + region(4 * rows) + shared +
            region(rows * inter) + region(4 * rows * ((inter + 127) // 128)))


def fused_moe_fp8(x, w13, w13_scales, w2, w2_scales, topk_ids=None, topk_weights=None, *, router_logits=None,
                  top_k=None, out=None, workspace=None, stream=None, **route_options):
    """out [T, H] bf16: fused_moe on block-scaled fp8 experts (DeepSeek-V3's recipe). x [T, H] bf16
    (H a multiple of 16); w13 [E, 2I, H] and w2 [E, H, I] e4m3 (torch.float8_e4m3fn; I a multiple of
    16) with fp32 scales per 128 x 128 block, w13_scales [E, ceil(2I / 128), ceil(H / 128)] and
    w2_scales [E, ceil(H / 128), ceil(I / 128)]. x's routed rows and silu(gate) * up are quantized
    to e4m3 per 128 columns (scale max|v| / 448) before each product (grouped fp8 GEMMs; a decode
    path of fp8 GEMVs for few tokens, docs/kernels-moe.md "The fp8 decode path"); the
    products' rows are bf16, the combine fp32 in the order of j (deterministic). The choices as fused_moe's (topk_ids
    and topk_weights, or router_logits and top_k with route_options). out may be x itself;
    workspace: uint8 scratch of at least fused_moe_fp8_workspace_bytes(T, top_k, E, H, I) bytes,
    256-byte aligned, allocated when omitted. sm_90a GPUs only."""
    api = "kiln.fused_moe_fp8"
    topk_ids, topk_weights = _choices(api, topk_ids, topk_weights, router_logits, top_k, stream, route_options)
    if out is None:
        out = allocate(api, "out", x, shape=(_dim(x, 0), _dim(x, 1)))
    if workspace is None:
        nbytes = fused_moe_fp8_workspace_bytes(_dim(x, 0), _dim(topk_ids, 1), _dim(w13, 0), _dim(x, 1),
                                               _dim(w13, 1) // 2)
        workspace = allocate(api, "workspace", x, shape=(nbytes,), dtype="uint8")
    _native.fused_moe_fp8(out, x, w13, w13_scales, w2, w2_scales, topk_ids, topk_weights, workspace,
                          stream_of(stream, x))
    return out
