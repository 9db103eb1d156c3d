"""Prefill attention (kiln/ops/prefill.h, docs/kernels-prefill.md), ragged or paged KV.

Request b owns the queries qo_indptr[b] .. qo_indptr[b+1] of q/out [total_q, num_qo_heads,
head_dim] and the keys/values kv_indptr[b] .. (ragged: rows of k, v [total_kv, num_kv_heads,
head_dim]; paged: pages, with the page table of kiln.decode). Causal masks align to the end.
"""
from . import _native
from ._framework import allocate, dl_dtype, stream_of
from ._workspace import plan_workspace


class BatchPrefillPlan:
    """The schedule of one prefill step from host copies of the indptr arrays; make it with
    BatchPrefillPlan.ragged(...) or BatchPrefillPlan.paged(...). As for BatchDecodePlan, the run
    step allocates nothing when out (and lse) are given and never synchronizes."""

    def __init__(self, kind, made, workspace, dtype, device, num_qo_heads):
        self.kind = kind
        self._plan, self.workspace_bytes = made
        self.workspace = plan_workspace(f"kiln.BatchPrefillPlan.{kind}", self.workspace_bytes, workspace, dtype,
                                        device)
        self.num_qo_heads = num_qo_heads

    @classmethod
    def ragged(cls, qo_indptr_host, kv_indptr_host, num_qo_heads, num_kv_heads, head_dim, dtype, *, causal=True,
               sm_scale=0.0, logits_soft_cap=0.0, window_left=-1, device=-1, workspace=None):
        code, bits = dl_dtype("kiln.BatchPrefillPlan.ragged", dtype)
        made = _native.prefill_plan_ragged(qo_indptr_host, kv_indptr_host, num_qo_heads, num_kv_heads, head_dim,
                                           code, bits, causal, sm_scale, logits_soft_cap, window_left, device)
        return cls("ragged", made, workspace, dtype, device, num_qo_heads)

    @classmethod
    def paged(cls, qo_indptr_host, kv_indptr_host, kv_last_page_len_host, num_qo_heads, num_kv_heads, head_dim,
              page_size, dtype, *, causal=True, sm_scale=0.0, logits_soft_cap=0.0, window_left=-1, device=-1,
              workspace=None):
        code, bits = dl_dtype("kiln.BatchPrefillPlan.paged", dtype)
        made = _native.prefill_plan_paged(qo_indptr_host, kv_indptr_host, kv_last_page_len_host, num_qo_heads,
                                          num_kv_heads, head_dim, page_size, code, bits, causal, sm_scale,
                                          logits_soft_cap, window_left, device)
        return cls("paged", made, workspace, dtype, device, num_qo_heads)

    def _outputs(self, api, q, out, lse, return_lse):
        if out is None:
            out = allocate(api, "out", q)
        if lse is None and return_lse:
            lse = allocate(api, "lse", q, shape=tuple(q.shape[:2]), dtype="float32")
        return out, lse

    def run_ragged(self, q, k, v, qo_indptr, kv_indptr, *, out=None, lse=None, return_lse=False, stream=None):
        out, lse = self._outputs("kiln.batch_prefill_ragged", q, out, lse, return_lse)
        _native.prefill_ragged(self._plan, out, lse, q, k, v, qo_indptr, kv_indptr, self.workspace,
                               stream_of(stream, q))
        return (out, lse) if return_lse else out

    def run_paged(self, q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, *, out=None,
                  lse=None, return_lse=False, stream=None):
        out, lse = self._outputs("kiln.batch_prefill_paged", q, out, lse, return_lse)
        _native.prefill_paged(self._plan, out, lse, q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices,
                              kv_last_page_len, self.workspace, stream_of(stream, q))
        return (out, lse) if return_lse else out


def batch_prefill_ragged(plan, q, k, v, qo_indptr, kv_indptr, *, out=None, lse=None, return_lse=False, stream=None):
    """out [total_q, num_qo_heads, head_dim] for ragged K/V; (out, lse) with return_lse."""
    return plan.run_ragged(q, k, v, qo_indptr, kv_indptr, out=out, lse=lse, return_lse=return_lse, stream=stream)


def batch_prefill_paged(plan, q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, *, out=None,
                        lse=None, return_lse=False, stream=None):
    """out [total_q, num_qo_heads, head_dim] for a paged KV cache; (out, lse) with return_lse."""
    return plan.run_paged(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, out=out, lse=lse,
                          return_lse=return_lse, stream=stream)
