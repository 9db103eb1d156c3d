"""The repository's kiln-bench test lists (bench/**/*.list) read by bench/case_list.py, as
compare_torch.py --list reads them: every line parses, names a trace definition of
kernels/traces, and gives only axes of that definition (ragged decode batches add `ragged`);
the decode and paged prefill lists' page tables build (bench/decode/paged_table.py)."""
import glob
import json
import os
import unittest

from bench_modules import BENCH_DIR, load

case_list = load("case_list.py")
paged_table = load("decode/paged_table.py")

TRACES_DIR = os.path.join(BENCH_DIR, "..", "kernels", "traces")
# Axes the benchmark tools add to a definition's own (bench/decode/paged_table.py).
EXTRA_AXES = {"batch_decode": {"ragged"}}


def lists():
    """Every test list; bench/fleet's are spec lists of another format (proto/spec_list.h)."""
    found = glob.glob(os.path.join(BENCH_DIR, "**", "*.list"), recursive=True)
    return sorted(p for p in found if os.path.relpath(p, BENCH_DIR).split(os.sep)[0] != "fleet")


class CaseListsTest(unittest.TestCase):
    def test_every_list_names_traces_and_their_axes(self):
        self.assertTrue(lists())
        for path in lists():
            for case in case_list.read_cases(path):
                with self.subTest(list=os.path.relpath(path, BENCH_DIR), case=case["name"]):
                    trace_path = os.path.join(TRACES_DIR, case["trace"] + ".json")
                    self.assertTrue(os.path.exists(trace_path), f"no trace definition {case['trace']}")
                    with open(trace_path) as f:
                        axes = set(json.load(f)["axes"]) | EXTRA_AXES.get(case["trace"], set())
                    self.assertLessEqual(set(case["axes"]), axes)
                    self.assertIn(case["dtype"], {"fp32", "fp16", "bf16", "fp8_e4m3", "int32"})

    def test_decode_lists_build_their_page_tables(self):
        for path in lists():
            # compare_torch's batch_prefill_paged takes the decode benchmarks' table too.
            for case in case_list.read_cases(path, "batch_decode") + case_list.read_cases(path, "batch_prefill_paged"):
                with self.subTest(list=os.path.relpath(path, BENCH_DIR), case=case["name"]):
                    table = paged_table.PagedTable(case["axes"], seed=1234)
                    self.assertEqual(len(table.lengths), case["axes"]["batch"])

    def test_small_batch_list_covers_every_wave1_op_at_1_to_16_tokens(self):
        cases = case_list.read_cases(os.path.join(BENCH_DIR, "op", "small_batch.list"))
        traces = {"rmsnorm", "fused_add_rmsnorm", "silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul", "apply_rope",
                  "apply_rope_with_cos_sin_cache", "append_paged_kv"}
        self.assertEqual({c["trace"] for c in cases}, traces)
        for trace in traces:
            for dtype in ("fp16", "bf16"):
                tokens = sorted(next(c["axes"][k] for k in ("rows", "tokens", "nnz") if k in c["axes"])
                                for c in cases if c["trace"] == trace and c["dtype"] == dtype)
                self.assertEqual(tokens, [1, 4, 16], f"{trace} {dtype}")

    def test_malformed_lines_are_refused_with_the_line(self):
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"kiln-case-list-{os.getpid()}.list")
        try:
            for text, says in (("rmsnorm bf16\n", ":1: expected"), ("rmsnorm bf16 rows=x\n", "axis 'rows=x'"),
                               ("# comment\nrmsnorm bf16 rows\n", ":2: axis 'rows'")):
                with open(path, "w") as f:
                    f.write(text)
                with self.assertRaises(case_list.CaseListError) as e:
                    case_list.read_cases(path)
                self.assertIn(says, str(e.exception))
        finally:
            os.remove(path)


if __name__ == "__main__":
    unittest.main()
