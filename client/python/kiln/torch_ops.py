"""Kiln's ops as torch custom ops (torch.library): torch.ops.kiln.*.

torch.compile cannot trace into the extension kiln._native: a call of it would break the graph
(an error with fullgraph=True). Registered as custom ops with fake implementations (the output's
shape and dtype, no data), each op is one opaque node of the compiled graph, and the compiled
graph can be captured in a CUDA graph (mode="reduce-overhead"): the ops launch only, with no
host synchronization. The package's functions route to these ops by themselves while torch is
compiling (kiln._framework.compiling), so a model calling kiln.rms_norm compiles as is; the ops
can also be called directly.

This module is imported (and the ops registered, once) when the package first sees a torch
tensor, or when kiln is imported after torch; `import kiln.torch_ops` does it explicitly —
needed only when the first kiln call of a process happens inside torch.compile with kiln
imported before torch.

Not registered: the plan/run ops (batch_decode, the prefill ops: their plan is a host object,
made outside the compiled region; call them outside it or in a torch.compiler.disable'd
function), append_paged_kv and the collectives.
"""
from typing import List, Optional

try:
    import torch
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("kiln.torch_ops needs torch (pip install torch); the rest of kiln does not") from e

from . import _framework, activation, norm, rope, sampling
from .gemm import gemm as _kiln_gemm  # (kiln.gemm, the attribute, is the function: the module is shadowed)

_NS = "kiln"


def _op(name, mutates_args=()):
    return torch.library.custom_op(f"{_NS}::{name}", mutates_args=mutates_args, device_types="cuda")


# ---- norm ----


@_op("rms_norm")
def rms_norm(input: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return norm.rms_norm(input, weight, eps)


@rms_norm.register_fake
def _(input, weight, eps):
    return torch.empty_like(input)


@_op("fused_add_rms_norm", mutates_args=("input", "residual"))
def fused_add_rms_norm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    norm.fused_add_rms_norm(input, residual, weight, eps)


@fused_add_rms_norm.register_fake
def _(input, residual, weight, eps):
    return None


# ---- activation ----


def _gated_fake(input):
    return input.new_empty(tuple(input.shape[:-1]) + (input.shape[-1] // 2,))


@_op("silu_and_mul")
def silu_and_mul(input: torch.Tensor) -> torch.Tensor:
    return activation.silu_and_mul(input)


@_op("gelu_and_mul")
def gelu_and_mul(input: torch.Tensor) -> torch.Tensor:
    return activation.gelu_and_mul(input)


@_op("gelu_tanh_and_mul")
def gelu_tanh_and_mul(input: torch.Tensor) -> torch.Tensor:
    return activation.gelu_tanh_and_mul(input)


for _gated in (silu_and_mul, gelu_and_mul, gelu_tanh_and_mul):
    _gated.register_fake(_gated_fake)


# ---- rope (in place on q and k) ----


@_op("apply_rope", mutates_args=("q", "k"))
def apply_rope(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, rotary_dim: int, interleaved: bool,
               theta: float, llama31: Optional[List[float]]) -> None:
    # The schema carries the scaling as floats; its original_max_position is an int to Kiln.
    scaling = None if llama31 is None else rope.Llama31RopeScaling(llama31[0], llama31[1], llama31[2],
                                                                   int(llama31[3]))
    rope.apply_rope(q, k, positions, rotary_dim=rotary_dim, interleaved=interleaved, theta=theta, llama31=scaling)


@apply_rope.register_fake
def _(q, k, positions, rotary_dim, interleaved, theta, llama31):
    return None


@_op("apply_rope_with_cos_sin_cache", mutates_args=("q", "k"))
def apply_rope_with_cos_sin_cache(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
                                  cos_sin_cache: torch.Tensor, interleaved: bool) -> None:
    rope.apply_rope_with_cos_sin_cache(q, k, positions, cos_sin_cache, interleaved=interleaved)


@apply_rope_with_cos_sin_cache.register_fake
def _(q, k, positions, cos_sin_cache, interleaved):
    return None


# ---- gemm ----


@_op("gemm")
def gemm(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor], c: Optional[torch.Tensor], beta: float,
         out_dtype: Optional[torch.dtype]) -> torch.Tensor:
    return _kiln_gemm(a, b, bias=bias, c=c, beta=beta, out_dtype=out_dtype)


@gemm.register_fake
def _(a, b, bias, c, beta, out_dtype):
    return a.new_empty(tuple(a.shape[:-1]) + (b.shape[0],), dtype=a.dtype if out_dtype is None else out_dtype)


# ---- sampling: a parameter is a tensor [B] or, with the tensor None, one number for every row ----


def _samples_fake(probs, *args):
    return probs.new_empty((probs.shape[0],), dtype=torch.int32)


@_op("top_k_sampling")
def top_k_sampling(probs: torch.Tensor, top_k_tensor: Optional[torch.Tensor], top_k: int, seed: int,
                   offset: int) -> torch.Tensor:
    return sampling.top_k_sampling(probs, top_k if top_k_tensor is None else top_k_tensor, seed=seed, offset=offset)


@_op("top_p_sampling")
def top_p_sampling(probs: torch.Tensor, top_p_tensor: Optional[torch.Tensor], top_p: float, seed: int,
                   offset: int) -> torch.Tensor:
    return sampling.top_p_sampling(probs, top_p if top_p_tensor is None else top_p_tensor, seed=seed, offset=offset)


@_op("top_k_top_p_sampling")
def top_k_top_p_sampling(probs: torch.Tensor, top_k_tensor: Optional[torch.Tensor], top_k: int,
                         top_p_tensor: Optional[torch.Tensor], top_p: float, seed: int, offset: int) -> torch.Tensor:
    return sampling.top_k_top_p_sampling(probs, top_k if top_k_tensor is None else top_k_tensor,
                                         top_p if top_p_tensor is None else top_p_tensor, seed=seed, offset=offset)


@_op("min_p_sampling")
def min_p_sampling(probs: torch.Tensor, min_p_tensor: Optional[torch.Tensor], min_p: float, seed: int,
                   offset: int) -> torch.Tensor:
    return sampling.min_p_sampling(probs, min_p if min_p_tensor is None else min_p_tensor, seed=seed, offset=offset)


@_op("argmax")
def argmax(probs: torch.Tensor) -> torch.Tensor:
    return sampling.argmax(probs)


for _sampler in (top_k_sampling, top_p_sampling, top_k_top_p_sampling, min_p_sampling, argmax):
    _sampler.register_fake(_samples_fake)

# The package's functions route to these ops while torch is compiling.
_framework.enable_compile_routing(torch, torch.ops.kiln)
