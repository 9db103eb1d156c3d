// The plan memo (client/ops/plan_memo.h) changes no answer: on random calls that repeat a few
// layouts with other pointers (aligned, misaligned, NULL, overlapping the other tensors) and
// other scalars, the activation, norm, rope and fused_moe plans of a thread that remembers its calls
// equal, field by field or error by error, the plans made with every check run. Without a GPU: the pointers
// are fake and never dereferenced.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "client/ops/activation/activation_plan.h"
#include "client/ops/moe/fused_moe_fp8_plan.h"
#include "client/ops/moe/fused_moe_plan.h"
#include "client/ops/norm/norm_plan.h"
#include "client/ops/plan_memo.h"
#include "client/ops/rope/rope_plan.h"
#include "client/ops/vec_width.h"
#include "kiln/ops/moe.h"

namespace {

using kiln::Device;
using kiln::DType;
using kiln::Status;
using kiln::TensorView;
using kiln::client::ActivationOp;
using kiln::client::ActivationPlan;
using kiln::client::NormOp;
using kiln::client::NormPlan;
using kiln::client::RopePlan;

constexpr uintptr_t kBase = 0x7f0000000000;  // 256-byte aligned fake device addresses
constexpr uintptr_t kApart = uintptr_t{1} << 32;

// A tensor layout to repeat: dtype, shape, strides, device; the pointer is chosen per call.
struct Layout {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // empty: contiguous
  Device device = Device::CUDA(0);
};

TensorView Make(const Layout& l, void* data) {
  TensorView t;
  t.data = data;
  t.dtype = l.dtype;
  t.ndim = static_cast<int>(l.shape.size());
  t.device = l.device;
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.shape[d] = l.shape[d];
    t.strides[d] = l.strides.empty() ? stride : l.strides[d];
    stride *= l.shape[d];
  }
  return t;
}

// A pointer for tensor `slot` of a call: its own aligned address, the same with a few bytes
// off, NULL, or an address inside another tensor's (an overlap, or an in-place call).
void* PickPointer(std::mt19937_64& rng, int slot) {
  const uintptr_t own = kBase + slot * kApart;
  switch (rng() % 8) {
    case 0: return nullptr;
    case 1: return reinterpret_cast<void*>(own + (rng() % 16));                               // often misaligned
    case 2: return reinterpret_cast<void*>(kBase + (rng() % 3) * kApart + 2 * (rng() % 64));  // maybe another's
    case 3: return reinterpret_cast<void*>(own + 8);
    default: return reinterpret_cast<void*>(own);
  }
}

// The same status from both paths (required); true when it is OK, so the plans are compared too.
template <typename Plan>
bool SameStatus(const kiln::StatusOr<Plan>& memo, const kiln::StatusOr<Plan>& full) {
  INFO("memo: " << memo.status().ToString() << "; full: " << full.status().ToString());
  REQUIRE(memo.status().code() == full.status().code());
  REQUIRE(memo.status().message() == full.status().message());
  return full.ok();
}

// Both answers alike: the same status, and for OK the same plan in every field.
void RequireSame(const kiln::StatusOr<ActivationPlan>& memo, const kiln::StatusOr<ActivationPlan>& full) {
  if (!SameStatus(memo, full)) return;
  const ActivationPlan& a = *memo;
  const ActivationPlan& b = *full;
  CHECK(a.op == b.op);
  CHECK(std::string(a.api) == b.api);
  CHECK(a.dtype == b.dtype);
  CHECK(a.device == b.device);
  CHECK(a.rows == b.rows);
  CHECK(a.d == b.d);
  CHECK(a.vec == b.vec);
  CHECK(a.out == b.out);
  CHECK(a.input == b.input);
  CHECK(a.out_stride == b.out_stride);
  CHECK(a.in_stride == b.in_stride);
}

void RequireSame(const kiln::StatusOr<NormPlan>& memo, const kiln::StatusOr<NormPlan>& full) {
  if (!SameStatus(memo, full)) return;
  const NormPlan& a = *memo;
  const NormPlan& b = *full;
  CHECK(a.op == b.op);
  CHECK(std::string(a.api) == b.api);
  CHECK(a.dtype == b.dtype);
  CHECK(a.device == b.device);
  CHECK(a.rows == b.rows);
  CHECK(a.hidden == b.hidden);
  CHECK(a.vec == b.vec);
  CHECK(a.eps == b.eps);
  CHECK(a.a == b.a);
  CHECK(a.b == b.b);
  CHECK(a.weight == b.weight);
  CHECK(a.a_stride == b.a_stride);
  CHECK(a.b_stride == b.b_stride);
}

TEST_CASE("the activation plan memo answers every call as the whole validation does", "[client][ops][plan_memo]") {
  // (out, input) pairs: accepted ones (dense, padded rows, 3-D, one row, no rows, odd d) and
  // refused ones (fp32, mixed dtypes, two devices, overlapping out rows, a shape mismatch).
  const std::vector<std::pair<Layout, Layout>> layouts = {
      {{DType::kBFloat16, {7, 4096}}, {DType::kBFloat16, {7, 8192}}},
      {{DType::kBFloat16, {7, 4096}, {4104, 1}}, {DType::kBFloat16, {7, 8192}, {8200, 1}}},
      {{DType::kFloat16, {3, 5, 64}}, {DType::kFloat16, {3, 5, 128}}},
      {{DType::kFloat16, {4095}}, {DType::kFloat16, {8190}}},
      {{DType::kBFloat16, {0, 4096}}, {DType::kBFloat16, {0, 8192}}},
      {{DType::kBFloat16, {16, 14336}}, {DType::kBFloat16, {16, 28672}}},
      {{DType::kFloat16, {9, 4098}}, {DType::kFloat16, {9, 8196}}},
      {{DType::kFloat32, {7, 4096}}, {DType::kFloat32, {7, 8192}}},
      {{DType::kFloat16, {7, 4096}}, {DType::kBFloat16, {7, 8192}}},
      {{DType::kBFloat16, {7, 4096}, {}, Device::CUDA(1)}, {DType::kBFloat16, {7, 8192}}},
      {{DType::kBFloat16, {7, 64}, {32, 1}}, {DType::kBFloat16, {7, 128}}},
      {{DType::kBFloat16, {8, 4096}}, {DType::kBFloat16, {7, 8192}}},
  };
  const ActivationOp ops[] = {ActivationOp::kSiluAndMul, ActivationOp::kGeluAndMul, ActivationOp::kGeluTanhAndMul};
  const char* apis[] = {"kiln::ops::silu_and_mul", "kiln_silu_and_mul"};
  std::mt19937_64 rng(20261205);
  int accepted = 0;
  for (int call = 0; call < 20000; ++call) {
    // Phases of 5000 calls: one op on three layouts (mostly memo hits), three ops, then every
    // layout (misses, replacements, refusals).
    const int phase = call / 5000;
    const auto& [out_l, in_l] = layouts[rng() % (phase < 2 ? 3 : layouts.size())];
    const ActivationOp op = ops[phase == 0 ? 0 : rng() % 3];
    const char* api = apis[rng() % 2];
    const TensorView out = Make(out_l, PickPointer(rng, 0));
    const TensorView in = Make(in_l, PickPointer(rng, 1));
    INFO("call " << call << ": out " << out.Describe() << " at " << out.data << ", input " << in.Describe() << " at "
                 << in.data);
    auto full = kiln::client::PlanActAndMulFully(op, out, in, api);
    RequireSame(kiln::client::PlanActAndMul(op, out, in, api), full);
    accepted += full.ok();
  }
  CHECK(accepted > 5000);  // the memo's path was taken many times, not only the refusals
}

TEST_CASE("the norm plan memo answers every call as the whole validation does", "[client][ops][plan_memo]") {
  // (x, y, weight): x is input; y is out (rms_norm) or residual (fused_add_rms_norm).
  struct Triple {
    Layout x, y, w;
  };
  const std::vector<Triple> layouts = {
      {{DType::kBFloat16, {7, 4096}}, {DType::kBFloat16, {7, 4096}}, {DType::kBFloat16, {4096}}},
      {{DType::kBFloat16, {4, 32, 128}}, {DType::kBFloat16, {4, 32, 128}}, {DType::kBFloat16, {128}}},
      {{DType::kBFloat16, {4, 8, 128}}, {DType::kBFloat16, {4, 8, 128}}, {DType::kBFloat16, {128}}},
      {{DType::kFloat32, {3, 4100}, {4104, 1}}, {DType::kFloat32, {3, 4100}}, {DType::kFloat32, {4100}}},
      {{DType::kFloat16, {1, 4095}}, {DType::kFloat16, {1, 4095}}, {DType::kFloat16, {4095}}},
      {{DType::kBFloat16, {0, 4096}}, {DType::kBFloat16, {0, 4096}}, {DType::kBFloat16, {4096}}},
      {{DType::kBFloat16, {7, 4096}}, {DType::kFloat16, {7, 4096}}, {DType::kBFloat16, {4096}}},
      {{DType::kBFloat16, {7, 4096}}, {DType::kBFloat16, {7, 4096}}, {DType::kBFloat16, {4096}, {}, Device::CUDA(1)}},
      {{DType::kBFloat16, {7, 4096}}, {DType::kBFloat16, {7, 64}, {32, 1}}, {DType::kBFloat16, {4096}}},
      {{DType::kBFloat16, {7, 4096}}, {DType::kBFloat16, {7, 4096}}, {DType::kBFloat16, {2048}}},
  };
  const double eps[] = {1e-6, 1e-5, 1e-6, 0.0, -1.0, std::nan(""), 1e-60};
  const char* apis[] = {"kiln::ops::rms_norm", "kiln_rms_norm"};
  std::mt19937_64 rng(5122026);
  int accepted = 0;
  for (int call = 0; call < 20000; ++call) {
    const int phase = call / 5000;  // as in the activation case; then other eps values too
    const Triple& l = layouts[rng() % (phase < 2 ? 3 : layouts.size())];
    const bool rms = phase == 0 || rng() % 2 == 0;
    const double e = eps[phase == 0 ? 0 : rng() % (phase < 2 ? 3 : std::size(eps))];
    const char* api = apis[rng() % 2];
    const TensorView x = Make(l.x, PickPointer(rng, 0));
    const TensorView y = Make(l.y, PickPointer(rng, 1));
    const TensorView w = Make(l.w, PickPointer(rng, 2));
    INFO("call " << call << (rms ? " rms_norm" : " fused_add_rms_norm") << ", eps " << e << ": x " << x.Describe()
                 << " at " << x.data << ", y " << y.Describe() << " at " << y.data << ", weight " << w.Describe()
                 << " at " << w.data);
    if (rms) {
      auto full = kiln::client::PlanNormFully(NormOp::kRmsNorm, y, x, w, e, api);
      RequireSame(kiln::client::PlanRmsNorm(y, x, w, e, api), full);
      accepted += full.ok();
    } else {
      auto full = kiln::client::PlanNormFully(NormOp::kFusedAddRmsNorm, x, y, w, e, api);
      RequireSame(kiln::client::PlanFusedAddRmsNorm(x, y, w, e, api), full);
      accepted += full.ok();
    }
  }
  CHECK(accepted > 5000);
}

void RequireSame(const kiln::StatusOr<RopePlan>& memo, const kiln::StatusOr<RopePlan>& full) {
  if (!SameStatus(memo, full)) return;
  const RopePlan& a = *memo;
  const RopePlan& b = *full;
  CHECK(a.op == b.op);
  CHECK(std::string(a.api) == b.api);
  CHECK(a.dtype == b.dtype);
  CHECK(a.pos_dtype == b.pos_dtype);
  CHECK(a.device == b.device);
  CHECK(a.tokens == b.tokens);
  CHECK(a.q_heads == b.q_heads);
  CHECK(a.k_heads == b.k_heads);
  CHECK(a.head_dim == b.head_dim);
  CHECK(a.rotary_dim == b.rotary_dim);
  CHECK(a.interleaved == b.interleaved);
  CHECK(a.vec == b.vec);
  CHECK(a.q == b.q);
  CHECK(a.k == b.k);
  CHECK(a.positions == b.positions);
  CHECK(a.q_token_stride == b.q_token_stride);
  CHECK(a.q_head_stride == b.q_head_stride);
  CHECK(a.k_token_stride == b.k_token_stride);
  CHECK(a.k_head_stride == b.k_head_stride);
  CHECK(a.log2_theta == b.log2_theta);
  CHECK(a.factor == b.factor);
  CHECK(a.low_freq_factor == b.low_freq_factor);
  CHECK(a.high_freq_factor == b.high_freq_factor);
  CHECK(a.original_max_position == b.original_max_position);
  CHECK(a.cos_sin_cache == b.cos_sin_cache);
  CHECK(a.max_position == b.max_position);
  CHECK(a.cache_stride == b.cache_stride);
}

TEST_CASE("the rope plan memo answers every call as the whole validation does", "[client][ops][plan_memo]") {
  // (q, k, positions, cos_sin_cache): Llama-3.1-8B decode and prefill shapes, q and k as views
  // of one fused qkv row (token stride 6144), GPT-J with a partial rotary_dim's cache, a cache
  // with padded rows; refused: fp32, mixed dtypes, a k on another device, int8 positions, a
  // cache of the wrong dtype.
  struct Quad {
    Layout q, k, p, cache;
  };
  const Layout cache128{DType::kFloat32, {4096, 128}};
  const std::vector<Quad> layouts = {
      {{DType::kBFloat16, {1, 32, 128}}, {DType::kBFloat16, {1, 8, 128}}, {DType::kInt64, {1}}, cache128},
      {{DType::kBFloat16, {7, 32, 128}, {6144, 128, 1}},
       {DType::kBFloat16, {7, 8, 128}, {6144, 128, 1}},
       {DType::kInt32, {7}},
       cache128},
      {{DType::kFloat16, {5, 4, 64}},
       {DType::kFloat16, {5, 2, 64}},
       {DType::kInt64, {5}},
       {DType::kFloat32, {512, 32}}},
      {{DType::kBFloat16, {0, 32, 128}}, {DType::kBFloat16, {0, 8, 128}}, {DType::kInt64, {0}}, cache128},
      {{DType::kBFloat16, {3, 32, 128}},
       {DType::kBFloat16, {3, 0, 128}},
       {DType::kInt64, {3}},
       {DType::kFloat32, {64, 128}, {130, 1}}},
      {{DType::kFloat32, {1, 32, 128}}, {DType::kFloat32, {1, 8, 128}}, {DType::kInt64, {1}}, cache128},
      {{DType::kBFloat16, {1, 32, 128}}, {DType::kFloat16, {1, 8, 128}}, {DType::kInt64, {1}}, cache128},
      {{DType::kBFloat16, {1, 32, 128}},
       {DType::kBFloat16, {1, 8, 128}, {}, Device::CUDA(1)},
       {DType::kInt64, {1}},
       cache128},
      {{DType::kBFloat16, {1, 32, 128}}, {DType::kBFloat16, {1, 8, 128}}, {DType::kInt8, {1}}, cache128},
      {{DType::kBFloat16, {1, 32, 128}},
       {DType::kBFloat16, {1, 8, 128}},
       {DType::kInt64, {1}},
       {DType::kFloat16, {4096, 128}}},
  };
  kiln::ops::RopeOptions llama;
  llama.theta = 500000.0;
  llama.llama31 = kiln::ops::Llama31RopeScaling{8.0, 1.0, 4.0, 8192};
  kiln::ops::RopeOptions neox;
  kiln::ops::RopeOptions gptj_partial;
  gptj_partial.interleaved = true;
  gptj_partial.rotary_dim = 32;
  kiln::ops::RopeOptions odd;
  odd.rotary_dim = 31;
  kiln::ops::RopeOptions bad_theta;
  bad_theta.theta = -1;
  const kiln::ops::RopeOptions options[] = {llama, neox, gptj_partial, odd, bad_theta};
  const char* apis[] = {"kiln::ops::apply_rope", "kiln_apply_rope"};
  std::mt19937_64 rng(20261206);
  int accepted = 0;
  for (int call = 0; call < 20000; ++call) {
    const int phase = call / 5000;  // as in the activation case
    const Quad& l = layouts[rng() % (phase < 2 ? 3 : layouts.size())];
    const bool with_cache = phase > 0 && rng() % 2 == 0;
    const kiln::ops::RopeOptions& o = options[phase == 0 ? 0 : rng() % (phase < 2 ? 3 : std::size(options))];
    const bool interleaved = rng() % 2 == 0;
    const char* api = apis[rng() % 2];
    const TensorView q = Make(l.q, PickPointer(rng, 0));
    const TensorView k = Make(l.k, PickPointer(rng, 1));
    const TensorView p = Make(l.p, PickPointer(rng, 2));
    const TensorView cache = Make(l.cache, PickPointer(rng, rng() % 4 == 0 ? 1 : 3));
    INFO("call " << call << (with_cache ? " with a cache " + cache.Describe() : std::string(" apply_rope")) << ": q "
                 << q.Describe() << " at " << q.data << ", k " << k.Describe() << " at " << k.data << ", positions "
                 << p.Describe() << " at " << p.data << ", cache at " << cache.data);
    if (with_cache) {
      auto full = kiln::client::PlanRopeWithCosSinCacheFully(q, k, p, cache, interleaved, api);
      RequireSame(kiln::client::PlanApplyRopeWithCosSinCache(q, k, p, cache, interleaved, api), full);
      accepted += full.ok();
    } else {
      auto full = kiln::client::PlanRopeFully(q, k, p, o, api);
      RequireSame(kiln::client::PlanApplyRope(q, k, p, o, api), full);
      accepted += full.ok();
    }
  }
  CHECK(accepted > 3000);
}

// The fused MoE layers' combines (moe_unpermute's plan), field by field.
void RequireSameCombine(const kiln::client::MoeUnpermutePlan& a, const kiln::client::MoeUnpermutePlan& b) {
  CHECK(a.dtype == b.dtype);
  CHECK(a.device == b.device);
  CHECK(a.threads == b.threads);
  CHECK(a.blocks_per_row == b.blocks_per_row);
  CHECK(std::memcmp(&a.params, &b.params, sizeof(a.params)) == 0);
}

// A pointer for argument `slot` of a fused MoE layer's `slots` arguments: its own, a few bytes
// off (16-byte rows lost, sometimes the element alignment too), 16-byte aligned but not 256, NULL,
// inside another argument's bytes, or, for out (`out_slot`), x's own (slot 0: in place).
void* PickLayerPointer(std::mt19937_64& rng, int slot, int slots, int out_slot) {
  const uintptr_t own = kBase + slot * kApart;
  switch (rng() % (3 * slots)) {
    case 0: return nullptr;
    case 1: return reinterpret_cast<void*>(own + (rng() % 16));
    case 2: return reinterpret_cast<void*>(own + 64 * (1 + rng() % 4));
    case 3: return reinterpret_cast<void*>(kBase + (rng() % slots) * kApart + 16 * (rng() % 8));
    case 4: return reinterpret_cast<void*>(slot == out_slot ? kBase : own);
    default: return reinterpret_cast<void*>(own);
  }
}

// The fused_moe plans' fields the call launches: on the decode path the GEMVs and the combine
// (the memo leaves the grouped steps, not launched there, empty), on the grouped path every step
// (never from the memo).
void RequireSame(const kiln::StatusOr<kiln::client::FusedMoePlan>& memo,
                 const kiln::StatusOr<kiln::client::FusedMoePlan>& full) {
  if (!SameStatus(memo, full)) return;
  const kiln::client::FusedMoePlan& a = *memo;
  const kiln::client::FusedMoePlan& b = *full;
  CHECK(a.tokens == b.tokens);
  CHECK(a.workspace.bytes == b.workspace.bytes);
  CHECK(a.workspace.arrivals == b.workspace.arrivals);
  REQUIRE(a.gemv == b.gemv);
  if (!a.gemv) {
    CHECK(std::memcmp(&a.permute.params, &b.permute.params, sizeof(a.permute.params)) == 0);
    CHECK(a.gate_up.a == b.gate_up.a);
    CHECK(a.gate_up.b == b.gate_up.b);
    CHECK(a.down.b == b.down.b);
    CHECK(a.down.d == b.down.d);
  } else {
    const kiln::client::FusedMoeGemvPlan& g = a.gemvs;
    const kiln::client::FusedMoeGemvPlan& h = b.gemvs;
    CHECK(g.dtype == h.dtype);
    CHECK(g.device == h.device);
    CHECK(g.gate_up_blocks == h.gate_up_blocks);
    CHECK(g.down_blocks == h.down_blocks);
    CHECK(g.expert_blocks == h.expert_blocks);
    CHECK(std::memcmp(&g.gate_up, &h.gate_up, sizeof(g.gate_up)) == 0);
    CHECK(std::memcmp(&g.down, &h.down, sizeof(g.down)) == 0);
    CHECK(g.foldable == h.foldable);
    CHECK(std::memcmp(&g.fold, &h.fold, sizeof(g.fold)) == 0);
  }
  RequireSameCombine(a.unpermute, b.unpermute);
}

TEST_CASE("the fused_moe plan memo answers every call as the whole validation does", "[client][ops][plan_memo][moe]") {
  // (out, x, w13, w2, topk_ids, topk_weights) at small decode shapes, the workspace sized for
  // them: dense, padded rows of x and out, a T that takes the grouped path by default, fp16;
  // refused: a w2 of the wrong I, fp32 weights, ids on another device.
  struct Call {
    int64_t tokens, top_k, experts, hidden, intermediate;
    int64_t x_stride = 0, out_stride = 0;  // 0: contiguous
    DType dtype = DType::kBFloat16;
    int64_t w2_intermediate = 0;  // 0: intermediate
    DType weights_dtype = DType::kFloat32;
    Device ids_device = Device::CUDA(0);
  };
  const std::vector<Call> calls = {
      {1, 2, 8, 64, 32},
      {3, 2, 8, 64, 32, 72, 80},
      {2, 4, 16, 128, 48, 0, 0, DType::kFloat16},
      {9, 2, 8, 64, 32},  // 18 slots > 8 experts: the grouped path by default
      {1, 2, 8, 64, 32, 0, 0, DType::kBFloat16, 40},
      {1, 2, 8, 64, 32, 0, 0, DType::kBFloat16, 0, DType::kFloat16},
      {1, 2, 8, 64, 32, 0, 0, DType::kBFloat16, 0, DType::kFloat32, Device::CUDA(1)},
  };
  const kiln::client::FusedMoePath paths[] = {kiln::client::FusedMoePath::kAuto, kiln::client::FusedMoePath::kGemv,
                                              kiln::client::FusedMoePath::kGrouped};
  const char* apis[] = {"kiln::ops::fused_moe", "kiln_fused_moe"};
  // Argument slots: 0 x, 1 w13, 2 w2, 3 ids, 4 weights, 5 out, 6 workspace.
  auto pick = [](std::mt19937_64& rng, int slot) { return PickLayerPointer(rng, slot, 7, 5); };
  std::mt19937_64 rng(20261207);
  int accepted = 0, decode = 0;
  for (int n = 0; n < 20000; ++n) {
    // Phases of 5000 calls: the first two layouts on the default path (mostly memo hits), then
    // every path, then every layout.
    const int phase = n / 5000;
    const Call& c = calls[rng() % (phase < 2 ? 2 : calls.size())];
    const kiln::client::FusedMoePath path = paths[phase == 0 ? 0 : rng() % 3];
    const int64_t i2 = c.w2_intermediate > 0 ? c.w2_intermediate : c.intermediate;
    const Layout x_l{
        c.dtype, {c.tokens, c.hidden}, c.x_stride > 0 ? std::vector<int64_t>{c.x_stride, 1} : std::vector<int64_t>{}};
    const Layout out_l{c.dtype,
                       {c.tokens, c.hidden},
                       c.out_stride > 0 ? std::vector<int64_t>{c.out_stride, 1} : std::vector<int64_t>{}};
    const Layout w13_l{c.dtype, {c.experts, 2 * c.intermediate, c.hidden}};
    const Layout w2_l{c.dtype, {c.experts, c.hidden, i2}};
    const Layout ids_l{DType::kInt32, {c.tokens, c.top_k}, {}, c.ids_device};
    const Layout weights_l{c.weights_dtype, {c.tokens, c.top_k}};
    const Layout ws_l{DType::kUInt8,
                      {kiln::ops::fused_moe_workspace_bytes(c.tokens, c.top_k, c.experts, c.hidden, c.intermediate)}};
    const TensorView x = Make(x_l, pick(rng, 0));
    const TensorView w13 = Make(w13_l, pick(rng, 1));
    const TensorView w2 = Make(w2_l, pick(rng, 2));
    const TensorView ids = Make(ids_l, pick(rng, 3));
    const TensorView weights = Make(weights_l, pick(rng, 4));
    const TensorView out = Make(out_l, pick(rng, 5));
    const TensorView ws = Make(ws_l, pick(rng, 6));
    kiln::client::FusedMoeArgs args{&out, &x, &w13, &w2, &ids, &weights, &ws};
    const char* api = apis[rng() % 2];
    INFO("call " << n << ", path " << static_cast<int>(path) << ": x " << x.Describe() << " at " << x.data
                 << ", w13 at " << w13.data << ", w2 " << w2.Describe() << " at " << w2.data << ", ids at " << ids.data
                 << ", weights at " << weights.data << ", out " << out.Describe() << " at " << out.data
                 << ", workspace at " << ws.data);
    auto full = kiln::client::PlanFusedMoeFully(args, api, path);
    RequireSame(kiln::client::PlanFusedMoe(args, api, path), full);
    accepted += full.ok();
    decode += full.ok() && full->gemv;
  }
  CHECK(decode > 3000);  // the memo's path was taken many times
  CHECK(accepted > decode);
}

// The fused_moe_fp8 plans' fields the call launches, as RequireSame of fused_moe's: on the decode
// path its four steps and the combine, on the grouped path every step (never from the memo).
void RequireSame(const kiln::StatusOr<kiln::client::FusedMoeFp8Plan>& memo,
                 const kiln::StatusOr<kiln::client::FusedMoeFp8Plan>& full) {
  if (!SameStatus(memo, full)) return;
  const kiln::client::FusedMoeFp8Plan& a = *memo;
  const kiln::client::FusedMoeFp8Plan& b = *full;
  CHECK(a.tokens == b.tokens);
  CHECK(a.device == b.device);
  CHECK(std::memcmp(&a.workspace, &b.workspace, sizeof(a.workspace)) == 0);
  REQUIRE(a.gemv == b.gemv);
  if (!a.gemv) {
    CHECK(std::memcmp(&a.permute.params, &b.permute.params, sizeof(a.permute.params)) == 0);
    CHECK(a.gate_up.b == b.gate_up.b);
    CHECK(a.gate_up.b_scales == b.gate_up.b_scales);
    CHECK(a.down.b == b.down.b);
    CHECK(a.down.b_scales == b.down.b_scales);
  } else {
    const kiln::client::FusedMoeFp8GemvPlan& g = a.gemvs;
    const kiln::client::FusedMoeFp8GemvPlan& h = b.gemvs;
    CHECK(g.expert_blocks == h.expert_blocks);
    CHECK(std::memcmp(&g.gate_up, &h.gate_up, sizeof(g.gate_up)) == 0);
    CHECK(std::memcmp(&g.gate_up_scales, &h.gate_up_scales, sizeof(g.gate_up_scales)) == 0);
    CHECK(std::memcmp(&g.down, &h.down, sizeof(g.down)) == 0);
    CHECK(std::memcmp(&g.down_scales, &h.down_scales, sizeof(g.down_scales)) == 0);
  }
  for (const auto& [q, r] : {std::pair{&a.quantize, &b.quantize}, std::pair{&a.silu, &b.silu}}) {
    CHECK(q->blocks == r->blocks);
    CHECK(std::memcmp(&q->params, &r->params, sizeof(q->params)) == 0);
  }
  RequireSameCombine(a.unpermute, b.unpermute);
}

TEST_CASE("the fused_moe_fp8 plan memo answers every call as the whole validation does",
          "[client][ops][plan_memo][moe]") {
  // (out, x, w13, w13_scales, w2, w2_scales, topk_ids, topk_weights, workspace) at small decode
  // shapes: dense, padded rows of x and out, a T that takes the grouped path by default; refused:
  // a w2 of the wrong I, w13_scales of the wrong shape, fp16 weights, ids on another device, x
  // rows 8 bytes off 16.
  struct Call {
    int64_t tokens, top_k, experts, hidden, intermediate;
    int64_t x_stride = 0, out_stride = 0;  // 0: contiguous
    int64_t w2_intermediate = 0;           // 0: intermediate
    int64_t w13_scale_columns = 0;         // 0: ceil(H / 128)
    DType weights_dtype = DType::kFloat32;
    Device ids_device = Device::CUDA(0);
  };
  const std::vector<Call> calls = {
      {1, 2, 8, 64, 32},
      {3, 2, 8, 256, 48, 264, 272},
      {2, 4, 16, 144, 160},
      {20, 2, 8, 64, 32},  // 40 slots > 4 E: the grouped path by default
      {1, 2, 8, 64, 32, 0, 0, 48},
      {1, 2, 8, 64, 32, 0, 0, 0, 2},
      {1, 2, 8, 64, 32, 0, 0, 0, 0, DType::kFloat16},
      {1, 2, 8, 64, 32, 0, 0, 0, 0, DType::kFloat32, Device::CUDA(1)},
      {2, 2, 8, 64, 32, 68},
  };
  const kiln::client::FusedMoePath paths[] = {kiln::client::FusedMoePath::kAuto, kiln::client::FusedMoePath::kGemv,
                                              kiln::client::FusedMoePath::kGrouped};
  const char* apis[] = {"kiln::ops::fused_moe_fp8", "kiln_fused_moe_fp8"};
  // Argument slots: 0 x, 1 w13, 2 w13_scales, 3 w2, 4 w2_scales, 5 ids, 6 weights, 7 out, 8 workspace.
  auto pick = [](std::mt19937_64& rng, int slot) { return PickLayerPointer(rng, slot, 9, 7); };
  auto blocks = [](int64_t n) { return (n + 127) / 128; };
  std::mt19937_64 rng(20261205);
  int accepted = 0, decode = 0;
  for (int n = 0; n < 20000; ++n) {
    // Phases of 5000 calls: the first two layouts on the default path (mostly memo hits), then
    // every path, then every layout.
    const int phase = n / 5000;
    const Call& c = calls[rng() % (phase < 2 ? 2 : calls.size())];
    const kiln::client::FusedMoePath path = paths[phase == 0 ? 0 : rng() % 3];
    const int64_t i2 = c.w2_intermediate > 0 ? c.w2_intermediate : c.intermediate;
    const int64_t e = c.experts, h = c.hidden, i = c.intermediate;
    const Layout x_l{
        DType::kBFloat16, {c.tokens, h}, c.x_stride > 0 ? std::vector<int64_t>{c.x_stride, 1} : std::vector<int64_t>{}};
    const Layout out_l{DType::kBFloat16,
                       {c.tokens, h},
                       c.out_stride > 0 ? std::vector<int64_t>{c.out_stride, 1} : std::vector<int64_t>{}};
    const Layout w13_l{DType::kFloat8E4M3, {e, 2 * i, h}};
    const Layout s13_l{DType::kFloat32, {e, blocks(2 * i), c.w13_scale_columns > 0 ? c.w13_scale_columns : blocks(h)}};
    const Layout w2_l{DType::kFloat8E4M3, {e, h, i2}};
    const Layout s2_l{DType::kFloat32, {e, blocks(h), blocks(i2)}};
    const Layout ids_l{DType::kInt32, {c.tokens, c.top_k}, {}, c.ids_device};
    const Layout weights_l{c.weights_dtype, {c.tokens, c.top_k}};
    const Layout ws_l{DType::kUInt8, {kiln::ops::fused_moe_fp8_workspace_bytes(c.tokens, c.top_k, e, h, i)}};
    const TensorView x = Make(x_l, pick(rng, 0));
    const TensorView w13 = Make(w13_l, pick(rng, 1));
    const TensorView s13 = Make(s13_l, pick(rng, 2));
    const TensorView w2 = Make(w2_l, pick(rng, 3));
    const TensorView s2 = Make(s2_l, pick(rng, 4));
    const TensorView ids = Make(ids_l, pick(rng, 5));
    const TensorView weights = Make(weights_l, pick(rng, 6));
    const TensorView out = Make(out_l, pick(rng, 7));
    const TensorView ws = Make(ws_l, pick(rng, 8));
    kiln::client::FusedMoeFp8Args args{&out, &x, &w13, &s13, &w2, &s2, &ids, &weights, &ws};
    const char* api = apis[rng() % 2];
    INFO("call " << n << ", path " << static_cast<int>(path) << ": x " << x.Describe() << " at " << x.data
                 << ", w13 at " << w13.data << ", w13_scales " << s13.Describe() << " at " << s13.data << ", w2 "
                 << w2.Describe() << " at " << w2.data << ", w2_scales at " << s2.data << ", ids at " << ids.data
                 << ", weights at " << weights.data << ", out " << out.Describe() << " at " << out.data
                 << ", workspace at " << ws.data);
    auto full = kiln::client::PlanFusedMoeFp8Fully(args, api, path);
    RequireSame(kiln::client::PlanFusedMoeFp8(args, api, path), full);
    accepted += full.ok();
    decode += full.ok() && full->gemv;
  }
  CHECK(decode > 3000);  // the memo's path was taken many times
  CHECK(accepted > decode);
}

TEST_CASE("a layout matches only the same dtype, rank, shape, strides and device", "[client][ops][plan_memo]") {
  const TensorView t = TensorView::Strided(reinterpret_cast<void*>(kBase), DType::kBFloat16, {4, 8, 128},
                                           {2048, 256, 1});
  const auto layout = kiln::client::TensorLayout::Of(t);
  TensorView other = t;
  other.data = nullptr;
  CHECK(layout.Matches(other));  // the pointer is not part of it
  for (int change = 0; change < 6; ++change) {
    TensorView u = t;
    switch (change) {
      case 0: u.dtype = DType::kFloat16; break;
      case 1: u.ndim = 2; break;
      case 2: u.shape[1] = 4; break;
      case 3: u.strides[0] = 1024; break;
      case 4: u.device = Device::CUDA(1); break;
      case 5: u.ndim = -1; break;
    }
    INFO("change " << change);
    CHECK_FALSE(layout.Matches(u));
  }
}

TEST_CASE("a memo finds what it remembered and replaces the oldest entry", "[client][ops][plan_memo]") {
  kiln::client::PlanMemo<int, 3> memo;
  auto has = [&](int v) { return memo.Find([v](int e) { return e == v; }) != nullptr; };
  CHECK_FALSE(has(0));  // unused entries are never offered, even when they would match
  memo.Next() = 1;
  memo.Next() = 2;
  memo.Next() = 3;
  CHECK((has(1) && has(2) && has(3)));
  memo.Next() = 4;  // replaces 1
  CHECK_FALSE(has(1));
  CHECK((has(2) && has(3) && has(4)));
}

TEST_CASE("narrowing a layout's vector width to the pointers is the whole choice", "[client][vec]") {
  std::mt19937_64 rng(7);
  const size_t sizes[] = {1, 2, 4, 8};
  for (int i = 0; i < 20000; ++i) {
    const size_t es = sizes[rng() % 4];
    const int64_t hidden = 1 + static_cast<int64_t>(rng() % 9000);
    const int64_t s0 = hidden + static_cast<int64_t>(rng() % 17);
    const int64_t s1 = static_cast<int64_t>(rng() % 3 == 0 ? 0 : hidden + rng() % 9);
    auto pointer = [&]() -> const void* {
      if (rng() % 5 == 0) return nullptr;
      return reinterpret_cast<const void*>(kBase + (rng() % 64));
    };
    const void* p0 = pointer();
    const void* p1 = pointer();
    const void* p2 = pointer();
    INFO("element " << es << ", hidden " << hidden << ", strides " << s0 << " " << s1 << ", pointers " << p0 << " "
                    << p1 << " " << p2);
    const int whole = kiln::client::ChooseVecWidth(es, hidden, {s0, s1}, {p0, p1, p2});
    const int layout = kiln::client::ChooseVecWidth(es, hidden, {s0, s1}, {});
    REQUIRE(kiln::client::NarrowVecWidthToPointers(layout, es, {p0, p1, p2}) == whole);
  }
}

}  // namespace
