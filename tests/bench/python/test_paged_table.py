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

    def test_ragged_layout(self):
        a = axes(40, 50, 8, 40 * 7, 0, 41, ragged=1)
        t = paged.PagedTable(a, seed=7)
        self.assertTrue(all(1 <= n <= 50 for n in t.lengths))
        self.assertGreater(len(set(t.lengths)), 1)
        self.assertEqual(t.lengths, paged.PagedTable(a, seed=7).lengths)  # reproducible
        self.assertNotEqual(t.lengths, paged.PagedTable(a, seed=8).lengths)
        # The page shuffle is the uniform mode's for the same seed: only the lengths are drawn.
        uniform = paged.PagedTable(axes(40, 50, 8, 40 * 7, 40 * 7, 41), seed=7)
        self.assertEqual(t.indices, uniform.indices[:t.nnz_pages])
        self.assertEqual(t.pages, [-(-n // 8) for n in t.lengths])
        self.assertEqual(t.indptr[0], 0)
        self.assertEqual([t.indptr[b + 1] - t.indptr[b] for b in range(40)], t.pages)
        self.assertEqual(t.nnz_pages, t.indptr[-1])
        self.assertEqual(len(t.indices), t.nnz_pages)
        self.assertEqual(len(set(t.indices)), t.nnz_pages)
        self.assertEqual(t.last, [n - (p - 1) * 8 for n, p in zip(t.lengths, t.pages)])
        self.assertTrue(all(1 <= last <= 8 for last in t.last))
        # nnz_pages left out, 0, or the computed count are all accepted.
        self.assertEqual(paged.PagedTable({k: v for k, v in a.items() if k != "nnz_pages"}, seed=7).indices, t.indices)
        self.assertEqual(paged.PagedTable(dict(a, nnz_pages=t.nnz_pages), seed=7).indices, t.indices)

    def test_ragged_rows(self):
        t = paged.PagedTable(axes(6, 37, 4, 60, 0, 7, ragged=1), seed=3)
        rows = t.rows()
        self.assertEqual(len(rows), sum(t.lengths))
        self.assertEqual(len(set(rows)), len(rows))  # every position its own slot
        i = 0
        for b, n in enumerate(t.lengths):
            own = t.indices[t.indptr[b]:t.indptr[b + 1]]
            for pos in range(n):
                self.assertEqual(rows[i], own[pos // 4] * 4 + pos % 4)  # inside request b's pages
                i += 1
        with self.assertRaisesRegex(paged.TableError, f"position {t.lengths[0]} outside request 0's"):
            t.cache_row(0, t.lengths[0])

    def test_ragged_constraints(self):
        t = paged.PagedTable(axes(16, 1000, 16, 1024, 0, 17, ragged=1), seed=5)
        small = t.nnz_pages - 1
        with self.assertRaises(paged.TableError) as e:
            paged.PagedTable(axes(16, 1000, 16, small, 0, 17, ragged=1), seed=5)
        self.assertEqual(str(e.exception),
                         f"num_pages={small} must be in [nnz_pages={t.nnz_pages}, 2^31) (the pages of the drawn "
                         "lengths; batch * ceil(kv_len / page_size) = 1008 fits every seed)")
        with self.assertRaisesRegex(paged.TableError, f"nnz_pages=1008: a ragged case's pages follow the drawn "
                                                      f"lengths \\({t.nnz_pages} with this seed\\)"):
            paged.PagedTable(axes(16, 1000, 16, 1024, 1008, 17, ragged=1), seed=5)
        with self.assertRaisesRegex(paged.TableError, "ragged=2 must be 0"):
            paged.PagedTable(axes(16, 1000, 16, 1024, 0, 17, ragged=2), seed=5)
        with self.assertRaisesRegex(paged.TableError, "the case has no axis kv_len"):
            paged.PagedTable({"batch": 1, "ragged": 1}, seed=5)
        # ragged=0 is the uniform mode: nnz_pages required and checked.
        with self.assertRaisesRegex(paged.TableError, "the case has no axis nnz_pages"):
            paged.PagedTable(axes(16, 1000, 16, 1024, 0, 17, ragged=0), seed=5)

    def test_ragged_append_tokens(self):
        t = paged.PagedTable(axes(5, 30, 4, 40, 0, 6, ragged=1), seed=2)
        shortest = min(t.lengths)
        batch_indices, positions = paged.append_tokens(t, 5 * shortest)
        self.assertEqual(batch_indices, [b for b in range(5) for _ in range(shortest)])
        self.assertEqual(positions, [pos for n in t.lengths for pos in range(n - shortest, n)])
        with self.assertRaisesRegex(paged.TableError, f"nnz / batch = {shortest + 1} new tokens per request exceed "
                                                      f"the shortest request's {shortest} positions"):
            paged.append_tokens(t, 5 * (shortest + 1))

    def test_ragged_bytes(self):
        a = dict(axes(32, 16384, 16, 32768, 0, 33, ragged=1), num_qo_heads=32, num_kv_heads=8, head_dim=128)
        t = paged.PagedTable(a, seed=11)
        kv = 2 * sum(t.lengths) * 8 * 128 * 2
        self.assertEqual(paged.decode_bytes(a, 2, t), kv + 2 * 32 * 32 * 128 * 2 + 4 * 32 * 32 + 4 * (65 + t.nnz_pages))
        with self.assertRaisesRegex(paged.TableError, "pass its table"):
            paged.decode_bytes(a, 2)
        # A uniform case counts the same with its table as without.
        u = dict(batch=64, kv_len=8192, num_qo_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                 num_pages=32768, nnz_pages=32768, indptr_len=65)
        self.assertEqual(paged.decode_bytes(u, 2, paged.PagedTable(u, seed=0)), paged.decode_bytes(u, 2))

    def test_bytes_match_kiln_bench(self):
        # The figures tests/bench/op/decode_sampling_routines_test.cpp checks for kiln-bench.
        decode = dict(batch=64, kv_len=8192, num_qo_heads=32, num_kv_heads=8, head_dim=128, nnz_pages=32768)
        self.assertEqual(paged.decode_bytes(decode, 2), 2147483648 + 1048576 + 8192 + 4 * (65 + 32768 + 64))
        append = dict(nnz=64, num_kv_heads=8, head_dim=128)
        self.assertEqual(paged.append_bytes(append, 2), 4 * 131072 + 24 * 64)


if __name__ == "__main__":
    unittest.main()
