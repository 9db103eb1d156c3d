// [gpu][moe][fused][fp8] fused_moe_fp8's two quantizing kernels alone, launched by hand from the
// op's module (LoadOp; the contract's launch: kFp8QuantBlock threads, FusedMoeFp8QuantBlocks
// blocks, FusedMoeFp8QuantParams by value) on a real sm_90a GPU (HopperSession, skipped visibly
// elsewhere). Their codes and scales must be the host's, bit for bit: scale = max(amax, 1e-10) /
// 448 and code = e4m3(v / scale) with IEEE divisions. The kernels divide through a reciprocal
// refined once a group (QuotientByScale, kiln/moe/moe_contract.h), so the rows are made to find
// where that could part from the division: every binade down to bf16's subnormals, signed zeros,
// e4m3's rounding midpoints and an ulp each side, bf16's largest values, and an infinity in a
// group (an infinite scale). Widths of one pass, of several and of several chunks with a partial
// last one, at each count of passes a warp (1..kFp8QuantPasses); the gathered form (rows from row_to_slot, -1 rows
// zeros, rows past m_indptr[E] untouched) and x by token; silu_and_mul with gate 256 (silu(256) is 256 in fp32, so v is
// 256 · up exactly and the host knows every v), rows of slot_to_row -1 untouched. Outputs
// poisoned; bytes past each row's columns and scales past its groups must stay so.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "client/core/api/float16.h"
#include "kiln/kernel.h"
#include "kiln/moe/moe_contract.h"
#include "tests/support/gpu_harness.h"

namespace {

using kiln::client::BFloat16ToFloat;
using kiln::client::FloatToBFloat16;
using kiln::client::FloatToFp8E4M3;
using kiln::testing::DeviceBuffer;
namespace moe = kiln::moe;

constexpr int kKinds = 6;
constexpr float kSiluGate = 256.0f;  // silu(256) = 256 / (1 + exp(-256)) = 256 in fp32

// Column c of a row of `kind`: about the value v the kernel quantizes (the row stores it divided
// by `unit`, 256 for silu and 1 otherwise, rounded to bf16; v is then what that times unit is).
// Kind 1 spans the stored values' binades, down to bf16's subnormals.
float RowValue(int kind, int64_t c, float unit, std::mt19937& rng) {
  std::uniform_real_distribution<float> frac(0.0f, 1.0f);
  const float sign = (rng() & 1) ? -1.0f : 1.0f;
  switch (kind) {
    case 0:  // ordinary values
      return std::normal_distribution<float>(0.0f, 1.0f)(rng);
    case 1: {  // every binade from bf16's subnormals up, and zeros
      if (rng() % 16 == 0) return sign * 0.0f;
      const int e = std::uniform_int_distribution<int>(-133, 20)(rng);
      return sign * std::ldexp(1.0f + frac(rng), e) * unit;
    }
    case 2:  // signed zeros: codes 0x00 and 0x80, scale 1e-10 / 448
      return (c % 2) ? -0.0f : 0.0f;
    case 3: {  // amax 448 (scale 1): e4m3's midpoints and an ulp of bf16 each side of them
      if (c % 128 == 0) return 448.0f;
      const int e = std::uniform_int_distribution<int>(-6, 7)(rng);
      const int m = std::uniform_int_distribution<int>(0, 7)(rng);
      float v = (rng() % 4 == 0) ? std::ldexp(2.0f * m + 1.0f, -10) : std::ldexp(1.0f + (2 * m + 1) / 16.0f, e);
      const float ulp = std::ldexp(1.0f, static_cast<int>(std::floor(std::log2(v))) - 7);
      const int side = static_cast<int>(rng() % 3) - 1;
      return sign * (v + side * ulp);
    }
    case 4:  // an infinity in one group: its scale infinite, its codes zeros and NaN
      if (c == 130) return sign * INFINITY;
      return std::normal_distribution<float>(0.0f, 1.0f)(rng);
    default: {  // bf16's largest values
      const int e = std::uniform_int_distribution<int>(100, 127)(rng);
      return sign * std::ldexp(1.0f + frac(rng), e);
    }
  }
}

// The host's quantization of one row of v (IEEE divisions, as docs/kernels-moe.md states it).
void HostQuantize(const std::vector<float>& v, uint8_t* codes, float* scales) {
  const int64_t n = static_cast<int64_t>(v.size());
  for (int64_t g = 0; g * moe::kFp8QuantGroup < n; ++g) {
    const int64_t begin = g * moe::kFp8QuantGroup, end = std::min(n, begin + moe::kFp8QuantGroup);
    float amax = 0.0f;
    for (int64_t c = begin; c < end; ++c) amax = std::fmax(amax, std::fabs(v[static_cast<size_t>(c)]));
    const float scale = std::fmax(amax, moe::kFp8MinAmax) / moe::kFp8E4M3Max;
    scales[g] = scale;
    for (int64_t c = begin; c < end; ++c) codes[c] = FloatToFp8E4M3(v[static_cast<size_t>(c)] / scale);
  }
}

struct Form {
  const char* name;
  bool silu;
  bool by_row_map;  // quantize: rows gathered through row_to_slot; silu: slot_to_row given
};

TEST_CASE("fused_moe_fp8's quantizers give an IEEE division's codes and scales, bit for bit",
          "[gpu][moe][fused][fp8]") {
  kiln::testing::GpuSession session = kiln::testing::HopperSession();
  auto module = kiln::LoadOp({moe::kFusedMoeFp8Op, {{"dtype", "bf16"}}});
  INFO(module.status().ToString());
  REQUIRE(module.ok());
  for (const auto& launch : module->info().launch)
    if (launch.entry == moe::kFusedMoeFp8QuantizeEntry || launch.entry == moe::kFusedMoeFp8SiluAndMulQuantizeEntry) {
      CHECK(launch.block == moe::kFp8QuantBlock);
      CHECK(launch.items_per_block == moe::kFp8QuantWarps);
    }
  std::mt19937 rng(7);
  const Form forms[] = {{"quantize, gathered", false, true},
                        {"quantize, by token", false, false},
                        {"silu_and_mul_quantize", true, false},
                        {"silu_and_mul_quantize, by slot", true, true}};
  for (const Form& form : forms) {
    for (const int64_t columns : {8, 136, 1000, 2048, 2056, 4104})
      for (int passes = 1; passes <= moe::kFp8QuantPasses; ++passes) {
        INFO(form.name << ", " << columns << " columns, " << passes << " passes a warp");
        auto kernel = module->kernel(form.silu ? moe::kFusedMoeFp8SiluAndMulQuantizeEntry
                                               : moe::kFusedMoeFp8QuantizeEntry);
        REQUIRE(kernel.ok());
        const int64_t tokens = 13, top_k = 3, experts = 4;
        // The grid's rows: gathered, tokens * top_k slots plus padding rows past m_indptr[E].
        const int64_t rows = form.silu ? tokens * top_k : (form.by_row_map ? tokens * top_k + 5 : tokens);
        const int64_t written = form.by_row_map && !form.silu ? tokens * top_k : rows;  // m_indptr[E]
        const float unit = form.silu ? kSiluGate : 1.0f;
        // The source rows (x's tokens, or silu's [gate | up] rows), 24 elements of padding a row.
        const int64_t source_rows = form.silu ? rows : tokens;
        const int64_t in_columns = form.silu ? 2 * columns : columns;
        const int64_t in_stride = in_columns + 24;
        std::vector<uint16_t> in(static_cast<size_t>(source_rows * in_stride), FloatToBFloat16(NAN));
        std::vector<std::vector<float>> v(static_cast<size_t>(source_rows));  // the v of each source row
        for (int64_t r = 0; r < source_rows; ++r) {
          const int kind = static_cast<int>(r % kKinds);
          for (int64_t c = 0; c < columns; ++c) {
            const uint16_t w = FloatToBFloat16(RowValue(kind, c, unit, rng) / unit);
            if (form.silu) {
              in[static_cast<size_t>(r * in_stride + c)] = FloatToBFloat16(kSiluGate);
              in[static_cast<size_t>(r * in_stride + columns + c)] = w;
            } else {
              in[static_cast<size_t>(r * in_stride + c)] = w;
            }
            v[static_cast<size_t>(r)].push_back(BFloat16ToFloat(w) * unit);  // exact: a power of two
          }
        }
        // The row map: gathered rows take slots in a shuffled order, a few of them -1 (zeros); by
        // slot, a few rows -1 (skipped: left as poisoned).
        std::vector<int32_t> row_map(static_cast<size_t>(rows), -1);
        if (form.by_row_map) {
          std::vector<int32_t> slots(static_cast<size_t>(tokens * top_k));
          for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<int32_t>(i);
          std::shuffle(slots.begin(), slots.end(), rng);
          for (int64_t r = 0; r < rows && r < tokens * top_k; ++r)
            row_map[static_cast<size_t>(r)] = (r % 7 == 3) ? -1 : slots[static_cast<size_t>(r)];
        }
        const std::vector<int32_t> m_indptr = {0, 9, 9, 30, static_cast<int32_t>(written)};
        const int64_t q_stride = columns + 16, groups = (columns + 127) / 128, scale_stride = groups + 1;

        DeviceBuffer d_in(in.size() * 2), d_map(static_cast<size_t>(rows) * 4), d_indptr(m_indptr.size() * 4);
        DeviceBuffer d_q(static_cast<size_t>(rows * q_stride)), d_scales(static_cast<size_t>(rows * scale_stride) * 4);
        auto bytes_of = [](const void* p, size_t n) {
          return std::vector<uint8_t>(static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
        };
        d_in.Upload(bytes_of(in.data(), in.size() * 2));
        d_map.Upload(bytes_of(row_map.data(), row_map.size() * 4));
        d_indptr.Upload(bytes_of(m_indptr.data(), m_indptr.size() * 4));
        d_q.Poison();
        d_scales.Poison();

        moe::FusedMoeFp8QuantParams p = {};
        p.q = d_q.data();
        p.scales = reinterpret_cast<float*>(d_scales.data());
        p.in = d_in.data();
        p.row_to_slot = form.by_row_map ? reinterpret_cast<const int*>(d_map.data()) : nullptr;
        p.m_indptr = form.by_row_map && !form.silu ? reinterpret_cast<const int*>(d_indptr.data()) : nullptr;
        p.rows = rows;
        p.in_stride = in_stride;
        p.q_stride = q_stride;
        p.scale_stride = scale_stride;
        p.columns = static_cast<int>(columns);
        p.top_k = static_cast<int>(top_k);
        p.experts = static_cast<int>(experts);
        p.passes = passes;
        kiln::LaunchConfig config;
        config.grid.x = static_cast<unsigned>(moe::FusedMoeFp8QuantBlocks(rows, columns, passes));
        config.block.x = moe::kFp8QuantBlock;
        const auto status = (*kernel)(config, p);
        INFO(status.ToString());
        REQUIRE(status.ok());
        KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
        const std::vector<uint8_t> q = d_q.Download(), s_bytes = d_scales.Download();
        std::vector<float> s(s_bytes.size() / 4);
        std::memcpy(s.data(), s_bytes.data(), s_bytes.size());

        int64_t code_errors = 0, scale_errors = 0, poison_errors = 0;
        std::string first;
        for (int64_t r = 0; r < rows; ++r) {
          // What row r holds: the host's quantization, or nothing (poison) where the kernel skips it.
          bool untouched = r >= written;
          std::vector<float> row_v(static_cast<size_t>(columns), 0.0f);  // a gathered -1 row: zeros
          if (!untouched) {
            if (form.silu) {
              untouched = form.by_row_map && row_map[static_cast<size_t>(r)] < 0;
              row_v = v[static_cast<size_t>(r)];
            } else if (!form.by_row_map) {
              row_v = v[static_cast<size_t>(r)];
            } else if (row_map[static_cast<size_t>(r)] >= 0) {
              row_v = v[static_cast<size_t>(row_map[static_cast<size_t>(r)] / top_k)];
            }
          }
          std::vector<uint8_t> want_q(static_cast<size_t>(q_stride), 0xFF);
          std::vector<float> want_s(static_cast<size_t>(scale_stride));
          std::memset(want_s.data(), 0xFF, want_s.size() * 4);
          if (!untouched) HostQuantize(row_v, want_q.data(), want_s.data());
          for (int64_t c = 0; c < q_stride; ++c) {
            const uint8_t got = q[static_cast<size_t>(r * q_stride + c)], want = want_q[static_cast<size_t>(c)];
            if (got == want) continue;
            (c < columns && !untouched ? code_errors : poison_errors)++;
            if (first.empty())
              first = "row " + std::to_string(r) + " column " + std::to_string(c) + ": code " + std::to_string(got) +
                      ", want " + std::to_string(want) +
                      (c < columns ? " (v " + std::to_string(row_v[static_cast<size_t>(c)]) + ")" : "");
          }
          for (int64_t g = 0; g < scale_stride; ++g) {
            const float got = s[static_cast<size_t>(r * scale_stride + g)], want = want_s[static_cast<size_t>(g)];
            if (std::memcmp(&got, &want, 4) == 0) continue;
            (g < groups && !untouched ? scale_errors : poison_errors)++;
            if (first.empty())
              first = "row " + std::to_string(r) + " scale " + std::to_string(g) + ": " + std::to_string(got) +
                      ", want " + std::to_string(want);
          }
        }
        INFO(first);
        CHECK(code_errors == 0);
        CHECK(scale_errors == 0);
        CHECK(poison_errors == 0);
      }
  }
}

}  // namespace
