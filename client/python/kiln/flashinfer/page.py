"""flashinfer.page's names on Kiln's paged KV cache (kiln.append_paged_kv, docs/kernels-decode.md).

paged_kv_cache is FlashInfer's: a (k_cache, v_cache) tuple of [num_pages, page_size, kv_heads,
head_dim] tensors, or one [num_pages, 2, page_size, kv_heads, head_dim] tensor whose [:, 0] and
[:, 1] are the K and V caches (with page_size 1, one dim less). Kiln reads those views as they
are: its page stride is free, only the inside of a page must be dense. Kiln's layout is NHD;
kv_layout="HND" ([num_pages, kv_heads, page_size, head_dim]) is refused.

get_batch_indices_positions and get_seq_lens are index arithmetic, done with torch ops on the
arrays' device (no Kiln kernel, no host synchronization)."""
from .. import decode as _decode
from ._refuse import only


def check_kv_layout(api, kv_layout):
    only(api, "kv_layout", kv_layout, ("NHD",),
         "Kiln's paged KV cache is NHD ([num_pages, page_size, num_kv_heads, head_dim])")


def _page_size_one(x):
    # FlashInfer's shorthand for page_size 1: the page dim left out (NHD: it is dim -3).
    return x.unsqueeze(-3)


def unpack_paged_kv_cache(paged_kv_cache):
    """(k_cache, v_cache) [num_pages, page_size, kv_heads, head_dim] from FlashInfer's NHD forms."""
    if isinstance(paged_kv_cache, tuple):
        k_cache, v_cache = paged_kv_cache
        if len(k_cache.shape) == 3:
            k_cache, v_cache = _page_size_one(k_cache), _page_size_one(v_cache)
        return k_cache, v_cache
    if not hasattr(paged_kv_cache, "__dlpack__"):
        raise TypeError(f"paged_kv_cache: expected a tensor or a (k_cache, v_cache) tuple, found "
                        f"{type(paged_kv_cache).__name__}")
    if len(paged_kv_cache.shape) == 4:
        paged_kv_cache = _page_size_one(paged_kv_cache)
    return paged_kv_cache[:, 0], paged_kv_cache[:, 1]


def append_paged_kv_cache(append_key, append_value, batch_indices, positions, paged_kv_cache, kv_indices, kv_indptr,
                          kv_last_page_len, kv_layout="NHD"):
    """Writes append_key / append_value [nnz, kv_heads, head_dim] at (batch_indices[i],
    positions[i]) of the paged cache (int32 page table on the device). Returns None."""
    check_kv_layout("append_paged_kv_cache", kv_layout)
    k_cache, v_cache = unpack_paged_kv_cache(paged_kv_cache)
    # Kiln's order: kv_indptr before kv_indices.
    _decode.append_paged_kv(k_cache, v_cache, append_key, append_value, batch_indices, positions, kv_indptr,
                            kv_indices, kv_last_page_len)


def get_seq_lens(kv_indptr, kv_last_page_len, page_size):
    """The KV length of each request: (pages - 1) * page_size + kv_last_page_len."""
    import torch
    return torch.clamp(kv_indptr[1:] - kv_indptr[:-1] - 1, min=0) * page_size + kv_last_page_len


def get_batch_indices_positions(append_indptr, seq_lens, nnz, batch_indices=None, positions=None):
    """(batch_indices, positions) int32 [nnz] of a ragged append: row i of request b
    (append_indptr[b] <= i < append_indptr[b+1]) gets b and seq_lens[b] - append_indptr[b+1] + i,
    so the appended rows end the request's sequence. Rows past append_indptr[-1] get batch -1 and
    keep their position (0 when allocated). batch_indices / positions: int32 [nnz] tensors to
    write into, else allocated."""
    import torch
    device = append_indptr.device
    for name, given in (("batch_indices", batch_indices), ("positions", positions)):
        if given is not None and (tuple(given.shape) != (nnz,) or given.dtype != torch.int32 or given.device != device):
            raise ValueError(f"kiln.flashinfer.get_batch_indices_positions: {name}: expected int32 [{nnz}] on "
                             f"{device}, found {given.dtype} {list(given.shape)} on {given.device}")
    if batch_indices is None:
        batch_indices = torch.empty(nnz, dtype=torch.int32, device=device)
    if positions is None:
        positions = torch.zeros(nnz, dtype=torch.int32, device=device)
    ends = append_indptr[1:].to(torch.int64).contiguous()
    rows = torch.arange(nnz, device=device, dtype=torch.int64)
    # The request of row i: the first b with append_indptr[b + 1] > i (empty requests are skipped).
    b = torch.searchsorted(ends, rows, right=True)
    inside = b < ends.numel()
    if ends.numel():
        b_in = b.clamp(max=ends.numel() - 1)
        pos = seq_lens.to(device=device, dtype=torch.int64)[b_in] - ends[b_in] + rows
        positions.copy_(torch.where(inside, pos.to(torch.int32), positions))
    batch_indices.copy_(torch.where(inside, b, torch.full_like(b, -1)))
    return batch_indices, positions
