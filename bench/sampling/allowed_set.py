"""The allowed set of a sampler for one row of probabilities, as kiln/ops/sampling.h defines it:
the tokens whose cleaned value (negatives and NaN count as 0; zeros are never drawn) is positive
and at least a threshold, ties at the threshold kept. Plain Python (no torch): the definition
that bench/compare_torch.py's vectorized check is compared with on a row of every case, and that
tests/bench/python/test_allowed_set.py checks; kiln-bench's C++ twin is bench/op/sampling_check.h.

    top_k        the k-th largest value (k <= 0 or k >= vocab: no truncation)
    top_p        the smallest value v with (sum of the values > v) < p * (row sum)
    top_k_top_p  top-p over the top-k set: (sum of the values > v) < p * (top-k mass)
    min_p        fp32(min_p * row max), min_p clamped to [0, 1]

p >= 1 is no top-p; p <= 0 (or NaN) keeps the largest value only.
"""
import math
import struct

RULES = ("top_k", "top_p", "top_k_top_p", "min_p")


def fp32(x):
    """x rounded to the nearest float32 (as the op rounds min_p * max)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def clean(x):
    return x if x > 0 else 0.0  # NaN > 0 is False


def threshold(rule, row, top_k=0, top_p=1.0, min_p=0.0):
    """The smallest allowed value of `row` (a list of floats), or None when the row has no
    positive value (the sampler gives token 0)."""
    if rule not in RULES:
        raise ValueError(f"rule {rule!r}: expected one of {', '.join(RULES)}")
    desc = sorted((v for v in map(clean, row) if v > 0), reverse=True)
    if not desc:
        return None
    vocab = len(row)

    def top_k_count():
        if top_k <= 0 or top_k >= vocab or top_k >= len(desc):
            return len(desc)
        kth, n = desc[top_k - 1], top_k
        while n < len(desc) and desc[n] == kth:
            n += 1
        return n

    def top_p_threshold(n, mass):
        if math.isnan(top_p) or top_p <= 0:
            return desc[0]
        if top_p >= 1:
            return desc[n - 1]
        limit, above, t, i = top_p * mass, 0.0, desc[0], 0
        while i < n and above < limit:
            t = desc[i]
            while i < n and desc[i] == t:
                above += desc[i]
                i += 1
        return t

    if rule == "top_k":
        return desc[top_k_count() - 1]
    if rule == "top_p":
        return top_p_threshold(len(desc), math.fsum(desc))
    if rule == "top_k_top_p":
        n = top_k_count()
        return top_p_threshold(n, math.fsum(desc[:n]))
    m = 0.0 if math.isnan(min_p) else min(max(min_p, 0.0), 1.0)
    return max(fp32(m * desc[0]), desc[-1])


def allowed(rule, row, **params):
    """The allowed token indices of `row`, sorted; [] for a row without positive values."""
    t = threshold(rule, row, **params)
    if t is None:
        return []
    return [i for i, v in enumerate(row) if clean(v) > 0 and clean(v) >= t]


def check_draw(rule, row, token, **params):
    """'' when `token` is a valid draw of `rule` from `row`, else why not."""
    t = threshold(rule, row, **params)
    if t is None:
        return "" if token == 0 else f"token {token}: a row without a positive value must give 0"
    if not 0 <= token < len(row):
        return f"token {token} is outside [0, {len(row)})"
    v = clean(row[token])
    if v > 0 and v >= t:
        return ""
    return f"token {token} (value {v:.7g}) is outside the allowed set (values >= {t:.7g})"
