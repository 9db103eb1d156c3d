// kiln::ops::apply_rope / apply_rope_with_cos_sin_cache and their C ABI refuse every bad
// argument before touching the driver, with a message naming the argument, what was expected
// and what was found; accepted layouts plan to the right strides, vector width and grid. These
// run without a GPU: the pointers are fake and never dereferenced.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "client/ops/rope/rope_plan.h"
#include "kiln/ops/rope.h"
#include "tests/support/fake_device.h"
#include "tests/support/gpu_capability.h"

namespace {

using kiln::Device;
using kiln::DType;
using kiln::StatusCode;
using kiln::TensorView;
using kiln::ops::RopeOptions;

constexpr uintptr_t kQ = 0x7f0000000000;  // 256-byte aligned fake device addresses
constexpr uintptr_t kK = kQ + (1 << 26);
constexpr uintptr_t kPos = kQ + (1 << 27);
constexpr uintptr_t kCache = kQ + (1 << 28);

void* At(uintptr_t address) { return reinterpret_cast<void*>(address); }

TensorView Heads(DType dtype, int64_t tokens, int64_t heads, int64_t head_dim, uintptr_t address) {
  return TensorView::Contiguous(At(address), dtype, {tokens, heads, head_dim});
}
TensorView Positions(int64_t tokens, DType dtype = DType::kInt64, uintptr_t address = kPos) {
  return TensorView::Contiguous(At(address), dtype, {tokens});
}
TensorView Cache(int64_t max_position, int64_t rotary_dim, DType dtype = DType::kFloat32, uintptr_t address = kCache) {
  return TensorView::Contiguous(At(address), dtype, {max_position, rotary_dim});
}

using kiln::testing::RequireInvalid;

kiln::Status Rope(const TensorView& q, const TensorView& k, const TensorView& positions, RopeOptions options = {}) {
  return kiln::ops::apply_rope(q, k, positions, options, nullptr);
}

const TensorView kQ7 = Heads(DType::kBFloat16, 7, 32, 128, kQ);
const TensorView kK7 = Heads(DType::kBFloat16, 7, 8, 128, kK);

TEST_CASE("apply_rope refuses dtypes it has no kernel for", "[client][ops][rope][validation]") {
  RequireInvalid(Rope(Heads(DType::kFloat32, 7, 32, 128, kQ), Heads(DType::kFloat32, 7, 8, 128, kK), Positions(7)),
                 "kiln::ops::apply_rope: q: dtype fp32 is not supported; expected fp16 or bf16");
  RequireInvalid(Rope(kQ7, Heads(DType::kFloat16, 7, 8, 128, kK), Positions(7)),
                 "kiln::ops::apply_rope: k: expected dtype bf16 (q's), found fp16");
  RequireInvalid(Rope(kQ7, kK7, Positions(7, DType::kFloat32)),
                 "positions: dtype fp32 is not supported; expected int32 or int64");
  RequireInvalid(Rope(kQ7, kK7, Positions(7, DType::kInt8)), "positions: dtype int8 is not supported");
}

TEST_CASE("apply_rope refuses mismatched shapes and bad ranks", "[client][ops][rope][validation]") {
  RequireInvalid(Rope(kQ7, Heads(DType::kBFloat16, 8, 8, 128, kK), Positions(7)),
                 "k: expected 7 tokens (q's dim 0), found 8 in shape [8, 8, 128]");
  RequireInvalid(Rope(kQ7, Heads(DType::kBFloat16, 7, 8, 64, kK), Positions(7)),
                 "k: expected head_dim 128 (q's dim 2), found 64");
  RequireInvalid(Rope(kQ7, kK7, Positions(8)), "positions: expected shape [7] (q's tokens), found [8]");
  RequireInvalid(Rope(kQ7, kK7, TensorView::Contiguous(At(kPos), DType::kInt64, {7, 1})),
                 "positions: expected a 1-D tensor [tokens] = [7], found rank 2 [7, 1]");
  RequireInvalid(Rope(TensorView::Contiguous(At(kQ), DType::kBFloat16, {7, 4096}), kK7, Positions(7)),
                 "q: expected a 3-D tensor [tokens, heads, head_dim], found rank 2 [7, 4096]");
  RequireInvalid(Rope(kQ7, TensorView::Contiguous(At(kK), DType::kBFloat16, {7, 8, 128, 1}), Positions(7)),
                 "k: expected a 3-D tensor [tokens, heads, head_dim], found rank 4");
  RequireInvalid(Rope(TensorView::Strided(At(kQ), DType::kBFloat16, {-7, 32, 128}, {4096, 128, 1}), kK7, Positions(7)),
                 "q: dim 0 has negative size -7");
}

TEST_CASE("apply_rope refuses a rotary_dim that is odd, too large or negative", "[client][ops][rope][validation]") {
  RequireInvalid(Rope(kQ7, kK7, Positions(7), {.rotary_dim = 63}),
                 "rotary_dim: expected an even value in 2..128 (at most head_dim 128 and 512), found 63");
  RequireInvalid(Rope(kQ7, kK7, Positions(7), {.rotary_dim = 256}), "rotary_dim: expected an even value in 2..128");
  RequireInvalid(Rope(kQ7, kK7, Positions(7), {.rotary_dim = -2}),
                 "rotary_dim: expected 0 (the head dim) or an even value in 2..min(head_dim, 512), found -2");
  RequireInvalid(Rope(Heads(DType::kFloat16, 7, 4, 127, kQ), Heads(DType::kFloat16, 7, 4, 127, kK), Positions(7)),
                 "rotary_dim (0: the head dim): expected an even value in 2..127");
  RequireInvalid(Rope(Heads(DType::kFloat16, 7, 4, 1024, kQ), Heads(DType::kFloat16, 7, 4, 1024, kK), Positions(7)),
                 "rotary_dim (0: the head dim): expected an even value in 2..512 (at most head_dim 1024 and 512), "
                 "found 1024");
  // 512 of a 1024 head is fine.
  CHECK(kiln::client::PlanApplyRope(Heads(DType::kFloat16, 7, 4, 1024, kQ), Heads(DType::kFloat16, 7, 4, 1024, kK),
                                    Positions(7), {.rotary_dim = 512}, "t")
            .ok());
}

TEST_CASE("apply_rope refuses a theta or Llama-3.1 scaling it cannot use", "[client][ops][rope][validation]") {
  RequireInvalid(Rope(kQ7, kK7, Positions(7), {.theta = 0}), "theta: expected a finite value > 0, found 0");
  RequireInvalid(Rope(kQ7, kK7, Positions(7), {.theta = -1e4}), "theta: expected a finite value > 0, found -10000");
  RequireInvalid(Rope(kQ7, kK7, Positions(7), {.theta = std::nan("")}), "found nan");
  RequireInvalid(Rope(kQ7, kK7, Positions(7), {.theta = std::numeric_limits<double>::infinity()}), "found inf");
  using Scaling = kiln::ops::Llama31RopeScaling;
  RequireInvalid(Rope(kQ7, kK7, Positions(7), {.llama31 = Scaling{.factor = 0}}),
                 "llama31.factor: expected a finite value > 0, found 0");
  RequireInvalid(Rope(kQ7, kK7, Positions(7), {.llama31 = Scaling{.low_freq_factor = -1}}),
                 "llama31.low_freq_factor: expected a finite value > 0, found -1");
  RequireInvalid(Rope(kQ7, kK7, Positions(7), {.llama31 = Scaling{.low_freq_factor = 4, .high_freq_factor = 4}}),
                 "llama31.high_freq_factor: expected a finite value > low_freq_factor (4), found 4");
  RequireInvalid(Rope(kQ7, kK7, Positions(7), {.llama31 = Scaling{.original_max_position = 0}}),
                 "llama31.original_max_position: expected a value > 0, found 0");
  auto plan = kiln::client::PlanApplyRope(kQ7, kK7, Positions(7), {.theta = 500000.0, .llama31 = Scaling{}}, "t");
  REQUIRE(plan.ok());
  CHECK(plan->log2_theta == std::log2(500000.0));
  CHECK(plan->factor == 8.0);
  CHECK(plan->original_max_position == 8192.0);
  auto plain = kiln::client::PlanApplyRope(kQ7, kK7, Positions(7), {}, "t");
  REQUIRE(plain.ok());
  CHECK(plain->factor == 0.0);  // no scaling
}

TEST_CASE("apply_rope refuses layouts the kernel cannot read or write", "[client][ops][rope][validation]") {
  SECTION("a head dim that is not contiguous") {
    auto q = TensorView::Strided(At(kQ), DType::kBFloat16, {7, 32, 128}, {8192, 256, 2});
    RequireInvalid(Rope(q, kK7, Positions(7)), "q: the head dim (dim 2) must be contiguous (stride 1), found stride 2");
  }
  SECTION("strided positions") {
    RequireInvalid(Rope(kQ7, kK7, TensorView::Strided(At(kPos), DType::kInt64, {7}, {2})),
                   "positions: the last dim must be contiguous (stride 1), found stride 2");
  }
  SECTION("heads whose rotated parts overlap") {
    auto q = TensorView::Strided(At(kQ), DType::kBFloat16, {7, 32, 128}, {32 * 64, 64, 1});
    RequireInvalid(Rope(q, kK7, Positions(7)), "q: its rotated parts overlap (token stride 2048, head stride 64");
    // A single token whose heads overlap.
    auto one = TensorView::Strided(At(kQ), DType::kBFloat16, {1, 32, 128}, {0, 100, 1});
    RequireInvalid(Rope(one, Heads(DType::kBFloat16, 1, 8, 128, kK), Positions(1)),
                   "q: its head stride 100 is less than rotary_dim 128");
    // ... but not when only the unrotated parts overlap.
    CHECK(
        kiln::client::PlanApplyRope(one, Heads(DType::kBFloat16, 1, 8, 128, kK), Positions(1), {.rotary_dim = 100}, "t")
            .ok());
  }
  SECTION("tokens that alias one another (token stride 0)") {
    auto k = TensorView::Strided(At(kK), DType::kBFloat16, {7, 8, 128}, {0, 128, 1});
    RequireInvalid(Rope(kQ7, k, Positions(7)), "k: its rotated parts overlap");
  }
  SECTION("q and k in the same memory") {
    RequireInvalid(Rope(kQ7, Heads(DType::kBFloat16, 7, 8, 128, kQ + 256), Positions(7)), "q and k overlap in memory");
  }
  SECTION("positions inside q") {
    RequireInvalid(Rope(kQ7, kK7, Positions(7, DType::kInt64, kQ + 4096)), "q and positions overlap in memory");
  }
  SECTION("NULL and misaligned pointers") {
    RequireInvalid(Rope(Heads(DType::kBFloat16, 7, 32, 128, 0), kK7, Positions(7)),
                   "q: data is NULL, but the tensor [7, 32, 128] is not empty");
    RequireInvalid(Rope(kQ7, Heads(DType::kBFloat16, 7, 8, 128, kK + 1), Positions(7)),
                   "k: data pointer 0x7f0004000001 is not aligned to 2 bytes (the size of one bf16 element)");
    RequireInvalid(Rope(kQ7, kK7, Positions(7, DType::kInt64, kPos + 4)),
                   "positions: data pointer 0x7f0008000004 is not aligned to 8 bytes");
  }
  SECTION("tensors off the GPU or on different GPUs") {
    auto cpu = TensorView::Contiguous(At(kK), DType::kBFloat16, {7, 8, 128}, Device::CPU());
    RequireInvalid(Rope(kQ7, cpu, Positions(7)), "k: expected a CUDA device tensor, found one on cpu");
    auto other = TensorView::Contiguous(At(kK), DType::kBFloat16, {7, 8, 128}, Device::CUDA(1));
    RequireInvalid(Rope(kQ7, other, Positions(7)),
                   "k: on cuda:1, but q is on cuda:0; all tensors must be on one device");
    auto pos = TensorView::Contiguous(At(kPos), DType::kInt32, {7}, Device::CUDA(1));
    RequireInvalid(Rope(kQ7, kK7, pos), "positions: on cuda:1, but q is on cuda:0");
  }
}

TEST_CASE("apply_rope_with_cos_sin_cache refuses a cache it cannot read", "[client][ops][rope][validation]") {
  auto cached = [](const TensorView& cache) {
    return kiln::ops::apply_rope_with_cos_sin_cache(kQ7, kK7, Positions(7), cache, false);
  };
  RequireInvalid(cached(Cache(4096, 128, DType::kBFloat16)),
                 "kiln::ops::apply_rope_with_cos_sin_cache: cos_sin_cache: dtype bf16 is not supported; expected fp32");
  RequireInvalid(cached(TensorView::Contiguous(At(kCache), DType::kFloat32, {4096, 2, 64})),
                 "cos_sin_cache: expected a 2-D tensor [max_position, rotary_dim], found rank 3 [4096, 2, 64]");
  RequireInvalid(cached(Cache(4096, 127)),
                 "cos_sin_cache: its dim 1 (rotary_dim): expected an even value in 2..128 (at most head_dim 128 and "
                 "512), found 127");
  RequireInvalid(cached(Cache(4096, 256)), "cos_sin_cache: its dim 1 (rotary_dim): expected an even value in 2..128");
  RequireInvalid(cached(TensorView::Strided(At(kCache), DType::kFloat32, {4096, 128}, {256, 2})),
                 "cos_sin_cache: the last dim must be contiguous (stride 1), found stride 2");
  RequireInvalid(cached(Cache(4096, 128, DType::kFloat32, kQ + 512)), "q and cos_sin_cache overlap in memory");
  RequireInvalid(cached(TensorView::Contiguous(At(kCache), DType::kFloat32, {4096, 128}, Device::CUDA(1))),
                 "cos_sin_cache: on cuda:1, but q is on cuda:0");
}

TEST_CASE("nothing to rotate is OK and launches nothing, with or without a GPU", "[client][ops][rope]") {
  // No driver call and no daemon request (none runs here), but still validated.
  auto q0 = TensorView::Contiguous(nullptr, DType::kBFloat16, {0, 32, 128});
  auto k0 = TensorView::Contiguous(nullptr, DType::kBFloat16, {0, 8, 128});
  auto p0 = TensorView::Contiguous(nullptr, DType::kInt64, {0});
  CHECK(Rope(q0, k0, p0).ok());
  CHECK(kiln::ops::apply_rope_with_cos_sin_cache(q0, k0, p0, Cache(4096, 128), true).ok());
  // k with no heads: q alone is rotated (here: nothing at all, no heads anywhere).
  auto no_heads = TensorView::Contiguous(nullptr, DType::kBFloat16, {7, 0, 128});
  CHECK(Rope(no_heads, no_heads, Positions(7)).ok());
  RequireInvalid(Rope(q0, TensorView::Contiguous(nullptr, DType::kFloat16, {0, 8, 128}), p0), "k: expected dtype bf16");
  RequireInvalid(Rope(q0, k0, p0, {.rotary_dim = 3}), "rotary_dim: expected an even value");
}

TEST_CASE("accepted rope layouts plan to the right strides, vector width and grid", "[client][ops][rope]") {
  using kiln::client::PlanApplyRope;
  using kiln::client::PlanApplyRopeWithCosSinCache;
  SECTION("q and k as views of one fused qkv buffer [tokens, (32 + 8 + 8) * 128]") {
    const int64_t row = (32 + 8 + 8) * 128;
    auto q = TensorView::Strided(At(kQ), DType::kBFloat16, {300, 32, 128}, {row, 128, 1});
    auto k = TensorView::Strided(At(kQ + 32 * 128 * 2), DType::kBFloat16, {300, 8, 128}, {row, 128, 1});
    auto plan = PlanApplyRope(q, k, Positions(300), {}, "t");
    INFO(plan.status().ToString());
    REQUIRE(plan.ok());
    CHECK(plan->q_token_stride == row);
    CHECK(plan->k_token_stride == row);
    CHECK(plan->q_head_stride == 128);
    CHECK(plan->rotary_dim == 128);
    CHECK(plan->vec == 8);
    CHECK(plan->q_heads == 32);
    CHECK(plan->k_heads == 8);
    CHECK(plan->pos_dtype == DType::kInt64);
    // k overlapping q's heads in that buffer is refused.
    auto bad_k = TensorView::Strided(At(kQ + 31 * 128 * 2), DType::kBFloat16, {300, 8, 128}, {row, 128, 1});
    RequireInvalid(PlanApplyRope(q, bad_k, Positions(300), {}, "t").status(), "q and k overlap in memory");
  }
  SECTION("heads-major views [heads, tokens, head_dim] seen as [tokens, heads, head_dim]") {
    auto q = TensorView::Strided(At(kQ), DType::kFloat16, {7, 32, 64}, {64, 7 * 64, 1});
    auto k = TensorView::Strided(At(kK), DType::kFloat16, {7, 8, 64}, {64, 7 * 64, 1});
    auto plan = PlanApplyRope(q, k, Positions(7, DType::kInt32), {.rotary_dim = 32, .interleaved = true}, "t");
    INFO(plan.status().ToString());
    REQUIRE(plan.ok());
    CHECK(plan->vec == 8);  // 16 pairs
    CHECK(plan->interleaved);
    CHECK(plan->pos_dtype == DType::kInt32);
  }
  SECTION("odd strides and misaligned pointers narrow the vector") {
    auto q = TensorView::Strided(At(kQ), DType::kBFloat16, {7, 32, 128}, {32 * 130, 130, 1});
    CHECK(PlanApplyRope(q, kK7, Positions(7), {}, "t")->vec == 2);
    auto q1 = TensorView::Strided(At(kQ + 2), DType::kBFloat16, {7, 32, 128}, {32 * 128, 128, 1});
    CHECK(PlanApplyRope(q1, kK7, Positions(7), {}, "t")->vec == 1);
    CHECK(PlanApplyRope(kQ7, kK7, Positions(7), {.rotary_dim = 100}, "t")->vec == 2);  // 50 pairs
    // Strides of a dim with one entry do not count.
    auto single = TensorView::Strided(At(kQ), DType::kBFloat16, {1, 1, 128}, {3, 5, 1});
    auto single_k = TensorView::Strided(At(kK), DType::kBFloat16, {1, 1, 128}, {7, 9, 1});
    CHECK(PlanApplyRope(single, single_k, Positions(1), {}, "t")->vec == 8);
  }
  SECTION("the cache's alignment and row stride narrow the vector too") {
    auto plan = PlanApplyRopeWithCosSinCache(kQ7, kK7, Positions(7), Cache(4096, 128), false, "t");
    REQUIRE(plan.ok());
    CHECK(plan->vec == 8);
    CHECK(plan->max_position == 4096);
    CHECK(plan->cache_stride == 128);
    auto padded = TensorView::Strided(At(kCache), DType::kFloat32, {4096, 128}, {130, 1});
    CHECK(PlanApplyRopeWithCosSinCache(kQ7, kK7, Positions(7), padded, false, "t")->vec == 2);
    CHECK(PlanApplyRopeWithCosSinCache(kQ7, kK7, Positions(7), Cache(4096, 128, DType::kFloat32, kCache + 4), true, "t")
              ->vec == 1);
    CHECK(PlanApplyRopeWithCosSinCache(kQ7, kK7, Positions(7), Cache(4096, 64), true, "t")->rotary_dim == 64);
  }
}

TEST_CASE("RopeHeadGroups spreads few tokens over the heads and keeps many tokens together", "[client][ops][rope]") {
  using kiln::client::RopeHeadGroups;
  CHECK(RopeHeadGroups(1, 8, 40) == 40);  // one decode token: every head its own group
  CHECK(RopeHeadGroups(300, 8, 40) == 40);
  CHECK(RopeHeadGroups(4096, 8, 40) == 8);   // 5 heads per thread
  CHECK(RopeHeadGroups(16384, 8, 40) == 2);  // 20 heads per thread
  CHECK(RopeHeadGroups(1 << 20, 8, 40) == 1);
  CHECK(RopeHeadGroups(7, 8, 1) == 1);
  CHECK(RopeHeadGroups(1, 1, 131072) == 65535);  // grid.y's limit
  for (int64_t tokens : {1, 2, 3, 100, 1000, 5000, 30000, 100000})
    for (int64_t heads : {1, 2, 5, 40, 64, 128}) {
      const int64_t groups = RopeHeadGroups(tokens, 8, heads);
      CHECK(groups >= 1);
      CHECK(groups <= heads);
    }
}

// The C ABI: the same checks with the C names, and its own (NULL tensors, the scaling struct).
struct DLHeads {
  int64_t shape[3];
  DLTensor t{};
  DLHeads(uintptr_t address, int64_t tokens, int64_t heads, int64_t head_dim, DLDataType dtype = {kDLBfloat, 16, 1})
      : shape{tokens, heads, head_dim} {
    t.data = At(address);
    t.device = {kDLCUDA, 0};
    t.ndim = 3;
    t.dtype = dtype;
    t.shape = shape;
  }
};
struct DLVector {
  int64_t shape[2];
  DLTensor t{};
  DLVector(uintptr_t address, int64_t n, DLDataType dtype, int ndim = 1, int64_t m = 1) : shape{n, m} {
    t.data = At(address);
    t.device = {kDLCUDA, 0};
    t.ndim = ndim;
    t.dtype = dtype;
    t.shape = shape;
  }
};

void RequireInvalidC(kiln_status status, const std::string& fragment) {
  const std::string error = kiln_last_error();
  INFO(error);
  REQUIRE(status == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(error.find(fragment) != std::string::npos);
}

TEST_CASE("kiln_apply_rope and kiln_apply_rope_with_cos_sin_cache refuse bad arguments", "[client][capi][rope]") {
  DLHeads q(kQ, 7, 32, 128), k(kK, 7, 8, 128);
  DLVector pos(kPos, 7, {kDLInt, 64, 1});
  DLVector cache(kCache, 4096, {kDLFloat, 32, 1}, 2, 128);
  RequireInvalidC(kiln_apply_rope(nullptr, &k.t, &pos.t, 0, 0, 1e4, nullptr, nullptr),
                  "kiln_apply_rope: q: the DLTensor pointer is NULL");
  RequireInvalidC(kiln_apply_rope(&q.t, &k.t, nullptr, 0, 0, 1e4, nullptr, nullptr),
                  "kiln_apply_rope: positions: the DLTensor pointer is NULL");
  RequireInvalidC(kiln_apply_rope(&q.t, &k.t, &pos.t, 127, 0, 1e4, nullptr, nullptr),
                  "kiln_apply_rope: rotary_dim: expected an even value in 2..128");
  RequireInvalidC(kiln_apply_rope(&q.t, &k.t, &pos.t, 0, 0, 0.0, nullptr, nullptr),
                  "kiln_apply_rope: theta: expected a finite value > 0, found 0");
  kiln_llama31_rope_scaling scaling = {8.0, 4.0, 1.0, 8192};
  RequireInvalidC(kiln_apply_rope(&q.t, &k.t, &pos.t, 0, 0, 5e5, &scaling, nullptr),
                  "kiln_apply_rope: llama31.high_freq_factor: expected a finite value > low_freq_factor (4), found 1");
  DLVector float_pos(kPos, 7, {kDLFloat, 32, 1});
  RequireInvalidC(kiln_apply_rope(&q.t, &k.t, &float_pos.t, 0, 0, 1e4, nullptr, nullptr),
                  "positions: dtype fp32 is not supported; expected int32 or int64");
  DLHeads fp32_q(kQ, 7, 32, 128, {kDLFloat, 32, 1});
  RequireInvalidC(kiln_apply_rope(&fp32_q.t, &k.t, &pos.t, 0, 0, 1e4, nullptr, nullptr),
                  "q: dtype fp32 is not supported; expected fp16 or bf16");
  DLHeads k8(kK, 8, 8, 128);
  RequireInvalidC(kiln_apply_rope(&q.t, &k8.t, &pos.t, 0, 0, 1e4, nullptr, nullptr),
                  "k: expected 7 tokens (q's dim 0), found 8");

  RequireInvalidC(kiln_apply_rope_with_cos_sin_cache(&q.t, &k.t, &pos.t, nullptr, 0, nullptr),
                  "kiln_apply_rope_with_cos_sin_cache: cos_sin_cache: the DLTensor pointer is NULL");
  DLVector odd_cache(kCache, 4096, {kDLFloat, 32, 1}, 2, 65);
  RequireInvalidC(kiln_apply_rope_with_cos_sin_cache(&q.t, &k.t, &pos.t, &odd_cache.t, 1, nullptr),
                  "kiln_apply_rope_with_cos_sin_cache: cos_sin_cache: its dim 1 (rotary_dim): expected an even value");
  // byte_offset is applied before the alignment check.
  k.t.byte_offset = 1;
  RequireInvalidC(kiln_apply_rope_with_cos_sin_cache(&q.t, &k.t, &pos.t, &cache.t, 0, nullptr),
                  "k: data pointer 0x7f0004000001 is not aligned to 2 bytes");
}

TEST_CASE("a valid rope call on a machine without a driver says so", "[client][ops][rope][no-gpu]") {
  if (kiln::testing::GpuUnavailableReason().empty()) {
    // On a GPU machine this call would launch on the fake pointers below.
    std::printf("SKIPPED: this test needs a machine without a usable GPU\n");
    std::exit(KILN_TEST_SKIP_CODE);
  }
  auto status = Rope(kQ7, kK7, Positions(7));
  INFO(status.ToString());
  CHECK(status.code() == StatusCode::kNoDriver);
  DLHeads q(kQ, 7, 32, 128), k(kK, 7, 8, 128);
  DLVector pos(kPos, 7, {kDLInt, 32, 1});
  DLVector cache(kCache, 4096, {kDLFloat, 32, 1}, 2, 128);
  CHECK(kiln_apply_rope_with_cos_sin_cache(&q.t, &k.t, &pos.t, &cache.t, 0, nullptr) == KILN_ERROR_NO_DRIVER);
}

}  // namespace
