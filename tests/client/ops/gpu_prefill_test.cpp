// [gpu] Prefill attention (kiln/ops/prefill.h) on a real GPU against a float64 CPU reference of
// exactly the header's semantics (causal aligned to the end, sliding window, soft cap, lse in
// natural log, out = 0 and lse = -inf where a query sees nothing):
//   - sixteen specializations (ten ragged, six paged) that cover every head dim (64/128/256),
//     group (1/2/4/8), dtype, causal and soft cap state, and page size (1/16/64), each on a
//     batch mixing q_len 0, 1, 7, 128 and 1000, chunks (q_len < kv_len), kv_len 0 (non-causal:
//     out 0, lse -inf), then again with a window, another scale, strided q/out/lse (a view into
//     a fused-qkv-wide buffer; padded heads and rows) or K/V pages interleaved in one pool, no
//     lse; windows of 0 and of more than the KV; q, k and v as views into one fused qkv buffer;
//     and each on a batch of at most 8 queries a request, which the plan runs on the mma.sync
//     kernel's 64-row tiles at every head dim (asserted), with and without a window;
//   - long requests: q_len 4097 (causal and not), 1000 queries over 3000 positions, a batch
//     mixing q_len 1 and 32768 (a strided subset of rows checked, every row checked for NaN);
//   - split-KV: 8 queries over 100 000 positions (paged), 2 x 4 queries over 60 000 (group 4,
//     head_dim 256, soft cap), a window over 50 000, non-causal over 30 000 (all on 64-row
//     tiles), 40 queries over 60 000 on the Hopper kernel's 128-row tiles: plan.split() and the
//     row tile asserted, V striped so that a lost or doubled chunk shows;
//   - ragged and paged bit for bit on the same data (a batch that does not split, one that
//     does; plan.split() asserted equal first);
//   - a plan reused over runs with new data (split and not, on a stream, workspace re-poisoned);
//   - the C ABI (ragged and paged, through DLTensors); refusals against a real plan.
// Fresh random data everywhere (never zeros, seeded per test); out, lse, workspace, the padding
// of strided views and every cache slot no request owns poisoned with NaN (0xFF), so a read
// outside a request or a missing write shows.
//
// The reference is float64 over ALL visible positions of every row it checks; for long
// requests it checks the first and last 8 query positions and a strided (odd stride) subset of
// the rest, every query head; every row of every request is checked to be finite (or exactly 0
// with lse -inf where nothing is visible) and inside the range of V.
//
// Tolerances of the output (abs and rel, per element): bf16 1.6e-2, fp16 3e-3. The softmax
// weights are rounded to the dtype for the tensor-core product with V (relative error 2^-9 for
// bf16, 2^-11 for fp16, at most that times max|v| = 2 in the output) and the output is rounded
// once more: worst cases 8e-3 (bf16) and 2e-3 (fp16). lse is fp32 throughout: 1e-3 abs. The
// split cases use striped V (uniform(-1, 1) +- 1 by 256-position region) and the tighter
// long-request tolerances of gpu_decode_test (bf16 2e-3 abs, fp16 5e-4 abs): there every
// query spreads its weight over tens of thousands of positions, so the rounding errors average
// out while a lost chunk moves the output by about 1 / regions.
//
// Cost on an H200: about 32 NVRTC compiles (each GpuSession starts its own kilnd, so without
// KILN_TEST_CACHE_DIR a specialization used by several TEST_CASEs compiles in each; 0.5-2 s
// each) and ~20 s of host work (random data, the references on all cores): about 1.5 minutes,
// well under 2.5. The largest buffers are ~250 MB (K and V of 2 x 60 000 positions, 2 heads of
// 256).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/ops/prefill/prefill_plan.h"
#include "client/ops/prefill/prefill_tensor_maps.h"
#include "kiln/ops/prefill.h"
#include "tests/support/gpu_harness.h"

namespace {

using kiln::DType;
using kiln::TensorView;
using kiln::client::PrefillPlanAccess;
using kiln::ops::BatchPrefillPlan;
using kiln::ops::PrefillOptions;
using kiln::testing::DeviceBuffer;
using kiln::testing::GpuSession;
using kiln::testing::HopperSession;
using kiln::testing::HostTensor;
using kiln::testing::IntView;
using kiln::testing::Tolerance;
using kiln::testing::UploadInts;

Tolerance OutputTolerance(DType dtype) {
  return dtype == DType::kBFloat16 ? Tolerance{1.6e-2, 1.6e-2} : Tolerance{3e-3, 3e-3};
}
// Long requests with striped V (see the header).
Tolerance LongTolerance(DType dtype) {
  return dtype == DType::kBFloat16 ? Tolerance{2e-3, 1.6e-2} : Tolerance{5e-4, 3e-3};
}
constexpr Tolerance kLseTolerance = {1e-3, 1e-5};
constexpr double kSoftCap = 5.0;  // logits have a standard deviation of ~1.3: the cap bends them

// Calls fn(i) for i in [0, n) on all cores. fn must not use Catch's macros.
template <typename Fn>
void ParallelFor(int64_t n, const Fn& fn) {
  const int64_t threads = std::clamp<int64_t>(static_cast<int64_t>(std::thread::hardware_concurrency()), 1, 32);
  std::atomic<int64_t> next{0};
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < std::min(threads, n); ++t)
    pool.emplace_back([&] {
      for (int64_t i = next++; i < n; i = next++) fn(i);
    });
  for (auto& t : pool) t.join();
}

// A specialization of the kernel (one NVRTC compile): dtype, head dim, group, causal, soft cap,
// and ragged (page 0) or paged with pages of `page` positions.
struct PrefillCase {
  DType dtype;
  int64_t dim, group;
  bool causal, soft_cap;
  int64_t page;
};

std::string Describe(const PrefillCase& c) {
  return std::string(c.page == 0 ? "ragged " : "paged ") + kiln::DTypeName(c.dtype) + " d" + std::to_string(c.dim) +
         " g" + std::to_string(c.group) + (c.causal ? " causal" : " non-causal") + (c.soft_cap ? " softcap" : "") +
         (c.page > 0 ? " p" + std::to_string(c.page) : "");
}

PrefillOptions OptionsFor(const PrefillCase& c, double sm_scale = 0, int64_t window_left = -1) {
  PrefillOptions o;
  o.causal = c.causal;
  o.sm_scale = sm_scale;
  o.logits_soft_cap = c.soft_cap ? kSoftCap : 0;
  o.window_left = window_left;
  return o;
}

struct Request {
  int64_t q_len, kv_len;
};

std::string DescribeRequests(const std::vector<Request>& requests) {
  std::ostringstream s;
  s << requests.size() << " requests (q_len, kv_len):";
  for (size_t b = 0; b < requests.size() && b < 12; ++b)
    s << " (" << requests[b].q_len << ", " << requests[b].kv_len << ")";
  if (requests.size() > 12) s << " ...";
  return s.str();
}

// One batch's data in the logical (ragged) layout: q [total_q, qo, dim], k and v [total_kv, kv,
// dim], request b's queries at rows qo_indptr[b] .., its positions at rows kv_indptr[b] ..; the
// same values as floats (exact in the dtype) for the reference.
struct Problem {
  DType dtype = DType::kBFloat16;
  int64_t qo = 0, kv = 0, dim = 0;
  std::vector<Request> requests;
  std::vector<int32_t> qo_indptr{0}, kv_indptr{0};
  HostTensor q, k, v;
  std::vector<float> qf, kf, vf;

  int64_t batch() const { return static_cast<int64_t>(requests.size()); }
  int64_t total_q() const { return qo_indptr.back(); }
  int64_t total_kv() const { return kv_indptr.back(); }
  int64_t group() const { return qo / kv; }
};

std::vector<float> Floats(const HostTensor& t) {
  std::vector<float> f(t.size());
  for (size_t i = 0; i < f.size(); ++i) f[i] = t.Get(i);
  return f;
}

// V with a sign that flips every 256 positions: a chunk lost or counted twice moves the output
// by far more than the tolerance, although the average over 100 000 positions is near zero.
double StripedValue(int64_t pos, std::mt19937& rng) {
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  double x = uniform(rng) + ((pos / 256) % 2 == 0 ? 1.0 : -1.0);
  return x == 0 ? 0.5 : x;
}

// Fresh data: q and K uniform in [-2, 2) (never 0); V the same, or v_value(position).
Problem MakeProblem(DType dtype, int64_t qo, int64_t kv, int64_t dim, const std::vector<Request>& requests,
                    std::mt19937& rng, double (*v_value)(int64_t, std::mt19937&) = nullptr) {
  Problem p;
  p.dtype = dtype;
  p.qo = qo;
  p.kv = kv;
  p.dim = dim;
  p.requests = requests;
  for (const Request& r : requests) {
    p.qo_indptr.push_back(static_cast<int32_t>(p.qo_indptr.back() + r.q_len));
    p.kv_indptr.push_back(static_cast<int32_t>(p.kv_indptr.back() + r.kv_len));
  }
  p.q = kiln::testing::RandomTensor(dtype, static_cast<size_t>(p.total_q() * qo * dim), rng);
  p.k = kiln::testing::RandomTensor(dtype, static_cast<size_t>(p.total_kv() * kv * dim), rng);
  if (v_value == nullptr) {
    p.v = kiln::testing::RandomTensor(dtype, static_cast<size_t>(p.total_kv() * kv * dim), rng);
  } else {
    p.v = kiln::testing::MakeHostTensor(dtype, static_cast<size_t>(p.total_kv() * kv * dim));
    for (size_t b = 0; b < requests.size(); ++b)
      for (int64_t pos = 0; pos < requests[b].kv_len; ++pos)
        for (int64_t e = 0; e < kv * dim; ++e)
          p.v.Set(static_cast<size_t>((p.kv_indptr[b] + pos) * kv * dim + e), static_cast<float>(v_value(pos, rng)));
  }
  p.qf = Floats(p.q);
  p.kf = Floats(p.k);
  p.vf = Floats(p.v);
  return p;
}

// The positions [lo, hi) query i of request r sees (empty when hi <= lo), as kiln/ops/prefill.h
// defines them: its own position is p = kv_len - q_len + i; j <= p when causal, j >= p -
// window_left with a window.
std::pair<int64_t, int64_t> Visible(const Request& r, int64_t i, const PrefillOptions& o) {
  const int64_t p = r.kv_len - r.q_len + i;
  int64_t lo = 0, hi = r.kv_len;
  if (o.causal) hi = std::min(hi, p + 1);
  if (o.window_left >= 0) lo = std::max(lo, p - o.window_left);
  return {lo, hi};
}

// The float64 reference of batch_prefill_{ragged,paged} (kernels/traces/batch_prefill_*.json
// name it), one row at a time (query i of request b, query head h) from all its visible
// positions: s_j = sm_scale q.k_j (cap tanh(s / cap) with a soft cap), out = softmax(s) V,
// lse = ln sum exp(s); nothing visible: out 0, lse -inf.
void ReferencePrefill(const Problem& p, const PrefillOptions& o, int64_t b, int64_t i, int64_t h, double* out,
                      double* lse) {
  const Request& r = p.requests[static_cast<size_t>(b)];
  const auto [lo, hi] = Visible(r, i, o);
  std::fill(out, out + p.dim, 0.0);
  if (hi <= lo) {
    *lse = -INFINITY;
    return;
  }
  const double scale = o.sm_scale == 0 ? 1.0 / std::sqrt(static_cast<double>(p.dim)) : o.sm_scale;
  const int64_t kvh = h / p.group();
  const float* qrow = &p.qf[static_cast<size_t>(((p.qo_indptr[static_cast<size_t>(b)] + i) * p.qo + h) * p.dim)];
  const int64_t kv0 = p.kv_indptr[static_cast<size_t>(b)];
  std::vector<double> s(static_cast<size_t>(hi - lo));
  double m = -INFINITY;
  for (int64_t j = lo; j < hi; ++j) {
    const float* krow = &p.kf[static_cast<size_t>(((kv0 + j) * p.kv + kvh) * p.dim)];
    double dot = 0;
    for (int64_t d = 0; d < p.dim; ++d) dot += static_cast<double>(qrow[d]) * krow[d];
    double x = dot * scale;
    if (o.logits_soft_cap > 0) x = o.logits_soft_cap * std::tanh(x / o.logits_soft_cap);
    s[static_cast<size_t>(j - lo)] = x;
    m = std::max(m, x);
  }
  double sum = 0;
  for (double& x : s) sum += (x = std::exp(x - m));
  for (int64_t j = lo; j < hi; ++j) {
    const double w = s[static_cast<size_t>(j - lo)] / sum;
    const float* vrow = &p.vf[static_cast<size_t>(((kv0 + j) * p.kv + kvh) * p.dim)];
    for (int64_t d = 0; d < p.dim; ++d) out[d] += w * vrow[d];
  }
  *lse = m + std::log(sum);
}

// The query positions of a request the reference checks: all of a short request; of a long
// one the first and last 8, the middle two and an odd stride through the rest (~64 rows; an odd
// stride meets every offset inside a 64-row tile).
std::vector<int64_t> RowsToCheck(int64_t q_len, bool all) {
  std::vector<int64_t> rows;
  if (all || q_len <= 160) {
    rows.resize(static_cast<size_t>(q_len));
    std::iota(rows.begin(), rows.end(), 0);
    return rows;
  }
  for (int64_t i = 0; i < 8; ++i) rows.push_back(i);
  const int64_t stride = ((q_len - 16) / 48) | 1;
  for (int64_t i = 8; i < q_len - 8; i += stride) rows.push_back(i);
  rows.push_back(q_len / 2 - 1);
  rows.push_back(q_len / 2);
  for (int64_t i = q_len - 8; i < q_len; ++i) rows.push_back(i);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

// ---- The device side ----

struct PageTable {
  std::vector<int32_t> indptr{0}, last;  // kv_indptr in pages; kv_last_page_len
  int64_t used = 0;
};

// ceil(kv_len / page) pages per request (none for kv_len 0: its last_page_len, ignored, is 1).
PageTable PagesOf(const std::vector<Request>& requests, int64_t page) {
  PageTable t;
  for (const Request& r : requests) {
    const int64_t pages = (r.kv_len + page - 1) / page;
    t.used += pages;
    t.indptr.push_back(static_cast<int32_t>(t.used));
    t.last.push_back(static_cast<int32_t>(pages == 0 ? 1 : r.kv_len - (pages - 1) * page));
  }
  return t;
}

struct Layout {
  bool strided = false;      // q rows of a fused-qkv-wide buffer (the rest NaN); out and lse padded
  bool fused = false;        // ragged, q_len == kv_len: q, k and v views into one [tokens, qo + 2 kv, dim] buffer
  bool interleaved = false;  // paged: page p of K, then page p of V (page stride two pages)
  bool nan_tail = false;     // ragged, not fused: k and v have kNanTailRows rows of NaN past total_kv
};
// A K/V tile of the Hopper kernel: a tile that crosses the last request's kv_len would reach
// into them, were it loaded whole.
constexpr int64_t kNanTailRows = 128;

// The inputs on the device in one layout. Paged: pages go to requests in a random order from a
// pool with 3 spare pages; every slot no request owns is NaN.
struct DeviceInputs {
  std::unique_ptr<DeviceBuffer> q_buf, k_buf, v_buf;
  std::unique_ptr<DeviceBuffer> qo_indptr, kv_indptr, kv_indices, kv_last;
  TensorView q, k, v;
  PageTable table;
  std::vector<int32_t> indices;
  int64_t num_pages = 0;
};

DeviceInputs Upload(const PrefillCase& c, const Problem& p, const Layout& layout, std::mt19937& rng) {
  DeviceInputs in;
  const int64_t qo = p.qo, kv = p.kv, dim = p.dim, es = 2;
  const int64_t wide = (qo + 2 * kv) * dim;  // a fused qkv row
  auto upload = [](const std::vector<uint8_t>& bytes) {
    auto buffer = std::make_unique<DeviceBuffer>(std::max<size_t>(bytes.size(), 16));
    buffer->Upload(bytes);
    return buffer;
  };
  if (layout.fused) {
    REQUIRE(c.page == 0);
    REQUIRE(p.total_q() == p.total_kv());
    std::vector<uint8_t> host(static_cast<size_t>(p.total_q() * wide * es), 0xFF);
    for (int64_t t = 0; t < p.total_q(); ++t) {
      std::memcpy(host.data() + t * wide * es, p.q.bytes.data() + t * qo * dim * es,
                  static_cast<size_t>(qo * dim * es));
      std::memcpy(host.data() + (t * wide + qo * dim) * es, p.k.bytes.data() + t * kv * dim * es,
                  static_cast<size_t>(kv * dim * es));
      std::memcpy(host.data() + (t * wide + (qo + kv) * dim) * es, p.v.bytes.data() + t * kv * dim * es,
                  static_cast<size_t>(kv * dim * es));
    }
    in.q_buf = upload(host);
    char* base = in.q_buf->data();
    in.q = TensorView::Strided(base, p.dtype, {p.total_q(), qo, dim}, {wide, dim, 1});
    in.k = TensorView::Strided(base + qo * dim * es, p.dtype, {p.total_kv(), kv, dim}, {wide, dim, 1});
    in.v = TensorView::Strided(base + (qo + kv) * dim * es, p.dtype, {p.total_kv(), kv, dim}, {wide, dim, 1});
  } else {
    if (layout.strided) {
      std::vector<uint8_t> host(static_cast<size_t>(p.total_q() * wide * es), 0xFF);
      for (int64_t t = 0; t < p.total_q(); ++t)
        std::memcpy(host.data() + t * wide * es, p.q.bytes.data() + t * qo * dim * es,
                    static_cast<size_t>(qo * dim * es));
      in.q_buf = upload(host);
      in.q = TensorView::Strided(in.q_buf->data(), p.dtype, {p.total_q(), qo, dim}, {wide, dim, 1});
    } else {
      in.q_buf = upload(p.q.bytes);
      in.q = TensorView::Contiguous(in.q_buf->data(), p.dtype, {p.total_q(), qo, dim});
    }
    if (c.page == 0) {
      const int64_t tail = layout.nan_tail ? kNanTailRows : 0;
      auto with_tail = [&](const std::vector<uint8_t>& bytes) {
        std::vector<uint8_t> host = bytes;
        host.resize(static_cast<size_t>((p.total_kv() + tail) * kv * dim * es), 0xFF);  // 0xFFFF: NaN
        return host;
      };
      in.k_buf = upload(with_tail(p.k.bytes));
      in.v_buf = upload(with_tail(p.v.bytes));
      in.k = TensorView::Contiguous(in.k_buf->data(), p.dtype, {p.total_kv() + tail, kv, dim});
      in.v = TensorView::Contiguous(in.v_buf->data(), p.dtype, {p.total_kv() + tail, kv, dim});
    }
  }
  in.qo_indptr = UploadInts(p.qo_indptr);
  if (c.page == 0) {
    in.kv_indptr = UploadInts(p.kv_indptr);
    return in;
  }

  const int64_t page = c.page;
  in.table = PagesOf(p.requests, page);
  in.num_pages = in.table.used + 3;  // spare pages nobody owns
  std::vector<int32_t> order(static_cast<size_t>(in.num_pages));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  in.indices.assign(order.begin(), order.begin() + in.table.used);
  const int64_t slot = kv * dim, page_elems = page * slot;
  const int64_t page_stride = layout.interleaved ? 2 * page_elems : page_elems;
  const int64_t v_offset = layout.interleaved ? page_elems : in.num_pages * page_elems;
  std::vector<uint8_t> pool(static_cast<size_t>(2 * in.num_pages * page_elems * es), 0xFF);
  for (size_t b = 0; b < p.requests.size(); ++b)
    for (int64_t pos = 0; pos < p.requests[b].kv_len; ++pos) {
      const int64_t pg = in.indices[static_cast<size_t>(in.table.indptr[b] + pos / page)];
      const int64_t at = pg * page_stride + (pos % page) * slot;
      const int64_t src = (p.kv_indptr[b] + pos) * slot;
      std::memcpy(pool.data() + at * es, p.k.bytes.data() + src * es, static_cast<size_t>(slot * es));
      std::memcpy(pool.data() + (v_offset + at) * es, p.v.bytes.data() + src * es, static_cast<size_t>(slot * es));
    }
  in.k_buf = upload(pool);
  in.k = TensorView::Strided(in.k_buf->data(), p.dtype, {in.num_pages, page, kv, dim}, {page_stride, slot, dim, 1});
  in.v = TensorView::Strided(in.k_buf->data() + v_offset * es, p.dtype, {in.num_pages, page, kv, dim},
                             {page_stride, slot, dim, 1});
  in.kv_indptr = UploadInts(in.table.indptr);
  in.kv_indices = UploadInts(in.indices);
  in.kv_last = UploadInts(in.table.last);
  return in;
}

// out [total_q, qo, dim] and lse [total_q, qo], poisoned; strided: heads padded by 8 elements,
// rows by 16, lse rows by 4 (heads stay contiguous, as the header asks).
struct DeviceOutputs {
  int64_t out_token = 0, out_head = 0, lse_token = 0;
  std::unique_ptr<DeviceBuffer> out, lse;
  TensorView out_view, lse_view;
};

DeviceOutputs MakeOutputs(const Problem& p, bool strided) {
  DeviceOutputs o;
  o.out_head = strided ? p.dim + 8 : p.dim;
  o.out_token = strided ? p.qo * o.out_head + 16 : p.qo * p.dim;
  o.lse_token = strided ? p.qo + 4 : p.qo;
  o.out = std::make_unique<DeviceBuffer>(std::max<size_t>(static_cast<size_t>(p.total_q() * o.out_token) * 2, 16));
  o.lse = std::make_unique<DeviceBuffer>(std::max<size_t>(static_cast<size_t>(p.total_q() * o.lse_token) * 4, 16));
  o.out->Poison();
  o.lse->Poison();
  o.out_view = TensorView::Strided(o.out->data(), p.dtype, {p.total_q(), p.qo, p.dim}, {o.out_token, o.out_head, 1});
  o.lse_view = TensorView::Strided(o.lse->data(), DType::kFloat32, {p.total_q(), p.qo}, {o.lse_token, 1});
  return o;
}

kiln::StatusOr<BatchPrefillPlan> MakePlan(const PrefillCase& c, const Problem& p, const PrefillOptions& o) {
  if (c.page == 0)
    return BatchPrefillPlan::CreateRagged(p.qo_indptr.data(), p.kv_indptr.data(), p.batch(), p.qo, p.kv, p.dim, p.dtype,
                                          o);
  const PageTable t = PagesOf(p.requests, c.page);
  return BatchPrefillPlan::CreatePaged(p.qo_indptr.data(), t.indptr.data(), t.last.data(), p.batch(), p.qo, p.kv, p.dim,
                                       c.page, p.dtype, o);
}

kiln::Status Launch(const PrefillCase& c, const BatchPrefillPlan& plan, const DeviceOutputs& out,
                    const DeviceInputs& in, bool with_lse, const DeviceBuffer& workspace, CUstream stream) {
  const size_t ws = plan.workspace_bytes();
  void* ws_ptr = ws > 0 ? workspace.data() : nullptr;
  const TensorView* lse = with_lse ? &out.lse_view : nullptr;
  const TensorView qo_indptr = IntView(*in.qo_indptr, static_cast<size_t>(plan.batch_size() + 1));
  const TensorView kv_indptr = IntView(*in.kv_indptr, static_cast<size_t>(plan.batch_size() + 1));
  if (c.page == 0)
    return kiln::ops::batch_prefill_ragged(plan, out.out_view, lse, in.q, in.k, in.v, qo_indptr, kv_indptr, ws_ptr, ws,
                                           stream);
  return kiln::ops::batch_prefill_paged(plan, out.out_view, lse, in.q, in.k, in.v, qo_indptr, kv_indptr,
                                        IntView(*in.kv_indices, in.indices.size()),
                                        IntView(*in.kv_last, in.table.last.size()), ws_ptr, ws, stream);
}

// The outputs against the reference: the checked rows element by element (lse -inf where
// nothing is visible), every row finite (or 0 / -inf) and inside V's range, padding untouched,
// lse untouched when not asked for.
void CheckOutputs(const Problem& p, const PrefillOptions& o, const DeviceOutputs& out, bool with_lse, Tolerance tol,
                  bool all_rows) {
  std::vector<std::pair<int64_t, int64_t>> rows;  // (request, query)
  for (int64_t b = 0; b < p.batch(); ++b)
    for (int64_t i : RowsToCheck(p.requests[static_cast<size_t>(b)].q_len, all_rows)) rows.push_back({b, i});
  const int64_t n = static_cast<int64_t>(rows.size()), qo = p.qo, dim = p.dim;
  std::vector<double> want_out(static_cast<size_t>(n * qo * dim)), want_lse(static_cast<size_t>(n * qo));
  ParallelFor(n * qo, [&](int64_t x) {
    const auto [b, i] = rows[static_cast<size_t>(x / qo)];
    ReferencePrefill(p, o, b, i, x % qo, &want_out[static_cast<size_t>(x * dim)], &want_lse[static_cast<size_t>(x)]);
  });

  const HostTensor got{p.dtype, out.out->Download()};
  std::vector<float> lse(out.lse->bytes() / 4);
  const std::vector<uint8_t> lse_bytes = out.lse->Download();
  std::memcpy(lse.data(), lse_bytes.data(), lse.size() * 4);
  auto out_at = [&](int64_t t, int64_t h, int64_t d) {
    return static_cast<size_t>(t * out.out_token + h * out.out_head + d);
  };
  auto lse_at = [&](int64_t t, int64_t h) { return static_cast<size_t>(t * out.lse_token + h); };

  int64_t bad = 0, bad_lse = 0;
  std::string first_bad, first_bad_lse;
  for (int64_t x = 0; x < n; ++x) {
    const auto [b, i] = rows[static_cast<size_t>(x)];
    const int64_t t = p.qo_indptr[static_cast<size_t>(b)] + i;
    const Request& r = p.requests[static_cast<size_t>(b)];
    for (int64_t h = 0; h < qo; ++h) {
      for (int64_t d = 0; d < dim; ++d) {
        const double g = got.Get(out_at(t, h, d)), w = want_out[static_cast<size_t>((x * qo + h) * dim + d)];
        if (!kiln::testing::Close(g, w, tol) && bad++ == 0)
          first_bad = "request " + std::to_string(b) + " (q_len " + std::to_string(r.q_len) + ", kv_len " +
                      std::to_string(r.kv_len) + ") query " + std::to_string(i) + " head " + std::to_string(h) +
                      " dim " + std::to_string(d) + ": got " + std::to_string(g) + ", want " + std::to_string(w);
      }
      if (!with_lse) continue;
      const float g = lse[lse_at(t, h)];
      const double w = want_lse[static_cast<size_t>(x * qo + h)];
      const bool ok = std::isinf(w) ? (std::isinf(g) && g < 0) : kiln::testing::Close(g, w, kLseTolerance);
      if (!ok && bad_lse++ == 0)
        first_bad_lse = "request " + std::to_string(b) + " query " + std::to_string(i) + " head " + std::to_string(h) +
                        ": got " + std::to_string(g) + ", want " + std::to_string(w);
    }
  }
  INFO("checked " << n << " query positions x " << qo
                  << " heads against float64; first mismatch of out: " << first_bad);
  CHECK(bad == 0);
  INFO("first mismatch of lse: " << first_bad_lse);
  CHECK(bad_lse == 0);

  // Every row of every request: written, finite, a convex combination of V (|v| <= 2); 0 and
  // -inf where nothing is visible. Every other element of out (padding) and of lse untouched.
  std::vector<bool> written(got.size(), false), lse_written(lse.size(), false);
  int64_t implausible = 0, lse_implausible = 0;
  std::string first_implausible;
  const double bound = 2.0 * (1 + tol.rel) + tol.abs;
  for (int64_t b = 0; b < p.batch(); ++b) {
    const Request& r = p.requests[static_cast<size_t>(b)];
    for (int64_t i = 0; i < r.q_len; ++i) {
      const auto [lo, hi] = Visible(r, i, o);
      const int64_t t = p.qo_indptr[static_cast<size_t>(b)] + i;
      for (int64_t h = 0; h < qo; ++h) {
        for (int64_t d = 0; d < dim; ++d) {
          const size_t at = out_at(t, h, d);
          written[at] = true;
          const double g = got.Get(at);
          const bool ok = hi <= lo ? g == 0.0 : (std::isfinite(g) && std::fabs(g) <= bound);
          if (!ok && implausible++ == 0)
            first_implausible = "request " + std::to_string(b) + " query " + std::to_string(i) + " head " +
                                std::to_string(h) + " dim " + std::to_string(d) + ": " + std::to_string(g) +
                                (hi <= lo ? " (sees nothing: want 0)" : "");
        }
        lse_written[lse_at(t, h)] = true;
        if (with_lse) {
          const float g = lse[lse_at(t, h)];
          lse_implausible += hi <= lo ? !(std::isinf(g) && g < 0) : !std::isfinite(g);
        }
      }
    }
  }
  INFO("first implausible element of out: " << first_implausible);
  CHECK(implausible == 0);
  CHECK(lse_implausible == 0);
  int64_t padding_touched = 0, lse_touched = 0;
  for (size_t e = 0; e < got.size(); ++e)
    padding_touched += !written[e] && (got.bytes[2 * e] != 0xFF || got.bytes[2 * e + 1] != 0xFF);
  for (size_t e = 0; e < lse.size(); ++e) {
    const bool poisoned = std::all_of(lse_bytes.begin() + 4 * e, lse_bytes.begin() + 4 * e + 4,
                                      [](uint8_t x) { return x == 0xFF; });
    lse_touched += (!with_lse || !lse_written[e]) && !poisoned;
  }
  CHECK(padding_touched == 0);
  INFO((with_lse ? "lse padding written" : "lse written although not asked for"));
  CHECK(lse_touched == 0);
}

struct RunOptions {
  PrefillOptions options;
  Layout layout;
  bool with_lse = true;
  int expect_split = -1;         // 0 / 1: the plan must (not) split; -1: either
  int expect_tile_rows = 0;      // 64 / 128: the plan's row tile, which picks the kernel; 0: either
  Tolerance tolerance = {0, 0};  // {0, 0}: OutputTolerance(dtype)
  bool all_rows = false;         // check every row, however long the request
};

// What a run left: the raw bytes of out and lse (in the run's layout), and the plan's split.
struct RunResult {
  std::vector<uint8_t> out, lse;
  bool split = false;
  int64_t num_items = 0, chunk_tokens = 0;
};

// One run with `plan` on `p` in its layout, checked against the reference.
RunResult RunWithPlan(const PrefillCase& c, const Problem& p, const BatchPrefillPlan& plan, const RunOptions& r,
                      std::mt19937& rng, CUstream stream = nullptr) {
  INFO(Describe(c) << ", " << p.qo << "/" << p.kv << " heads, " << DescribeRequests(p.requests) << ", window "
                   << r.options.window_left << ", sm_scale " << r.options.sm_scale
                   << (r.layout.strided ? ", strided" : "") << (r.layout.fused ? ", fused qkv" : "")
                   << (r.layout.interleaved ? ", interleaved pool" : "") << (r.with_lse ? "" : ", no lse"));
  INFO(plan.Describe());
  if (r.expect_split >= 0) CHECK(plan.split() == (r.expect_split == 1));
  if (r.expect_tile_rows > 0) CHECK(PrefillPlanAccess::Get(plan)->schedule.tile_rows == r.expect_tile_rows);
  if (!plan.split()) CHECK(plan.workspace_bytes() == 0);
  CHECK(plan.total_q() == p.total_q());
  const DeviceInputs in = Upload(c, p, r.layout, rng);
  const DeviceOutputs out = MakeOutputs(p, r.layout.strided);
  DeviceBuffer workspace(std::max<size_t>(plan.workspace_bytes(), 16));
  workspace.Poison();  // stale partials must not matter
  const kiln::Status status = Launch(c, plan, out, in, r.with_lse, workspace, stream);
  INFO(status.ToString());
  REQUIRE(status.ok());
  KILN_CU(kiln::testing::Driver().cuStreamSynchronize(stream));
  CheckOutputs(p, r.options, out, r.with_lse, r.tolerance.abs > 0 ? r.tolerance : OutputTolerance(p.dtype), r.all_rows);
  return {out.out->Download(), out.lse->Download(), plan.split(), plan.num_items(), plan.chunk_tokens()};
}

RunResult RunPrefill(const PrefillCase& c, const Problem& p, const RunOptions& r, std::mt19937& rng,
                     CUstream stream = nullptr) {
  INFO(Describe(c) << ", " << DescribeRequests(p.requests));
  auto plan = MakePlan(c, p, r.options);
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  CHECK(plan->paged() == (c.page > 0));
  CHECK(plan->page_size() == c.page);
  return RunWithPlan(c, p, *plan, r, rng, stream);
}

// The kv heads of a case: 2, or 1 for group 8 (16 query heads would make the reference slow).
int64_t KvHeadsFor(const PrefillCase& c) { return c.group == 8 ? 1 : 2; }

// Sixteen specializations: every head dim, group, dtype, causal and soft cap state, ragged and
// paged with pages of 1, 16 and 64.
const PrefillCase kRagged[] = {
    {DType::kBFloat16, 128, 4, true, false, 0},  // Llama-3.1-8B
    {DType::kBFloat16, 128, 4, false, false, 0}, {DType::kBFloat16, 64, 1, true, true, 0},
    {DType::kBFloat16, 256, 2, true, false, 0},  {DType::kBFloat16, 256, 8, false, true, 0},
    {DType::kFloat16, 128, 1, false, false, 0},  {DType::kFloat16, 64, 8, true, false, 0},
    {DType::kFloat16, 256, 4, true, true, 0},    {DType::kFloat16, 128, 2, true, true, 0},
    {DType::kBFloat16, 64, 2, false, false, 0},
};
const PrefillCase kPaged[] = {
    {DType::kBFloat16, 128, 4, true, false, 16},  // Llama-3.1-8B, kRagged[0]'s twin
    {DType::kBFloat16, 128, 8, true, true, 1},   {DType::kFloat16, 64, 1, false, false, 64},
    {DType::kBFloat16, 256, 2, true, true, 64},  {DType::kFloat16, 128, 4, true, false, 16},
    {DType::kFloat16, 256, 8, false, false, 1},
};

// q_len 0 (twice: with and without KV), 1, 7, 128 (q_len == kv_len), chunks over longer KV
// (13 over 300, 1 over 77), 1000 over 1000 (sampled), 64 / group-aligned edges (65 over 65).
std::vector<Request> MixedBatch(bool causal) {
  std::vector<Request> r = {{1, 1}, {7, 7}, {0, 5}, {128, 128}, {13, 300}, {0, 0}, {1000, 1000}, {1, 77}, {65, 65}};
  if (!causal) r.push_back({3, 0});  // nothing to see: out 0, lse -inf
  return r;
}

// At most 8 queries a request (64 rows at group 8): q_len 1, 8 and 3 over longer KV (chunks),
// q_len == kv_len, a request without queries.
std::vector<Request> ShortRowsBatch(bool causal) {
  std::vector<Request> r = {{1, 1}, {8, 8}, {5, 300}, {0, 7}, {8, 1500}, {3, 64}, {2, 129}};
  if (!causal) r.push_back({3, 0});
  return r;
}

TEST_CASE("batch_prefill matches a float64 reference over specializations, lengths and options",
          "[gpu][client][prefill]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(20251202);
  std::vector<PrefillCase> cases(std::begin(kRagged), std::end(kRagged));
  cases.insert(cases.end(), std::begin(kPaged), std::end(kPaged));
  for (const PrefillCase& c : cases) {
    const int64_t kv = KvHeadsFor(c), qo = kv * c.group;
    // Defaults: the whole causal (or full) range, lse, dense views.
    const Problem p = MakeProblem(c.dtype, qo, kv, c.dim, MixedBatch(c.causal), rng);
    RunPrefill(c, p, {.options = OptionsFor(c)}, rng);
    // A window of 37 positions, another scale, no lse; strided q, out and lse (ragged) or K and
    // V pages interleaved in one pool (paged, strided q and out too for the paged of page 16).
    const Problem p2 = MakeProblem(c.dtype, qo, kv, c.dim, MixedBatch(c.causal), rng);
    RunPrefill(c, p2,
               {.options = OptionsFor(c, 0.1, 37),
                .layout = {.strided = c.page == 0 || c.page == 16, .interleaved = c.page > 0},
                .with_lse = false},
               rng);
    // Requests of at most 64 rows (8 queries at group 8): the mma.sync kernel's 64-row tiles at
    // every head_dim (the plan's choice for speculative verification), with a window.
    const Problem few = MakeProblem(c.dtype, qo, kv, c.dim, ShortRowsBatch(c.causal), rng);
    RunPrefill(c, few, {.options = OptionsFor(c), .expect_tile_rows = 64}, rng);
    RunPrefill(c, few, {.options = OptionsFor(c, 0, 100), .expect_tile_rows = 64}, rng);
  }
  // A window of 0: causal, the query's own position alone; non-causal, [p, kv_len). A window
  // longer than any KV: the same as none. One kv head.
  for (const PrefillCase& c : {kRagged[0], kRagged[1]}) {
    const Problem p = MakeProblem(c.dtype, c.group, 1, c.dim, MixedBatch(c.causal), rng);
    RunPrefill(c, p, {.options = OptionsFor(c, 0, 0)}, rng);
    RunPrefill(c, p, {.options = OptionsFor(c, 0, int64_t{1} << 40)}, rng);
  }
  // q, k and v as views into one fused qkv buffer (q_len == kv_len: a plain prefill), with a
  // strided out and lse.
  const PrefillCase c = kRagged[0];
  const Problem fused = MakeProblem(c.dtype, 8, 2, c.dim, {{1, 1}, {100, 100}, {513, 513}, {0, 0}, {64, 64}}, rng);
  RunPrefill(c, fused, {.options = OptionsFor(c), .layout = {.strided = true, .fused = true}}, rng);
}

TEST_CASE("batch_prefill over long requests: 4097 queries, 1000 over 3000, lengths 1 and 32768 in one batch",
          "[gpu][client][prefill]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(4097);
  // 4097 queries, causal: 32 776 rows of group 8 on one kv head, 513 row tiles, the last
  // holding 8 rows.
  {
    const PrefillCase c = kRagged[6];  // fp16 d64 g8 causal
    const Problem p = MakeProblem(c.dtype, 8, 1, c.dim, {{4097, 4097}, {1, 1}}, rng);
    RunPrefill(c, p, {.options = OptionsFor(c)}, rng);
  }
  // 4097 queries, non-causal, then with a window (the lower edge moves with the query).
  {
    const PrefillCase c = kRagged[5];  // fp16 d128 g1 non-causal
    const Problem p = MakeProblem(c.dtype, 2, 2, c.dim, {{4097, 4097}}, rng);
    RunPrefill(c, p, {.options = OptionsFor(c)}, rng);
    RunPrefill(c, p, {.options = OptionsFor(c, 0, 1500)}, rng);
  }
  // A chunk of 1000 queries after 2000 cached positions, causal and not.
  for (const PrefillCase& c : {kRagged[0], kRagged[1]}) {
    const Problem p = MakeProblem(c.dtype, 8, 2, c.dim, {{1000, 3000}, {7, 2500}}, rng);
    RunPrefill(c, p, {.options = OptionsFor(c)}, rng);
  }
  // One token beside 32 768 (both q_len == kv_len) and a decode-like step over 5000: the long
  // request sampled, every row checked for NaN.
  {
    const PrefillCase c = kRagged[3];  // bf16 d256 g2 causal
    const Problem p = MakeProblem(c.dtype, 2, 1, c.dim, {{1, 1}, {32768, 32768}, {1, 5000}, {7, 7}}, rng);
    RunPrefill(c, p, {.options = OptionsFor(c)}, rng);
  }
}

TEST_CASE("split-KV: few queries over long KV are cut into chunks merged by lse", "[gpu][client][prefill]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(100000);
  // 8 queries over 100 000 positions in pages of 16 (one row tile, one kv head: the KV must be
  // cut to fill the GPU), beside a request shorter than a chunk, which stays whole.
  {
    const PrefillCase c = kPaged[0];  // bf16 d128 g4 causal p16
    const Problem p = MakeProblem(c.dtype, 4, 1, c.dim, {{8, 100000}, {3, 300}}, rng, StripedValue);
    RunPrefill(c, p, {.options = OptionsFor(c), .expect_split = 1, .tolerance = LongTolerance(c.dtype)}, rng);
  }
  // 2 requests x 4 queries over 60 000 positions, group 4, head_dim 256 (K/V tiles of 32), soft
  // cap, fp16, strided views.
  {
    const PrefillCase c = kRagged[7];  // fp16 d256 g4 causal softcap
    const Problem p = MakeProblem(c.dtype, 8, 2, c.dim, {{4, 60000}, {4, 60000}}, rng, StripedValue);
    RunPrefill(
        c, p,
        {.options = OptionsFor(c), .layout = {.strided = true}, .expect_split = 1, .tolerance = LongTolerance(c.dtype)},
        rng);
  }
  // A window of 20 000 over 50 000 positions: chunks counted from the window's first tile.
  {
    const PrefillCase c = kRagged[0];  // bf16 d128 g4 causal
    const Problem p = MakeProblem(c.dtype, 8, 2, c.dim, {{16, 50000}}, rng, StripedValue);
    RunPrefill(c, p, {.options = OptionsFor(c, 0, 20000), .expect_split = 1, .tolerance = LongTolerance(c.dtype)}, rng);
  }
  // The Hopper kernel split: 40 queries x group 4 (160 rows: two 128-row tiles) over 60 000.
  {
    const PrefillCase c = kRagged[0];  // bf16 d128 g4 causal
    const Problem p = MakeProblem(c.dtype, 4, 1, c.dim, {{40, 60000}, {2, 70}}, rng, StripedValue);
    RunPrefill(
        c, p,
        {.options = OptionsFor(c), .expect_split = 1, .expect_tile_rows = 128, .tolerance = LongTolerance(c.dtype)},
        rng);
  }
  // Non-causal: 8 queries over 30 000 positions.
  {
    const PrefillCase c = kRagged[1];  // bf16 d128 g4 non-causal
    const Problem p = MakeProblem(c.dtype, 8, 2, c.dim, {{8, 30000}, {1, 1}}, rng, StripedValue);
    RunPrefill(c, p, {.options = OptionsFor(c), .expect_split = 1, .tolerance = LongTolerance(c.dtype)}, rng);
  }
}

TEST_CASE("batch_prefill_ragged and batch_prefill_paged agree bit for bit on the same data", "[gpu][client][prefill]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(16);
  const PrefillCase ragged = kRagged[0], paged = kPaged[0];  // bf16 d128 g4 causal; the paged with pages of 16
  REQUIRE(ragged.dtype == paged.dtype);
  REQUIRE(ragged.dim == paged.dim);
  REQUIRE(ragged.group == paged.group);
  REQUIRE(ragged.causal == paged.causal);
  REQUIRE(ragged.soft_cap == paged.soft_cap);
  struct Batch {
    std::vector<Request> requests;
    bool split;
  };
  // Not split (no KV reaches 1024 positions), and split (two short row tiles over 60 000).
  for (const Batch& batch : {Batch{MixedBatch(true), false}, Batch{{{4, 60000}, {4, 60000}}, true}}) {
    const Problem p = MakeProblem(ragged.dtype, 8, 2, ragged.dim, batch.requests, rng,
                                  batch.split ? StripedValue : nullptr);
    const PrefillOptions o = OptionsFor(ragged, 0, batch.split ? -1 : 300);
    const Tolerance tol = batch.split ? LongTolerance(ragged.dtype) : OutputTolerance(ragged.dtype);
    auto plan_r = MakePlan(ragged, p, o);
    auto plan_p = MakePlan(paged, p, o);
    INFO(plan_r.status().ToString() << " / " << plan_p.status().ToString());
    REQUIRE(plan_r.ok());
    REQUIRE(plan_p.ok());
    INFO(plan_r->Describe() << " / " << plan_p->Describe());
    // The same schedule, or the comparison means nothing.
    REQUIRE(plan_r->split() == plan_p->split());
    CHECK(plan_r->split() == batch.split);
    CHECK(plan_r->num_items() == plan_p->num_items());
    CHECK(plan_r->chunk_tokens() == plan_p->chunk_tokens());
    const RunResult a = RunWithPlan(ragged, p, *plan_r, {.options = o, .tolerance = tol}, rng);
    const RunResult b = RunWithPlan(paged, p, *plan_p, {.options = o, .tolerance = tol}, rng);
    REQUIRE(a.out.size() == b.out.size());
    REQUIRE(a.lse.size() == b.lse.size());
    CHECK(std::memcmp(a.out.data(), b.out.data(), a.out.size()) == 0);
    CHECK(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size()) == 0);
  }
}

// The Hopper kernel loads ragged K/V tiles, and paged ones at pages of 8 and up, with TMA by
// default (KILN_PREFILL_TMA_KV) and with cp.async when told not to; the tile that crosses a
// request's kv_len is copied with cp.async either way, zeros past it. Both producers feed the
// same consumers, so the outputs must agree bit for bit; NaN rows past the last request
// (ragged) or in the unowned slots of a request's last page (paged) would reach its outputs
// were that tile loaded whole (a masked logit gives P = 0, and 0 x NaN is NaN).
TEST_CASE("K/V through TMA and through cp.async: the same bits, nothing read past kv_len", "[gpu][client][prefill]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(90);
  struct Restore {
    ~Restore() { kiln::client::SetPrefillTmaKvForTesting(-1); }
  } restore;
  // kv lengths on and off the 128-position tile: 300 (edge 256..383), 1000 over 1000, 128, 7,
  // the last request ending mid-tile (its edge tile would reach the NaN rows); and a split
  // batch (two requests of few row tiles over long KV; 70 queries keep the 128-row tiles at
  // group 1: the plan takes 64-row tiles when no request has more than 64 rows).
  const std::vector<Request> mixed = {{13, 300}, {1000, 1000}, {128, 128}, {0, 0}, {7, 7}, {200, 333}};
  const std::vector<Request> split = {{70, 20077}, {3, 9001}};
  // Ragged: bf16 d128 g4 causal, non-causal, fp16 d128 g2 causal soft cap, bf16 d64 g2
  // non-causal. Paged: bf16 d128 g4 causal at pages of 16 (K and V pages interleaved in one
  // pool), fp16 d64 g1 non-causal at 64, fp16 d128 g4 causal at 256 (a page holds tiles).
  const PrefillCase page256 = {DType::kFloat16, 128, 4, true, false, 256};
  for (const PrefillCase& c : {kRagged[0], kRagged[1], kRagged[8], kRagged[9], kPaged[0], kPaged[2], page256}) {
    const int64_t kv = KvHeadsFor(c), qo = kv * c.group;
    for (const bool with_split : {false, true}) {
      const Problem p = MakeProblem(c.dtype, qo, kv, c.dim, with_split ? split : mixed, rng,
                                    with_split ? StripedValue : nullptr);
      const PrefillOptions o = OptionsFor(c, 0, with_split ? -1 : 250);
      auto plan = MakePlan(c, p, o);
      INFO(plan.status().ToString());
      REQUIRE(plan.ok());
      const RunOptions r = {.options = o,
                            .layout = {.interleaved = c.page == 16, .nan_tail = c.page == 0},
                            .expect_split = with_split ? 1 : 0,
                            .expect_tile_rows = 128,
                            .tolerance = with_split ? LongTolerance(c.dtype) : Tolerance{0, 0}};
      kiln::client::SetPrefillTmaKvForTesting(1);
      const RunResult tma = RunWithPlan(c, p, *plan, r, rng);
      kiln::client::SetPrefillTmaKvForTesting(0);
      const RunResult copies = RunWithPlan(c, p, *plan, r, rng);
      REQUIRE(tma.out.size() == copies.out.size());
      CHECK(std::memcmp(tma.out.data(), copies.out.data(), tma.out.size()) == 0);
      CHECK(std::memcmp(tma.lse.data(), copies.lse.data(), tma.lse.size()) == 0);
    }
  }
}

TEST_CASE("a plan is reused over runs with new data, on a stream", "[gpu][client][prefill]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(2);
  CUstream stream = nullptr;
  KILN_CU(kiln::testing::Driver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  struct Batch {
    PrefillCase c;
    std::vector<Request> requests;
    int split;
    Tolerance tolerance;
  };
  // Not split; split (one row tile over 20 000); paged fp16 over 9000 beside a plain prefill.
  for (const Batch& batch : {Batch{kRagged[0], MixedBatch(true), 0, OutputTolerance(DType::kBFloat16)},
                             Batch{kRagged[0], {{8, 20000}}, 1, LongTolerance(DType::kBFloat16)},
                             Batch{kPaged[4], {{5, 9000}, {300, 300}}, -1, OutputTolerance(DType::kFloat16)}}) {
    const PrefillCase& c = batch.c;
    const PrefillOptions o = OptionsFor(c);
    const Problem first = MakeProblem(c.dtype, 8, 2, c.dim, batch.requests, rng, StripedValue);
    auto plan = MakePlan(c, first, o);
    INFO(plan.status().ToString());
    REQUIRE(plan.ok());
    const BatchPrefillPlan copy = *plan;  // copies share the schedule
    const RunOptions r = {.options = o, .expect_split = batch.split, .tolerance = batch.tolerance};
    const RunResult a = RunWithPlan(c, first, *plan, r, rng, stream);
    const Problem second = MakeProblem(c.dtype, 8, 2, c.dim, batch.requests, rng, StripedValue);
    const RunResult b = RunWithPlan(c, second, copy, r, rng, stream);
    CHECK(a.out != b.out);  // new data, new results
    // The first data again through the same plan: the same bits (the run is deterministic).
    const RunResult again = RunWithPlan(c, first, *plan, r, rng, stream);
    CHECK(again.out == a.out);
    CHECK(again.lse == a.lse);
  }
  KILN_CU(kiln::testing::Driver().cuStreamDestroy(stream));
}

TEST_CASE("kiln_batch_prefill_ragged and kiln_batch_prefill_paged through DLTensors", "[gpu][client][prefill][capi]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(5);
  CHECK(kiln_batch_prefill_plan_workspace_bytes(nullptr) == 0);
  kiln_batch_prefill_plan_destroy(nullptr);  // ignored

  // Ragged, fp16 d64 g8 causal, a window and a scale, split (one row tile over 20 000) so that
  // the workspace goes through the C ABI too.
  {
    const PrefillCase c = kRagged[6];
    const Problem p = MakeProblem(c.dtype, 8, 1, c.dim, {{7, 7}, {3, 20000}, {0, 4}, {130, 130}}, rng, StripedValue);
    const PrefillOptions o = OptionsFor(c, 0.2, 5000);
    kiln_batch_prefill_plan* plan = nullptr;
    kiln_status s = kiln_batch_prefill_plan_create_ragged(p.qo_indptr.data(), p.kv_indptr.data(), p.batch(), p.qo, p.kv,
                                                          p.dim, DLDataType{kDLFloat, 16, 1}, o.causal ? 1 : 0,
                                                          o.sm_scale, o.logits_soft_cap, o.window_left, -1, &plan);
    INFO(kiln_last_error());
    REQUIRE(s == KILN_OK);
    REQUIRE(plan != nullptr);
    const size_t ws = kiln_batch_prefill_plan_workspace_bytes(plan);
    DeviceBuffer workspace(std::max<size_t>(ws, 16));
    workspace.Poison();
    const DeviceInputs in = Upload(c, p, {}, rng);
    const DeviceOutputs out = MakeOutputs(p, false);
    DLTensor tout = kiln::testing::ToDLTensor(out.out_view), tlse = kiln::testing::ToDLTensor(out.lse_view);
    const DLTensor tq = kiln::testing::ToDLTensor(in.q), tk = kiln::testing::ToDLTensor(in.k),
                   tv = kiln::testing::ToDLTensor(in.v);
    const TensorView qo_view = IntView(*in.qo_indptr, p.qo_indptr.size()),
                     kv_view = IntView(*in.kv_indptr, p.kv_indptr.size());
    const DLTensor tqo = kiln::testing::ToDLTensor(qo_view), tkv = kiln::testing::ToDLTensor(kv_view);
    s = kiln_batch_prefill_ragged(plan, &tout, &tlse, &tq, &tk, &tv, &tqo, &tkv, ws > 0 ? workspace.data() : nullptr,
                                  ws, nullptr);
    INFO(kiln_last_error());
    REQUIRE(s == KILN_OK);
    KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
    kiln_batch_prefill_plan_destroy(plan);
    CheckOutputs(p, o, out, true, OutputTolerance(c.dtype), false);
  }
  // Paged, fp16 d64 g1 non-causal, pages of 64, no lse (NULL).
  {
    const PrefillCase c = kPaged[2];
    const Problem p = MakeProblem(c.dtype, 2, 2, c.dim, {{5, 200}, {64, 64}, {1, 0}}, rng);
    const PrefillOptions o = OptionsFor(c);
    const PageTable t = PagesOf(p.requests, c.page);
    kiln_batch_prefill_plan* plan = nullptr;
    kiln_status s = kiln_batch_prefill_plan_create_paged(p.qo_indptr.data(), t.indptr.data(), t.last.data(), p.batch(),
                                                         p.qo, p.kv, p.dim, c.page, DLDataType{kDLFloat, 16, 1}, 0, 0.0,
                                                         0.0, -1, -1, &plan);
    INFO(kiln_last_error());
    REQUIRE(s == KILN_OK);
    const size_t ws = kiln_batch_prefill_plan_workspace_bytes(plan);
    DeviceBuffer workspace(std::max<size_t>(ws, 16));
    const DeviceInputs in = Upload(c, p, {.interleaved = true}, rng);
    const DeviceOutputs out = MakeOutputs(p, false);
    DLTensor tout = kiln::testing::ToDLTensor(out.out_view);
    const DLTensor tq = kiln::testing::ToDLTensor(in.q), tk = kiln::testing::ToDLTensor(in.k),
                   tv = kiln::testing::ToDLTensor(in.v);
    const TensorView qo_view = IntView(*in.qo_indptr, p.qo_indptr.size()),
                     kv_view = IntView(*in.kv_indptr, in.table.indptr.size()),
                     idx_view = IntView(*in.kv_indices, in.indices.size()),
                     last_view = IntView(*in.kv_last, in.table.last.size());
    const DLTensor tqo = kiln::testing::ToDLTensor(qo_view), tkv = kiln::testing::ToDLTensor(kv_view),
                   tidx = kiln::testing::ToDLTensor(idx_view), tlast = kiln::testing::ToDLTensor(last_view);
    s = kiln_batch_prefill_paged(plan, &tout, nullptr, &tq, &tk, &tv, &tqo, &tkv, &tidx, &tlast,
                                 ws > 0 ? workspace.data() : nullptr, ws, nullptr);
    INFO(kiln_last_error());
    REQUIRE(s == KILN_OK);
    KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
    kiln_batch_prefill_plan_destroy(plan);
    CheckOutputs(p, o, out, false, OutputTolerance(c.dtype), true);
  }
}

TEST_CASE("unsupported prefill configurations and mismatched runs are refused", "[gpu][client][prefill]") {
  GpuSession session = HopperSession();
  const std::vector<int32_t> qo_indptr = {0, 4, 8}, kv_indptr = {0, 60000, 120000};
  auto refused = [&](int64_t qo, int64_t kv, int64_t dim, DType dtype, const std::string& fragment) {
    auto plan = BatchPrefillPlan::CreateRagged(qo_indptr.data(), kv_indptr.data(), 2, qo, kv, dim, dtype);
    INFO(plan.status().ToString());
    REQUIRE(!plan.ok());
    CHECK(plan.status().code() == kiln::StatusCode::kInvalidArgument);
    CHECK(plan.status().message().find(fragment) != std::string::npos);
  };
  refused(32, 8, 96, DType::kBFloat16, "head_dim");
  refused(32, 8, 128, DType::kFloat32, "dtype");
  refused(24, 8, 128, DType::kBFloat16, "group");
  refused(48, 3, 128, DType::kBFloat16, "group");  // a group of 16

  // A real split plan on this GPU (4 queries of group 4 on one kv head per request: two row
  // tiles over 60 000 positions each), then runs that do not match it: refused before any launch.
  auto plan = BatchPrefillPlan::CreateRagged(qo_indptr.data(), kv_indptr.data(), 2, 4, 1, 128, DType::kBFloat16);
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  INFO(plan->Describe());
  REQUIRE(plan->split());
  REQUIRE(plan->workspace_bytes() > 0);
  CHECK(plan->chunk_tokens() > 0);
  CHECK(plan->total_q() == 8);
  CHECK(plan->batch_size() == 2);
  CHECK(plan->num_qo_heads() == 4);
  CHECK(plan->num_kv_heads() == 1);
  CHECK(plan->head_dim() == 128);
  CHECK(plan->page_size() == 0);
  CHECK(!plan->paged());
  CHECK(plan->dtype() == DType::kBFloat16);
  CHECK(plan->options().causal);
  CHECK(plan->options().sm_scale == 0);  // as given
  CHECK(plan->device() == session.gpu().ordinal);

  const size_t ws = plan->workspace_bytes();
  const int64_t total_kv = 120000, row = 128 * 2;  // bytes of one q/out head row, one k/v position
  DeviceBuffer dout(8 * 4 * row), dq(8 * 4 * row), dk(total_kv * row), dv(total_kv * row), workspace(ws);
  const TensorView out = TensorView::Contiguous(dout.data(), DType::kBFloat16, {8, 4, 128});
  const TensorView q = TensorView::Contiguous(dq.data(), DType::kBFloat16, {8, 4, 128});
  const TensorView k = TensorView::Contiguous(dk.data(), DType::kBFloat16, {total_kv, 1, 128});
  const TensorView v = TensorView::Contiguous(dv.data(), DType::kBFloat16, {total_kv, 1, 128});
  auto qo_dev = UploadInts(qo_indptr), kv_dev = UploadInts(kv_indptr);
  const TensorView tqo = IntView(*qo_dev, 3), tkv = IntView(*kv_dev, 3);
  auto run = [&](const TensorView& q_arg, void* w, size_t w_bytes) {
    return kiln::ops::batch_prefill_ragged(*plan, out, nullptr, q_arg, k, v, tqo, tkv, w, w_bytes);
  };
  // q with 8 query heads against a plan of 4.
  kiln::Status s = run(TensorView::Contiguous(dq.data(), DType::kBFloat16, {4, 8, 128}), workspace.data(), ws);
  INFO(s.ToString());
  CHECK(s.code() == kiln::StatusCode::kInvalidArgument);
  // fp16 q against a bf16 plan.
  s = run(TensorView::Contiguous(dq.data(), DType::kFloat16, {8, 4, 128}), workspace.data(), ws);
  CHECK(s.code() == kiln::StatusCode::kInvalidArgument);
  // A workspace smaller than the plan's, and none at all.
  s = run(q, workspace.data(), ws - 16);
  INFO(s.ToString());
  CHECK(s.code() == kiln::StatusCode::kInvalidArgument);
  CHECK(s.message().find("workspace") != std::string::npos);
  s = run(q, nullptr, 0);
  CHECK(s.code() == kiln::StatusCode::kInvalidArgument);
  // A ragged plan given to the paged run.
  s = kiln::ops::batch_prefill_paged(*plan, out, nullptr, q,
                                     TensorView::Contiguous(dk.data(), DType::kBFloat16, {7500, 16, 1, 128}),
                                     TensorView::Contiguous(dv.data(), DType::kBFloat16, {7500, 16, 1, 128}), tqo, tkv,
                                     tkv, IntView(*kv_dev, 2), workspace.data(), ws);
  INFO(s.ToString());
  CHECK(s.code() == kiln::StatusCode::kInvalidArgument);
  // The matching call is accepted (a positive control for the refusals above; the data is NaN,
  // nothing is compared).
  for (DeviceBuffer* b : {&dq, &dk, &dv, &dout, &workspace}) b->Poison();
  s = run(q, workspace.data(), ws);
  INFO(s.ToString());
  CHECK(s.ok());
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
}

}  // namespace
