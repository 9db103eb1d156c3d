"""FlashInfer as a peer backend of bench/compare_torch.py: for each op whose FlashInfer call does
the same computation, a backend function of the harness' form (t: the case's tensors -> the
outputs, in the op's output order), compared and timed exactly like the torch backends.

FlashInfer is optional: when `import flashinfer` fails, no backend is added and the run says
why (FLASHINFER_MISSING). Its first call of each module JIT-compiles it with nvcc (minutes on
the H200 machine; docs/benchmarking.md says how to carry and warm it): warm it in a run of its own when budgets are short.
Covered here: rms_norm, fused_add_rms_norm, silu/gelu/gelu_tanh_and_mul, apply_rope (Llama-3.1
scaling, positions as given), apply_rope_with_cos_sin_cache (NeoX), append_paged_kv, batch_decode
(BatchDecodeWithPagedKVCacheWrapper with use_tensor_cores=True, its setting for GQA, planned
once per case outside the timing; out compared, its lse is base 2), the samplers from
probabilities with the run's seed (draws checked against the allowed sets, reported like
PyTorch's), batch_prefill_ragged and batch_prefill_paged (BatchPrefillWith{Ragged,Paged}KVCacheWrapper,
backend auto: FA3 on sm_90; PrefillRaggedPeer, PrefillPagedPeer), and fused_moe (flashinfer.fused_moe.cutlass_fused_moe, TensorRT-LLM's CUTLASS MoE,
on the same bf16/fp16 weights and routing; FusedMoePeer: tried once per case, "not run: <why>"
when this FlashInfer lacks it or refuses the case). In-place FlashInfer calls return the tensors
they wrote.
"""
try:
    import flashinfer
    FLASHINFER_MISSING = ""
except Exception as e:  # noqa: BLE001 - not installed, or its dependencies are missing
    flashinfer = None
    FLASHINFER_MISSING = f"{type(e).__name__}: {e}"


def version():
    return getattr(flashinfer, "__version__", "?") if flashinfer is not None else None


def rms_norm(eps):
    return {"flashinfer": lambda t: (flashinfer.rmsnorm(t["input"], t["weight"], eps),)}


def fused_add_rms_norm(eps):
    def call(t):
        flashinfer.fused_add_rmsnorm(t["input"], t["residual"], t["weight"], eps)
        return t["input"], t["residual"]

    return {"flashinfer": call}


def act_and_mul(name):
    return {"flashinfer": lambda t: (getattr(flashinfer, name)(t["input"]),)}


def apply_rope_llama31(theta, llama31):
    def call(t):
        flashinfer.apply_llama31_rope_pos_ids_inplace(
            t["q"], t["k"], t["positions"], rope_scale=llama31["factor"], rope_theta=theta,
            low_freq_factor=llama31["low_freq_factor"], high_freq_factor=llama31["high_freq_factor"],
            old_context_len=llama31["original_max_position"])
        return t["q"], t["k"]

    return {"flashinfer": call}


def apply_rope_with_cos_sin_cache():
    def call(t):
        q, k = t["q"], t["k"]
        flashinfer.apply_rope_with_cos_sin_cache_inplace(t["positions"], q.view(q.shape[0], -1),
                                                         k.view(k.shape[0], -1), q.shape[-1], t["cos_sin_cache"],
                                                         is_neox=True)
        return q, k

    return {"flashinfer": call}


def append_paged_kv():
    def call(t):
        flashinfer.append_paged_kv_cache(t["k"], t["v"], t["batch_indices"], t["positions"],
                                          (t["k_cache"], t["v_cache"]), t["kv_indices"], t["kv_indptr"],
                                          t["kv_last_page_len"])
        return t["k_cache"], t["v_cache"]

    return {"flashinfer": call}


class DecodePeer:
    """A planned BatchDecodeWithPagedKVCacheWrapper for one case (made in the op's make())."""

    def __init__(self, torch, t, axes, dtype):
        self.wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            torch.empty(128 << 20, dtype=torch.uint8, device="cuda"), "NHD", use_tensor_cores=True)
        self.wrapper.plan(t["kv_indptr"], t["kv_indices"], t["kv_last_page_len"], axes["num_qo_heads"],
                          axes["num_kv_heads"], axes["head_dim"], axes["page_size"], q_data_type=dtype,
                          kv_data_type=dtype)

    def backends(self):
        return {"flashinfer_tensor_cores": lambda t: (self.wrapper.run(t["q"], (t["k_cache"], t["v_cache"])),)}


class PrefillRaggedPeer:
    """A planned BatchPrefillWithRaggedKVCacheWrapper for one batch_prefill_ragged case (made in the
    op's make(), planned there once, outside the timing): NHD q [total_q, Hq, D] and k, v
    [total_kv, Hk, D] as Kiln takes them, causal or not, backend "auto" (FlashInfer's choice: FA3
    on sm_90 where its Hopper kernels serve the case, else FA2; the backend's name says which it
    took). out and lse are compared (lse asked in base e, [total_q, Hq] as Kiln's). The first run
    JIT-compiles the module (minutes)."""

    def __init__(self, torch, t, axes, dtype, causal):
        self.wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(
            torch.empty(256 << 20, dtype=torch.uint8, device="cuda"), "NHD", backend="auto")
        self.wrapper.plan(t["qo_indptr"], t["kv_indptr"], axes["num_qo_heads"], axes["num_kv_heads"],
                          axes["head_dim"], causal=causal, q_data_type=dtype, kv_data_type=dtype)
        self.name = f"flashinfer_{getattr(self.wrapper, '_backend', 'auto')}"

    def backends(self):
        return {self.name: lambda t: tuple(self.wrapper.run(t["q"], t["k"], t["v"], return_lse=True, lse_base="ln"))}


class PrefillPagedPeer:
    """A planned BatchPrefillWithPagedKVCacheWrapper for one batch_prefill_paged case, on the case's
    cache (k_cache, v_cache [num_pages, page_size, Hk, D]: FlashInfer's NHD) and page table, causal
    aligned to the end as Kiln's; backend "auto" as PrefillRaggedPeer, out and lse (base e)
    compared."""

    def __init__(self, torch, t, axes, dtype, causal):
        self.wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
            torch.empty(256 << 20, dtype=torch.uint8, device="cuda"), "NHD", backend="auto")
        self.wrapper.plan(t["qo_indptr"], t["kv_indptr"], t["kv_indices"], t["kv_last_page_len"],
                          axes["num_qo_heads"], axes["num_kv_heads"], axes["head_dim"], axes["page_size"],
                          causal=causal, q_data_type=dtype, kv_data_type=dtype)
        self.name = f"flashinfer_{getattr(self.wrapper, '_backend', 'auto')}"

    def backends(self):
        return {self.name: lambda t: tuple(self.wrapper.run(t["q"], (t["k_cache"], t["v_cache"]), return_lse=True,
                                                            lse_base="ln"))}


def sampler(name, params, seed):
    """FlashInfer's sampler for Kiln's op `name` (None: FlashInfer has none, e.g. argmax)."""
    fi_name = {"top_k_sampling": "top_k_sampling_from_probs", "top_p_sampling": "top_p_sampling_from_probs",
               "top_k_top_p_sampling": "top_k_top_p_sampling_from_probs",
               "min_p_sampling": "min_p_sampling_from_probs"}.get(name)
    if fi_name is None:
        return {}
    fn = getattr(flashinfer.sampling, fi_name)
    return {"flashinfer": lambda t: (fn(t["probs"], *(t[p] for p in params), seed=seed, offset=0).view(-1),)}


class FusedMoePeer:
    """flashinfer.fused_moe.cutlass_fused_moe for one fused_moe case: the routed tokens x [T, H]
    with the case's topk_ids (int32) and topk_weights (fp32), unquantized fc1 [E, 2I, H] and fc2
    [E, H, I] weights (quant_scales None), out of x's dtype. Its fc1 holds each expert's up rows
    first, then the gate rows (TensorRT-LLM's w31; its swiglu is silu(second half) * first half),
    so the case's w13 is copied once with its halves swapped, into the case's tensors as "w31"
    (rotated with them, not timed). The first call JIT-compiles FlashInfer's MoE module (minutes).

    FusedMoePeer.make(torch, t) -> (peer, None) when the call ran on the case, else (None, why)."""

    def __init__(self, fn):
        self.fn = fn

    @staticmethod
    def make(torch, t):
        try:
            from flashinfer.fused_moe import cutlass_fused_moe
        except Exception as e:  # noqa: BLE001 - an older FlashInfer, or one built without it
            return None, f"flashinfer.fused_moe.cutlass_fused_moe cannot be imported ({type(e).__name__}: {e})"
        inter = t["w13"].shape[1] // 2
        try:
            t["w31"] = torch.cat((t["w13"][:, inter:], t["w13"][:, :inter]), dim=1).contiguous()
            peer = FusedMoePeer(cutlass_fused_moe)
            peer.call(t)  # the case once: compiles, and refuses what it does not support
            torch.cuda.synchronize()
            return peer, None
        except Exception as e:  # noqa: BLE001 - reported as the backend's "not run" reason
            t.pop("w31", None)
            torch.cuda.empty_cache()
            text = str(e).strip().splitlines()
            return None, f"{type(e).__name__}: {text[0][:300] if text else ''}"

    def call(self, t):
        x = t["x"]
        result = self.fn(x, t["topk_ids"], t["topk_weights"], t["w31"], t["w2"], x.dtype, quant_scales=None,
                         output=t["out"])
        return result[0] if isinstance(result, (list, tuple)) else result

    def backends(self):
        return {"flashinfer_cutlass_fused_moe": lambda t: (self.call(t),)}


def backends(enabled, make):
    """make() when FlashInfer imported and the run asked for it, else no backend."""
    return make() if enabled and flashinfer is not None else {}
