// The host side of kiln-bench's prefill routines (batch_prefill_ragged, batch_prefill_paged),
// through the registry as kiln-bench uses them: the bytes and FLOPs of a call (the (query,
// visible key) pairs counted exactly), the shapes they refuse, the inputs they make (index
// arrays, V by region, NaN where no request reads), and their float64 references (causal
// aligned to the end of the KV).
#include <catch2/catch.hpp>

#include <cmath>
#include <set>

#include "bench/op/paged_kv_table.h"
#include "bench/op/routine.h"

namespace kiln::bench {
namespace {

const Routine& Get(std::string_view name) {
  const Routine* r = RoutineRegistry::Global().Find(name);
  INFO("routine " << name);
  REQUIRE(r != nullptr);
  return *r;
}

size_t Index(const CaseSpec& spec, const std::string& name) {
  for (size_t i = 0; i < spec.tensors.size(); ++i)
    if (spec.tensors[i].name == name) return i;
  FAIL("no tensor " << name);
  return 0;
}

// A case's host inputs as the case runner makes them: random data, then the routine's own.
std::vector<HostTensor> Inputs(const Routine& r, const CaseSpec& spec, const ShapeAxes& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<HostTensor> host;
  for (const auto& t : spec.tensors)
    host.push_back(t.role != TensorRole::kOutput && !t.routine_fills
                       ? RandomHostTensor(t.dtype, t.numel(), rng, t.lo, t.hi)
                       : HostTensor::Zeros(t.dtype, t.numel()));
  Status s = r.FillInputs(spec, shape, rng, &host);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return host;
}

// The axes of the trace definitions, in their order.
// mask: 1 causal, 2 none.
ShapeAxes Ragged(int64_t batch, int64_t q_len, int64_t kv_len, int64_t qo, int64_t kv, int64_t dim, int64_t mask = 1) {
  return {{"batch", batch},         {"q_len", q_len},           {"kv_len", kv_len},
          {"mask", mask},           {"num_qo_heads", qo},       {"num_kv_heads", kv},
          {"head_dim", dim},        {"total_q", batch * q_len}, {"total_kv", batch * kv_len},
          {"indptr_len", batch + 1}};
}

ShapeAxes Paged(int64_t batch, int64_t q_len, int64_t kv_len, int64_t qo, int64_t kv, int64_t dim, int64_t page,
                int64_t spare) {
  const int64_t nnz = batch * ((kv_len + page - 1) / page);
  return {{"batch", batch},     {"q_len", q_len},           {"kv_len", kv_len}, {"mask", 1},
          {"num_qo_heads", qo}, {"num_kv_heads", kv},       {"head_dim", dim},  {"total_q", batch * q_len},
          {"page_size", page},  {"num_pages", nnz + spare}, {"nnz_pages", nnz}, {"indptr_len", batch + 1}};
}

TEST_CASE("batch_prefill: bytes and FLOPs of a call, the shapes it refuses, tolerances", "[bench]") {
  const Routine& r = Get("batch_prefill_ragged");
  // Llama-3.1-8B, 4 x 4096 causal: query i sees i + 1 positions.
  const ShapeAxes b4 = Ragged(4, 4096, 4096, 32, 8, 128);
  auto spec = r.Describe(b4, DType::kBFloat16);
  INFO(spec.status().ToString());
  REQUIRE(spec.ok());
  CHECK(spec->flops == 4.0 * 4 * (4096.0 * 4097 / 2) * 32 * 128);
  // q and out (16384 x 32 x 128 bf16) each, K and V (16384 x 8 x 128 bf16) each, lse, the indptrs.
  CHECK(spec->bytes == 2 * 134217728.0 + 2 * 33554432.0 + 4.0 * 16384 * 32 + 4.0 * 2 * 5);
  CHECK(spec->tensors[Index(*spec, "q")].shape == std::vector<int64_t>{16384, 32, 128});
  CHECK(spec->tensors[Index(*spec, "k")].shape == std::vector<int64_t>{16384, 8, 128});
  CHECK(spec->tensors[Index(*spec, "lse")].dtype == DType::kFloat32);
  CHECK(spec->tensors[Index(*spec, "qo_indptr")].shape == std::vector<int64_t>{5});
  CHECK(spec->tensors[Index(*spec, "out")].role == TensorRole::kOutput);
  const TensorSpec& out = spec->tensors[Index(*spec, "out")];
  CHECK(ToleranceFor(out, DType::kBFloat16, false).abs == 2e-3);
  CHECK(ToleranceFor(out, DType::kBFloat16, true).abs == 4e-3);
  CHECK(ToleranceFor(spec->tensors[Index(*spec, "lse")], DType::kBFloat16, true).rel == 2e-5);
  // One query per request sees every position; 8 queries at the end of 8192 (verification).
  CHECK(r.Describe(Ragged(3, 1, 500, 32, 8, 128), DType::kBFloat16)->flops == 4.0 * 3 * 500 * 32 * 128);
  CHECK(r.Describe(Ragged(64, 8, 8192, 32, 8, 128), DType::kBFloat16)->flops ==
        4.0 * 64 * (8 * 8184.0 + 36) * 32 * 128);
  // No mask: every query sees every position (and may outnumber them).
  CHECK(r.Describe(Ragged(4, 4096, 4096, 32, 8, 128, 2), DType::kBFloat16)->flops ==
        4.0 * 4 * 4096.0 * 4096 * 32 * 128);
  CHECK(r.Describe(Ragged(2, 100, 50, 32, 8, 128, 2), DType::kBFloat16).ok());

  // Paged: chunked prefill, 2048 queries at the end of 32 768 positions (query i sees 30 721 + i).
  const Routine& p = Get("batch_prefill_paged");
  auto chunked = p.Describe(Paged(1, 2048, 32768, 32, 8, 128, 16, 0), DType::kBFloat16);
  INFO(chunked.status().ToString());
  REQUIRE(chunked.ok());
  CHECK(chunked->flops == 4.0 * (2048.0 * 30720 + 2048.0 * 2049 / 2) * 32 * 128);
  CHECK(chunked->tensors[Index(*chunked, "k_cache")].shape == std::vector<int64_t>{2048, 16, 8, 128});
  CHECK(chunked->tensors[Index(*chunked, "kv_indices")].shape == std::vector<int64_t>{2048});
  CHECK(chunked->tensors[Index(*chunked, "kv_last_page_len")].shape == std::vector<int64_t>{1});
  // q and out (2048 x 32 x 128 bf16), K and V (32768 x 8 x 128 bf16), lse, 2 + 2 indptr entries,
  // 2048 page ids and one last page length.
  CHECK(chunked->bytes == 2 * 16777216.0 + 2 * 67108864.0 + 4.0 * 2048 * 32 + 4.0 * (4 + 2048 + 1));

  auto refused = [&](const Routine& routine, const ShapeAxes& shape, const std::string& message) {
    auto s = routine.Describe(shape, DType::kBFloat16);
    INFO(s.status().ToString());
    REQUIRE(!s.ok());
    CHECK(s.status().code() == StatusCode::kInvalidArgument);
    CHECK(s.status().message() == message);
  };
  refused(r, Ragged(4, 4096, 4096, 30, 8, 128),
          "batch_prefill_ragged: num_qo_heads=30 must be a multiple of num_kv_heads=8");
  refused(r, Ragged(2, 100, 50, 32, 8, 128),
          "batch_prefill_ragged: q_len=100 must be at most kv_len=50 (causal: the first queries would see nothing)");
  refused(r, Ragged(2, 100, 100, 32, 8, 128, 3), "batch_prefill_ragged: mask=3 must be 1 (causal) or 2 (none)");
  ShapeAxes bad_total = b4;
  bad_total[7].second = 100;
  refused(r, bad_total, "batch_prefill_ragged: total_q=100 must be batch * q_len = 16384");
  ShapeAxes bad_kv = b4;
  bad_kv[8].second = 100;
  refused(r, bad_kv, "batch_prefill_ragged: total_kv=100 must be batch * kv_len = 16384");
  ShapeAxes bad_indptr = b4;
  bad_indptr[9].second = 4;
  refused(r, bad_indptr, "batch_prefill_ragged: indptr_len=4 must be batch + 1 = 5");
  ShapeAxes bad_pages = Paged(1, 2048, 32768, 32, 8, 128, 16, 0);
  bad_pages[10].second = 100;
  CHECK(p.Describe(bad_pages, DType::kBFloat16).status().message().find("nnz_pages=100 must be") != std::string::npos);
}

TEST_CASE("batch_prefill inputs: index arrays, V by region, NaN where no request reads", "[bench]") {
  // Ragged: the indptrs in tokens, V everywhere noise + -1 or +1.
  {
    const Routine& r = Get("batch_prefill_ragged");
    const ShapeAxes small = r.SmallShape();
    auto spec = r.Describe(small, DType::kBFloat16);
    REQUIRE(spec.ok());
    const auto host = Inputs(r, *spec, small, 21);
    const int64_t batch = AxisValue(small, "batch"), q_len = AxisValue(small, "q_len");
    const int64_t kv_len = AxisValue(small, "kv_len");
    for (int64_t b = 0; b <= batch; ++b) {
      CHECK(host[Index(*spec, "qo_indptr")].Get(static_cast<size_t>(b)) == static_cast<double>(b * q_len));
      CHECK(host[Index(*spec, "kv_indptr")].Get(static_cast<size_t>(b)) == static_cast<double>(b * kv_len));
    }
    const HostTensor& v = host[Index(*spec, "v")];
    for (size_t i = 0; i < v.size(); ++i) {
      CHECK(std::fabs(v.Get(i)) >= 0.49);  // noise in [-0.5, 0.5) plus +-1
      CHECK(std::fabs(v.Get(i)) <= 1.51);
    }
  }
  // Paged: the decode routines' page table; every slot no request owns NaN in K and V.
  {
    const Routine& r = Get("batch_prefill_paged");
    const ShapeAxes small = r.SmallShape();
    auto spec = r.Describe(small, DType::kBFloat16);
    REQUIRE(spec.ok());
    const auto host = Inputs(r, *spec, small, 22);
    auto table = PagedKvShapeOf(small, "batch_prefill_paged");
    REQUIRE(table.ok());
    const HostTensor& indices = host[Index(*spec, "kv_indices")];
    std::vector<int32_t> ids;
    for (size_t i = 0; i < indices.size(); ++i) ids.push_back(static_cast<int32_t>(indices.Get(i)));
    CHECK(std::set<int32_t>(ids.begin(), ids.end()).size() == static_cast<size_t>(table->nnz_pages));
    for (int64_t b = 0; b <= table->batch; ++b)
      CHECK(host[Index(*spec, "kv_indptr")].Get(static_cast<size_t>(b)) ==
            static_cast<double>(b * table->pages_per_request));
    for (int64_t b = 0; b < table->batch; ++b)
      CHECK(host[Index(*spec, "kv_last_page_len")].Get(static_cast<size_t>(b)) ==
            static_cast<double>(table->last_page_len));
    const HostTensor& k = host[Index(*spec, "k_cache")];
    const HostTensor& v = host[Index(*spec, "v_cache")];
    const int64_t row = AxisValue(small, "num_kv_heads") * AxisValue(small, "head_dim");
    std::set<int64_t> read_rows;
    for (int64_t b = 0; b < table->batch; ++b)
      for (int64_t pos = 0; pos < table->kv_len; ++pos) {
        const int64_t cache_row = CacheRow(*table, ids, b, pos);
        read_rows.insert(cache_row);
        for (int64_t e = 0; e < row; e += 7) {
          CHECK(std::fabs(v.Get(static_cast<size_t>(cache_row * row + e))) >= 0.49);
          CHECK(std::isfinite(k.Get(static_cast<size_t>(cache_row * row + e))));
        }
      }
    int64_t nan_rows = 0;
    for (int64_t cache_row = 0; cache_row < table->num_pages * table->page_size; ++cache_row) {
      if (read_rows.count(cache_row)) continue;
      ++nan_rows;
      CHECK(std::isnan(k.Get(static_cast<size_t>(cache_row * row))));
      CHECK(std::isnan(v.Get(static_cast<size_t>(cache_row * row + row - 1))));
    }
    CHECK(nan_rows == table->num_pages * table->page_size - table->batch * table->kv_len);
  }
}

// q = 0: every logit is 0, so a query's softmax is uniform over what it sees: out is the mean of
// its visible V rows and lse = ln(count). Causal aligned to the end: query i of a request sees
// its first kv_len - q_len + i + 1 positions. (NaN slots must not be read.)
void CheckUniform(const Routine& r, const ShapeAxes& shape, bool paged) {
  INFO(r.name() << " " << FormatShape(shape));
  auto spec = r.Describe(shape, DType::kBFloat16);
  REQUIRE(spec.ok());
  auto host = Inputs(r, *spec, shape, 23);
  HostTensor& q = host[Index(*spec, "q")];
  for (size_t i = 0; i < q.size(); ++i) q.Set(i, 0.0);
  std::map<size_t, std::vector<double>> expected;
  REQUIRE(r.CpuReference(*spec, host, &expected).ok());
  const auto& out = expected.at(Index(*spec, "out"));
  const auto& lse = expected.at(Index(*spec, "lse"));
  const int64_t batch = AxisValue(shape, "batch"), q_len = AxisValue(shape, "q_len");
  const int64_t kv_len = AxisValue(shape, "kv_len"), qo = AxisValue(shape, "num_qo_heads");
  const int64_t kv = AxisValue(shape, "num_kv_heads"), dim = AxisValue(shape, "head_dim");
  std::vector<int32_t> ids;
  PagedKvShape table;
  if (paged) {
    auto t = PagedKvShapeOf(shape, "batch_prefill_paged");
    REQUIRE(t.ok());
    table = *t;
    const HostTensor& indices = host[Index(*spec, "kv_indices")];
    for (size_t i = 0; i < indices.size(); ++i) ids.push_back(static_cast<int32_t>(indices.Get(i)));
  }
  const HostTensor& v = host[Index(*spec, paged ? "v_cache" : "v")];
  auto row_of = [&](int64_t b, int64_t pos) { return paged ? CacheRow(table, ids, b, pos) : b * kv_len + pos; };
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < q_len; i += 3)
      for (int64_t h = 0; h < qo; h += 3) {
        const int64_t seen = kv_len - q_len + i + 1;
        const int64_t t = b * q_len + i;
        CHECK(lse[static_cast<size_t>(t * qo + h)] == Approx(std::log(static_cast<double>(seen))));
        for (int64_t d = 0; d < dim; d += 13) {
          double mean = 0;
          for (int64_t pos = 0; pos < seen; ++pos)
            mean += v.Get(static_cast<size_t>((row_of(b, pos) * kv + h / (qo / kv)) * dim + d));
          CHECK(out[static_cast<size_t>((t * qo + h) * dim + d)] ==
                Approx(mean / static_cast<double>(seen)).margin(1e-12));
        }
      }
}

TEST_CASE("batch_prefill's float64 reference: causal aligned to the end of the KV", "[bench]") {
  const Routine& ragged = Get("batch_prefill_ragged");
  const Routine& paged = Get("batch_prefill_paged");
  CheckUniform(ragged, ragged.SmallShape(), false);
  CheckUniform(ragged, Ragged(2, 20, 20, 4, 2, 64), false);  // q_len == kv_len: query i sees i + 1
  CheckUniform(paged, paged.SmallShape(), true);
  CheckUniform(paged, Paged(2, 9, 33, 8, 1, 64, 8, 3), true);   // last pages of one token
  CheckUniform(paged, Paged(1, 1, 50, 2, 2, 128, 1, 2), true);  // one query sees every position
}

}  // namespace
}  // namespace kiln::bench
