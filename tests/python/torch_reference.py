"""The torch references of the GPU tests (plain eager formulas in fp32/fp64) and their
tolerances: one rounding to the dtype plus fp32 accumulation, the C++ GPU tests' figures."""
import math

TOLERANCE = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2}


def torch_dtype(name):
    import torch
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


def uniform(shape, dtype, gen, lo=-2.0, hi=2.0):
    import torch
    x = torch.rand(shape, device="cuda", generator=gen, dtype=torch.float32) * (hi - lo) + lo
    return x.to(dtype)


def rms_norm(x, weight, eps):
    y = x.double()
    return (y * (y.pow(2).mean(dim=-1, keepdim=True) + eps).rsqrt() * weight.double()).to(x.dtype)


def gated(kind, x):
    import torch
    d = x.shape[-1] // 2
    a, b = x[..., :d].double(), x[..., d:].double()
    if kind == "silu":
        act = a / (1 + torch.exp(-a))
    elif kind == "gelu":
        act = 0.5 * a * (1 + torch.erf(a / math.sqrt(2)))
    else:
        act = 0.5 * a * (1 + torch.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3)))
    return (act * b).to(x.dtype)


def rope_inv_freq(rotary_dim, theta, llama31=None):
    import torch
    inv = theta ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    if llama31 is not None:
        factor, low, high, original = llama31
        wavelen = 2 * math.pi / inv
        low_wavelen, high_wavelen = original / low, original / high
        smooth = (original / wavelen - low) / (high - low)
        scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
        mid = (wavelen <= low_wavelen) & (wavelen >= high_wavelen)
        scaled = torch.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)
        inv = scaled
    return inv


def rope(x, positions, inv_freq, interleaved):
    """x [tokens, heads, head_dim] rotated on its first 2 * len(inv_freq) elements."""
    import torch
    r = 2 * inv_freq.numel()
    y = x.double().clone()
    angle = positions.double()[:, None].cpu() * inv_freq[None, :]
    cos, sin = angle.cos().to(x.device)[:, None, :], angle.sin().to(x.device)[:, None, :]
    if interleaved:
        x1, x2 = y[..., 0:r:2].clone(), y[..., 1:r:2].clone()
        y[..., 0:r:2], y[..., 1:r:2] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    else:
        x1, x2 = y[..., : r // 2].clone(), y[..., r // 2: r].clone()
        y[..., : r // 2], y[..., r // 2: r] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    return y.to(x.dtype)


def attention(q, k, v, causal_offset=None, sm_scale=None):
    """q [Lq, Hq, D], k/v [Lk, Hk, D] -> [Lq, Hq, D] and lse [Lq, Hq]; GQA by repeating K/V
    heads; causal_offset: query i sees keys j <= i + offset."""
    import torch
    hq, hk = q.shape[1], k.shape[1]
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    kk = k.double().repeat_interleave(hq // hk, dim=1)
    vv = v.double().repeat_interleave(hq // hk, dim=1)
    logits = torch.einsum("qhd,khd->hqk", q.double(), kk) * scale
    if causal_offset is not None:
        lq, lk = q.shape[0], k.shape[0]
        mask = torch.arange(lk, device=q.device)[None, :] > (torch.arange(lq, device=q.device)[:, None] +
                                                             causal_offset)
        logits = logits.masked_fill(mask[None], float("-inf"))
    lse = torch.logsumexp(logits, dim=-1)  # [h, q]
    out = torch.einsum("hqk,khd->qhd", torch.softmax(logits, dim=-1), vv)
    return out.to(q.dtype), lse.transpose(0, 1).float()
