"""bench/kernels_ab_summary.py, the table of a kernel-tree A/B: medians over a side's runs, B / A
per case and its geometric mean, refcheck failures and cases one side lacks named, and bad
arguments refused. kiln-bench JSON written here by hand in its format (meta + rows)."""
import json
import os
import tempfile
import unittest

from bench_modules import load

summary = load("kernels_ab_summary.py")


def row(label, median_us, refcheck="pass", status="ok", routine="fp8_gemm"):
    return {"label": label, "backend": "kiln", "routine": routine, "shape": "m=1", "median_us": median_us,
            "refcheck": refcheck, "status": status}


class KernelsAbSummaryTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, rows):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            json.dump({"meta": {}, "rows": rows}, f)
        return path

    def test_medians_ratios_and_geomean(self):
        a1 = self.write("a1.json", [row("x", 100.0), row("y", 10.0)])
        a2 = self.write("a2.json", [row("x", 110.0), row("y", 12.0)])
        a3 = self.write("a3.json", [row("x", 90.0), row("y", 11.0)])
        b1 = self.write("b1.json", [row("x", 80.0), row("y", 22.0)])
        text = summary.table(summary.load([f"a={a1}", f"a={a2}", f"a={a3}", f"b={b1}"]))
        self.assertIn("| x | fp8_gemm | kiln | 100.00 | 80.00 | 0.800 | pass / pass |", text)
        self.assertIn("| y | fp8_gemm | kiln | 11.00 | 22.00 | 2.000 | pass / pass |", text)
        # sqrt(0.8 * 2.0) = 1.265
        self.assertIn("geometric mean of B / A over 2 cases whose refchecks passed: 1.265", text)

    def test_missing_and_failed_cases_are_named(self):
        a = self.write("a.json", [row("x", 100.0), row("only-a", 5.0)])
        b = self.write("b.json", [row("x", 90.0, refcheck="FAIL"), row("broken", None, refcheck="", status="error")])
        text = summary.table(summary.load([f"a={a}", f"b={b}"]))
        self.assertIn("| x | fp8_gemm | kiln | 100.00 | 90.00 | 0.900 (unchecked) | pass / FAIL |", text)
        self.assertIn("| only-a | fp8_gemm | kiln | 5.00 | missing | n/a | pass / none |", text)
        self.assertIn("| broken | fp8_gemm | kiln | missing | missing | n/a | none / error |", text)
        # A failed refcheck keeps its case out of the geometric mean: no case is left for one.
        self.assertNotIn("geometric mean", text)
        # A peer's row (refcheck "baseline") counts.
        a2 = self.write("a2.json", [row("peer", 10.0, refcheck="baseline")])
        b2 = self.write("b2.json", [row("peer", 11.0, refcheck="baseline")])
        text = summary.table(summary.load([f"a={a2}", f"b={b2}"]))
        self.assertIn("| peer | fp8_gemm | kiln | 10.00 | 11.00 | 1.100 | baseline / baseline |", text)
        self.assertIn("over 1 cases whose refchecks passed: 1.100", text)

    def test_one_label_under_two_routines_is_two_cases(self):
        # bench/gemm/fp8.list and llama31_8b.list share their labels: one list may hold both.
        a = self.write("a.json", [row("qkv", 100.0), row("qkv", 150.0, routine="gemm")])
        b = self.write("b.json", [row("qkv", 90.0), row("qkv", 150.0, routine="gemm")])
        text = summary.table(summary.load([f"a={a}", f"b={b}"]))
        self.assertIn("| qkv | fp8_gemm | kiln | 100.00 | 90.00 | 0.900 | pass / pass |", text)
        self.assertIn("| qkv | gemm | kiln | 150.00 | 150.00 | 1.000 | pass / pass |", text)
        # The same case twice in one run is refused, not taken for two runs.
        twice = self.write("twice.json", [row("qkv", 100.0), row("qkv", 120.0)])
        with self.assertRaises(SystemExit) as raised:
            summary.load([f"a={twice}"])
        self.assertIn("two rows for case 'qkv', routine 'fp8_gemm', backend 'kiln'", str(raised.exception))

    def test_bad_arguments_are_refused(self):
        with self.assertRaises(SystemExit) as raised:
            summary.load(["c=whatever.json"])
        self.assertIn("expected a=PATH or b=PATH, found 'c=whatever.json'", str(raised.exception))
        with self.assertRaises(SystemExit):
            summary.load(["no-side.json"])
        truncated = os.path.join(self.dir.name, "cut.json")
        with open(truncated, "w") as f:
            f.write('{"meta": {}, "rows": [')
        for path in (truncated, os.path.join(self.dir.name, "absent.json")):
            with self.assertRaises(SystemExit) as raised:
                summary.load([f"a={path}"])
            self.assertIn(f"cannot read {path}", str(raised.exception))


if __name__ == "__main__":
    unittest.main()
