"""bench/decode/paged_table.py: the page table of compare_torch.py's decode cases (plain Python)."""
import unittest

from bench_modules import load

paged = load("decode/paged_table.py")


def axes(batch, kv_len, page_size, num_pages, nnz_pages, indptr_len, **more):
    return dict(batch=batch, kv_len=kv_len, page_size=page_size, num_pages=num_pages, nnz_pages=nnz_pages,
                indptr_len=indptr_len, **more)


class PagedTableTest(unittest.TestCase):
    def test_layout(self):
        t = paged.PagedTable(axes(4, 50, 8, 40, 28, 5), seed=7)
        self.assertEqual(t.indptr, [0, 7, 14, 21, 28])
        self.assertEqual(t.last, [2, 2, 2, 2])  # 50 = 6 * 8 + 2
        self.assertEqual(len(set(t.indices)), 28)
        self.assertTrue(all(0 <= p < 40 for p in t.indices))
        self.assertNotEqual(t.indices, sorted(t.indices))  # scattered through the cache
        self.assertEqual(t.indices, paged.PagedTable(axes(4, 50, 8, 40, 28, 5), seed=7).indices)
        self.assertNotEqual(t.indices, paged.PagedTable(axes(4, 50, 8, 40, 28, 5), seed=8).indices)
        self.assertEqual(t.cache_row(2, 17), t.indices[2 * 7 + 2] * 8 + 1)
        rows = t.rows()
        self.assertEqual(len(rows), 200)
        self.assertEqual(len(set(rows)), 200)  # every position its own slot
        self.assertEqual(rows[50 + 3], t.cache_row(1, 3))

    def test_constraints_named(self):
        cases = [
            (axes(16, 32768, 16, 32768, 32768, 16), "indptr_len=16 must be batch + 1 = 17"),
            (axes(16, 32768, 16, 32768, 32767, 17), "nnz_pages=32767 must be batch * ceil(kv_len / page_size) = 32768"),
            (axes(16, 32768, 16, 1000, 32768, 17), "num_pages=1000 must be in [nnz_pages=32768, 2^31)"),
            ({"batch": 1}, "the case has no axis kv_len"),
        ]
        for a, message in cases:
            with self.subTest(message=message):
                with self.assertRaises(paged.TableError) as e:
                    paged.PagedTable(a, seed=0)
                self.assertEqual(str(e.exception), message)

    def test_append_tokens(self):
        t = paged.PagedTable(axes(3, 21, 4, 25, 18, 4), seed=1)
        self.assertEqual(paged.append_tokens(t, 6), ([0, 0, 1, 1, 2, 2], [19, 20, 19, 20, 19, 20]))
        self.assertEqual(paged.append_tokens(t, 3)[1], [20, 20, 20])
        self.assertEqual(paged.append_tokens(t, 63)[1][:2], [0, 1])
        with self.assertRaisesRegex(paged.TableError, "nnz=7 must be a positive multiple of batch=3"):
            paged.append_tokens(t, 7)
        with self.assertRaisesRegex(paged.TableError, "22 new tokens per request exceed kv_len=21"):
            paged.append_tokens(t, 66)

    def test_bytes_match_kiln_bench(self):
        # The figures tests/bench/op/decode_sampling_routines_test.cpp checks for kiln-bench.
        decode = dict(batch=64, kv_len=8192, num_qo_heads=32, num_kv_heads=8, head_dim=128, nnz_pages=32768)
        self.assertEqual(paged.decode_bytes(decode, 2), 2147483648 + 1048576 + 8192 + 4 * (65 + 32768 + 64))
        append = dict(nnz=64, num_kv_heads=8, head_dim=128)
        self.assertEqual(paged.append_bytes(append, 2), 4 * 131072 + 24 * 64)


if __name__ == "__main__":
    unittest.main()
