#!/usr/bin/env python3
"""Checks rmsnorm / fused_add_rmsnorm cubins on a real GPU against a PyTorch reference.

The cubins come from kiln_kernels_tests "[.bundle]" (NVRTC, exactly as the daemon builds
them); this script loads each with CuPy, launches it as the spec's launch hints say
(grid.x = ceil(rows / rows_per_block), block.x = block, no dynamic shared memory) and
compares with float32 math in PyTorch:
  rmsnorm:           out = T(x * rsqrt(mean(x^2) + eps) * w)
  fused_add_rmsnorm: x = T(input + residual); residual = x (bit-exact); input = T(x * rsqrt(...) * w)
Cases: several row counts (partial last blocks), padded row strides, in-place rmsnorm.
Usage: rmsnorm_gpu_check.py BUNDLE_DIR   (exit status 0 when every case passes)
"""
import math
import os
import sys

import cupy as cp
import numpy as np
import torch

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# One or two units in the last place of the output type, plus rsqrtf's 2 ulp in fp32.
TOLERANCE = {"fp32": (2e-5, 2e-5), "fp16": (2e-3, 2e-3), "bf16": (1.6e-2, 1.6e-2)}
EPS = 1e-6


def launch(function, rows, block, rows_per_block, args):
    grid = (math.ceil(rows / rows_per_block),)
    function(grid, (block,), args)


def ptr(t):
    return np.uint64(t.data_ptr())


def reference_rmsnorm(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(x.dtype)


def check(name, got, want, dtype, failures):
    rtol, atol = TOLERANCE[dtype]
    if not torch.allclose(got.float(), want.float(), rtol=rtol, atol=atol):
        err = (got.float() - want.float()).abs()
        failures.append(f"{name}: max abs err {err.max().item():.3g} at {np.unravel_index(err.argmax().item(), err.shape)}")


def main(bundle):
    torch.manual_seed(0)
    failures = []
    cases = 0
    for line in open(os.path.join(bundle, "manifest.tsv")):
        uri, op, dtype, hidden, vec, block, rows_per_block, entry = line.rstrip("\n").split("\t")
        hidden, vec, block, rows_per_block = int(hidden), int(vec), int(block), int(rows_per_block)
        module = cp.RawModule(path=os.path.join(bundle, uri + ".cubin"))
        function = module.get_function(entry)
        t = DTYPES[dtype]
        for rows in (1, 3, 127, 1000):
            for pad in (0, vec * 3):  # padded rows keep the vec alignment the contract asks for
                stride = hidden + pad
                w = (torch.randn(hidden, device="cuda") * 0.5 + 1.0).to(t)
                base = torch.randn(rows, stride, device="cuda") * 3.0 + 0.5
                if op == "rmsnorm":
                    x = base.to(t)
                    want = reference_rmsnorm(x[:, :hidden], w)
                    out = torch.full((rows, stride), 7.0, device="cuda").to(t)
                    launch(function, rows, block, rows_per_block,
                           (ptr(out), ptr(x), ptr(w), np.int64(rows), np.int64(stride), np.int64(stride), np.float32(EPS)))
                    torch.cuda.synchronize()
                    check(f"{uri} rows={rows} stride={stride}", out[:, :hidden], want, dtype, failures)
                    if pad and not torch.all(out[:, hidden:] == 7.0):
                        failures.append(f"{uri} rows={rows}: wrote into the row padding")
                    # In place: out == input.
                    inplace = x.clone()
                    launch(function, rows, block, rows_per_block,
                           (ptr(inplace), ptr(inplace), ptr(w), np.int64(rows), np.int64(stride), np.int64(stride), np.float32(EPS)))
                    torch.cuda.synchronize()
                    check(f"{uri} in place rows={rows} stride={stride}", inplace[:, :hidden], want, dtype, failures)
                else:
                    inp = base.to(t)
                    res = (torch.randn(rows, stride, device="cuda") * 2.0).to(t)
                    x = (inp[:, :hidden].float() + res[:, :hidden].float()).to(t)
                    want = reference_rmsnorm(x, w)
                    inp_k, res_k = inp.clone(), res.clone()
                    launch(function, rows, block, rows_per_block,
                           (ptr(inp_k), ptr(res_k), ptr(w), np.int64(rows), np.int64(stride), np.int64(stride), np.float32(EPS)))
                    torch.cuda.synchronize()
                    if not torch.equal(res_k[:, :hidden], x):
                        failures.append(f"{uri} rows={rows} stride={stride}: residual is not input + residual bit for bit")
                    check(f"{uri} rows={rows} stride={stride}", inp_k[:, :hidden], want, dtype, failures)
                    if pad and not (torch.equal(inp_k[:, hidden:], inp[:, hidden:]) and torch.equal(res_k[:, hidden:], res[:, hidden:])):
                        failures.append(f"{uri} rows={rows}: wrote into the row padding")
                cases += 1
    print(f"{cases} cases, {len(failures)} failures")
    if os.environ.get("KILN_RMSNORM_TIMING"):
        timing(bundle)
    for f in failures[:50]:
        print("FAIL", f)
    return 1 if failures else 0


def timing(bundle):
    """Informational: kernel time and effective bandwidth on ~256 MB rows (median of 20)."""
    manifest = {l.split("\t")[0]: l.rstrip("\n").split("\t") for l in open(os.path.join(bundle, "manifest.tsv"))}
    for uri in ("rmsnorm_bf16_h128", "rmsnorm_bf16_h1024", "rmsnorm_bf16_h4096", "rmsnorm_fp16_h5120", "rmsnorm_bf16_h8192",
                "rmsnorm_bf16_h16384", "rmsnorm_bf16_h65536", "rmsnorm_fp32_h4096", "rmsnorm_fp32_h65536",
                "fused_add_rmsnorm_bf16_h4096", "fused_add_rmsnorm_bf16_h8192", "rmsnorm_bf16_h4095"):
        if uri not in manifest:
            continue
        _, op, dtype, hidden, vec, block, rpb, entry = manifest[uri]
        hidden, block, rpb = int(hidden), int(block), int(rpb)
        t = DTYPES[dtype]
        size = torch.tensor([], dtype=t).element_size()
        rows = max(1, (256 << 20) // (hidden * size))
        function = cp.RawModule(path=os.path.join(bundle, uri + ".cubin")).get_function(entry)
        w = torch.randn(hidden, device="cuda").to(t)
        a = torch.randn(rows, hidden, device="cuda").to(t)
        b = torch.randn(rows, hidden, device="cuda").to(t)
        args = (ptr(b), ptr(a), ptr(w), np.int64(rows), np.int64(hidden), np.int64(hidden), np.float32(EPS))
        moved = 2 * rows * hidden * size if op == "rmsnorm" else 4 * rows * hidden * size
        times = []
        for i in range(23):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            launch(function, rows, block, rpb, args)
            end.record()
            torch.cuda.synchronize()
            if i >= 3:
                times.append(start.elapsed_time(end))
        ms = sorted(times)[len(times) // 2]
        ref = ""
        if op == "rmsnorm" and hasattr(torch.nn.functional, "rms_norm"):
            rt = []
            for i in range(13):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                torch.nn.functional.rms_norm(a, (hidden,), w, EPS)
                end.record()
                torch.cuda.synchronize()
                if i >= 3:
                    rt.append(start.elapsed_time(end))
            rms = sorted(rt)[len(rt) // 2]
            ref = f"  (torch rms_norm {rms * 1e3:.0f} us, {moved / rms / 1e6:.0f} GB/s)"
        print(f"{uri:32s} rows {rows:8d} block {block:4d} rpb {rpb:3d}: {ms * 1e3:8.1f} us {moved / ms / 1e6:7.0f} GB/s{ref}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
