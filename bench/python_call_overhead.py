"""The host cost of one small op call from Python: Kiln's package against FlashInfer's call and
torch's eager op, on the same tensors, in one run (issue 14: Kiln within 1 us of FlashInfer).

Each backend's call is made CALLS times back to back (a tiny op, so the GPU keeps up and the
host is the bottleneck), timed with time.perf_counter from the first call to the return of the
last (the launches are asynchronous: this is host time per call, launch included), then the
device is synchronized; ROUNDS rounds, the median round reported with the spread. Before
timing, each backend's output is checked against torch's float64 reference (outputs poisoned
first). Backends: kiln (kiln.rms_norm with out), kiln.native (the extension's function with an
explicit stream: what the package adds is the difference), kiln.flashinfer (the FlashInfer
names on Kiln), flashinfer (when it imports; its JIT module must compile once, minutes), torch
(F.rms_norm, which allocates its output). Also silu_and_mul [8, 2 x 4096] for kiln, flashinfer
and torch.

  python3 bench/python_call_overhead.py [--calls 5000] [--rounds 7] [--out FILE.json]

Needs a GPU, torch and the kiln package (bench/python_gpu.sh builds it on the GPU machine).
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import kiln
import kiln.flashinfer as kfi

try:
    import flashinfer
except Exception as e:  # not installed, or its dependencies are missing
    flashinfer = None
    FLASHINFER_MISSING = f"{type(e).__name__}: {e}"


def rms_reference(x, w, eps):
    x64 = x.double()
    return (x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * w.double())


def silu_reference(x):
    d = x.shape[-1] // 2
    x64 = x.double()
    return F.silu(x64[..., :d]) * x64[..., d:]


def time_calls(call, calls, rounds):
    """Median and spread (min, max) of host us per call over `rounds` rounds of `calls` calls."""
    for _ in range(50):
        call()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        per_call.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per_call), min(per_call), max(per_call)


def check(name, got, want, tol=1.6e-2):
    err = (got.double() - want).abs().max().item()
    scale = want.abs().max().item()
    if not err <= tol * max(scale, 1.0):
        raise SystemExit(f"{name}: wrong result, max error {err} (scale {scale})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    eps = 1e-6
    x = torch.rand((8, 4096), device=dev, dtype=torch.bfloat16) * 4 - 2
    w = torch.rand((4096,), device=dev, dtype=torch.bfloat16) + 0.5
    out = torch.empty_like(x)
    g = torch.rand((8, 2 * 4096), device=dev, dtype=torch.bfloat16) * 4 - 2
    g_out = torch.empty((8, 4096), device=dev, dtype=torch.bfloat16)
    stream = torch.cuda.current_stream().cuda_stream

    rms = {
        "kiln": lambda: kiln.rms_norm(x, w, eps, out=out),
        "kiln.native": lambda: kiln._native.rms_norm(out, x, w, eps, stream),
        "kiln.flashinfer": lambda: kfi.rmsnorm(x, w, eps, out=out),
        "torch": lambda: F.rms_norm(x, (4096,), w, eps),
    }
    silu = {
        "kiln": lambda: kiln.silu_and_mul(g, out=g_out),
        "kiln.flashinfer": lambda: kfi.silu_and_mul(g, out=g_out),
        "torch": lambda: F.silu(g[:, :4096]) * g[:, 4096:],
    }
    if flashinfer is not None:
        rms["flashinfer"] = lambda: flashinfer.rmsnorm(x, w, eps, out=out)
        silu["flashinfer"] = lambda: flashinfer.silu_and_mul(g, out=g_out)

    rows = []
    for op, backends, ref, target in (("rms_norm bf16 [8, 4096]", rms, lambda: rms_reference(x, w, eps), out),
                                      ("silu_and_mul bf16 [8, 2x4096]", silu, lambda: silu_reference(g), g_out)):
        want = ref()
        for name, call in backends.items():
            target.fill_(float("nan"))
            r = call()
            torch.cuda.synchronize()
            check(f"{op} {name}", target if r is None else r, want)  # r: the output (None: into target)
            median, low, high = time_calls(call, args.calls, args.rounds)
            rows.append({"op": op, "backend": name, "us_per_call": median, "min": low, "max": high})
    print(f"host time per call ({args.calls} back-to-back calls x {args.rounds} rounds, median [min, max]); "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}, kiln {kiln.version()}, flashinfer "
          f"{flashinfer.__version__ if flashinfer is not None else 'not run: ' + FLASHINFER_MISSING}")
    for op in dict.fromkeys(r["op"] for r in rows):
        base = {r["backend"]: r["us_per_call"] for r in rows if r["op"] == op}
        for r in (r for r in rows if r["op"] == op):
            vs = f"  kiln - flashinfer = {base['kiln'] - base['flashinfer']:+.2f} us" if (
                r["backend"] == "kiln" and "flashinfer" in base) else ""
            print(f"  {op:32s} {r['backend']:16s} {r['us_per_call']:6.2f} us [{r['min']:.2f}, {r['max']:.2f}]{vs}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"calls": args.calls, "rounds": args.rounds, "device": torch.cuda.get_device_name(),
                       "torch": torch.__version__, "kiln": kiln.version(),
                       "flashinfer": flashinfer.__version__ if flashinfer is not None else None, "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    sys.exit(main())
