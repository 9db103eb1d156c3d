// The autotuner's parts that need no GPU: the shape buckets of every op with tactics (and that
// the stores accept them), the candidates of the ops without a shape model, kiln::tune's
// refusals of bad options and bad arguments (each naming its function, before any driver call),
// and the per-thread memory of a call's tactic (per op, shape and groups; forgotten when this
// process stores a tuning result).
#include <catch2/catch.hpp>

#include <iterator>
#include <set>
#include <string>

#include "client/ops/gemm/gemm_tactic_controls.h"
#include "client/ops/gemm/gemm_tuning.h"
#include "client/ops/gemm/tactic_tuner.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/tune.h"
#include "proto/tuning_checks.h"
#include "tests/support/fake_device.h"

namespace {

using kiln::DType;
using kiln::TensorView;
using kiln::testing::FakeDeviceAddress;
using kiln::testing::RequireInvalid;

TensorView T(int slot, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::Contiguous(FakeDeviceAddress(slot), dtype, shape);
}

TEST_CASE("tuning buckets name the op's shape and the stores accept them", "[client][ops][gemm]") {
  using kiln::client::GemmTuningBucket;
  using kiln::client::GroupedTuningBucket;
  CHECK(GemmTuningBucket(DType::kBFloat16, DType::kBFloat16, 4096, 4096, 4096) == "bf16.obf16.m4096.n4096.k4096");
  CHECK(GemmTuningBucket(DType::kFloat8E4M3, DType::kFloat32, 129, 1536, 7168) == "fp8_e4m3.ofp32.m256.n1536.k7168");
  // Grouped: M is the bucket of a group's rows (T / E rounded up, or M_max), E is part of the key.
  CHECK(GroupedTuningBucket(DType::kBFloat16, DType::kBFloat16, 8, 1024, 28672, 4096) ==
        "bf16.obf16.e8.m1024.n28672.k4096");
  CHECK(GroupedTuningBucket(DType::kBFloat16, DType::kBFloat16, 128, 257, 1536, 2048) ==
        "bf16.obf16.e128.m512.n1536.k2048");
  CHECK(GroupedTuningBucket(DType::kFloat8E4M3, DType::kBFloat16, 1, 1, 8, 16) == "fp8_e4m3.obf16.e1.m1.n8.k16");
  for (const std::string& bucket : {GemmTuningBucket(DType::kFloat8E4M3, DType::kBFloat16, 1, 8, 16),
                                    GroupedTuningBucket(DType::kFloat16, DType::kFloat32, 256, 100000, 8, 8)})
    CHECK(kiln::proto::BucketProblem("bucket", bucket).empty());
}

TEST_CASE("the fallback and tuning order names every tile of the space once", "[client][ops][gemm]") {
  std::set<std::pair<int, int>> in_order, space;
  for (const auto& t : kiln::gemm::kGemmTilesInOrder) in_order.insert({t.tile_m, t.tile_n});
  for (int tile_m : kiln::gemm::kTileMChoices)
    for (int tile_n : kiln::gemm::kTileNChoices) space.insert({tile_m, tile_n});
  CHECK(in_order.size() == std::size(kiln::gemm::kGemmTilesInOrder));  // each once
  CHECK(in_order == space);
}

TEST_CASE("the fp8 and grouped ops tune every tile of their space at its most stages", "[client][ops][gemm]") {
  for (const char* op : kiln::client::kTacticOps) {
    if (std::string(op) == kiln::gemm::kGemmOp) continue;  // gemm's candidates follow its shape model
    INFO(op);
    const auto candidates = kiln::client::SpaceTuneCandidates(op);
    REQUIRE(candidates.size() == std::size(kiln::gemm::kTileMChoices) * std::size(kiln::gemm::kTileNChoices));
    CHECK(candidates.front().tile_m == 128);
    CHECK(candidates.front().tile_n == 256);
    std::set<std::pair<int, int>> tiles;
    for (const auto& t : candidates) {
      CHECK(kiln::client::TacticInSpace(op, t));
      CHECK(t.split_k == 1);
      CHECK(t.group_m == 8);
      // The most stages: one more would not be in the space.
      CHECK(!kiln::client::TacticInSpace(op, {t.tile_m, t.tile_n, t.stages + 1, t.group_m, 1}));
      tiles.insert({t.tile_m, t.tile_n});
    }
    CHECK(tiles.size() == candidates.size());
  }
}

TEST_CASE("kiln::tune refuses bad options and bad arguments before touching a GPU", "[client][ops][gemm]") {
  const DType bf16 = DType::kBFloat16, fp8 = DType::kFloat8E4M3;
  kiln::tune::Options bad;
  bad.iterations = 0;
  const TensorView a = T(0, bf16, {64, 64}), b = T(1, bf16, {128, 64}), d = T(2, bf16, {64, 128});
  RequireInvalid(kiln::tune::gemm(d, a, b, bad).status(),
                 "kiln::tune::gemm: options: warmup and iterations must be at least 1 and max_call_ms positive, "
                 "found 3, 0, 200");
  kiln::tune::Options slow;
  slow.max_call_ms = 0;
  RequireInvalid(kiln::tune::grouped_gemm_masked(d, a, b, T(3, DType::kInt32, {1}), slow).status(),
                 "kiln::tune::grouped_gemm_masked: options:");

  // The op's own validation, named as the tuner's.
  RequireInvalid(kiln::tune::gemm(d, T(0, bf16, {64, 60}), b).status(), "kiln::tune::gemm: ");
  const TensorView ga = T(0, bf16, {100, 64}), gb = T(1, bf16, {4, 128, 64}), gd = T(2, bf16, {100, 128});
  RequireInvalid(kiln::tune::grouped_gemm(gd, ga, gb, T(3, DType::kInt32, {4})).status(),
                 "kiln::tune::grouped_gemm: m_indptr: expected shape [5]");
  RequireInvalid(kiln::tune::grouped_gemm_masked(T(2, bf16, {4, 25, 128}), T(0, bf16, {4, 25, 64}), gb,
                                                 T(3, DType::kInt64, {4}))
                     .status(),
                 "kiln::tune::grouped_gemm_masked: masked_m: expected dtype int32");
  const TensorView fa = T(0, fp8, {64, 128}), fb = T(1, fp8, {256, 128});
  RequireInvalid(kiln::tune::fp8_gemm(T(2, bf16, {64, 256}), fa, fb, T(3, DType::kFloat32, {64, 2}),
                                      T(4, DType::kFloat32, {2, 1}))
                     .status(),
                 "kiln::tune::fp8_gemm: a_scales:");
  RequireInvalid(kiln::tune::grouped_fp8_gemm(T(2, bf16, {64, 256}), fa, T(1, bf16, {2, 256, 128}),
                                              T(3, DType::kFloat32, {64, 1}), T(4, DType::kFloat32, {2, 2, 1}),
                                              T(5, DType::kInt32, {3}))
                     .status(),
                 "kiln::tune::grouped_fp8_gemm: ");
  RequireInvalid(kiln::tune::grouped_fp8_gemm_masked(T(2, bf16, {2, 32, 256}), T(0, fp8, {2, 32, 128}),
                                                     T(1, fp8, {2, 256, 128}), T(3, DType::kFloat32, {2, 32, 1}),
                                                     T(4, DType::kFloat32, {2, 2, 1}), T(5, DType::kInt32, {3}))
                     .status(),
                 "kiln::tune::grouped_fp8_gemm_masked: masked_m: expected shape [2]");
}

TEST_CASE("a call's tactic is remembered per op and shape until this process stores a tuning result",
          "[client][ops][gemm]") {
  using kiln::client::ChosenGemmTactic;
  using kiln::client::GemmTacticSource;
  using kiln::client::TacticCallKey;
  const TacticCallKey grouped{kiln::gemm::kGroupedGemmOp, 0, DType::kBFloat16, DType::kBFloat16, 512, 4096, 4096, 8};
  TacticCallKey masked = grouped;
  masked.op = kiln::gemm::kGroupedGemmMaskedOp;
  TacticCallKey more_groups = grouped;
  more_groups.groups = 16;

  int asked = 0;
  auto choose = [&]() -> kiln::StatusOr<ChosenGemmTactic> {
    ++asked;
    return ChosenGemmTactic{{128, 128, 6, 8, 1}, GemmTacticSource::kHeuristic};
  };
  REQUIRE(kiln::client::RememberedTactic(grouped, choose).ok());
  REQUIRE(kiln::client::RememberedTactic(grouped, choose).ok());
  CHECK(asked == 1);
  REQUIRE(kiln::client::RememberedTactic(masked, choose).ok());
  REQUIRE(kiln::client::RememberedTactic(more_groups, choose).ok());
  CHECK(asked == 3);
  // A failed choice is not remembered.
  auto fail = []() -> kiln::StatusOr<ChosenGemmTactic> {
    return kiln::Status(kiln::StatusCode::kFailedPrecondition, "every tactic blocked");
  };
  TacticCallKey other = grouped;
  other.k = 2048;
  CHECK(!kiln::client::RememberedTactic(other, fail).ok());
  CHECK(kiln::client::FindRememberedTactic(other) == nullptr);
  // A tuning result stored by this process makes every remembered choice stale.
  kiln::client::BumpGemmTuningGeneration();
  CHECK(kiln::client::FindRememberedTactic(grouped) == nullptr);
  REQUIRE(kiln::client::RememberedTactic(grouped, choose).ok());
  CHECK(asked == 4);
}

}  // namespace
