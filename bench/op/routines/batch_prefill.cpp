// Routines "batch_prefill_ragged" and "batch_prefill_paged" (kiln/ops/prefill.h): prefill
// attention of a batch of `batch` requests, each with q_len queries over kv_len keys/values —
// ragged (K/V of the requests concatenated, kv_indptr in tokens) or in the paged KV cache of the
// decode routines (bench/op/paged_kv_table.h: every request's pages scattered through a shuffled
// cache). The routines time the run step, kiln::ops::batch_prefill_{ragged,paged}; the plan
// (BatchPrefillPlan::Create{Ragged,Paged}, on the host) is made once per case in Prepare, as a
// server makes it once per batch for every layer, and its workspace allocated there too.
//
// Axes, the trace definitions' (kernels/traces/batch_prefill_{ragged,paged}.json): every
// request has the same q_len <= kv_len; total_q = batch * q_len and ragged total_kv = batch *
// kv_len are the rows of q/out and k/v; mask 1 is causal aligned to the end (query i sees
// positions <= kv_len - q_len + i), 2 none. PrefillOptions' other defaults: scale
// 1/sqrt(head_dim), no soft cap, no window.
//
// Data as batch_decode's (so that a lost or doubled KV chunk of a split request shows): q and K
// uniform in [-2, 2); V uniform in [-0.5, 0.5) plus +-1 by (request, 256-position region, head,
// dim); out compared with the decode routine's tolerance for averages (bf16 abs 2e-3, rel
// 1.6e-2; fp16 5e-4, 3e-3; twice that between two GPU results), lse with abs 1e-3, rel 1e-5.
// Paged: cache slots no request owns (pages outside the table, the tail of each last page) are
// NaN, so a kernel that reads one fails the refcheck.
//
// FLOPs: 4 * num_qo_heads * head_dim per (query, visible key) pair (q.k and the weights times
// V, two multiply-adds each per dim), the pairs counted exactly on the host.
//
// backends: kiln (the plan once per case, then the run: timed), reference (one block per query
// token and query head: a warp per position for q.k, fp32 products, double sums; two passes,
// max then weights, so no rescaling).
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "bench/op/bench_device.h"
#include "bench/op/host_parallel.h"
#include "bench/op/paged_kv_table.h"
#include "bench/op/reference_kernel.h"
#include "bench/op/routine.h"
#include "bench/op/routines/hopper_only.h"
#include "client/core/api/invalid_argument.h"
#include "client/core/driver/cuda_driver.h"
#include "kiln/ops/prefill.h"

namespace kiln::bench {
namespace {

// CaseSpec order (the API's): out, lse, q, k (k_cache), v (v_cache), qo_indptr, kv_indptr, and
// for the paged routine kv_indices, kv_last_page_len.
enum Tensor : size_t { kOut, kLse, kQ, kK, kV, kQoIndptr, kKvIndptr, kIndices, kLastPageLen };

constexpr const char* kReferenceSource = R"(
// One block per (query token, query head), 128 threads. The token's request by binary search of
// qo_indptr; its kv_len from kv_indptr (ragged: tokens; paged: pages and kv_last_page_len);
// query i sees positions [0, end), end = kv_len - q_len + i + 1 when causal, else kv_len.
// Pass 1: a warp per position, s_j = sm_scale * q.k_j (fp32 products, lanes over head_dim); the
// block's max. Pass 2, in chunks of 128 positions: w_j = exp(s_j - max) (s_j recomputed the
// same way) into shared memory, their sum in double; a thread per output dim accumulates
// w_j v_j in double. out = acc / sum; lse = max + ln(sum); nothing visible: out 0, lse -inf.
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

__device__ double BlockMax(double v, double* buf) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) buf[threadIdx.x] = fmax(buf[threadIdx.x], buf[threadIdx.x + s]);
    __syncthreads();
  }
  const double r = buf[0];
  __syncthreads();
  return r;
}

// The K/V row (of num_kv_heads * head_dim elements) of position j of a request: ragged, the
// request's first row + j; paged, page kv_indices[first + j / page_size], slot j % page_size.
__device__ long long KvRow(const int* kv_indices, long long first, long long j, long long page_size) {
  if (page_size == 0) return first + j;
  return (long long)kv_indices[first + j / page_size] * page_size + j % page_size;
}

// q.k_j * sm_scale of this warp (lanes over head_dim), on every lane.
__device__ float Logit(const float* qs, const T* kr, long long head_dim, int lane, float sm_scale) {
  float dot = 0.f;
  for (long long d = lane; d < head_dim; d += 32) dot += qs[d] * ToF(kr[d]);
  for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
  return dot * sm_scale;
}

extern "C" __global__ void __launch_bounds__(128) kiln_bench_ref_batch_prefill(
    T* out, float* lse, const T* q, const T* k, const T* v, const int* qo_indptr, const int* kv_indptr,
    const int* kv_indices, const int* kv_last_page_len, long long batch, long long num_qo_heads,
    long long num_kv_heads, long long head_dim, long long page_size, int causal, float sm_scale) {
  __shared__ double buf[128];
  __shared__ float qs[256];
  __shared__ float w[128];
  const long long t = blockIdx.x, h = blockIdx.y;
  // The request: qo_indptr[lo] <= t < qo_indptr[hi] throughout.
  long long lo = 0, hi = batch;
  while (hi - lo > 1) {
    const long long mid = (lo + hi) / 2;
    if (qo_indptr[mid] <= t) lo = mid; else hi = mid;
  }
  const long long b = lo;
  const long long i = t - qo_indptr[b], q_len = qo_indptr[b + 1] - qo_indptr[b];
  const long long first = kv_indptr[b];
  long long kv_len = kv_indptr[b + 1] - first;
  if (page_size > 0) kv_len = kv_len == 0 ? 0 : (kv_len - 1) * page_size + kv_last_page_len[b];
  long long end = kv_len;
  if (causal && kv_len - q_len + i + 1 < end) end = kv_len - q_len + i + 1;
  const long long kvh = h / (num_qo_heads / num_kv_heads);
  for (long long d = threadIdx.x; d < head_dim; d += blockDim.x) qs[d] = ToF(q[(t * num_qo_heads + h) * head_dim + d]);
  __syncthreads();
  T* o = out + (t * num_qo_heads + h) * head_dim;
  if (end <= 0) {
    for (long long d = threadIdx.x; d < head_dim; d += blockDim.x) o[d] = FromF<T>(0.f);
    if (threadIdx.x == 0) lse[t * num_qo_heads + h] = __int_as_float(0xff800000);
    return;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  double local = __longlong_as_double(0xFFF0000000000000ull);  // -inf
  for (long long j = warp; j < end; j += warps) {
    const T* kr = k + (KvRow(kv_indices, first, j, page_size) * num_kv_heads + kvh) * head_dim;
    local = fmax(local, (double)Logit(qs, kr, head_dim, lane, sm_scale));
  }
  const float m = (float)BlockMax(local, buf);
  double sum = 0, acc0 = 0, acc1 = 0;  // head_dim <= 256: dims threadIdx.x and threadIdx.x + 128
  for (long long c0 = 0; c0 < end; c0 += 128) {
    const long long n = end - c0 < 128 ? end - c0 : 128;
    for (long long jj = warp; jj < n; jj += warps) {
      const T* kr = k + (KvRow(kv_indices, first, c0 + jj, page_size) * num_kv_heads + kvh) * head_dim;
      const float s = Logit(qs, kr, head_dim, lane, sm_scale);
      if (lane == 0) w[jj] = expf(s - m);
    }
    __syncthreads();
    if (threadIdx.x < n) sum += w[threadIdx.x];
    for (long long jj = 0; jj < n; ++jj) {
      const T* vr = v + (KvRow(kv_indices, first, c0 + jj, page_size) * num_kv_heads + kvh) * head_dim;
      if (threadIdx.x < head_dim) acc0 += (double)w[jj] * (double)ToF(vr[threadIdx.x]);
      if (threadIdx.x + 128 < head_dim) acc1 += (double)w[jj] * (double)ToF(vr[threadIdx.x + 128]);
    }
    __syncthreads();
  }
  sum = BlockSum(sum, buf);
  if (threadIdx.x < head_dim) o[threadIdx.x] = FromF<T>((float)(acc0 / sum));
  if (threadIdx.x + 128 < head_dim) o[threadIdx.x + 128] = FromF<T>((float)(acc1 / sum));
  if (threadIdx.x == 0) lse[t * num_qo_heads + h] = (float)((double)m + log(sum));
}
)";

struct PrefillShape {
  int64_t batch = 0, q_len = 0, kv_len = 0;
  bool causal = true;  // the mask axis: 1 causal, 2 none
  int64_t qo_heads = 0, kv_heads = 0, head_dim = 0;
  int64_t total_q = 0, total_kv = 0;  // rows of q / out; KV positions of the batch
  PagedKvShape table;                 // paged only

  // Keys query i of any request sees (every request has the same lengths).
  int64_t Visible(int64_t i) const { return causal ? std::min(kv_len, kv_len - q_len + i + 1) : kv_len; }
  // (query, visible key) pairs of the batch, counted one query at a time.
  double Pairs() const {
    double pairs = 0;
    for (int64_t i = 0; i < q_len; ++i) pairs += static_cast<double>(std::max<int64_t>(0, Visible(i)));
    return pairs * static_cast<double>(batch);
  }
};

StatusOr<PrefillShape> PrefillShapeOf(const ShapeAxes& shape, bool paged, const std::string& routine) {
  using client::InvalidArgument;
  for (const char* axis :
       {"batch", "q_len", "kv_len", "num_qo_heads", "num_kv_heads", "head_dim", "total_q", "indptr_len"})
    if (AxisValue(shape, axis) < 1) return InvalidArgument(routine, std::string("the case has no axis ") + axis);
  PrefillShape s;
  s.batch = AxisValue(shape, "batch");
  s.q_len = AxisValue(shape, "q_len");
  s.kv_len = AxisValue(shape, "kv_len");
  const int64_t mask = AxisValue(shape, "mask");
  if (mask != 1 && mask != 2)
    return InvalidArgument(routine, "mask=" + std::to_string(mask) + " must be 1 (causal) or 2 (none)");
  s.causal = mask == 1;
  s.qo_heads = AxisValue(shape, "num_qo_heads");
  s.kv_heads = AxisValue(shape, "num_kv_heads");
  s.head_dim = AxisValue(shape, "head_dim");
  s.total_q = AxisValue(shape, "total_q");
  if (s.qo_heads % s.kv_heads != 0)
    return InvalidArgument(routine, "num_qo_heads=" + std::to_string(s.qo_heads) +
                                        " must be a multiple of num_kv_heads=" + std::to_string(s.kv_heads));
  constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max();
  if (s.q_len > kMaxIndex / s.batch || s.kv_len > kMaxIndex / s.batch)
    return InvalidArgument(routine, "batch=" + std::to_string(s.batch) +
                                        " requests of q_len=" + std::to_string(s.q_len) +
                                        ", kv_len=" + std::to_string(s.kv_len) + " do not fit int32 indptr entries");
  if (s.total_q != s.batch * s.q_len)
    return InvalidArgument(routine, "total_q=" + std::to_string(s.total_q) +
                                        " must be batch * q_len = " + std::to_string(s.batch * s.q_len));
  if (s.causal && s.q_len > s.kv_len)
    return InvalidArgument(routine, "q_len=" + std::to_string(s.q_len) + " must be at most kv_len=" +
                                        std::to_string(s.kv_len) + " (causal: the first queries would see nothing)");
  s.total_kv = s.batch * s.kv_len;
  if (paged) {
    KILN_ASSIGN_OR_RETURN(s.table, PagedKvShapeOf(shape, routine));
    return s;
  }
  const int64_t indptr_len = AxisValue(shape, "indptr_len");
  if (indptr_len != s.batch + 1)
    return InvalidArgument(routine, "indptr_len=" + std::to_string(indptr_len) +
                                        " must be batch + 1 = " + std::to_string(s.batch + 1));
  const int64_t total_kv = AxisValue(shape, "total_kv");
  if (total_kv != s.total_kv)
    return InvalidArgument(routine, "total_kv=" + std::to_string(total_kv) +
                                        " must be batch * kv_len = " + std::to_string(s.total_kv));
  return s;
}

std::vector<int32_t> Indptr(int64_t batch, int64_t step) {
  std::vector<int32_t> indptr(static_cast<size_t>(batch + 1));
  for (int64_t b = 0; b <= batch; ++b) indptr[static_cast<size_t>(b)] = static_cast<int32_t>(b * step);
  return indptr;
}

template <bool kPaged>
class BatchPrefillRoutine : public Routine {
 public:
  static constexpr const char* kName = kPaged ? "batch_prefill_paged" : "batch_prefill_ragged";

  std::string_view name() const override { return kName; }
  std::string_view description() const override {
    return kPaged ? "prefill attention (mask 1 causal, 2 none) over the paged KV cache, q_len queries over kv_len "
                    "positions per "
                    "request (kiln::ops::batch_prefill_paged; the BatchPrefillPlan is made once per case, the run step "
                    "is timed)"
                  : "prefill attention (mask 1 causal, 2 none) over ragged K/V, q_len queries over kv_len positions "
                    "per request "
                    "(kiln::ops::batch_prefill_ragged; the BatchPrefillPlan is made once per case, the run step is "
                    "timed)";
  }
  std::vector<std::string> axes() const override {
    if (kPaged)
      return {"batch",    "q_len",   "kv_len",    "mask",      "num_qo_heads", "num_kv_heads",
              "head_dim", "total_q", "page_size", "num_pages", "nnz_pages",    "indptr_len"};
    return {"batch",        "q_len",    "kv_len",  "mask",     "num_qo_heads",
            "num_kv_heads", "head_dim", "total_q", "total_kv", "indptr_len"};
  }
  std::vector<DType> dtypes() const override { return {DType::kFloat16, DType::kBFloat16}; }
  std::vector<BackendInfo> backends() const override {
    return {{"kiln", std::string("BatchPrefillPlan::") + (kPaged ? "CreatePaged" : "CreateRagged") +
                         " once per case, then kiln::ops::" + kName + " (timed)"},
            {"reference", "one block per query token and query head; fp32 products, double sums (the refcheck "
                          "baseline)"}};
  }

  StatusOr<CaseSpec> Describe(const ShapeAxes& shape, DType dtype) const override {
    KILN_ASSIGN_OR_RETURN(auto s, PrefillShapeOf(shape, kPaged, kName));
    const std::vector<int64_t> qo = {s.total_q, s.qo_heads, s.head_dim};
    const std::vector<int64_t> kv = kPaged ? std::vector<int64_t>{s.table.num_pages, s.table.page_size, s.kv_heads,
                                                                  s.head_dim}
                                           : std::vector<int64_t>{s.total_kv, s.kv_heads, s.head_dim};
    const int64_t indptr_len = s.batch + 1;
    CaseSpec spec;
    spec.axes = shape;  // the CPU reference reads the mask
    spec.tensors = {{"out", dtype, qo, TensorRole::kOutput},
                    {"lse", DType::kFloat32, {s.total_q, s.qo_heads}, TensorRole::kOutput},
                    {"q", dtype, qo, TensorRole::kInput},
                    {kPaged ? "k_cache" : "k", dtype, kv, TensorRole::kInput},
                    {kPaged ? "v_cache" : "v", dtype, kv, TensorRole::kInput},
                    {"qo_indptr", DType::kInt32, {indptr_len}, TensorRole::kInput},
                    {"kv_indptr", DType::kInt32, {indptr_len}, TensorRole::kInput}};
    if (kPaged) {
      spec.tensors.push_back({"kv_indices", DType::kInt32, {s.table.nnz_pages}, TensorRole::kInput});
      spec.tensors.push_back({"kv_last_page_len", DType::kInt32, {s.batch}, TensorRole::kInput});
    }
    for (size_t i = kV; i < spec.tensors.size(); ++i) spec.tensors[i].routine_fills = true;
    // The output averages many values: an abs tolerance of the dtype's 1.6e-2 would hide a
    // lost KV chunk (a region's share of the weight). Rounding the softmax weights to the dtype
    // (kiln) moves it by far less (batch_decode's figures; tests/client/ops/gpu_prefill_test.cpp).
    spec.tensors[kOut].tolerance = dtype == DType::kBFloat16 ? Tolerance{2e-3, 1.6e-2} : Tolerance{5e-4, 3e-3};
    spec.tensors[kLse].tolerance = {1e-3, 1e-5};  // fp32 throughout
    const double es = static_cast<double>(DTypeSize(dtype));
    const double q_bytes = static_cast<double>(s.total_q * s.qo_heads * s.head_dim) * es;
    const double kv_bytes = 2.0 * static_cast<double>(s.total_kv) * static_cast<double>(s.kv_heads * s.head_dim) * es;
    // q read, out written, K and V of every position read once, lse written, the indices read.
    double table = 4.0 * static_cast<double>(2 * indptr_len);
    if (kPaged) table += 4.0 * static_cast<double>(s.table.nnz_pages + s.batch);
    spec.bytes = 2 * q_bytes + kv_bytes + 4.0 * static_cast<double>(s.total_q * s.qo_heads) + table;
    spec.flops = 4.0 * s.Pairs() * static_cast<double>(s.qo_heads * s.head_dim);
    return spec;
  }

  // (batch, q_len, kv_len, mask (1 causal, 2 none), heads, head dim; paged: page size and pages
  // nobody owns.)
  static ShapeAxes Axes(int64_t batch, int64_t q_len, int64_t kv_len, int64_t mask, int64_t qo, int64_t kv, int64_t dim,
                        int64_t page = 0, int64_t spare_pages = 0) {
    ShapeAxes a = {{"batch", batch},     {"q_len", q_len},     {"kv_len", kv_len}, {"mask", mask},
                   {"num_qo_heads", qo}, {"num_kv_heads", kv}, {"head_dim", dim},  {"total_q", batch * q_len}};
    if (kPaged) {
      const int64_t nnz = batch * ((kv_len + page - 1) / page);
      a.push_back({"page_size", page});
      a.push_back({"num_pages", nnz + spare_pages});
      a.push_back({"nnz_pages", nnz});
    } else {
      a.push_back({"total_kv", batch * kv_len});
    }
    a.push_back({"indptr_len", batch + 1});
    return a;
  }

  ShapeAxes SmallShape() const override {
    // 3 requests of 37 causal queries over 100 positions, GQA group 4, head_dim 64; paged: pages
    // of 4 and 10 pages of the cache owned by no one (NaN).
    return Axes(3, 37, 100, 1, 8, 2, 64, 4, 10);
  }

  std::vector<ShapeAxes> CheckShapes() const override {
    if (kPaged)
      return {SmallShape(), Axes(2, 5, 33, 1, 8, 1, 128, 1, 7),  // one-token pages, group 8
              Axes(1, 8, 5000, 1, 8, 2, 128, 16, 5),             // few queries over a long KV: split on an H200
              Axes(2, 40, 130, 2, 4, 2, 256, 64, 2)};   // head_dim 256, group 2, no mask, a chunk over cached positions
    return {SmallShape(), Axes(1, 1, 1, 1, 8, 1, 256),  // one query over one position, group 8
            Axes(2, 130, 200, 1, 4, 4, 128),            // group 1, partial row tiles, a chunk over cached positions
            Axes(2, 130, 200, 2, 4, 4, 128),            // the same without a mask
            Axes(1, 8, 5000, 1, 8, 2, 128)};            // few queries over a long KV: split on an H200
  }

  Status FillInputs(const CaseSpec& spec, const ShapeAxes& shape, std::mt19937_64& rng,
                    std::vector<HostTensor>* t) const override {
    KILN_ASSIGN_OR_RETURN(auto s, PrefillShapeOf(shape, kPaged, kName));
    const std::vector<int32_t> qo_indptr = Indptr(s.batch, s.q_len);
    for (size_t i = 0; i < qo_indptr.size(); ++i) (*t)[kQoIndptr].Set(i, qo_indptr[i]);
    const int64_t row = s.kv_heads * s.head_dim;  // elements of one position
    HostTensor& k = (*t)[kK];
    HostTensor& v = (*t)[kV];
    if (!kPaged) {
      const std::vector<int32_t> kv_indptr = Indptr(s.batch, s.kv_len);
      for (size_t i = 0; i < kv_indptr.size(); ++i) (*t)[kKvIndptr].Set(i, kv_indptr[i]);
      // V = noise + the sign of the position's region, 256 rows per chunk of work.
      const size_t chunk = 256, rows = static_cast<size_t>(s.total_kv);
      std::vector<uint64_t> seeds((rows + chunk - 1) / chunk);
      for (auto& seed : seeds) seed = rng();
      ForEachChunk(rows, chunk, [&](size_t c, size_t begin, size_t end) {
        std::mt19937_64 gen(seeds[c]);
        std::uniform_real_distribution<double> noise(-0.5, 0.5);
        for (size_t r = begin; r < end; ++r) {
          const int64_t b = static_cast<int64_t>(r) / s.kv_len, pos = static_cast<int64_t>(r) % s.kv_len;
          for (int64_t h = 0; h < s.kv_heads; ++h)
            for (int64_t d = 0; d < s.head_dim; ++d)
              v.Set(r * static_cast<size_t>(row) + static_cast<size_t>(h * s.head_dim + d),
                    noise(gen) + RegionSign(b, pos / kVRegion, h, d));
        }
      });
      return OkStatus();
    }

    FillPagedKv(s.table, s.kv_heads, s.head_dim, rng, &(*t)[kKvIndptr], &(*t)[kIndices], &(*t)[kLastPageLen], &k, &v);
    return OkStatus();
  }

  // float64 from the tensors alone (the index arrays as the case holds them): for every query
  // and query head, the visible positions' logits, softmax, weighted V, lse.
  Status CpuReference(const CaseSpec& spec, const std::vector<HostTensor>& t,
                      std::map<size_t, std::vector<double>>* expected) const override {
    const int64_t total_q = spec.tensors[kOut].shape[0], qo_heads = spec.tensors[kOut].shape[1];
    const int64_t head_dim = spec.tensors[kOut].shape[2];
    const int64_t kv_heads = spec.tensors[kK].shape[kPaged ? 2 : 1];
    const int64_t page_size = kPaged ? spec.tensors[kK].shape[1] : 0;
    const int64_t batch = spec.tensors[kQoIndptr].shape[0] - 1;
    const int64_t group = qo_heads / kv_heads;
    auto at = [](const HostTensor& x, int64_t i) { return x.Get(static_cast<size_t>(i)); };
    std::vector<int64_t> qo_indptr(static_cast<size_t>(batch + 1)), kv_indptr(static_cast<size_t>(batch + 1));
    for (int64_t b = 0; b <= batch; ++b) {
      qo_indptr[static_cast<size_t>(b)] = static_cast<int64_t>(at(t[kQoIndptr], b));
      kv_indptr[static_cast<size_t>(b)] = static_cast<int64_t>(at(t[kKvIndptr], b));
    }
    std::vector<int64_t> kv_lens(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t n = kv_indptr[static_cast<size_t>(b + 1)] - kv_indptr[static_cast<size_t>(b)];
      kv_lens[static_cast<size_t>(b)] =
          kPaged ? (n == 0 ? 0 : (n - 1) * page_size + static_cast<int64_t>(at(t[kLastPageLen], b))) : n;
    }
    const bool causal = AxisValue(spec.axes, "mask") != 2;
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    std::vector<int32_t> indices;
    if (kPaged)
      for (int64_t i = 0; i < spec.tensors[kIndices].shape[0]; ++i)
        indices.push_back(static_cast<int32_t>(at(t[kIndices], i)));
    auto kv_row = [&](int64_t b, int64_t j) {
      if (!kPaged) return kv_indptr[static_cast<size_t>(b)] + j;
      const int64_t page = indices[static_cast<size_t>(kv_indptr[static_cast<size_t>(b)] + j / page_size)];
      return page * page_size + j % page_size;
    };
    std::vector<double> out(static_cast<size_t>(total_q * qo_heads * head_dim), 0.0),
        lse(static_cast<size_t>(total_q * qo_heads), -INFINITY);
    ForEachChunk(static_cast<size_t>(batch), 1, [&](size_t, size_t b0, size_t b1) {
      for (int64_t b = static_cast<int64_t>(b0); b < static_cast<int64_t>(b1); ++b) {
        const int64_t q0 = qo_indptr[static_cast<size_t>(b)];
        const int64_t q_len = qo_indptr[static_cast<size_t>(b + 1)] - q0, kv_len = kv_lens[static_cast<size_t>(b)];
        std::vector<int64_t> rows(static_cast<size_t>(kv_len));
        for (int64_t j = 0; j < kv_len; ++j) rows[static_cast<size_t>(j)] = kv_row(b, j);
        std::vector<double> s(static_cast<size_t>(kv_len));
        for (int64_t i = 0; i < q_len; ++i) {
          const int64_t end = causal ? std::min(kv_len, kv_len - q_len + i + 1) : kv_len;
          if (end <= 0) continue;  // out 0, lse -inf
          for (int64_t h = 0; h < qo_heads; ++h) {
            const int64_t kvh = h / group, qrow = ((q0 + i) * qo_heads + h) * head_dim;
            double m = -INFINITY;
            for (int64_t j = 0; j < end; ++j) {
              const int64_t krow = (rows[static_cast<size_t>(j)] * kv_heads + kvh) * head_dim;
              double dot = 0;
              for (int64_t d = 0; d < head_dim; ++d) dot += at(t[kQ], qrow + d) * at(t[kK], krow + d);
              s[static_cast<size_t>(j)] = dot * scale;
              m = std::max(m, dot * scale);
            }
            double sum = 0;
            for (int64_t j = 0; j < end; ++j)
              sum += (s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - m));
            for (int64_t j = 0; j < end; ++j) {
              const double p = s[static_cast<size_t>(j)] / sum;
              const int64_t vrow = (rows[static_cast<size_t>(j)] * kv_heads + kvh) * head_dim;
              for (int64_t d = 0; d < head_dim; ++d) out[static_cast<size_t>(qrow + d)] += p * at(t[kV], vrow + d);
            }
            lse[static_cast<size_t>((q0 + i) * qo_heads + h)] = m + std::log(sum);
          }
        }
      }
    });
    (*expected)[kOut] = std::move(out);
    (*expected)[kLse] = std::move(lse);
    return OkStatus();
  }

  StatusOr<BackendFn> Prepare(const std::string& backend, const CaseSpec& spec, const ShapeAxes& shape,
                              DType dtype) const override {
    KILN_ASSIGN_OR_RETURN(auto s, PrefillShapeOf(shape, kPaged, kName));
    KILN_ASSIGN_OR_RETURN(auto driver, client::CudaDriver::Get());
    if (backend == "kiln") {
      KILN_RETURN_IF_ERROR(RequireSm90(kName));
      // The host copies of the index arrays the plan is made from: the same as FillInputs wrote.
      const std::vector<int32_t> qo_indptr = Indptr(s.batch, s.q_len);
      ops::PrefillOptions options;
      options.causal = s.causal;
      StatusOr<ops::BatchPrefillPlan> made = Status(StatusCode::kInternal, "no plan");
      if (kPaged) {
        const std::vector<int32_t> kv_indptr = KvIndptr(s.table), last = KvLastPageLen(s.table);
        made = ops::BatchPrefillPlan::CreatePaged(qo_indptr.data(), kv_indptr.data(), last.data(), s.batch, s.qo_heads,
                                                  s.kv_heads, s.head_dim, s.table.page_size, dtype, options);
      } else {
        const std::vector<int32_t> kv_indptr = Indptr(s.batch, s.kv_len);
        made = ops::BatchPrefillPlan::CreateRagged(qo_indptr.data(), kv_indptr.data(), s.batch, s.qo_heads, s.kv_heads,
                                                   s.head_dim, dtype, options);
      }
      if (!made.ok()) return made.status();
      const ops::BatchPrefillPlan plan = *made;
      std::shared_ptr<DeviceMemory> workspace;
      if (plan.workspace_bytes() > 0) {
        KILN_ASSIGN_OR_RETURN(auto memory, DeviceMemory::Allocate(*driver, plan.workspace_bytes()));
        workspace = std::make_shared<DeviceMemory>(std::move(memory));
      }
      return BackendFn([plan, workspace](const TensorSet& t, CUstream stream) {
        void* ws = workspace ? workspace->data() : nullptr;
        const size_t ws_bytes = workspace ? workspace->bytes() : 0;
        if constexpr (kPaged)
          return ops::batch_prefill_paged(plan, t[kOut], &t[kLse], t[kQ], t[kK], t[kV], t[kQoIndptr], t[kKvIndptr],
                                          t[kIndices], t[kLastPageLen], ws, ws_bytes, stream);
        return ops::batch_prefill_ragged(plan, t[kOut], &t[kLse], t[kQ], t[kK], t[kV], t[kQoIndptr], t[kKvIndptr], ws,
                                         ws_bytes, stream);
      });
    }
    if (backend != "reference")
      return Status(StatusCode::kNotFound, std::string(name()) + " has no backend '" + backend + "'");
    if (s.head_dim > 256)
      return client::InvalidArgument(std::string(kName) + " reference: head_dim=" + std::to_string(s.head_dim) +
                                     " exceeds its 256 (two dims per thread)");
    if (s.qo_heads > 65535)
      return client::InvalidArgument(std::string(kName) + " reference: num_qo_heads=" + std::to_string(s.qo_heads) +
                                     " exceeds its grid's 65535 rows");
    KILN_ASSIGN_OR_RETURN(auto kernel, LoadReferenceKernel("kiln_bench_ref_prefill", kReferenceSource,
                                                           "kiln_bench_ref_batch_prefill", dtype));
    const long long batch = s.batch, qo_heads = s.qo_heads, kv_heads = s.kv_heads, head_dim = s.head_dim;
    const long long page_size = kPaged ? s.table.page_size : 0;
    const int causal = s.causal ? 1 : 0;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
    const unsigned tokens = static_cast<unsigned>(s.total_q);
    return BackendFn([k = kernel, batch, qo_heads, kv_heads, head_dim, page_size, causal, scale,
                      tokens](const TensorSet& t, CUstream stream) {
      LaunchConfig config;
      config.grid.x = tokens;
      config.grid.y = static_cast<unsigned>(qo_heads);
      config.block.x = 128;
      config.stream = stream;
      void* indices = kPaged ? t[kIndices].data : nullptr;
      void* last = kPaged ? t[kLastPageLen].data : nullptr;
      return k(config, t[kOut].data, t[kLse].data, t[kQ].data, t[kK].data, t[kV].data, t[kQoIndptr].data,
               t[kKvIndptr].data, indices, last, batch, qo_heads, kv_heads, head_dim, page_size, causal, scale);
    });
  }
};

using BatchPrefillRaggedRoutine = BatchPrefillRoutine<false>;
using BatchPrefillPagedRoutine = BatchPrefillRoutine<true>;

}  // namespace

KILN_BENCH_REGISTER_ROUTINE(BatchPrefillRaggedRoutine);
KILN_BENCH_REGISTER_ROUTINE(BatchPrefillPagedRoutine);

}  // namespace kiln::bench
