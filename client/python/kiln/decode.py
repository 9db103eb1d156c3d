"""Paged KV cache and batch decode attention (kiln/ops/decode.h, docs/kernels-decode.md).

k_cache, v_cache: [num_pages, page_size, num_kv_heads, head_dim] fp16/bf16. The page table
(int32, contiguous, on the device): kv_indptr [B + 1], kv_indices, kv_last_page_len [B].
"""
from . import _native
from ._framework import allocate, dl_dtype, stream_of
from ._workspace import plan_workspace


def append_paged_kv(k_cache, v_cache, k, v, batch_indices, positions, kv_indptr, kv_indices, kv_last_page_len, *,
                    stream=None):
    """Writes k, v [nnz, num_kv_heads, head_dim] into the paged caches at (batch_indices[i],
    positions[i]) (int32 [nnz]); tokens the page table does not cover are skipped."""
    _native.append_paged_kv(k_cache, v_cache, k, v, batch_indices, positions, kv_indptr, kv_indices,
                            kv_last_page_len, stream_of(stream, k))


class BatchDecodePlan:
    """The schedule of one decode step, made on the host from the host copies of kv_indptr
    [B + 1] and kv_last_page_len [B] (lists, array.array('i'), NumPy or torch CPU int32 arrays);
    reusable for every layer of the step. The run step (run / batch_decode) launches only: no
    host synchronization, no allocation when out (and lse) are given, so it can be captured in a
    CUDA graph. The workspace, when the schedule splits the KV, is allocated here (torch) or
    taken from `workspace`.

    dtype: "fp16"/"bf16" or a torch dtype. sm_scale 0: 1/sqrt(head_dim); logits_soft_cap 0: off;
    window_left -1: off. device -1: the current CUDA context's."""

    def __init__(self, kv_indptr_host, kv_last_page_len_host, num_qo_heads, num_kv_heads, head_dim, page_size, dtype,
                 *, sm_scale=0.0, logits_soft_cap=0.0, window_left=-1, device=-1, workspace=None):
        code, bits = dl_dtype("kiln.BatchDecodePlan", dtype)
        self._plan, self.workspace_bytes = _native.decode_plan(
            kv_indptr_host, kv_last_page_len_host, num_qo_heads, num_kv_heads, head_dim, page_size, code, bits,
            sm_scale, logits_soft_cap, window_left, device)
        self.workspace = plan_workspace("kiln.BatchDecodePlan", self.workspace_bytes, workspace, dtype, device)
        self.num_qo_heads = num_qo_heads
        self.head_dim = head_dim

    def run(self, q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, *, out=None, lse=None,
            return_lse=False, stream=None):
        """out [B, num_qo_heads, head_dim] = softmax(q K^T) V per request and head; returns out,
        or (out, lse) with return_lse (lse fp32 [B, num_qo_heads] = ln sum exp(logits))."""
        if out is None:
            out = allocate("kiln.batch_decode", "out", q)
        if lse is None and return_lse:
            lse = allocate("kiln.batch_decode", "lse", q, shape=tuple(q.shape[:2]), dtype="float32")
        _native.batch_decode(self._plan, out, lse, q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len,
                             self.workspace, stream_of(stream, q))
        return (out, lse) if return_lse else out


def batch_decode(plan, q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, *, out=None, lse=None,
                 return_lse=False, stream=None):
    """plan.run(...): see BatchDecodePlan.run."""
    return plan.run(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, out=out, lse=lse,
                    return_lse=return_lse, stream=stream)

