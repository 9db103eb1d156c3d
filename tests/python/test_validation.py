"""The library's argument checks reach Python unchanged: each bad call raises InvalidArgument
(code 1) with the C ABI's message, the same fragments the C++ validation tests check
(tests/client/ops/*_validation_test.cpp). Tensors are fake DLPack objects on a made-up CUDA
device (fake_dlpack.py): the checks run before the driver is touched, so no GPU is needed."""
import array
import json
import os
import re
import sys

import pytest

import kiln
import kiln.testing
from kiln import _build_info
from fake_dlpack import KDL_CPU, FakeTensor, cuda

np = pytest.importorskip("numpy")

def _fused_moe(dtype="bf16", **replace):
    """kiln.fused_moe on fake tensors (T 4, H 64, E 8, I 16, top_k 2), every argument given and
    valid unless `replace` says otherwise."""
    t = {"x": cuda((4, 64), dtype), "w13": cuda((8, 32, 64), dtype), "w2": cuda((8, 64, 16), dtype),
         "topk_ids": cuda((4, 2), "int32"), "topk_weights": cuda((4, 2), "fp32"), "out": cuda((4, 64), dtype),
         "workspace": cuda((kiln.fused_moe_workspace_bytes(4, 2, 8, 64, 16),), "uint8")}
    t.update(replace)
    return kiln.fused_moe(t.pop("x"), t.pop("w13"), t.pop("w2"), **t)


def _at(tensor, offset, shape, dtype):
    """A fake tensor `offset` bytes into another's (made-up) memory."""
    return FakeTensor(shape, dtype, data=tensor._managed.dl_tensor.data + offset)


_X = cuda((4, 64), "bf16")  # the tensor the overlap cases alias


# (id, call, the message's fragment)
CASES = [
    ("rms_norm weight dtype", lambda: kiln.rms_norm(cuda((4, 4096), "bf16"), cuda((4096,), "fp16"),
                                                    out=cuda((4, 4096), "bf16")),
     "kiln_rms_norm: weight: expected dtype bf16 (input's), found fp16"),
    ("rms_norm out shape", lambda: kiln.rms_norm(cuda((4, 4096), "bf16"), cuda((4096,), "bf16"),
                                                 out=cuda((4, 4095), "bf16")),
     "kiln_rms_norm: out: expected shape [4, 4096] (input's), found [4, 4095]"),
    ("rms_norm eps", lambda: kiln.rms_norm(cuda((4, 64), "fp32"), cuda((64,), "fp32"), 0.0, out=cuda((4, 64), "fp32")),
     "kiln_rms_norm: eps: expected a finite value > 0, found 0"),
    ("rms_norm fp64", lambda: kiln.rms_norm(cuda((4, 64), "fp64"), cuda((64,), "fp64"), out=cuda((4, 64), "fp64")),
     "kiln_rms_norm: out: dtype code 2 (kDLFloat) with 64 bits is not supported"),
    ("fused_add_rms_norm residual shape", lambda: kiln.fused_add_rms_norm(
        cuda((4, 64), "bf16"), cuda((4, 32), "bf16"), cuda((64,), "bf16")), "kiln_fused_add_rms_norm: residual"),
    ("silu_and_mul fp32", lambda: kiln.silu_and_mul(cuda((4, 4096), "fp32"), out=cuda((4, 2048), "fp32")),
     "kiln_silu_and_mul: input: dtype fp32 is not supported; expected fp16 or bf16"),
    ("gelu_and_mul odd", lambda: kiln.gelu_and_mul(cuda((4, 4095)), out=cuda((4, 2047))),
     "kiln_gelu_and_mul: input: the last dim must be 2d, even and at least 2"),
    ("gelu_tanh_and_mul out dtype", lambda: kiln.gelu_tanh_and_mul(cuda((4, 64)), out=cuda((4, 32), "bf16")),
     "kiln_gelu_tanh_and_mul: out"),
    ("apply_rope rotary_dim", lambda: kiln.apply_rope(cuda((4, 32, 128)), cuda((4, 8, 128)), cuda((4,), "int32"),
                                                      rotary_dim=3),
     "kiln_apply_rope: rotary_dim: expected an even value in 2..128"),
    ("apply_rope theta", lambda: kiln.apply_rope(cuda((4, 32, 128)), cuda((4, 8, 128)), cuda((4,), "int32"),
                                                 theta=0.0),
     "kiln_apply_rope: theta: expected a finite value > 0, found 0"),
    ("apply_rope llama31", lambda: kiln.apply_rope(cuda((4, 32, 128)), cuda((4, 8, 128)), cuda((4,), "int32"),
                                                   llama31=kiln.Llama31RopeScaling(high_freq_factor=1.0)),
     "kiln_apply_rope: llama31.high_freq_factor: expected a finite value > low_freq_factor (1), found 1"),
    ("apply_rope_with_cos_sin_cache odd", lambda: kiln.apply_rope_with_cos_sin_cache(
        cuda((4, 32, 128)), cuda((4, 8, 128)), cuda((4,), "int32"), cuda((64, 127), "fp32")),
     "kiln_apply_rope_with_cos_sin_cache: cos_sin_cache: its dim 1 (rotary_dim): expected an even value"),
    ("append_paged_kv k_cache rank", lambda: kiln.append_paged_kv(
        cuda((8, 16, 8)), cuda((8, 16, 8, 128)), cuda((4, 8, 128)), cuda((4, 8, 128)), cuda((4,), "int32"),
        cuda((4,), "int32"), cuda((2,), "int32"), cuda((1,), "int32"), cuda((1,), "int32")),
     "kiln_append_paged_kv: k_cache: expected a 4-D tensor [num_pages, "),
    ("top_k_sampling k", lambda: kiln.top_k_sampling(cuda((4, 100), "fp32"), -1, samples=cuda((4,), "int32")),
     "kiln_top_k_sampling: top_k: expected k >= 0 (0: no top-k), found -1"),
    ("top_p_sampling p", lambda: kiln.top_p_sampling(cuda((4, 100), "fp32"), 1.5, samples=cuda((4,), "int32")),
     "kiln_top_p_sampling: top_p: expected a value in (0, 1], found 1.5"),
    ("min_p_sampling p", lambda: kiln.min_p_sampling(cuda((4, 100), "fp32"), -1.0, samples=cuda((4,), "int32")),
     "kiln_min_p_sampling: min_p: expected a value in [0, 1], found -1"),
    ("top_k_top_p_sampling k dtype", lambda: kiln.top_k_top_p_sampling(
        cuda((4, 100), "fp32"), cuda((4,), "int64"), 0.9, samples=cuda((4,), "int32")),
     "kiln_top_k_top_p_sampling: top_k: expected dtype int32, found int64"),
    ("argmax probs dtype", lambda: kiln.argmax(cuda((4, 100), "bf16"), samples=cuda((4,), "int32")),
     "kiln_argmax: probs: expected dtype fp32, found bf16"),
    ("moe_route top_k", lambda: kiln.moe_route(cuda((4, 8), "bf16"), topk_ids=cuda((4, 9), "int32"),
                                               topk_weights=cuda((4, 9), "fp32")),
     "kiln_moe_route: topk_ids: top_k (dim 1) = 9 exceeds the 8 experts of logits [4, 8]"),
    ("moe_route shapes", lambda: kiln.moe_route(cuda((4, 8), "bf16"), topk_ids=cuda((4, 2), "int32"),
                                                topk_weights=cuda((4, 3), "fp32")),
     "kiln_moe_route: topk_weights: expected shape [4, 2] (topk_ids'), found [4, 3]"),
    ("moe_route logits dtype", lambda: kiln.moe_route(cuda((4, 8), "int32"), topk_ids=cuda((4, 2), "int32"),
                                                      topk_weights=cuda((4, 2), "fp32")),
     "kiln_moe_route: logits: expected dtype fp32, fp16 or bf16, found int32"),
    ("moe_route ids dtype", lambda: kiln.moe_route(cuda((4, 8), "bf16"), topk_ids=cuda((4, 2), "int64"),
                                                   topk_weights=cuda((4, 2), "fp32")),
     "kiln_moe_route: topk_ids: expected dtype int32, found int64"),
    ("moe_route bias dtype", lambda: kiln.moe_route(
        cuda((4, 256), "fp32"), correction_bias=cuda((256,), "bf16"), scoring="sigmoid", n_group=8, topk_group=4,
        topk_ids=cuda((4, 8), "int32"), topk_weights=cuda((4, 8), "fp32")),
     "kiln_moe_route: correction_bias: expected dtype fp32, found bf16"),
    ("moe_route groups", lambda: kiln.moe_route(
        cuda((4, 256), "fp32"), scoring="sigmoid", n_group=8, topk_group=9, topk_ids=cuda((4, 8), "int32"),
        topk_weights=cuda((4, 8), "fp32")),
     "kiln_moe_route: topk_group: expected 1 to n_group = 8, found 9"),
    ("moe_route scale", lambda: kiln.moe_route(cuda((4, 8), "bf16"), routed_scaling_factor=0.0,
                                               topk_ids=cuda((4, 2), "int32"), topk_weights=cuda((4, 2), "fp32")),
     "kiln_moe_route: routed_scaling_factor: expected a finite value > 0, found 0"),
    ("moe_route scoring", lambda: kiln.moe_route(cuda((4, 8), "bf16"), 2, scoring="relu",
                                                 topk_ids=cuda((4, 2), "int32"), topk_weights=cuda((4, 2), "fp32")),
     "kiln.moe_route: scoring: expected 'softmax' or 'sigmoid', found 'relu'"),
    ("moe_permute align", lambda: kiln.moe_permute(
        cuda((4, 2), "int32"), align=3, expert_counts=cuda((8,), "int32"), m_indptr=cuda((9,), "int32"),
        row_to_slot=cuda((8,), "int32"), slot_to_row=cuda((4, 2), "int32")),
     "kiln_moe_permute: align: expected a power of two from 1 (no padding) to 256, found 3"),
    ("moe_permute ids dtype", lambda: kiln.moe_permute(
        cuda((4, 2), "int64"), expert_counts=cuda((8,), "int32"), m_indptr=cuda((9,), "int32"),
        row_to_slot=cuda((8,), "int32"), slot_to_row=cuda((4, 2), "int32")),
     "kiln_moe_permute: topk_ids: expected dtype int32, found int64"),
    ("moe_permute rows", lambda: kiln.moe_permute(
        cuda((4, 2), "int32"), expert_counts=cuda((8,), "int32"), m_indptr=cuda((9,), "int32"),
        row_to_slot=cuda((7,), "int32"), slot_to_row=cuda((4, 2), "int32")),
     "kiln_moe_permute: row_to_slot: expected at least 8 rows (T * top_k = 4 * 2), found shape [7]"),
    ("moe_permute gather dtype", lambda: kiln.moe_permute(
        cuda((4, 2), "int32"), x=cuda((4, 64), "fp32"), permuted_x=cuda((8, 64), "fp32"),
        expert_counts=cuda((8,), "int32"), m_indptr=cuda((9,), "int32"), row_to_slot=cuda((8,), "int32"),
        slot_to_row=cuda((4, 2), "int32")),
     "kiln_moe_permute: x: expected dtype bf16 or fp16, found fp32"),
    ("moe_permute half a gather", lambda: kiln.moe_permute(
        cuda((4, 2), "int32"), permuted_x=cuda((8, 64), "bf16"), expert_counts=cuda((8,), "int32"),
        m_indptr=cuda((9,), "int32"), row_to_slot=cuda((8,), "int32"), slot_to_row=cuda((4, 2), "int32")),
     "kiln_moe_permute: x: x and permuted_x go together (the gather), found permuted_x without x"),
    ("moe_permute num_experts", lambda: kiln.moe_permute(cuda((4, 2), "int32")),
     "kiln.moe_permute: num_experts: give num_experts, or expert_counts (its length is E)"),
    ("moe_unpermute expert_out dtype", lambda: kiln.moe_unpermute(
        cuda((8, 64), "fp32"), cuda((4, 2), "int32"), cuda((4, 2), "fp32"), out=cuda((4, 64), "fp32")),
     "kiln_moe_unpermute: expert_out: expected dtype bf16 or fp16, found fp32"),
    ("moe_unpermute expert_out rank", lambda: kiln.moe_unpermute(
        cuda((8, 2, 32), "bf16"), cuda((4, 2), "int32"), cuda((4, 2), "fp32"), out=cuda((4, 64), "bf16")),
     "kiln_moe_unpermute: expert_out: expected a 2-D tensor [R, H], found rank 3 [8, 2, 32]"),
    ("moe_unpermute slot_to_row dtype", lambda: kiln.moe_unpermute(
        cuda((8, 64), "bf16"), cuda((4, 2), "int64"), cuda((4, 2), "fp32"), out=cuda((4, 64), "bf16")),
     "kiln_moe_unpermute: slot_to_row: expected dtype int32, found int64"),
    ("moe_unpermute top_k", lambda: kiln.moe_unpermute(
        cuda((8, 64), "bf16"), cuda((4, 17), "int32"), cuda((4, 17), "fp32"), out=cuda((4, 64), "bf16")),
     "kiln_moe_unpermute: slot_to_row: top_k (dim 1) must be 1 to 16, found 17"),
    ("moe_unpermute weights shape", lambda: kiln.moe_unpermute(
        cuda((8, 64), "bf16"), cuda((4, 2), "int32"), cuda((4, 3), "fp32"), out=cuda((4, 64), "bf16")),
     "kiln_moe_unpermute: topk_weights: expected shape [4, 2] (slot_to_row's), found [4, 3]"),
    ("moe_unpermute weights dtype", lambda: kiln.moe_unpermute(
        cuda((8, 64), "bf16"), cuda((4, 2), "int32"), cuda((4, 2), "bf16"), out=cuda((4, 64), "bf16")),
     "kiln_moe_unpermute: topk_weights: expected dtype fp32, found bf16"),
    ("moe_unpermute out dtype", lambda: kiln.moe_unpermute(
        cuda((8, 64), "bf16"), cuda((4, 2), "int32"), cuda((4, 2), "fp32"), out=cuda((4, 64), "fp16")),
     "kiln_moe_unpermute: out: expected dtype bf16 (expert_out's), found fp16"),
    ("moe_unpermute out shape", lambda: kiln.moe_unpermute(
        cuda((8, 64), "bf16"), cuda((4, 2), "int32"), cuda((4, 2), "fp32"), out=cuda((5, 64), "bf16")),
     "kiln_moe_unpermute: out: expected shape [4, 64] (slot_to_row's tokens, expert_out's hidden size), found [5, 64]"),
    ("fused_moe x dtype", lambda: _fused_moe("fp32"),
     "kiln_fused_moe: x: expected dtype bf16 or fp16, found fp32"),
    ("fused_moe x rank", lambda: _fused_moe(x=cuda((4, 64, 1), "bf16")),
     "kiln_fused_moe: x: expected a 2-D tensor [T, H], found rank 3 [4, 64, 1]"),
    ("fused_moe hidden", lambda: _fused_moe(x=cuda((4, 60), "bf16"), out=cuda((4, 60), "bf16")),
     "kiln_fused_moe: x: H (dim 1) must be a positive multiple of 8 (16-byte rows for TMA), found [4, 60]"),
    ("fused_moe w13 dtype", lambda: _fused_moe(w13=cuda((8, 32, 64), "fp16")),
     "kiln_fused_moe: w13: expected dtype bf16, found fp16"),
    ("fused_moe w13 rank", lambda: _fused_moe(w13=cuda((256, 64), "bf16")),
     "kiln_fused_moe: w13: expected a 3-D tensor [E, 2I, H], found rank 2 [256, 64]"),
    ("fused_moe experts", lambda: _fused_moe(w13=cuda((257, 32, 64), "bf16"), w2=cuda((257, 64, 16), "bf16")),
     "kiln_fused_moe: w13: E (dim 0) must be 1 to 256, found shape [257, 32, 64]"),
    ("fused_moe gate_up", lambda: _fused_moe(w13=cuda((8, 40, 64), "bf16"), w2=cuda((8, 64, 20), "bf16")),
     "kiln_fused_moe: w13: dim 1 is the gate rows then the up rows, 2I with I a positive multiple of 8, found "
     "shape [8, 40, 64]"),
    ("fused_moe w13 hidden", lambda: _fused_moe(w13=cuda((8, 32, 128), "bf16")),
     "kiln_fused_moe: w13: expected shape [E, 2I, 64] (H = x's dim 1), found [8, 32, 128]"),
    ("fused_moe w2 shape", lambda: _fused_moe(w2=cuda((8, 64, 32), "bf16")),
     "kiln_fused_moe: w2: expected shape [8, 64, 16] (w13's E, x's H, w13's I), found [8, 64, 32]"),
    ("fused_moe w2 dtype", lambda: _fused_moe(w2=cuda((8, 64, 16), "fp16")),
     "kiln_fused_moe: w2: expected dtype bf16, found fp16"),
    ("fused_moe ids dtype", lambda: _fused_moe(topk_ids=cuda((4, 2), "int64")),
     "kiln_fused_moe: topk_ids: expected dtype int32, found int64"),
    ("fused_moe ids rows", lambda: _fused_moe(topk_ids=cuda((5, 2), "int32")),
     "kiln_fused_moe: topk_ids: expected 4 rows (x's T), found shape [5, 2]"),
    ("fused_moe top_k above E", lambda: _fused_moe(topk_ids=cuda((4, 9), "int32"), topk_weights=cuda((4, 9), "fp32")),
     "kiln_fused_moe: topk_ids: top_k (dim 1) must be 1 to min(E, 16) = 8, found [4, 9]"),
    ("fused_moe weights shape", lambda: _fused_moe(topk_weights=cuda((4, 3), "fp32")),
     "kiln_fused_moe: topk_weights: expected shape [4, 2] (topk_ids'), found [4, 3]"),
    ("fused_moe weights dtype", lambda: _fused_moe(topk_weights=cuda((4, 2), "bf16")),
     "kiln_fused_moe: topk_weights: expected dtype fp32, found bf16"),
    ("fused_moe out dtype", lambda: _fused_moe(out=cuda((4, 64), "fp16")),
     "kiln_fused_moe: out: expected dtype bf16, found fp16"),
    ("fused_moe out shape", lambda: _fused_moe(out=cuda((4, 56), "bf16")),
     "kiln_fused_moe: out: expected shape [4, 64] (x's), found [4, 56]"),
    ("fused_moe workspace size", lambda: _fused_moe(workspace=cuda((2559,), "uint8")),
     "kiln_fused_moe: workspace: expected at least fused_moe_workspace_bytes(T 4, top_k 2, E 8, H 64, I 16) = "
     "2560 bytes, found [2559]"),
    ("fused_moe workspace dtype", lambda: _fused_moe(workspace=cuda((2560,), "int32")),
     "kiln_fused_moe: workspace: expected dtype uint8, found int32"),
    ("fused_moe workspace rank", lambda: _fused_moe(workspace=cuda((9, 256), "uint8")),
     "kiln_fused_moe: workspace: expected a 1-D tensor [bytes], found rank 2 [9, 256]"),
    ("fused_moe workspace alignment", lambda: _fused_moe(workspace=_at(_X, (1 << 20) + 16, (2560,), "uint8")),
     "is not 256-byte aligned"),
    ("fused_moe out partly over x", lambda: _fused_moe(x=_X, out=_at(_X, 128, (4, 64), "bf16")),
     "kiln_fused_moe: out and x overlap in memory"),
    ("fused_moe workspace over x", lambda: _fused_moe(x=_X, workspace=_at(_X, 0, (2560,), "uint8")),
     "kiln_fused_moe: workspace and x overlap in memory"),
    ("fused_moe ids and logits", lambda: _fused_moe(router_logits=cuda((4, 8), "fp32"), top_k=2),
     "kiln.fused_moe: router_logits: give topk_ids and topk_weights (the choices), or router_logits and top_k "
     "(routed here), not both"),
    ("fused_moe logits without top_k", lambda: _fused_moe(topk_ids=None, topk_weights=None,
                                                          router_logits=cuda((4, 8), "fp32")),
     "kiln.fused_moe: top_k: router_logits needs top_k (the experts per token)"),
    ("fused_moe no choices", lambda: _fused_moe(topk_ids=None, topk_weights=None),
     "kiln.fused_moe: topk_ids: give topk_ids and topk_weights (moe_route's outputs), or router_logits= and top_k="),
    ("fused_moe ids without weights", lambda: _fused_moe(topk_weights=None),
     "kiln.fused_moe: topk_weights: give topk_ids and topk_weights"),
    ("fused_moe route option with ids", lambda: _fused_moe(scoring="sigmoid"),
     "kiln.fused_moe: scoring: a routing option, taken only with router_logits= (the choices were given)"),
    ("fused_moe top_k not the ids'", lambda: _fused_moe(top_k=3),
     "kiln.fused_moe: top_k: 3 is not topk_ids' dim 1 (2); leave it out with given choices"),
    ("fused_moe route options reach moe_route", lambda: _fused_moe(
        topk_ids=None, topk_weights=None, router_logits=cuda((4, 8), "fp32"), top_k=2, scoring="relu"),
     "kiln.moe_route: scoring: expected 'softmax' or 'sigmoid', found 'relu'"),
    ("gemm b dtype", lambda: kiln.gemm(cuda((4, 64)), cuda((32, 64), "fp32"), out=cuda((4, 32))),
     "kiln_gemm: b: expected dtype fp16 (a's), found fp32"),
    ("grouped_gemm m_indptr dtype", lambda: kiln.grouped_gemm(
        cuda((16, 64)), cuda((2, 32, 64)), cuda((3,), "int64"), out=cuda((16, 32))), "kiln_grouped_gemm: m_indptr"),
    ("grouped_gemm_masked masked_m dtype", lambda: kiln.grouped_gemm_masked(
        cuda((2, 8, 64)), cuda((2, 32, 64)), cuda((2,), "fp32"), out=cuda((2, 8, 32))),
     "kiln_grouped_gemm_masked: masked_m"),
    ("fp8_gemm a dtype", lambda: kiln.fp8_gemm(cuda((4, 128), "bf16"), cuda((32, 128), "fp8_e4m3"),
                                               cuda((4, 1), "fp32"), cuda((1, 1), "fp32"), out=cuda((4, 32), "bf16")),
     "kiln_fp8_gemm: a"),
    ("grouped_fp8_gemm a dtype", lambda: kiln.grouped_fp8_gemm(
        cuda((16, 128), "bf16"), cuda((2, 32, 128), "fp8_e4m3"), cuda((16, 1), "fp32"), cuda((2, 1, 1), "fp32"),
        cuda((3,), "int32"), out=cuda((16, 32), "bf16")), "kiln_grouped_fp8_gemm: a"),
    ("grouped_fp8_gemm_masked a dtype", lambda: kiln.grouped_fp8_gemm_masked(
        cuda((2, 8, 128), "bf16"), cuda((2, 32, 128), "fp8_e4m3"), cuda((2, 8, 1), "fp32"), cuda((2, 1, 1), "fp32"),
        cuda((2,), "int32"), out=cuda((2, 8, 32), "bf16")), "kiln_grouped_fp8_gemm_masked: a"),
    ("decode plan head_dim", lambda: kiln.BatchDecodePlan([0, 1], [1], 32, 8, 96, 16, "bf16"),
     "kiln_batch_decode_plan_create: head_dim: 96 is not supported; supported: 64, 128, 256"),
    ("decode plan dtype", lambda: kiln.BatchDecodePlan([0, 1], [1], 32, 8, 128, 16, (2, 32)),
     "kiln_batch_decode_plan_create: dtype: fp32 is not supported"),
    ("decode plan lengths", lambda: kiln.BatchDecodePlan([0, 1, 2], [1], 32, 8, 128, 16, "bf16"),
     "kiln.BatchDecodePlan: kv_indptr: expected 2 entries, found 3"),
    ("prefill ragged head_dim", lambda: kiln.BatchPrefillPlan.ragged([0, 4], [0, 4], 32, 8, 96, "bf16"),
     "kiln_batch_prefill_plan_create_ragged: head_dim: 96 is not supported; supported: 64, 128, 256"),
    ("prefill paged head_dim", lambda: kiln.BatchPrefillPlan.paged([0, 4], [0, 1], [4], 32, 8, 96, 16, "bf16"),
     "kiln_batch_prefill_plan_create_paged: head_dim: 96 is not supported; supported: 64, 128, 256"),
    ("decode plan host array dtype", lambda: kiln.BatchDecodePlan(array.array("d", [0, 1]), [1], 32, 8, 128, 16,
                                                                  "bf16"),
     "kiln.BatchDecodePlan: kv_indptr: expected a host array of int32, found item format 'd'"),
    ("decode plan device indptr", lambda: kiln.BatchDecodePlan(cuda((2,), "int32"), [1], 32, 8, 128, 16, "bf16"),
     "kiln.BatchDecodePlan: kv_indptr: expected a host (CPU) array, found a device tensor"),
    ("dtype name", lambda: kiln.BatchDecodePlan([0, 1], [1], 32, 8, 128, 16, "fp8"),
     "kiln.BatchDecodePlan: dtype: expected fp16 or bf16"),
]


@pytest.mark.parametrize("call,fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_arguments_give_the_library_message(call, fragment):
    with pytest.raises(kiln.InvalidArgument) as info:
        call()
    assert info.value.code == 1
    assert fragment in str(info.value)


# Every op given NumPy arrays: refused as CPU tensors, naming the first tensor the op checks.
def _np(shape, dtype=np.float16):
    return np.zeros(shape, dtype)


NUMPY_CALLS = [
    ("rms_norm", lambda: kiln.rms_norm(_np((4, 64)), _np((64,)), out=_np((4, 64)))),
    ("fused_add_rms_norm", lambda: kiln.fused_add_rms_norm(_np((4, 64)), _np((4, 64)), _np((64,)))),
    ("silu_and_mul", lambda: kiln.silu_and_mul(_np((4, 64)), out=_np((4, 32)))),
    ("gelu_and_mul", lambda: kiln.gelu_and_mul(_np((4, 64)), out=_np((4, 32)))),
    ("gelu_tanh_and_mul", lambda: kiln.gelu_tanh_and_mul(_np((4, 64)), out=_np((4, 32)))),
    ("apply_rope", lambda: kiln.apply_rope(_np((4, 2, 64)), _np((4, 2, 64)), _np((4,), np.int32))),
    ("apply_rope_with_cos_sin_cache", lambda: kiln.apply_rope_with_cos_sin_cache(
        _np((4, 2, 64)), _np((4, 2, 64)), _np((4,), np.int32), _np((16, 64), np.float32))),
    ("append_paged_kv", lambda: kiln.append_paged_kv(
        _np((2, 16, 2, 64)), _np((2, 16, 2, 64)), _np((4, 2, 64)), _np((4, 2, 64)), _np((4,), np.int32),
        _np((4,), np.int32), _np((2,), np.int32), _np((1,), np.int32), _np((1,), np.int32))),
    ("top_k_sampling", lambda: kiln.top_k_sampling(_np((2, 10), np.float32), 3, samples=_np((2,), np.int32))),
    ("top_p_sampling", lambda: kiln.top_p_sampling(_np((2, 10), np.float32), 0.5, samples=_np((2,), np.int32))),
    ("top_k_top_p_sampling", lambda: kiln.top_k_top_p_sampling(_np((2, 10), np.float32), 3, 0.5,
                                                               samples=_np((2,), np.int32))),
    ("min_p_sampling", lambda: kiln.min_p_sampling(_np((2, 10), np.float32), 0.1, samples=_np((2,), np.int32))),
    ("argmax", lambda: kiln.argmax(_np((2, 10), np.float32), samples=_np((2,), np.int32))),
    ("gemm", lambda: kiln.gemm(_np((4, 64)), _np((32, 64)), out=_np((4, 32)))),
    ("grouped_gemm", lambda: kiln.grouped_gemm(_np((4, 64)), _np((2, 32, 64)), _np((3,), np.int32),
                                               out=_np((4, 32)))),
    ("grouped_gemm_masked", lambda: kiln.grouped_gemm_masked(_np((2, 4, 64)), _np((2, 32, 64)), _np((2,), np.int32),
                                                             out=_np((2, 4, 32)))),
    ("moe_route", lambda: kiln.moe_route(_np((2, 8), np.float32), topk_ids=_np((2, 2), np.int32),
                                         topk_weights=_np((2, 2), np.float32))),
    ("moe_permute", lambda: kiln.moe_permute(_np((2, 2), np.int32), expert_counts=_np((8,), np.int32),
                                             m_indptr=_np((9,), np.int32), row_to_slot=_np((4,), np.int32),
                                             slot_to_row=_np((2, 2), np.int32))),
    ("moe_unpermute", lambda: kiln.moe_unpermute(_np((4, 64), np.float16), _np((2, 2), np.int32),
                                                 _np((2, 2), np.float32), out=_np((2, 64), np.float16))),
    ("fused_moe", lambda: kiln.fused_moe(_np((2, 64)), _np((8, 32, 64)), _np((8, 64, 16)), _np((2, 2), np.int32),
                                         _np((2, 2), np.float32), out=_np((2, 64)),
                                         workspace=_np((kiln.fused_moe_workspace_bytes(2, 2, 8, 64, 16),), np.uint8))),
]


@pytest.mark.parametrize("call", [c[1] for c in NUMPY_CALLS], ids=[c[0] for c in NUMPY_CALLS])
def test_numpy_arrays_are_refused_as_cpu_tensors(call):
    with pytest.raises(kiln.InvalidArgument) as info:
        call()
    message = str(info.value)
    assert message.startswith("kiln_") and "found one on cpu" in message, message


def test_a_cpu_dlpack_tensor_is_refused_like_numpy():
    cpu = FakeTensor((4, 64), "fp16", device_type=KDL_CPU)
    with pytest.raises(kiln.InvalidArgument, match="kiln_rms_norm: input: expected a CUDA device tensor, found one "
                                                   "on cpu"):
        kiln.rms_norm(cpu, cuda((64,)), out=cuda((4, 64)))


@pytest.mark.parametrize("what", ["rms_norm", "silu_and_mul", "argmax", "moe_route", "moe_permute", "moe_unpermute",
                                  "fused_moe", "fused_moe workspace"])
def test_an_output_without_torch_must_be_given(what):
    x = cuda((4, 64), "fp32" if what in ("argmax", "moe_route") else "fp16")
    calls = {"rms_norm": lambda: kiln.rms_norm(x, cuda((64,))), "silu_and_mul": lambda: kiln.silu_and_mul(x),
             "argmax": lambda: kiln.argmax(x), "moe_route": lambda: kiln.moe_route(x, 8),
             "moe_permute": lambda: kiln.moe_permute(cuda((4, 8), "int32"), 64),
             "moe_unpermute": lambda: kiln.moe_unpermute(cuda((8, 64), "bf16"), cuda((4, 2), "int32"),
                                                         cuda((4, 2), "fp32")),
             "fused_moe": lambda: _fused_moe(out=None),
             "fused_moe workspace": lambda: _fused_moe(workspace=None)}
    name = {"argmax": "samples", "moe_route": "topk_ids", "moe_permute": "expert_counts",
            "fused_moe workspace": "workspace"}.get(what, "out")
    with pytest.raises(kiln.InvalidArgument, match=f"kiln.{what.split()[0]}: {name}: not given, and it can only be "
                                                   f"allocated for torch tensors .*pass {name}="):
        calls[what]()


def test_a_plan_needing_a_workspace_without_torch_asks_for_one(monkeypatch):
    from kiln._workspace import plan_workspace
    monkeypatch.delitem(sys.modules, "torch", raising=False)  # a caller that does not use torch
    with pytest.raises(kiln.InvalidArgument, match="needs 4096 bytes of device workspace.*pass workspace="):
        plan_workspace("kiln.BatchDecodePlan", 4096, None, "bf16", -1)
    assert plan_workspace("kiln.BatchDecodePlan", 0, None, "bf16", -1) is None


def test_objects_without_dlpack_are_type_errors():
    with pytest.raises(TypeError, match="input: expected a tensor \\(an object with __dlpack__\\), found list"):
        kiln.rms_norm([1.0], cuda((1,)), out=cuda((1,)))
    with pytest.raises(TypeError, match="weight: expected a tensor .*found None"):
        kiln.rms_norm(cuda((4, 64)), None, out=cuda((4, 64)))


def test_the_capsule_is_asked_once_per_tensor():
    x, w, out = cuda((4, 64), "bf16"), cuda((64,), "fp16"), cuda((4, 64), "bf16")
    with pytest.raises(kiln.InvalidArgument):
        kiln.rms_norm(x, w, out=out)
    assert (x.calls, w.calls, out.calls) == (1, 1, 1)


def test_capsules_are_released_after_the_call():
    # NumPy's DLManagedTensor holds a reference to its array until the capsule's destructor runs
    # its deleter: a capsule kept (or consumed without calling the deleter) would leak it.
    a, w = _np((4, 64)), _np((64,))
    before = (sys.getrefcount(a), sys.getrefcount(w))
    for _ in range(100):
        with pytest.raises(kiln.InvalidArgument):
            kiln.rms_norm(a, w, out=a)
    assert (sys.getrefcount(a), sys.getrefcount(w)) == before


def test_plans_take_host_arrays_of_every_kind():
    # Every form reaches the library (head_dim 96 is refused there, after the arrays were read).
    for indptr, last in [([0, 1], [1]), (array.array("i", [0, 1]), array.array("i", [1])),
                         (np.array([0, 1], np.int32), np.array([1], np.int32)),
                         (FakeTensor((2,), "int32", device_type=KDL_CPU, data=np.array([0, 1], np.int32).ctypes.data),
                          [1])]:
        with pytest.raises(kiln.InvalidArgument, match="head_dim: 96 is not supported"):
            kiln.BatchDecodePlan(indptr, last, 32, 8, 96, 16, "bf16")


@pytest.mark.skipif(kiln.testing.has_driver(), reason="a CUDA driver is present: fake tensors must not reach it")
def test_valid_arguments_without_a_driver_are_no_driver():
    with pytest.raises(kiln.NoDriver) as info:
        kiln.rms_norm(cuda((4, 64), "bf16"), cuda((64,), "bf16"), out=cuda((4, 64), "bf16"))
    assert info.value.code == 7 and "kiln_rms_norm: no CUDA driver" in str(info.value)
    with pytest.raises(kiln.NoDriver):
        kiln.BatchDecodePlan([0, 1], [1], 32, 8, 128, 16, "bf16")


@pytest.mark.skipif(kiln.testing.has_driver(), reason="a CUDA driver is present: fake tensors must not reach it")
def test_valid_fused_moe_calls_pass_validation():
    """Valid calls get past every check to the first launch (NO_DRIVER here): fp16 and bf16, in
    place (out is x), padded x rows, a workspace larger than needed; no tokens launches nothing."""
    x = cuda((4, 64), "bf16")
    for call in (lambda: _fused_moe(), lambda: _fused_moe("fp16"), lambda: _fused_moe(x=x, out=x),
                 lambda: _fused_moe(x=cuda((4, 64), "bf16", strides=(72, 1))),
                 lambda: _fused_moe(workspace=cuda((1 << 20,), "uint8"))):
        with pytest.raises(kiln.NoDriver, match="fused_moe: .*no CUDA driver"):
            call()
    out = cuda((0, 64), "bf16")
    assert _fused_moe(x=cuda((0, 64), "bf16"), topk_ids=cuda((0, 2), "int32"), topk_weights=cuda((0, 2), "fp32"),
                      out=out, workspace=cuda((kiln.fused_moe_workspace_bytes(0, 2, 8, 64, 16),), "uint8")) is out


def test_fused_moe_workspace_bytes_is_the_c_headers():
    """kiln.fused_moe_workspace_bytes (Python) and KILN_FUSED_MOE_WORKSPACE_BYTES (the C header,
    through kiln._native) agree, and give the trace examples' workspace_bytes."""
    from kiln import _native
    for tokens in (0, 1, 3, 8, 64, 1000, 4096):
        for top_k, experts in ((1, 1), (2, 8), (6, 64), (8, 128), (8, 256), (16, 33)):
            for hidden, inter in ((8, 8), (64, 16), (4096, 14336), (2048, 768), (7168, 2048), (136, 200)):
                args = (tokens, top_k, experts, hidden, inter)
                assert kiln.fused_moe_workspace_bytes(*args) == _native.fused_moe_workspace_bytes(*args), args
    trace = os.path.join(_build_info.CHECKOUT, "kernels", "traces", "fused_moe.json")
    with open(trace) as f:
        examples = json.load(f)["examples"]
    assert examples
    for example in examples:
        a = example["axes"]
        assert kiln.fused_moe_workspace_bytes(a["tokens"], a["top_k"], a["experts"], a["hidden"],
                                              a["intermediate"]) == a["workspace_bytes"], example["name"]


def test_fused_moe_refuses_unknown_keywords():
    with pytest.raises(TypeError, match="kiln.fused_moe\\(\\) got an unexpected keyword argument 'scorring'"):
        _fused_moe(topk_ids=None, topk_weights=None, router_logits=cuda((4, 8), "fp32"), top_k=2, scorring="sigmoid")


def _fused_moe_fp8(**replace):
    """kiln.fused_moe_fp8 on fake tensors (T 4, H 256, E 8, I 128, top_k 2), every argument given and
    valid unless `replace` says otherwise."""
    t = {"x": cuda((4, 256), "bf16"), "w13": cuda((8, 256, 256), "fp8_e4m3"), "w13_scales": cuda((8, 2, 2), "fp32"),
         "w2": cuda((8, 256, 128), "fp8_e4m3"), "w2_scales": cuda((8, 2, 1), "fp32"),
         "topk_ids": cuda((4, 2), "int32"), "topk_weights": cuda((4, 2), "fp32"), "out": cuda((4, 256), "bf16"),
         "workspace": cuda((kiln.fused_moe_fp8_workspace_bytes(4, 2, 8, 256, 128),), "uint8")}
    t.update(replace)
    return kiln.fused_moe_fp8(t.pop("x"), t.pop("w13"), t.pop("w13_scales"), t.pop("w2"), t.pop("w2_scales"), **t)


@pytest.mark.parametrize("call, message", [
    (lambda: _fused_moe_fp8(w13=cuda((8, 256, 256), "bf16")),
     "kiln_fused_moe_fp8: w13: expected dtype fp8_e4m3, found bf16"),
    (lambda: _fused_moe_fp8(x=cuda((4, 256), "fp16"), out=cuda((4, 256), "fp16")),
     "kiln_fused_moe_fp8: x: expected dtype bf16, found fp16"),
    (lambda: _fused_moe_fp8(w13_scales=cuda((8, 2, 1), "fp32")),
     re.escape("kiln_fused_moe_fp8: w13_scales: expected shape [8, 2, 2] (one per 128 x 128 block of w13[e]), "
               "found [8, 2, 1]")),
    (lambda: _fused_moe_fp8(w2_scales=cuda((8, 2, 1), "fp16")),
     "kiln_fused_moe_fp8: w2_scales: expected dtype fp32, found fp16"),
    (lambda: _fused_moe_fp8(x=cuda((4, 264), "bf16"), out=cuda((4, 264), "bf16")),
     "kiln_fused_moe_fp8: x: H \\(dim 1\\) must be a positive multiple of 16"),
    (lambda: _fused_moe_fp8(workspace=cuda((256,), "uint8")),
     "kiln_fused_moe_fp8: workspace: expected at least fused_moe_fp8_workspace_bytes\\(T 4, top_k 2, E 8, H 256, I 128\\)"),
    (lambda: _fused_moe_fp8(topk_ids=None),
     "kiln.fused_moe_fp8: topk_ids: give topk_ids and topk_weights"),
])
def test_fused_moe_fp8_refuses_bad_arguments(call, message):
    with pytest.raises(kiln.InvalidArgument, match=message):
        call()


@pytest.mark.skipif(kiln.testing.has_driver(), reason="a CUDA driver is present: fake tensors must not reach it")
def test_fused_moe_fp8_valid_arguments_reach_the_driver():
    with pytest.raises(kiln.NoDriver, match="fused_moe_fp8: .*no CUDA driver"):
        _fused_moe_fp8()
    x = cuda((4, 256), "bf16")
    with pytest.raises(kiln.NoDriver, match="fused_moe_fp8: .*no CUDA driver"):
        _fused_moe_fp8(x=x, out=x)


def test_fused_moe_fp8_workspace_bytes_is_the_c_headers():
    """kiln.fused_moe_fp8_workspace_bytes (Python) and KILN_FUSED_MOE_FP8_WORKSPACE_BYTES (the C header)
    agree, and give the trace examples' workspace_bytes."""
    from kiln import _native
    for tokens in (0, 1, 3, 64, 4096):
        for top_k, experts in ((1, 1), (2, 8), (8, 128), (8, 256)):
            for hidden, inter in ((16, 16), (256, 128), (2048, 768), (7168, 2048), (272, 208), (4096, 14336)):
                args = (tokens, top_k, experts, hidden, inter)
                assert kiln.fused_moe_fp8_workspace_bytes(*args) == _native.fused_moe_fp8_workspace_bytes(*args), args
    with open(os.path.join(_build_info.CHECKOUT, "kernels", "traces", "fused_moe_fp8.json")) as f:
        examples = json.load(f)["examples"]
    assert examples
    for example in examples:
        a = example["axes"]
        assert kiln.fused_moe_fp8_workspace_bytes(a["tokens"], a["top_k"], a["experts"], a["hidden"],
                                                  a["intermediate"]) == a["workspace_bytes"], example["name"]
