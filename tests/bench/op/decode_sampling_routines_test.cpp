// The host side of kiln-bench's decode and sampling routines, through the registry as
// kiln-bench uses them: the bytes a call moves, the shapes they refuse, the inputs they make
// (page tables, poisoned slots, probabilities), and their float64 references and draw checks.
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

TEST_CASE("batch_decode: bytes of a call, the shapes it refuses, tolerances", "[bench]") {
  const Routine& r = Get("batch_decode");
  const ShapeAxes b64 = {{"batch", 64},        {"kv_len", 8192},     {"num_qo_heads", 32},
                         {"num_kv_heads", 8},  {"head_dim", 128},    {"page_size", 16},
                         {"num_pages", 32768}, {"nnz_pages", 32768}, {"indptr_len", 65}};
  auto spec = r.Describe(b64, DType::kBFloat16);
  REQUIRE(spec.ok());
  // K and V of 64 x 8192 positions, 8 heads of 128 bf16: 2 GiB; q and out 512 KiB each; lse;
  // the page table (65 + 32768 + 64 int32).
  CHECK(spec->bytes == 2147483648.0 + 1048576.0 + 8192.0 + 4.0 * (65 + 32768 + 64));
  CHECK(spec->flops == 4.0 * 64 * 8192 * 32 * 128);
  CHECK(spec->footprint == 0);  // every byte of the cache is read
  CHECK(spec->tensors[Index(*spec, "k_cache")].shape == std::vector<int64_t>{32768, 16, 8, 128});
  CHECK(spec->tensors[Index(*spec, "lse")].dtype == DType::kFloat32);
  // out is an average far below 1: a tight abs tolerance; lse fp32.
  const TensorSpec& out = spec->tensors[Index(*spec, "out")];
  CHECK(ToleranceFor(out, DType::kBFloat16, false).abs == 2e-3);
  CHECK(ToleranceFor(out, DType::kBFloat16, true).abs == 4e-3);
  CHECK(ToleranceFor(spec->tensors[Index(*spec, "lse")], DType::kBFloat16, true).rel == 2e-5);

  ShapeAxes bad_heads = b64;
  bad_heads[2].second = 30;
  CHECK(r.Describe(bad_heads, DType::kBFloat16).status().message() ==
        "batch_decode: num_qo_heads=30 must be a multiple of num_kv_heads=8");
  ShapeAxes bad_pages = b64;
  bad_pages[7].second = 100;
  CHECK(r.Describe(bad_pages, DType::kBFloat16).status().message().find("nnz_pages=100 must be") != std::string::npos);
}

TEST_CASE("batch_decode inputs: the page table, V by region, NaN where no request reads", "[bench]") {
  const Routine& r = Get("batch_decode");
  const ShapeAxes small = r.SmallShape();
  auto spec = r.Describe(small, DType::kBFloat16);
  REQUIRE(spec.ok());
  const auto host = Inputs(r, *spec, small, 11);
  auto table = PagedKvShapeOf(small, "batch_decode");
  REQUIRE(table.ok());
  const HostTensor& indptr = host[Index(*spec, "kv_indptr")];
  const HostTensor& indices = host[Index(*spec, "kv_indices")];
  const HostTensor& last = host[Index(*spec, "kv_last_page_len")];
  for (size_t b = 0; b <= 3; ++b) CHECK(indptr.Get(b) == 10.0 * static_cast<double>(b));
  for (size_t b = 0; b < 3; ++b) CHECK(last.Get(b) == 1);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < indices.size(); ++i) ids.push_back(static_cast<int32_t>(indices.Get(i)));
  CHECK(std::set<int32_t>(ids.begin(), ids.end()).size() == 30);

  const HostTensor& k = host[Index(*spec, "k_cache")];
  const HostTensor& v = host[Index(*spec, "v_cache")];
  const int64_t row = 2 * 64;
  std::set<int64_t> read_rows;
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t pos = 0; pos < 37; ++pos) {
      const int64_t cache_row = CacheRow(*table, ids, b, pos);
      read_rows.insert(cache_row);
      for (int64_t e = 0; e < row; ++e) {
        const double value = v.Get(static_cast<size_t>(cache_row * row + e));
        CHECK(std::fabs(value) >= 0.49);  // noise in [-0.5, 0.5) plus +-1
        CHECK(std::fabs(value) <= 1.51);
        CHECK(std::isfinite(k.Get(static_cast<size_t>(cache_row * row + e))));
      }
    }
  size_t nan_rows = 0;
  for (int64_t cache_row = 0; cache_row < 40 * 4; ++cache_row) {
    if (read_rows.count(cache_row)) continue;
    ++nan_rows;
    CHECK(std::isnan(k.Get(static_cast<size_t>(cache_row * row))));
    CHECK(std::isnan(v.Get(static_cast<size_t>(cache_row * row + row - 1))));
  }
  CHECK(nan_rows == 40 * 4 - 3 * 37);  // 10 unowned pages and 3 slots past each last token
}

TEST_CASE("batch_decode's float64 reference follows the page table", "[bench]") {
  const Routine& r = Get("batch_decode");
  const ShapeAxes small = r.SmallShape();
  auto spec = r.Describe(small, DType::kBFloat16);
  REQUIRE(spec.ok());
  auto host = Inputs(r, *spec, small, 12);
  auto table = PagedKvShapeOf(small, "batch_decode");
  REQUIRE(table.ok());
  std::vector<int32_t> ids;
  const HostTensor& indices = host[Index(*spec, "kv_indices")];
  for (size_t i = 0; i < indices.size(); ++i) ids.push_back(static_cast<int32_t>(indices.Get(i)));

  // q = 0: every logit is 0, the softmax uniform: out is the mean of the request's V rows, and
  // lse = ln(kv_len). (The NaN slots must not be read.)
  HostTensor& q = host[Index(*spec, "q")];
  for (size_t i = 0; i < q.size(); ++i) q.Set(i, 0.0);
  std::map<size_t, std::vector<double>> expected;
  REQUIRE(r.CpuReference(*spec, host, &expected).ok());
  const auto& out = expected.at(Index(*spec, "out"));
  const auto& lse = expected.at(Index(*spec, "lse"));
  const HostTensor& v = host[Index(*spec, "v_cache")];
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t h = 0; h < 8; ++h) {
      CHECK(lse[static_cast<size_t>(b * 8 + h)] == Approx(std::log(37.0)));
      for (int64_t d = 0; d < 64; d += 21) {
        double mean = 0;
        for (int64_t pos = 0; pos < 37; ++pos)
          mean += v.Get(static_cast<size_t>((CacheRow(*table, ids, b, pos) * 2 + h / 4) * 64 + d));
        CHECK(out[static_cast<size_t>((b * 8 + h) * 64 + d)] == Approx(mean / 37).margin(1e-12));
      }
    }
}

TEST_CASE("append_paged_kv: exact, a small footprint, and a reference that writes only its slots", "[bench]") {
  const Routine& r = Get("append_paged_kv");
  const ShapeAxes decode = {{"nnz", 64},          {"batch", 64},        {"kv_len", 8192},
                            {"num_kv_heads", 8},  {"head_dim", 128},    {"page_size", 16},
                            {"num_pages", 32768}, {"nnz_pages", 32768}, {"indptr_len", 65}};
  auto big = r.Describe(decode, DType::kBFloat16);
  REQUIRE(big.ok());
  // k and v (64 x 8 x 128 bf16 each) read and written into the caches; 24 B of indices a token.
  CHECK(big->bytes == 4 * 131072.0 + 24 * 64);
  CHECK(big->footprint == big->bytes);
  CHECK(big->tensors[Index(*big, "k_cache")].exact);
  CHECK(big->tensors[Index(*big, "k_cache")].role == TensorRole::kInOut);
  ShapeAxes bad = decode;
  bad[0].second = 100;
  CHECK(r.Describe(bad, DType::kBFloat16).status().message() ==
        "append_paged_kv: nnz=100 must be a positive multiple of batch=64");

  const ShapeAxes small = r.SmallShape();
  auto spec = r.Describe(small, DType::kFloat16);
  REQUIRE(spec.ok());
  const auto host = Inputs(r, *spec, small, 13);
  auto table = PagedKvShapeOf(small, "append_paged_kv");
  REQUIRE(table.ok());
  std::vector<int32_t> ids;
  const HostTensor& indices = host[Index(*spec, "kv_indices")];
  for (size_t i = 0; i < indices.size(); ++i) ids.push_back(static_cast<int32_t>(indices.Get(i)));
  std::map<size_t, std::vector<double>> expected;
  REQUIRE(r.CpuReference(*spec, host, &expected).ok());
  const auto& k_out = expected.at(Index(*spec, "k_cache"));
  const HostTensor& k_cache = host[Index(*spec, "k_cache")];
  const HostTensor& k = host[Index(*spec, "k")];
  const int64_t row = 2 * 64;
  std::set<int64_t> written;
  for (int64_t i = 0; i < 6; ++i) {
    const int64_t b = i / 2, pos = 19 + i % 2;  // the last two positions of each request
    const int64_t cache_row = CacheRow(*table, ids, b, pos);
    written.insert(cache_row);
    for (int64_t e = 0; e < row; ++e)
      CHECK(k_out[static_cast<size_t>(cache_row * row + e)] == k.Get(static_cast<size_t>(i * row + e)));
  }
  size_t kept = 0;
  for (int64_t cache_row = 0; cache_row < 25 * 4; ++cache_row) {
    if (written.count(cache_row)) continue;
    for (int64_t e = 0; e < row; e += 31)
      kept += k_out[static_cast<size_t>(cache_row * row + e)] == k_cache.Get(static_cast<size_t>(cache_row * row + e));
  }
  CHECK(kept == (25 * 4 - 6) * 5);  // every other slot unchanged (5 elements checked per slot)
}

TEST_CASE("sampling routines: bytes, parameters, and draws checked by membership", "[bench]") {
  const ShapeAxes b128 = {{"batch", 128}, {"vocab", 128256}};
  auto both = Get("top_k_top_p_sampling").Describe(b128, DType::kFloat32);
  REQUIRE(both.ok());
  CHECK(both->bytes == 4.0 * 128 * (128256 + 1 + 2));  // probs read, top_k and top_p read, samples written
  CHECK(both->tensors[Index(*both, "top_k")].dtype == DType::kInt32);
  CHECK(both->tensors[Index(*both, "samples")].role == TensorRole::kOutput);
  CHECK(Get("argmax").Describe(b128, DType::kFloat32)->bytes == 4.0 * 128 * (128256 + 1));
  CHECK(!Get("top_p_sampling").Describe({{"batch", 1}, {"vocab", 1048576}}, DType::kFloat32).ok());
  CHECK(!Get("argmax").ChecksDraws());

  for (const char* name : {"top_k_sampling", "top_p_sampling", "top_k_top_p_sampling", "min_p_sampling"}) {
    INFO(name);
    const Routine& r = Get(name);
    CHECK(r.ChecksDraws());
    const ShapeAxes small = r.SmallShape();
    auto spec = r.Describe(small, DType::kFloat32);
    REQUIRE(spec.ok());
    const auto host = Inputs(r, *spec, small, 14);
    const HostTensor& probs = host[Index(*spec, "probs")];
    const size_t batch = 5, vocab = 1000;
    std::vector<HostTensor> outputs(spec->tensors.size());
    outputs[0] = HostTensor::Zeros(DType::kInt32, batch);
    size_t argmin_row0 = 0;
    for (size_t b = 0; b < batch; ++b) {
      double sum = 0;
      size_t best = 0, worst = 0;
      for (size_t i = 0; i < vocab; ++i) {
        const double p = probs.Get(b * vocab + i);
        sum += p;
        CHECK(p > 0);
        if (p > probs.Get(b * vocab + best)) best = i;
        if (p < probs.Get(b * vocab + worst)) worst = i;
      }
      CHECK(sum == Approx(1.0).epsilon(1e-5));       // softmax rows
      outputs[0].Set(b, static_cast<double>(best));  // the largest value is in every allowed set
      if (b == 0) argmin_row0 = worst;
    }
    for (size_t i = 2; i < spec->tensors.size(); ++i) {
      const double want = spec->tensors[i].name == "top_k" ? 50 : spec->tensors[i].name == "top_p" ? 0.9f : 0.1f;
      for (size_t b = 0; b < batch; ++b) CHECK(host[i].Get(b) == want);
    }
    auto validity = r.DrawCheck(*spec, host);
    REQUIRE(validity.ok());
    CHECK(validity->what.rfind("5 rows, allowed sets of ", 0) == 0);
    CHECK(validity->check(outputs).ok);
    outputs[0].Set(0, static_cast<double>(argmin_row0));  // the smallest value: outside every set here
    const Comparison bad = validity->check(outputs);
    CHECK(!bad.ok);
    CHECK(bad.first_mismatch.rfind("[row 0] token ", 0) == 0);
  }
}

TEST_CASE("argmax's float64 reference: the first index of the largest value, NaN largest", "[bench]") {
  const Routine& r = Get("argmax");
  const ShapeAxes shape = {{"batch", 3}, {"vocab", 4}};
  auto spec = r.Describe(shape, DType::kFloat32);
  REQUIRE(spec.ok());
  std::vector<HostTensor> host = {HostTensor::Zeros(DType::kInt32, 3), HostTensor::Zeros(DType::kFloat32, 12)};
  const double rows[3][4] = {{1, 3, 3, 2}, {-1, -1, -2, -5}, {0, NAN, 9, NAN}};
  for (size_t b = 0; b < 3; ++b)
    for (size_t i = 0; i < 4; ++i) host[1].Set(b * 4 + i, rows[b][i]);
  std::map<size_t, std::vector<double>> expected;
  REQUIRE(r.CpuReference(*spec, host, &expected).ok());
  CHECK(expected.at(0) == std::vector<double>{1, 0, 1});
  // Indices are compared exactly, whatever the case's dtype.
  CHECK(ToleranceFor(spec->tensors[0], DType::kFloat32, true).abs == 0);
  CHECK(ToleranceFor(spec->tensors[0], DType::kFloat32, true).rel == 0);
}

}  // namespace
}  // namespace kiln::bench
