"""kiln.flashinfer: FlashInfer 0.7.2's Python names on Kiln.

CPU (CI): the package imports without torch; every name has FlashInfer's signature (the table
below, written from FlashInfer 0.7.2's source, catches drift on either side); every refusal is a
NotImplementedError naming the function, the argument and its value, raised before a tensor is
touched (fake DLPack tensors or plain objects stand in for tensors).
GPU (kiln.testing.requires; skipped with the reason elsewhere): every function against the torch
references on fresh random data with poisoned outputs, and against FlashInfer itself where
`import flashinfer` works (skipped, with the reason, elsewhere)."""
import functools
import inspect
import math
import subprocess
import sys
import types

import pytest

import kiln
import kiln.flashinfer as fi
import kiln.testing
import torch_reference as ref
from fake_dlpack import cuda
from torch_reference import TOLERANCE

# ---- FlashInfer 0.7.2's signatures (flashinfer-python 0.7.2.post1; annotations left out) ---------


class FlashInfer:
    """One stub per public name, with FlashInfer's parameters and defaults; bodies are not needed."""

    def rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None): ...
    def fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None): ...
    def gemma_rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None): ...
    def gemma_fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None): ...
    def silu_and_mul(input, out=None, enable_pdl=None): ...
    def gelu_and_mul(input, out=None, enable_pdl=None): ...
    def gelu_tanh_and_mul(input, out=None, enable_pdl=None): ...
    def apply_rope(q, k, indptr, offsets, rotary_dim=None, interleave=False, rope_scale=1, rope_theta=1e4): ...
    def apply_rope_inplace(q, k, indptr, offsets, rotary_dim=None, interleave=False, rope_scale=1,
                           rope_theta=1e4): ...
    def apply_rope_pos_ids(q, k, pos_ids, rotary_dim=None, interleave=False, rope_scale=1, rope_theta=1e4): ...
    def apply_rope_pos_ids_inplace(q, k, pos_ids, rotary_dim=None, interleave=False, rope_scale=1,
                                   rope_theta=1e4): ...
    def apply_llama31_rope(q, k, indptr, offsets, rotary_dim=None, interleave=False, rope_scale=8, rope_theta=5e5,
                           low_freq_factor=1, high_freq_factor=4, old_context_len=8192): ...
    def apply_llama31_rope_inplace(q, k, indptr, offsets, rotary_dim=None, interleave=False, rope_scale=8,
                                   rope_theta=5e5, low_freq_factor=1, high_freq_factor=4, old_context_len=8192): ...
    def apply_llama31_rope_pos_ids(q, k, pos_ids, rotary_dim=None, interleave=False, rope_scale=8, rope_theta=5e5,
                                   low_freq_factor=1, high_freq_factor=4, old_context_len=8192): ...
    def apply_llama31_rope_pos_ids_inplace(q, k, pos_ids, rotary_dim=None, interleave=False, rope_scale=8,
                                           rope_theta=5e5, low_freq_factor=1, high_freq_factor=4,
                                           old_context_len=8192): ...
    def apply_rope_with_cos_sin_cache(positions, query, key, head_size, cos_sin_cache, is_neox=True): ...
    def apply_rope_with_cos_sin_cache_inplace(positions, query, key, head_size, cos_sin_cache, is_neox=True): ...
    def append_paged_kv_cache(append_key, append_value, batch_indices, positions, paged_kv_cache, kv_indices,
                              kv_indptr, kv_last_page_len, kv_layout="NHD"): ...
    def get_batch_indices_positions(append_indptr, seq_lens, nnz, batch_indices=None, positions=None): ...
    def get_seq_lens(kv_indptr, kv_last_page_len, page_size): ...
    def single_decode_with_kv_cache(q, k, v, kv_layout="NHD", pos_encoding_mode="NONE", use_tensor_cores=False,
                                    q_scale=None, k_scale=None, v_scale=None, window_left=-1, logits_soft_cap=None,
                                    sm_scale=None, rope_scale=None, rope_theta=None, return_lse=False): ...
    def sampling_from_probs(probs, indices=None, deterministic=True, generator=None, check_nan=False, seed=None,
                            offset=None, return_valid=False): ...
    def top_p_sampling_from_probs(probs, top_p, indices=None, deterministic=True, generator=None, check_nan=False,
                                  seed=None, offset=None, return_valid=False): ...
    def top_k_sampling_from_probs(probs, top_k, indices=None, deterministic=True, generator=None, check_nan=False,
                                  seed=None, offset=None, return_valid=False): ...
    def min_p_sampling_from_probs(probs, min_p, indices=None, deterministic=True, generator=None, check_nan=False,
                                  seed=None, offset=None, return_valid=False): ...
    def top_k_top_p_sampling_from_probs(probs, top_k, top_p, indices=None, filter_apply_order="top_k_first",
                                        deterministic=True, generator=None, check_nan=False, seed=None, offset=None,
                                        return_valid=False): ...

    class BatchDecodeWithPagedKVCacheWrapper:
        def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, use_tensor_cores=False,
                     paged_kv_indptr_buffer=None, paged_kv_indices_buffer=None,
                     paged_kv_last_page_len_buffer=None, backend="auto", jit_args=None): ...
        def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffer): ...
        def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
                 *deprecated_positional_args, **kwargs): ...
        def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None,
                return_lse=False, enable_pdl=None, window_left=None, sinks=None, q_len_per_req=None,
                skip_softmax_threshold_scale_factor=None, kv_cache_sf=None): ...
        run_return_lse = functools.partialmethod(run, return_lse=True)
        begin_forward = plan


# FlashInfer's submodule of each name (flashinfer.norm.rmsnorm, ...).
SUBMODULE = {
    "norm": ["rmsnorm", "fused_add_rmsnorm", "gemma_rmsnorm", "gemma_fused_add_rmsnorm"],
    "activation": ["silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"],
    "rope": ["apply_rope", "apply_rope_inplace", "apply_rope_pos_ids", "apply_rope_pos_ids_inplace",
             "apply_llama31_rope", "apply_llama31_rope_inplace", "apply_llama31_rope_pos_ids",
             "apply_llama31_rope_pos_ids_inplace", "apply_rope_with_cos_sin_cache",
             "apply_rope_with_cos_sin_cache_inplace"],
    "page": ["append_paged_kv_cache", "get_batch_indices_positions", "get_seq_lens"],
    "decode": ["BatchDecodeWithPagedKVCacheWrapper", "single_decode_with_kv_cache"],
    "sampling": ["sampling_from_probs", "top_p_sampling_from_probs", "top_k_sampling_from_probs",
                 "min_p_sampling_from_probs", "top_k_top_p_sampling_from_probs"],
}
NAMES = [name for names in SUBMODULE.values() for name in names]
# plan()'s options, taken by keyword (FlashInfer's plan passes **kwargs on to its _plan_impl).
PLAN_OPTIONS = ["pos_encoding_mode", "window_left", "window_right", "logits_soft_cap", "q_data_type", "kv_data_type",
                "o_data_type", "data_type", "sm_scale", "rope_scale", "rope_theta", "non_blocking", "block_tables",
                "seq_lens", "fixed_split_size", "disable_split_kv", "q_len_per_req", "is_causal"]
WRAPPER_METHODS = ["__init__", "reset_workspace_buffer", "plan", "run", "run_return_lse", "begin_forward"]


def test_import_needs_no_torch():
    code = "import sys, kiln.flashinfer; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False"]


def test_every_name_is_at_the_top_and_in_its_submodule():
    assert sorted(fi.__all__) == sorted(NAMES)
    for module, names in SUBMODULE.items():
        for name in names:
            assert getattr(getattr(fi, module), name) is getattr(fi, name), f"{module}.{name}"


@pytest.mark.parametrize("name", [n for n in NAMES if n != "BatchDecodeWithPagedKVCacheWrapper"])
def test_signature_is_flashinfers(name):
    assert inspect.signature(getattr(fi, name)) == inspect.signature(getattr(FlashInfer, name))


@pytest.mark.parametrize("method", WRAPPER_METHODS)
def test_wrapper_signature_is_flashinfers(method):
    ours = getattr(fi.BatchDecodeWithPagedKVCacheWrapper, method)
    theirs = getattr(FlashInfer.BatchDecodeWithPagedKVCacheWrapper, method)
    assert inspect.signature(ours) == inspect.signature(theirs)


def test_plan_takes_flashinfers_options():
    params = inspect.signature(fi.BatchDecodeWithPagedKVCacheWrapper._plan_impl).parameters.values()
    assert [p.name for p in params if p.kind == p.KEYWORD_ONLY] == PLAN_OPTIONS


# ---- refusals (no GPU, no torch: each check runs before any tensor is used) ----------------------

T = cuda((4, 8, 128))  # a stand-in tensor; a refused call never reads it
WS = types.SimpleNamespace(device=None)  # the workspace's device is all the constructor reads


def _wrapper(**kwargs):
    return fi.BatchDecodeWithPagedKVCacheWrapper(WS, **kwargs)


def _plan(*args, **kwargs):
    return _wrapper().plan(T, T, T, 32, 8, 128, 16, *args, **kwargs)


# (function as FlashInfer names it, argument, call)
REFUSALS = [
    ("apply_rope_pos_ids", "rotary_dim", lambda: fi.apply_rope_pos_ids(T, T, T, rotary_dim=0)),
    ("apply_rope_pos_ids_inplace", "rotary_dim", lambda: fi.apply_rope_pos_ids_inplace(T, T, T, rotary_dim=0)),
    ("apply_rope", "rotary_dim", lambda: fi.apply_rope(T, T, T, T, rotary_dim=0)),
    ("apply_rope_inplace", "rotary_dim", lambda: fi.apply_rope_inplace(T, T, T, T, rotary_dim=0)),
    ("apply_llama31_rope", "rotary_dim", lambda: fi.apply_llama31_rope(T, T, T, T, rotary_dim=0)),
    ("apply_llama31_rope_inplace", "rotary_dim", lambda: fi.apply_llama31_rope_inplace(T, T, T, T, rotary_dim=0)),
    ("apply_llama31_rope_pos_ids", "rotary_dim", lambda: fi.apply_llama31_rope_pos_ids(T, T, T, rotary_dim=0)),
    ("apply_llama31_rope_pos_ids_inplace", "rotary_dim",
     lambda: fi.apply_llama31_rope_pos_ids_inplace(T, T, T, rotary_dim=0)),
    ("apply_rope_pos_ids", "rope_scale", lambda: fi.apply_rope_pos_ids(T, T, T, rope_scale=2, rope_theta=0.5)),
    ("apply_rope_inplace", "rope_scale", lambda: fi.apply_rope_inplace(T, T, T, T, rope_scale=2, rope_theta=0.5)),
    ("apply_llama31_rope_pos_ids", "old_context_len",
     lambda: fi.apply_llama31_rope_pos_ids(T, T, T, old_context_len=8192.5)),
    ("append_paged_kv_cache", "kv_layout",
     lambda: fi.append_paged_kv_cache(T, T, T, T, (T, T), T, T, T, kv_layout="HND")),
    ("BatchDecodeWithPagedKVCacheWrapper", "kv_layout", lambda: _wrapper(kv_layout="HND")),
    ("BatchDecodeWithPagedKVCacheWrapper", "use_cuda_graph", lambda: _wrapper(use_cuda_graph=True)),
    ("BatchDecodeWithPagedKVCacheWrapper", "backend", lambda: _wrapper(backend="fa2")),
    ("BatchDecodeWithPagedKVCacheWrapper", "jit_args", lambda: _wrapper(jit_args=["custom"])),
    ("BatchDecodeWithPagedKVCacheWrapper.plan", "pos_encoding_mode", lambda: _plan(pos_encoding_mode="ROPE_LLAMA")),
    ("BatchDecodeWithPagedKVCacheWrapper.plan", "pos_encoding_mode", lambda: _plan(pos_encoding_mode="ALIBI")),
    ("BatchDecodeWithPagedKVCacheWrapper.plan", "window_right", lambda: _plan(window_right=-1)),
    ("BatchDecodeWithPagedKVCacheWrapper.plan", "block_tables", lambda: _plan(block_tables=T)),
    ("BatchDecodeWithPagedKVCacheWrapper.plan", "seq_lens", lambda: _plan(seq_lens=T)),
    ("BatchDecodeWithPagedKVCacheWrapper.plan", "fixed_split_size", lambda: _plan(fixed_split_size=4)),
    ("BatchDecodeWithPagedKVCacheWrapper.plan", "disable_split_kv", lambda: _plan(disable_split_kv=True)),
    ("BatchDecodeWithPagedKVCacheWrapper.plan", "q_len_per_req", lambda: _plan(q_len_per_req=2)),
    ("BatchDecodeWithPagedKVCacheWrapper.plan", "is_causal", lambda: _plan(is_causal=True)),
    ("BatchDecodeWithPagedKVCacheWrapper.plan", "q_data_type", lambda: _plan(q_data_type="float8_e4m3fn")),
    ("BatchDecodeWithPagedKVCacheWrapper.plan", "q_data_type", lambda: _plan(q_data_type="float32")),
    ("BatchDecodeWithPagedKVCacheWrapper.plan", "kv_data_type",
     lambda: _plan(q_data_type="bfloat16", kv_data_type="float8_e4m3fn")),
    ("BatchDecodeWithPagedKVCacheWrapper.plan", "kv_data_type",
     lambda: _plan(q_data_type="bfloat16", kv_data_type="float16")),
    ("BatchDecodeWithPagedKVCacheWrapper.plan", "o_data_type", lambda: _plan(o_data_type="bfloat16")),
    ("BatchDecodeWithPagedKVCacheWrapper.plan", "sm_scale", lambda: _plan(sm_scale=0.0)),
    ("BatchDecodeWithPagedKVCacheWrapper.run", "*args", lambda: _wrapper().run(T, (T, T), T)),
    ("BatchDecodeWithPagedKVCacheWrapper.run", "q_scale", lambda: _wrapper().run(T, (T, T), q_scale=0.5)),
    ("BatchDecodeWithPagedKVCacheWrapper.run", "k_scale", lambda: _wrapper().run(T, (T, T), k_scale=0.5)),
    ("BatchDecodeWithPagedKVCacheWrapper.run", "v_scale", lambda: _wrapper().run(T, (T, T), v_scale=0.5)),
    ("BatchDecodeWithPagedKVCacheWrapper.run", "sinks", lambda: _wrapper().run(T, (T, T), sinks=T)),
    ("BatchDecodeWithPagedKVCacheWrapper.run", "skip_softmax_threshold_scale_factor",
     lambda: _wrapper().run(T, (T, T), skip_softmax_threshold_scale_factor=1.0)),
    ("BatchDecodeWithPagedKVCacheWrapper.run", "kv_cache_sf", lambda: _wrapper().run(T, (T, T), kv_cache_sf=(T, T))),
    ("BatchDecodeWithPagedKVCacheWrapper.run", "q_len_per_req", lambda: _wrapper().run(T, (T, T), q_len_per_req=2)),
    ("BatchDecodeWithPagedKVCacheWrapper.run", "q_scale", lambda: _wrapper().run_return_lse(T, (T, T), q_scale=2.0)),
    ("single_decode_with_kv_cache", "kv_layout", lambda: fi.single_decode_with_kv_cache(T, T, T, kv_layout="HND")),
    ("single_decode_with_kv_cache", "pos_encoding_mode",
     lambda: fi.single_decode_with_kv_cache(T, T, T, pos_encoding_mode="ROPE_LLAMA")),
    ("single_decode_with_kv_cache", "q_scale", lambda: fi.single_decode_with_kv_cache(T, T, T, q_scale=0.5)),
    ("single_decode_with_kv_cache", "k_scale", lambda: fi.single_decode_with_kv_cache(T, T, T, k_scale=0.5)),
    ("single_decode_with_kv_cache", "v_scale", lambda: fi.single_decode_with_kv_cache(T, T, T, v_scale=0.5)),
    ("single_decode_with_kv_cache", "sm_scale", lambda: fi.single_decode_with_kv_cache(T, T, T, sm_scale=0)),
    ("single_decode_with_kv_cache", "k.dtype",
     lambda: fi.single_decode_with_kv_cache(cuda((8, 128), "bf16"), cuda((64, 2, 128), "fp8_e4m3"), T)),
    ("sampling_from_probs", "seed", lambda: fi.sampling_from_probs(T, seed=cuda((1,), "int64"), offset=0)),
    ("top_k_sampling_from_probs", "offset",
     lambda: fi.top_k_sampling_from_probs(T, 5, seed=1, offset=cuda((4,), "int64"))),
    ("top_p_sampling_from_probs", "seed",
     lambda: fi.top_p_sampling_from_probs(T, 0.9, seed=cuda((4,), "int64"), offset=cuda((4,), "int64"))),
    ("min_p_sampling_from_probs", "seed", lambda: fi.min_p_sampling_from_probs(T, 0.1, seed=cuda((1,), "int64"))),
    ("top_k_sampling_from_probs", "top_k", lambda: fi.top_k_sampling_from_probs(T, 0)),
    ("top_k_top_p_sampling_from_probs", "top_k", lambda: fi.top_k_top_p_sampling_from_probs(T, 0, 0.9)),
    ("top_k_top_p_sampling_from_probs", "filter_apply_order",
     lambda: fi.top_k_top_p_sampling_from_probs(T, 5, 0.9, filter_apply_order="joint")),
    ("top_k_top_p_sampling_from_probs", "seed",
     lambda: fi.top_k_top_p_sampling_from_probs(T, 5, 0.9, seed=cuda((1,), "int64"), offset=0)),
]


@pytest.mark.parametrize("api,argument,call", REFUSALS, ids=[f"{r[0]}-{r[1]}" for r in REFUSALS])
def test_refusals_name_the_function_and_the_argument(api, argument, call):
    with pytest.raises(NotImplementedError) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"kiln.flashinfer.{api}: {argument}="), message
    assert "is not supported by Kiln; " in message, message


@pytest.mark.parametrize("api", ["gemma_rmsnorm", "gemma_fused_add_rmsnorm"])
def test_gemma_norms_are_refused(api):
    args = (T, T) if api == "gemma_rmsnorm" else (T, T, T)
    with pytest.raises(NotImplementedError, match=f"kiln.flashinfer.{api}: the Gemma form .* is not supported"):
        getattr(fi, api)(*args)


def test_deprecated_positional_plan_options_keep_flashinfers_order():
    # After page_size: pos_encoding_mode, window_left, logits_soft_cap, q_data_type, ...
    with pytest.warns(DeprecationWarning), pytest.raises(NotImplementedError, match=r"plan: q_data_type='float8"):
        _plan("NONE", -1, None, "float8_e4m3fn")
    with pytest.raises(TypeError, match="multiple values for argument 'pos_encoding_mode'"):
        _plan("NONE", pos_encoding_mode="NONE")
    with pytest.raises(TypeError, match="at most 16"):
        _plan(*range(17))


def test_plan_refuses_unknown_options_like_flashinfer():
    with pytest.raises(TypeError, match="unexpected keyword argument 'causal'"):
        _plan(causal=True)


def test_run_before_plan_and_argument_errors():
    with pytest.raises(RuntimeError, match="run: call plan\\(\\) first"):
        _wrapper().run(T, (T, T))
    with pytest.raises(ValueError, match="Invalid filter_apply_order: sorted"):
        fi.top_k_top_p_sampling_from_probs(T, 5, 0.9, filter_apply_order="sorted")
    with pytest.raises(ValueError, match="rope_scale: expected a finite number > 0, found 0"):
        fi.apply_rope_pos_ids(T, T, T, rope_scale=0)
    w = _wrapper(use_tensor_cores=True)
    assert w.use_tensor_cores and not w.is_cuda_graph_enabled


# ---- GPU: against torch, and against FlashInfer where it is installed ----------------------------

requires_gpu = kiln.testing.requires()
LOG2E = 1.0 / math.log(2.0)


def _torch():
    import torch
    return torch


def _gen(seed):
    g = _torch().Generator(device="cuda")
    g.manual_seed(seed)
    return g


def _close(actual, expected, dtype_name, scale=1.0):
    tol = TOLERANCE[dtype_name] * scale
    _torch().testing.assert_close(actual.float(), expected.float(), atol=tol, rtol=tol)


def _poison(like):
    return _torch().full_like(like, float("nan"))


def _dev(xs):
    torch = _torch()
    return torch.tensor(xs, dtype=torch.int32, device="cuda")


@pytest.fixture
def flashinfer():
    """FlashInfer itself, for the side-by-side tests (skipped, with the reason, where it is missing)."""
    return pytest.importorskip("flashinfer", reason="flashinfer is not installed: no side-by-side comparison")


@requires_gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("shape", [(1, 128), (7, 4096), (3, 5, 1000)])
def test_norms(kilnd, dtype, shape):
    g = _gen(1)
    x = ref.uniform(shape, ref.torch_dtype(dtype), g)
    r = ref.uniform(shape, ref.torch_dtype(dtype), g)
    w = ref.uniform(shape[-1:], ref.torch_dtype(dtype), g)
    out = _poison(x)
    assert fi.rmsnorm(x, w, 1e-5, out=out) is out
    _close(out, ref.rms_norm(x, w, 1e-5), dtype)
    _close(fi.rmsnorm(x, w), ref.rms_norm(x, w, 1e-6), dtype)
    want_residual = x + r
    assert fi.fused_add_rmsnorm(x, r, w, enable_pdl=True) is None
    _close(r, want_residual, dtype)
    _close(x, ref.rms_norm(want_residual, w, 1e-6), dtype)


@requires_gpu
@pytest.mark.parametrize("kind", ["silu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("shape", [(5, 2 * 14336), (3, 26), (2, 3, 128)])
def test_activations(kilnd, kind, shape):
    x = ref.uniform(shape, ref.torch_dtype("bf16"), _gen(2))
    f = getattr(fi, f"{kind}_and_mul")
    _close(f(x), ref.gated(kind, x), "bf16")
    out = _poison(x[..., : shape[-1] // 2])
    assert f(x, out=out, enable_pdl=False) is out
    _close(out, ref.gated(kind, x), "bf16")


def _qk(tokens, hq, hk, d, dtype, g):
    qkv = ref.uniform((tokens, hq + 2 * hk, d), dtype, g)
    return qkv[:, :hq], qkv[:, hq:hq + hk]  # views into one fused buffer, as models hold them


@requires_gpu
@pytest.mark.parametrize("interleave", [False, True])
@pytest.mark.parametrize("rotary_dim,rope_scale,llama31", [(None, 1, False), (64, 1, False), (None, 4.0, False),
                                                           (None, 8, True)])
def test_rope_pos_ids(kilnd, interleave, rotary_dim, rope_scale, llama31):
    torch = _torch()
    g = _gen(3)
    tokens, hq, hk, d, theta = 13, 8, 2, 128, 5e5
    q, k = _qk(tokens, hq, hk, d, torch.float16, g)
    pos = torch.randint(0, 20000, (tokens,), device="cuda", generator=g, dtype=torch.int32)
    if llama31:
        inv = ref.rope_inv_freq(d, theta, (rope_scale, 1.0, 4.0, 8192))
        ours, inplace = fi.apply_llama31_rope_pos_ids, fi.apply_llama31_rope_pos_ids_inplace
    else:
        inv = ref.rope_inv_freq(rotary_dim or d, theta) / rope_scale
        ours, inplace = fi.apply_rope_pos_ids, fi.apply_rope_pos_ids_inplace
    want_q, want_k = ref.rope(q, pos, inv, interleave), ref.rope(k, pos, inv, interleave)
    q0, k0 = q.clone(), k.clone()
    options = dict(rotary_dim=rotary_dim, interleave=interleave, rope_scale=rope_scale, rope_theta=theta)
    q_rope, k_rope = ours(q, k, pos, **options)
    assert torch.equal(q, q0) and torch.equal(k, k0)  # out of place: inputs untouched
    _close(q_rope, want_q, "fp16", scale=2)
    _close(k_rope, want_k, "fp16", scale=2)
    assert inplace(q, k, pos, **options) is None
    assert torch.equal(q, q_rope) and torch.equal(k, k_rope)


@requires_gpu
@pytest.mark.parametrize("llama31", [False, True])
def test_rope_ragged_indptr_offsets(kilnd, llama31):
    torch = _torch()
    g = _gen(4)
    lengths, offsets = [3, 0, 9, 1], [5, 7, 0, 4000]
    indptr = [0]
    for n in lengths:
        indptr.append(indptr[-1] + n)
    q, k = _qk(indptr[-1], 4, 4, 64, torch.bfloat16, g)
    pos = _dev([offsets[b] + i for b, n in enumerate(lengths) for i in range(n)])
    want = fi.apply_llama31_rope_pos_ids(q, k, pos) if llama31 else fi.apply_rope_pos_ids(q, k, pos)
    ragged = fi.apply_llama31_rope if llama31 else fi.apply_rope
    got = ragged(q, k, _dev(indptr), _dev(offsets))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    (fi.apply_llama31_rope_inplace if llama31 else fi.apply_rope_inplace)(q, k, _dev(indptr), _dev(offsets))
    assert torch.equal(q, want[0]) and torch.equal(k, want[1])


@requires_gpu
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("tokens,head_size,rotary_dim", [(6, 128, 128), (1, 64, 32)])
def test_rope_with_cos_sin_cache(kilnd, is_neox, tokens, head_size, rotary_dim):
    torch = _torch()
    g = _gen(5)
    max_pos = 4096
    query = ref.uniform((tokens, 4 * head_size), torch.bfloat16, g)  # [nnz, heads * head_size]
    key = ref.uniform((tokens, 1 * head_size), torch.bfloat16, g)
    positions = torch.randint(0, max_pos, (tokens,), device="cuda", generator=g)
    inv = ref.rope_inv_freq(rotary_dim, 10000.0)
    angle = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    cache = torch.cat([angle.cos(), angle.sin()], dim=1).float().cuda()
    heads = lambda x: x.view(tokens, -1, head_size)  # noqa: E731
    want_q = ref.rope(heads(query), positions, inv, not is_neox).view(tokens, -1)
    want_k = ref.rope(heads(key), positions, inv, not is_neox).view(tokens, -1)
    q_out, k_out = fi.apply_rope_with_cos_sin_cache(positions, query, key, head_size, cache, is_neox)
    _close(q_out, want_q, "bf16", scale=2)
    _close(k_out, want_k, "bf16", scale=2)
    fi.apply_rope_with_cos_sin_cache_inplace(positions, query, key, head_size, cache, is_neox=is_neox)
    assert torch.equal(query, q_out) and torch.equal(key, k_out)


def _page_table(lengths, page_size):
    """kv_indptr, kv_indices (pages in a shuffled order), kv_last_page_len, pages in the pool."""
    import random
    pages = [max(1, math.ceil(n / page_size)) for n in lengths]
    order = list(range(sum(pages) + 3))
    random.Random(6).shuffle(order)
    indptr = [0]
    for p in pages:
        indptr.append(indptr[-1] + p)
    last = [n - (p - 1) * page_size for n, p in zip(lengths, pages)]
    return indptr, order[:indptr[-1]], last, len(order)


@requires_gpu
def test_get_batch_indices_positions_and_seq_lens(kilnd):
    torch = _torch()
    append_indptr, seq_lens = [0, 1, 3, 3, 6, 10], [5, 5, 2, 5, 40]
    b, p = fi.get_batch_indices_positions(_dev(append_indptr), _dev(seq_lens), 12)
    want_b, want_p = [], []
    for r in range(5):
        for i in range(append_indptr[r], append_indptr[r + 1]):
            want_b.append(r)
            want_p.append(seq_lens[r] - append_indptr[r + 1] + i)
    assert b.dtype == p.dtype == torch.int32
    assert b.tolist() == want_b + [-1, -1] and p.tolist() == want_p + [0, 0]
    given_b, given_p = torch.full((12,), 7, dtype=torch.int32, device="cuda"), torch.full_like(b, 9)
    got = fi.get_batch_indices_positions(_dev(append_indptr), _dev(seq_lens), 12, given_b, given_p)
    assert got[0] is given_b and got[1] is given_p
    assert given_b.tolist() == want_b + [-1, -1] and given_p.tolist() == want_p + [9, 9]
    indptr, _, last, _ = _page_table([1, 17, 300], 16)
    assert fi.get_seq_lens(_dev(indptr), _dev(last), 16).tolist() == [1, 17, 300]


def _cache_and_decode_inputs(dtype, head_dim, group, page_size, lengths, combined, g):
    """Appends every request's keys and values through append_paged_kv_cache into a NaN-poisoned
    cache (one [pages, 2, page_size, H, D] tensor, or a (k, v) tuple); returns what decode needs."""
    torch = _torch()
    hk = 2
    indptr, indices, last, num_pages = _page_table(lengths, page_size)
    shape = (num_pages, 2, page_size, hk, head_dim)
    pool = torch.full(shape, float("nan"), dtype=dtype, device="cuda")
    cache = pool if combined else (pool[:, 0].contiguous(), pool[:, 1].contiguous())
    nnz = sum(lengths)
    k = ref.uniform((nnz, hk, head_dim), dtype, g)
    v = ref.uniform((nnz, hk, head_dim), dtype, g)
    append_indptr = _dev([0] + [sum(lengths[:i + 1]) for i in range(len(lengths))])
    seq_lens = fi.get_seq_lens(_dev(indptr), _dev(last), page_size)
    batch, pos = fi.get_batch_indices_positions(append_indptr, seq_lens, nnz)
    fi.append_paged_kv_cache(k, v, batch, pos, cache, _dev(indices), _dev(indptr), _dev(last))
    k_cache, v_cache = (cache[:, 0], cache[:, 1]) if combined else cache
    start = 0
    for b, n in enumerate(lengths):  # the appended rows, page by page
        flat_k = k_cache[indices[indptr[b]:indptr[b + 1]]].reshape(-1, hk, head_dim)[:n]
        flat_v = v_cache[indices[indptr[b]:indptr[b + 1]]].reshape(-1, hk, head_dim)[:n]
        assert torch.equal(flat_k, k[start:start + n]) and torch.equal(flat_v, v[start:start + n])
        start += n
    q = ref.uniform((len(lengths), hk * group, head_dim), dtype, g)
    return q, k, v, cache, (indptr, indices, last)


@requires_gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("head_dim,group,page_size,lengths,combined", [
    (128, 4, 16, [1, 17, 300], True), (64, 1, 1, [5, 33], False), (256, 8, 64, [4096, 33], True)])
def test_append_then_batch_decode(kilnd, dtype, head_dim, group, page_size, lengths, combined):
    torch = _torch()
    dt = ref.torch_dtype(dtype)
    q, k, v, cache, (indptr, indices, last) = _cache_and_decode_inputs(dt, head_dim, group, page_size, lengths,
                                                                       combined, _gen(7))
    workspace = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
    wrapper = fi.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=True)
    wrapper.plan(_dev(indptr), _dev(indices), _dev(last), q.shape[1], 2, head_dim, page_size, data_type=dt)
    out, lse = _poison(q), torch.full(q.shape[:2], float("nan"), device="cuda")
    got = wrapper.run(q, cache, out=out, lse=lse, return_lse=True)
    assert got[0] is out and got[1] is lse
    plain = wrapper.run(q, cache)
    starts = [0]
    for n in lengths:
        starts.append(starts[-1] + n)
    for b in range(len(lengths)):
        want, want_lse = ref.attention(q[b:b + 1], k[starts[b]:starts[b + 1]], v[starts[b]:starts[b + 1]])
        _close(out[b:b + 1], want, dtype)
        torch.testing.assert_close(lse[b:b + 1], want_lse * LOG2E, atol=1e-3, rtol=1e-3)  # base 2
    assert torch.equal(plain, out)
    again, lse2 = wrapper.run_return_lse(q, cache)
    assert torch.equal(again, out) and torch.equal(lse2, lse)


@requires_gpu
@pytest.mark.parametrize("kv_len", [1000, 37, 4096])
def test_single_decode(kilnd, kv_len):
    g = _gen(8)
    q = ref.uniform((8, 128), ref.torch_dtype("bf16"), g)
    k = ref.uniform((kv_len, 2, 128), ref.torch_dtype("bf16"), g)
    v = ref.uniform((kv_len, 2, 128), ref.torch_dtype("bf16"), g)
    out, lse = fi.single_decode_with_kv_cache(q, k, v, sm_scale=0.05, return_lse=True)
    want, want_lse = ref.attention(q[None], k, v, sm_scale=0.05)
    assert tuple(out.shape) == (8, 128) and tuple(lse.shape) == (8,)
    _close(out, want[0], "bf16")
    _torch().testing.assert_close(lse, want_lse[0] * LOG2E, atol=1e-3, rtol=1e-3)
    _close(fi.single_decode_with_kv_cache(q, k, v, sm_scale=0.05, use_tensor_cores=True), out, "bf16")


def _probs(batch, vocab, seed):
    torch = _torch()
    return torch.softmax(torch.randn((batch, vocab), device="cuda", generator=_gen(seed)) * 3, dim=-1)


@requires_gpu
@pytest.mark.parametrize("sampler", ["plain", "top_k", "top_p", "top_k_top_p", "min_p"])
@pytest.mark.parametrize("batch,vocab", [(16, 32000), (3, 7)])
def test_samplers(kilnd, sampler, batch, vocab):
    torch = _torch()
    probs = _probs(batch, vocab, 9)
    k, p = min(50, vocab), 0.8
    calls = {
        "plain": lambda **kw: fi.sampling_from_probs(probs, **kw),
        "top_k": lambda **kw: fi.top_k_sampling_from_probs(probs, torch.full((batch,), k, device="cuda"), **kw),
        "top_p": lambda **kw: fi.top_p_sampling_from_probs(probs, p, **kw),
        "top_k_top_p": lambda **kw: fi.top_k_top_p_sampling_from_probs(probs, k, torch.full((batch,), p,
                                                                                           device="cuda"), **kw),
        "min_p": lambda **kw: fi.min_p_sampling_from_probs(probs, 0.05, **kw),
    }
    draw = calls[sampler]
    samples = draw(seed=5, offset=12)
    assert samples.dtype == torch.int32 and tuple(samples.shape) == (batch,)
    assert torch.equal(samples, draw(seed=5, offset=12, deterministic=False))  # (seed, offset) fixes the draw
    # From the generator: its offset advances as under FlashInfer, so a replayed state repeats the draw.
    gen = _gen(10)
    state = gen.get_state()
    first = draw(generator=gen)
    increment = batch if sampler in ("plain", "min_p") else batch * 32
    assert int(gen.get_state().view(torch.int64)[1]) == int(state.view(torch.int64)[1]) + (increment + 3) // 4 * 4
    gen.set_state(state)
    assert torch.equal(draw(generator=gen), first)
    p64 = probs.double()
    chosen = p64.gather(1, samples.long()[:, None])[:, 0]
    assert bool((chosen > 0).all())
    if sampler in ("top_k", "top_k_top_p"):
        assert bool((chosen >= p64.topk(k, dim=-1).values[:, -1]).all())
    if sampler == "top_p":
        assert bool(((p64 * (p64 > chosen[:, None])).sum(-1) < p + 1e-6).all())
    if sampler == "min_p":
        assert bool((chosen >= 0.05 * p64.max(-1).values - 1e-9).all())


@requires_gpu
def test_sampling_indices_validity_and_frequencies(kilnd):
    torch = _torch()
    row = torch.tensor([0.5, 0.25, 0.125, 0.125, 0.0], device="cuda")
    probs = torch.stack([row, torch.zeros_like(row)])  # the second row has no positive value
    indices = torch.zeros(20000, dtype=torch.int64, device="cuda")
    samples, valid = fi.sampling_from_probs(probs, indices, seed=3, offset=0, return_valid=True)
    assert samples.dtype == torch.int64 and bool(valid.all())
    freq = torch.bincount(samples, minlength=5).double() / 20000
    sigma = (row.double() * (1 - row.double()) / 20000).sqrt()
    assert bool(((freq - row.double()).abs() <= 5 * sigma + 1e-12).all()), freq
    samples, valid = fi.top_k_sampling_from_probs(probs, 2, return_valid=True, check_nan=True)
    assert valid.tolist() == [True, False] and samples[1].item() == 0 and samples[0].item() in (0, 1)
    with pytest.raises(ValueError, match="Input probs contains NaN"):
        fi.sampling_from_probs(torch.full_like(probs, float("nan")), check_nan=True)


# ---- side by side with FlashInfer ----------------------------------------------------------------


# One test per FlashInfer JIT module family: each first call of FlashInfer compiles its module
# with nvcc (minutes on the H200 machine), so a run can warm and compare some of them only.


@requires_gpu
def test_same_as_flashinfer_norm_and_activations(kilnd, flashinfer):
    torch = _torch()
    g = _gen(11)
    x = ref.uniform((7, 4096), torch.bfloat16, g)
    w = ref.uniform((4096,), torch.bfloat16, g)
    _close(fi.rmsnorm(x, w), flashinfer.rmsnorm(x, w), "bf16")
    gate = ref.uniform((5, 2 * 1376), torch.bfloat16, g)
    for name in ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"):
        _close(getattr(fi, name)(gate), getattr(flashinfer, name)(gate), "bf16")


@requires_gpu
def test_same_as_flashinfer_rope(kilnd, flashinfer):
    torch = _torch()
    g = _gen(12)
    q, k = _qk(9, 8, 2, 128, torch.bfloat16, g)
    pos = torch.randint(0, 8192, (9,), device="cuda", generator=g, dtype=torch.int32)
    for name, options in (("apply_rope_pos_ids", dict(rope_scale=2.0)), ("apply_llama31_rope_pos_ids", {}),
                          ("apply_rope_pos_ids", dict(interleave=True, rotary_dim=64))):
        ours, theirs = getattr(fi, name)(q, k, pos, **options), getattr(flashinfer, name)(q, k, pos, **options)
        _close(ours[0], theirs[0], "bf16", scale=2)
        _close(ours[1], theirs[1], "bf16", scale=2)


@requires_gpu
def test_same_as_flashinfer_decode(kilnd, flashinfer):
    torch = _torch()
    g = _gen(13)
    lengths, page_size, head_dim = [1, 17, 300], 16, 128
    q, _, _, cache, (indptr, indices, last) = _cache_and_decode_inputs(torch.bfloat16, head_dim, 4, page_size,
                                                                       lengths, True, g)
    results = []
    for lib in (fi, flashinfer):
        wrapper = lib.BatchDecodeWithPagedKVCacheWrapper(torch.empty(128 << 20, dtype=torch.uint8, device="cuda"))
        wrapper.plan(_dev(indptr), _dev(indices), _dev(last), 8, 2, head_dim, page_size, q_data_type=torch.bfloat16)
        results.append(wrapper.run(q, cache, return_lse=True))
    _close(results[0][0], results[1][0], "bf16")
    torch.testing.assert_close(results[0][1], results[1][1], atol=1e-3, rtol=1e-3)  # both base 2


@requires_gpu
def test_same_as_flashinfer_sampling(kilnd, flashinfer):
    torch = _torch()
    probs = _probs(8, 1000, 12)
    # (Not min_p: FlashInfer's min_p lives in its topk module, whose first JIT compile alone takes
    # more than 9 minutes on the H200 machine; docs/benchmarking.md.)
    for name, param in (("top_k_sampling_from_probs", 20), ("top_p_sampling_from_probs", 0.5)):
        for lib in (fi, flashinfer):
            samples = getattr(lib, name)(probs, param)
            assert samples.dtype == torch.int32 and bool((probs.gather(1, samples.long()[:, None]) > 0).all())

