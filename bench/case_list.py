"""A kiln-bench test list read as cases (plain Python, no torch): lines `<trace name> <dtype>
<axis=value,...> [backends] [label]`, `#` to the end of a line a comment. bench/compare_torch.py
takes its --list cases from here; tests/bench/python/test_case_lists.py checks the repository's
lists against the trace definitions.
"""


class CaseListError(ValueError):
    pass


def read_cases(path, trace_name=None):
    """The cases of the list at `path` (those of `trace_name` only, when given), as trace
    examples: {"trace", "name", "axes", "dtype"}; the label defaults to the axes text."""
    cases = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            if len(fields) < 3:
                raise CaseListError(f"{path}:{number}: expected '<trace> <dtype> <axes> [backends] [label]', "
                                    f"found '{line.strip()}'")
            if trace_name is not None and fields[0] != trace_name:
                continue
            axes = {}
            for item in fields[2].split(","):
                key, sep, value = item.partition("=")
                if not sep or not key or not value.lstrip("-").isdigit():
                    raise CaseListError(f"{path}:{number}: axis '{item}' is not name=integer")
                axes[key] = int(value)
            label = fields[4] if len(fields) > 4 else fields[2]
            cases.append({"trace": fields[0], "name": label, "axes": axes, "dtype": fields[1]})
    return cases
