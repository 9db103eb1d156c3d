#!/usr/bin/env python3
"""Kiln's ops against their PyTorch equivalents, in one process, on the same inputs.

Kiln is called through its Python package `kiln` (client/python, docs/python.md: libkiln_client's
C ABI through the extension kiln._native, no copy), on the same torch tensors as the other
backends, with every output given (out=...) so that no call allocates inside a CUDA-graph capture:

    PYTHONPATH=/tmp/kiln-py python3 bench/compare_torch.py --socket /path/kilnd.sock \
        --out $OUT/compare-torch.json

`import kiln` must work: `pip install client/python` (docs/python.md), or on the GPU machine
`bash bench/python_gpu.sh site`, which builds the package with its extension in /tmp/kiln-py for
that machine's Python (/opt/torch/.venv/bin/python: run this script with it) and prints the
PYTHONPATH to use. Kernels: with --socket, from the kilnd listening there (checked first: the run
stops when it does not answer); without it, where the package's own settings say: KILN_SOCKET
names the daemon, KILN_MODE chooses (auto, the default: the daemon when one listens, else the
embedded engine compiling in this process; daemon; embedded). The run header and the JSON's
meta give kiln.version() and kiln.describe_mode().

Cases are the examples of each op's trace definition (kernels/traces/<op>.json: realistic
Llama-3.1-8B shapes, the same cases as kiln-bench's default list). For each case:

  1. Correctness first. Every backend runs once on clones of the same fresh random inputs
     (outputs poisoned with NaN first); Kiln's outputs must agree with each PyTorch backend's
     and with the trace definition's own PyTorch reference (run as written in the JSON) within
     twice the per-dtype tolerance of the GPU tests (fp32 1e-5, fp16 2e-3, bf16 1.6e-2, abs and
     rel). A case that disagrees is reported loudly and not timed; the exit status is 1. An
     optional peer (FlashInfer) that disagrees while Kiln agrees with the trace reference and
     every PyTorch backend is the peer's error: reported (its rows' refcheck says "peer
     disagrees with the references") and timed.
  2. Timing. Every backend is timed the same way: CALLS back-to-back calls captured into one
     CUDA graph (so Python's launch overhead is not measured), each call on the next of SETS
     rotating copies of the inputs (enough copies to exceed twice the L2 where memory and the
     call count allow; rows say how many), the graph replayed REPS times between CUDA events;
     per-call time = replay time / CALLS; the rows give the median, spread and minimum. When a
     backend cannot be captured, its calls are timed back to back with events (the row says so).

Backends: kiln, PyTorch's, and FlashInfer's where it imports (bench/flashinfer_peer.py: the norms,
the gated activations, both RoPE forms, append_paged_kv, batch_decode with its tensor-core
setting, the samplers, fused_moe's CUTLASS MoE; --no-flashinfer leaves them out). An optional peer
that refuses a case is reported in the case's checks and on stdout as "not run: <why>".

Rows: op, backend, case, dtype, shape, median/std/min us, TFLOP/s where an op counts FLOPs (gemm), GB/s (the bytes an op must move /
time), % of the device-to-device copy bandwidth measured in the same run, and the time ratio
to Kiln (backend / kiln: above 1 means Kiln is faster). Ops whose function the kiln package
lacks are skipped with a note.

Decode and sampling:
  - batch_decode: Kiln's plan is made once per case (kiln.BatchDecodePlan), the run step
    (kiln.batch_decode) is timed; PyTorch's SDPA reads the same K and V stored densely
    ([B, Hk, L, D], copied from the paged cache once, not timed: bench/decode/sdpa_baseline.py).
    V has a +-1 pattern per 256-position region so that a lost chunk of a long request shows,
    and out is checked with the GPU tests' tolerance for long requests (bf16 abs 2e-3, rel
    1.6e-2). Ragged batches (axis ragged=1, e.g. bench/decode/ragged.list): each request's
    length is drawn uniformly in [1, kv_len] from the case's seed (bench/decode/paged_table.py;
    nnz_pages left out, computed), Kiln and FlashInfer plan from that page table, and PyTorch's
    SDPA reads K and V padded to the longest request with a boolean mask [B, 1, 1, L] of each
    request's positions (the query heads of a kv head as its queries, row torch_sdpa_padded_mask);
    GB/s counts the positions the requests hold, not the padding.
  - append_paged_kv: a copy, so both caches must be bit-identical to PyTorch's (index_put with
    the slots computed per call, and index_copy_ with vLLM's precomputed slot mapping).
  - top_k / top_p / top_k_top_p / min_p sampling: a draw is random, so Kiln's tokens must lie
    in the allowed sets computed in float64 from the same probabilities (checked against the
    plain-Python definition, bench/sampling/allowed_set.py, on a row of every case), and a
    second call with the same seed must give the same tokens. PyTorch's eager samplers
    (bench/sampling/torch_baseline.py: topk / sort + cumsum filters, torch.multinomial) are
    timed; their draws are checked the same way but only reported (their filters are fp32).
    argmax is exact.

MoE:
  - fused_moe: the routing (kiln.moe_route on random logits, each model's router) is made once
    per case and shared by every backend; peers are a PyTorch per-expert loop (the experts with
    tokens found once per case, so it captures in a graph), a sort-based PyTorch layer (argsort,
    gather, per-expert F.linear on contiguous slices, scatter-add; one host read per call, timed
    back to back) and FlashInfer's cutlass_fused_moe. GB/s and % of copy count the weights of the
    experts some token chose (what a decode step must read), not the whole layer's.
"""
import argparse
import importlib.util
import inspect
import json
import math
import os
import random
import re
import statistics
import sys
import time

try:
    import kiln
except ImportError as e:  # not installed, or its extension / libkiln_client cannot be loaded
    sys.exit(f"compare_torch.py: the kiln package cannot be imported ({e}).\n"
             "Install it for this Python: pip install client/python (docs/python.md); on the GPU machine: "
             "bash bench/python_gpu.sh site (builds it in /tmp/kiln-py), then run this script with "
             "/opt/torch/.venv/bin/python and the PYTHONPATH it prints.")

import torch
import torch.nn.functional as F

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))


def bench_module(relative_path):
    """A module of bench/ by its file path (bench/decode and bench/sampling are scripts' folders,
    not packages)."""
    name = "kiln_bench_" + relative_path.replace("/", "_").removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, os.path.join(BENCH_DIR, relative_path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PAGED = bench_module("decode/paged_table.py")        # the page table (plain Python)
SDPA = bench_module("decode/sdpa_baseline.py")       # dense K/V and PyTorch's decode attention
ALLOWED = bench_module("sampling/allowed_set.py")    # the samplers' allowed sets (plain Python)
SAMPLERS = bench_module("sampling/torch_baseline.py")  # PyTorch's eager samplers
FI = bench_module("flashinfer_peer.py")              # FlashInfer's calls, when it imports
CASES = bench_module("case_list.py")                 # --list files (plain Python)
USE_FLASHINFER = True                                # --no-flashinfer turns its backends off

TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
                "fp8_e4m3": torch.float8_e4m3fn}
# One rounding to the dtype plus fp32 accumulation against float64 (the GPU tests' figures);
# two GPU results are each within it of the truth, so they must agree within twice it.
TOLERANCE = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2}


# ---- the ops ------------------------------------------------------------------------------------
# Each op: the trace definition it follows, the kiln package's names it calls, how to make a
# case's tensors (named as the package's arguments), how Kiln (the package, every output given)
# and each PyTorch backend compute it (PyTorch backends return the outputs, in the order of
# `outputs`), the scalars of the trace reference, and the bytes a call must move.

EPS = 1e-6
ROPE_THETA = 500000.0  # Llama-3.1
ROPE_LLAMA31 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position": 8192}
ROPE_MAX_POSITION = 16384  # positions drawn in [0, this)


def uniform(shape, dtype, gen, lo=-2.0, hi=2.0):
    x = torch.rand(shape, device="cuda", generator=gen, dtype=torch.float32) * (hi - lo) + lo
    x = x.to(dtype)
    x[x == 0] = 0.5  # never zero: a zero would hide a missing write
    return x


def torch_rms_norm(x, weight, eps=EPS):
    """The eager formula (x.float().pow(2).mean(-1) ...), one rounding at the end."""
    y = x.float()
    return (y * torch.rsqrt(y.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rope_inv_freq(rotary_dim, device):
    inv = ROPE_THETA ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64, device=device) / rotary_dim)
    s = ROPE_LLAMA31
    wavelen = 2 * math.pi / inv
    low, high = s["original_max_position"] / s["low_freq_factor"], s["original_max_position"] / s["high_freq_factor"]
    smooth = (s["original_max_position"] / wavelen - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
    scaled = torch.where(wavelen > low, inv / s["factor"], inv)
    medium = (wavelen >= high) & (wavelen <= low)
    return torch.where(medium, (1 - smooth) * inv / s["factor"] + smooth * inv, scaled)


def cos_sin_table(max_position, rotary_dim, device):
    """vLLM's layout [max_position, rotary_dim] fp32: cos then sin, angles in float64."""
    angles = torch.arange(max_position, dtype=torch.float64, device=device)[:, None] * rope_inv_freq(rotary_dim, device)[None, :]
    return torch.cat((angles.cos(), angles.sin()), dim=-1).float()


def torch_rope_cached(q, k, positions, cache):
    """vLLM's native NeoX rotation with a cos/sin cache: gather, rotate in fp32, one rounding."""
    r = cache.shape[1]
    cs = cache[positions.long()]
    cos, sin = cs[:, None, : r // 2], cs[:, None, r // 2:]

    def rotate(x):
        x1, x2 = x[..., : r // 2].float(), x[..., r // 2: r].float()
        out = torch.cat(((x1 * cos - x2 * sin).to(x.dtype), (x2 * cos + x1 * sin).to(x.dtype)), dim=-1)
        return torch.cat((out, x[..., r:]), dim=-1) if r < x.shape[-1] else out

    return rotate(q), rotate(k)


class Op:
    name = ""         # the row's op name (the C++ API's)
    trace = ""        # kernels/traces/<trace>.json
    kiln_api = ()     # the kiln package's names it calls (the op is skipped when one is missing)
    outputs = ()      # tensors the op writes, compared
    pure_outputs = ()  # of those, the ones it does not read (poisoned with NaN before a check)
    scalars = {}      # the trace reference's keyword arguments
    exact = False     # outputs compared bit for bit (a copy)
    tolerance = {}    # output -> (abs, rel) against float64 where the dtype's does not fit
    draws = False     # outputs are random draws: checked by check_draws, not compared
    timing_peers = {}  # torch backend -> why it is timed but not compared (a different computation)
    check_only = ()    # torch backends compared but not timed (a slow exact stand-in, not a peer)
    uncapturable = {}  # torch backend -> why it cannot be captured in a CUDA graph (timed back to back)
    not_run = {}       # backend -> why it was not run on this case (set by make: an optional peer that refused)

    def make(self, axes, dtype, gen):
        raise NotImplementedError

    def tolerance_for(self, name, want):
        """(abs, rel) of output `name` against float64 `want`; None: the dtype's."""
        return self.tolerance.get(name)

    def prepare(self, t):
        """After make: what the Kiln call needs once per case (a plan)."""

    def release(self):
        """At the end of a case: what prepare made."""

    def footprint(self, t):
        """The bytes one call touches, where far less than its tensors (None: all of them)."""
        return None

    def kiln(self, t):
        """One Kiln call on the case's tensors `t` through the package, on torch's current stream,
        every output passed (nothing allocated: the call may be captured in a CUDA graph)."""
        raise NotImplementedError

    def torch_backends(self):
        raise NotImplementedError

    def bytes(self, t):
        raise NotImplementedError


def nbytes(*tensors):
    return sum(x.numel() * x.element_size() for x in tensors)


class RmsNorm(Op):
    name, trace, kiln_api, outputs, scalars = "rms_norm", "rmsnorm", ("rms_norm",), ("out",), {"eps": EPS}
    pure_outputs = ("out",)

    def make(self, a, dtype, gen):
        return {"out": torch.empty(a["rows"], a["hidden"], device="cuda", dtype=dtype),
                "input": uniform((a["rows"], a["hidden"]), dtype, gen),
                "weight": uniform((a["hidden"],), dtype, gen)}

    def kiln(self, t):
        kiln.rms_norm(t["input"], t["weight"], EPS, out=t["out"])

    def torch_backends(self):
        return {"torch": lambda t: (torch_rms_norm(t["input"], t["weight"]),),
                "torch_F.rms_norm": lambda t: (F.rms_norm(t["input"], (t["input"].shape[-1],), t["weight"], EPS),),
                **FI.backends(USE_FLASHINFER, lambda: FI.rms_norm(EPS))}

    def bytes(self, t):
        return 2 * nbytes(t["input"]) + nbytes(t["weight"])


class FusedAddRmsNorm(Op):
    name, trace, kiln_api = "fused_add_rms_norm", "fused_add_rmsnorm", ("fused_add_rms_norm",)
    outputs, scalars = ("input", "residual"), {"eps": EPS}

    def make(self, a, dtype, gen):
        return {"input": uniform((a["rows"], a["hidden"]), dtype, gen),
                "residual": uniform((a["rows"], a["hidden"]), dtype, gen),
                "weight": uniform((a["hidden"],), dtype, gen)}

    def kiln(self, t):
        kiln.fused_add_rms_norm(t["input"], t["residual"], t["weight"], EPS)  # in place on both

    def torch_backends(self):
        def eager(t):
            r = (t["input"].float() + t["residual"].float()).to(t["input"].dtype)
            return torch_rms_norm(r, t["weight"]), r

        def functional(t):
            r = t["input"] + t["residual"]  # fp32 math, one rounding, as Kiln stores it
            return F.rms_norm(r, (r.shape[-1],), t["weight"], EPS), r

        return {"torch": eager, "torch_F.rms_norm": functional,
                **FI.backends(USE_FLASHINFER, lambda: FI.fused_add_rms_norm(EPS))}

    def bytes(self, t):
        return 4 * nbytes(t["input"]) + nbytes(t["weight"])


class ActAndMul(Op):
    outputs, pure_outputs, scalars = ("out",), ("out",), {}

    def __init__(self, name, act):
        self.name, self.trace, self.kiln_api, self.act = name, name, (name,), act

    def make(self, a, dtype, gen):
        return {"out": torch.empty(a["rows"], a["d"], device="cuda", dtype=dtype),
                "input": uniform((a["rows"], a["d2"]), dtype, gen)}

    def kiln(self, t):
        getattr(kiln, self.name)(t["input"], out=t["out"])

    def torch_backends(self):
        def eager(t):
            d = t["input"].shape[-1] // 2
            return (self.act(t["input"][..., :d]) * t["input"][..., d:],)

        return {"torch": eager, **FI.backends(USE_FLASHINFER, lambda: FI.act_and_mul(self.name))}

    def bytes(self, t):
        return nbytes(t["input"]) + nbytes(t["out"])


class ApplyRope(Op):
    name, trace, kiln_api, outputs = "apply_rope", "apply_rope", ("apply_rope", "Llama31RopeScaling"), ("q", "k")
    scalars = {"theta": ROPE_THETA, "llama31_factor": ROPE_LLAMA31["factor"],
               "llama31_low_freq_factor": ROPE_LLAMA31["low_freq_factor"],
               "llama31_high_freq_factor": ROPE_LLAMA31["high_freq_factor"],
               "llama31_original_max_position": ROPE_LLAMA31["original_max_position"]}

    def make(self, a, dtype, gen):
        t = {"q": uniform((a["tokens"], a["q_heads"], a["head_dim"]), dtype, gen),
             "k": uniform((a["tokens"], a["k_heads"], a["head_dim"]), dtype, gen),
             "positions": torch.randint(0, ROPE_MAX_POSITION, (a["tokens"],), device="cuda", generator=gen,
                                        dtype=torch.int64)}
        self.cache = cos_sin_table(ROPE_MAX_POSITION, a["head_dim"], "cuda")  # setup, not timed
        self.llama31 = kiln.Llama31RopeScaling(**ROPE_LLAMA31)
        return t

    def kiln(self, t):
        # rotary_dim 0: all of head_dim; NeoX pairs (not interleaved); in place on q and k.
        kiln.apply_rope(t["q"], t["k"], t["positions"], rotary_dim=0, interleaved=False, theta=ROPE_THETA,
                        llama31=self.llama31)

    def torch_backends(self):
        return {"torch_cos_sin_cache": lambda t: torch_rope_cached(t["q"], t["k"], t["positions"], self.cache),
                **FI.backends(USE_FLASHINFER, lambda: FI.apply_rope_llama31(ROPE_THETA, ROPE_LLAMA31))}

    def bytes(self, t):
        return 2 * nbytes(t["q"], t["k"]) + nbytes(t["positions"])


class ApplyRopeWithCosSinCache(Op):
    name, trace = "apply_rope_with_cos_sin_cache", "apply_rope_with_cos_sin_cache"
    kiln_api, outputs, scalars = ("apply_rope_with_cos_sin_cache",), ("q", "k"), {"interleaved": False}

    def make(self, a, dtype, gen):
        max_position = a.get("max_position", ROPE_MAX_POSITION)
        return {"q": uniform((a["tokens"], a["q_heads"], a["head_dim"]), dtype, gen),
                "k": uniform((a["tokens"], a["k_heads"], a["head_dim"]), dtype, gen),
                "positions": torch.randint(0, max_position, (a["tokens"],), device="cuda", generator=gen,
                                           dtype=torch.int64),
                "cos_sin_cache": cos_sin_table(max_position, a.get("rotary_dim", a["head_dim"]), "cuda")}

    def kiln(self, t):
        kiln.apply_rope_with_cos_sin_cache(t["q"], t["k"], t["positions"], t["cos_sin_cache"], interleaved=False)

    def torch_backends(self):
        return {"torch": lambda t: torch_rope_cached(t["q"], t["k"], t["positions"], t["cos_sin_cache"]),
                **FI.backends(USE_FLASHINFER, FI.apply_rope_with_cos_sin_cache)}

    def bytes(self, t):
        # q and k read and written; each token's cache row read once
        r = t["cos_sin_cache"].shape[1]
        return 2 * nbytes(t["q"], t["k"]) + nbytes(t["positions"]) + t["q"].shape[0] * r * 4



def int32(values):
    return torch.tensor(values, dtype=torch.int32, device="cuda")


DECODE_REGION = 256  # positions per +-1 region of V (as kiln-bench's batch_decode routine)
DENSE_ALIGN = 16  # padded dense length: SDPA's memory-efficient kernel pads a mask to this per call


def ragged_dense_kv(cache, rows, request, position, batch, padded_len):
    """A ragged batch's paged cache [num_pages, page_size, Hk, D] stored densely for SDPA:
    [B, Hk, padded_len, D], request b's positions first, zeros past its length (finite: a masked
    position still multiplies its V by a zero weight, and NaN * 0 is NaN). rows, request and
    position: the cache row, request and position of every stored position (int64 tensors)."""
    hk, d = cache.shape[2], cache.shape[3]
    dense = torch.zeros(batch, padded_len, hk, d, dtype=cache.dtype, device=cache.device)
    dense[request, position] = cache.reshape(-1, hk, d)[rows]
    return dense.transpose(1, 2).contiguous()


def sdpa_decode_masked(q, k, v, mask):
    """One query token per request against padded dense k, v [B, Hk, L, D] with a boolean mask
    [B, 1, 1, L] (False past each request's length); out [B, Hq, D]. GQA as a query length: the
    Hq / Hk query heads of a kv head are its queries (q viewed [B, Hk, Hq / Hk, D]), so no backend
    expands K and V, and the kernels that take a mask (memory-efficient, cuDNN) stay eligible."""
    b, hq, d = q.shape
    hk = k.shape[1]
    out = F.scaled_dot_product_attention(q.view(b, hk, hq // hk, d), k, v, attn_mask=mask)
    return out.reshape(b, hq, d)


class BatchDecode(Op):
    """batch_decode's run step; the plan is made once per case in prepare(). A case with
    ragged=1 draws each request's length in [1, kv_len] (bench/decode/paged_table.py)."""
    name, trace, kiln_api = "batch_decode", "batch_decode", ("BatchDecodePlan", "batch_decode")
    outputs, pure_outputs = ("out", "lse"), ("out", "lse")
    # out averages many values, far below 1: the dtype's abs tolerance would hide a lost region.
    # Kiln rounds the softmax weights to the dtype; these bound it (the GPU tests' figures).
    OUT_TOLERANCE = {torch.bfloat16: (2e-3, 1.6e-2), torch.float16: (5e-4, 3e-3)}

    def __init__(self):
        self.plan = None
        self.fi_peer = None

    def make(self, a, dtype, gen):
        self.axes, self.dtype = a, dtype
        self.tolerance = {"lse": (1e-3, 1e-5)}
        if dtype in self.OUT_TOLERANCE:
            self.tolerance["out"] = self.OUT_TOLERANCE[dtype]
        self.table = table = PAGED.PagedTable(a, seed=gen.initial_seed())
        b, hq, hk, d = a["batch"], a["num_qo_heads"], a["num_kv_heads"], a["head_dim"]
        lengths = torch.tensor(table.lengths, dtype=torch.int64, device="cuda")
        total = sum(table.lengths)
        rows = torch.tensor(table.rows(), dtype=torch.int64, device="cuda")
        # The request and position of every stored position, request by request as rows().
        request = torch.repeat_interleave(torch.arange(b, device="cuda"), lengths)
        position = torch.arange(total, device="cuda") - (torch.cumsum(lengths, 0) - lengths)[request]
        shape = (a["num_pages"], a["page_size"], hk, d)
        # Slots no request owns stay NaN: a kernel that reads one fails the check.
        k_cache = torch.full(shape, float("nan"), dtype=dtype, device="cuda")
        v_cache = torch.full(shape, float("nan"), dtype=dtype, device="cuda")
        k_cache.view(-1, hk, d)[rows] = uniform((total, hk, d), dtype, gen)
        # V: noise in [-0.5, 0.5) plus +-1 by (request, region of 256 positions, head, dim), so
        # every region moves the output by about 1 / regions (uniform batches: the same draws
        # as when every request was filled as one [B, L] block).
        regions = -(-max(table.lengths) // DECODE_REGION)
        signs = torch.randint(0, 2, (b, regions, hk, d), device="cuda", generator=gen).float() * 2 - 1
        v = uniform((total, hk, d), torch.float32, gen, -0.5, 0.5) + signs[request, position // DECODE_REGION]
        v_cache.view(-1, hk, d)[rows] = v.to(dtype)
        del v, signs
        t = {"out": torch.empty(b, hq, d, dtype=dtype, device="cuda"),
                "lse": torch.empty(b, hq, dtype=torch.float32, device="cuda"),
                "q": uniform((b, hq, d), dtype, gen),
                "k_cache": k_cache, "v_cache": v_cache,
                "kv_indptr": int32(table.indptr), "kv_indices": int32(table.indices),
                "kv_last_page_len": int32(table.last)}
        # The same K and V stored densely, as SDPA reads them (copied once, not timed): a
        # ragged batch padded to its longest request, with the mask of each request's positions
        # made here too (nothing in the timed call reads the host).
        if table.ragged:
            padded = -(-max(table.lengths) // DENSE_ALIGN) * DENSE_ALIGN
            t["k_dense"] = ragged_dense_kv(k_cache, rows, request, position, b, padded)
            t["v_dense"] = ragged_dense_kv(v_cache, rows, request, position, b, padded)
            t["kv_mask"] = (torch.arange(padded, device="cuda")[None, :] < lengths[:, None]).view(b, 1, 1, padded)
        else:
            t["k_dense"] = SDPA.dense_kv(k_cache, rows, b, table.kv_len)
            t["v_dense"] = SDPA.dense_kv(v_cache, rows, b, table.kv_len)
        self.fi_peer = FI.backends(USE_FLASHINFER, lambda: {"peer": FI.DecodePeer(torch, t, a, dtype)}).get("peer")
        return t

    def prepare(self, t):
        # The schedule from the host copies of the page table (batch = len(kv_last_page_len));
        # sm_scale 0: 1/sqrt(head_dim), no soft cap, no window, the current device. The plan
        # allocates its workspace (a torch uint8 tensor) when the schedule splits the KV.
        a, table = self.axes, self.table
        self.plan = kiln.BatchDecodePlan(table.indptr, table.last, a["num_qo_heads"], a["num_kv_heads"], a["head_dim"],
                                         a["page_size"], self.dtype, sm_scale=0.0, logits_soft_cap=0.0, window_left=-1,
                                         device=-1)

    def release(self):
        self.plan = None  # the package frees the plan (and its workspace) with the object
        self.fi_peer = None

    def kiln(self, t):
        kiln.batch_decode(self.plan, t["q"], t["k_cache"], t["v_cache"], t["kv_indptr"], t["kv_indices"],
                          t["kv_last_page_len"], out=t["out"], lse=t["lse"])

    def torch_backends(self):
        if self.table.ragged:
            torch_sdpa = {"torch_sdpa_padded_mask":
                          lambda t: (sdpa_decode_masked(t["q"], t["k_dense"], t["v_dense"], t["kv_mask"]),)}
        else:
            torch_sdpa = {"torch_sdpa_dense": lambda t: (SDPA.sdpa_decode(t["q"], t["k_dense"], t["v_dense"]),)}
        return {**torch_sdpa, **(self.fi_peer.backends() if self.fi_peer is not None else {})}

    def bytes(self, t):
        return PAGED.decode_bytes(self.axes, t["q"].element_size(), self.table)


class PrefillOp(Op):
    """What batch_prefill_ragged and batch_prefill_paged share: out and lse (lse against float64
    at (1e-3, 1e-5)), a plan made once per case in prepare(), and FlashInfer's wrapper for the
    case (made by make() through set_peer) among the peers."""
    outputs, pure_outputs = ("out", "lse"), ("out", "lse")
    tolerance = {"lse": (1e-3, 1e-5)}

    def __init__(self):
        self.plan = None
        self.fi_peer = None

    def set_peer(self, make_peer):
        """FlashInfer's planned wrapper when it imported and the run wants it, else none."""
        self.fi_peer = FI.backends(USE_FLASHINFER, lambda: {"peer": make_peer()}).get("peer")

    def peer_backends(self):
        return self.fi_peer.backends() if self.fi_peer is not None else {}

    def release(self):
        self.plan = None  # the package frees the plan (and its workspace) with the object
        self.fi_peer = None


class BatchPrefillRagged(PrefillOp):
    """batch_prefill_ragged's run step (every request q_len == kv_len as in the trace examples;
    mask 1 causal, 2 none); the plan is made once per case in prepare(). Peers: PyTorch SDPA
    with its flash and its cuDNN backend, each forced, on q as a [B, H, L, D] view and K/V with
    the kv heads expanded to the query heads once, untimed; FlashInfer's ragged prefill wrapper
    (FA3 on sm_90) on Kiln's own tensors, planned once per case."""
    name, trace, kiln_api = "batch_prefill_ragged", "batch_prefill_ragged", ("BatchPrefillPlan", "batch_prefill_ragged")

    def make(self, a, dtype, gen):
        self.axes, self.dtype = a, dtype
        self.causal = a["mask"] == 1
        self.scalars = {"mask": a["mask"]}
        b, length, hq, hk, d = a["batch"], a["q_len"], a["num_qo_heads"], a["num_kv_heads"], a["head_dim"]
        if a["kv_len"] != length:
            raise ValueError("compare_torch's batch_prefill_ragged takes q_len == kv_len (SDPA's causal mask "
                             "is aligned to the start)")
        q, k, v = (uniform((b * length, h, d), dtype, gen) for h in (hq, hk, hk))
        group = hq // hk
        t = {"out": torch.empty(b * length, hq, d, dtype=dtype, device="cuda"),
             "lse": torch.empty(b * length, hq, dtype=torch.float32, device="cuda"),
             "q": q, "k": k, "v": v,
             "qo_indptr": int32([i * length for i in range(b + 1)]),
             "kv_indptr": int32([i * length for i in range(b + 1)]),
             # SDPA's operands: [B, H, L, D] views of q and of K/V with every kv head repeated
             # for its group (made once per case, not timed).
             "k_rep": k.view(b, length, hk, d).repeat_interleave(group, dim=2),
             "v_rep": v.view(b, length, hk, d).repeat_interleave(group, dim=2)}
        self.set_peer(lambda: FI.PrefillRaggedPeer(torch, t, a, dtype, self.causal))
        return t

    def prepare(self, t):
        # The schedule from host copies of qo_indptr and kv_indptr (batch = len - 1), as for
        # decode: sm_scale 0, no soft cap, no window, the current device; workspace in the plan.
        a = self.axes
        qo = [i * a["q_len"] for i in range(a["batch"] + 1)]
        kv = [i * a["kv_len"] for i in range(a["batch"] + 1)]
        self.plan = kiln.BatchPrefillPlan.ragged(qo, kv, a["num_qo_heads"], a["num_kv_heads"], a["head_dim"],
                                                 self.dtype, causal=self.causal, sm_scale=0.0, logits_soft_cap=0.0,
                                                 window_left=-1, device=-1)

    def kiln(self, t):
        kiln.batch_prefill_ragged(self.plan, t["q"], t["k"], t["v"], t["qo_indptr"], t["kv_indptr"], out=t["out"],
                                  lse=t["lse"])

    def torch_backends(self):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def sdpa(backend):
            def run(t):
                a = self.axes
                b, length, hq, d = a["batch"], a["q_len"], a["num_qo_heads"], a["head_dim"]
                q = t["q"].view(b, length, hq, d).transpose(1, 2)
                k, v = t["k_rep"].transpose(1, 2), t["v_rep"].transpose(1, 2)
                with sdpa_kernel(backend):
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
                return (o.transpose(1, 2).reshape(b * length, hq, d),)
            return run
        return {"torch_sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION),
                "torch_sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION), **self.peer_backends()}

    def footprint(self, t):
        return nbytes(t["q"], t["k"], t["v"], t["out"], t["lse"])

    def bytes(self, t):
        return nbytes(t["q"], t["k"], t["v"], t["out"], t["lse"])

    def flops(self, t):
        a = self.axes
        pairs = a["batch"] * (a["q_len"] * (a["q_len"] + 1) / 2 if self.causal else a["q_len"] * a["kv_len"])
        return 4.0 * a["num_qo_heads"] * a["head_dim"] * pairs


class BatchPrefillPaged(PrefillOp):
    """batch_prefill_paged's run step on the paged cache of the decode benchmarks (PagedTable:
    every request kv_len positions in pages of a shuffled pool, the slots no request owns NaN, so
    a kernel that reads one fails the check) with q_len queries a request, causal aligned to the
    end (mask 1) or none (2): prefill from the serving cache, chunked prefill, speculative
    verification. The plan is made once per case in prepare(). Peer: FlashInfer's paged prefill
    wrapper on the same cache (FA3 on sm_90); SDPA has no paged form (its causal mask is aligned
    to the start), so no PyTorch backend."""
    name, trace, kiln_api = "batch_prefill_paged", "batch_prefill_paged", ("BatchPrefillPlan", "batch_prefill_paged")

    def make(self, a, dtype, gen):
        self.axes, self.dtype = a, dtype
        self.causal = a["mask"] == 1
        self.scalars = {"mask": a["mask"]}
        if a["total_q"] != a["batch"] * a["q_len"]:
            raise ValueError(f"total_q={a['total_q']} must be batch * q_len = {a['batch'] * a['q_len']}")
        self.table = table = PAGED.PagedTable(a, seed=gen.initial_seed())
        hq, hk, d = a["num_qo_heads"], a["num_kv_heads"], a["head_dim"]
        total = sum(table.lengths)
        rows = torch.tensor(table.rows(), dtype=torch.int64, device="cuda")
        shape = (a["num_pages"], a["page_size"], hk, d)
        k_cache = torch.full(shape, float("nan"), dtype=dtype, device="cuda")
        v_cache = torch.full(shape, float("nan"), dtype=dtype, device="cuda")
        k_cache.view(-1, hk, d)[rows] = uniform((total, hk, d), dtype, gen)
        v_cache.view(-1, hk, d)[rows] = uniform((total, hk, d), dtype, gen)
        self.qo = [i * a["q_len"] for i in range(a["batch"] + 1)]
        t = {"out": torch.empty(a["total_q"], hq, d, dtype=dtype, device="cuda"),
             "lse": torch.empty(a["total_q"], hq, dtype=torch.float32, device="cuda"),
             "q": uniform((a["total_q"], hq, d), dtype, gen), "k_cache": k_cache, "v_cache": v_cache,
             "qo_indptr": int32(self.qo), "kv_indptr": int32(table.indptr), "kv_indices": int32(table.indices),
             "kv_last_page_len": int32(table.last)}
        self.set_peer(lambda: FI.PrefillPagedPeer(torch, t, a, dtype, self.causal))
        return t

    def prepare(self, t):
        # The schedule from the host copies of the indptrs and last-page lengths, the plan's
        # defaults otherwise (as BatchPrefillRagged).
        a, table = self.axes, self.table
        self.plan = kiln.BatchPrefillPlan.paged(self.qo, table.indptr, table.last, a["num_qo_heads"],
                                                a["num_kv_heads"], a["head_dim"], a["page_size"], self.dtype,
                                                causal=self.causal, sm_scale=0.0, logits_soft_cap=0.0,
                                                window_left=-1, device=-1)

    def kiln(self, t):
        kiln.batch_prefill_paged(self.plan, t["q"], t["k_cache"], t["v_cache"], t["qo_indptr"], t["kv_indptr"],
                                 t["kv_indices"], t["kv_last_page_len"], out=t["out"], lse=t["lse"])

    def torch_backends(self):
        return self.peer_backends()

    def footprint(self, t):
        return self.bytes(t)  # the pool may hold pages no request owns

    def bytes(self, t):
        kv = 2 * sum(self.table.lengths) * self.axes["num_kv_heads"] * self.axes["head_dim"] * t["q"].element_size()
        return kv + nbytes(t["q"], t["out"], t["lse"], t["qo_indptr"], t["kv_indptr"], t["kv_indices"],
                           t["kv_last_page_len"])

    def flops(self, t):
        a = self.axes
        q, kv = a["q_len"], a["kv_len"]
        # Causal aligned to the end: query i sees kv - q + i + 1 positions.
        pairs = a["batch"] * (q * (kv - q) + q * (q + 1) / 2 if self.causal else q * kv)
        return 4.0 * a["num_qo_heads"] * a["head_dim"] * pairs


class AppendPagedKv(Op):
    name, trace, kiln_api = "append_paged_kv", "append_paged_kv", ("append_paged_kv",)
    outputs, exact = ("k_cache", "v_cache"), True

    def make(self, a, dtype, gen):
        self.axes = a
        table = PAGED.PagedTable(a, seed=gen.initial_seed())
        batch_indices, positions = PAGED.append_tokens(table, a["nnz"])
        nnz, hk, d = a["nnz"], a["num_kv_heads"], a["head_dim"]
        shape = (a["num_pages"], a["page_size"], hk, d)
        return {"k_cache": uniform(shape, dtype, gen), "v_cache": uniform(shape, dtype, gen),
                "k": uniform((nnz, hk, d), dtype, gen), "v": uniform((nnz, hk, d), dtype, gen),
                "batch_indices": int32(batch_indices), "positions": int32(positions),
                "kv_indptr": int32(table.indptr), "kv_indices": int32(table.indices),
                "kv_last_page_len": int32(table.last),
                # vLLM's slot mapping: each new token's cache row, made once per step for every layer.
                "slot_mapping": torch.tensor([table.cache_row(b, p) for b, p in zip(batch_indices, positions)],
                                             dtype=torch.int64, device="cuda")}

    def kiln(self, t):
        kiln.append_paged_kv(t["k_cache"], t["v_cache"], t["k"], t["v"], t["batch_indices"], t["positions"],
                             t["kv_indptr"], t["kv_indices"], t["kv_last_page_len"])

    def torch_backends(self):
        def index_put(t):
            # The slots from the page table in every call, then one index_put per cache.
            page_size, pos = t["k_cache"].shape[1], t["positions"].long()
            entry = t["kv_indptr"][t["batch_indices"].long()].long() + pos // page_size
            page = t["kv_indices"][entry].long()
            t["k_cache"][page, pos % page_size] = t["k"]
            t["v_cache"][page, pos % page_size] = t["v"]
            return t["k_cache"], t["v_cache"]

        def slot_mapping(t):
            # vLLM's reshape_and_cache in PyTorch: the precomputed slots, index_copy_ into the rows.
            hk, d = t["k"].shape[1], t["k"].shape[2]
            t["k_cache"].view(-1, hk, d).index_copy_(0, t["slot_mapping"], t["k"])
            t["v_cache"].view(-1, hk, d).index_copy_(0, t["slot_mapping"], t["v"])
            return t["k_cache"], t["v_cache"]

        return {"torch_index_put": index_put, "torch_index_copy_slots": slot_mapping,
                **FI.backends(USE_FLASHINFER, FI.append_paged_kv)}

    def bytes(self, t):
        return PAGED.append_bytes(self.axes, t["k"].element_size())

    def footprint(self, t):
        return self.bytes(t)  # 64 new tokens touch a sliver of a 2 GB cache


# The per-request parameters of every row (the trace definitions' defaults, torch_baseline's).
SAMPLING_PARAMS = {"top_k": (50, torch.int32), "top_p": (0.9, torch.float32), "min_p": (0.1, torch.float32)}
SAMPLING_SEED = 0x5EED


def clean_probs(probs):
    p = probs.double()
    return torch.where(p > 0, p, torch.zeros_like(p))  # negatives and NaN count as 0


def mass_above(p):
    """For each entry, the sum of its row's values strictly greater than it (float64)."""
    asc = p.sort(dim=-1).values
    suffix = asc.flip(-1).cumsum(-1).flip(-1)
    suffix = torch.cat([suffix, torch.zeros_like(suffix[:, :1])], dim=-1)
    return suffix.gather(-1, torch.searchsorted(asc, p, right=True))


def allowed_mask(rule, t):
    """[B, V] bool: the tokens `rule` may draw from t["probs"] with t's per-request parameters,
    in float64 (bench/sampling/allowed_set.py is the same definition in plain Python)."""
    p = clean_probs(t["probs"])
    vocab = p.shape[-1]
    largest = p.max(dim=-1, keepdim=True).values
    keep = p > 0
    if rule in ("top_k", "top_k_top_p"):
        k = t["top_k"].long().view(-1, 1)
        kth = p.sort(dim=-1, descending=True).values.gather(-1, k.clamp(1, vocab) - 1)
        keep &= (k <= 0) | (k >= vocab) | (p >= kth)
    if rule in ("top_p", "top_k_top_p"):
        top_p = t["top_p"].double().view(-1, 1)
        mass = torch.where(keep, p, torch.zeros_like(p)).sum(dim=-1, keepdim=True)
        inside = (top_p >= 1) | (mass_above(p) < top_p * mass)
        keep &= torch.where(top_p > 0, inside, p == largest)  # p <= 0 or NaN: the largest only
    if rule == "min_p":
        m = t["min_p"].double().nan_to_num(0.0).clamp(0, 1).view(-1, 1)
        keep &= p >= (m * largest).float().double()  # one rounding to fp32, as the op's
    return keep


def membership(samples, mask):
    """(ok, detail): every row's token inside its allowed set (0 for a row with none)."""
    s = samples.long().view(-1)
    vocab = mask.shape[-1]
    inside = (s >= 0) & (s < vocab) & mask.gather(-1, s.clamp(0, vocab - 1).view(-1, 1)).view(-1)
    inside = torch.where(mask.any(dim=-1), inside, s == 0)
    bad = (~inside).nonzero().view(-1)
    if bad.numel() == 0:
        sizes = mask.sum(dim=-1).double()
        return True, f"{s.numel()} draws inside; allowed sets of {int(sizes.min())}..{int(sizes.max())} tokens"
    r = int(bad[0])
    return False, f"{bad.numel()} of {s.numel()} draws outside the allowed sets; first row {r}: token {int(s[r])}"


class Sampler(Op):
    """The samplers and argmax: one token per row of probs [B, V] fp32."""
    outputs, pure_outputs = ("samples",), ()
    scalars = {"seed": SAMPLING_SEED, "offset": 0}

    def __init__(self, name, rule, params, torch_fn):
        self.name = self.trace = name
        self.kiln_api = (name,)
        self.rule, self.params, self.torch_fn = rule, params, torch_fn
        self.draws = rule is not None

    def make(self, a, dtype, gen):
        # As torch_baseline.py: softmax(3 z), z standard normal; the mass on a few thousand tokens.
        logits = torch.randn(a["batch"], a["vocab"], device="cuda", generator=gen, dtype=torch.float64) * 3
        t = {"samples": torch.full((a["batch"],), -1, dtype=torch.int32, device="cuda"),  # -1: never written
             "probs": torch.softmax(logits, dim=-1).float()}
        for name in self.params:
            value, param_dtype = SAMPLING_PARAMS[name]
            t[name] = torch.full((a["batch"],), value, dtype=param_dtype, device="cuda")
        return t

    def kiln(self, t):
        # The per-request parameters as tensors [B] (the scalars the C ABI takes beside them are
        # then unused); seed and offset fixed, so a second call draws the same tokens.
        probs, samples, seed = t["probs"], t["samples"], SAMPLING_SEED
        if self.name == "top_k_sampling":
            kiln.top_k_sampling(probs, t["top_k"], seed=seed, offset=0, samples=samples)
        elif self.name == "top_p_sampling":
            kiln.top_p_sampling(probs, t["top_p"], seed=seed, offset=0, samples=samples)
        elif self.name == "top_k_top_p_sampling":
            kiln.top_k_top_p_sampling(probs, t["top_k"], t["top_p"], seed=seed, offset=0, samples=samples)
        elif self.name == "min_p_sampling":
            kiln.min_p_sampling(probs, t["min_p"], seed=seed, offset=0, samples=samples)
        else:
            kiln.argmax(probs, samples=samples)

    def torch_backends(self):
        return {"torch": lambda t: (self.torch_fn(t["probs"]).view(-1),),
                **FI.backends(USE_FLASHINFER, lambda: FI.sampler(self.name, self.params, SAMPLING_SEED))}

    def bytes(self, t):
        return nbytes(t["probs"], t["samples"], *(t[name] for name in self.params))

    def check_draws(self, base, fresh, kiln_out, trace):
        """Kiln's draws inside the float64 allowed sets and reproducible; the vectorized sets equal
        the plain-Python definition on row 0; the trace reference's draws inside too; PyTorch's
        backends' draws reported (their filters are fp32)."""
        mask = allowed_mask(self.rule, base)
        checks = {}
        good, detail = membership(kiln_out["samples"], mask)
        checks["kiln draws inside the allowed sets"] = {"ok": good, "detail": detail}

        t = fresh()
        self.kiln(t)
        torch.cuda.synchronize()
        same = torch.equal(t["samples"], kiln_out["samples"])
        checks["kiln reproduces its draws with the same seed"] = {
            "ok": same, "detail": "" if same else f"{int((t['samples'] != kiln_out['samples']).sum())} rows differ"}

        params = {name: base[name][0].item() for name in self.params}
        want = ALLOWED.allowed(self.rule, base["probs"][0].tolist(), **params)
        got = mask[0].nonzero().view(-1).tolist()
        checks["row 0: allowed set equals bench/sampling/allowed_set.py's"] = {
            "ok": got == want, "detail": f"{len(got)} tokens" if got == want else
            f"vectorized {len(got)} tokens, plain Python {len(want)} (first differing: "
            f"{next((a for a, b in zip(got, want) if a != b), None)})"}

        if trace is not None:
            try:
                good, detail = membership(call_trace_reference(self, trace, base)["samples"], mask)
                checks["trace reference draws inside the allowed sets"] = {"ok": good, "detail": detail}
            except Exception as e:  # noqa: BLE001 - a reference that cannot run is a failure, reported
                checks["trace reference"] = {"ok": False, "detail": f"{type(e).__name__}: {e}"}
        for backend, fn in self.torch_backends().items():
            good, detail = membership(fn(fresh())[0], mask)
            checks[f"{backend} draws inside the allowed sets (reported only)"] = {
                "ok": True, "detail": detail + ("" if good else " (PyTorch's fp32 filter; not a failure)")}
        return checks


class Gemm(Op):
    """d = a . b^T, the plain product (bias and c are the GPU tests'): cuBLAS through
    torch.matmul and F.linear (the same cuBLAS/cuBLASLt call for this layout), fp32 accumulation."""
    name, trace, kiln_api, outputs, scalars = "gemm", "gemm", ("gemm",), ("d",), {"beta": 1.0}
    pure_outputs = ("d",)

    def make(self, a, dtype, gen):
        return {"d": torch.empty(a["m"], a["n"], device="cuda", dtype=dtype),
                "a": uniform((a["m"], a["k"]), dtype, gen, -1.0, 1.0),
                "b": uniform((a["n"], a["k"]), dtype, gen, -1.0, 1.0)}

    def kiln(self, t):
        # No bias, no c (beta 1 as the C call always passed it: with no c it reads nothing).
        kiln.gemm(t["a"], t["b"], bias=None, c=None, beta=1.0, out=t["d"])

    def torch_backends(self):
        return {"torch.matmul (cuBLAS)": lambda t: (torch.matmul(t["a"], t["b"].t()),),
                "F.linear (cuBLAS)": lambda t: (F.linear(t["a"], t["b"]),)}

    def bytes(self, t):
        return nbytes(t["a"], t["b"], t["d"])

    def flops(self, t):
        return 2.0 * t["a"].shape[0] * t["b"].shape[0] * t["a"].shape[1]


class Fp8Gemm(Op):
    """Block-scaled fp8 (e4m3 a and b, fp32 scales per 1x128 of a and 128x128 of b, bf16 d).
    Compared against the dequantized product in fp32 through F.linear; timed against
    torch._scaled_mm (cuBLASLt's fp8 GEMM) with per-tensor scales, the nearest library peer: a
    different scaling, so it is timed and not compared."""
    name, trace, kiln_api, outputs = "fp8_gemm", "fp8_gemm", ("fp8_gemm",), ("d",)
    pure_outputs = ("d",)
    timing_peers = {"torch._scaled_mm (per-tensor, cuBLASLt)": "per-tensor scales, not the op's block scales"}
    check_only = ("dequantized F.linear (fp32)",)

    def make(self, a, dtype, gen):
        m, n, k = a["m"], a["n"], a["k"]
        kb, nb = (k + 127) // 128, (n + 127) // 128
        return {"d": torch.empty(m, n, device="cuda", dtype=torch.bfloat16),
                "a": uniform((m, k), torch.float32, gen, -1.0, 1.0).to(dtype),
                "b": uniform((n, k), torch.float32, gen, -1.0, 1.0).to(dtype),
                "a_scales": uniform((m, kb), torch.float32, gen, 0.25, 4.0),
                "b_scales": uniform((nb, kb), torch.float32, gen, 0.25, 4.0)}

    def tolerance_for(self, name, want):
        # The promise is a bf16 GEMM's error on the same data, which is d's rounding (rel 2^-8,
        # 1.6e-2 as every bf16 output) where |d| is large; near zero the tensor cores' in-block
        # sums (about 14 bits of the block's terms) dominate, an absolute error on the scale of
        # d as a whole: 2^-9 of RMS(d) (measured: at most 2^-11, tests/client/ops/gpu_fp8_gemm_test.cpp).
        rms = want.double().pow(2).mean().sqrt().item()
        return (rms / 512, 1.6e-2)

    def kiln(self, t):
        kiln.fp8_gemm(t["a"], t["b"], t["a_scales"], t["b_scales"], out=t["d"])  # d bf16, given

    @staticmethod
    def dequantized(t):
        k, n = t["a"].shape[1], t["b"].shape[0]
        sa = t["a_scales"].repeat_interleave(128, dim=1)[:, :k]
        sb = t["b_scales"].repeat_interleave(128, dim=0)[:n].repeat_interleave(128, dim=1)[:, :k]
        return t["a"].float() * sa, t["b"].float() * sb

    def torch_backends(self):
        one = torch.ones((), device="cuda", dtype=torch.float32)
        return {"dequantized F.linear (fp32)": lambda t: (F.linear(*self.dequantized(t)).to(torch.bfloat16),),
                "torch._scaled_mm (per-tensor, cuBLASLt)": lambda t: (
                    torch._scaled_mm(t["a"], t["b"].t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16),)}

    def bytes(self, t):
        return nbytes(t["a"], t["b"], t["d"], t["a_scales"], t["b_scales"])

    def flops(self, t):
        return 2.0 * t["a"].shape[0] * t["b"].shape[0] * t["a"].shape[1]


def group_counts(e, rows, seed):
    """Rows per group for `rows` routed rows over `e` groups, uneven (each row to a uniformly
    drawn group, from `seed`), with group 1 empty and group 2 of one row where e >= 3 (as
    kiln-bench's grouped routines)."""
    rng = random.Random(seed)
    counts = [0] * e
    for _ in range(rows):
        counts[rng.randrange(e)] += 1
    if e >= 3:
        counts[0] += counts[1] + max(counts[2] - 1, 0)
        counts[1], counts[2] = 0, min(counts[2], 1)
    return counts


class GroupedGemm(Op):
    """grouped_gemm (contiguous rows, m_indptr): E products sharing N and K. Peer: one cuBLAS
    matmul per group (torch.matmul on each group's rows; the bounds are known on the host here,
    as they would be to a PyTorch MoE layer that loops over experts)."""
    name, trace, kiln_api, outputs = "grouped_gemm", "grouped_gemm", ("grouped_gemm",), ("d",)
    pure_outputs = ("d",)

    def make(self, a, dtype, gen):
        counts = group_counts(a["e"], a["t"], gen.initial_seed())
        self.bounds = [0]
        for c in counts:
            self.bounds.append(self.bounds[-1] + c)
        return {"d": torch.empty(a["t"], a["n"], device="cuda", dtype=dtype),
                "a": uniform((a["t"], a["k"]), dtype, gen, -1.0, 1.0),
                "b": uniform((a["e"], a["n"], a["k"]), dtype, gen, -1.0, 1.0),
                "m_indptr": int32(self.bounds)}

    def kiln(self, t):
        kiln.grouped_gemm(t["a"], t["b"], t["m_indptr"], out=t["d"])

    def per_group(self, t):
        d = torch.zeros_like(t["d"])  # rows of no group: none here (the groups cover all t rows)
        for g in range(t["b"].shape[0]):
            lo, hi = self.bounds[g], self.bounds[g + 1]
            if hi > lo:
                torch.matmul(t["a"][lo:hi], t["b"][g].t(), out=d[lo:hi])
        return (d,)

    def torch_backends(self):
        return {"torch.matmul per group (cuBLAS)": self.per_group}

    def bytes(self, t):
        used = sum(1 for g in range(t["b"].shape[0]) if self.bounds[g + 1] > self.bounds[g])
        return nbytes(t["a"], t["d"]) + used * t["b"][0].numel() * t["b"].element_size()

    def flops(self, t):
        return 2.0 * t["a"].shape[0] * t["b"].shape[1] * t["a"].shape[1]


class GroupedGemmMasked(Op):
    """grouped_gemm_masked ([E, M_max] rows, masked_m on the device). Peer: torch.bmm over every
    group's whole M_max slab (cuBLAS batched; what a CUDA-graph decode step can replay without
    the counts), timed and not compared: it writes the rows past each count too."""
    name, trace, kiln_api, outputs = "grouped_gemm_masked", "grouped_gemm_masked", ("grouped_gemm_masked",), ("d",)
    timing_peers = {"torch.bmm over M_max (cuBLAS)": "computes every row of each slab, not only the first masked_m"}

    def make(self, a, dtype, gen):
        rng = random.Random(gen.initial_seed())
        counts = [rng.randint(0, a["m_max"]) for _ in range(a["e"])]
        counts[0] = 0
        if a["e"] >= 2:
            counts[-1] = a["m_max"]
        self.valid = sum(counts)
        return {"d": uniform((a["e"], a["m_max"], a["n"]), dtype, gen, -1.0, 1.0),  # rows past a count stay
                "a": uniform((a["e"], a["m_max"], a["k"]), dtype, gen, -1.0, 1.0),
                "b": uniform((a["e"], a["n"], a["k"]), dtype, gen, -1.0, 1.0),
                "masked_m": int32(counts)}

    def kiln(self, t):
        kiln.grouped_gemm_masked(t["a"], t["b"], t["masked_m"], out=t["d"])  # rows past masked_m[e] untouched

    def torch_backends(self):
        return {"torch.bmm over M_max (cuBLAS)": lambda t: (torch.bmm(t["a"], t["b"].transpose(1, 2)),)}

    def bytes(self, t):
        k, n = t["a"].shape[2], t["b"].shape[1]
        return self.valid * (k + n) * t["a"].element_size() + nbytes(t["b"])

    def flops(self, t):
        return 2.0 * self.valid * t["b"].shape[1] * t["a"].shape[2]


def torch_moe_sorted(x, w13, w2, ids, weights):
    """A MoE layer in eager PyTorch, sort-based: the (token, choice) slots sorted by expert
    (argsort of the flattened ids, stable), x's rows gathered in that order, one F.linear pair per
    expert on its contiguous slice of the sorted rows, the outputs weighted and scatter-added back
    per token (index_add_ in fp32, one rounding). The slices' bounds are read on the host once per
    call (one sync: it cannot be captured in a CUDA graph). Ids outside [0, E) are dropped."""
    tokens, top_k = ids.shape
    experts, inter = w13.shape[0], w13.shape[1] // 2
    flat = ids.reshape(-1).long()
    key = torch.where((flat >= 0) & (flat < experts), flat, experts)  # dropped slots sort last
    order = torch.argsort(key, stable=True)
    bounds = [0] + torch.cumsum(torch.bincount(key, minlength=experts + 1)[:experts], 0).tolist()
    rows = bounds[-1]
    slots = order[:rows]
    tok = slots // top_k
    xs = x.index_select(0, tok)
    ys = torch.empty((rows, x.shape[1]), dtype=x.dtype, device=x.device)
    for e in range(experts):
        lo, hi = bounds[e], bounds[e + 1]
        if hi > lo:
            h = F.linear(xs[lo:hi], w13[e])
            ys[lo:hi] = F.linear(F.silu(h[:, :inter]) * h[:, inter:], w2[e])
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    out.index_add_(0, tok, ys.float() * weights.reshape(-1)[slots][:, None])
    return out.to(x.dtype)


class FusedMoe(Op):
    """fused_moe: a whole expert layer on routed tokens (x [T, H], w13 [E, 2I, H], w2 [E, H, I]).
    The routing is made once per case by kiln.moe_route from random router logits (Mixtral and
    Qwen3: softmax, renormalized; DeepSeek-V3, E 256: sigmoid with a correction bias, 8 groups,
    4 kept, scale 2.5), not timed: every backend gets the same topk_ids and topk_weights. Weights
    uniform with variance 1 / fan_in, so every product stays near 1 in size. Peers:
      - torch per-expert loop: for each expert with tokens, index_select of its rows, F.linear
        gate and up, silu(gate) * up, F.linear down, index_add_ with the weights (fp32 sum, one
        rounding). Which experts have tokens, and their rows, are found once per case on the host
        (untimed, as grouped_gemm's peer knows its bounds): no host sync per call, so it captures
        in a CUDA graph; a layer that finds them per call pays a sync on top.
      - torch sorted: torch_moe_sorted (argsort, gather, per-expert F.linear on contiguous slices,
        scatter-add), as eager code runs it: one host read of the bounds per call, so it is timed
        back to back (the row's mechanism says so).
      - FlashInfer's cutlass_fused_moe where it runs the case (bench/flashinfer_peer.py,
        FusedMoePeer; else "not run: <why>" in the case's checks and on stdout).
    bytes: x, out, the routing and the weights of the experts some token chose (what a decode
    step must read: % of copy is the share of the copy bandwidth on those bytes); TFLOP/s from
    6 * rows * H * I (rows: the valid (token, choice) pairs)."""
    name, trace = "fused_moe", "fused_moe"
    kiln_api = ("fused_moe", "fused_moe_workspace_bytes", "moe_route")
    outputs, pure_outputs = ("out",), ("out",)
    uncapturable = {"torch sorted (argsort + per-expert F.linear)": "reads the experts' bounds on the host each call"}

    def make(self, a, dtype, gen):
        tokens, top_k, experts, hidden, inter = a["tokens"], a["top_k"], a["experts"], a["hidden"], a["intermediate"]
        bound13, bound2 = math.sqrt(3.0 / hidden), math.sqrt(3.0 / inter)
        t = {"out": torch.empty(tokens, hidden, device="cuda", dtype=dtype),
             "x": uniform((tokens, hidden), dtype, gen),
             "w13": self.expert_weights((experts, 2 * inter, hidden), dtype, gen, bound13),
             "w2": self.expert_weights((experts, hidden, inter), dtype, gen, bound2),
             "workspace": torch.empty(kiln.fused_moe_workspace_bytes(tokens, top_k, experts, hidden, inter),
                                      dtype=torch.uint8, device="cuda")}
        logits = torch.randn((tokens, experts), device="cuda", generator=gen)
        routing = {}
        if experts == 256:  # DeepSeek-V3's router
            bias = (torch.rand((experts,), device="cuda", generator=gen) - 0.5) * 0.2
            routing = dict(correction_bias=bias, scoring="sigmoid", n_group=8, topk_group=4,
                           routed_scaling_factor=2.5)
        t["topk_ids"], t["topk_weights"] = kiln.moe_route(logits, top_k, **routing)
        # The per-expert loop's rows: (expert, its tokens, their choice index), found once here.
        ids = t["topk_ids"].long()
        self.expert_rows = []
        for e in torch.unique(ids[(ids >= 0) & (ids < experts)]).tolist():
            tok, j = torch.nonzero(ids == e, as_tuple=True)
            self.expert_rows.append((e, tok, j))
        self.used_experts = [e for e, _, _ in self.expert_rows]
        self.valid_rows = sum(int(tok.numel()) for _, tok, _ in self.expert_rows)
        self.fi_peer, self.not_run = None, {}
        if USE_FLASHINFER and FI.flashinfer is not None:
            self.fi_peer, why = FI.FusedMoePeer.make(torch, t)
            if why is not None:
                self.not_run = {"flashinfer_cutlass_fused_moe": why}
        return t

    @staticmethod
    def expert_weights(shape, dtype, gen, bound):
        """uniform(-bound, bound) one expert at a time (DeepSeek-V3's w13 is 15 GB in bf16: its
        fp32 draw at once would need four times that)."""
        w = torch.empty(shape, dtype=dtype, device="cuda")
        for e in range(shape[0]):
            w[e] = uniform(shape[1:], dtype, gen, -bound, bound)
        return w

    def release(self):
        self.expert_rows, self.fi_peer = [], None

    def kiln(self, t):
        kiln.fused_moe(t["x"], t["w13"], t["w2"], t["topk_ids"], t["topk_weights"], out=t["out"],
                       workspace=t["workspace"])

    def per_expert_loop(self, t):
        x, w13, w2, weights = t["x"], t["w13"], t["w2"], t["topk_weights"]
        inter = w13.shape[1] // 2
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        for e, tok, j in self.expert_rows:
            rows = x.index_select(0, tok)
            act = F.silu(F.linear(rows, w13[e, :inter])) * F.linear(rows, w13[e, inter:])
            out.index_add_(0, tok, F.linear(act, w2[e]).float() * weights[tok, j][:, None])
        return (out.to(x.dtype),)

    def torch_backends(self):
        return {"torch per-expert loop": self.per_expert_loop,
                "torch sorted (argsort + per-expert F.linear)": lambda t: (
                    torch_moe_sorted(t["x"], t["w13"], t["w2"], t["topk_ids"], t["topk_weights"]),),
                **(self.fi_peer.backends() if self.fi_peer is not None else {})}

    def bytes(self, t):
        per_expert = (t["w13"][0].numel() + t["w2"][0].numel()) * t["w13"].element_size()
        return nbytes(t["x"], t["out"], t["topk_ids"], t["topk_weights"]) + len(self.used_experts) * per_expert

    def footprint(self, t):
        return self.bytes(t) + nbytes(t["workspace"])  # the weights of unused experts are never read

    def flops(self, t):
        return 6.0 * self.valid_rows * t["x"].shape[1] * (t["w13"].shape[1] // 2)


OPS = [RmsNorm(), FusedAddRmsNorm(),
       ActAndMul("silu_and_mul", F.silu), ActAndMul("gelu_and_mul", F.gelu),
       ActAndMul("gelu_tanh_and_mul", lambda x: F.gelu(x, approximate="tanh")),
       ApplyRope(), ApplyRopeWithCosSinCache(),
       AppendPagedKv(), BatchDecode(), BatchPrefillRagged(), BatchPrefillPaged(),
       Sampler("top_k_sampling", "top_k", ("top_k",), lambda x: SAMPLERS.top_k(x, 50)),
       Sampler("top_p_sampling", "top_p", ("top_p",), lambda x: SAMPLERS.top_p(x, 0.9)),
       Sampler("top_k_top_p_sampling", "top_k_top_p", ("top_k", "top_p"), lambda x: SAMPLERS.top_k_top_p(x, 50, 0.9)),
       Sampler("min_p_sampling", "min_p", ("min_p",), lambda x: SAMPLERS.min_p(x, 0.1)),
       Sampler("argmax", None, (), lambda x: torch.argmax(x, -1)),
       Gemm(), Fp8Gemm(), GroupedGemm(), GroupedGemmMasked(), FusedMoe()]

# ---- checks -------------------------------------------------------------------------------------


def agree(got, want, dtype_name, tolerance=None):
    """(ok, max abs err, first mismatch) of got against want within twice the dtype's tolerance
    (or twice `tolerance`, (abs, rel) against float64); integers (indices) exactly."""
    if not got.is_floating_point():
        abs_tol = rel_tol = 0.0
    elif tolerance is not None:
        abs_tol, rel_tol = 2 * tolerance[0], 2 * tolerance[1]
    else:
        abs_tol = rel_tol = 2 * TOLERANCE.get(dtype_name, 0.0)
    g, w = got.double(), want.double()
    err = (g - w).abs()
    bad = ~torch.isfinite(g) | ~torch.isfinite(w) | (err > abs_tol + rel_tol * w.abs())
    finite = err[torch.isfinite(err)]
    max_err = finite.max().item() if finite.numel() else None
    if not bool(bad.any()):
        return True, max_err, ""
    i = int(bad.flatten().nonzero()[0])
    return False, max_err, (f"{int(bad.sum())} of {bad.numel()} elements differ; first [{i}] got "
                            f"{g.flatten()[i].item():.6g}, want {w.flatten()[i].item():.6g}")


def identical(got, want):
    """(ok, None, first mismatch): bit for bit, for a copy."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return False, None, f"got {tuple(got.shape)} {got.dtype}, want {tuple(want.shape)} {want.dtype}"
    if torch.equal(got, want):
        return True, 0.0, ""
    differ = (got != want).flatten()
    i = int(differ.nonzero()[0])
    return False, None, (f"{int(differ.sum())} of {differ.numel()} elements differ; first [{i}] got "
                         f"{got.flatten()[i].item():.6g}, want {want.flatten()[i].item():.6g}")


def is_peer(backend):
    """An optional peer library's backend (FlashInfer's), not a PyTorch reference."""
    return backend.startswith("flashinfer")


def compare(op, name, got, want, dtype_name):
    if op.exact:
        return identical(got, want)
    return agree(got, want, dtype_name, op.tolerance_for(name, want))


def load_trace(traces_dir, name):
    path = os.path.join(traces_dir, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def trace_reference(trace):
    """The trace definition's PyTorch reference function, executed from its text."""
    text = trace["reference"]["torch"]
    namespace = {}
    exec(compile(text, f"<{trace['name']}.json reference.torch>", "exec"), namespace)  # noqa: S102
    names = re.findall(r"^def (\w+)\(", text, flags=re.M)
    name = trace["name"] if trace["name"] in names else names[0]
    return namespace[name]


def call_trace_reference(op, trace, t):
    """Inputs positionally in the definition's order, scalars as keyword arguments; the outputs
    come back in the order of its "outputs". Where the function names every input as a
    parameter, the inputs go by name instead, so a reference that puts an optional per-request
    tensor after a scalar parameter still gets each tensor in its place. An optional input the
    case does not make (gemm's bias and c) goes as None."""
    fn = trace_reference(trace)
    accepted = inspect.signature(fn).parameters
    args = [t[name].clone() if name in t else None for name in trace["inputs"]]
    kwargs = {k: v for k, v in op.scalars.items() if k in accepted}
    if all(name in accepted for name in trace["inputs"]):
        kwargs.update(zip(trace["inputs"], args))
        args = []
    result = fn(*args, **kwargs)
    if not isinstance(result, (tuple, list)):
        result = (result,)
    return dict(zip(trace["outputs"], result))


# ---- timing -------------------------------------------------------------------------------------


def time_calls(fn, calls, reps, not_capturable=None):
    """Per-call microseconds: `calls` calls fn(i) captured in a CUDA graph, replayed `reps` times
    between CUDA events; back to back without a graph when capture fails, or without trying when
    `not_capturable` says why it cannot be captured (a host sync in every call)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(min(calls, 3)):
            fn(i)  # warm: kernels fetched and loaded outside the capture
    torch.cuda.synchronize()
    mechanism = "cuda_events+cuda_graph"
    graph = torch.cuda.CUDAGraph()
    try:
        if not_capturable is not None:
            raise RuntimeError(not_capturable)
        with torch.cuda.graph(graph, stream=stream):
            for i in range(calls):
                fn(i)
        replay = graph.replay
    except Exception as e:  # noqa: BLE001 - reported in the row
        torch.cuda.synchronize()
        mechanism = (f"cuda_events back-to-back (not captured: {not_capturable})" if not_capturable is not None else
                     f"cuda_events back-to-back (graph capture failed: {type(e).__name__}: {e})")

        def replay():
            with torch.cuda.stream(stream):
                for i in range(calls):
                    fn(i)
    torch.cuda.synchronize()
    for _ in range(2):
        replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        with torch.cuda.stream(stream):
            replay()
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / calls)
    del graph
    return times, mechanism


def copy_bandwidth(reps):
    """Device-to-device copy of 1 GiB (read + write), timed as the ops are: the faster of
    Tensor.copy_ (a cudaMemcpy, ~2.8 TB/s on an H200) and an elementwise kernel that reads and
    writes the same bytes (~4.2 TB/s), so "% of copy" never flatters the ops."""
    n = (1 << 30) // 4
    src = torch.empty(n, dtype=torch.float32, device="cuda").fill_(1.0)
    dst = torch.empty_like(src)
    best = fastest_median((lambda i: dst.copy_(src), lambda i: torch.mul(src, 1.0, out=dst)), reps)
    return 2 * src.numel() * src.element_size() / (best * 1e3), best


def fastest_median(fns, reps):
    """The least median µs per call of the calls fns, each timed as the ops are."""
    return min(statistics.median(time_calls(fn, 4, reps)[0]) for fn in fns)


def read_bandwidth(reps):
    """The read-only ceiling of the run (issue 17): kernels that only read 1 GiB (fp32) and write
    one value, timed as the ops are: the faster of torch.sum and torch.amax. Read-mostly ops
    (decode, speculative verification, the samplers) are bounded by this, not by copy; rows
    give pct_of_read beside pct_of_copy (kiln-bench's read_gbps is its own kernel's). Torch's
    reductions are a floor of the true ceiling, so pct_of_read never flatters the ops either."""
    n = (1 << 30) // 4
    src = torch.empty(n, dtype=torch.float32, device="cuda").uniform_()
    out = torch.empty((), dtype=torch.float32, device="cuda")
    best = fastest_median((lambda i: torch.sum(src, dim=0, out=out), lambda i: torch.amax(src, dim=0, out=out)), reps)
    return src.numel() * src.element_size() / (best * 1e3), best


# ---- main ---------------------------------------------------------------------------------------


def run_case(op, trace, label, axes, dtype_name, args, l2_bytes, ceilings, failures):
    dtype = TORCH_DTYPES[dtype_name]
    seed = args.seed + sum(ord(c) for c in f"{op.name}{label}{dtype_name}")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    base = op.make(axes, dtype, gen)
    op.prepare(base)
    try:
        return measure_case(op, trace, label, axes, dtype_name, base, args, l2_bytes, ceilings, failures)
    finally:
        op.release()


def measure_case(op, trace, label, axes, dtype_name, base, args, l2_bytes, ceilings, failures):
    copy_gbps, read_gbps = ceilings
    shape = ",".join(f"{k}={v}" for k, v in axes.items())
    common = {"op": op.name, "case": label, "dtype": dtype_name, "shape": shape,
              "gpu": torch.cuda.get_device_name(), "arch": "sm_%d%d" % torch.cuda.get_device_capability()}

    # 1. Correctness: every backend on clones of the same inputs, outputs poisoned first.
    def fresh():
        t = {k: v.clone() for k, v in base.items()}
        for name in op.pure_outputs:
            if t[name].is_floating_point():
                t[name].fill_(float("nan"))
        return t

    t = fresh()
    op.kiln(t)
    torch.cuda.synchronize()
    kiln_out = {name: t[name].clone() for name in op.outputs}
    del t
    checks, ok = {}, True
    if op.draws:
        checks = op.check_draws(base, fresh, kiln_out, trace)
        ok = all(v["ok"] for v in checks.values())
    else:
        peer_mismatches = []  # keys of the checks where an optional peer (FlashInfer) disagrees with Kiln
        for backend, fn in op.torch_backends().items():
            if backend in op.timing_peers:
                checks[f"{backend}: timed, not compared"] = {"ok": True, "detail": op.timing_peers[backend]}
                continue
            got = fn(fresh())
            torch.cuda.synchronize()
            for name, value in zip(op.outputs, got):
                good, err, first = compare(op, name, kiln_out[name], value, dtype_name)
                key = f"kiln vs {backend}: {name}"
                checks[key] = {"ok": good, "max_abs_err": err, "detail": first}
                if not good and is_peer(backend):
                    peer_mismatches.append(key)
                else:
                    ok = ok and good
        kiln_matches_reference = False
        if trace is not None:
            try:
                ref = call_trace_reference(op, trace, base)
                kiln_matches_reference = ok
                for name, value in ref.items():
                    if name in kiln_out:
                        good, err, first = compare(op, name, kiln_out[name], value, dtype_name)
                        checks[f"kiln vs trace reference: {name}"] = {"ok": good, "max_abs_err": err, "detail": first}
                        ok = ok and good
                        kiln_matches_reference = kiln_matches_reference and good
            except Exception as e:  # noqa: BLE001 - a reference that cannot run is a failure, reported
                checks["trace reference"] = {"ok": False, "detail": f"{type(e).__name__}: {e}"}
                ok = False
        # A peer that disagrees while Kiln agrees with the trace reference and every PyTorch
        # backend is the peer's error: reported (its rows say so) and still timed. Otherwise
        # nobody can tell which is wrong, and the case fails.
        for key in peer_mismatches:
            if kiln_matches_reference:
                checks[key] = dict(checks[key], ok=True, peer_disagrees=True,
                                   detail="the peer disagrees; Kiln agrees with the trace reference and PyTorch "
                                          "(reported, not a Kiln failure): " + checks[key]["detail"])
                print(f"# {op.name} {dtype_name} {label}: {key}: {checks[key]['detail']}", flush=True)
            else:
                ok = False
    for backend, why in op.not_run.items():
        checks[f"{backend}: not run"] = {"ok": True, "detail": f"not run: {why}"}
        print(f"# {op.name} {dtype_name} {label}: {backend} not run: {why}", flush=True)
    if not ok:
        bad = "; ".join(f"{k}: {v['detail']}" for k, v in checks.items() if not v["ok"])
        print(f"REFCHECK FAILED {op.name} {dtype_name} {shape} ({label}): {bad}", file=sys.stderr, flush=True)
        failures.append(f"{op.name} {dtype_name} {shape}")
        return [dict(common, backend="kiln", refcheck="FAIL", checks=checks)]
    torch.cuda.empty_cache()

    # 2. Timing, on rotating copies of the inputs: enough that twice the L2 of other data goes
    # by between two uses of what a call touches (all of a set, or op.footprint of it).
    set_bytes = nbytes(*base.values())
    touched = min(op.footprint(base) or set_bytes, set_bytes)
    needed = math.ceil(2 * l2_bytes / touched) + 1
    free, _ = torch.cuda.mem_get_info()
    calls = max(args.calls, min(needed, args.max_calls))
    sets = max(1, min(needed, calls, int(free * 0.4 // set_bytes)))
    rotation = [base] + [{k: v.clone() for k, v in base.items()} for _ in range(sets - 1)]
    warm = sets < needed  # a set is used again before twice the L2 of other data went by
    l2 = f"rotate {sets} sets ({set_bytes * sets / 1e6:.0f} MB)" + (", partly warm" if warm else "")

    backends = {"kiln": lambda i: op.kiln(rotation[i % sets])}
    for backend, fn in op.torch_backends().items():
        if backend not in op.check_only:
            backends[backend] = (lambda f: (lambda i: f(rotation[i % sets])))(fn)
    rows, kiln_median = [], None
    for backend, fn in backends.items():
        times, mechanism = time_calls(fn, calls, args.reps, op.uncapturable.get(backend))
        median = statistics.median(times)
        if backend == "kiln":
            kiln_median = median
        gbps = op.bytes(base) / (median * 1e3)
        disagrees = any(v.get("peer_disagrees") for k, v in checks.items() if k.startswith(f"kiln vs {backend}: "))
        rows.append(dict(common, backend=backend, median_us=round(median, 3),
                         std_us=round(statistics.stdev(times), 3) if len(times) > 1 else 0.0,
                         min_us=round(min(times), 3), reps=args.reps, calls_per_rep=calls, l2=l2,
                         mechanism=mechanism, bytes=op.bytes(base), gbps=round(gbps, 1),
                         pct_of_copy=round(100 * gbps / copy_gbps, 1), pct_of_read=round(100 * gbps / read_gbps, 1),
                         time_vs_kiln=round(median / kiln_median, 3),
                         tflops=round(op.flops(base) / (median * 1e6), 1) if hasattr(op, "flops") else None,
                         refcheck="peer disagrees with the references" if disagrees else "pass", checks=checks))
    del rotation
    torch.cuda.empty_cache()
    return rows


def list_cases(path, trace_name):
    """The cases of a kiln-bench test list for one trace, as trace examples."""
    return CASES.read_cases(path, trace_name)


def flashinfer_note(disabled):
    """FlashInfer's state for a run's header and meta: its version, off, or why it is not run."""
    if disabled:
        return "off (--no-flashinfer)"
    return FI.version() if FI.flashinfer is not None else f"not run: {FI.FLASHINFER_MISSING}"


def start_run(socket, script):
    """The primary context made current on this thread (Kiln uses it) and, with `socket`, kilnd
    checked to answer there; the run stops with `script`'s name when it does not."""
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    if socket:
        try:
            kiln.connect(socket, timeout_ms=10000)
        except kiln.KilnError as e:
            sys.exit(f"{script}: --socket {socket}: {e}")


def write_rows(path, meta, rows):
    """The JSON of a run: meta and its rows (nothing without a path)."""
    if path:
        with open(path, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--socket", help="kilnd's socket, checked to answer before the run (default: the kiln "
                                         "package's choice: KILN_SOCKET / KILN_MODE, the embedded engine when no "
                                         "daemon listens)")
    parser.add_argument("--traces", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                         "kernels", "traces"), help="trace definitions folder")
    parser.add_argument("--ops", default="all", help="comma list of: " + ", ".join(o.name for o in OPS))
    parser.add_argument("--dtypes", help="comma list (default: each example's dtype)")
    parser.add_argument("--list", help="cases from a kiln-bench test list (lines 'routine dtype m=1,n=8 ... label', "
                                       "routine = the trace name) instead of the trace examples")
    parser.add_argument("--reps", type=int, default=20, help="graph replays timed per backend")
    parser.add_argument("--calls", type=int, default=20, help="calls per graph (more when rotation needs them)")
    parser.add_argument("--max-calls", type=int, default=4096, help="the most calls per graph")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--out", help="JSON file for the rows")
    parser.add_argument("--no-flashinfer", action="store_true",
                        help="leave FlashInfer's backends out even when it imports (its JIT compiles take minutes)")
    args = parser.parse_args()
    global USE_FLASHINFER
    USE_FLASHINFER = not args.no_flashinfer
    fi_note = flashinfer_note(args.no_flashinfer)
    start_run(args.socket, "compare_torch.py")
    kiln_version, kiln_mode = kiln.version(), kiln.describe_mode()
    props = torch.cuda.get_device_properties(0)
    l2_bytes = getattr(props, "L2_cache_size", 60 << 20)
    copy_gbps, copy_us = copy_bandwidth(args.reps)
    read_gbps, read_us = read_bandwidth(args.reps)
    print(f"# {props.name}, torch {torch.__version__}, flashinfer {fi_note}, L2 {l2_bytes >> 20} MB; "
          f"device-to-device copy {copy_gbps:.0f} GB/s ({copy_us:.1f} us per GiB); "
          f"read-only {read_gbps:.0f} GB/s ({read_us:.1f} us per GiB read)")
    print(f"# kiln {kiln_version} ({os.path.dirname(kiln.__file__)}): {kiln_mode}")

    wanted = None if args.ops == "all" else set(args.ops.split(","))
    unknown = (wanted or set()) - {o.name for o in OPS}
    if unknown:
        parser.error(f"--ops: unknown {', '.join(sorted(unknown))}")
    rows, failures, skipped = [], [], []
    header = f"{'op':30} {'dtype':5} {'case':28} {'backend':20} {'median_us':>10} {'std_us':>8} {'GB/s':>8} {'%copy':>6} {'%read':>6} {'vs kiln':>8}"
    print(header)
    for op in OPS:
        if wanted is not None and op.name not in wanted:
            continue
        missing = [name for name in op.kiln_api if not hasattr(kiln, name)]
        if missing:
            skipped.append(f"{op.name}: the kiln package ({os.path.dirname(kiln.__file__)}) has no "
                           f"{', '.join('kiln.' + name for name in missing)}")
            continue
        trace = load_trace(args.traces, op.trace)
        if trace is None:
            skipped.append(f"{op.name}: no trace definition {op.trace}.json (its examples are the cases)")
            continue
        examples = trace["examples"] if not args.list else list_cases(args.list, op.trace)
        for example in examples:
            for dtype_name in (args.dtypes.split(",") if args.dtypes else [example["dtype"]]):
                try:
                    case_rows = run_case(op, trace, example["name"], example["axes"], dtype_name, args,
                                         l2_bytes, (copy_gbps, read_gbps), failures)
                except kiln.KilnError as e:
                    print(f"ERROR {op.name} {dtype_name} {example['name']}: {e}", file=sys.stderr, flush=True)
                    failures.append(f"{op.name} {dtype_name} {example['name']}: {e}")
                    continue
                for r in case_rows:
                    if "median_us" in r:
                        print(f"{r['op']:30} {r['dtype']:5} {r['case']:28} {r['backend']:20} {r['median_us']:10.2f} "
                              f"{r['std_us']:8.2f} {r['gbps']:8.1f} {r['pct_of_copy']:6.1f} {r['pct_of_read']:6.1f} {r['time_vs_kiln']:8.2f}"
                              + (f" {r['tflops']:8.1f} TFLOP/s" if r.get("tflops") is not None else ""),
                              flush=True)
                    else:
                        print(f"{r['op']:30} {r['dtype']:5} {r['case']:28} {'REFCHECK FAILED':20}", flush=True)
                rows.extend(case_rows)
    for s in skipped:
        print(f"# skipped {s}")
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "torch": torch.__version__, "flashinfer": fi_note,
            "kiln": kiln_version, "kiln_mode": kiln_mode, "kiln_package": os.path.dirname(kiln.__file__),
            "gpu": props.name,
            "command": " ".join(sys.argv), "copy_gbps": round(copy_gbps, 1), "read_gbps": round(read_gbps, 1), "l2_bytes": l2_bytes,
            "tolerance": {k: 2 * v for k, v in TOLERANCE.items()}, "skipped": skipped, "failures": failures,
            "time_vs_kiln": "backend median / kiln median: above 1, Kiln is faster"}
    write_rows(args.out, meta, rows)
    print(f"# {len(rows)} rows, {len(failures)} failures, {len(skipped)} ops skipped")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
