#!/usr/bin/env python3
"""Kiln's ops against their PyTorch equivalents, in one process, on the same inputs.

Kiln is called through its C ABI (libkiln_client, ctypes, DLTensor structs built from torch
tensors), against a running kilnd:

    KILN_SOCKET=/path/kilnd.sock python3 bench/compare_torch.py \
        --lib .gpu/bin/libkiln_client.so.0.1 --out $OUT/compare-torch.json

Cases are the examples of each op's trace definition (kernels/traces/<op>.json: realistic
Llama-3.1-8B shapes, the same cases as kiln-bench's default list). For each case:

  1. Correctness first. Every backend runs once on clones of the same fresh random inputs
     (outputs poisoned with NaN first); Kiln's outputs must agree with each PyTorch backend's
     and with the trace definition's own PyTorch reference (run as written in the JSON) within
     twice the per-dtype tolerance of the GPU tests (fp32 1e-5, fp16 2e-3, bf16 1.6e-2, abs and
     rel). A case that disagrees is reported loudly and not timed; the exit status is 1.
  2. Timing. Every backend is timed the same way: CALLS back-to-back calls captured into one
     CUDA graph (so Python's launch overhead is not measured), each call on the next of SETS
     rotating copies of the inputs (enough copies to exceed twice the L2 where memory and the
     call count allow; rows say how many), the graph replayed REPS times between CUDA events;
     per-call time = replay time / CALLS; the rows give the median, spread and minimum. When a
     backend cannot be captured, its calls are timed back to back with events (the row says so).

Rows: op, backend, case, dtype, shape, median/std/min us, GB/s (the bytes an op must move /
time), % of the device-to-device copy bandwidth measured in the same run, and the time ratio
to Kiln (backend / kiln: above 1 means Kiln is faster). Ops whose C function the library
does not export are skipped with a note.
"""
import argparse
import ctypes
import inspect
import json
import math
import os
import re
import statistics
import sys
import time

import torch
import torch.nn.functional as F

# ---- DLPack through ctypes ------------------------------------------------------------------


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


DL_INT, DL_UINT, DL_FLOAT, DL_BFLOAT = 0, 1, 2, 4
DL_CODES = {
    torch.float32: (DL_FLOAT, 32), torch.float16: (DL_FLOAT, 16), torch.bfloat16: (DL_BFLOAT, 16),
    torch.int32: (DL_INT, 32), torch.int64: (DL_INT, 64), torch.int8: (DL_INT, 8), torch.uint8: (DL_UINT, 8),
}
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# One rounding to the dtype plus fp32 accumulation against float64 (the GPU tests' figures);
# two GPU results are each within it of the truth, so they must agree within twice it.
TOLERANCE = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2}


class DL:
    """A DLTensor describing a torch tensor (kept alive with its shape and strides arrays)."""

    def __init__(self, t):
        self.t = t
        self.shape = (ctypes.c_int64 * t.dim())(*t.shape)
        self.strides = (ctypes.c_int64 * t.dim())(*t.stride())
        code, bits = DL_CODES[t.dtype]
        self.value = DLTensor(t.data_ptr(), DLDevice(2, t.device.index), t.dim(), DLDataType(code, bits, 1),
                              self.shape, self.strides, 0)

    def ref(self):
        return ctypes.byref(self.value)


class KilnError(RuntimeError):
    pass


def load_kiln(path):
    lib = ctypes.CDLL(path)
    lib.kiln_last_error.restype = ctypes.c_char_p
    lib.kiln_connect.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return lib


def kiln_check(lib, status, what):
    if status != 0:
        raise KilnError(f"{what}: {lib.kiln_last_error().decode()}")


def stream_handle():
    return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)


# ---- the ops ------------------------------------------------------------------------------------
# Each op: the trace definition it follows, its C function, how to make a case's tensors (named
# as the C API's arguments), how Kiln and each PyTorch backend compute it (PyTorch backends
# return the outputs, in the order of `outputs`), the scalars of the trace reference, and the
# bytes a call must move.

EPS = 1e-6
ROPE_THETA = 500000.0  # Llama-3.1
ROPE_LLAMA31 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position": 8192}
ROPE_MAX_POSITION = 16384  # positions drawn in [0, this)


class Llama31Scaling(ctypes.Structure):
    _fields_ = [("factor", ctypes.c_double), ("low_freq_factor", ctypes.c_double),
                ("high_freq_factor", ctypes.c_double), ("original_max_position", ctypes.c_int64)]


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
    c_function = ""
    outputs = ()      # tensors the op writes, compared
    pure_outputs = ()  # of those, the ones it does not read (poisoned with NaN before a check)
    scalars = {}      # the trace reference's keyword arguments

    def make(self, axes, dtype, gen):
        raise NotImplementedError

    def kiln(self, lib, dl):
        raise NotImplementedError

    def torch_backends(self):
        raise NotImplementedError

    def bytes(self, t):
        raise NotImplementedError


def nbytes(*tensors):
    return sum(x.numel() * x.element_size() for x in tensors)


class RmsNorm(Op):
    name, trace, c_function, outputs, scalars = "rms_norm", "rmsnorm", "kiln_rms_norm", ("out",), {"eps": EPS}
    pure_outputs = ("out",)

    def make(self, a, dtype, gen):
        return {"out": torch.empty(a["rows"], a["hidden"], device="cuda", dtype=dtype),
                "input": uniform((a["rows"], a["hidden"]), dtype, gen),
                "weight": uniform((a["hidden"],), dtype, gen)}

    def kiln(self, lib, dl):
        return lib.kiln_rms_norm(dl["out"].ref(), dl["input"].ref(), dl["weight"].ref(), ctypes.c_double(EPS),
                                 stream_handle())

    def torch_backends(self):
        return {"torch": lambda t: (torch_rms_norm(t["input"], t["weight"]),),
                "torch_F.rms_norm": lambda t: (F.rms_norm(t["input"], (t["input"].shape[-1],), t["weight"], EPS),)}

    def bytes(self, t):
        return 2 * nbytes(t["input"]) + nbytes(t["weight"])


class FusedAddRmsNorm(Op):
    name, trace, c_function = "fused_add_rms_norm", "fused_add_rmsnorm", "kiln_fused_add_rms_norm"
    outputs, scalars = ("input", "residual"), {"eps": EPS}

    def make(self, a, dtype, gen):
        return {"input": uniform((a["rows"], a["hidden"]), dtype, gen),
                "residual": uniform((a["rows"], a["hidden"]), dtype, gen),
                "weight": uniform((a["hidden"],), dtype, gen)}

    def kiln(self, lib, dl):
        return lib.kiln_fused_add_rms_norm(dl["input"].ref(), dl["residual"].ref(), dl["weight"].ref(),
                                           ctypes.c_double(EPS), stream_handle())

    def torch_backends(self):
        def eager(t):
            r = (t["input"].float() + t["residual"].float()).to(t["input"].dtype)
            return torch_rms_norm(r, t["weight"]), r

        def functional(t):
            r = t["input"] + t["residual"]  # fp32 math, one rounding, as Kiln stores it
            return F.rms_norm(r, (r.shape[-1],), t["weight"], EPS), r

        return {"torch": eager, "torch_F.rms_norm": functional}

    def bytes(self, t):
        return 4 * nbytes(t["input"]) + nbytes(t["weight"])


class ActAndMul(Op):
    outputs, pure_outputs, scalars = ("out",), ("out",), {}

    def __init__(self, name, act):
        self.name, self.trace, self.c_function, self.act = name, name, "kiln_" + name, act

    def make(self, a, dtype, gen):
        return {"out": torch.empty(a["rows"], a["d"], device="cuda", dtype=dtype),
                "input": uniform((a["rows"], a["d2"]), dtype, gen)}

    def kiln(self, lib, dl):
        return getattr(lib, self.c_function)(dl["out"].ref(), dl["input"].ref(), stream_handle())

    def torch_backends(self):
        def eager(t):
            d = t["input"].shape[-1] // 2
            return (self.act(t["input"][..., :d]) * t["input"][..., d:],)

        return {"torch": eager}

    def bytes(self, t):
        return nbytes(t["input"]) + nbytes(t["out"])


class ApplyRope(Op):
    name, trace, c_function, outputs = "apply_rope", "apply_rope", "kiln_apply_rope", ("q", "k")
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
        return t

    def kiln(self, lib, dl):
        scaling = Llama31Scaling(**ROPE_LLAMA31)
        return lib.kiln_apply_rope(dl["q"].ref(), dl["k"].ref(), dl["positions"].ref(), ctypes.c_int64(0),
                                   ctypes.c_int(0), ctypes.c_double(ROPE_THETA), ctypes.byref(scaling),
                                   stream_handle())

    def torch_backends(self):
        return {"torch_cos_sin_cache": lambda t: torch_rope_cached(t["q"], t["k"], t["positions"], self.cache)}

    def bytes(self, t):
        return 2 * nbytes(t["q"], t["k"]) + nbytes(t["positions"])


class ApplyRopeWithCosSinCache(Op):
    name, trace = "apply_rope_with_cos_sin_cache", "apply_rope_with_cos_sin_cache"
    c_function, outputs, scalars = "kiln_apply_rope_with_cos_sin_cache", ("q", "k"), {"interleaved": False}

    def make(self, a, dtype, gen):
        max_position = a.get("max_position", ROPE_MAX_POSITION)
        return {"q": uniform((a["tokens"], a["q_heads"], a["head_dim"]), dtype, gen),
                "k": uniform((a["tokens"], a["k_heads"], a["head_dim"]), dtype, gen),
                "positions": torch.randint(0, max_position, (a["tokens"],), device="cuda", generator=gen,
                                           dtype=torch.int64),
                "cos_sin_cache": cos_sin_table(max_position, a.get("rotary_dim", a["head_dim"]), "cuda")}

    def kiln(self, lib, dl):
        return lib.kiln_apply_rope_with_cos_sin_cache(dl["q"].ref(), dl["k"].ref(), dl["positions"].ref(),
                                                      dl["cos_sin_cache"].ref(), ctypes.c_int(0), stream_handle())

    def torch_backends(self):
        return {"torch": lambda t: torch_rope_cached(t["q"], t["k"], t["positions"], t["cos_sin_cache"])}

    def bytes(self, t):
        # q and k read and written; each token's cache row read once
        r = t["cos_sin_cache"].shape[1]
        return 2 * nbytes(t["q"], t["k"]) + nbytes(t["positions"]) + t["q"].shape[0] * r * 4


OPS = [RmsNorm(), FusedAddRmsNorm(),
       ActAndMul("silu_and_mul", F.silu), ActAndMul("gelu_and_mul", F.gelu),
       ActAndMul("gelu_tanh_and_mul", lambda x: F.gelu(x, approximate="tanh")),
       ApplyRope(), ApplyRopeWithCosSinCache()]

# ---- checks -------------------------------------------------------------------------------------


def agree(got, want, dtype_name):
    """(ok, max abs err, first mismatch) of got against want within twice the dtype's tolerance."""
    tol = 2 * TOLERANCE.get(dtype_name, 0.0)
    g, w = got.double(), want.double()
    err = (g - w).abs()
    bad = ~torch.isfinite(g) | ~torch.isfinite(w) | (err > tol + tol * w.abs())
    finite = err[torch.isfinite(err)]
    max_err = finite.max().item() if finite.numel() else None
    if not bool(bad.any()):
        return True, max_err, ""
    i = int(bad.flatten().nonzero()[0])
    return False, max_err, (f"{int(bad.sum())} of {bad.numel()} elements differ; first [{i}] got "
                            f"{g.flatten()[i].item():.6g}, want {w.flatten()[i].item():.6g}")


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
    come back in the order of its "outputs"."""
    fn = trace_reference(trace)
    accepted = inspect.signature(fn).parameters
    args = [t[name].clone() for name in trace["inputs"]]
    kwargs = {k: v for k, v in op.scalars.items() if k in accepted}
    result = fn(*args, **kwargs)
    if not isinstance(result, (tuple, list)):
        result = (result,)
    return dict(zip(trace["outputs"], result))


# ---- timing -------------------------------------------------------------------------------------


def time_calls(fn, calls, reps):
    """Per-call microseconds: `calls` calls fn(i) captured in a CUDA graph, replayed `reps` times
    between CUDA events; back to back without a graph when capture fails."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(min(calls, 3)):
            fn(i)  # warm: kernels fetched and loaded outside the capture
    torch.cuda.synchronize()
    mechanism = "cuda_events+cuda_graph"
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, stream=stream):
            for i in range(calls):
                fn(i)
        replay = graph.replay
    except Exception as e:  # noqa: BLE001 - reported in the row
        torch.cuda.synchronize()
        mechanism = f"cuda_events back-to-back (graph capture failed: {type(e).__name__}: {e})"

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
    best = None
    for what, fn in (("copy_", lambda i: dst.copy_(src)),
                     ("elementwise kernel", lambda i: torch.mul(src, 1.0, out=dst))):
        times, _ = time_calls(fn, 4, reps)
        median = statistics.median(times)
        if best is None or median < best[1]:
            best = (what, median)
    return 2 * src.numel() * src.element_size() / (best[1] * 1e3), best[1]


# ---- main ---------------------------------------------------------------------------------------


def run_case(lib, op, trace, label, axes, dtype_name, args, l2_bytes, copy_gbps, failures):
    dtype = TORCH_DTYPES[dtype_name]
    seed = args.seed + sum(ord(c) for c in f"{op.name}{label}{dtype_name}")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    base = op.make(axes, dtype, gen)
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
    dl = {k: DL(v) for k, v in t.items()}
    kiln_check(lib, op.kiln(lib, dl), op.c_function)
    torch.cuda.synchronize()
    kiln_out = {name: t[name].clone() for name in op.outputs}
    checks, ok = {}, True
    for backend, fn in op.torch_backends().items():
        got = fn(fresh())
        torch.cuda.synchronize()
        for name, value in zip(op.outputs, got):
            good, err, first = agree(kiln_out[name], value, dtype_name)
            checks[f"kiln vs {backend}: {name}"] = {"ok": good, "max_abs_err": err, "detail": first}
            ok = ok and good
    if trace is not None:
        try:
            ref = call_trace_reference(op, trace, base)
            for name, value in ref.items():
                if name in kiln_out:
                    good, err, first = agree(kiln_out[name], value, dtype_name)
                    checks[f"kiln vs trace reference: {name}"] = {"ok": good, "max_abs_err": err, "detail": first}
                    ok = ok and good
        except Exception as e:  # noqa: BLE001 - a reference that cannot run is a failure, reported
            checks["trace reference"] = {"ok": False, "detail": f"{type(e).__name__}: {e}"}
            ok = False
    if not ok:
        bad = "; ".join(f"{k}: {v['detail']}" for k, v in checks.items() if not v["ok"])
        print(f"REFCHECK FAILED {op.name} {dtype_name} {shape} ({label}): {bad}", file=sys.stderr, flush=True)
        failures.append(f"{op.name} {dtype_name} {shape}")
        return [dict(common, backend="kiln", refcheck="FAIL", checks=checks)]

    # 2. Timing, on rotating copies of the inputs.
    set_bytes = nbytes(*base.values())
    needed = math.ceil(2 * l2_bytes / set_bytes) + 1
    free, _ = torch.cuda.mem_get_info()
    calls = max(args.calls, min(needed, args.max_calls))
    sets = max(1, min(needed, calls, int(free * 0.4 // set_bytes)))
    rotation = [base] + [{k: v.clone() for k, v in base.items()} for _ in range(sets - 1)]
    rotation_dl = [{k: DL(v) for k, v in s.items()} for s in rotation]
    warm = sets < needed  # a set is used again before twice the L2 of other data went by
    l2 = f"rotate {sets} sets ({set_bytes * sets / 1e6:.0f} MB)" + (", partly warm" if warm else "")

    backends = {"kiln": lambda i: kiln_check(lib, op.kiln(lib, rotation_dl[i % sets]), op.c_function)}
    for backend, fn in op.torch_backends().items():
        backends[backend] = (lambda f: (lambda i: f(rotation[i % sets])))(fn)
    rows, kiln_median = [], None
    for backend, fn in backends.items():
        times, mechanism = time_calls(fn, calls, args.reps)
        median = statistics.median(times)
        if backend == "kiln":
            kiln_median = median
        gbps = op.bytes(base) / (median * 1e3)
        rows.append(dict(common, backend=backend, median_us=round(median, 3),
                         std_us=round(statistics.stdev(times), 3) if len(times) > 1 else 0.0,
                         min_us=round(min(times), 3), reps=args.reps, calls_per_rep=calls, l2=l2,
                         mechanism=mechanism, bytes=op.bytes(base), gbps=round(gbps, 1),
                         pct_of_copy=round(100 * gbps / copy_gbps, 1),
                         time_vs_kiln=round(median / kiln_median, 3),
                         refcheck="pass", checks=checks))
    del rotation, rotation_dl
    torch.cuda.empty_cache()
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lib", required=True, help="path of libkiln_client.so")
    parser.add_argument("--socket", help="kilnd's socket (default: KILN_SOCKET, else kilnd's default)")
    parser.add_argument("--traces", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                         "kernels", "traces"), help="trace definitions folder")
    parser.add_argument("--ops", default="all", help="comma list of: " + ", ".join(o.name for o in OPS))
    parser.add_argument("--dtypes", help="comma list (default: each example's dtype)")
    parser.add_argument("--reps", type=int, default=20, help="graph replays timed per backend")
    parser.add_argument("--calls", type=int, default=20, help="calls per graph (more when rotation needs them)")
    parser.add_argument("--max-calls", type=int, default=4096, help="the most calls per graph")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--out", help="JSON file for the rows")
    args = parser.parse_args()

    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the primary context, current on this thread (Kiln uses it)
    lib = load_kiln(args.lib)
    kiln_check(lib, lib.kiln_connect(args.socket.encode() if args.socket else None, 10000), "kiln_connect")
    props = torch.cuda.get_device_properties(0)
    l2_bytes = getattr(props, "L2_cache_size", 60 << 20)
    copy_gbps, copy_us = copy_bandwidth(args.reps)
    print(f"# {props.name}, torch {torch.__version__}, L2 {l2_bytes >> 20} MB; "
          f"device-to-device copy {copy_gbps:.0f} GB/s ({copy_us:.1f} us per GiB)")

    wanted = None if args.ops == "all" else set(args.ops.split(","))
    unknown = (wanted or set()) - {o.name for o in OPS}
    if unknown:
        parser.error(f"--ops: unknown {', '.join(sorted(unknown))}")
    rows, failures, skipped = [], [], []
    header = f"{'op':30} {'dtype':5} {'case':28} {'backend':20} {'median_us':>10} {'std_us':>8} {'GB/s':>8} {'%copy':>6} {'vs kiln':>8}"
    print(header)
    for op in OPS:
        if wanted is not None and op.name not in wanted:
            continue
        if not hasattr(lib, op.c_function):
            skipped.append(f"{op.name}: {args.lib} exports no {op.c_function}")
            continue
        trace = load_trace(args.traces, op.trace)
        if trace is None:
            skipped.append(f"{op.name}: no trace definition {op.trace}.json (its examples are the cases)")
            continue
        for example in trace["examples"]:
            for dtype_name in (args.dtypes.split(",") if args.dtypes else [example["dtype"]]):
                try:
                    case_rows = run_case(lib, op, trace, example["name"], example["axes"], dtype_name, args,
                                         l2_bytes, copy_gbps, failures)
                except KilnError as e:
                    print(f"ERROR {op.name} {dtype_name} {example['name']}: {e}", file=sys.stderr, flush=True)
                    failures.append(f"{op.name} {dtype_name} {example['name']}: {e}")
                    continue
                for r in case_rows:
                    if "median_us" in r:
                        print(f"{r['op']:30} {r['dtype']:5} {r['case']:28} {r['backend']:20} {r['median_us']:10.2f} "
                              f"{r['std_us']:8.2f} {r['gbps']:8.1f} {r['pct_of_copy']:6.1f} {r['time_vs_kiln']:8.2f}",
                              flush=True)
                    else:
                        print(f"{r['op']:30} {r['dtype']:5} {r['case']:28} {'REFCHECK FAILED':20}", flush=True)
                rows.extend(case_rows)
    for s in skipped:
        print(f"# skipped {s}")
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "torch": torch.__version__, "gpu": props.name,
            "command": " ".join(sys.argv), "copy_gbps": round(copy_gbps, 1), "l2_bytes": l2_bytes,
            "tolerance": {k: 2 * v for k, v in TOLERANCE.items()}, "skipped": skipped, "failures": failures,
            "time_vs_kiln": "backend median / kiln median: above 1, Kiln is faster"}
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print(f"# {len(rows)} rows, {len(failures)} failures, {len(skipped)} ops skipped")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
