"""The paged KV cache of the decode benchmarks, from the axes of the trace definitions
(kernels/traces/batch_decode.json, append_paged_kv.json), as their notes describe it: every
request holds kv_len positions in ceil(kv_len / page_size) pages taken in order from a shuffled
pool of num_pages page ids, its last page holding the rest. The same layout as kiln-bench's
(bench/op/paged_kv_table.h); plain Python (no torch), tested by
tests/bench/python/test_paged_table.py.
"""
import random

INT32_MAX = 2**31 - 1


class TableError(ValueError):
    pass


class PagedTable:
    """kv_indptr [batch + 1], kv_indices [nnz_pages], kv_last_page_len [batch] as lists."""

    def __init__(self, axes, seed):
        for axis in ("batch", "kv_len", "page_size", "num_pages", "nnz_pages", "indptr_len"):
            if axes.get(axis, 0) < 1:
                raise TableError(f"the case has no axis {axis}")
        self.batch, self.kv_len, self.page_size = axes["batch"], axes["kv_len"], axes["page_size"]
        self.num_pages, nnz_pages = axes["num_pages"], axes["nnz_pages"]
        if axes["indptr_len"] != self.batch + 1:
            raise TableError(f"indptr_len={axes['indptr_len']} must be batch + 1 = {self.batch + 1}")
        if self.kv_len > INT32_MAX:
            raise TableError(f"kv_len={self.kv_len}: positions must fit int32")
        self.pages_per_request = -(-self.kv_len // self.page_size)
        if nnz_pages != self.batch * self.pages_per_request:
            raise TableError(f"nnz_pages={nnz_pages} must be batch * ceil(kv_len / page_size) = "
                             f"{self.batch * self.pages_per_request}")
        if self.num_pages < nnz_pages or self.num_pages > INT32_MAX:
            raise TableError(f"num_pages={self.num_pages} must be in [nnz_pages={nnz_pages}, 2^31)")
        self.last_page_len = self.kv_len - (self.pages_per_request - 1) * self.page_size
        self.indptr = [b * self.pages_per_request for b in range(self.batch + 1)]
        self.last = [self.last_page_len] * self.batch
        pool = list(range(self.num_pages))
        random.Random(seed).shuffle(pool)
        self.indices = pool[:nnz_pages]

    def cache_row(self, b, pos):
        """page * page_size + slot of position pos of request b."""
        page = self.indices[b * self.pages_per_request + pos // self.page_size]
        return page * self.page_size + pos % self.page_size

    def rows(self):
        """The cache rows of every position, request by request ([batch * kv_len])."""
        return [self.cache_row(b, pos) for b in range(self.batch) for pos in range(self.kv_len)]


def append_tokens(table, nnz):
    """append_paged_kv's new tokens: the last nnz / batch positions of every request, in request
    order (a decode step appends one per request, a prefill all of them). Returns
    (batch_indices, positions)."""
    if nnz < 1 or nnz % table.batch:
        raise TableError(f"nnz={nnz} must be a positive multiple of batch={table.batch}")
    per = nnz // table.batch
    if per > table.kv_len:
        raise TableError(f"nnz / batch = {per} new tokens per request exceed kv_len={table.kv_len}")
    batch_indices = [i // per for i in range(nnz)]
    positions = [table.kv_len - per + i % per for i in range(nnz)]
    return batch_indices, positions


def decode_bytes(axes, element_size):
    """What one batch_decode call must move: K and V of every position read, q read, out and
    lse (fp32) written, the page table read (kiln-bench counts the same)."""
    b, hq, hk, d = axes["batch"], axes["num_qo_heads"], axes["num_kv_heads"], axes["head_dim"]
    kv = 2 * b * axes["kv_len"] * hk * d * element_size
    return kv + 2 * b * hq * d * element_size + 4 * b * hq + 4 * (2 * b + 1 + axes["nnz_pages"])


def append_bytes(axes, element_size):
    """k and v read, the same bytes written into the caches, 24 bytes of indices per token."""
    tokens = axes["nnz"] * axes["num_kv_heads"] * axes["head_dim"] * element_size
    return 4 * tokens + 24 * axes["nnz"]
