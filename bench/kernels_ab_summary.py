#!/usr/bin/env python3
"""The table of a kernel-tree A/B (bench/kernels_ab.sh): kiln-bench JSON files given as
SIDE=PATH (SIDE a or b, several runs a side), and per case (label, else shape), routine and
backend (so lists that share labels across routines, fp8_gemm's and gemm's, can run as one):
the median over a side's runs of each run's median µs, B / A (below 1: B faster), and
whether every run's refcheck passed. A case missing on one side, or failed there, is listed
with what is missing; the geometric mean of B / A is over the cases both sides ran with every
refcheck passed (or `baseline`: a peer's row, which has no check of its own): no speed figure
stands on a wrong result.

    python3 bench/kernels_ab_summary.py a=ab-a-1.json b=ab-b-1.json a=ab-a-2.json b=ab-b-2.json
"""
import json
import math
import statistics
import sys


# Refcheck values a row may count with: Kiln's checked result, or a peer's row (no check of its own).
CHECKED = {"pass", "baseline"}


def case_key(row):
    return row.get("label") or row.get("shape", "?"), row.get("routine", "?"), row.get("backend", "kiln")


def load(arguments):
    """{side: {case: {"us": [median per run], "refcheck": [..]}}} from SIDE=PATH arguments."""
    sides = {"a": {}, "b": {}}
    for argument in arguments:
        side, sep, path = argument.partition("=")
        if not sep or side not in sides:
            raise SystemExit(f"kernels_ab_summary: expected a=PATH or b=PATH, found {argument!r}")
        try:
            with open(path) as f:
                rows = json.load(f).get("rows", [])
        except (OSError, ValueError) as e:
            raise SystemExit(f"kernels_ab_summary: cannot read {path}: {e}")
        seen = set()
        for row in rows:
            key = case_key(row)
            # Two rows of one run under one key would be taken for two runs of one case.
            if key in seen:
                raise SystemExit(f"kernels_ab_summary: {path} has two rows for case {key[0]!r}, routine {key[1]!r}, "
                                 f"backend {key[2]!r}: give the list's rows distinct labels")
            seen.add(key)
            entry = sides[side].setdefault(key, {"us": [], "refcheck": []})
            if row.get("status") == "ok" and row.get("median_us") is not None:
                entry["us"].append(float(row["median_us"]))
            # A run that did not finish has no refcheck: its status stands there instead.
            entry["refcheck"].append(row.get("refcheck") or row.get("status") or "none")
    return sides


def table(sides):
    lines = ["| case | routine | backend | A µs | B µs | B / A | refcheck A / B |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    ratios = []
    for key in sorted(set(sides["a"]) | set(sides["b"])):
        a, b = sides["a"].get(key), sides["b"].get(key)
        cells = []
        for entry in (a, b):
            cells.append(f"{statistics.median(entry['us']):.2f}" if entry and entry["us"] else "missing")
        checks = []
        for entry in (a, b):
            checks.append("none" if not entry else ("pass" if all(c == "pass" for c in entry["refcheck"]) else
                                                    ",".join(sorted(set(entry["refcheck"])))))
        checked = all(entry and all(c in CHECKED for c in entry["refcheck"]) for entry in (a, b))
        ratio = "n/a"
        if a and b and a["us"] and b["us"]:
            r = statistics.median(b["us"]) / statistics.median(a["us"])
            ratio = f"{r:.3f}"
            if checked:
                ratios.append(r)
            else:
                ratio += " (unchecked)"
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {cells[0]} | {cells[1]} | {ratio} | {checks[0]} / {checks[1]} |")
    if ratios:
        geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        lines.append(f"\ngeometric mean of B / A over {len(ratios)} cases whose refchecks passed: {geomean:.3f}")
    return "\n".join(lines)


def main(argv):
    if not argv:
        raise SystemExit(__doc__)
    print(table(load(argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
