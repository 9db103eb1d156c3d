// [gpu][moe][fused] fused_moe (kiln/ops/moe.h), a whole expert layer, on a real sm_90a GPU (its
// grouped GEMMs are wgmma/TMA kernels: HopperSession, skipped visibly elsewhere) and daemon,
// against a float64 CPU reference of the layer (FusedMoeReference) that rounds where the op
// stores: the activation silu(gate) * up and each expert's output row, to x's dtype.
//  - T 1, 3, 64, 1000 x top_k 1, 2, 8 x bf16 and fp16 over E 8, 64, 128, 256 at H 256 / I 128,
//    and T 4096 at a small width; Mixtral's width (H 4096, I 14336, E 8, top-2) and Qwen3's
//    (H 2048, I 768, E 128, top-8) at T 1; I = 200 (2I = 400: no tile's half divides it) with
//    H 136;
//  - experts no token chose (their weights are NaN on the device: a read of them into a result
//    would show), every token on one expert, ids -1, E, E + 5, INT_MIN, INT_MAX (dropped: they
//    contribute nothing) and a token with every choice dropped (zeros), x with padded rows (the
//    padding NaN), a padded out;
//  - out poisoned (NaN) before every call: its row padding and a guard row after it stay
//    poisoned; the workspace poisoned too (rows the steps do not write are NaN);
//  - in place (out == x) gives the same bits as a separate out; two calls, a second stream and
//    the C ABI give the same bits; a CUDA graph captured once replays on new ids and new x
//    (nothing on the host depends on them); T = 0 launches nothing; refused through the real path;
//  - the decode path's folded combine (SetFusedMoeFoldedCombineForTesting, every column grouping)
//    against the separate one, bit for bit, in plain stream order, in place, on a workspace the last
//    call left, after a call with real choices and in a graph;
//  - the decode path's one-grid form (SetFusedMoeOneGridForTesting) against its two GEMV launches,
//    bit for bit, at the model widths and three ticket orders (SetFusedMoeOneGridLagForTesting), in plain stream order,
//    in place, on a workspace the last call left (its counters not zero) and on a poisoned one, with the folded combine
//    asked for too, and in a graph;
//  - both paths (the grouped one and the decode path's GEMVs, forced with
//    SetFusedMoePathForTesting) on every case of the grid and the edge cases (the decode path
//    takes up to 1024 slots with aligned rows; beyond, or on x rows 8 bytes off 16, the call runs
//    the grouped path), in the determinism and graph tests too; the decode path with every token
//    on one expert (many passes over its weights), 1024 slots, and a misaligned x, launched as
//    programmatic dependents (the default) and in plain stream order, with the same bits; every
//    choice dropped right after a call with real ones (zeros, on both paths).
#include <catch2/catch.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "client/core/api/float16.h"
#include "client/ops/moe/fused_moe_plan.h"
#include "kiln/kiln.h"
#include "kiln/ops/moe.h"
#include "tests/client/ops/fused_moe_test_paths.h"
#include "tests/client/ops/moe_test_routing.h"
#include "tests/support/gpu_harness.h"

namespace {

using kiln::DType;
using kiln::TensorView;
using kiln::testing::DeviceBuffer;
using kiln::testing::Ids;
using kiln::testing::IdsName;
using kiln::testing::MakeIds;

constexpr uint8_t kPoison = 0xFF;  // bf16/fp16 NaN

const kiln::client::CudaDriver& Cuda() { return kiln::testing::Driver(); }
CUdeviceptr DevicePtr(const char* p) { return reinterpret_cast<CUdeviceptr>(p); }

// ---- Host values ------------------------------------------------------------------------------

// The host conversions HostTensor uses (client/core/api/float16.h): an fp32 value rounded to the
// dtype as the kernels' FromFloat rounds it (to nearest, ties to even), and back.
uint16_t ToBits(DType dtype, float v) {
  return dtype == DType::kBFloat16 ? kiln::client::FloatToBFloat16(v) : kiln::client::FloatToHalf(v);
}
float FromBits(DType dtype, uint16_t bits) {
  return dtype == DType::kBFloat16 ? kiln::client::BFloat16ToFloat(bits) : kiln::client::HalfToFloat(bits);
}
// A float64 value stored in the dtype (through fp32, as the kernels compute in fp32).
double Round(DType dtype, double v) { return FromBits(dtype, ToBits(dtype, static_cast<float>(v))); }

// `count` values uniform in [lo, hi), rounded to the dtype: their bits (for the device) and their
// values (for the reference). A 64-bit engine gives two values a draw: the weights of Mixtral's
// experts are hundreds of millions of values.
void Uniform(DType dtype, size_t count, float lo, float hi, std::mt19937_64& engine, std::vector<uint16_t>* bits,
             std::vector<float>* values) {
  bits->resize(count);
  values->resize(count);
  const float scale = (hi - lo) / 16777216.0f;  // 24 random bits a value
  for (size_t i = 0; i < count; i += 2) {
    const uint64_t r = engine();
    for (size_t h = 0; h < 2 && i + h < count; ++h) {
      const float v = lo + scale * static_cast<float>((r >> (32 * h)) & 0xFFFFFF);
      (*bits)[i + h] = ToBits(dtype, v);
      (*values)[i + h] = FromBits(dtype, (*bits)[i + h]);
    }
  }
}

// ---- The float64 reference ----------------------------------------------------------------

struct Reference {
  std::vector<double> out;      // [T, H]
  std::vector<double> combine;  // [T, H]: sum over j of |w_j| |y_j[h]|, the rounded expert rows' magnitude
  std::vector<double> down;     // [T, H]: sum over j of |w_j| sum over i of |w2[e][h, i] act_i|
};

// sum of a[i] * b[i] in float64 (four partial sums: the reference's time), and of |a[i] * b[i]|.
template <typename A>
double Dot(const A* a, const float* b, int64_t n, double* magnitude = nullptr) {
  double s[4] = {0, 0, 0, 0}, m[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int l = 0; l < 4; ++l) {
      const double p = static_cast<double>(a[i + l]) * static_cast<double>(b[i + l]);
      s[l] += p;
      m[l] += std::fabs(p);
    }
  for (; i < n; ++i) {
    const double p = static_cast<double>(a[i]) * static_cast<double>(b[i]);
    s[0] += p;
    m[0] += std::fabs(p);
  }
  if (magnitude != nullptr) *magnitude = (m[0] + m[1]) + (m[2] + m[3]);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// The layer of kiln/ops/moe.h in float64: for token t and choice j with e = ids[t, j] in [0, E),
//   gate[i] = w13[e][i] . x[t], up[i] = w13[e][I + i] . x[t]     (i < I)
//   act[i]  = round(silu(gate[i]) * up[i]),  silu(g) = g / (1 + exp(-g))
//   y[h]    = round(w2[e][h] . act)
//   out[t]  += weights[t, j] * y            (in the order of j; not rounded)
// round() is to x's dtype: where the op stores the activation and the experts' output rows (as a
// layer of separate calls stores them). An id outside [0, E) contributes nothing. x is [T, H]
// (dense here), w13[e] [2I, H] and w2[e] [H, I] as stored on the device (an expert no token chose
// may be empty), ids and weights [T, top_k].
Reference FusedMoeReference(DType dtype, int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t inter,
                            const std::vector<float>& x, const std::vector<std::vector<float>>& w13,
                            const std::vector<std::vector<float>>& w2, const std::vector<int32_t>& ids,
                            const std::vector<float>& weights) {
  Reference r;
  const size_t out_size = static_cast<size_t>(tokens * hidden);
  r.out.assign(out_size, 0.0);
  r.combine.assign(out_size, 0.0);
  r.down.assign(out_size, 0.0);
  std::vector<double> act(static_cast<size_t>(inter));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* xt = x.data() + t * hidden;
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t e = ids[static_cast<size_t>(t * top_k + j)];
      if (e < 0 || e >= experts) continue;
      const std::vector<float>& a = w13[static_cast<size_t>(e)];
      const std::vector<float>& b = w2[static_cast<size_t>(e)];
      REQUIRE(a.size() == static_cast<size_t>(2 * inter * hidden));
      REQUIRE(b.size() == static_cast<size_t>(hidden * inter));
      for (int64_t i = 0; i < inter; ++i) {
        const double gate = Dot(a.data() + i * hidden, xt, hidden);
        const double up = Dot(a.data() + (inter + i) * hidden, xt, hidden);
        act[static_cast<size_t>(i)] = Round(dtype, gate / (1.0 + std::exp(-gate)) * up);
      }
      const double w = weights[static_cast<size_t>(t * top_k + j)];
      for (int64_t h = 0; h < hidden; ++h) {
        double magnitude = 0;
        const double y = Round(dtype, Dot(act.data(), b.data() + h * inter, inter, &magnitude));
        const size_t o = static_cast<size_t>(t * hidden + h);
        r.out[o] += w * y;
        r.combine[o] += std::fabs(w * y);
        r.down[o] += std::fabs(w) * magnitude;
      }
    }
  }
  return r;
}

// ---- One layer on the device ----------------------------------------------------------------

struct Case {
  int64_t tokens, experts, top_k, hidden, inter;
  DType dtype = DType::kBFloat16;
  Ids ids = Ids::kRouter;
  int64_t x_pad = 0;    // extra elements per row of x (NaN)
  int64_t out_pad = 0;  // extra elements per row of a separate out
  // Experts no token chose hold NaN weights (no host copy). Off: every expert has weights (the
  // graph test routes anew).
  bool poison_unused = true;
};

std::string Describe(const Case& c) {
  return "T " + std::to_string(c.tokens) + " E " + std::to_string(c.experts) + " top_k " + std::to_string(c.top_k) +
         " H " + std::to_string(c.hidden) + " I " + std::to_string(c.inter) + " " + kiln::DTypeName(c.dtype) + " ids " +
         IdsName(c.ids) + " x pad " + std::to_string(c.x_pad) + " out pad " + std::to_string(c.out_pad);
}

// What a call left in out's buffer (or x's, in place): [T + 1 rows (a guard row), stride].
struct Result {
  std::vector<uint8_t> bytes;
  int64_t stride = 0;
};

class Layer {
 public:
  Layer(const Case& c, std::mt19937& rng) : c_(c) {
    const int64_t rows = std::max<int64_t>(c.tokens * c.top_k, 1);
    x_dev_ = std::make_unique<DeviceBuffer>(static_cast<size_t>((c.tokens + 1) * XStride() * 2));
    out_dev_ = std::make_unique<DeviceBuffer>(static_cast<size_t>((c.tokens + 1) * OutStride() * 2));
    ids_dev_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(rows * 4));
    weights_dev_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(rows * 4));
    workspace_bytes_ = kiln::ops::fused_moe_workspace_bytes(c.tokens, c.top_k, c.experts, c.hidden, c.inter);
    workspace_dev_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(workspace_bytes_));
    w13_dev_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(c.experts * 2 * c.inter * c.hidden * 2));
    w2_dev_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(c.experts * c.hidden * c.inter * 2));
    NewRouting(c.ids, rng);
    NewX(rng);
    // The weights: NaN, then the experts' values (those some token chose, or all). Scaled as a
    // model's (uniform in +-3 / sqrt(fan-in): gate, up and the output rows of order 1).
    w13_dev_->Poison();
    w2_dev_->Poison();
    w13_.resize(static_cast<size_t>(c.experts));
    w2_.resize(static_cast<size_t>(c.experts));
    std::vector<bool> used(static_cast<size_t>(c.experts), !c.poison_unused);
    for (int32_t e : ids_)
      if (e >= 0 && e < c.experts) used[static_cast<size_t>(e)] = true;
    std::mt19937_64 engine(rng());
    std::vector<uint16_t> bits;
    const float a13 = 3.0f / std::sqrt(static_cast<float>(c.hidden)),
                a2 = 3.0f / std::sqrt(static_cast<float>(c.inter));
    for (int64_t e = 0; e < c.experts; ++e) {
      if (!used[static_cast<size_t>(e)]) continue;
      const size_t n13 = static_cast<size_t>(2 * c.inter * c.hidden), n2 = static_cast<size_t>(c.hidden * c.inter);
      Uniform(c.dtype, n13, -a13, a13, engine, &bits, &w13_[static_cast<size_t>(e)]);
      KILN_CU(Cuda().cuMemcpyHtoD(DevicePtr(w13_dev_->data()) + e * n13 * 2, bits.data(), n13 * 2));
      Uniform(c.dtype, n2, -a2, a2, engine, &bits, &w2_[static_cast<size_t>(e)]);
      KILN_CU(Cuda().cuMemcpyHtoD(DevicePtr(w2_dev_->data()) + e * n2 * 2, bits.data(), n2 * 2));
    }
  }

  int64_t XStride() const { return c_.hidden + c_.x_pad; }
  int64_t OutStride() const { return c_.hidden + c_.out_pad; }
  const Case& spec() const { return c_; }

  // New ids and weights in the same buffers (every expert must have weights).
  void NewRouting(Ids kind, std::mt19937& rng) {
    REQUIRE((ids_.empty() || !c_.poison_unused));
    ids_ = MakeIds(kind, c_.tokens, c_.top_k, c_.experts, rng);
    weights_.resize(ids_.size());
    std::uniform_real_distribution<float> unit(0.05f, 1.0f);
    for (auto& w : weights_) w = unit(rng);
    if (!ids_.empty()) {
      ids_dev_->Upload(kiln::testing::Bytes(ids_.data(), ids_.size() * 4));
      weights_dev_->Upload(kiln::testing::Bytes(weights_.data(), weights_.size() * 4));
    }
    reference_.reset();
  }

  // A new x (uploaded by Prepare, before each call: a call in place overwrites it).
  void NewX(std::mt19937& rng) {
    std::mt19937_64 engine(rng());
    Uniform(c_.dtype, static_cast<size_t>(c_.tokens * c_.hidden), -1.0f, 1.0f, engine, &x_bits_, &x_);
    reference_.reset();
  }

  TensorView x() const { return TensorView::Strided(x_dev_->data(), c_.dtype, {c_.tokens, c_.hidden}, {XStride(), 1}); }
  TensorView out() const {
    return TensorView::Strided(out_dev_->data(), c_.dtype, {c_.tokens, c_.hidden}, {OutStride(), 1});
  }
  TensorView w13() const {
    return TensorView::Contiguous(w13_dev_->data(), c_.dtype, {c_.experts, 2 * c_.inter, c_.hidden});
  }
  TensorView w2() const { return TensorView::Contiguous(w2_dev_->data(), c_.dtype, {c_.experts, c_.hidden, c_.inter}); }
  TensorView ids() const { return TensorView::Contiguous(ids_dev_->data(), DType::kInt32, {c_.tokens, c_.top_k}); }
  TensorView weights() const {
    return TensorView::Contiguous(weights_dev_->data(), DType::kFloat32, {c_.tokens, c_.top_k});
  }
  TensorView workspace() const {
    return TensorView::Contiguous(workspace_dev_->data(), DType::kUInt8, {workspace_bytes_});
  }
  const DeviceBuffer& workspace_buffer() const { return *workspace_dev_; }

  // x's rows (their padding and the guard row after them NaN), out and (unless kept) the
  // workspace poisoned; complete on return (a launch on any stream sees it).
  void Prepare(bool keep_workspace = false) {
    std::vector<uint16_t> rows(static_cast<size_t>((c_.tokens + 1) * XStride()), 0xFFFF);
    for (int64_t t = 0; t < c_.tokens; ++t)
      std::copy_n(x_bits_.data() + t * c_.hidden, c_.hidden, rows.data() + t * XStride());
    x_dev_->Upload(kiln::testing::Bytes(rows.data(), rows.size() * 2));
    out_dev_->Poison();
    if (!keep_workspace) workspace_dev_->Poison();
  }

  // Prepares, calls the C++ API (out = x itself with `in_place`), and reads the output back.
  // `keep_workspace`: what the call before left there stays (its maps and rows).
  Result Run(bool in_place = false, void* stream = nullptr, bool keep_workspace = false) {
    Prepare(keep_workspace);
    const TensorView o = in_place ? x() : out(), xv = x(), a = w13(), b = w2(), i = ids(), w = weights(),
                     ws = workspace();
    const kiln::Status status = kiln::ops::fused_moe(o, xv, a, b, i, w, ws, stream);
    INFO(Describe(c_) << (in_place ? " in place: " : ": ") << status.ToString());
    REQUIRE(status.ok());
    if (stream != nullptr) KILN_CU(Cuda().cuStreamSynchronize(static_cast<CUstream>(stream)));
    return Read(in_place);
  }

  // The same through kiln_fused_moe.
  Result RunC() {
    Prepare();
    const TensorView o = out(), xv = x(), a = w13(), b = w2(), i = ids(), w = weights(), ws = workspace();
    DLTensor o_dl = kiln::testing::ToDLTensor(o), x_dl = kiln::testing::ToDLTensor(xv);
    DLTensor a_dl = kiln::testing::ToDLTensor(a), b_dl = kiln::testing::ToDLTensor(b);
    DLTensor i_dl = kiln::testing::ToDLTensor(i), w_dl = kiln::testing::ToDLTensor(w);
    DLTensor ws_dl = kiln::testing::ToDLTensor(ws);
    ws_dl.dtype = {kDLUInt, 8, 1};  // ToDLTensor knows the float and int32 types only
    const kiln_status status = kiln_fused_moe(&o_dl, &x_dl, &a_dl, &b_dl, &i_dl, &w_dl, &ws_dl, nullptr);
    INFO(Describe(c_) << ": " << kiln_last_error());
    REQUIRE(status == KILN_OK);
    return Read(false);
  }

  Result Read(bool in_place) const {
    KILN_CU(Cuda().cuCtxSynchronize());
    return {in_place ? x_dev_->Download() : out_dev_->Download(), in_place ? XStride() : OutStride()};
  }

  // The T x H elements of a result, dense: the bits compared across calls.
  std::vector<uint8_t> Rows(const Result& r) const {
    std::vector<uint8_t> rows(static_cast<size_t>(c_.tokens * c_.hidden * 2));
    for (int64_t t = 0; t < c_.tokens; ++t)
      std::memcpy(rows.data() + t * c_.hidden * 2, r.bytes.data() + t * r.stride * 2,
                  static_cast<size_t>(c_.hidden * 2));
    return rows;
  }

  const Reference& Want() {
    if (!reference_)
      reference_ = std::make_unique<Reference>(FusedMoeReference(c_.dtype, c_.tokens, c_.top_k, c_.experts, c_.hidden,
                                                                 c_.inter, x_, w13_, w2_, ids_, weights_));
    return *reference_;
  }

  // Every element of the result's T rows against the reference; the row padding and the guard
  // row poisoned.
  //
  // Tolerance. The op and the reference round at the same places, from fp32 and from float64:
  //  - the output's own rounding, up to u |want| (u = 2^-8 bf16, 2^-11 fp16, half an ulp);
  //  - an expert's output row that the two round to neighbouring values (their unrounded sums
  //    differ by the fp32 accumulation's error and lie on either side of a rounding boundary):
  //    one ulp, at most 2u |y_j| per choice, so 2u * `combine` (sum of |w_j y_j|) in all;
  //  - an activation element rounded to neighbouring values likewise (its fp32 value, from
  //    __expf and fp32 sums, and the float64 one straddle a boundary): 2u |w2[h, i] act_i| |w_j|
  //    of that term of the down GEMM. Which elements flip is not predictable, and one flip on a
  //    large term is already far more than the average term (the H200 run of 2026-12-03 saw one
  //    at T 1000, E 128, top-1, bf16: 0.002 on outputs of 0.005 with 2^-12 of `down` allowed),
  //    so the bound allows a flip on every term: 2u * `down` (the terms' magnitude, which also
  //    covers the fp32 accumulations' 2^-20 of it). That is about 2u * sqrt(I) |want| for random
  //    data: a few % in bf16, still far below the order-1 error of a wrong expert, row or weight.
  // So |got - want| <= rel |want| + rel * combine + (rel / 2) * down, with rel = ToleranceFor(dtype).rel
  // (1.6e-2 bf16, 2e-3 fp16: 4u, the allowance for one rounding that every op test uses; here
  // twice, for the output's rounding and for the rows'). gpu_grouped_gemm_test's absolute
  // 1.6e-2 becomes rel * combine: the outputs of order 1 get about that, and a token whose
  // choices were all dropped gets none (exact zeros). A wrong expert, row, weight or activation
  // is off by the order of |y| itself. (An fp32 emulation of the op's arithmetic, blocked sums
  // and all, stayed within 0.2 of this bound at every width here, Mixtral's included.)
  void Check(const Result& got) {
    const Reference& want = Want();
    const double rel = kiln::testing::ToleranceFor(c_.dtype).rel;
    std::vector<std::string> problems;
    auto expect = [&](bool ok, const auto& what) {
      if (!ok && problems.size() < 8) problems.push_back(what());
    };
    int64_t bad = 0;
    for (int64_t t = 0; t <= c_.tokens; ++t) {
      for (int64_t h = 0; h < got.stride; ++h) {
        const uint8_t* bits = got.bytes.data() + (t * got.stride + h) * 2;
        auto where = [&] { return "out[" + std::to_string(t) + ", " + std::to_string(h) + "]"; };
        if (t == c_.tokens || h >= c_.hidden) {
          expect(bits[0] == kPoison && bits[1] == kPoison,
                 [&] { return where() + (t == c_.tokens ? ": the guard row" : ": row padding") + " written"; });
          continue;
        }
        uint16_t b16;
        std::memcpy(&b16, bits, 2);
        const double value = FromBits(c_.dtype, b16);
        const size_t o = static_cast<size_t>(t * c_.hidden + h);
        const double w = want.out[o];
        const double bound = rel * std::fabs(w) + rel * want.combine[o] + 0.5 * rel * want.down[o];
        const bool ok = std::isfinite(value) && std::fabs(value - w) <= bound;
        bad += !ok;
        expect(ok, [&] {
          return where() + " = " + std::to_string(value) + ", want " + std::to_string(w) + " +- " +
                 std::to_string(bound);
        });
      }
    }
    std::string joined;
    for (const auto& p : problems) joined += "\n  " + p;
    INFO(Describe(c_) << ": " << bad << " elements off" << joined);
    CHECK(problems.empty());
  }

 private:
  Case c_;
  int64_t workspace_bytes_ = 0;
  std::vector<uint16_t> x_bits_;
  std::vector<float> x_;                      // [T, H]
  std::vector<std::vector<float>> w13_, w2_;  // per expert; empty for an expert with NaN weights
  std::vector<int32_t> ids_;                  // [T, top_k]
  std::vector<float> weights_;                // [T, top_k]
  std::unique_ptr<Reference> reference_;
  std::unique_ptr<DeviceBuffer> x_dev_, out_dev_, ids_dev_, weights_dev_, workspace_dev_, w13_dev_, w2_dev_;
};

Case Make(int64_t tokens, int64_t experts, int64_t top_k, int64_t hidden, int64_t inter, DType dtype = DType::kBFloat16,
          Ids ids = Ids::kRouter) {
  Case c{tokens, experts, top_k, hidden, inter};
  c.dtype = dtype;
  c.ids = ids;
  return c;
}

constexpr DType kBf16 = DType::kBFloat16;
constexpr DType kFp16 = DType::kFloat16;

using kiln::client::FusedMoePath;
using kiln::testing::CheckBothPaths;
using kiln::testing::kBothPaths;
using kiln::testing::PathName;
using kiln::testing::PathScope;

// Calls in its scope fold the decode path's combine into its down GEMV (on 1, off 0) with
// `groups` column groups a down block (0: the rule's for the device); the environment's choice
// and the rule again after it.
struct FoldScope {
  FoldScope(int on, int groups) {
    kiln::client::SetFusedMoeFoldedCombineForTesting(on);
    kiln::client::SetFusedMoeDownColumnGroupsForTesting(groups);
  }
  ~FoldScope() {
    kiln::client::SetFusedMoeFoldedCombineForTesting(-1);
    kiln::client::SetFusedMoeDownColumnGroupsForTesting(0);
  }
  FoldScope(const FoldScope&) = delete;
  FoldScope& operator=(const FoldScope&) = delete;
};

// The layer run again in plain stream order, then on the workspace as that call left it: `want`'s
// bits both times (the launches change, not the arithmetic; what a call leaves in the workspace
// does not matter to the next).
void CheckPlainOrderAndLeftWorkspace(Layer& layer, const std::vector<uint8_t>& want) {
  kiln::client::SetFusedMoeProgrammaticLaunchForTesting(0);
  const Result ordered = layer.Run();
  kiln::client::SetFusedMoeProgrammaticLaunchForTesting(-1);
  CHECK(layer.Rows(ordered) == want);
  const Result again = layer.Run(false, nullptr, /*keep_workspace=*/true);
  CHECK(layer.Rows(again) == want);
}

// Calls in its scope run the decode path's two GEMVs in one grid (on 1, off 0); the environment's
// choice again after it.
struct OneGridScope {
  explicit OneGridScope(int on) { kiln::client::SetFusedMoeOneGridForTesting(on); }
  ~OneGridScope() { kiln::client::SetFusedMoeOneGridForTesting(-1); }
  OneGridScope(const OneGridScope&) = delete;
  OneGridScope& operator=(const OneGridScope&) = delete;
};

TEST_CASE("fused_moe matches the float64 reference over tokens, experts, top_k and dtypes", "[gpu][moe][fused]") {
  kiln::testing::GpuSession session = kiln::testing::HopperSession();
  std::mt19937 rng(20261203);
  const int64_t experts[] = {8, 64, 128, 256};
  size_t n = 0;
  for (int64_t tokens : {1, 3, 64, 1000}) {
    for (int64_t top_k : {1, 2, 8}) {
      for (DType dtype : {kBf16, kFp16}) {
        Case c = Make(tokens, experts[n % 4], top_k, 256, 128, dtype);
        c.x_pad = n % 3 == 1 ? 8 : 0;
        c.out_pad = n % 5 == 2 ? 16 : 0;
        ++n;
        Layer layer(c, rng);
        CheckBothPaths(layer);
      }
    }
  }
  // Prefill at a small width: groups of hundreds of rows, many tiles each.
  Layer prefill(Make(4096, 128, 8, 128, 64, kBf16), rng);
  prefill.Check(prefill.Run());
}

TEST_CASE("fused_moe: empty experts, one expert for all, dropped ids, I no tile divides, padded rows, model widths",
          "[gpu][moe][fused]") {
  kiln::testing::GpuSession session = kiln::testing::HopperSession();
  std::mt19937 rng(16);
  std::vector<Case> cases = {
      Make(200, 64, 8, 256, 128, kBf16, Ids::kFewExperts),  // 8 + 1 of 64 experts; the first and last empty
      Make(333, 256, 8, 256, 128, kFp16, Ids::kFewExperts),
      Make(1000, 128, 1, 256, 128, kBf16, Ids::kOneExpert),  // one group of 1000 rows, 127 empty
      Make(300, 8, 8, 256, 128, kFp16, Ids::kOneExpert),     // top_k = E: every token on every expert
      Make(333, 256, 8, 256, 128, kBf16, Ids::kDropped),
      Make(64, 8, 2, 256, 128, kFp16, Ids::kDropped),
      Make(100, 8, 2, 136, 200, kBf16),  // I = 200: the last tile's half runs into the up rows
      Make(100, 8, 2, 136, 200, kFp16),
      Make(300, 64, 8, 136, 200, kBf16, Ids::kDropped),
      Make(1, 8, 2, 4096, 14336, kBf16),  // Mixtral-8x7B at decode: 6 experts NaN
      Make(1, 128, 8, 2048, 768, kBf16),  // Qwen3-30B-A3B at decode: 120 experts NaN
  };
  cases[1].x_pad = 24;  // x rows 280 elements apart, the padding NaN
  cases[5].out_pad = 8;
  cases[7].x_pad = 8;
  cases[7].out_pad = 24;
  for (const Case& c : cases) {
    Layer layer(c, rng);
    CheckBothPaths(layer);
  }
}

TEST_CASE("fused_moe's decode path: many passes over one expert, 1024 slots, a misaligned x, model widths",
          "[gpu][moe][fused]") {
  kiln::testing::GpuSession session = kiln::testing::HopperSession();
  std::mt19937 rng(1204);
  std::vector<Case> cases = {
      Make(64, 8, 1, 256, 128, kBf16, Ids::kOneExpert),   // 64 slots on one expert: 16 passes of 4
      Make(7, 8, 8, 256, 128, kFp16, Ids::kOneExpert),    // top_k = E, 7 slots each: passes of 4 and 3
      Make(6, 64, 2, 136, 200, kBf16, Ids::kFewExperts),  // passes of 2 and 1; I and H no block divides
      Make(128, 256, 8, 256, 128, kBf16),                 // 1024 slots: the most the decode path takes
      Make(129, 256, 8, 256, 128, kFp16),                 // 1032: the grouped path, asked for the GEMVs
      Make(5, 64, 8, 256, 128, kBf16, Ids::kDropped),     // dropped ids, a token with none
      Make(8, 128, 8, 2048, 768, kBf16),                  // Qwen3-30B-A3B at 8 tokens
      Make(3, 256, 8, 7168, 2048, kBf16),                 // DeepSeek-V3's routed experts at 3 tokens
  };
  Case misaligned = Make(3, 8, 2, 256, 128, kBf16);
  misaligned.x_pad = 4;  // rows 520 bytes apart: not 16-byte loads, so the grouped path
  cases.push_back(misaligned);
  for (const Case& c : cases) {
    Layer layer(c, rng);
    const PathScope scope(FusedMoePath::kGemv);
    const Result programmatic = layer.Run();
    layer.Check(programmatic);
    // In plain stream order: the same bits (the launches change, not the arithmetic).
    kiln::client::SetFusedMoeProgrammaticLaunchForTesting(0);
    const Result ordered = layer.Run();
    kiln::client::SetFusedMoeProgrammaticLaunchForTesting(-1);
    INFO(Describe(c));
    CHECK(layer.Rows(programmatic) == layer.Rows(ordered));
  }
}

TEST_CASE("fused_moe's folded combine gives the separate combine's bits: every column grouping, in plain stream "
          "order, in place, after a call that left its counters",
          "[gpu][moe][fused]") {
  kiln::testing::GpuSession session = kiln::testing::HopperSession();
  std::mt19937 rng(1205);
  Case padded = Make(7, 64, 2, 256, 128, kFp16);
  padded.out_pad = 8;  // out rows 528 bytes apart: still 16-byte stores
  padded.x_pad = 8;
  std::vector<Case> cases = {
      Make(1, 128, 8, 2048, 768),                         // Qwen3-30B-A3B at one token: two groups by the rule
      Make(3, 32, 8, 7168, 256),                          // DeepSeek-V3's H: 224 column blocks
      Make(6, 64, 2, 136, 200, kBf16, Ids::kFewExperts),  // H 136: 5 column blocks, the last one partial
      Make(5, 64, 8, 256, 128, kBf16, Ids::kDropped),     // dropped ids, a token with none (zeros)
      Make(64, 8, 1, 256, 128, kBf16, Ids::kOneExpert),   // many passes over one expert
      Make(128, 256, 8, 256, 128, kFp16),                 // 1024 slots: 128 tokens combined by one block a column
      padded,
  };
  const PathScope scope(FusedMoePath::kGemv);
  for (const Case& c : cases) {
    Layer layer(c, rng);
    INFO(Describe(c));
    const Result separate = layer.Run();
    layer.Check(separate);
    const std::vector<uint8_t> want = layer.Rows(separate);
    for (int groups : {0, 1, 2}) {
      const FoldScope fold(1, groups);
      INFO("folded, column groups " << groups << " (0: the rule's)");
      const Result folded = layer.Run();
      layer.Check(folded);  // also: the padding and the guard row stay poisoned
      CHECK(layer.Rows(folded) == want);
      // The second run: every counter at its grid's height, zeroed again.
      CheckPlainOrderAndLeftWorkspace(layer, want);
    }
    const FoldScope fold(1, 0);
    const Result in_place = layer.Run(/*in_place=*/true);
    layer.Check(in_place);
    CHECK(layer.Rows(in_place) == want);
  }
}

TEST_CASE("fused_moe's one-grid form gives the two GEMV launches' bits: model widths, in plain stream order, in "
          "place, after a call that left its counters, with the fold asked for too",
          "[gpu][moe][fused]") {
  kiln::testing::GpuSession session = kiln::testing::HopperSession();
  std::mt19937 rng(1207);
  Case padded = Make(7, 64, 2, 256, 128, kFp16);
  padded.out_pad = 8;
  padded.x_pad = 8;
  std::vector<Case> cases = {
      Make(1, 128, 8, 2048, 768),                         // Qwen3-30B-A3B at one token: 8 x (48 + 64) tickets
      Make(8, 128, 8, 2048, 768),                         // Qwen3-30B-A3B at 8 tokens
      Make(1, 8, 2, 4096, 14336),                         // Mixtral-8x7B at one token: 2 x (896 + 128)
      Make(3, 32, 8, 7168, 256),                          // DeepSeek-V3's H: 224 down blocks an expert
      Make(6, 64, 2, 136, 200, kBf16, Ids::kFewExperts),  // I 200, H 136: partial column blocks of both
      Make(5, 64, 8, 256, 128, kBf16, Ids::kDropped),     // dropped ids, a token with none (zeros)
      Make(64, 8, 1, 256, 128, kBf16, Ids::kOneExpert),   // one expert, 64 slots: 32 passes, 7 ranks without one
      Make(128, 256, 8, 256, 128, kFp16),                 // 1024 slots
      padded,
  };
  const PathScope scope(FusedMoePath::kGemv);
  for (const Case& c : cases) {
    Layer layer(c, rng);
    INFO(Describe(c));
    const OneGridScope two_launches(0);
    const Result separate = layer.Run();
    layer.Check(separate);
    const std::vector<uint8_t> want = layer.Rows(separate);
    {
      const OneGridScope one_grid(1);
      // Each expert's down blocks right after its gate-up blocks (0, the default), one expert
      // later, and after every gate-up block (256: capped at the chosen experts).
      for (int lag : {0, 1, 256}) {
        kiln::client::SetFusedMoeOneGridLagForTesting(lag);
        INFO("down lag " << lag);
        const Result merged = layer.Run();  // on a poisoned workspace: the counters hold NaN bits
        layer.Check(merged);                // also: the padding and the guard row stay poisoned
        CHECK(layer.Rows(merged) == want);
      }
      kiln::client::SetFusedMoeOneGridLagForTesting(0);
      // The second run: the ticket at the grid's size and every count full, zeroed again.
      CheckPlainOrderAndLeftWorkspace(layer, want);
      const FoldScope fold(1, 0);  // the one grid takes precedence over the fold
      const Result with_fold = layer.Run();
      CHECK(layer.Rows(with_fold) == want);
      const Result in_place = layer.Run(/*in_place=*/true);
      layer.Check(in_place);
      CHECK(layer.Rows(in_place) == want);
    }
  }
}

TEST_CASE("fused_moe's grouped path gathers x's rows in its gate-and-up GEMM or copies them in the permutation, "
          "with the same bits",
          "[gpu][moe][fused]") {
  kiln::testing::GpuSession session = kiln::testing::HopperSession();
  std::mt19937 rng(1207);
  const PathScope scope(FusedMoePath::kGrouped);
  std::vector<Case> cases = {
      Make(1000, 64, 8, 256, 128, kBf16),
      Make(333, 256, 8, 256, 128, kFp16, Ids::kDropped),  // dropped ids: row_to_slot -1 past the groups
      Make(300, 8, 8, 256, 128, kBf16, Ids::kOneExpert),  // one group of every row
      Make(100, 8, 2, 136, 200, kBf16),                   // H 136: a stage past K's end
      Make(64, 8, 2, 256, 128, kFp16),
  };
  cases[4].x_pad = 24;  // x rows 560 bytes apart: still 16-byte copies
  for (const Case& c : cases) {
    Layer layer(c, rng);
    Result results[2];
    for (int gather : {1, 0}) {
      kiln::client::SetFusedMoeGatherXForTesting(gather);
      INFO(Describe(c) << (gather ? ": x gathered by the GEMM" : ": x copied by the permutation"));
      results[gather] = layer.Run();
      layer.Check(results[gather]);
    }
    kiln::client::SetFusedMoeGatherXForTesting(-1);
    INFO(Describe(c));
    CHECK(layer.Rows(results[1]) == layer.Rows(results[0]));
  }
}

TEST_CASE("fused_moe in place (out == x) gives the same bits as into a separate out", "[gpu][moe][fused]") {
  kiln::testing::GpuSession session = kiln::testing::HopperSession();
  std::mt19937 rng(5);
  Case padded = Make(64, 8, 2, 256, 128, kBf16);
  padded.x_pad = 8;  // in place on padded rows: the padding stays NaN
  for (const Case& c : {padded, Make(1000, 128, 8, 256, 128, kFp16, Ids::kDropped), Make(3, 256, 8, 136, 200)}) {
    Layer layer(c, rng);
    const Result separate = layer.Run();
    layer.Check(separate);
    const Result in_place = layer.Run(/*in_place=*/true);
    layer.Check(in_place);
    INFO(Describe(c));
    CHECK(layer.Rows(separate) == layer.Rows(in_place));
  }
}

TEST_CASE("fused_moe is deterministic: two calls, a second stream and the C ABI give the same bits",
          "[gpu][moe][fused]") {
  kiln::testing::GpuSession session = kiln::testing::HopperSession();
  std::mt19937 rng(3);
  CUstream stream = nullptr;
  KILN_CU(Cuda().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  Case padded = Make(64, 8, 2, 256, 128, kFp16, Ids::kDropped);
  padded.x_pad = 8;
  padded.out_pad = 8;
  for (FusedMoePath path : kBothPaths) {
    const PathScope scope(path);
    for (const Case& c : {Make(1000, 256, 8, 256, 128, kBf16), padded, Make(3, 128, 8, 256, 128, kBf16)}) {
      Layer layer(c, rng);
      const Result a = layer.Run();
      layer.Check(a);
      const Result again = layer.Run();
      const Result on_stream = layer.Run(false, stream);
      const Result from_c = layer.RunC();
      INFO(Describe(c) << ", " << PathName(path));
      CHECK(a.bytes == again.bytes);
      CHECK(a.bytes == on_stream.bytes);
      CHECK(a.bytes == from_c.bytes);
    }
  }
  KILN_CU(Cuda().cuStreamDestroy(stream));
}

TEST_CASE("fused_moe with every choice dropped writes zeros, right after a call with real choices",
          "[gpu][moe][fused]") {
  kiln::testing::GpuSession session = kiln::testing::HopperSession();
  std::mt19937 rng(404);
  for (const auto& [path, fold] :
       {std::pair{FusedMoePath::kGemv, 0}, {FusedMoePath::kGemv, 1}, {FusedMoePath::kGrouped, 0}}) {
    const PathScope scope(path);
    const FoldScope folding(fold, 0);
    Case c = Make(4, 64, 8, 256, 128);
    c.poison_unused = false;  // the routing changes
    Layer layer(c, rng);
    layer.Check(layer.Run());  // real maps and expert rows in the workspace
    layer.NewRouting(Ids::kAllDropped, rng);
    INFO(PathName(path) << (fold ? ", folded" : ""));
    // The combine must read this call's map (all rows -1), not the last call's: on the decode
    // path the down GEMV, whose blocks all lack work, still waits for the gate-up GEMV that
    // writes it before it completes.
    layer.Check(layer.Run(false, nullptr, /*keep_workspace=*/true));
  }
}

// One capture of a call, replayed on new ids and x, each replay checked.
void ReplayInGraph();

TEST_CASE("fused_moe replays in a CUDA graph on new ids and new x", "[gpu][moe][fused]") {
  kiln::testing::GpuSession session = kiln::testing::HopperSession();
  struct Form {
    FusedMoePath path;
    int fold, one_grid;
  };
  for (const Form form : {Form{FusedMoePath::kGemv, 0, 0},
                          {FusedMoePath::kGemv, 1, 0},
                          {FusedMoePath::kGemv, 0, 1},
                          {FusedMoePath::kGrouped, 0, 0}}) {
    const PathScope scope(form.path);
    const FoldScope folding(form.fold, 0);
    const OneGridScope one_grid(form.one_grid);
    INFO(PathName(form.path) << (form.fold ? ", folded" : "") << (form.one_grid ? ", one grid" : ""));
    ReplayInGraph();
  }
}

void ReplayInGraph() {
  std::mt19937 rng(11);
  Case c = Make(64, 128, 8, 256, 128, kBf16);
  c.poison_unused = false;  // every expert has weights: the routing changes
  c.x_pad = 8;
  Layer layer(c, rng);
  layer.Check(layer.Run());  // loads the kernels outside the capture
  const TensorView o = layer.out(), x = layer.x(), a = layer.w13(), b = layer.w2(), i = layer.ids(),
                   w = layer.weights(), ws = layer.workspace();
  const kiln::testing::CapturedCall graph(
      [&](CUstream stream) { return kiln::ops::fused_moe(o, x, a, b, i, w, ws, stream); });
  INFO(graph.status().ToString());
  REQUIRE(graph.status().ok());
  kiln::testing::ReplayOnEveryRouting(layer, graph, rng);  // other routings, other groups
}

TEST_CASE("fused_moe with no tokens launches nothing and writes nothing", "[gpu][moe][fused]") {
  kiln::testing::GpuSession session = kiln::testing::HopperSession();
  std::mt19937 rng(0);
  Layer none(Make(0, 8, 2, 256, 128), rng);
  none.Prepare();
  const TensorView o = none.out(), x = none.x(), a = none.w13(), b = none.w2(), i = none.ids(), w = none.weights(),
                   ws = none.workspace();
  const kiln::ClientStats s0 = kiln::GetClientStats();
  const kiln::Status status = kiln::ops::fused_moe(o, x, a, b, i, w, ws);
  INFO(status.ToString());
  REQUIRE(status.ok());
  DLTensor o_dl = kiln::testing::ToDLTensor(o), x_dl = kiln::testing::ToDLTensor(x);
  DLTensor a_dl = kiln::testing::ToDLTensor(a), b_dl = kiln::testing::ToDLTensor(b);
  DLTensor i_dl = kiln::testing::ToDLTensor(i), w_dl = kiln::testing::ToDLTensor(w);
  DLTensor ws_dl = kiln::testing::ToDLTensor(ws);
  ws_dl.dtype = {kDLUInt, 8, 1};
  const kiln_status c_status = kiln_fused_moe(&o_dl, &x_dl, &a_dl, &b_dl, &i_dl, &w_dl, &ws_dl, nullptr);
  INFO(kiln_last_error());
  CHECK(c_status == KILN_OK);
  const kiln::ClientStats s1 = kiln::GetClientStats();
  // No step prepared a launch (each launch of an op asks the launch cache first).
  CHECK(s1.op_fast_hits == s0.op_fast_hits);
  CHECK(s1.op_fast_misses == s0.op_fast_misses);
  CHECK(kiln::testing::KernelFetches(s1) == kiln::testing::KernelFetches(s0));
  const Result out = none.Read(false);
  CHECK(std::all_of(out.bytes.begin(), out.bytes.end(), [](uint8_t v) { return v == kPoison; }));
  const std::vector<uint8_t> scratch = none.workspace_buffer().Download();
  CHECK(std::all_of(scratch.begin(), scratch.end(), [](uint8_t v) { return v == kPoison; }));
  // A token does launch (the counters see this op's steps).
  Layer one(Make(1, 8, 2, 256, 128), rng);
  one.Check(one.Run());
  const kiln::ClientStats s2 = kiln::GetClientStats();
  CHECK(s2.op_fast_hits + s2.op_fast_misses > s1.op_fast_hits + s1.op_fast_misses);
}

TEST_CASE("fused_moe refuses what it cannot run through the real path", "[gpu][moe][fused]") {
  kiln::testing::GpuSession session = kiln::testing::HopperSession();
  std::mt19937 rng(1);
  Layer layer(Make(7, 8, 2, 64, 128), rng);
  auto require_invalid = [](const kiln::Status& status, const std::string& fragment) {
    INFO(status.ToString());
    REQUIRE(status.code() == kiln::StatusCode::kInvalidArgument);
    CHECK(status.message().find(fragment) != std::string::npos);
  };
  const TensorView o = layer.out(), x = layer.x(), a = layer.w13(), b = layer.w2(), i = layer.ids(),
                   w = layer.weights(), ws = layer.workspace();
  const TensorView small = TensorView::Contiguous(ws.data, DType::kUInt8, {ws.shape[0] - 256});
  require_invalid(kiln::ops::fused_moe(o, x, a, b, i, w, small),
                  "kiln::ops::fused_moe: workspace: expected at least fused_moe_workspace_bytes(T 7, top_k 2, E 8, H "
                  "64, I 128) = 6656 bytes, found [6400]");
  const TensorView shifted = TensorView::Contiguous(static_cast<char*>(x.data) + 128, x.dtype, {7, 64});
  require_invalid(kiln::ops::fused_moe(shifted, x, a, b, i, w, ws), "out and x overlap in memory");
  const TensorView nine = TensorView::Contiguous(i.data, DType::kInt32, {7, 9});
  const TensorView nine_w = TensorView::Contiguous(w.data, DType::kFloat32, {7, 9});
  require_invalid(kiln::ops::fused_moe(o, x, a, b, nine, nine_w, ws),
                  "topk_ids: top_k (dim 1) must be 1 to min(E, 16) = 8, found [7, 9]");
  const TensorView inside = TensorView::Contiguous(ws.data, DType::kBFloat16, {7, 64});
  require_invalid(kiln::ops::fused_moe(inside, x, a, b, i, w, ws), "workspace and out overlap in memory");
  const TensorView fp16_w13 = TensorView::Contiguous(a.data, DType::kFloat16, {8, 256, 64});
  require_invalid(kiln::ops::fused_moe(o, x, fp16_w13, b, i, w, ws), "w13: expected dtype bf16, found fp16");
}

}  // namespace
