"""Every op of the package on a GPU against its torch reference (torch_reference.py), sized and
parametrized like the C++ GPU tests (tests/client/ops/gpu_*_test.cpp). Each test is marked with
kiln.testing.requires: without torch or a GPU (or of another arch for the sm_90a ops) it is
skipped with the reason. The `kilnd` fixture is the session's daemon."""
import math

import pytest

import kiln
import kiln.testing
import torch_reference as ref
from torch_reference import TOLERANCE

requires_gpu = kiln.testing.requires()
requires_sm90a = kiln.testing.requires(arch="sm_90a")


def _torch():
    import torch
    return torch


def _gen(seed=0):
    torch = _torch()
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    return g


def _close(actual, expected, dtype_name, scale=1.0):
    torch = _torch()
    tol = TOLERANCE[dtype_name] * scale
    torch.testing.assert_close(actual.float(), expected.float(), atol=tol, rtol=tol)


# ---- norm ----------------------------------------------------------------------------------------


@requires_gpu
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("tokens,hidden", [(1, 128), (7, 4096), (33, 5120), (4, 1000), (3, 1)])
def test_rms_norm(kilnd, dtype, tokens, hidden):
    torch = _torch()
    g = _gen(hidden)
    x = ref.uniform((tokens, hidden), ref.torch_dtype(dtype), g)
    w = ref.uniform((hidden,), ref.torch_dtype(dtype), g)
    out = kiln.rms_norm(x, w, 1e-6)  # allocated like x
    assert out.shape == x.shape and out.dtype == x.dtype and out.data_ptr() != x.data_ptr()
    _close(out, ref.rms_norm(x, w, 1e-6), dtype)
    # In place, and into a strided view (the first columns of a wider buffer).
    y = x.clone()
    assert kiln.rms_norm(y, w, 1e-6, out=y) is y
    _close(y, out, dtype)
    wide = torch.zeros((tokens, hidden + 64), dtype=x.dtype, device="cuda")
    kiln.rms_norm(x, w, 1e-6, out=wide[:, :hidden])
    _close(wide[:, :hidden], out, dtype)


@requires_gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("hidden", [4096, 1000])
def test_fused_add_rms_norm(kilnd, dtype, hidden):
    g = _gen(1)
    x = ref.uniform((9, hidden), ref.torch_dtype(dtype), g)
    r = ref.uniform((9, hidden), ref.torch_dtype(dtype), g)
    w = ref.uniform((hidden,), ref.torch_dtype(dtype), g)
    want_residual = x + r
    want = ref.rms_norm(want_residual, w, 1e-5)
    kiln.fused_add_rms_norm(x, r, w, 1e-5)
    _close(r, want_residual, dtype)
    _close(x, want, dtype)


# ---- activation ----------------------------------------------------------------------------------


@requires_gpu
@pytest.mark.parametrize("kind", ["silu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("tokens,d", [(5, 14336), (3, 13), (1, 64)])
def test_gated_activations(kilnd, kind, dtype, tokens, d):
    x = ref.uniform((tokens, 2 * d), ref.torch_dtype(dtype), _gen(d))
    out = getattr(kiln, f"{kind}_and_mul")(x)
    assert tuple(out.shape) == (tokens, d)
    _close(out, ref.gated(kind, x), dtype)


# ---- rope ----------------------------------------------------------------------------------------


@requires_gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rotary_dim,llama31", [(0, None), (64, None), (0, True)])
def test_apply_rope(kilnd, dtype, interleaved, rotary_dim, llama31):
    torch = _torch()
    g = _gen(2)
    tokens, hq, hk, d = 11, 8, 2, 128
    qkv = ref.uniform((tokens, hq + 2 * hk, d), ref.torch_dtype(dtype), g)
    q, k = qkv[:, :hq], qkv[:, hq:hq + hk]  # views into one fused buffer
    positions = torch.randint(0, 16384, (tokens,), device="cuda", generator=g, dtype=torch.int64)
    theta = 500000.0
    scaling = tuple(kiln.Llama31RopeScaling()) if llama31 else None
    inv = ref.rope_inv_freq(rotary_dim or d, theta, scaling)
    want_q, want_k = ref.rope(q, positions, inv, interleaved), ref.rope(k, positions, inv, interleaved)
    kiln.apply_rope(q, k, positions, rotary_dim=rotary_dim, interleaved=interleaved, theta=theta, llama31=llama31)
    _close(q, want_q, dtype, scale=2)
    _close(k, want_k, dtype, scale=2)


@requires_gpu
@pytest.mark.parametrize("interleaved", [False, True])
def test_apply_rope_with_cos_sin_cache(kilnd, interleaved):
    torch = _torch()
    g = _gen(3)
    tokens, d, max_pos = 6, 128, 4096
    q = ref.uniform((tokens, 4, d), torch.bfloat16, g)
    k = ref.uniform((tokens, 1, d), torch.bfloat16, g)
    positions = torch.randint(0, max_pos, (tokens,), device="cuda", generator=g, dtype=torch.int32)
    inv = ref.rope_inv_freq(d, 10000.0)
    angle = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    cache = torch.cat([angle.cos(), angle.sin()], dim=1).float().cuda()
    want_q, want_k = ref.rope(q, positions, inv, interleaved), ref.rope(k, positions, inv, interleaved)
    kiln.apply_rope_with_cos_sin_cache(q, k, positions, cache, interleaved=interleaved)
    _close(q, want_q, "bf16", scale=2)
    _close(k, want_k, "bf16", scale=2)


# ---- paged KV and decode -------------------------------------------------------------------------


def _page_table(lengths, page_size, num_pages_extra=3, seed=4):
    """kv_indptr, kv_indices (shuffled pages), kv_last_page_len as host lists."""
    import random
    rng = random.Random(seed)
    pages = [max(1, math.ceil(n / page_size)) for n in lengths]
    order = list(range(sum(pages) + num_pages_extra))
    rng.shuffle(order)
    indptr = [0]
    for p in pages:
        indptr.append(indptr[-1] + p)
    last = [n - (p - 1) * page_size for n, p in zip(lengths, pages)]
    return indptr, order[:indptr[-1]], last, len(order)


def _dense(cache, indptr, indices, last, page_size, b):
    pages = cache[indices[indptr[b]:indptr[b + 1]]]  # [p, page_size, Hk, D]
    flat = pages.reshape(-1, *cache.shape[2:])
    return flat[:(indptr[b + 1] - indptr[b] - 1) * page_size + last[b]]


@requires_gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("head_dim,group,page_size", [(128, 4, 16), (64, 1, 1), (256, 8, 64)])
@pytest.mark.parametrize("lengths", [[1, 17, 300], [4096, 33]])
def test_append_paged_kv_then_batch_decode(kilnd, dtype, head_dim, group, page_size, lengths):
    torch = _torch()
    g = _gen(5)
    dt = ref.torch_dtype(dtype)
    hk = 2
    hq = hk * group
    indptr, indices, last, num_pages = _page_table(lengths, page_size)
    dev = lambda xs: torch.tensor(xs, dtype=torch.int32, device="cuda")  # noqa: E731
    k_cache = torch.zeros((num_pages, page_size, hk, head_dim), dtype=dt, device="cuda")
    v_cache = torch.zeros_like(k_cache)
    # Append every position of every request through append_paged_kv.
    nnz = sum(lengths)
    k = ref.uniform((nnz, hk, head_dim), dt, g)
    v = ref.uniform((nnz, hk, head_dim), dt, g)
    batch = dev([b for b, n in enumerate(lengths) for _ in range(n)])
    pos = dev([p for n in lengths for p in range(n)])
    kiln.append_paged_kv(k_cache, v_cache, k, v, batch, pos, dev(indptr), dev(indices), dev(last))
    starts = [0]
    for n in lengths:
        starts.append(starts[-1] + n)
    for b in range(len(lengths)):
        assert torch.equal(_dense(k_cache, indptr, indices, last, page_size, b), k[starts[b]:starts[b + 1]])
        assert torch.equal(_dense(v_cache, indptr, indices, last, page_size, b), v[starts[b]:starts[b + 1]])
    # Decode one query per request.
    q = ref.uniform((len(lengths), hq, head_dim), dt, g)
    plan = kiln.BatchDecodePlan(indptr, last, hq, hk, head_dim, page_size, dt)
    out, lse = kiln.batch_decode(plan, q, k_cache, v_cache, dev(indptr), dev(indices), dev(last), return_lse=True)
    for b in range(len(lengths)):
        want, want_lse = ref.attention(q[b:b + 1], k[starts[b]:starts[b + 1]], v[starts[b]:starts[b + 1]])
        _close(out[b:b + 1], want, dtype)
        torch.testing.assert_close(lse[b:b + 1], want_lse, atol=1e-3, rtol=1e-3)


# ---- prefill -------------------------------------------------------------------------------------


@requires_sm90a
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("qo_lens,kv_lens", [([7, 130], [7, 300]), ([64], [64])])
def test_batch_prefill_ragged(kilnd, dtype, causal, qo_lens, kv_lens):
    torch = _torch()
    g = _gen(6)
    dt = ref.torch_dtype(dtype)
    hq, hk, d = 8, 2, 128
    qo_indptr, kv_indptr = [0], [0]
    for a, b in zip(qo_lens, kv_lens):
        qo_indptr.append(qo_indptr[-1] + a)
        kv_indptr.append(kv_indptr[-1] + b)
    q = ref.uniform((qo_indptr[-1], hq, d), dt, g)
    k = ref.uniform((kv_indptr[-1], hk, d), dt, g)
    v = ref.uniform((kv_indptr[-1], hk, d), dt, g)
    plan = kiln.BatchPrefillPlan.ragged(qo_indptr, kv_indptr, hq, hk, d, dt, causal=causal)
    dev = lambda xs: torch.tensor(xs, dtype=torch.int32, device="cuda")  # noqa: E731
    out = kiln.batch_prefill_ragged(plan, q, k, v, dev(qo_indptr), dev(kv_indptr))
    for b in range(len(qo_lens)):
        qs, ks = slice(qo_indptr[b], qo_indptr[b + 1]), slice(kv_indptr[b], kv_indptr[b + 1])
        want, _ = ref.attention(q[qs], k[ks], v[ks], causal_offset=(kv_lens[b] - qo_lens[b]) if causal else None)
        _close(out[qs], want, dtype)


# ---- sampling ------------------------------------------------------------------------------------


@requires_gpu
@pytest.mark.parametrize("batch,vocab", [(4, 128256), (33, 1000), (1, 1)])
def test_argmax_and_top_k_1(kilnd, batch, vocab):
    torch = _torch()
    probs = torch.rand((batch, vocab), device="cuda", generator=_gen(7))
    want = probs.argmax(dim=-1).to(torch.int32)
    assert torch.equal(kiln.argmax(probs), want)
    assert torch.equal(kiln.top_k_sampling(probs, 1, seed=3), want)


@requires_gpu
@pytest.mark.parametrize("sampler", ["top_k", "top_p", "top_k_top_p", "min_p"])
def test_samplers_stay_in_the_allowed_set_and_repeat(kilnd, sampler):
    torch = _torch()
    batch, vocab = 16, 32000
    probs = torch.softmax(torch.randn((batch, vocab), device="cuda", generator=_gen(8)) * 3, dim=-1)
    k = torch.full((batch,), 50, dtype=torch.int32, device="cuda")
    p = torch.full((batch,), 0.8, dtype=torch.float32, device="cuda")
    calls = {
        "top_k": lambda s: kiln.top_k_sampling(probs, k, seed=s),
        "top_p": lambda s: kiln.top_p_sampling(probs, p, seed=s),
        "top_k_top_p": lambda s: kiln.top_k_top_p_sampling(probs, 50, 0.8, seed=s),
        "min_p": lambda s: kiln.min_p_sampling(probs, 0.05, seed=s),
    }
    samples = calls[sampler](11)
    assert torch.equal(samples, calls[sampler](11))  # deterministic
    p64 = probs.double()
    chosen = p64.gather(1, samples.long()[:, None])[:, 0]
    kth = p64.topk(50, dim=-1).values[:, -1]
    above = (p64 * (p64 > chosen[:, None])).sum(-1)
    if sampler in ("top_k", "top_k_top_p"):
        assert bool((chosen >= kth).all())
    if sampler == "top_p":
        assert bool((above < 0.8 * p64.sum(-1) + 1e-6).all())
    if sampler == "min_p":
        assert bool((chosen >= 0.05 * p64.max(-1).values - 1e-9).all())


# ---- moe -----------------------------------------------------------------------------------------


def _moe_reference(logits, top_k, bias, scoring, renormalize, n_group, topk_group, scale):
    """The rule of kiln/ops/moe.h in float64; stable sorts give the lower id (and group) on ties."""
    torch = _torch()
    x = logits.double()
    u = torch.softmax(x, dim=-1) if scoring == "softmax" else torch.sigmoid(x)
    key = u + bias.double() if bias is not None else u.clone()
    tokens, experts = key.shape
    if n_group > 1:
        size = experts // n_group
        top = key.view(tokens, n_group, size).sort(dim=-1, descending=True).values
        score = top[..., :2].sum(-1) if size >= 2 else top[..., 0]
        kept = score.sort(dim=-1, descending=True, stable=True).indices[:, :topk_group]
        mask = torch.zeros(tokens, n_group, dtype=torch.bool, device=key.device).scatter_(1, kept, True)
        key = key.masked_fill(~mask.repeat_interleave(size, dim=1), float("-inf"))
    ids = key.sort(dim=-1, descending=True, stable=True).indices[:, :top_k]
    w = u.gather(1, ids)
    if renormalize:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    return ids.to(torch.int32), w * scale


@requires_gpu
@pytest.mark.parametrize("tokens", [1, 3, 64, 1000])
@pytest.mark.parametrize("model", ["mixtral", "qwen3", "deepseek_v3", "deepseek_v3_ties"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_moe_route_matches_the_float64_reference(kilnd, tokens, model, dtype):
    torch = _torch()
    g = _gen(21)
    experts, top_k = {"mixtral": (8, 2), "qwen3": (128, 8)}.get(model, (256, 8))
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    kwargs = {}
    if model.startswith("deepseek"):
        bias = (torch.rand((experts,), device="cuda", generator=g) - 0.5) * 0.2
        if model.endswith("ties"):
            bias = torch.round(bias * 16) / 16
        kwargs = dict(correction_bias=bias, scoring="sigmoid", n_group=8, topk_group=4, routed_scaling_factor=2.5)
    logits = torch.randn((tokens, experts), device="cuda", generator=g)
    if model.endswith("ties"):
        logits = torch.round(logits.abs() * 4) / 4  # 0, 0.25, ...: many equal keys and group sums
    logits = logits.to(torch_dtype)
    ids, weights = kiln.moe_route(logits, top_k, **kwargs)
    assert ids.dtype == torch.int32 and weights.dtype == torch.float32
    assert tuple(ids.shape) == (tokens, top_k) and tuple(weights.shape) == (tokens, top_k)
    want_ids, want_weights = _moe_reference(logits, top_k, kwargs.get("correction_bias"),
                                            kwargs.get("scoring", "softmax"), True, kwargs.get("n_group", 1),
                                            kwargs.get("topk_group", 1), kwargs.get("routed_scaling_factor", 1.0))
    assert torch.equal(ids, want_ids)
    torch.testing.assert_close(weights.double(), want_weights, atol=1e-6, rtol=1e-5)
    # Given (poisoned) outputs are filled, and a second call gives the same bits.
    out_ids = torch.full_like(ids, -1)
    out_weights = torch.full_like(weights, float("nan"))
    kiln.moe_route(logits, topk_ids=out_ids, topk_weights=out_weights, **kwargs)
    assert torch.equal(out_ids, ids) and torch.equal(out_weights, weights)


def _permute_reference(ids, experts, align, rows):
    """kiln/ops/moe.h's moe_permute on the host: the slots in order, each to its expert's next row."""
    flat = ids.reshape(-1).tolist()
    counts = [0] * experts
    for e in flat:
        if 0 <= e < experts:
            counts[e] += 1
    indptr = [0]
    for c in counts:
        indptr.append(indptr[-1] + (c + align - 1) // align * align)
    cursor = indptr[:-1]
    row_to_slot, slot_to_row = [-1] * rows, [-1] * len(flat)
    for s, e in enumerate(flat):
        if 0 <= e < experts:
            row_to_slot[cursor[e]] = s
            slot_to_row[s] = cursor[e]
            cursor[e] += 1
    return counts, indptr, row_to_slot, slot_to_row


@requires_gpu
@pytest.mark.parametrize("tokens", [0, 1, 64, 1000])
@pytest.mark.parametrize("experts,top_k", [(8, 2), (128, 8), (256, 8)])
@pytest.mark.parametrize("align", [1, 128])
def test_moe_permute_matches_the_reference_and_gathers(kilnd, tokens, experts, top_k, align):
    torch = _torch()
    g = _gen(16)
    logits = torch.randn((tokens, experts), device="cuda", generator=g)
    ids, _ = kiln.moe_route(logits, top_k)
    ids[::7, 0] = -1  # no row for these slots
    x = torch.randn((tokens, 256), device="cuda", generator=g).to(torch.bfloat16)
    counts, indptr, row_to_slot, slot_to_row, permuted_x = kiln.moe_permute(ids, experts, align=align, x=x)
    rows = kiln.moe_permute_rows(tokens, top_k, experts, align)
    assert tuple(row_to_slot.shape) == (rows,) and tuple(permuted_x.shape) == (rows, 256)
    want = _permute_reference(ids.cpu(), experts, align, rows)
    assert counts.cpu().tolist() == want[0]
    assert indptr.cpu().tolist() == want[1]
    assert row_to_slot.cpu().tolist() == want[2]
    assert slot_to_row.cpu().reshape(-1).tolist() == want[3]
    used = want[1][-1]
    r2s = row_to_slot[:used].long()
    expected = torch.where((r2s >= 0)[:, None], x[(r2s.clamp(min=0) // top_k)], torch.zeros_like(x[:1]))
    assert torch.equal(permuted_x[:used].view(torch.int16), expected.view(torch.int16))
    # The layout is grouped_gemm's: same bits again into given outputs.
    again = kiln.moe_permute(ids, expert_counts=torch.empty_like(counts), m_indptr=torch.empty_like(indptr),
                             row_to_slot=torch.empty_like(row_to_slot), slot_to_row=torch.empty_like(slot_to_row),
                             align=align)
    assert all(torch.equal(a, b) for a, b in zip(again, (counts, indptr, row_to_slot, slot_to_row)))


@requires_gpu
@pytest.mark.parametrize("tokens", [0, 1, 64, 1000])
@pytest.mark.parametrize("experts,top_k,hidden", [(8, 2, 4096), (128, 8, 2048), (256, 8, 7168)])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_moe_unpermute_combines_route_and_permute(kilnd, tokens, experts, top_k, hidden, dtype):
    """route -> permute with the gather -> experts that scale their rows -> unpermute: against a torch
    float64 combine of the same rows, with dropped choices (-1) skipped."""
    torch = _torch()
    g = _gen(17)
    dt = getattr(torch, dtype)
    logits = torch.randn((tokens, experts), device="cuda", generator=g)
    ids, weights = kiln.moe_route(logits, top_k)
    ids[::5, -1] = -1  # no row for these choices
    x = torch.randn((tokens, hidden), device="cuda", generator=g).to(dt)
    _, _, _, slot_to_row, permuted_x = kiln.moe_permute(ids, experts, align=64, x=x)
    expert_out = (permuted_x.float() * 0.5).to(dt)  # every expert halves its rows
    out = kiln.moe_unpermute(expert_out, slot_to_row, weights)
    assert out.dtype == dt and tuple(out.shape) == (tokens, hidden)
    idx = slot_to_row.long()
    valid = (idx >= 0) & (idx < expert_out.shape[0])
    picked = expert_out[idx.clamp(min=0)].double() if tokens else torch.zeros((0, top_k, hidden), device="cuda")
    want = torch.where(valid[..., None], picked * weights.double()[..., None], torch.zeros_like(picked)).sum(1)
    tol = 1.6e-2 if dtype == "bfloat16" else 2e-3
    torch.testing.assert_close(out.double(), want.double(), atol=tol, rtol=tol)
    # Into a given out with padded rows: the padding stays untouched, the rows are the same bits.
    padded = torch.full((tokens, hidden + 8), float("nan"), device="cuda", dtype=dt)
    again = kiln.moe_unpermute(expert_out, slot_to_row, weights, out=padded[:, :hidden])
    assert torch.equal(again.view(torch.int16), out.view(torch.int16))
    assert torch.isnan(padded[:, hidden:]).all()


def _fused_moe_reference(x, w13, w2, ids, weights):
    """kernels/traces/fused_moe.json's reference in float64, per expert: its tokens' rows through
    the gate and up rows, silu(gate) * up rounded to x's dtype, the down projection rounded to x's
    dtype (the op stores both in it), weighted and summed per token; ids outside [0, E) dropped."""
    torch = _torch()
    experts, inter = w13.shape[0], w13.shape[1] // 2
    xd = x.double()
    out = torch.zeros_like(xd)
    idx = ids.long()
    for e in torch.unique(idx[(idx >= 0) & (idx < experts)]).tolist():
        tok, j = torch.nonzero(idx == e, as_tuple=True)
        h = xd[tok] @ w13[e].double().t()
        gate, up = h[:, :inter], h[:, inter:]
        act = (gate / (1 + torch.exp(-gate)) * up).to(x.dtype).double()
        y = (act @ w2[e].double().t()).to(x.dtype).double()
        out.index_add_(0, tok, y * weights[tok, j].double()[:, None])
    return out


def _expert_weights(shape, fan_in, dtype, g):
    """Uniform with variance 1 / fan_in: the gate, up and down products stay near 1 in size."""
    bound = math.sqrt(3.0 / fan_in)
    return ref.uniform(shape, dtype, g, -bound, bound)


# The routing of the models whose shapes the cases borrow (moe_route's options).
_DEEPSEEK_ROUTING = dict(scoring="sigmoid", n_group=8, topk_group=4, routed_scaling_factor=2.5)


@requires_sm90a
@pytest.mark.parametrize("tokens", [0, 1, 5, 64, 300])
@pytest.mark.parametrize("experts,top_k,hidden,inter,routing", [
    (8, 2, 128, 256, "softmax"),     # Mixtral's routing, small widths
    (64, 6, 136, 200, "softmax"),    # H and I that no tile divides (partial tiles both ways)
    (256, 8, 64, 128, "deepseek"),   # DeepSeek-V3's routing: sigmoid, bias, group limit, scaling
])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_fused_moe_matches_the_float64_reference(kilnd, tokens, experts, top_k, hidden, inter, routing, dtype):
    """route -> fused_moe (a dropped choice on every fifth token) against the float64 reference;
    routing inside the call (router_logits=, top_k=) gives the same bits; in place (out=x) and
    into a given out with padded rows with one workspace, reused, the same bits again."""
    torch = _torch()
    g = _gen(31)
    dt = ref.torch_dtype(dtype)
    x = ref.uniform((tokens, hidden), dt, g)
    w13 = _expert_weights((experts, 2 * inter, hidden), hidden, dt, g)
    w2 = _expert_weights((experts, hidden, inter), inter, dt, g)
    logits = torch.randn((tokens, experts), device="cuda", generator=g)
    options = {}
    if routing == "deepseek":
        bias = (torch.rand((experts,), device="cuda", generator=g) - 0.5) * 0.2
        options = dict(_DEEPSEEK_ROUTING, correction_bias=bias)
    ids, weights = kiln.moe_route(logits, top_k, **options)
    ids[::5, -1] = -1  # dropped: no row, no contribution
    out = kiln.fused_moe(x, w13, w2, ids, weights)
    assert out.dtype == dt and tuple(out.shape) == (tokens, hidden)
    want = _fused_moe_reference(x, w13, w2, ids, weights)
    # Two roundings to the dtype (each expert's output row, then out) against float64.
    _close(out.double(), want, dtype, scale=2.0)

    # Routed inside the call: the same choices (the last ones of every fifth token not dropped).
    routed = kiln.fused_moe(x, w13, w2, router_logits=logits, top_k=top_k, **options)
    ids_all, weights_all = kiln.moe_route(logits, top_k, **options)
    assert torch.equal(routed.view(torch.int16), kiln.fused_moe(x, w13, w2, ids_all, weights_all).view(torch.int16))

    # One workspace of the exact size, reused: in place on a copy of x, then into padded rows.
    nbytes = kiln.fused_moe_workspace_bytes(tokens, top_k, experts, hidden, inter)
    workspace = torch.full((nbytes,), 0xA5, dtype=torch.uint8, device="cuda")  # scratch: any contents
    inplace = x.clone()
    again = kiln.fused_moe(inplace, w13, w2, ids, weights, out=inplace, workspace=workspace)
    assert again is inplace and torch.equal(inplace.view(torch.int16), out.view(torch.int16))
    padded = torch.full((tokens, hidden + 8), float("nan"), device="cuda", dtype=dt)
    kiln.fused_moe(x, w13, w2, ids, weights, out=padded[:, :hidden], workspace=workspace)
    assert torch.equal(padded[:, :hidden].view(torch.int16), out.view(torch.int16))
    assert torch.isnan(padded[:, hidden:]).all()


@requires_sm90a
@pytest.mark.parametrize("dtype", ["bf16"])
def test_fused_moe_mixtral_width_one_token(kilnd, dtype):
    """Mixtral-8x7B's expert widths (E 8, top-2, H 4096, I 14336) at decode: one token, the two
    experts it chose read, against the float64 reference; in place with a given workspace."""
    torch = _torch()
    g = _gen(32)
    dt = ref.torch_dtype(dtype)
    experts, top_k, hidden, inter = 8, 2, 4096, 14336
    x = ref.uniform((1, hidden), dt, g)
    w13 = _expert_weights((experts, 2 * inter, hidden), hidden, dt, g)
    w2 = _expert_weights((experts, hidden, inter), inter, dt, g)
    logits = torch.randn((1, experts), device="cuda", generator=g)
    ids, weights = kiln.moe_route(logits, top_k)
    out = kiln.fused_moe(x, w13, w2, ids, weights)
    _close(out.double(), _fused_moe_reference(x, w13, w2, ids, weights), dtype, scale=2.0)
    workspace = torch.empty(kiln.fused_moe_workspace_bytes(1, top_k, experts, hidden, inter), dtype=torch.uint8,
                            device="cuda")
    assert workspace.numel() == 75264  # the trace example's figure
    kiln.fused_moe(x, w13, w2, router_logits=logits, top_k=top_k, out=x, workspace=workspace)
    assert torch.equal(x.view(torch.int16), out.view(torch.int16))


def _quantized_rows(v):
    """v [R, C] as fused_moe_fp8 quantizes a row: per 128 columns scale = max(amax, 1e-10) / 448, e4m3
    codes rounded to nearest even (saturated); the values the codes stand for, in float64."""
    torch = _torch()
    rows, cols = v.shape
    g = torch.nn.functional.pad(v.float(), (0, (-cols) % 128)).view(rows, -1, 128)
    scale = g.abs().amax(dim=2).clamp(min=1e-10) / 448.0
    q = (g / scale[:, :, None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return (q.double() * scale.double()[:, :, None]).view(rows, -1)[:, :cols]


def _block_dequantized(w, s):
    """An e4m3 weight [rows, cols] times its fp32 scale per 128 x 128 block, in float64."""
    rows, cols = w.shape
    return w.double() * s.double().repeat_interleave(128, dim=0)[:rows].repeat_interleave(128, dim=1)[:, :cols]


def _fused_moe_fp8_reference(x, w13, w13_s, w2, w2_s, ids, weights):
    """kernels/traces/fused_moe_fp8.json's reference: x's rows and silu(gate) * up quantized as the op
    does, the products in float64, gate, up and each expert's row rounded to bf16."""
    torch = _torch()
    experts, inter = w13.shape[0], w13.shape[1] // 2
    out = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    idx = ids.long()
    for e in torch.unique(idx[(idx >= 0) & (idx < experts)]).tolist():
        tok, j = torch.nonzero(idx == e, as_tuple=True)
        h = (_quantized_rows(x[tok]) @ _block_dequantized(w13[e], w13_s[e]).t()).to(torch.bfloat16).float()
        act = torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]
        y = (_quantized_rows(act) @ _block_dequantized(w2[e], w2_s[e]).t()).to(torch.bfloat16).double()
        out.index_add_(0, tok, y * weights[tok, j].double()[:, None])
    return out


@requires_sm90a
@pytest.mark.parametrize("tokens,experts,top_k,hidden,inter", [
    (1, 8, 2, 256, 128), (5, 64, 6, 272, 208), (300, 256, 8, 512, 256), (0, 8, 2, 256, 128)])
def test_fused_moe_fp8_matches_the_quantized_float64_layer(kilnd, tokens, experts, top_k, hidden, inter):
    """route -> fused_moe_fp8 (a dropped choice on every fifth token) against the float64 layer that
    quantizes as the op does. The fp8 GEMM's in-block sums move gate and up by up to 3e-4 of their
    terms and so about 1 % of the activation codes to a neighbour: the bounds allow out 5 % from the
    layer in norm and 25 % of its RMS at worst (a wrong scale block or expert is off by the order of
    the values).
    In place with a given workspace: the same bits."""
    torch = _torch()
    g = _gen(33)
    x = ref.uniform((tokens, hidden), torch.bfloat16, g)

    def weight(rows, cols, fan_in):
        codes = (torch.rand((experts, rows, cols), device="cuda", generator=g) * 2 - 1).to(torch.float8_e4m3fn)
        blocks = (experts, (rows + 127) // 128, (cols + 127) // 128)
        scales = (1.5 + 3.0 * torch.rand(blocks, device="cuda", generator=g)) / math.sqrt(fan_in)
        return codes, scales

    w13, w13_s = weight(2 * inter, hidden, hidden)
    w2, w2_s = weight(hidden, inter, inter)
    logits = torch.randn((tokens, experts), device="cuda", generator=g)
    ids, weights = kiln.moe_route(logits, top_k)
    ids[::5, -1] = -1
    out = kiln.fused_moe_fp8(x, w13, w13_s, w2, w2_s, ids, weights)
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (tokens, hidden)
    if tokens == 0:
        return
    want = _fused_moe_fp8_reference(x, w13, w13_s, w2, w2_s, ids, weights)
    # Whole-tensor bounds, not per element: one activation code moved to its neighbour moves each
    # of its expert's output columns by up to 1/14 of the largest activation times w2, a few % of a
    # small element; about 20 such moves land on each element of out.
    err = out.double() - want
    relative = (err.norm() / want.norm()).item()
    worst = (err.abs().max() / want.pow(2).mean().sqrt()).item()
    assert relative < 0.05 and worst < 0.25, f"|out - want| / |want| = {relative:.4f}, max |out - want| / RMS = {worst:.4f}"
    workspace = torch.full((kiln.fused_moe_fp8_workspace_bytes(tokens, top_k, experts, hidden, inter),), 0xA5,
                           dtype=torch.uint8, device="cuda")
    inplace = x.clone()
    kiln.fused_moe_fp8(inplace, w13, w13_s, w2, w2_s, ids, weights, out=inplace, workspace=workspace)
    assert torch.equal(inplace.view(torch.int16), out.view(torch.int16))


# ---- gemm ----------------------------------------------------------------------------------------


@requires_sm90a
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (129, 1024, 512), (256, 14336, 4096)])
def test_gemm(kilnd, dtype, m, n, k):
    torch = _torch()
    g = _gen(9)
    a = ref.uniform((m, k), ref.torch_dtype(dtype), g, -1, 1)
    b = ref.uniform((n, k), ref.torch_dtype(dtype), g, -1, 1)
    d = kiln.gemm(a, b, out_dtype=torch.float32)
    want = a.double() @ b.double().T
    torch.testing.assert_close(d.double(), want, atol=1e-2 * math.sqrt(k) / 8, rtol=1e-3)


# ---- streams and CUDA graphs ---------------------------------------------------------------------


@requires_gpu
def test_ops_follow_the_current_torch_stream_and_capture_in_a_graph(kilnd):
    """Capturing on a side stream fails if an op launches on any other stream or synchronizes;
    the replayed graph must give the eager results for new inputs written in place."""
    torch = _torch()
    g = _gen(10)
    hidden, page_size, hq, hk, d = 4096, 16, 8, 2, 128
    x = ref.uniform((8, hidden), torch.bfloat16, g)
    w = ref.uniform((hidden,), torch.bfloat16, g)
    out = torch.empty_like(x)
    lengths = [40, 700, 3]
    indptr, indices, last, num_pages = _page_table(lengths, page_size)
    dev = lambda xs: torch.tensor(xs, dtype=torch.int32, device="cuda")  # noqa: E731
    kv_indptr, kv_indices, kv_last = dev(indptr), dev(indices), dev(last)
    k_cache = ref.uniform((num_pages, page_size, hk, d), torch.bfloat16, g)
    v_cache = ref.uniform((num_pages, page_size, hk, d), torch.bfloat16, g)
    q = ref.uniform((len(lengths), hq, d), torch.bfloat16, g)
    plan = kiln.BatchDecodePlan(indptr, last, hq, hk, d, page_size, torch.bfloat16)
    attn = torch.empty_like(q)
    # Warm up (fetch and load the kernels) outside the capture, on the stream that captures.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        kiln.rms_norm(x, w, out=out)
        plan.run(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last, out=attn)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kiln.rms_norm(x, w, out=out)
        plan.run(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last, out=attn)
    x.copy_(ref.uniform(x.shape, torch.bfloat16, g))
    q.copy_(ref.uniform(q.shape, torch.bfloat16, g))
    out.zero_()
    attn.zero_()
    graph.replay()
    torch.cuda.synchronize()
    _close(out, ref.rms_norm(x, w, 1e-6), "bf16")
    eager = plan.run(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last)
    assert torch.equal(attn, eager)


@requires_gpu
def test_an_explicit_stream_object_is_used(kilnd):
    torch = _torch()
    x = ref.uniform((4, 256), torch.float16, _gen(11))
    w = ref.uniform((256,), torch.float16, _gen(12))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    out = kiln.rms_norm(x, w, stream=s)  # out allocated on the current stream, written on s
    s.synchronize()
    _close(out, ref.rms_norm(x, w, 1e-6), "fp16")


@requires_gpu
def test_cpu_torch_tensors_are_refused(kilnd):
    torch = _torch()
    with pytest.raises(kiln.InvalidArgument, match="expected a CUDA device tensor, found one on cpu"):
        kiln.rms_norm(torch.ones((2, 8)), torch.ones(8))


# ---- other frameworks ----------------------------------------------------------------------------


@requires_gpu
def test_cupy_arrays_with_their_current_stream(kilnd):
    cupy = pytest.importorskip("cupy")
    import numpy as np
    rng = np.random.default_rng(13)
    x_host = rng.uniform(-2, 2, (5, 512)).astype(np.float16)
    w_host = rng.uniform(-2, 2, (512,)).astype(np.float16)
    x, w = cupy.asarray(x_host), cupy.asarray(w_host)
    out = cupy.empty_like(x)
    with pytest.raises(kiln.InvalidArgument, match="kiln.rms_norm: out: not given"):
        kiln.rms_norm(x, w)
    with cupy.cuda.Stream(non_blocking=True) as s:
        kiln.rms_norm(x, w, out=out)  # on s, CuPy's current stream
        s.synchronize()
    y = x_host.astype(np.float64)
    want = y / np.sqrt((y * y).mean(-1, keepdims=True) + 1e-6) * w_host.astype(np.float64)
    np.testing.assert_allclose(cupy.asnumpy(out).astype(np.float64), want, atol=2e-3 * 4, rtol=2e-3)


# ---- the editing loop ----------------------------------------------------------------------------


@requires_gpu
def test_an_edited_kernel_source_is_recompiled_on_the_next_run(tmp_path):
    """The development loop: a kilnd serving a kernels/ folder, a test process, an edit of the
    kernel's source, the test process again: the second run gets a new cubin (the source hash is
    in the cache key), with no reinstall and no daemon restart."""
    import shutil
    import subprocess
    import sys
    kernels = tmp_path / "kernels"
    shutil.copytree(kiln.testing.kernels_dir(), kernels)
    daemon = kiln.testing.Daemon(kernels=str(kernels))
    script = ("import torch, kiln; kiln.set_socket(%r); x = torch.ones(3, 256, device='cuda', dtype=torch.float16); "
              "w = torch.ones(256, device='cuda', dtype=torch.float16); y = kiln.rms_norm(x, w); "
              "torch.cuda.synchronize(); assert float((y - 1).abs().max()) < 1e-2" % daemon.socket)

    def rmsnorm_keys():
        # The daemon's cache index: one row per cache key (the source hashes are part of it).
        import sqlite3
        index = sqlite3.connect(f"file:{daemon.root}/cache/index.sqlite?mode=ro", uri=True)
        try:
            return {row[0] for row in index.execute("SELECT key FROM entries WHERE op = 'rmsnorm'")}
        finally:
            index.close()

    try:
        subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
        first = rmsnorm_keys()
        assert len(first) == 1
        source = kernels / "src" / "norm" / "rmsnorm.cu"
        source.write_text(source.read_text() + "\n// edited by test_an_edited_kernel_source_is_recompiled\n")
        subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
        second = rmsnorm_keys()
        assert len(second) == 2 and first < second, (first, second)
    finally:
        daemon.stop()
