// [gpu] The decode family (kiln/ops/decode.h) on a real GPU against float64 CPU references:
// batch_decode over eight specializations that cover every head dim (64/128/256), group
// (1/2/4/8), page size (1/16/64), dtype and soft cap state; batches mixing lengths 1, 17, 1000
// and last pages of one token, split and not split; windows, custom scales, lse; strided q and
// out, K and V pages interleaved in one pool; a request of 100 000 positions split across the
// GPU; append_paged_kv writing exactly its slots (everything else stays poisoned); append then
// decode; the C ABI; refusals with a real daemon. Fresh random data (never zeros); outputs,
// workspaces and unused cache slots poisoned with NaN (0xFF), so a read of a slot outside a
// request, or a missing write, shows. The whole family runs in well under a minute on an H200
// (about ten NVRTC compiles of 0.3-0.5 s each; the largest buffers are ~55 MB).
//
// Tolerances of the output (abs and rel, per element): bf16 1.6e-2, fp16 3e-3. The softmax
// weights are rounded to the dtype for the tensor-core product with V (relative error 2^-9 for
// bf16, 2^-11 for fp16, at most that times max|v| = 2 in the output) and the output is rounded
// once more: worst cases 8e-3 (bf16) and 2e-3 (fp16). lse is fp32 throughout: 1e-3 abs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "kiln/client.h"
#include "kiln/ops/decode.h"
#include "tests/support/gpu_harness.h"

namespace {

using kiln::DType;
using kiln::TensorView;
using kiln::ops::BatchDecodePlan;
using kiln::ops::DecodeOptions;
using kiln::testing::DeviceBuffer;
using kiln::testing::GpuSession;
using kiln::testing::HostTensor;
using kiln::testing::IntView;
using kiln::testing::Tolerance;
using kiln::testing::UploadInts;

Tolerance OutputTolerance(DType dtype) {
  return dtype == DType::kBFloat16 ? Tolerance{1.6e-2, 1.6e-2} : Tolerance{3e-3, 3e-3};
}
constexpr Tolerance kLseTolerance = {1e-3, 1e-5};

// A paged KV cache: K and V pages in one pool, on the host and on the device, and the page
// table of a batch. Separate caches: K pages, then V pages (page stride = one page).
// Interleaved: page p of K, then page p of V (page stride = two pages). Pages go to requests
// in a random order; slots no request covers (spare pages, the rest of last pages) hold NaN.
struct PagedKv {
  DType dtype = DType::kBFloat16;
  int64_t page_size = 0, heads = 0, dim = 0, num_pages = 0;
  int64_t page_elems = 0, page_stride = 0, v_offset = 0;
  std::vector<int64_t> lens;
  std::vector<int32_t> indptr{0}, indices, last;
  HostTensor pool;
  std::unique_ptr<DeviceBuffer> d_pool, d_indptr, d_indices, d_last;

  size_t Index(int64_t page, int64_t slot, int64_t head, int64_t d) const {
    return static_cast<size_t>(page * page_stride + (slot * heads + head) * dim + d);
  }
  int64_t PageOf(size_t b, int64_t pos) const { return indices[static_cast<size_t>(indptr[b] + pos / page_size)]; }
  double K(size_t b, int64_t pos, int64_t head, int64_t d) const {
    return pool.Get(Index(PageOf(b, pos), pos % page_size, head, d));
  }
  double V(size_t b, int64_t pos, int64_t head, int64_t d) const {
    return pool.Get(static_cast<size_t>(v_offset) + Index(PageOf(b, pos), pos % page_size, head, d));
  }
  TensorView KCache() const {
    return TensorView::Strided(d_pool->data(), dtype, {num_pages, page_size, heads, dim},
                               {page_stride, heads * dim, dim, 1});
  }
  TensorView VCache() const {
    return TensorView::Strided(d_pool->data() + v_offset * 2, dtype, {num_pages, page_size, heads, dim},
                               {page_stride, heads * dim, dim, 1});
  }
  TensorView Indptr() const { return IntView(*d_indptr, indptr.size()); }
  TensorView Indices() const { return IntView(*d_indices, indices.size()); }
  TensorView Last() const { return IntView(*d_last, last.size()); }
};

// `value(pos)` gives the V value at a position (K is always uniform in [-2, 2)); null: uniform.
PagedKv MakePagedKv(DType dtype, const std::vector<int64_t>& lens, int64_t page_size, int64_t heads, int64_t dim,
                    bool interleaved, std::mt19937& rng, bool fill = true,
                    double (*v_value)(int64_t, std::mt19937&) = nullptr) {
  PagedKv c;
  c.dtype = dtype;
  c.page_size = page_size;
  c.heads = heads;
  c.dim = dim;
  c.lens = lens;
  int64_t used = 0;
  for (int64_t len : lens) {
    const int64_t pages = (len + page_size - 1) / page_size;
    used += pages;
    c.indptr.push_back(static_cast<int32_t>(used));
    c.last.push_back(static_cast<int32_t>(len - (pages - 1) * page_size));
  }
  c.num_pages = used + 3;  // spare pages nobody owns
  std::vector<int32_t> order(static_cast<size_t>(c.num_pages));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  c.indices.assign(order.begin(), order.begin() + used);
  c.page_elems = page_size * heads * dim;
  c.page_stride = interleaved ? 2 * c.page_elems : c.page_elems;
  c.v_offset = interleaved ? c.page_elems : c.num_pages * c.page_elems;
  c.pool = kiln::testing::MakeHostTensor(dtype, static_cast<size_t>(2 * c.num_pages * c.page_elems));
  std::fill(c.pool.bytes.begin(), c.pool.bytes.end(), uint8_t{0xFF});  // NaN everywhere nobody writes
  if (fill) {
    std::uniform_real_distribution<float> uniform(-2.f, 2.f);
    auto draw = [&] {
      float x = uniform(rng);
      return x == 0.f ? 0.5f : x;
    };
    for (size_t b = 0; b < lens.size(); ++b)
      for (int64_t pos = 0; pos < lens[b]; ++pos)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t d = 0; d < dim; ++d) {
            const size_t i = c.Index(c.PageOf(b, pos), pos % page_size, h, d);
            c.pool.Set(i, draw());
            c.pool.Set(static_cast<size_t>(c.v_offset) + i,
                       v_value != nullptr ? static_cast<float>(v_value(pos, rng)) : draw());
          }
  }
  c.d_pool = std::make_unique<DeviceBuffer>(c.pool.bytes.size());
  c.d_pool->Upload(c.pool.bytes);
  c.d_indptr = UploadInts(c.indptr);
  c.d_indices = UploadInts(c.indices);
  c.d_last = UploadInts(c.last);
  return c;
}

struct Reference {
  std::vector<double> out;  // [B, qo_heads, dim]
  std::vector<double> lse;  // [B, qo_heads], natural log
};

// The float64 reference of batch_decode (kernels/traces/batch_decode.json names it): for each
// request and query head, gather its (windowed) K/V from the pages, scale, soft-cap, softmax.
Reference ReferenceBatchDecode(const PagedKv& c, const HostTensor& q, int64_t qo_heads, const DecodeOptions& o) {
  const int64_t batch = static_cast<int64_t>(c.lens.size());
  const int64_t group = qo_heads / c.heads;
  const double scale = o.sm_scale == 0 ? 1.0 / std::sqrt(static_cast<double>(c.dim)) : o.sm_scale;
  Reference r;
  r.out.assign(static_cast<size_t>(batch * qo_heads * c.dim), 0.0);
  r.lse.assign(static_cast<size_t>(batch * qo_heads), 0.0);
  std::vector<double> s;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = c.lens[static_cast<size_t>(b)];
    const int64_t begin = o.window_left >= 0 ? std::max<int64_t>(0, len - 1 - o.window_left) : 0;
    for (int64_t h = 0; h < qo_heads; ++h) {
      const int64_t kvh = h / group;
      const size_t q0 = static_cast<size_t>((b * qo_heads + h) * c.dim);
      s.assign(static_cast<size_t>(len - begin), 0.0);
      double m = -INFINITY;
      for (int64_t pos = begin; pos < len; ++pos) {
        double dot = 0;
        for (int64_t d = 0; d < c.dim; ++d) dot += q.Get(q0 + d) * c.K(static_cast<size_t>(b), pos, kvh, d);
        double x = dot * scale;
        if (o.logits_soft_cap > 0) x = o.logits_soft_cap * std::tanh(x / o.logits_soft_cap);
        s[static_cast<size_t>(pos - begin)] = x;
        m = std::max(m, x);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - m));
      for (int64_t pos = begin; pos < len; ++pos) {
        const double p = s[static_cast<size_t>(pos - begin)] / sum;
        for (int64_t d = 0; d < c.dim; ++d) r.out[q0 + d] += p * c.V(static_cast<size_t>(b), pos, kvh, d);
      }
      r.lse[static_cast<size_t>(b * qo_heads + h)] = m + std::log(sum);
    }
  }
  return r;
}

struct DecodeCase {
  DType dtype;
  int64_t dim, group, page;
  bool soft_cap;
};

std::string Describe(const DecodeCase& c) {
  return std::string(kiln::DTypeName(c.dtype)) + " d" + std::to_string(c.dim) + " g" + std::to_string(c.group) + " p" +
         std::to_string(c.page) + (c.soft_cap ? " softcap" : "");
}

struct RunOptions {
  DecodeOptions options;
  int64_t kv_heads = 2;
  bool with_lse = true;
  bool strided = false;      // q a view into a fused qkv buffer; out with padded heads and rows
  bool interleaved = false;  // K and V pages alternate in one pool
  int expect_split = -1;     // 0 / 1: the plan must (not) split; -1: either
  int64_t min_items = 0;
  Tolerance tolerance = {0, 0};  // {0, 0}: OutputTolerance(dtype)
  double (*v_value)(int64_t, std::mt19937&) = nullptr;
};

// One batch_decode call on fresh data, checked element by element against the reference.
void RunDecode(const DecodeCase& c, const std::vector<int64_t>& lens, const RunOptions& r, std::mt19937& rng,
               CUstream stream = nullptr) {
  const int64_t batch = static_cast<int64_t>(lens.size());
  const int64_t kv = r.kv_heads, qo = c.group * kv, dim = c.dim;
  INFO(Describe(c) << ", batch " << batch << ", kv heads " << kv << ", window " << r.options.window_left
                   << ", sm_scale " << r.options.sm_scale << (r.strided ? ", strided" : "")
                   << (r.interleaved ? ", interleaved pool" : ""));
  PagedKv cache = MakePagedKv(c.dtype, lens, c.page, kv, dim, r.interleaved, rng, true, r.v_value);
  const HostTensor q = kiln::testing::RandomTensor(c.dtype, static_cast<size_t>(batch * qo * dim), rng);

  // q: dense, or the q part of rows of a fused [batch, qo + 2 kv, dim] buffer.
  const int64_t q_row = r.strided ? (qo + 2 * kv) * dim : qo * dim;
  HostTensor q_dev = kiln::testing::MakeHostTensor(c.dtype, static_cast<size_t>(batch * q_row));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < qo * dim; ++i)
      q_dev.Set(static_cast<size_t>(b * q_row + i), q.Get(static_cast<size_t>(b * qo * dim + i)));
  DeviceBuffer dq(q_dev.bytes.size());
  dq.Upload(q_dev.bytes);
  auto tq = TensorView::Strided(dq.data(), c.dtype, {batch, qo, dim}, {q_row, dim, 1});

  // out: dense, or heads padded by 8 elements and rows by 16.
  const int64_t out_head = r.strided ? dim + 8 : dim;
  const int64_t out_row = r.strided ? qo * out_head + 16 : qo * dim;
  DeviceBuffer dout(static_cast<size_t>(batch * out_row) * 2);
  dout.Poison();
  auto tout = TensorView::Strided(dout.data(), c.dtype, {batch, qo, dim}, {out_row, out_head, 1});
  DeviceBuffer dlse(static_cast<size_t>(batch * qo) * 4);
  dlse.Poison();
  auto tlse = TensorView::Contiguous(dlse.data(), DType::kFloat32, {batch, qo});

  auto plan = BatchDecodePlan::Create(cache.indptr.data(), cache.last.data(), batch, qo, kv, dim, c.page, c.dtype,
                                      r.options);
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  INFO(plan->Describe());
  if (r.expect_split >= 0) CHECK(plan->split() == (r.expect_split == 1));
  CHECK(plan->num_items() >= r.min_items);
  DeviceBuffer workspace(std::max<size_t>(plan->workspace_bytes(), 16));
  workspace.Poison();  // stale partials must not matter

  kiln::Status status = kiln::ops::batch_decode(*plan, tout, r.with_lse ? &tlse : nullptr, tq, cache.KCache(),
                                                cache.VCache(), cache.Indptr(), cache.Indices(), cache.Last(),
                                                workspace.data(), plan->workspace_bytes(), stream);
  INFO(status.ToString());
  REQUIRE(status.ok());
  KILN_CU(kiln::testing::Driver().cuStreamSynchronize(stream));

  const Reference want = ReferenceBatchDecode(cache, q, qo, r.options);
  const HostTensor got{c.dtype, dout.Download()};
  const Tolerance tol = r.tolerance.abs > 0 ? r.tolerance : OutputTolerance(c.dtype);
  int64_t bad = 0;
  std::string first_bad;
  std::vector<bool> written(got.size(), false);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < qo; ++h)
      for (int64_t d = 0; d < dim; ++d) {
        const size_t at = static_cast<size_t>(b * out_row + h * out_head + d);
        written[at] = true;
        const double g = got.Get(at), w = want.out[static_cast<size_t>((b * qo + h) * dim + d)];
        if (!kiln::testing::Close(g, w, tol) && bad++ == 0)
          first_bad = "request " + std::to_string(b) + " (kv_len " + std::to_string(lens[static_cast<size_t>(b)]) +
                      ") head " + std::to_string(h) + " dim " + std::to_string(d) + ": got " + std::to_string(g) +
                      ", want " + std::to_string(w);
      }
  INFO("first mismatch of out: " << first_bad);
  CHECK(bad == 0);
  int64_t padding_touched = 0;
  for (size_t i = 0; i < got.size(); ++i)
    padding_touched += !written[i] && (got.bytes[2 * i] != 0xFF || got.bytes[2 * i + 1] != 0xFF);
  CHECK(padding_touched == 0);

  const std::vector<uint8_t> lse_bytes = dlse.Download();
  if (r.with_lse) {
    int64_t bad_lse = 0;
    std::string first_bad_lse;
    for (int64_t i = 0; i < batch * qo; ++i) {
      float g;
      std::memcpy(&g, lse_bytes.data() + 4 * i, 4);
      if (!kiln::testing::Close(g, want.lse[static_cast<size_t>(i)], kLseTolerance) && bad_lse++ == 0)
        first_bad_lse = "request " + std::to_string(i / qo) + " head " + std::to_string(i % qo) + ": got " +
                        std::to_string(g) + ", want " + std::to_string(want.lse[static_cast<size_t>(i)]);
    }
    INFO("first mismatch of lse: " << first_bad_lse);
    CHECK(bad_lse == 0);
  } else {
    CHECK(std::all_of(lse_bytes.begin(), lse_bytes.end(), [](uint8_t x) { return x == 0xFF; }));  // not written
  }
}

// Every head dim, group, page size, dtype and soft cap state, in eight specializations.
const DecodeCase kCases[] = {
    {DType::kBFloat16, 128, 4, 16, false},  // Llama-3.1-8B
    {DType::kBFloat16, 128, 8, 1, true},   {DType::kBFloat16, 64, 1, 64, false}, {DType::kBFloat16, 256, 2, 16, true},
    {DType::kFloat16, 128, 1, 1, false},   {DType::kFloat16, 64, 8, 16, true},   {DType::kFloat16, 256, 4, 64, false},
    {DType::kBFloat16, 128, 2, 64, true},
};

// 1, 17, 1000 positions, exactly one tile, a last page of one token (16 * 7 + 1), a tile plus one.
const std::vector<int64_t> kMixed = {1, 17, 1000, 300, 64, 113, 129};

TEST_CASE("batch_decode matches a float64 reference over specializations, lengths and options",
          "[gpu][client][decode]") {
  GpuSession session(80);
  std::mt19937 rng(20251201);
  std::uniform_int_distribution<int64_t> short_len(1, 200);
  for (const DecodeCase& c : kCases) {
    const double cap = c.soft_cap ? 5.0 : 0.0;
    // A few requests: split into chunks of 256 positions, merged by lse.
    RunDecode(c, kMixed, {.options = {.logits_soft_cap = cap}, .expect_split = 1}, rng);
    // A window of 100 positions, another scale, strided q and out, no lse.
    RunDecode(
        c, kMixed,
        {.options = {.sm_scale = 0.1, .logits_soft_cap = cap, .window_left = 100}, .with_lse = false, .strided = true},
        rng);
    // 140 short requests on 2 kv heads (280 pairs fill the GPU): one item per request.
    std::vector<int64_t> many(140);
    for (int64_t& len : many) len = short_len(rng);
    RunDecode(c, many, {.options = {.logits_soft_cap = cap}, .interleaved = true, .expect_split = 0}, rng);
  }
  // A window of 0: only the query's own position; and one kv head.
  RunDecode(kCases[0], kMixed, {.options = {.window_left = 0}, .kv_heads = 1}, rng);
  // A ragged batch (24 requests of 1..4096 positions, 8 kv heads): cut into many small items,
  // several waves of them, so that the long requests leave no tail (ScheduleBatchDecode).
  std::uniform_int_distribution<int64_t> ragged_len(1, 4096);
  std::vector<int64_t> ragged(24);
  for (int64_t& len : ragged) len = ragged_len(rng);
  RunDecode(kCases[0], ragged, {.kv_heads = 8, .expect_split = 1, .min_items = 48}, rng);
}

// V with a sign that flips every 256 positions: a chunk lost or counted twice moves the output
// by far more than the tolerance, although the average over 100 000 positions is near zero.
double StripedValue(int64_t pos, std::mt19937& rng) {
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  return uniform(rng) + ((pos / 256) % 2 == 0 ? 1.0 : -1.0);
}

TEST_CASE("a request of 100 000 positions is split across the GPU and matches the reference", "[gpu][client][decode]") {
  GpuSession session(80);
  std::mt19937 rng(100000);
  // bf16, 4 query heads on one kv head, pages of 16 (about 51 MB of K and V).
  RunDecode(kCases[0], {100000, 17},
            {.kv_heads = 1, .expect_split = 1, .min_items = 64, .tolerance = {2e-3, 1.6e-2}, .v_value = StripedValue},
            rng);
  // fp16 with one-token pages (a page-table lookup per position), 2 kv heads, a window.
  RunDecode(kCases[4], {40000},
            {.options = {.window_left = 30000},
             .expect_split = 1,
             .min_items = 16,
             .tolerance = {5e-4, 3e-3},
             .v_value = StripedValue},
            rng);
}

TEST_CASE("batch_decode runs on a stream and reuses its kernels without RPCs", "[gpu][client][decode][cache]") {
  GpuSession session(80);
  std::mt19937 rng(3);
  CUstream stream = nullptr;
  KILN_CU(kiln::testing::Driver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  RunDecode(kCases[0], kMixed, {}, rng, stream);
  const auto before = kiln::GetClientStats();
  RunDecode(kCases[0], {5, 6, 7}, {}, rng, stream);
  const auto after = kiln::GetClientStats();
  CHECK(kiln::testing::KernelFetches(after) == kiln::testing::KernelFetches(before));
  CHECK(after.op_fast_hits == before.op_fast_hits + 1);
  KILN_CU(kiln::testing::Driver().cuStreamDestroy(stream));
}

// The reference of append_paged_kv (kernels/traces/append_paged_kv.json names
// it): the pool's bytes after writing token i's k and v rows (`k_rows`, `v_rows`: element
// offsets of token i's head 0 in `src`, heads `dim` apart) into its slot; tokens the page
// table does not cover leave the pool as it was.
std::vector<uint8_t> ReferenceAppendPagedKv(const PagedKv& cache, const std::vector<uint8_t>& pool,
                                            const std::vector<std::pair<int32_t, int32_t>>& tokens,
                                            const HostTensor& src, const std::vector<int64_t>& k_rows,
                                            const std::vector<int64_t>& v_rows) {
  std::vector<uint8_t> want = pool;
  const int64_t batch = static_cast<int64_t>(cache.lens.size()), dim = cache.dim;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto [b, pos] = tokens[i];
    if (b < 0 || b >= batch || pos < 0 || pos >= cache.lens[static_cast<size_t>(b)]) continue;  // not covered
    for (int64_t h = 0; h < cache.heads; ++h) {
      const size_t slot = cache.Index(cache.PageOf(static_cast<size_t>(b), pos), pos % cache.page_size, h, 0);
      std::memcpy(want.data() + 2 * slot, src.bytes.data() + 2 * (k_rows[i] + h * dim), 2 * dim);
      std::memcpy(want.data() + 2 * (cache.v_offset + slot), src.bytes.data() + 2 * (v_rows[i] + h * dim), 2 * dim);
    }
  }
  return want;
}

// One append_paged_kv call: `tokens` (request, position) pairs into a poisoned cache; every
// covered slot must hold exactly the token's bits, every other byte must still be 0xFF.
void RunAppend(DType dtype, int64_t dim, int64_t page, int64_t kv, const std::vector<int64_t>& lens,
               const std::vector<std::pair<int32_t, int32_t>>& tokens, int64_t offset, bool fused, std::mt19937& rng) {
  INFO(kiln::DTypeName(dtype) << " d" << dim << " p" << page << " kv " << kv << " tokens " << tokens.size()
                              << " offset " << offset << (fused ? " fused qkv" : ""));
  PagedKv cache = MakePagedKv(dtype, lens, page, kv, dim, false, rng, /*fill=*/false);  // all 0xFF
  const int64_t nnz = static_cast<int64_t>(tokens.size());
  // k and v: rows of [k heads | v heads] (+ 2 padding heads when fused), `offset` elements in.
  const int64_t row = fused ? (2 * kv + 2) * dim : kv * dim;
  const HostTensor src = kiln::testing::RandomTensor(dtype, static_cast<size_t>(2 * nnz * row + offset), rng);
  DeviceBuffer dsrc(src.bytes.size());
  dsrc.Upload(src.bytes);
  const int64_t k_at = offset, v_at = fused ? offset + kv * dim : offset + nnz * row;
  auto tk = TensorView::Strided(dsrc.data() + k_at * 2, dtype, {nnz, kv, dim}, {row, dim, 1});
  auto tv = TensorView::Strided(dsrc.data() + v_at * 2, dtype, {nnz, kv, dim}, {row, dim, 1});
  std::vector<int32_t> batch_indices, positions;
  for (const auto& [b, pos] : tokens) {
    batch_indices.push_back(b);
    positions.push_back(pos);
  }
  auto dbi = UploadInts(batch_indices), dpos = UploadInts(positions);
  kiln::Status status = kiln::ops::append_paged_kv(cache.KCache(), cache.VCache(), tk, tv,
                                                   IntView(*dbi, batch_indices.size()),
                                                   IntView(*dpos, positions.size()), cache.Indptr(), cache.Indices(),
                                                   cache.Last());
  INFO(status.ToString());
  REQUIRE(status.ok());
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());

  std::vector<int64_t> k_rows, v_rows;
  for (int64_t i = 0; i < nnz; ++i) {
    k_rows.push_back(k_at + i * row);
    v_rows.push_back(v_at + i * row);
  }
  const std::vector<uint8_t> want = ReferenceAppendPagedKv(cache, cache.pool.bytes, tokens, src, k_rows, v_rows);
  const std::vector<uint8_t> got = cache.d_pool->Download();
  int64_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != want[i];
  CHECK(wrong == 0);
}

TEST_CASE("append_paged_kv writes exactly the covered slots, bit for bit", "[gpu][client][decode]") {
  GpuSession session(80);
  std::mt19937 rng(7);
  const std::vector<int64_t> lens = {5, 40, 17, 1};
  // Every position of every request (a prefill), in a shuffled order.
  std::vector<std::pair<int32_t, int32_t>> all;
  for (size_t b = 0; b < lens.size(); ++b)
    for (int64_t pos = 0; pos < lens[b]; ++pos) all.push_back({static_cast<int32_t>(b), static_cast<int32_t>(pos)});
  std::shuffle(all.begin(), all.end(), rng);
  // One new token per request at its last position (a decode step), plus tokens the page table
  // does not cover: past a request's length, a negative position, a request outside the batch.
  const std::vector<std::pair<int32_t, int32_t>> step = {{0, 4},  {1, 39}, {2, 16}, {3, 0},
                                                         {2, 17}, {1, -1}, {4, 0},  {-1, 2}};
  RunAppend(DType::kBFloat16, 128, 16, 8, lens, all, 0, false, rng);
  RunAppend(DType::kBFloat16, 128, 16, 8, lens, step, 0, false, rng);
  RunAppend(DType::kFloat16, 64, 1, 2, lens, all, 0, true, rng);      // views into a fused qkv buffer
  RunAppend(DType::kFloat16, 64, 1, 2, lens, step, 1, false, rng);    // one element off: vec 1
  RunAppend(DType::kBFloat16, 256, 64, 1, lens, all, 2, false, rng);  // 4-byte aligned: vec 2
}

TEST_CASE("append_paged_kv then batch_decode: a prefill written into the cache is attended", "[gpu][client][decode]") {
  GpuSession session(80);
  std::mt19937 rng(11);
  const DecodeCase c = kCases[0];
  const std::vector<int64_t> lens = {33, 700, 1};
  const int64_t kv = 2, qo = c.group * kv, dim = c.dim, nnz = 734;
  // The reference cache holds the data; the device cache starts poisoned and gets it by append.
  PagedKv cache = MakePagedKv(c.dtype, lens, c.page, kv, dim, false, rng);
  cache.d_pool->Poison();
  HostTensor k = kiln::testing::MakeHostTensor(c.dtype, static_cast<size_t>(nnz * kv * dim));
  HostTensor v = kiln::testing::MakeHostTensor(c.dtype, static_cast<size_t>(nnz * kv * dim));
  std::vector<int32_t> batch_indices, positions;
  for (size_t b = 0; b < lens.size(); ++b)
    for (int64_t pos = 0; pos < lens[b]; ++pos) {
      const int64_t i = static_cast<int64_t>(positions.size());
      for (int64_t h = 0; h < kv; ++h)
        for (int64_t d = 0; d < dim; ++d) {
          k.Set(static_cast<size_t>((i * kv + h) * dim + d), static_cast<float>(cache.K(b, pos, h, d)));
          v.Set(static_cast<size_t>((i * kv + h) * dim + d), static_cast<float>(cache.V(b, pos, h, d)));
        }
      batch_indices.push_back(static_cast<int32_t>(b));
      positions.push_back(static_cast<int32_t>(pos));
    }
  REQUIRE(static_cast<int64_t>(positions.size()) == nnz);
  DeviceBuffer dk(k.bytes.size()), dv(v.bytes.size());
  dk.Upload(k.bytes);
  dv.Upload(v.bytes);
  auto dbi = UploadInts(batch_indices), dpos = UploadInts(positions);
  REQUIRE(kiln::ops::append_paged_kv(
              cache.KCache(), cache.VCache(), TensorView::Contiguous(dk.data(), c.dtype, {nnz, kv, dim}),
              TensorView::Contiguous(dv.data(), c.dtype, {nnz, kv, dim}), IntView(*dbi, batch_indices.size()),
              IntView(*dpos, positions.size()), cache.Indptr(), cache.Indices(), cache.Last())
              .ok());

  const HostTensor q = kiln::testing::RandomTensor(c.dtype, static_cast<size_t>(3 * qo * dim), rng);
  DeviceBuffer dq(q.bytes.size()), dout(q.bytes.size());
  dq.Upload(q.bytes);
  dout.Poison();
  auto plan = BatchDecodePlan::Create(cache.indptr.data(), cache.last.data(), 3, qo, kv, dim, c.page, c.dtype);
  REQUIRE(plan.ok());
  DeviceBuffer workspace(std::max<size_t>(plan->workspace_bytes(), 16));
  auto status = kiln::ops::batch_decode(*plan, TensorView::Contiguous(dout.data(), c.dtype, {3, qo, dim}), nullptr,
                                        TensorView::Contiguous(dq.data(), c.dtype, {3, qo, dim}), cache.KCache(),
                                        cache.VCache(), cache.Indptr(), cache.Indices(), cache.Last(), workspace.data(),
                                        plan->workspace_bytes());
  INFO(status.ToString());
  REQUIRE(status.ok());
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
  const Reference want = ReferenceBatchDecode(cache, q, qo, {});
  const HostTensor got{c.dtype, dout.Download()};
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    bad += !kiln::testing::Close(got.Get(i), want.out[i], OutputTolerance(c.dtype));
  CHECK(bad == 0);
}

TEST_CASE("kiln_batch_decode and kiln_append_paged_kv through DLTensors", "[gpu][client][decode][capi]") {
  GpuSession session(80);
  std::mt19937 rng(5);
  const DecodeCase c = kCases[5];  // fp16 d64 g8 p16 soft cap
  const std::vector<int64_t> lens = {1, 17, 1000};
  const int64_t kv = 2, qo = c.group * kv, dim = c.dim, batch = 3;
  PagedKv cache = MakePagedKv(c.dtype, lens, c.page, kv, dim, false, rng);
  const HostTensor q = kiln::testing::RandomTensor(c.dtype, static_cast<size_t>(batch * qo * dim), rng);
  DeviceBuffer dq(q.bytes.size()), dout(q.bytes.size()), dlse(static_cast<size_t>(batch * qo * 4));
  dq.Upload(q.bytes);
  dout.Poison();
  dlse.Poison();

  kiln_batch_decode_plan* plan = nullptr;
  REQUIRE(kiln_batch_decode_plan_create(cache.indptr.data(), cache.last.data(), batch, qo, kv, dim, c.page,
                                        DLDataType{kDLFloat, 16, 1}, 0, 5.0, -1, -1, &plan) == KILN_OK);
  REQUIRE(plan != nullptr);
  DeviceBuffer workspace(std::max<size_t>(kiln_batch_decode_plan_workspace_bytes(plan), 16));

  int64_t q_shape[3] = {batch, qo, dim}, lse_shape[2] = {batch, qo};
  int64_t cache_shape[4] = {cache.num_pages, c.page, kv, dim};
  int64_t indptr_shape[1] = {batch + 1}, indices_shape[1] = {static_cast<int64_t>(cache.indices.size())},
          last_shape[1] = {batch};
  auto tensor = [](void* data, DLDataType dtype, int ndim, int64_t* shape) {
    DLTensor t{};
    t.data = data;
    t.device = {kDLCUDA, 0};
    t.ndim = ndim;
    t.dtype = dtype;
    t.shape = shape;
    return t;
  };
  const DLDataType f16{kDLFloat, 16, 1}, f32{kDLFloat, 32, 1}, i32{kDLInt, 32, 1};
  DLTensor tq = tensor(dq.data(), f16, 3, q_shape), tout = tensor(dout.data(), f16, 3, q_shape);
  DLTensor tlse = tensor(dlse.data(), f32, 2, lse_shape);
  DLTensor tk = tensor(cache.d_pool->data(), f16, 4, cache_shape);
  DLTensor tv = tensor(cache.d_pool->data(), f16, 4, cache_shape);
  tv.byte_offset = static_cast<uint64_t>(cache.v_offset * 2);
  DLTensor tindptr = tensor(cache.d_indptr->data(), i32, 1, indptr_shape);
  DLTensor tindices = tensor(cache.d_indices->data(), i32, 1, indices_shape);
  DLTensor tlast = tensor(cache.d_last->data(), i32, 1, last_shape);
  kiln_status s = kiln_batch_decode(plan, &tout, &tlse, &tq, &tk, &tv, &tindptr, &tindices, &tlast, workspace.data(),
                                    kiln_batch_decode_plan_workspace_bytes(plan), nullptr);
  INFO(kiln_last_error());
  REQUIRE(s == KILN_OK);
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
  kiln_batch_decode_plan_destroy(plan);

  const Reference want = ReferenceBatchDecode(cache, q, qo, {.logits_soft_cap = 5.0});
  const HostTensor got{c.dtype, dout.Download()};
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    bad += !kiln::testing::Close(got.Get(i), want.out[i], OutputTolerance(c.dtype));
  CHECK(bad == 0);
  const std::vector<uint8_t> lse = dlse.Download();
  for (int64_t i = 0; i < batch * qo; ++i) {
    float g;
    std::memcpy(&g, lse.data() + 4 * i, 4);
    CHECK(kiln::testing::Close(g, want.lse[static_cast<size_t>(i)], kLseTolerance));
  }

  // kiln_append_paged_kv: one token into request 1's last position, nothing else changes.
  std::vector<int32_t> bi = {1}, pos = {16};
  auto dbi = UploadInts(bi), dpos = UploadInts(pos);
  const HostTensor kv_new = kiln::testing::RandomTensor(c.dtype, static_cast<size_t>(2 * kv * dim), rng);
  DeviceBuffer dnew(kv_new.bytes.size());
  dnew.Upload(kv_new.bytes);
  int64_t new_shape[3] = {1, kv, dim}, one[1] = {1};
  DLTensor tnk = tensor(dnew.data(), f16, 3, new_shape), tnv = tensor(dnew.data(), f16, 3, new_shape);
  tnv.byte_offset = static_cast<uint64_t>(kv * dim * 2);
  DLTensor tbi = tensor(dbi->data(), i32, 1, one), tpos = tensor(dpos->data(), i32, 1, one);
  s = kiln_append_paged_kv(&tk, &tv, &tnk, &tnv, &tbi, &tpos, &tindptr, &tindices, &tlast, nullptr);
  INFO(kiln_last_error());
  REQUIRE(s == KILN_OK);
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
  const std::vector<uint8_t> want_pool = ReferenceAppendPagedKv(cache, cache.pool.bytes, {{1, 16}}, kv_new, {0},
                                                                {kv * dim});
  CHECK(cache.d_pool->Download() == want_pool);
}

TEST_CASE("unsupported decode configurations are refused with a clear error", "[gpu][client][decode]") {
  GpuSession session(80);
  const std::vector<int32_t> indptr = {0, 2, 3}, last = {5, 16};
  auto refused = [&](int64_t batch, int64_t qo, int64_t kv, int64_t dim, int64_t page, DType dtype,
                     const std::string& fragment) {
    auto plan = BatchDecodePlan::Create(indptr.data(), last.data(), batch, qo, kv, dim, page, dtype);
    INFO(plan.status().ToString());
    REQUIRE(!plan.ok());
    CHECK(plan.status().code() == kiln::StatusCode::kInvalidArgument);
    CHECK(plan.status().message().find(fragment) != std::string::npos);
  };
  refused(2, 32, 8, 96, 16, DType::kBFloat16, "head_dim: 96 is not supported; supported: 64, 128, 256");
  refused(2, 32, 8, 128, 16, DType::kFloat32, "dtype: fp32 is not supported; supported: fp16, bf16");
  refused(2, 24, 8, 128, 16, DType::kBFloat16, "is a group of 3; supported groups");
  refused(0, 32, 8, 128, 16, DType::kBFloat16, "batch_size: expected at least 1 request, found 0");
  refused(2, 32, 8, 128, 12, DType::kBFloat16, "page_size: 12 is not supported");

  // A real plan on this GPU: one long request is split, many short ones are not.
  const std::vector<int32_t> long_indptr = {0, 6250}, long_last = {16};
  auto split = BatchDecodePlan::Create(long_indptr.data(), long_last.data(), 1, 32, 8, 128, 16, DType::kBFloat16);
  REQUIRE(split.ok());
  INFO(split->Describe());
  CHECK(split->split());
  CHECK(split->num_items() * 8 <= 2 * session.gpu().multiprocessors);
  CHECK(split->num_items() * 8 > session.gpu().multiprocessors);
  std::vector<int32_t> short_indptr(257), short_last(256, 3);
  std::iota(short_indptr.begin(), short_indptr.end(), 0);
  auto whole = BatchDecodePlan::Create(short_indptr.data(), short_last.data(), 256, 32, 8, 128, 16, DType::kBFloat16);
  REQUIRE(whole.ok());
  CHECK(!whole->split());
  CHECK(whole->workspace_bytes() == 0);

  // Mismatched shapes at run time, against the real plan, before any launch.
  DeviceBuffer buffer(1 << 20);
  auto status = kiln::ops::batch_decode(
      *split, TensorView::Contiguous(buffer.data(), DType::kBFloat16, {1, 32, 128}), nullptr,
      TensorView::Contiguous(buffer.data() + 65536, DType::kBFloat16, {1, 16, 128}),
      TensorView::Contiguous(buffer.data() + 131072, DType::kBFloat16, {1, 16, 8, 128}),
      TensorView::Contiguous(buffer.data() + 262144, DType::kBFloat16, {1, 16, 8, 128}),
      TensorView::Contiguous(buffer.data() + 393216, DType::kInt32, {2}),
      TensorView::Contiguous(buffer.data() + 393472, DType::kInt32, {6250}),
      TensorView::Contiguous(buffer.data() + 524288, DType::kInt32, {1}), nullptr, 0);
  CHECK(status.code() == kiln::StatusCode::kInvalidArgument);
  CHECK(status.message().find("q: expected shape [1, 32, 128]") != std::string::npos);
}

// Not a test: times batch_decode (host clock around back-to-back launches on one stream,
// after a warm-up and a correctness check of two requests) for the shapes of the targets:
// Llama-3.1-8B (32 / 8 heads, head_dim 128, bf16, pages of 16). Reports µs per call and the
// KV bytes per second. Run with "[.decode-bench]".
TEST_CASE("batch_decode timing on Llama-3.1-8B shapes", "[.decode-bench]") {
  GpuSession session(80);
  std::mt19937 rng(1);
  struct Shape {
    int64_t batch, len;
  };
  for (const Shape shape :
       {Shape{64, 8192}, Shape{16, 32768}, Shape{1, 32768}, Shape{1, 100000}, Shape{128, 2048}, Shape{32, 4096}}) {
    const int64_t kv = 8, qo = 32, dim = 128, page = 16;
    const int64_t pages_per = (shape.len + page - 1) / page, num_pages = shape.batch * pages_per;
    // Fill K/V by tiling one random block (fast for a GiB); pages in a random order.
    const size_t elems = static_cast<size_t>(2 * num_pages * page * kv * dim);
    const HostTensor block = kiln::testing::RandomTensor(DType::kBFloat16, 1 << 20, rng);
    std::vector<uint8_t> pool(elems * 2);
    for (size_t at = 0; at < pool.size(); at += block.bytes.size())
      std::memcpy(pool.data() + at, block.bytes.data(), std::min(block.bytes.size(), pool.size() - at));
    DeviceBuffer dpool(pool.size());
    dpool.Upload(pool);
    std::vector<int32_t> indptr(static_cast<size_t>(shape.batch + 1)),
        last(static_cast<size_t>(shape.batch), static_cast<int32_t>(shape.len - (pages_per - 1) * page));
    for (int64_t b = 0; b <= shape.batch; ++b) indptr[static_cast<size_t>(b)] = static_cast<int32_t>(b * pages_per);
    std::vector<int32_t> indices(static_cast<size_t>(num_pages));
    std::iota(indices.begin(), indices.end(), 0);
    std::shuffle(indices.begin(), indices.end(), rng);
    auto dindptr = UploadInts(indptr), dindices = UploadInts(indices), dlast = UploadInts(last);
    const HostTensor q = kiln::testing::RandomTensor(DType::kBFloat16, static_cast<size_t>(shape.batch * qo * dim),
                                                     rng);
    DeviceBuffer dq(q.bytes.size()), dout(q.bytes.size());
    dq.Upload(q.bytes);
    auto plan = BatchDecodePlan::Create(indptr.data(), last.data(), shape.batch, qo, kv, dim, page, DType::kBFloat16);
    REQUIRE(plan.ok());
    DeviceBuffer workspace(std::max<size_t>(plan->workspace_bytes(), 16));
    const int64_t page_elems = page * kv * dim;
    auto k_cache = TensorView::Contiguous(dpool.data(), DType::kBFloat16, {num_pages, page, kv, dim});
    auto v_cache = TensorView::Contiguous(dpool.data() + num_pages * page_elems * 2, DType::kBFloat16,
                                          {num_pages, page, kv, dim});
    auto tout = TensorView::Contiguous(dout.data(), DType::kBFloat16, {shape.batch, qo, dim});
    auto tq = TensorView::Contiguous(dq.data(), DType::kBFloat16, {shape.batch, qo, dim});
    auto run = [&] {
      return kiln::ops::batch_decode(*plan, tout, nullptr, tq, k_cache, v_cache, IntView(*dindptr, indptr.size()),
                                     IntView(*dindices, indices.size()), IntView(*dlast, last.size()), workspace.data(),
                                     plan->workspace_bytes());
    };
    REQUIRE(run().ok());
    KILN_CU(kiln::testing::Driver().cuCtxSynchronize());

    // Correctness of the first and the last request (four heads of different kv heads) before
    // any timing.
    const HostTensor got{DType::kBFloat16, dout.Download()};
    HostTensor pool_t{DType::kBFloat16, std::move(pool)};
    int64_t bad = 0;
    std::vector<int64_t> checked = {0};
    if (shape.batch > 1) checked.push_back(shape.batch - 1);
    for (int64_t b : checked) {
      for (int64_t h : {0, 5, 18, 31}) {
        std::vector<double> s(static_cast<size_t>(shape.len)), o(static_cast<size_t>(dim), 0.0);
        double m = -INFINITY, sum = 0;
        auto at = [&](int64_t pos, int64_t d, bool v) {
          const int64_t pg = indices[static_cast<size_t>(indptr[static_cast<size_t>(b)] + pos / page)];
          return static_cast<size_t>((v ? num_pages * page_elems : 0) + pg * page_elems +
                                     ((pos % page) * kv + h / 4) * dim + d);
        };
        for (int64_t pos = 0; pos < shape.len; ++pos) {
          double dot = 0;
          for (int64_t d = 0; d < dim; ++d)
            dot += q.Get(static_cast<size_t>((b * qo + h) * dim + d)) * pool_t.Get(at(pos, d, false));
          s[static_cast<size_t>(pos)] = dot / std::sqrt(128.0);
          m = std::max(m, s[static_cast<size_t>(pos)]);
        }
        for (int64_t pos = 0; pos < shape.len; ++pos) {
          const double p = std::exp(s[static_cast<size_t>(pos)] - m);
          sum += p;
          for (int64_t d = 0; d < dim; ++d) o[static_cast<size_t>(d)] += p * pool_t.Get(at(pos, d, true));
        }
        for (int64_t d = 0; d < dim; ++d)
          bad += !kiln::testing::Close(got.Get(static_cast<size_t>((b * qo + h) * dim + d)),
                                       o[static_cast<size_t>(d)] / sum, OutputTolerance(DType::kBFloat16));
      }
    }
    CHECK(bad == 0);

    for (int i = 0; i < 20; ++i) run();  // warm-up
    KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
    std::vector<double> us;
    const int kIterations = 50;
    for (int rep = 0; rep < 7; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kIterations; ++i) run();
      KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                   kIterations);
    }
    std::sort(us.begin(), us.end());
    const double kv_bytes = static_cast<double>(shape.batch) * shape.len * kv * dim * 2 * 2;
    WARN("batch_decode bf16 b" << shape.batch << " L" << shape.len << " 32/8 heads d128 p16: median " << us[3]
                               << " us (min " << us.front() << ", max " << us.back() << ", 7 x " << kIterations
                               << " calls), " << kv_bytes / us[3] / 1e6 << " TB/s of KV; " << plan->Describe());
  }
}

}  // namespace
