#!/usr/bin/env python3
"""PyTorch's softmax-free sampling at B = 128, V = 128 256 (fp32 probabilities): the baseline of
the sampling target (Kiln >= 5x faster). Kiln's side: kiln_client_tests "[.bench][sampling]".

    python3 bench/sampling/torch_baseline.py --out torch-sampling.json

Each op filters with torch (topk / sort + cumsum), renormalizes and draws with
torch.multinomial, the usual eager implementation. Timing: 50 back-to-back eager calls between
CUDA events (GPU-bound at these sizes), 9 repetitions, median per call.
"""
import argparse
import json
import statistics

import torch


def top_k(probs, k):
    values, _ = torch.topk(probs, k, dim=-1)
    masked = torch.where(probs >= values[:, -1:], probs, torch.zeros_like(probs))
    return torch.multinomial(masked / masked.sum(-1, keepdim=True), 1)


def top_p(probs, p):
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    cumulative = sorted_probs.cumsum(-1)
    keep = cumulative - sorted_probs < p * probs.sum(-1, keepdim=True)
    filtered = torch.zeros_like(probs).scatter(-1, order, sorted_probs * keep)
    return torch.multinomial(filtered / filtered.sum(-1, keepdim=True), 1)


def top_k_top_p(probs, k, p):
    values, _ = torch.topk(probs, k, dim=-1)
    masked = torch.where(probs >= values[:, -1:], probs, torch.zeros_like(probs))
    return top_p(masked / masked.sum(-1, keepdim=True), p)


def min_p(probs, m):
    keep = probs >= m * probs.max(-1, keepdim=True).values
    filtered = probs * keep
    return torch.multinomial(filtered / filtered.sum(-1, keepdim=True), 1)


OPS = {
    "top_k_sampling(k=50)": lambda x: top_k(x, 50),
    "top_p_sampling(p=0.9)": lambda x: top_p(x, 0.9),
    "top_k_top_p_sampling(k=50,p=0.9)": lambda x: top_k_top_p(x, 50, 0.9),
    "min_p_sampling(min_p=0.1)": lambda x: min_p(x, 0.1),
    "argmax": lambda x: torch.argmax(x, -1),
    "multinomial only": lambda x: torch.multinomial(x, 1),
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=128256)
    args = parser.parse_args()
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(args.batch, args.vocab, device="cuda") * 3, -1)
    rows = []
    for name, fn in OPS.items():
        for _ in range(5):
            fn(probs)
        torch.cuda.synchronize()
        times = []
        for _ in range(9):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(50):
                fn(probs)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000 / 50)
        median = statistics.median(times)
        rows.append({"backend": "torch", "op": name, "batch": args.batch, "vocab": args.vocab,
                     "median_us": round(median, 2), "std_us": round(statistics.pstdev(times), 2),
                     "mechanism": "cuda_events, eager"})
        print(f"torch {name:34} B={args.batch} V={args.vocab}: {median:9.2f} us", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
