"""flashinfer.decode's names on Kiln's batch decode (kiln.BatchDecodePlan, docs/kernels-decode.md).

BatchDecodeWithPagedKVCacheWrapper.plan takes FlashInfer's page table (indptr, indices,
last_page_len, on the device or the host), copies indptr and last_page_len to the host (as
FlashInfer does: a synchronization when they are on the device) to make Kiln's plan, and keeps
device int32 copies of all three for run(), which reads only those. The wrapper's
float_workspace_buffer is the Kiln plan's workspace, so run() allocates nothing when out (and
lse) are given.

lse: FlashInfer's is base 2 (log2 of the sum of exp(logits): its kernels scale logits by
log2(e)); Kiln's is the natural log. run() and single_decode_with_kv_cache return FlashInfer's
base 2, converted on the device (lse * log2(e)) after Kiln's kernel.

use_cuda_graph=True is refused: Kiln's schedule is a kernel parameter fixed when a run is
captured, so a graph replayed after a later plan() would run the old schedule on the new page
table. A wrapper made with use_cuda_graph=False can still be captured, once per plan()."""
import functools
import math
import warnings

from .. import decode as _decode
from ._refuse import only, only_none, refuse
from .page import check_kv_layout, unpack_paged_kv_cache

_LOG2E = 1.0 / math.log(2.0)

# FlashInfer's dtype names (torch attribute names) that Kiln's decode takes.
_DTYPES = {"float16": "float16", "half": "float16", "bfloat16": "bfloat16"}

# plan()'s optional arguments in the order FlashInfer still accepts them positionally (deprecated).
_PLAN_LEGACY_POSITIONAL = ("pos_encoding_mode", "window_left", "logits_soft_cap", "q_data_type", "kv_data_type",
                           "o_data_type", "data_type", "sm_scale", "rope_scale", "rope_theta", "non_blocking",
                           "block_tables", "seq_lens", "fixed_split_size", "disable_split_kv", "q_len_per_req")

_NO_SCALES = "Kiln's decode reads fp16/bf16 K/V and takes no calibration scales"


def _dtype_name(api, name, dtype):
    """"float16" / "bfloat16" for a dtype given as a torch dtype or a torch attribute name."""
    text = str(dtype)
    text = text[len("torch."):] if text.startswith("torch.") else text
    if text not in _DTYPES:
        refuse(api, name, dtype, "Kiln's decode takes torch.float16 or torch.bfloat16")
    return _DTYPES[text]


def _device_index(device):
    index = getattr(device, "index", None)
    return -1 if index is None else int(index)


class BatchDecodeWithPagedKVCacheWrapper:
    """Decode attention over a paged KV cache (one query token per request), planned once per
    step and run for every layer. See the module's note for what differs inside."""

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, use_tensor_cores=False,
                 paged_kv_indptr_buffer=None, paged_kv_indices_buffer=None, paged_kv_last_page_len_buffer=None,
                 backend="auto", jit_args=None):
        api = "BatchDecodeWithPagedKVCacheWrapper"
        check_kv_layout(api, kv_layout)
        only(api, "use_cuda_graph", use_cuda_graph, (False,),
             "Kiln's decode schedule is a kernel parameter fixed at capture, so a graph replayed after a later "
             "plan() would run the old schedule: use use_cuda_graph=False and capture run() again after each plan()")
        only(api, "backend", backend, ("auto",), "Kiln runs its own decode kernel: pass backend='auto'")
        only_none(api, "jit_args", jit_args, "Kiln has no custom attention variants")
        self._float_workspace_buffer = float_workspace_buffer
        self._device = float_workspace_buffer.device
        # A hint: Kiln's decode kernel always uses tensor cores (docs/kernels-decode.md).
        self._use_tensor_cores = bool(use_tensor_cores)
        self._kv_layout = kv_layout
        # paged_kv_*_buffer matter to FlashInfer only with use_cuda_graph=True, refused above.
        self._plan = None
        self._window_left = -1

    @property
    def use_tensor_cores(self):
        return self._use_tensor_cores

    @property
    def is_cuda_graph_enabled(self):
        return False

    def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffer):
        """Uses float_workspace_buffer from now on (also for the current plan). Kiln keeps its
        schedule in the plan object: int_workspace_buffer is not used."""
        self._float_workspace_buffer = float_workspace_buffer
        if self._plan is not None:
            self._plan.workspace = float_workspace_buffer

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
             *deprecated_positional_args, **kwargs):
        """Plans the decode of one step. The options are FlashInfer's keywords: pos_encoding_mode,
        window_left, window_right, logits_soft_cap, q_data_type, kv_data_type, o_data_type,
        data_type, sm_scale, rope_scale, rope_theta, non_blocking, block_tables, seq_lens,
        fixed_split_size, disable_split_kv, q_len_per_req, is_causal (see _plan_impl)."""
        if deprecated_positional_args:
            api = "BatchDecodeWithPagedKVCacheWrapper.plan()"
            if len(deprecated_positional_args) > len(_PLAN_LEGACY_POSITIONAL):
                raise TypeError(f"{api} accepts at most {len(_PLAN_LEGACY_POSITIONAL)} deprecated optional "
                                f"positional arguments after page_size; got {len(deprecated_positional_args)}")
            for name, value in zip(_PLAN_LEGACY_POSITIONAL, deprecated_positional_args):
                if name in kwargs:
                    raise TypeError(f"{api} got multiple values for argument {name!r}")
                kwargs[name] = value
            warnings.warn(f"Passing optional arguments to {api} positionally is deprecated; pass them as keyword "
                          "arguments instead.", DeprecationWarning, stacklevel=2)
        return self._plan_impl(indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
                               **kwargs)

    begin_forward = plan

    def _plan_impl(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size, *,
                   pos_encoding_mode="NONE", window_left=-1, window_right=0, logits_soft_cap=None,
                   q_data_type=None, kv_data_type=None, o_data_type=None, data_type=None, sm_scale=None,
                   rope_scale=None, rope_theta=None, non_blocking=True, block_tables=None, seq_lens=None,
                   fixed_split_size=None, disable_split_kv=False, q_len_per_req=1, is_causal=None):
        api = "BatchDecodeWithPagedKVCacheWrapper.plan"
        only(api, "pos_encoding_mode", pos_encoding_mode, ("NONE",),
             "Kiln's decode applies no position encoding: rotate q and k before (apply_rope_pos_ids_inplace)")
        only(api, "window_right", window_right, (0,), "Kiln's decode has a left window only")
        only_none(api, "block_tables", block_tables, "Kiln reads the CSR page table (indptr, indices)")
        only_none(api, "seq_lens", seq_lens, "Kiln derives the lengths from indptr and last_page_len")
        only_none(api, "fixed_split_size", fixed_split_size, "Kiln's plan chooses its own KV split")
        only(api, "disable_split_kv", disable_split_kv, (False,), "Kiln's plan chooses its own KV split")
        only(api, "q_len_per_req", q_len_per_req, (1,), "Kiln's decode takes one query token per request")
        only(api, "is_causal", is_causal, (None, False), "one query token per request (q_len_per_req=1)")
        # data_type is documented as the dtype of q and K/V both: it stands for each one not given.
        # (q_data_type's default, "float16", applies only when neither is given.)
        if data_type is not None:
            q_data_type = data_type if q_data_type is None else q_data_type
            kv_data_type = data_type if kv_data_type is None else kv_data_type
        q_data_type = "float16" if q_data_type is None else q_data_type
        q_name = _dtype_name(api, "q_data_type", q_data_type)
        if kv_data_type is not None and _dtype_name(api, "kv_data_type", kv_data_type) != q_name:
            refuse(api, "kv_data_type", kv_data_type, f"Kiln's decode takes K/V of q's dtype ({q_name})")
        if o_data_type is not None and _dtype_name(api, "o_data_type", o_data_type) != q_name:
            refuse(api, "o_data_type", o_data_type, f"Kiln's decode writes out in q's dtype ({q_name})")
        if sm_scale is not None and sm_scale == 0:
            refuse(api, "sm_scale", sm_scale, "Kiln reads sm_scale 0 as 1/sqrt(head_dim); pass None for that")
        # rope_scale and rope_theta are read by FlashInfer only when pos_encoding_mode is not "NONE".

        import torch
        indptr_host = indptr.to("cpu", torch.int32).contiguous()
        last_host = last_page_len.to("cpu", torch.int32).contiguous()
        self._indptr = indptr.to(self._device, torch.int32, non_blocking=non_blocking).contiguous()
        self._indices = indices.to(self._device, torch.int32, non_blocking=non_blocking).contiguous()
        self._last_page_len = last_page_len.to(self._device, torch.int32, non_blocking=non_blocking).contiguous()
        self._plan = _decode.BatchDecodePlan(
            indptr_host, last_host, num_qo_heads, num_kv_heads, head_dim, page_size, q_name,
            sm_scale=0.0 if sm_scale is None else float(sm_scale),
            logits_soft_cap=0.0 if logits_soft_cap is None else float(logits_soft_cap), window_left=int(window_left),
            device=_device_index(self._device), workspace=self._float_workspace_buffer)
        self._window_left = int(window_left)

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None,
            return_lse=False, enable_pdl=None, window_left=None, sinks=None, q_len_per_req=None,
            skip_softmax_threshold_scale_factor=None, kv_cache_sf=None):
        """out [batch, num_qo_heads, head_dim], or (out, lse) with return_lse (lse fp32
        [batch, num_qo_heads], base 2 as FlashInfer's). enable_pdl is accepted and has no effect."""
        api = "BatchDecodeWithPagedKVCacheWrapper.run"
        if args:
            refuse(api, "*args", args, "Kiln has no custom attention variants (jit_args)")
        only_none(api, "q_scale", q_scale, _NO_SCALES)
        only_none(api, "k_scale", k_scale, _NO_SCALES)
        only_none(api, "v_scale", v_scale, _NO_SCALES)
        only_none(api, "sinks", sinks, "Kiln's decode has no attention sinks")
        only_none(api, "skip_softmax_threshold_scale_factor", skip_softmax_threshold_scale_factor,
                  "Kiln's decode computes the full softmax")
        only_none(api, "kv_cache_sf", kv_cache_sf, "Kiln's decode has no NVFP4 KV cache")
        only(api, "q_len_per_req", q_len_per_req, (None, 1), "Kiln's decode takes one query token per request")
        if self._plan is None:
            raise RuntimeError(f"kiln.flashinfer.{api}: call plan() first")
        if window_left is not None and window_left != self._window_left:
            raise ValueError(f"kiln.flashinfer.{api}: window_left: expected None or the plan's {self._window_left}, "
                             f"found {window_left}")
        k_cache, v_cache = unpack_paged_kv_cache(paged_kv_cache)
        result = self._plan.run(q, k_cache, v_cache, self._indptr, self._indices, self._last_page_len, out=out,
                                lse=lse, return_lse=return_lse)
        if return_lse:
            out, lse = result
        else:
            out = result
        if lse is not None:
            lse.mul_(_LOG2E)  # Kiln's natural log to FlashInfer's base 2
        return (out, lse) if return_lse else out

    run_return_lse = functools.partialmethod(run, return_lse=True)


def single_decode_with_kv_cache(q, k, v, kv_layout="NHD", pos_encoding_mode="NONE", use_tensor_cores=False,
                                q_scale=None, k_scale=None, v_scale=None, window_left=-1, logits_soft_cap=None,
                                sm_scale=None, rope_scale=None, rope_theta=None, return_lse=False):
    """Decode of one request: q [num_qo_heads, head_dim] over k, v [kv_len, num_kv_heads,
    head_dim]. Returns out [num_qo_heads, head_dim], or (out, lse [num_qo_heads], base 2).

    Kiln plans and runs its batch decode on k and v viewed as pages (no copy) of the largest
    power of two up to 256 dividing kv_len, so each call makes a plan and three small index
    tensors: for many steps, BatchDecodeWithPagedKVCacheWrapper costs less."""
    api = "single_decode_with_kv_cache"
    only(api, "kv_layout", kv_layout, ("NHD",), "Kiln reads k and v as NHD ([kv_len, num_kv_heads, head_dim])")
    only(api, "pos_encoding_mode", pos_encoding_mode, ("NONE",),
         "Kiln's decode applies no position encoding: rotate q and k before (apply_rope_pos_ids_inplace)")
    only_none(api, "q_scale", q_scale, _NO_SCALES)
    only_none(api, "k_scale", k_scale, _NO_SCALES)
    only_none(api, "v_scale", v_scale, _NO_SCALES)
    if sm_scale is not None and sm_scale == 0:
        refuse(api, "sm_scale", sm_scale, "Kiln reads sm_scale 0 as 1/sqrt(head_dim); pass None for that")
    for name, x in (("k", k), ("v", v)):
        if str(x.dtype) != str(q.dtype):
            refuse(api, f"{name}.dtype", x.dtype, f"Kiln's decode takes K/V of q's dtype ({q.dtype}), fp16 or bf16")
    import torch
    kv_len = int(k.shape[0])
    page = min(kv_len & -kv_len, 256) if kv_len > 0 else 1
    pages = kv_len // page
    k_pages = k.view(pages, page, *k.shape[1:])
    v_pages = v.view(pages, page, *v.shape[1:])
    plan = _decode.BatchDecodePlan(
        [0, pages], [page], int(q.shape[0]), int(k.shape[1]), int(q.shape[-1]), page, q.dtype,
        sm_scale=0.0 if sm_scale is None else float(sm_scale),
        logits_soft_cap=0.0 if logits_soft_cap is None else float(logits_soft_cap), window_left=int(window_left),
        device=_device_index(q.device))
    on_device = functools.partial(torch.tensor, dtype=torch.int32, device=q.device)
    indices = torch.arange(pages, dtype=torch.int32, device=q.device)
    result = plan.run(q.unsqueeze(0), k_pages, v_pages, on_device([0, pages]), indices, on_device([page]),
                      return_lse=return_lse)
    if not return_lse:
        return result.squeeze(0)
    out, lse = result
    return out.squeeze(0), lse.squeeze(0).mul_(_LOG2E)
