"""bench/sampling/allowed_set.py: the samplers' allowed sets in plain Python, on the hand-made row
of tests/bench/op/sampling_check_test.cpp (kiln-bench's C++ twin): the same answers."""
import math
import unittest

from bench_modules import load

allowed_set = load("sampling/allowed_set.py")

# Largest first: a 0.375 (token 1), b 0.1875 (tokens 3, 4), c 0.125 (7), d 0.078125 (0),
# e 0.046875 (8); 0.0, -1 and NaN never drawn. Mass above: a 0, b 0.375, c 0.75, d 0.875.
ROW = [0.078125, 0.375, 0.0, 0.1875, 0.1875, -1.0, math.nan, 0.125, 0.046875]


def size(rule, **params):
    return len(allowed_set.allowed(rule, ROW, **params))


class AllowedSetTest(unittest.TestCase):
    def test_top_k(self):
        self.assertEqual(allowed_set.allowed("top_k", ROW, top_k=2), [1, 3, 4])  # ties at the k-th kept
        self.assertEqual(size("top_k", top_k=1), 1)
        for k in (0, 9, 8, -3):  # no truncation: k <= 0, k >= vocab, more than the positive values
            self.assertEqual(size("top_k", top_k=k), 6)

    def test_top_p(self):
        self.assertEqual(size("top_p", top_p=0.25), 1)
        self.assertEqual(size("top_p", top_p=0.5), 3)
        self.assertEqual(size("top_p", top_p=0.75), 3)  # exactly 0.75 above c: not < 0.75
        self.assertEqual(allowed_set.threshold("top_p", ROW, top_p=0.76), 0.125)
        self.assertEqual(size("top_p", top_p=1.0), 6)
        self.assertEqual(size("top_p", top_p=0.0), 1)
        self.assertEqual(size("top_p", top_p=math.nan), 1)

    def test_top_k_top_p_and_min_p(self):
        self.assertEqual(size("top_k_top_p", top_k=3, top_p=0.6), 3)
        self.assertEqual(size("top_k_top_p", top_k=3, top_p=0.4), 1)
        self.assertEqual(size("top_k_top_p", top_k=5, top_p=1.0), 5)
        self.assertEqual(size("top_k_top_p", top_k=0, top_p=0.76), 4)
        self.assertEqual(allowed_set.threshold("min_p", ROW, min_p=0.3), allowed_set.fp32(0.3 * 0.375))
        self.assertEqual(size("min_p", min_p=0.3), 4)
        self.assertEqual(size("min_p", min_p=0.5), 3)
        self.assertEqual(size("min_p", min_p=0.0), 6)
        self.assertEqual(size("min_p", min_p=7.0), 1)

    def test_draws(self):
        for token in (1, 3, 4):
            self.assertEqual(allowed_set.check_draw("top_k", ROW, token, top_k=2), "")
        self.assertEqual(allowed_set.check_draw("top_k", ROW, 7, top_k=2),
                         "token 7 (value 0.125) is outside the allowed set (values >= 0.1875)")
        for token in (2, 5, 6, 9, -1):
            self.assertNotEqual(allowed_set.check_draw("top_k", ROW, token, top_k=2), "")
        zeros = [0.0] * 4
        self.assertIsNone(allowed_set.threshold("top_p", zeros, top_p=0.9))
        self.assertEqual(allowed_set.check_draw("top_p", zeros, 0, top_p=0.9), "")
        self.assertEqual(allowed_set.check_draw("top_p", zeros, 3, top_p=0.9),
                         "token 3: a row without a positive value must give 0")
        with self.assertRaisesRegex(ValueError, "rule 'top_q'"):
            allowed_set.threshold("top_q", ROW)


if __name__ == "__main__":
    unittest.main()
