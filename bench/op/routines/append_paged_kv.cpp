// Routine "append_paged_kv" (kiln/ops/decode.h): new tokens' k and v written into their slots
// of a paged KV cache, in place. The page table is the definition's benchmark table
// (bench/op/paged_kv_table.h); the new tokens are the last nnz / batch positions of every
// request (a decode step appends one per request, a prefill all of them).
//
// A copy, so the refcheck is exact: both caches, bit for bit, against the reference backend's
// (every other slot keeps its random data). A call touches a sliver of a large cache (64
// tokens into 2 GB): CaseSpec::footprint says so, and the L2 is flushed before each call where
// rotating copies of the whole cache cannot defeat it.
//
// backends: kiln (kiln::ops::append_paged_kv), reference (one thread per copied element, with
// the op's rules for tokens the table does not cover).
#include <algorithm>

#include "bench/op/paged_kv_table.h"
#include "bench/op/reference_kernel.h"
#include "bench/op/routine.h"
#include "kiln/ops/decode.h"

namespace kiln::bench {
namespace {

// CaseSpec order (the API's).
enum Tensor : size_t { kKCache, kVCache, kK, kV, kBatchIndices, kPositions, kIndptr, kIndices, kLastPageLen };

constexpr const char* kReferenceSource = R"(
// One thread per element of k and v (grid-stride). Token i of request b = batch_indices[i] at
// position p = positions[i] goes to page indices[indptr[b] + p / page_size], slot
// p % page_size; tokens the table does not cover are skipped, as the op skips them.
extern "C" __global__ void kiln_bench_ref_append_paged_kv(
    T* k_cache, T* v_cache, const T* k, const T* v, const int* batch_indices, const int* positions,
    const int* indptr, const int* indices, const int* last_page_len, long long nnz, long long batch,
    long long num_pages, long long page_size, long long row, long long nnz_pages) {
  const long long n = nnz * row;
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += (long long)gridDim.x * blockDim.x) {
    const long long i = idx / row, e = idx % row;
    const long long b = batch_indices[i], p = positions[i];
    if (b < 0 || b >= batch || p < 0) continue;
    long long last = last_page_len[b];
    last = last < 0 ? 0 : (last > page_size ? page_size : last);
    const long long kv_len = (indptr[b + 1] - indptr[b] - 1) * page_size + last;
    const long long entry = indptr[b] + p / page_size;
    if (p >= kv_len || entry < 0 || entry >= nnz_pages) continue;
    const long long page = indices[entry];
    if (page < 0 || page >= num_pages) continue;
    const long long slot = (page * page_size + p % page_size) * row + e;
    k_cache[slot] = k[idx];
    v_cache[slot] = v[idx];
  }
}
)";

struct AppendShape {
  PagedKvShape table;
  int64_t nnz = 0, kv_heads = 0, head_dim = 0;
};

StatusOr<AppendShape> AppendShapeOf(const ShapeAxes& shape) {
  KILN_ASSIGN_OR_RETURN(auto table, PagedKvShapeOf(shape, "append_paged_kv"));
  AppendShape s;
  s.table = table;
  s.nnz = AxisValue(shape, "nnz");
  s.kv_heads = AxisValue(shape, "num_kv_heads");
  s.head_dim = AxisValue(shape, "head_dim");
  KILN_RETURN_IF_ERROR(AppendTokensFor(s.table, s.nnz, "append_paged_kv").status());  // nnz against batch and kv_len
  return s;
}

class AppendPagedKvRoutine : public Routine {
 public:
  std::string_view name() const override { return "append_paged_kv"; }
  std::string_view description() const override {
    return "new tokens' k and v written into their slots of a paged KV cache, in place (kiln::ops::append_paged_kv)";
  }
  std::vector<std::string> axes() const override {
    return {"nnz", "batch", "kv_len", "num_kv_heads", "head_dim", "page_size", "num_pages", "nnz_pages", "indptr_len"};
  }
  std::vector<DType> dtypes() const override { return {DType::kFloat16, DType::kBFloat16}; }
  std::vector<BackendInfo> backends() const override {
    return {{"kiln", "the op through kiln::ops"},
            {"reference", "one thread per copied element (the refcheck baseline; caches compared bit for bit)"}};
  }

  StatusOr<CaseSpec> Describe(const ShapeAxes& shape, DType dtype) const override {
    KILN_ASSIGN_OR_RETURN(auto s, AppendShapeOf(shape));
    const PagedKvShape& t = s.table;
    const std::vector<int64_t> cache = {t.num_pages, t.page_size, s.kv_heads, s.head_dim};
    CaseSpec spec;
    spec.tensors = {{"k_cache", dtype, cache, TensorRole::kInOut},
                    {"v_cache", dtype, cache, TensorRole::kInOut},
                    {"k", dtype, {s.nnz, s.kv_heads, s.head_dim}, TensorRole::kInput},
                    {"v", dtype, {s.nnz, s.kv_heads, s.head_dim}, TensorRole::kInput},
                    {"batch_indices", DType::kInt32, {s.nnz}, TensorRole::kInput},
                    {"positions", DType::kInt32, {s.nnz}, TensorRole::kInput},
                    {"kv_indptr", DType::kInt32, {t.batch + 1}, TensorRole::kInput},
                    {"kv_indices", DType::kInt32, {t.nnz_pages}, TensorRole::kInput},
                    {"kv_last_page_len", DType::kInt32, {t.batch}, TensorRole::kInput}};
    for (size_t i : {kBatchIndices, kPositions, kIndptr, kIndices, kLastPageLen}) spec.tensors[i].routine_fills = true;
    spec.tensors[kKCache].exact = spec.tensors[kVCache].exact = true;
    const double tokens = static_cast<double>(s.nnz * s.kv_heads * s.head_dim) * static_cast<double>(DTypeSize(dtype));
    // k and v read, the same bytes written into the caches; per token its batch index and
    // position, and the page table entries it looks up (indptr[b], indptr[b + 1],
    // last_page_len[b], one page id): 24 bytes.
    spec.bytes = 4 * tokens + 24.0 * static_cast<double>(s.nnz);
    spec.footprint = spec.bytes;
    return spec;
  }

  ShapeAxes SmallShape() const override {
    // 3 requests of 21 positions in pages of 4 (last pages of one token), 2 new tokens each,
    // 7 pages owned by no one.
    return {{"nnz", 6},       {"batch", 3},      {"kv_len", 21},    {"num_kv_heads", 2}, {"head_dim", 64},
            {"page_size", 4}, {"num_pages", 25}, {"nnz_pages", 18}, {"indptr_len", 4}};
  }

  Status FillInputs(const CaseSpec& spec, const ShapeAxes& shape, std::mt19937_64& rng,
                    std::vector<HostTensor>* t) const override {
    KILN_ASSIGN_OR_RETURN(auto s, AppendShapeOf(shape));
    KILN_ASSIGN_OR_RETURN(auto tokens, AppendTokensFor(s.table, s.nnz, "append_paged_kv"));
    auto write = [&](size_t which, const std::vector<int32_t>& values) {
      for (size_t i = 0; i < values.size(); ++i) (*t)[which].Set(i, values[i]);
    };
    write(kBatchIndices, tokens.batch_indices);
    write(kPositions, tokens.positions);
    write(kIndptr, KvIndptr(s.table));
    write(kIndices, KvIndices(s.table, rng()));
    write(kLastPageLen, KvLastPageLen(s.table));
    return OkStatus();
  }

  Status CpuReference(const CaseSpec& spec, const std::vector<HostTensor>& t,
                      std::map<size_t, std::vector<double>>* expected) const override {
    const int64_t nnz = spec.tensors[kK].shape[0];
    const int64_t row = spec.tensors[kK].shape[1] * spec.tensors[kK].shape[2];
    const int64_t num_pages = spec.tensors[kKCache].shape[0], page_size = spec.tensors[kKCache].shape[1];
    const int64_t batch = spec.tensors[kLastPageLen].shape[0];
    const int64_t nnz_pages = spec.tensors[kIndices].shape[0];
    auto at = [](const HostTensor& x, int64_t i) { return static_cast<int64_t>(x.Get(static_cast<size_t>(i))); };
    for (size_t which : {kKCache, kVCache}) {
      std::vector<double> cache(t[which].size());
      for (size_t i = 0; i < cache.size(); ++i) cache[i] = t[which].Get(i);
      const HostTensor& src = t[which == kKCache ? kK : kV];
      for (int64_t i = 0; i < nnz; ++i) {
        const int64_t b = at(t[kBatchIndices], i), p = at(t[kPositions], i);
        if (b < 0 || b >= batch || p < 0) continue;
        const int64_t last = std::clamp<int64_t>(at(t[kLastPageLen], b), 0, page_size);
        const int64_t kv_len = (at(t[kIndptr], b + 1) - at(t[kIndptr], b) - 1) * page_size + last;
        const int64_t entry = at(t[kIndptr], b) + p / page_size;
        if (p >= kv_len || entry < 0 || entry >= nnz_pages) continue;
        const int64_t page = at(t[kIndices], entry);
        if (page < 0 || page >= num_pages) continue;
        for (int64_t e = 0; e < row; ++e)
          cache[static_cast<size_t>((page * page_size + p % page_size) * row + e)] = src.Get(
              static_cast<size_t>(i * row + e));
      }
      (*expected)[which] = std::move(cache);
    }
    return OkStatus();
  }

  StatusOr<BackendFn> Prepare(const std::string& backend, const CaseSpec& spec, const ShapeAxes& shape,
                              DType dtype) const override {
    KILN_ASSIGN_OR_RETURN(auto s, AppendShapeOf(shape));
    if (backend == "kiln") {
      return BackendFn([](const TensorSet& t, CUstream stream) {
        return ops::append_paged_kv(t[kKCache], t[kVCache], t[kK], t[kV], t[kBatchIndices], t[kPositions], t[kIndptr],
                                    t[kIndices], t[kLastPageLen], stream);
      });
    }
    if (backend != "reference")
      return Status(StatusCode::kNotFound, std::string(name()) + " has no backend '" + backend + "'");
    KILN_ASSIGN_OR_RETURN(auto kernel, LoadReferenceKernel("kiln_bench_ref_append", kReferenceSource,
                                                           "kiln_bench_ref_append_paged_kv", dtype));
    const long long nnz = s.nnz, batch = s.table.batch, num_pages = s.table.num_pages;
    const long long page_size = s.table.page_size, row = s.kv_heads * s.head_dim, nnz_pages = s.table.nnz_pages;
    return BackendFn(
        [k = kernel, nnz, batch, num_pages, page_size, row, nnz_pages](const TensorSet& t, CUstream stream) {
          LaunchConfig config;
          config.block.x = 256;
          const long long blocks = (nnz * row + 255) / 256;
          config.grid.x = static_cast<unsigned>(blocks < (1LL << 20) ? blocks : (1LL << 20));
          config.stream = stream;
          return k(config, t[kKCache].data, t[kVCache].data, t[kK].data, t[kV].data, t[kBatchIndices].data,
                   t[kPositions].data, t[kIndptr].data, t[kIndices].data, t[kLastPageLen].data, nnz, batch, num_pages,
                   page_size, row, nnz_pages);
        });
  }
};

}  // namespace

KILN_BENCH_REGISTER_ROUTINE(AppendPagedKvRoutine);

}  // namespace kiln::bench
