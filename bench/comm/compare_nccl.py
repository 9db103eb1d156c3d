#!/usr/bin/env python3
"""Kiln's all-reduce against NCCL's (torch.distributed), in one run, on the same inputs.

Run one process per GPU with the launcher (it sets the ranks, the rendezvous address and
torch's MASTER_ADDR/MASTER_PORT), against a running kilnd:

    KILN_SOCKET=/path/kilnd.sock kiln-launch -n 2 python3 bench/comm/compare_nccl.py \
        --lib build/client/libkiln_client.so --out results.json

Each rank: the same random input for both backends; first a correctness check (Kiln's result
against NCCL's and against a float64 sum of every rank's input, gathered), then timing. Timing
captures ITERS back-to-back calls into a CUDA graph per backend and times graph replays with
CUDA events (so Python's launch overhead is not measured), REPS times; the rows report the
median, spread and minimum per call. Bus bandwidth = bytes / time * 2 (W - 1) / W, as NCCL's
tests report it. NVLink multicast (NVLS) stays off for NCCL, as on this machine it must.
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time

# NVLink multicast must stay off on the shared machines: set before torch/NCCL initialize.
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


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


DL_FLOAT, DL_BFLOAT = 2, 4
DTYPES = {
    "fp32": (torch.float32, DL_FLOAT, 32),
    "fp16": (torch.float16, DL_FLOAT, 16),
    "bf16": (torch.bfloat16, DL_BFLOAT, 16),
}
ALGORITHMS = {"kiln": 0, "kiln_one_shot": 1, "kiln_two_shot": 2}


class DL:
    """A DLTensor describing a torch tensor (kept alive with its shape/strides arrays)."""

    def __init__(self, t):
        self.t = t
        self.shape = (ctypes.c_int64 * t.dim())(*t.shape)
        self.strides = (ctypes.c_int64 * t.dim())(*t.stride())
        _, code, bits = DTYPES[next(k for k, v in DTYPES.items() if v[0] == t.dtype)]
        self.value = DLTensor(t.data_ptr(), DLDevice(2, t.device.index), t.dim(),
                              DLDataType(code, bits, 1), self.shape, self.strides, 0)

    def ref(self):
        return ctypes.byref(self.value)


def load_kiln(path):
    lib = ctypes.CDLL(path)
    lib.kiln_last_error.restype = ctypes.c_char_p
    lib.kiln_comm_create_from_env.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.kiln_all_reduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_int, ctypes.c_void_p]
    lib.kiln_comm_synchronize.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.kiln_comm_destroy.argtypes = [ctypes.c_void_p]
    return lib


def check(lib, status, what):
    if status != 0:
        raise RuntimeError(f"{what}: {lib.kiln_last_error().decode()}")


def time_graph(fn, iters, reps, warmup_reps=3):
    """Per-call microseconds of fn() captured ITERS times into one CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm: kernels fetched and loaded outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(iters):
            fn()
    torch.cuda.synchronize()
    for _ in range(warmup_reps):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        dist.barrier()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / iters)
    return times


def human(nbytes):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes // size} {unit}"
    return f"{nbytes} B"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lib", required=True, help="path of libkiln_client.so")
    parser.add_argument("--out", help="JSON file for the rows (rank 0 writes it)")
    parser.add_argument("--dtypes", default="bf16", help="comma list of fp32,fp16,bf16")
    parser.add_argument("--min-bytes", type=int, default=4 << 10)
    parser.add_argument("--max-bytes", type=int, default=256 << 20)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--backends", default="nccl,kiln,kiln_one_shot,kiln_two_shot")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    torch.zeros(1, device="cuda")  # the primary context, current on this thread

    lib = load_kiln(args.lib)
    comm = ctypes.c_void_p()
    check(lib, lib.kiln_comm_create_from_env(None, ctypes.byref(comm)), "kiln_comm_create_from_env")

    rows = []
    backends = args.backends.split(",")
    for dtype_name in args.dtypes.split(","):
        torch_dtype = DTYPES[dtype_name][0]
        elem = torch.tensor([], dtype=torch_dtype).element_size()
        nbytes = args.min_bytes
        while nbytes <= args.max_bytes:
            n = nbytes // elem
            gen = torch.Generator(device="cuda").manual_seed(1234 + 7919 * rank + nbytes)
            x = torch.randn(n, device="cuda", generator=gen, dtype=torch.float32).to(torch_dtype)

            # Correctness first: Kiln vs NCCL vs a float64 sum of every rank's input.
            gathered = [torch.empty_like(x) for _ in range(world)]
            dist.all_gather(gathered, x)
            want = torch.stack([g.double() for g in gathered]).sum(0)
            nccl_out = x.clone()
            dist.all_reduce(nccl_out)
            refcheck = {}
            for backend in backends:
                if backend == "nccl":
                    got = nccl_out
                else:
                    got = torch.full_like(x, float("nan"))
                    src, dst = DL(x), DL(got)
                    check(lib, lib.kiln_all_reduce(comm, dst.ref(), src.ref(), ALGORITHMS[backend],
                                                   ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)),
                          backend)
                    check(lib, lib.kiln_comm_synchronize(comm, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)),
                          backend + " synchronize")
                tol = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2}[dtype_name]
                err = ((got.double() - want).abs() / (want.abs() + 1.0)).max().item()
                ok = bool(err <= tol) and not bool(torch.isnan(got).any())
                if backend != "nccl":
                    ok = ok and bool(torch.equal(got, nccl_out) or err <= tol)
                refcheck[backend] = (ok, err)
                if not ok:
                    print(f"rank {rank}: REFCHECK FAILED {backend} {dtype_name} {human(nbytes)}: "
                          f"max rel err {err:.3g}", flush=True)

            iters = 200 if nbytes <= (1 << 20) else (50 if nbytes <= (16 << 20) else 10)
            for backend in backends:
                if not refcheck[backend][0]:
                    continue  # no timing for a wrong result
                buf = x.clone()
                out = torch.empty_like(x)
                if backend == "nccl":
                    fn = lambda: dist.all_reduce(buf)  # noqa: E731
                else:
                    src, dst = DL(buf), DL(out)
                    algorithm = ALGORITHMS[backend]

                    def fn(src=src, dst=dst, algorithm=algorithm):
                        status = lib.kiln_all_reduce(comm, dst.ref(), src.ref(), algorithm,
                                                     ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
                        if status != 0:
                            raise RuntimeError(lib.kiln_last_error().decode())
                try:
                    times = time_graph(fn, iters, args.reps)
                    mechanism = "cuda_events+cuda_graph"
                except Exception as e:  # noqa: BLE001 - reported, not hidden
                    print(f"rank {rank}: graph timing failed for {backend}: {e}", flush=True)
                    continue
                median = statistics.median(times)
                algbw = nbytes / (median * 1e-6) / 1e9
                rows.append({
                    "routine": "all_reduce", "backend": backend, "dtype": dtype_name,
                    "bytes": nbytes, "elements": n, "world_size": world, "rank": rank,
                    "median_us": round(median, 3), "std_us": round(statistics.pstdev(times), 3),
                    "min_us": round(min(times), 3), "reps": args.reps, "iterations_per_rep": iters,
                    "mechanism": mechanism, "algbw_GBps": round(algbw, 2),
                    "busbw_GBps": round(algbw * 2 * (world - 1) / world, 2),
                    "refcheck": "pass", "max_rel_err": refcheck[backend][1],
                    "arch": "sm_%d%d" % torch.cuda.get_device_capability(local),
                    "gpu": torch.cuda.get_device_name(local),
                })
            nbytes *= 4 if nbytes < (1 << 20) else 2
    lib.kiln_comm_destroy(comm)

    all_rows = [None] * world
    dist.all_gather_object(all_rows, rows)
    if rank == 0:
        flat = [r for part in all_rows for r in part]
        meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "torch": torch.__version__,
                "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                "command": " ".join(sys.argv), "env": {k: os.environ[k] for k in
                                                       ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                                        "NVSHMEM_DISABLE_NVLS")}}
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"meta": meta, "rows": flat}, f, indent=1)
        print(f"{'dtype':5} {'size':>8} " + " ".join(f"{b:>22}" for b in backends))
        keyed = {(r["dtype"], r["bytes"], r["backend"]): r for r in flat if r["rank"] == 0}
        for dtype_name in args.dtypes.split(","):
            sizes = sorted({r["bytes"] for r in flat if r["dtype"] == dtype_name})
            for nbytes in sizes:
                cells = []
                for b in backends:
                    r = keyed.get((dtype_name, nbytes, b))
                    cells.append(f"{r['median_us']:9.2f}us {r['busbw_GBps']:7.1f}GB/s" if r else f"{'-':>22}")
                print(f"{dtype_name:5} {human(nbytes):>8} " + " ".join(cells))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
