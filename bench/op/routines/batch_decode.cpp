// Routine "batch_decode" (kiln/ops/decode.h): decode attention, one query token per request,
// over a paged KV cache. The routine times the run step, kiln::ops::batch_decode; the plan
// (BatchDecodePlan::Create, on the host) is made once per case in Prepare, as a server makes
// it once per step for every layer, and its workspace allocated there too.
//
// The cache is the definition's benchmark page table (bench/op/paged_kv_table.h): every request
// holds kv_len positions in pages scattered through the cache. So that the refcheck sees a
// lost or doubled chunk of a long request (an average over 32 768 random values is near zero
// whatever it averages), V is random in [-0.5, 0.5) plus +-1 by (request, 256-position region,
// head, dim): the output is a signed mix of regions, each moving it by about 1 / regions, and
// out is compared with a tolerance far below the dtype's; lse moves by a lost chunk's share of
// the weight. Cache slots no request owns (pages outside the table, the tail of a last page)
// are NaN, so a kernel that reads one fails the refcheck.
//
// backends: kiln (BatchDecodePlan + batch_decode), reference (one block per request and query
// head: a warp per position for q.k, fp32 products, double sums, logits in a scratch buffer).
#include <cmath>
#include <memory>

#include "bench/op/bench_device.h"
#include "bench/op/host_parallel.h"
#include "bench/op/paged_kv_table.h"
#include "bench/op/reference_kernel.h"
#include "bench/op/routine.h"
#include "client/core/api/invalid_argument.h"
#include "client/core/driver/cuda_driver.h"
#include "kiln/ops/decode.h"

namespace kiln::bench {
namespace {

// CaseSpec order (the API's): out, lse, q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len.
enum Tensor : size_t { kOut, kLse, kQ, kKCache, kVCache, kIndptr, kIndices, kLastPageLen };

constexpr const char* kReferenceSource = R"(
// One block per (query head, request), 128 threads. Pass 1: a warp per position, s_j =
// sm_scale * q.k_j (fp32 products, lanes over head_dim), into scratch; the block's max. Pass 2:
// w_j = exp(s_j - max) in place, their sum (double). Pass 3: a thread per output dim,
// out = sum_j w_j v_j / sum (double). lse = max + ln(sum).
__device__ double BlockSum(double v, double* buf) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  const double r = buf[0];
  __syncthreads();
  return r;
}

extern "C" __global__ void __launch_bounds__(128) kiln_bench_ref_batch_decode(
    T* out, float* lse, const T* q, const T* k_cache, const T* v_cache, const int* indptr, const int* indices,
    const int* last_page_len, float* scratch, long long num_qo_heads, long long num_kv_heads, long long head_dim,
    long long page_size, long long max_kv_len, float sm_scale) {
  __shared__ double buf[128];
  const long long h = blockIdx.x, b = blockIdx.y;
  const long long kvh = h / (num_qo_heads / num_kv_heads);
  const long long first = indptr[b];
  const long long kv_len = (indptr[b + 1] - first - 1) * page_size + last_page_len[b];
  const T* qv = q + (b * num_qo_heads + h) * head_dim;
  T* o = out + (b * num_qo_heads + h) * head_dim;
  float* s = scratch + (b * num_qo_heads + h) * max_kv_len;
  if (kv_len < 1 || kv_len > max_kv_len) {  // not the benchmark's table: say so with NaN
    for (long long d = threadIdx.x; d < head_dim; d += blockDim.x) o[d] = FromF<T>(__int_as_float(0x7FC00000));
    if (threadIdx.x == 0) lse[b * num_qo_heads + h] = __int_as_float(0x7FC00000);
    return;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  double local = __longlong_as_double(0xFFF0000000000000ull);  // -inf
  for (long long j = warp; j < kv_len; j += warps) {
    const long long page = indices[first + j / page_size];
    const T* kr = k_cache + ((page * page_size + j % page_size) * num_kv_heads + kvh) * head_dim;
    float dot = 0.f;
    for (long long d = lane; d < head_dim; d += 32) dot += ToF(qv[d]) * ToF(kr[d]);
    for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    dot *= sm_scale;
    if (lane == 0) s[j] = dot;
    local = fmax(local, (double)dot);
  }
  buf[threadIdx.x] = local;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) buf[threadIdx.x] = fmax(buf[threadIdx.x], buf[threadIdx.x + w]);
    __syncthreads();
  }
  const float m = (float)buf[0];
  __syncthreads();
  double sum = 0;
  for (long long j = threadIdx.x; j < kv_len; j += blockDim.x) {
    const float w = expf(s[j] - m);
    s[j] = w;
    sum += w;
  }
  sum = BlockSum(sum, buf);  // (its __syncthreads also publishes the weights)
  if (threadIdx.x == 0) lse[b * num_qo_heads + h] = (float)((double)m + log(sum));
  for (long long d = threadIdx.x; d < head_dim; d += blockDim.x) {
    double acc = 0;
    for (long long j = 0; j < kv_len; ++j) {
      const long long page = indices[first + j / page_size];
      acc += (double)s[j] * (double)ToF(v_cache[((page * page_size + j % page_size) * num_kv_heads + kvh) * head_dim + d]);
    }
    o[d] = FromF<T>((float)(acc / sum));
  }
}
)";

struct DecodeShape {
  PagedKvShape table;
  int64_t qo_heads = 0, kv_heads = 0, head_dim = 0;
};

StatusOr<DecodeShape> DecodeShapeOf(const ShapeAxes& shape) {
  KILN_ASSIGN_OR_RETURN(auto table, PagedKvShapeOf(shape, "batch_decode"));
  DecodeShape s;
  s.table = table;
  s.qo_heads = AxisValue(shape, "num_qo_heads");
  s.kv_heads = AxisValue(shape, "num_kv_heads");
  s.head_dim = AxisValue(shape, "head_dim");
  if (s.qo_heads < 1 || s.kv_heads < 1 || s.head_dim < 1 || s.qo_heads % s.kv_heads != 0)
    return client::InvalidArgument("batch_decode: num_qo_heads=" + std::to_string(s.qo_heads) +
                                   " must be a multiple of num_kv_heads=" + std::to_string(s.kv_heads));
  return s;
}

class BatchDecodeRoutine : public Routine {
 public:
  std::string_view name() const override { return "batch_decode"; }
  std::string_view description() const override {
    return "decode attention over a paged KV cache, one query token per request (kiln::ops::batch_decode; the "
           "BatchDecodePlan is made once per case, the run step is timed)";
  }
  std::vector<std::string> axes() const override {
    return {"batch",     "kv_len",    "num_qo_heads", "num_kv_heads", "head_dim",
            "page_size", "num_pages", "nnz_pages",    "indptr_len"};
  }
  std::vector<DType> dtypes() const override { return {DType::kFloat16, DType::kBFloat16}; }
  std::vector<BackendInfo> backends() const override {
    return {{"kiln", "BatchDecodePlan::Create once per case, then kiln::ops::batch_decode (timed)"},
            {"reference", "one block per request and query head; fp32 products, double sums (the refcheck baseline)"}};
  }

  StatusOr<CaseSpec> Describe(const ShapeAxes& shape, DType dtype) const override {
    KILN_ASSIGN_OR_RETURN(auto s, DecodeShapeOf(shape));
    const PagedKvShape& t = s.table;
    const std::vector<int64_t> cache = {t.num_pages, t.page_size, s.kv_heads, s.head_dim};
    CaseSpec spec;
    spec.tensors = {{"out", dtype, {t.batch, s.qo_heads, s.head_dim}, TensorRole::kOutput},
                    {"lse", DType::kFloat32, {t.batch, s.qo_heads}, TensorRole::kOutput},
                    {"q", dtype, {t.batch, s.qo_heads, s.head_dim}, TensorRole::kInput},
                    {"k_cache", dtype, cache, TensorRole::kInput},
                    {"v_cache", dtype, cache, TensorRole::kInput},
                    {"kv_indptr", DType::kInt32, {t.batch + 1}, TensorRole::kInput},
                    {"kv_indices", DType::kInt32, {t.nnz_pages}, TensorRole::kInput},
                    {"kv_last_page_len", DType::kInt32, {t.batch}, TensorRole::kInput}};
    for (size_t i : {kVCache, kIndptr, kIndices, kLastPageLen}) spec.tensors[i].routine_fills = true;
    // The output averages many values: an abs tolerance of the dtype's 1.6e-2 would hide a
    // lost region (1 / regions). Rounding the softmax weights to the dtype (kiln) moves it by
    // far less than these (tests/client/ops/gpu_decode_test.cpp uses them for long requests).
    spec.tensors[kOut].tolerance = dtype == DType::kBFloat16 ? Tolerance{2e-3, 1.6e-2} : Tolerance{5e-4, 3e-3};
    spec.tensors[kLse].tolerance = {1e-3, 1e-5};  // fp32 throughout
    const double es = static_cast<double>(DTypeSize(dtype));
    const double kv = 2.0 * static_cast<double>(t.tokens()) * static_cast<double>(s.kv_heads * s.head_dim) * es;
    const double qo = static_cast<double>(t.batch * s.qo_heads * s.head_dim) * es;
    // K and V of every position read once, q read, out and lse written, the page table read.
    spec.bytes = kv + 2 * qo + 4.0 * static_cast<double>(t.batch * s.qo_heads) +
                 4.0 * static_cast<double>(2 * t.batch + 1 + t.nnz_pages);
    // q.k and the weights times V: two multiply-adds per (position, query head, dim).
    spec.flops = 4.0 * static_cast<double>(t.tokens()) * static_cast<double>(s.qo_heads * s.head_dim);
    return spec;
  }

  ShapeAxes SmallShape() const override {
    // 3 requests of 37 positions (last pages of one token) in pages of 4, 10 pages of the
    // cache owned by no one (NaN), GQA group 4, head_dim 64.
    return {{"batch", 3},     {"kv_len", 37},    {"num_qo_heads", 8}, {"num_kv_heads", 2}, {"head_dim", 64},
            {"page_size", 4}, {"num_pages", 40}, {"nnz_pages", 30},   {"indptr_len", 4}};
  }

  Status FillInputs(const CaseSpec& spec, const ShapeAxes& shape, std::mt19937_64& rng,
                    std::vector<HostTensor>* t) const override {
    KILN_ASSIGN_OR_RETURN(auto s, DecodeShapeOf(shape));
    FillPagedKv(s.table, s.kv_heads, s.head_dim, rng, &(*t)[kIndptr], &(*t)[kIndices], &(*t)[kLastPageLen],
                &(*t)[kKCache], &(*t)[kVCache]);
    return OkStatus();
  }

  Status CpuReference(const CaseSpec& spec, const std::vector<HostTensor>& t,
                      std::map<size_t, std::vector<double>>* expected) const override {
    const int64_t batch = spec.tensors[kOut].shape[0], qo_heads = spec.tensors[kOut].shape[1];
    const int64_t head_dim = spec.tensors[kOut].shape[2];
    const int64_t page_size = spec.tensors[kKCache].shape[1], kv_heads = spec.tensors[kKCache].shape[2];
    const int64_t group = qo_heads / kv_heads;
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    std::vector<double> out(static_cast<size_t>(batch * qo_heads * head_dim)),
        lse(static_cast<size_t>(batch * qo_heads));
    auto at = [](const HostTensor& x, int64_t i) { return x.Get(static_cast<size_t>(i)); };
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t first = static_cast<int64_t>(at(t[kIndptr], b));
      const int64_t pages = static_cast<int64_t>(at(t[kIndptr], b + 1)) - first;
      const int64_t kv_len = (pages - 1) * page_size + static_cast<int64_t>(at(t[kLastPageLen], b));
      for (int64_t h = 0; h < qo_heads; ++h) {
        const int64_t kvh = h / group;
        std::vector<double> logits(static_cast<size_t>(kv_len));
        std::vector<int64_t> rows(static_cast<size_t>(kv_len));
        double m = -INFINITY;
        for (int64_t j = 0; j < kv_len; ++j) {
          const int64_t page = static_cast<int64_t>(at(t[kIndices], first + j / page_size));
          rows[static_cast<size_t>(j)] = ((page * page_size + j % page_size) * kv_heads + kvh) * head_dim;
          double dot = 0;
          for (int64_t d = 0; d < head_dim; ++d)
            dot += at(t[kQ], (b * qo_heads + h) * head_dim + d) * at(t[kKCache], rows[static_cast<size_t>(j)] + d);
          logits[static_cast<size_t>(j)] = dot * scale;
          m = std::max(m, dot * scale);
        }
        double sum = 0;
        for (double& s : logits) sum += (s = std::exp(s - m));
        lse[static_cast<size_t>(b * qo_heads + h)] = m + std::log(sum);
        for (int64_t d = 0; d < head_dim; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < kv_len; ++j)
            acc += logits[static_cast<size_t>(j)] * at(t[kVCache], rows[static_cast<size_t>(j)] + d);
          out[static_cast<size_t>((b * qo_heads + h) * head_dim + d)] = acc / sum;
        }
      }
    }
    (*expected)[kOut] = std::move(out);
    (*expected)[kLse] = std::move(lse);
    return OkStatus();
  }

  StatusOr<BackendFn> Prepare(const std::string& backend, const CaseSpec& spec, const ShapeAxes& shape,
                              DType dtype) const override {
    KILN_ASSIGN_OR_RETURN(auto s, DecodeShapeOf(shape));
    const PagedKvShape& table = s.table;
    KILN_ASSIGN_OR_RETURN(auto driver, client::CudaDriver::Get());
    if (backend == "kiln") {
      // The host copies of the page table the plan is made from: the same as FillInputs wrote.
      const std::vector<int32_t> indptr = KvIndptr(table), last = KvLastPageLen(table);
      KILN_ASSIGN_OR_RETURN(auto plan, ops::BatchDecodePlan::Create(indptr.data(), last.data(), table.batch, s.qo_heads,
                                                                    s.kv_heads, s.head_dim, table.page_size, dtype));
      std::shared_ptr<DeviceMemory> workspace;
      if (plan.workspace_bytes() > 0) {
        KILN_ASSIGN_OR_RETURN(auto memory, DeviceMemory::Allocate(*driver, plan.workspace_bytes()));
        workspace = std::make_shared<DeviceMemory>(std::move(memory));
      }
      return BackendFn([plan, workspace](const TensorSet& t, CUstream stream) {
        return ops::batch_decode(plan, t[kOut], &t[kLse], t[kQ], t[kKCache], t[kVCache], t[kIndptr], t[kIndices],
                                 t[kLastPageLen], workspace ? workspace->data() : nullptr,
                                 workspace ? workspace->bytes() : 0, stream);
      });
    }
    if (backend != "reference")
      return Status(StatusCode::kNotFound, std::string(name()) + " has no backend '" + backend + "'");
    if (table.batch > 65535)
      return client::InvalidArgument("batch_decode reference: batch=" + std::to_string(table.batch) +
                                     " exceeds its grid's 65535 rows");
    KILN_ASSIGN_OR_RETURN(auto kernel, LoadReferenceKernel("kiln_bench_ref_decode", kReferenceSource,
                                                           "kiln_bench_ref_batch_decode", dtype));
    const long long qo_heads = s.qo_heads, kv_heads = s.kv_heads, head_dim = s.head_dim;
    const long long page_size = table.page_size, max_kv_len = table.kv_len;
    KILN_ASSIGN_OR_RETURN(
        auto memory, DeviceMemory::Allocate(*driver, static_cast<size_t>(table.batch * qo_heads * max_kv_len) * 4));
    auto scratch = std::make_shared<DeviceMemory>(std::move(memory));
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
    const unsigned batch = static_cast<unsigned>(table.batch);
    return BackendFn([k = kernel, scratch, qo_heads, kv_heads, head_dim, page_size, max_kv_len, scale,
                      batch](const TensorSet& t, CUstream stream) {
      LaunchConfig config;
      config.grid.x = static_cast<unsigned>(qo_heads);
      config.grid.y = batch;
      config.block.x = 128;
      config.stream = stream;
      return k(config, t[kOut].data, t[kLse].data, t[kQ].data, t[kKCache].data, t[kVCache].data, t[kIndptr].data,
               t[kIndices].data, t[kLastPageLen].data, scratch->data(), qo_heads, kv_heads, head_dim, page_size,
               max_kv_len, scale);
    });
  }
};

}  // namespace

KILN_BENCH_REGISTER_ROUTINE(BatchDecodeRoutine);

}  // namespace kiln::bench
