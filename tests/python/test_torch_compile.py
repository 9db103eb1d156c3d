"""kiln under torch.compile (kiln.torch_ops: the ops registered with torch.library, fake
implementations for tracing): every registered op passes torch.library.opcheck (schema, fake
implementation, autograd registration, aot dispatch); a model block written with the package's
functions compiles with fullgraph=True (no graph break: the functions route to torch.ops.kiln.*
while torch compiles) and gives the eager result; the compiled block also runs in mode
"reduce-overhead" (CUDA graphs). Without torch, kiln.torch_ops refuses to import, saying so."""
import importlib.util

import pytest

import kiln
import kiln.testing
import torch_reference as ref
from torch_reference import TOLERANCE

requires_gpu = kiln.testing.requires()
requires_sm90a = kiln.testing.requires(arch="sm_90a")


def test_torch_ops_needs_torch():
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here: nothing to refuse")
    with pytest.raises(ImportError, match="kiln.torch_ops needs torch"):
        import kiln.torch_ops  # noqa: F401


def _gen(seed):
    import torch
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    return g


@requires_gpu
def test_registered_ops_pass_opcheck(kilnd):
    import torch
    import kiln.torch_ops  # noqa: F401
    g = _gen(3)
    bf16 = torch.bfloat16
    x = ref.uniform((7, 256), bf16, g)
    w = ref.uniform((256,), bf16, g)
    ops = torch.ops.kiln
    torch.library.opcheck(ops.rms_norm.default, (x, w, 1e-6))
    torch.library.opcheck(ops.fused_add_rms_norm.default, (x.clone(), x.clone(), w, 1e-6))
    for name in ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"):
        torch.library.opcheck(getattr(ops, name).default, (ref.uniform((5, 2 * 96), bf16, g),))
    q = ref.uniform((6, 4, 64), bf16, g)
    k = ref.uniform((6, 2, 64), bf16, g)
    positions = torch.arange(6, dtype=torch.int32, device="cuda")
    torch.library.opcheck(ops.apply_rope.default, (q, k, positions, 0, False, 10000.0, None))
    torch.library.opcheck(ops.apply_rope.default, (q, k, positions, 32, True, 500000.0, [8.0, 1.0, 4.0, 8192.0]))
    cache = torch.rand((64, 64), dtype=torch.float32, device="cuda", generator=g)
    torch.library.opcheck(ops.apply_rope_with_cos_sin_cache.default, (q, k, positions, cache, False))
    probs = torch.softmax(torch.rand((3, 1000), device="cuda", generator=g), dim=-1)
    torch.library.opcheck(ops.top_k_sampling.default, (probs, None, 20, 7, 0))
    torch.library.opcheck(ops.top_p_sampling.default, (probs, None, 0.9, 7, 0))
    torch.library.opcheck(ops.min_p_sampling.default, (probs, None, 0.1, 7, 0))
    torch.library.opcheck(ops.top_k_top_p_sampling.default,
                          (probs, torch.full((3,), 20, dtype=torch.int32, device="cuda"), 0, None, 0.8, 7, 0))
    torch.library.opcheck(ops.argmax.default, (probs,))


@requires_sm90a
def test_gemm_op_passes_opcheck(kilnd):
    import torch
    import kiln.torch_ops  # noqa: F401
    g = _gen(4)
    a = ref.uniform((33, 256), torch.bfloat16, g, -1, 1)
    b = ref.uniform((128, 256), torch.bfloat16, g, -1, 1)
    bias = ref.uniform((128,), torch.bfloat16, g, -1, 1)
    torch.library.opcheck(torch.ops.kiln.gemm.default, (a, b, bias, None, 0.0, None))
    torch.library.opcheck(torch.ops.kiln.gemm.default, (a, b, None, None, 0.0, torch.float32))


def _block(x, residual, norm_w, w_qkv, w_up, positions, q_heads, kv_heads, head_dim):
    """A decoder layer's start, written with the package's functions: add + norm, the qkv
    projection, RoPE on q and k, the gated MLP up projection."""
    kiln.fused_add_rms_norm(x, residual, norm_w, 1e-6)
    qkv = kiln.gemm(x, w_qkv)
    tokens = x.shape[0]
    q = qkv[:, :q_heads * head_dim].reshape(tokens, q_heads, head_dim).contiguous()
    k = qkv[:, q_heads * head_dim:(q_heads + kv_heads) * head_dim].reshape(tokens, kv_heads, head_dim).contiguous()
    kiln.apply_rope(q, k, positions, theta=500000.0, llama31=True)
    h = kiln.silu_and_mul(kiln.gemm(x, w_up))
    logits = kiln.rms_norm(h, norm_w[:h.shape[-1]].contiguous(), 1e-6)
    return q, k, h, logits


@requires_sm90a
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_block_compiles_with_fullgraph(kilnd, mode):
    import torch
    import kiln.torch_ops  # noqa: F401
    torch._dynamo.reset()
    g = _gen(5)
    tokens, hidden, q_heads, kv_heads, head_dim, inter = 37, 512, 4, 2, 64, 256
    bf16 = torch.bfloat16
    x = ref.uniform((tokens, hidden), bf16, g, -1, 1)
    residual = ref.uniform((tokens, hidden), bf16, g, -1, 1)
    norm_w = ref.uniform((hidden,), bf16, g, 0.5, 1.5)
    w_qkv = ref.uniform(((q_heads + 2 * kv_heads) * head_dim, hidden), bf16, g, -0.1, 0.1)
    w_up = ref.uniform((2 * inter, hidden), bf16, g, -0.1, 0.1)
    positions = torch.arange(100, 100 + tokens, dtype=torch.int32, device="cuda")
    args = (q_heads, kv_heads, head_dim)

    x_eager, r_eager = x.clone(), residual.clone()
    eager = _block(x_eager, r_eager, norm_w, w_qkv, w_up, positions, *args)
    compiled = torch.compile(_block, fullgraph=True, mode=mode)
    for _ in range(3):  # the first call compiles; reduce-overhead records its CUDA graph on a later one
        x_c, r_c = x.clone(), residual.clone()
        got = compiled(x_c, r_c, norm_w, w_qkv, w_up, positions, *args)
        torch.cuda.synchronize()
        for a, b in zip(got, eager):
            torch.testing.assert_close(a.float(), b.float(), atol=TOLERANCE["bf16"], rtol=TOLERANCE["bf16"])
        # The in-place ops' effect on the caller's tensors survives compilation.
        torch.testing.assert_close(x_c.float(), x_eager.float(), atol=TOLERANCE["bf16"], rtol=TOLERANCE["bf16"])
        torch.testing.assert_close(r_c.float(), r_eager.float(), atol=0, rtol=0)

    # And the eager block is right: the norm against torch's.
    torch.testing.assert_close(x_eager.float(), ref.rms_norm(residual + x, norm_w, 1e-6).float(),
                               atol=TOLERANCE["bf16"], rtol=TOLERANCE["bf16"])


@requires_gpu
def test_a_stream_inside_torch_compile_is_refused(kilnd):
    import torch
    import kiln.torch_ops  # noqa: F401
    torch._dynamo.reset()
    g = _gen(6)
    x = ref.uniform((4, 128), torch.bfloat16, g)
    w = ref.uniform((128,), torch.bfloat16, g)

    def f(x, w):
        return kiln.rms_norm(x, w, 1e-6, stream=0)

    with pytest.raises(Exception, match="stream= inside torch.compile"):
        torch.compile(f, fullgraph=True)(x, w)
