#!/usr/bin/env python3
"""A whole Llama-3.1-8B decode step's memory-bound ops, Kiln against FlashInfer and PyTorch (issue 17).

    PYTHONPATH=$(bash bench/python_gpu.sh site) /opt/torch/.venv/bin/python bench/decode_step.py \
        --socket $KILN_SOCKET --out $OUT/decode-step.json

One step = LAYERS decoder layers (default 32, the model's) of, in order,

    fused add RMSNorm -> RoPE on q and k (Llama-3.1 scaling) -> append the new k, v to the paged
    KV cache -> batch_decode -> fused add RMSNorm -> silu_and_mul

then top_k_top_p sampling (k 50, p 0.9) over the 128 256-token vocabulary. The GEMMs between
them (qkv, o, gate/up, down, LM head) are left out: the step is what the kernel libraries being
compared serve. Shapes are the model's: hidden 4096, 32 query and 8 KV heads of 128, intermediate
14336, page size 16. Activations (hidden, residual, q, k, v, attention out, gate/up) are one
set of buffers reused by every layer, as a server's allocator reuses them; every layer has its own
KV cache and norm weights, so the step reads B x L x 32 layers of KV from HBM, not from L2.

Backends, each a whole step captured in one CUDA graph, replayed REPS times between CUDA events
(median, spread and minimum per step; bench/compare_torch.py's time_calls):
  - kiln: the kiln package (every output given, nothing allocated), programmatic dependent
    launch as the process' KILN_PDL says (on by default on sm_90);
  - kiln_pdl_off: the same in a child process with KILN_PDL=0 (--no-pdl-off leaves it out);
  - flashinfer: its rmsnorm/fused_add_rmsnorm, apply_llama31_rope_pos_ids_inplace,
    append_paged_kv_cache, BatchDecodeWithPagedKVCacheWrapper (use_tensor_cores=True, planned
    once), silu_and_mul and top_k_top_p_sampling_from_probs, on the same paged caches as Kiln
    (bench/flashinfer_peer.py; absent when it does not import, --no-flashinfer);
  - torch: eager PyTorch as a static-cache server runs it: F.rms_norm, the cos/sin-cache
    rotation, index_put of the new token into a dense cache [B, Hk, L, D] per layer, SDPA
    (enable_gqa), F.silu * up, and the sort/cumsum sampler of bench/sampling/torch_baseline.py.

Correctness first: one layer of every backend (layer 0, the same starting activations) is
compared with PyTorch's within twice the GPU tests' tolerances (rotated q and k, the attention
output with batch_decode's long-context tolerance, the normed hidden states, the residual, the
activation), and Kiln's and FlashInfer's draws must lie in the float64 allowed sets of the
probabilities; a backend that fails is reported and not timed, and the exit status is 1.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import importlib.util

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))


def load_compare_torch():
    """bench/compare_torch.py as a module: its inputs, references, peers and timing are reused."""
    spec = importlib.util.spec_from_file_location("kiln_bench_compare_torch", os.path.join(BENCH_DIR, "compare_torch.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CT = load_compare_torch()  # exits with its message when the kiln package cannot be imported
kiln, torch, F, FI = CT.kiln, CT.torch, CT.F, CT.FI

HIDDEN, Q_HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE, VOCAB = 4096, 32, 8, 128, 14336, 128256
PAGE_SIZE = 16
TOP_K, TOP_P, SEED = 50, 0.9, 0x5EED
DEFAULT_CASES = "1x8192,16x8192,64x4096"  # batch x KV length (after this step's token)


class Step:
    """One case's tensors: the shared activations, the page table, and per layer the paged KV
    cache and two norm weights (the dense PyTorch caches are made only for its run)."""

    def __init__(self, batch, kv_len, layers, dtype, seed):
        self.batch, self.kv_len, self.layers, self.dtype = batch, kv_len, layers, dtype
        gen = torch.Generator(device="cuda").manual_seed(seed)
        pages = batch * -(-kv_len // PAGE_SIZE)
        self.axes = {"batch": batch, "kv_len": kv_len, "page_size": PAGE_SIZE, "num_pages": pages,
                     "nnz_pages": pages, "indptr_len": batch + 1, "num_qo_heads": Q_HEADS,
                     "num_kv_heads": KV_HEADS, "head_dim": HEAD_DIM}
        self.table = CT.PAGED.PagedTable(self.axes, seed=seed)
        batch_indices, positions = CT.PAGED.append_tokens(self.table, batch)  # position kv_len - 1 of each
        u = lambda shape: CT.uniform(shape, dtype, gen)  # noqa: E731
        self.start = {"hidden": u((batch, HIDDEN)), "residual": u((batch, HIDDEN)),
                      "q": u((batch, Q_HEADS, HEAD_DIM)), "k": u((batch, KV_HEADS, HEAD_DIM)),
                      "v": u((batch, KV_HEADS, HEAD_DIM)), "gate_up": u((batch, 2 * INTERMEDIATE))}
        self.t = {k: v.clone() for k, v in self.start.items()}
        self.t.update({
            "attn": torch.empty(batch, Q_HEADS, HEAD_DIM, dtype=dtype, device="cuda"),
            "lse": torch.empty(batch, Q_HEADS, dtype=torch.float32, device="cuda"),
            "act": torch.empty(batch, INTERMEDIATE, dtype=dtype, device="cuda"),
            "samples": torch.full((batch,), -1, dtype=torch.int32, device="cuda"),
            "positions": torch.tensor(positions, dtype=torch.int64, device="cuda"),
            "positions32": CT.int32(positions), "batch_indices": CT.int32(batch_indices),
            "kv_indptr": CT.int32(self.table.indptr), "kv_indices": CT.int32(self.table.indices),
            "kv_last_page_len": CT.int32(self.table.last),
            "top_k": torch.full((batch,), TOP_K, dtype=torch.int32, device="cuda"),
            "top_p": torch.full((batch,), TOP_P, dtype=torch.float32, device="cuda"),
            # the LM head's output as torch_baseline's rows: softmax(3 z), mass on a few thousand tokens
            "probs": torch.softmax(torch.randn(batch, VOCAB, device="cuda", generator=gen, dtype=torch.float64) * 3,
                                   dim=-1).float()})
        shape = (pages, PAGE_SIZE, KV_HEADS, HEAD_DIM)
        self.k_cache = [u(shape) for _ in range(layers)]
        self.v_cache = [u(shape) for _ in range(layers)]
        self.norm1 = [u((HIDDEN,)) for _ in range(layers)]
        self.norm2 = [u((HIDDEN,)) for _ in range(layers)]
        self.rope_cache = CT.cos_sin_table(CT.ROPE_MAX_POSITION, HEAD_DIM, "cuda")
        self.rows = torch.tensor(self.table.rows(), dtype=torch.int64, device="cuda")
        self.k_dense = self.v_dense = None

    def reset(self):
        """The starting activations again (a check's layer ran in place on them)."""
        for k, v in self.start.items():
            self.t[k].copy_(v)

    def make_dense(self, layers):
        """PyTorch's caches [B, Hk, L, D] for the first `layers` layers: the paged caches' contents."""
        d = lambda cache: CT.SDPA.dense_kv(cache, self.rows, self.batch, self.kv_len)  # noqa: E731
        self.k_dense = [d(self.k_cache[i]) for i in range(layers)]
        self.v_dense = [d(self.v_cache[i]) for i in range(layers)]

    def drop_dense(self):
        self.k_dense = self.v_dense = None
        torch.cuda.empty_cache()

    def kv_bytes(self):
        return 2 * self.layers * self.batch * self.kv_len * KV_HEADS * HEAD_DIM * torch.finfo(self.dtype).bits // 8


# ---- the backends: one layer, and the sampler after the last -----------------------------------
# A layer function takes the step, the layer index and `keep` (a dict, or None): when given, it
# stores clones of the intermediate results a check compares.


def kept(keep, name, value):
    if keep is not None:
        keep[name] = value.clone()


class KilnBackend:
    def __init__(self, s):
        self.plan = kiln.BatchDecodePlan(s.table.indptr, s.table.last, Q_HEADS, KV_HEADS, HEAD_DIM, PAGE_SIZE,
                                         s.dtype, sm_scale=0.0, logits_soft_cap=0.0, window_left=-1, device=-1)
        self.llama31 = kiln.Llama31RopeScaling(**CT.ROPE_LLAMA31)

    def layer(self, s, i, keep=None):
        t = s.t
        kiln.fused_add_rms_norm(t["hidden"], t["residual"], s.norm1[i], CT.EPS)
        kiln.apply_rope(t["q"], t["k"], t["positions"], rotary_dim=0, interleaved=False, theta=CT.ROPE_THETA,
                        llama31=self.llama31)
        kept(keep, "q", t["q"]), kept(keep, "k", t["k"])
        kiln.append_paged_kv(s.k_cache[i], s.v_cache[i], t["k"], t["v"], t["batch_indices"], t["positions32"],
                             t["kv_indptr"], t["kv_indices"], t["kv_last_page_len"])
        kiln.batch_decode(self.plan, t["q"], s.k_cache[i], s.v_cache[i], t["kv_indptr"], t["kv_indices"],
                          t["kv_last_page_len"], out=t["attn"], lse=t["lse"])
        kept(keep, "attn", t["attn"])
        kiln.fused_add_rms_norm(t["attn"].view(s.batch, HIDDEN), t["residual"], s.norm2[i], CT.EPS)
        kept(keep, "hidden", t["attn"].view(s.batch, HIDDEN)), kept(keep, "residual", t["residual"])
        kiln.silu_and_mul(t["gate_up"], out=t["act"])
        kept(keep, "act", t["act"])

    def sample(self, s):
        t = s.t
        kiln.top_k_top_p_sampling(t["probs"], t["top_k"], t["top_p"], seed=SEED, offset=0, samples=t["samples"])
        return t["samples"]


class FlashInferBackend:
    def __init__(self, s):
        self.decode = FI.DecodePeer(torch, s.t, s.axes, s.dtype)
        self.rope = FI.apply_rope_llama31(CT.ROPE_THETA, CT.ROPE_LLAMA31)["flashinfer"]
        self.sampler = FI.sampler("top_k_top_p_sampling", ("top_k", "top_p"), SEED)["flashinfer"]
        self.fi = FI.flashinfer

    def layer(self, s, i, keep=None):
        t, fi = s.t, self.fi
        fi.fused_add_rmsnorm(t["hidden"], t["residual"], s.norm1[i], CT.EPS)
        self.rope(t)
        kept(keep, "q", t["q"]), kept(keep, "k", t["k"])
        fi.append_paged_kv_cache(t["k"], t["v"], t["batch_indices"], t["positions32"], (s.k_cache[i], s.v_cache[i]),
                                 t["kv_indices"], t["kv_indptr"], t["kv_last_page_len"])
        attn = self.decode.wrapper.run(t["q"], (s.k_cache[i], s.v_cache[i]))
        kept(keep, "attn", attn)
        hidden = attn.view(s.batch, HIDDEN)
        fi.fused_add_rmsnorm(hidden, t["residual"], s.norm2[i], CT.EPS)
        kept(keep, "hidden", hidden), kept(keep, "residual", t["residual"])
        act = fi.silu_and_mul(t["gate_up"])
        kept(keep, "act", act)

    def sample(self, s):
        return self.sampler(s.t)[0]


class TorchBackend:
    """Eager PyTorch with a dense static cache per layer (Step.make_dense first)."""

    def __init__(self, s):
        self.arange = torch.arange(s.batch, device="cuda")

    def layer(self, s, i, keep=None):
        t = s.t
        r = t["hidden"] + t["residual"]  # one rounding, as the fused ops store the residual
        F.rms_norm(r, (HIDDEN,), s.norm1[i], CT.EPS)  # the next op reads q, k, v: its GEMM is left out
        q, k = CT.torch_rope_cached(t["q"], t["k"], t["positions"], s.rope_cache)
        kept(keep, "q", q), kept(keep, "k", k)
        pos = t["positions"]
        s.k_dense[i][self.arange, :, pos] = k
        s.v_dense[i][self.arange, :, pos] = t["v"]
        attn = CT.SDPA.sdpa_decode(q, s.k_dense[i], s.v_dense[i])
        kept(keep, "attn", attn)
        r = attn.reshape(s.batch, HIDDEN) + r
        hidden = F.rms_norm(r, (HIDDEN,), s.norm2[i], CT.EPS)
        kept(keep, "hidden", hidden), kept(keep, "residual", r)
        up = t["gate_up"]
        act = F.silu(up[:, :INTERMEDIATE]) * up[:, INTERMEDIATE:]
        kept(keep, "act", act)

    def sample(self, s):
        return CT.SAMPLERS.top_k_top_p(s.t["probs"], TOP_K, TOP_P).view(-1)


# Attention out: batch_decode's long-context tolerance (compare_torch's BatchDecode); the rest:
# twice the dtype's (two results each within it of the truth).
def tolerance(name, dtype):
    if name == "attn":
        abs_tol, rel_tol = CT.BatchDecode.OUT_TOLERANCE[dtype]
    else:
        abs_tol = rel_tol = CT.TOLERANCE["bf16" if dtype == torch.bfloat16 else "fp16"]
    return 2 * abs_tol, 2 * rel_tol


def check_layer(s, backend, reference):
    """(ok, detail): layer 0 of `backend` against PyTorch's `reference` results."""
    s.reset()
    got = {}
    backend.layer(s, 0, keep=got)
    torch.cuda.synchronize()
    s.reset()
    worst, bad = {}, []
    for name, want in reference.items():
        a, r = tolerance(name, s.dtype)
        diff = (got[name].double() - want.double()).abs()
        limit = a + r * want.double().abs()
        worst[name] = float(diff.max())
        if not bool((diff <= limit).all()) or not bool(torch.isfinite(got[name]).all()):
            bad.append(f"{name}: max |diff| {worst[name]:.3g} (limit {a:g} + {r:g}|x|)")
    return not bad, "; ".join(bad) if bad else "max |diff| " + ", ".join(f"{k} {v:.2g}" for k, v in worst.items())


def check_draws(s, tokens):
    mask = CT.allowed_mask("top_k_top_p", {"probs": s.t["probs"], "top_k": s.t["top_k"], "top_p": s.t["top_p"]})
    return CT.membership(tokens, mask)


def step_function(s, backend):
    def step(_):
        for i in range(s.layers):
            backend.layer(s, i)
        backend.sample(s)
    return step


def run_case(batch, kv_len, args, names):
    """The rows of one case for the backends `names` (kiln, flashinfer, torch, in that order)."""
    s = Step(batch, kv_len, args.layers, CT.TORCH_DTYPES[args.dtype], args.seed + batch * 100003 + kv_len)
    common = {"case": f"b{batch}xL{kv_len}", "batch": batch, "kv_len": kv_len, "layers": args.layers,
              "dtype": args.dtype, "gpu": torch.cuda.get_device_name(),
              "arch": "sm_%d%d" % torch.cuda.get_device_capability(),
              "kv_bytes_per_step": s.kv_bytes(), "kiln_pdl": os.environ.get("KILN_PDL", "unset (on)")}
    # PyTorch's layer 0 is the reference of every check.
    s.make_dense(1)
    torch_ref = TorchBackend(s)
    reference = {}
    s.reset()
    torch_ref.layer(s, 0, keep=reference)
    s.reset()
    s.drop_dense()

    rows, failed = [], []
    for name in names:
        if name == "flashinfer" and (args.no_flashinfer or FI.flashinfer is None):
            continue
        backend = {"kiln": KilnBackend, "flashinfer": FlashInferBackend, "torch": TorchBackend}[name](s)
        label = args.kiln_label if name == "kiln" else name
        checks = {}
        if name == "torch":
            s.make_dense(args.layers)
            checks["torch draws inside the allowed sets (reported only)"] = {
                "ok": True, "detail": check_draws(s, backend.sample(s))[1]}
        else:
            ok, detail = check_layer(s, backend, reference)
            checks["layer 0 vs torch"] = {"ok": ok, "detail": detail}
            ok, detail = check_draws(s, backend.sample(s))
            checks["draws inside the allowed sets"] = {"ok": ok, "detail": detail}
        if not all(c["ok"] for c in checks.values()):
            bad = "; ".join(f"{k}: {c['detail']}" for k, c in checks.items() if not c["ok"])
            print(f"REFCHECK FAILED {label} {common['case']}: {bad}", file=sys.stderr, flush=True)
            failed.append(f"{label} {common['case']}")
            rows.append(dict(common, backend=label, refcheck="FAIL", checks=checks))
            continue
        times, mechanism = CT.time_calls(step_function(s, backend), 1, args.reps)
        s.reset()
        median = statistics.median(times)
        rows.append(dict(common, backend=label, median_us=round(median, 2),
                         std_us=round(statistics.stdev(times), 2) if len(times) > 1 else 0.0,
                         min_us=round(min(times), 2), reps=args.reps, mechanism=mechanism,
                         per_layer_us=round(median / args.layers, 3),
                         kv_gbps=round(s.kv_bytes() / (median * 1e3), 1), refcheck="pass", checks=checks))
        del backend
        s.drop_dense()
    del s
    torch.cuda.empty_cache()
    return rows, failed


def parse_cases(text):
    cases = []
    for item in text.split(","):
        try:
            batch, kv_len = (int(x) for x in item.lower().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"--cases: '{item}' is not BATCHxKV_LEN (e.g. 16x8192)") from None
        if batch < 1 or kv_len < 1:
            raise argparse.ArgumentTypeError(f"--cases: '{item}': batch and KV length must be at least 1")
        cases.append((batch, kv_len))
    return cases


def pdl_off_rows(args):
    """Kiln's rows from a child process with KILN_PDL=0 (the switch is read once per process)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "pdl-off.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--backends", "kiln", "--no-pdl-off", "--kiln-label",
               "kiln_pdl_off", "--cases", args.cases_text, "--layers", str(args.layers), "--reps", str(args.reps),
               "--dtype", args.dtype, "--seed", str(args.seed), "--out", out]
        if args.socket:
            cmd += ["--socket", args.socket]
        done = subprocess.run(cmd, env=dict(os.environ, KILN_PDL="0"), check=False)
        if not os.path.exists(out):
            return [], [f"the KILN_PDL=0 run exited {done.returncode} without rows"]
        with open(out) as f:
            result = json.load(f)
        return result["rows"], result["meta"]["failures"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--socket", help="kilnd's socket (default: the kiln package's choice, KILN_SOCKET / KILN_MODE)")
    parser.add_argument("--cases", default=DEFAULT_CASES, help=f"comma list of BATCHxKV_LEN (default {DEFAULT_CASES})")
    parser.add_argument("--layers", type=int, default=32, help="decoder layers per step (default 32, Llama-3.1-8B's)")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    parser.add_argument("--backends", default="kiln,flashinfer,torch", help="comma list of kiln, flashinfer, torch")
    parser.add_argument("--reps", type=int, default=20, help="graph replays timed per backend")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--out", help="JSON file for the rows")
    parser.add_argument("--no-flashinfer", action="store_true", help="leave FlashInfer out even when it imports")
    parser.add_argument("--no-pdl-off", action="store_true", help="no KILN_PDL=0 child run of Kiln's step")
    parser.add_argument("--kiln-label", default="kiln", help=argparse.SUPPRESS)
    args = parser.parse_args()
    try:
        cases = parse_cases(args.cases)
    except argparse.ArgumentTypeError as e:
        parser.error(str(e))
    args.cases_text = args.cases
    names = args.backends.split(",")
    unknown = set(names) - {"kiln", "flashinfer", "torch"}
    if unknown or args.layers < 1 or args.reps < 2:
        parser.error(f"--backends: unknown {', '.join(sorted(unknown))}" if unknown else
                     "--layers must be at least 1 and --reps at least 2")

    CT.start_run(args.socket, "decode_step.py")
    flashinfer_note = CT.flashinfer_note(args.no_flashinfer)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, flashinfer {flashinfer_note}, kiln "
          f"{kiln.version()} ({kiln.describe_mode()}), KILN_PDL={os.environ.get('KILN_PDL', 'unset (on)')}",
          flush=True)
    rows, failures = [], []
    for batch, kv_len in cases:
        case_rows, failed = run_case(batch, kv_len, args, names)
        rows += case_rows
        failures += failed
        for r in case_rows:
            if "median_us" in r:
                print(f"{r['case']:14} {r['backend']:14} {r['median_us']:10.1f} us/step (std {r['std_us']:.1f}, "
                      f"min {r['min_us']:.1f}); {r['per_layer_us']:.2f} us/layer; KV {r['kv_gbps']:.0f} GB/s",
                      flush=True)
    if "kiln" in names and not args.no_pdl_off:
        off_rows, off_failures = pdl_off_rows(args)
        rows += off_rows
        failures += off_failures
    # Ratios to Kiln (PDL on) per case: above 1, Kiln's step is faster.
    kiln_us = {r["case"]: r["median_us"] for r in rows if r["backend"] == "kiln" and "median_us" in r}
    for r in rows:
        if "median_us" in r and r["case"] in kiln_us:
            r["time_vs_kiln"] = round(r["median_us"] / kiln_us[r["case"]], 3)
    if args.kiln_label == "kiln":
        print(f"{'case':14} {'backend':14} {'us/step':>10} {'vs kiln':>8}")
        for r in rows:
            if "median_us" in r:
                print(f"{r['case']:14} {r['backend']:14} {r['median_us']:10.1f} {r.get('time_vs_kiln', 0):8.3f}")
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "torch": torch.__version__, "flashinfer": flashinfer_note,
            "kiln": kiln.version(), "kiln_mode": kiln.describe_mode(), "gpu": torch.cuda.get_device_name(),
            "command": " ".join(sys.argv), "failures": failures,
            "step": f"{args.layers} layers x (fused_add_rms_norm, apply_rope (Llama-3.1), append_paged_kv, "
                    f"batch_decode, fused_add_rms_norm, silu_and_mul) + top_k_top_p_sampling (k {TOP_K}, p {TOP_P})",
            "time_vs_kiln": "backend median / kiln (PDL on) median: above 1, Kiln is faster"}
    CT.write_rows(args.out, meta, rows)
    print(f"# {len(rows)} rows, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
