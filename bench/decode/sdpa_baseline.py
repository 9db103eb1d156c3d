#!/usr/bin/env python3
"""PyTorch's decode attention on the same shapes as kiln_client_tests "[.decode-bench]", with
the KV stored densely ([B, Hk, L, D]), for the decode target "at least as fast as PyTorch SDPA".

    python3 bench/decode/sdpa_baseline.py --out sdpa.json

One query token per request, Hq 32, Hk 8 (GQA via enable_gqa), D 128, bf16. Timing: 20
back-to-back calls captured in a CUDA graph, 10 replays timed with CUDA events, median per call;
KV bytes / time as GB/s. Correctness: against a float32 softmax(q k^T / sqrt(D)) v on request 0.
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F

SHAPES = [(64, 8192), (16, 32768), (1, 32768), (1, 100000), (128, 2048), (32, 4096)]


def dense_kv(cache, rows, batch, kv_len):
    """A paged cache [num_pages, page_size, Hk, D] stored densely as SDPA reads it: [B, Hk, L, D],
    from the cache rows (page * page_size + slot) of every position, request by request
    (bench/decode/paged_table.py's PagedTable.rows(), as a tensor on the cache's device)."""
    hk, d = cache.shape[2], cache.shape[3]
    return cache.reshape(-1, hk, d)[rows].reshape(batch, kv_len, hk, d).transpose(1, 2).contiguous()


def sdpa_decode(q, k, v):
    """One query token per request: q [B, Hq, D] against dense k, v [B, Hk, L, D] (GQA through
    enable_gqa); out [B, Hq, D]."""
    return F.scaled_dot_product_attention(q.unsqueeze(2), k, v, enable_gqa=True).squeeze(2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = []
    for batch, length in SHAPES:
        hq, hk, d = 32, 8, 128
        q = torch.randn(batch, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, hk, length, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(batch, hk, length, d, device="cuda", dtype=torch.bfloat16)
        run = lambda: sdpa_decode(q, k, v)  # noqa: E731
        out = run()
        ref = torch.softmax((q[0].float().reshape(hk, hq // hk, d) @ k[0].float().transpose(-1, -2)) / d ** 0.5, -1) \
            @ v[0].float()
        err = (out[0].float().reshape(hk, hq // hk, d) - ref).abs().max().item()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            run()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(20):
                run()
        graph.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(10):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000 / 20)
        median = statistics.median(times)
        kv_bytes = 2 * k.numel() * k.element_size()
        row = {"backend": "torch_sdpa_dense", "batch": batch, "kv_len": length, "median_us": round(median, 2),
               "std_us": round(statistics.pstdev(times), 2), "kv_GBps": round(kv_bytes / median / 1e3, 1),
               "max_abs_err_vs_fp32": err, "mechanism": "cuda_events+cuda_graph",
               "backend_chosen": str(torch.backends.cuda.preferred_blas_library())}
        rows.append(row)
        print(f"sdpa b{batch:<4} L{length:<7} {median:9.2f} us  {row['kv_GBps']:8.1f} GB/s of KV  err {err:.3g}",
              flush=True)
        del q, k, v, graph
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
