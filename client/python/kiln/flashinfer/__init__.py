"""FlashInfer's Python names on Kiln's kernels: `import kiln.flashinfer as flashinfer` in place
of `import flashinfer` runs the same calls (names, argument names, order and defaults of
FlashInfer 0.7.2) on Kiln, for every op Kiln has. An argument value Kiln cannot honour raises
NotImplementedError naming the function, the argument, its value and what Kiln takes, before
anything runs: a call either does what FlashInfer's would or refuses. Submodules mirror
FlashInfer's (norm, activation, rope, page, decode, sampling) and every name is also here, as
in FlashInfer. torch is imported by the calls that need it, not here. docs/python.md lists the
coverage."""
from . import activation, decode, norm, page, rope, sampling
from .activation import gelu_and_mul, gelu_tanh_and_mul, silu_and_mul
from .decode import BatchDecodeWithPagedKVCacheWrapper, single_decode_with_kv_cache
from .norm import fused_add_rmsnorm, gemma_fused_add_rmsnorm, gemma_rmsnorm, rmsnorm
from .page import append_paged_kv_cache, get_batch_indices_positions, get_seq_lens
from .rope import (apply_llama31_rope, apply_llama31_rope_inplace, apply_llama31_rope_pos_ids,
                   apply_llama31_rope_pos_ids_inplace, apply_rope, apply_rope_inplace, apply_rope_pos_ids,
                   apply_rope_pos_ids_inplace, apply_rope_with_cos_sin_cache, apply_rope_with_cos_sin_cache_inplace)
from .sampling import (min_p_sampling_from_probs, sampling_from_probs, top_k_sampling_from_probs,
                       top_k_top_p_sampling_from_probs, top_p_sampling_from_probs)

__all__ = [
    # norm
    "rmsnorm", "fused_add_rmsnorm", "gemma_rmsnorm", "gemma_fused_add_rmsnorm",
    # activation
    "silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul",
    # rope
    "apply_rope", "apply_rope_inplace", "apply_rope_pos_ids", "apply_rope_pos_ids_inplace", "apply_llama31_rope",
    "apply_llama31_rope_inplace", "apply_llama31_rope_pos_ids", "apply_llama31_rope_pos_ids_inplace",
    "apply_rope_with_cos_sin_cache", "apply_rope_with_cos_sin_cache_inplace",
    # page
    "append_paged_kv_cache", "get_batch_indices_positions", "get_seq_lens",
    # decode
    "BatchDecodeWithPagedKVCacheWrapper", "single_decode_with_kv_cache",
    # sampling
    "sampling_from_probs", "top_k_sampling_from_probs", "top_p_sampling_from_probs", "top_k_top_p_sampling_from_probs",
    "min_p_sampling_from_probs",
]
