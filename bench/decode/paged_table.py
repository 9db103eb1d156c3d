"""The paged KV cache of the decode benchmarks, from the axes of the trace definitions
(kernels/traces/batch_decode.json, append_paged_kv.json), as their notes describe it: every
request holds kv_len positions in ceil(kv_len / page_size) pages taken in order from a shuffled
pool of num_pages page ids, its last page holding the rest. The same layout as kiln-bench's
(bench/op/paged_kv_table.h); plain Python (no torch), tested by
tests/bench/python/test_paged_table.py.

Ragged batches (axis ragged=1, compare_torch.py only: kiln-bench has no such axis): request b
holds lengths[b] positions, drawn uniformly in [1, kv_len] (kv_len is then the longest a request
may be) from the seed, separately from the page shuffle; its pages are the next
ceil(lengths[b] / page_size) of the same shuffled pool. nnz_pages is then computed from the drawn
lengths (the case leaves it out, or gives 0); num_pages must hold them (batch * ceil(kv_len /
page_size) always does). Without the axis (or ragged=0) every request holds kv_len positions.
"""
import random

INT32_MAX = 2**31 - 1


class TableError(ValueError):
    pass


class PagedTable:
    """kv_indptr [batch + 1], kv_indices [nnz_pages], kv_last_page_len [batch] as lists, with
    each request's length (lengths) and page count (pages)."""

    def __init__(self, axes, seed):
        self.ragged = axes.get("ragged", 0)
        if self.ragged not in (0, 1):
            raise TableError(f"ragged={self.ragged} must be 0 (every request kv_len long) or 1 (lengths drawn "
                             "in [1, kv_len])")
        for axis in ("batch", "kv_len", "page_size", "num_pages", "nnz_pages", "indptr_len"):
            if axis == "nnz_pages" and self.ragged:
                continue  # computed from the drawn lengths
            if axes.get(axis, 0) < 1:
                raise TableError(f"the case has no axis {axis}")
        self.batch, self.kv_len, self.page_size = axes["batch"], axes["kv_len"], axes["page_size"]
        self.num_pages = axes["num_pages"]
        if axes["indptr_len"] != self.batch + 1:
            raise TableError(f"indptr_len={axes['indptr_len']} must be batch + 1 = {self.batch + 1}")
        if self.kv_len > INT32_MAX:
            raise TableError(f"kv_len={self.kv_len}: positions must fit int32")
        if self.ragged:
            # A generator of its own, so that the page shuffle below is the uniform mode's for
            # the same seed (a str seed is hashed the same way in every run: reproducible).
            draw = random.Random(f"ragged lengths {seed}")
            self.lengths = [draw.randint(1, self.kv_len) for _ in range(self.batch)]
        else:
            self.lengths = [self.kv_len] * self.batch
        self.pages = [-(-n // self.page_size) for n in self.lengths]
        self.indptr = [0]
        for n in self.pages:
            self.indptr.append(self.indptr[-1] + n)
        self.last = [n - (p - 1) * self.page_size for n, p in zip(self.lengths, self.pages)]
        self.nnz_pages = self.indptr[-1]
        given = axes.get("nnz_pages", 0)
        if self.ragged:
            if given and given != self.nnz_pages:
                raise TableError(f"nnz_pages={given}: a ragged case's pages follow the drawn lengths "
                                 f"({self.nnz_pages} with this seed); leave nnz_pages out")
        elif given != self.nnz_pages:
            raise TableError(f"nnz_pages={given} must be batch * ceil(kv_len / page_size) = {self.nnz_pages}")
        if self.num_pages < self.nnz_pages or self.num_pages > INT32_MAX:
            raise TableError(f"num_pages={self.num_pages} must be in [nnz_pages={self.nnz_pages}, 2^31)"
                             + (" (the pages of the drawn lengths; batch * ceil(kv_len / page_size) = "
                                f"{self.batch * -(-self.kv_len // self.page_size)} fits every seed)"
                                if self.ragged else ""))
        pool = list(range(self.num_pages))
        random.Random(seed).shuffle(pool)
        self.indices = pool[:self.nnz_pages]

    def cache_row(self, b, pos):
        """page * page_size + slot of position pos of request b."""
        if not 0 <= pos < self.lengths[b]:  # past the end it would be the next request's page
            raise TableError(f"position {pos} outside request {b}'s {self.lengths[b]}")
        page = self.indices[self.indptr[b] + pos // self.page_size]
        return page * self.page_size + pos % self.page_size

    def rows(self):
        """The cache rows of every position, request by request ([sum(lengths)])."""
        return [self.cache_row(b, pos) for b in range(self.batch) for pos in range(self.lengths[b])]


def append_tokens(table, nnz):
    """append_paged_kv's new tokens: the last nnz / batch positions of every request, in request
    order (a decode step appends one per request, a prefill all of them). Returns
    (batch_indices, positions)."""
    if nnz < 1 or nnz % table.batch:
        raise TableError(f"nnz={nnz} must be a positive multiple of batch={table.batch}")
    per = nnz // table.batch
    if per > table.kv_len:
        raise TableError(f"nnz / batch = {per} new tokens per request exceed kv_len={table.kv_len}")
    if per > min(table.lengths):  # ragged: every request must hold its new tokens
        raise TableError(f"nnz / batch = {per} new tokens per request exceed the shortest request's "
                         f"{min(table.lengths)} positions")
    batch_indices = [i // per for i in range(nnz)]
    positions = [table.lengths[i // per] - per + i % per for i in range(nnz)]
    return batch_indices, positions


def decode_bytes(axes, element_size, table=None):
    """What one batch_decode call must move: K and V of every position read, q read, out and
    lse (fp32) written, the page table read (kiln-bench counts the same). A ragged case needs its
    table (the drawn lengths and their pages); a uniform one counts the same with or without."""
    b, hq, hk, d = axes["batch"], axes["num_qo_heads"], axes["num_kv_heads"], axes["head_dim"]
    if table is not None:
        positions, nnz_pages = sum(table.lengths), table.nnz_pages
    elif axes.get("ragged", 0):
        raise TableError("a ragged case's bytes follow its drawn lengths: pass its table")
    else:
        positions, nnz_pages = b * axes["kv_len"], axes["nnz_pages"]
    kv = 2 * positions * hk * d * element_size
    return kv + 2 * b * hq * d * element_size + 4 * b * hq + 4 * (2 * b + 1 + nnz_pages)


def append_bytes(axes, element_size):
    """k and v read, the same bytes written into the caches, 24 bytes of indices per token."""
    tokens = axes["nnz"] * axes["num_kv_heads"] * axes["head_dim"] * element_size
    return 4 * tokens + 24 * axes["nnz"]
