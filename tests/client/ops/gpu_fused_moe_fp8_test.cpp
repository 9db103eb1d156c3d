// [gpu][moe][fused][fp8] fused_moe_fp8 (kiln/ops/moe.h), a whole expert layer on block-scaled fp8
// experts, on a real sm_90a GPU (HopperSession, skipped visibly elsewhere) and daemon.
//
// Each step is checked against float64 from the inputs it had, then the layer end to end:
//  - the activations: the act_q rows and act_scales the call leaves in its workspace (after the
//    regions the down GEMM writes over) against FusedMoeFp8Reference's, which quantizes x and
//    silu(gate) * up as the kernels do (fp32 scale = max(amax, 1e-10) / 448, an IEEE division,
//    e4m3 round to nearest even); gate and up are float64 products of the dequantized operands
//    rounded to bf16 where the w13 GEMM stores them. The two sides' gate and up differ by the fp8
//    GEMM's in-block sums (about 14 bits: up to 3e-4 of the terms' magnitude measured) and a bf16
//    ulp, so each activation and scale is checked within what that moves it by (plus one e4m3
//    step), and at most 1 code in 20 may differ (0.6-1.1 % measured on an H100, on both paths);
//  - the experts' rows (expert_out in the workspace) against float64 products of the device's own
//    act_q and the dequantized w2, within bf16's rounding and the GEMM's error;
//  - out against the combine of the device's own expert rows (fp32 sums in the order of j);
//  - out against the float64 layer, allowing what the activations' allowances move it by.
// Grid: T 1, 3, 64, 1000 over E 8, 64, 128, 256 and top_k 1, 2, 8; H 272 and I 208 (scale
// groups of 16 and 80 columns, a w13 block across the gate and up rows); few experts chosen (the
// others' weights and scales NaN), one expert for all, dropped ids, padded x and out rows;
// random scales over 2^-3..2^3 per block (a block's scale misplaced is an order-1 error).
// Every case runs on both paths (SetFusedMoePathForTesting: the decode path's GEMVs where it takes
// the call, then the grouped GEMMs); the decode path leaves the same regions by slot, so the same
// step checks apply (its gate and up come from fp8 MMAs promoted every 128 columns, as the GEMM's).
// Where I is a multiple of 128 (128, 384 below) the grouped path's gate-and-up GEMM quantizes
// silu(gate) * up in its epilogue, from the bf16 roundings of its accumulators as the separate
// silu-and-quantize reads them: its own test case runs those layers both ways
// (KILN_FUSED_MOE_FP8_SILU_EPILOGUE=0) and wants the same bits.
// Also: in place, two calls, the C ABI and a CUDA graph on new routings give the same bits (or
// check against the reference); T = 0 launches nothing; refusals through the real path.
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
#include "client/ops/moe/fused_moe_fp8_plan.h"
#include "kiln/kiln.h"
#include "kiln/ops/moe.h"
#include "tests/client/ops/fused_moe_test_paths.h"
#include "tests/client/ops/moe_test_routing.h"
#include "tests/support/gpu_harness.h"

namespace {

using kiln::DType;
using kiln::TensorView;
using kiln::client::BFloat16ToFloat;
using kiln::client::FloatToBFloat16;
using kiln::client::FloatToFp8E4M3;
using kiln::client::Fp8E4M3ToFloat;
using kiln::testing::DeviceBuffer;
using kiln::testing::Ids;
using kiln::testing::IdsName;
using kiln::testing::MakeIds;

const kiln::client::CudaDriver& Cuda() { return kiln::testing::Driver(); }

int64_t Blocks(int64_t n) { return (n + 127) / 128; }
double RoundBf16(double v) { return BFloat16ToFloat(FloatToBFloat16(static_cast<float>(v))); }

// One row quantized as the kernels quantize it: per 128 columns, scale = max(amax, 1e-10) / 448 in
// fp32, code = e4m3(v / scale).
void Quantize(const float* v, int64_t n, uint8_t* codes, float* scales) {
  for (int64_t g = 0; g < Blocks(n); ++g) {
    const int64_t end = std::min<int64_t>(n, (g + 1) * 128);
    float amax = 0.f;
    for (int64_t c = g * 128; c < end; ++c) amax = std::max(amax, std::fabs(v[c]));
    const float scale = std::max(amax, 1e-10f) / 448.0f;
    scales[g] = scale;
    for (int64_t c = g * 128; c < end; ++c) codes[c] = FloatToFp8E4M3(v[c] / scale);
  }
}

// ---- The experts: e4m3 codes and a scale per 128 x 128 block ----------------------------------

struct Expert {
  std::vector<uint8_t> w13, w2;     // [2I, H], [H, I] codes
  std::vector<float> w13_s, w2_s;   // [ceil(2I/128), ceil(H/128)], [ceil(H/128), ceil(I/128)]
  std::vector<double> w13_d, w2_d;  // dequantized, float64
};

void RandomWeight(int64_t rows, int64_t cols, float base, std::mt19937_64& engine, std::vector<uint8_t>* codes,
                  std::vector<float>* scales, std::vector<double>* dequantized) {
  codes->resize(static_cast<size_t>(rows * cols));
  scales->resize(static_cast<size_t>(Blocks(rows) * Blocks(cols)));
  dequantized->resize(codes->size());
  std::uniform_real_distribution<float> unit(-1.f, 1.f), octaves(-3.f, 3.f);
  for (auto& s : *scales) s = base * std::exp2(octaves(engine));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      (*codes)[i] = FloatToFp8E4M3(unit(engine));
      (*dequantized)[i] = static_cast<double>(Fp8E4M3ToFloat((*codes)[i])) *
                          (*scales)[static_cast<size_t>((r / 128) * Blocks(cols) + c / 128)];
    }
}

// ---- The float64 reference of the layer, with the quantizations as the kernels do them ---------

// How far the op's gate and up may be from the reference's: fp8_gemm's in-block sums (the tensor
// cores add e4m3 products with about 14 bits: measured up to 3e-4 of the terms' magnitude here) and
// bf16's rounding of each side (one ulp apart: 2^-7 relative at most).
constexpr double kGemmError = 1.0 / 2048;
double ProductAllowance(double value, double magnitude) { return magnitude * kGemmError + std::fabs(value) / 128; }

struct SlotReference {
  std::vector<uint8_t> act_q;       // [I]
  std::vector<float> act_s;         // [ceil(I/128)]
  std::vector<double> act_allow;    // [I]: how far the op's dequantized activation may be from the reference's
  std::vector<double> scale_allow;  // [ceil(I/128)]: how far its scale may be
  std::vector<double> y;            // [H], rounded to bf16
};

// Slot (t, j) of expert e: q(x) . w13 (rounded to bf16), silu(gate) * up in fp32, its codes and
// scales, then y = q(act) . w2 rounded to bf16. The allowances: gate and up each within
// ProductAllowance of the reference's move act = silu(g) u by at most P = 1.1 dg (|u| + du) +
// (|silu(g)| + 1.1 dg) du (|silu'| <= 1.1); two activations P apart quantize at most P plus one
// e4m3 step apart (2^-3 of the value, or 2^-9 of the scale below the normals), and a group's
// scales (its amax / 448) at most its largest P / 448 apart.
SlotReference FusedMoeFp8Reference(const float* x, const Expert& ex, int64_t hidden, int64_t inter) {
  std::vector<uint8_t> xq(static_cast<size_t>(hidden));
  std::vector<float> xs(static_cast<size_t>(Blocks(hidden)));
  Quantize(x, hidden, xq.data(), xs.data());
  std::vector<double> xd(static_cast<size_t>(hidden));
  for (int64_t c = 0; c < hidden; ++c)
    xd[static_cast<size_t>(c)] = static_cast<double>(Fp8E4M3ToFloat(xq[static_cast<size_t>(c)])) * xs[c / 128];
  auto dot = [](const double* a, const double* b, int64_t n, double* magnitude) {
    double s = 0, m = 0;
    for (int64_t i = 0; i < n; ++i) {
      s += a[i] * b[i];
      m += std::fabs(a[i] * b[i]);
    }
    *magnitude = m;
    return s;
  };
  std::vector<float> act(static_cast<size_t>(inter));
  std::vector<double> moved(static_cast<size_t>(inter));
  for (int64_t i = 0; i < inter; ++i) {
    double mg = 0, mu = 0;
    const double gate = RoundBf16(dot(ex.w13_d.data() + i * hidden, xd.data(), hidden, &mg));
    const double up = RoundBf16(dot(ex.w13_d.data() + (inter + i) * hidden, xd.data(), hidden, &mu));
    const double silu = gate / (1.0 + std::exp(-gate));
    act[static_cast<size_t>(i)] = static_cast<float>(silu * up);
    const double dg = ProductAllowance(gate, mg), du = ProductAllowance(up, mu);
    moved[static_cast<size_t>(i)] = 1.1 * dg * (std::fabs(up) + du) + (std::fabs(silu) + 1.1 * dg) * du;
  }
  SlotReference r;
  r.act_q.resize(static_cast<size_t>(inter));
  r.act_s.resize(static_cast<size_t>(Blocks(inter)));
  Quantize(act.data(), inter, r.act_q.data(), r.act_s.data());
  r.act_allow.resize(static_cast<size_t>(inter));
  r.scale_allow.assign(static_cast<size_t>(Blocks(inter)), 0.0);
  for (int64_t i = 0; i < inter; ++i) {
    const double p = moved[static_cast<size_t>(i)];
    double& g = r.scale_allow[static_cast<size_t>(i / 128)];
    g = std::max(g, p / 448.0);
  }
  for (int64_t i = 0; i < inter; ++i) {
    const double scale = r.act_s[i / 128] + r.scale_allow[static_cast<size_t>(i / 128)];
    const double p = moved[static_cast<size_t>(i)];
    r.act_allow[static_cast<size_t>(i)] = p + (std::fabs(act[static_cast<size_t>(i)]) + p) / 8 + scale / 512 +
                                          1e-6 * r.act_s[i / 128];
  }
  r.y.resize(static_cast<size_t>(hidden));
  std::vector<double> ad(static_cast<size_t>(inter));
  for (int64_t i = 0; i < inter; ++i)
    ad[static_cast<size_t>(i)] = static_cast<double>(Fp8E4M3ToFloat(r.act_q[static_cast<size_t>(i)])) *
                                 r.act_s[i / 128];
  double unused = 0;
  for (int64_t h = 0; h < hidden; ++h)
    r.y[static_cast<size_t>(h)] = RoundBf16(dot(ex.w2_d.data() + h * inter, ad.data(), inter, &unused));
  return r;
}

// ---- One layer on the device -------------------------------------------------------------------

struct Case {
  int64_t tokens, experts, top_k, hidden, inter;
  Ids ids = Ids::kRouter;
  int64_t x_pad = 0, out_pad = 0;
  bool poison_unused = true;  // experts no token chose: NaN weights and scales
};

std::string Describe(const Case& c) {
  return "T " + std::to_string(c.tokens) + " E " + std::to_string(c.experts) + " top_k " + std::to_string(c.top_k) +
         " H " + std::to_string(c.hidden) + " I " + std::to_string(c.inter) + " ids " + IdsName(c.ids) + " x pad " +
         std::to_string(c.x_pad) + " out pad " + std::to_string(c.out_pad);
}

class Layer {
 public:
  Layer(const Case& c, std::mt19937& rng) : c_(c) {
    const int64_t rows = std::max<int64_t>(c.tokens * c.top_k, 1);
    x_dev_ = std::make_unique<DeviceBuffer>(static_cast<size_t>((c.tokens + 1) * XStride() * 2));
    out_dev_ = std::make_unique<DeviceBuffer>(static_cast<size_t>((c.tokens + 1) * OutStride() * 2));
    ids_dev_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(rows * 4));
    weights_dev_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(rows * 4));
    workspace_bytes_ = kiln::ops::fused_moe_fp8_workspace_bytes(c.tokens, c.top_k, c.experts, c.hidden, c.inter);
    workspace_dev_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(workspace_bytes_));
    const int64_t n13 = 2 * c.inter * c.hidden, n2 = c.hidden * c.inter;
    const int64_t s13 = Blocks(2 * c.inter) * Blocks(c.hidden), s2 = Blocks(c.hidden) * Blocks(c.inter);
    w13_dev_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(c.experts * n13));
    w2_dev_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(c.experts * n2));
    w13_s_dev_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(c.experts * s13 * 4));
    w2_s_dev_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(c.experts * s2 * 4));
    NewRouting(c.ids, rng);
    NewX(rng);
    for (DeviceBuffer* b : {w13_dev_.get(), w2_dev_.get(), w13_s_dev_.get(), w2_s_dev_.get()}) b->Poison();
    experts_.resize(static_cast<size_t>(c.experts));
    std::vector<bool> used(static_cast<size_t>(c.experts), !c.poison_unused);
    for (int32_t e : ids_)
      if (e >= 0 && e < c.experts) used[static_cast<size_t>(e)] = true;
    std::mt19937_64 engine(rng());
    for (int64_t e = 0; e < c.experts; ++e) {
      if (!used[static_cast<size_t>(e)]) continue;
      Expert& ex = experts_[static_cast<size_t>(e)];
      // Gate, up and the output rows of order 1: codes of order 1 times 3 / sqrt(fan-in) on average.
      RandomWeight(2 * c.inter, c.hidden, 1.7f / std::sqrt(static_cast<float>(c.hidden)), engine, &ex.w13, &ex.w13_s,
                   &ex.w13_d);
      RandomWeight(c.hidden, c.inter, 1.7f / std::sqrt(static_cast<float>(c.inter)), engine, &ex.w2, &ex.w2_s,
                   &ex.w2_d);
      KILN_CU(Cuda().cuMemcpyHtoD(Ptr(w13_dev_) + e * n13, ex.w13.data(), static_cast<size_t>(n13)));
      KILN_CU(Cuda().cuMemcpyHtoD(Ptr(w2_dev_) + e * n2, ex.w2.data(), static_cast<size_t>(n2)));
      KILN_CU(Cuda().cuMemcpyHtoD(Ptr(w13_s_dev_) + e * s13 * 4, ex.w13_s.data(), static_cast<size_t>(s13 * 4)));
      KILN_CU(Cuda().cuMemcpyHtoD(Ptr(w2_s_dev_) + e * s2 * 4, ex.w2_s.data(), static_cast<size_t>(s2 * 4)));
    }
  }

  static CUdeviceptr Ptr(const std::unique_ptr<DeviceBuffer>& b) { return reinterpret_cast<CUdeviceptr>(b->data()); }
  int64_t XStride() const { return c_.hidden + c_.x_pad; }
  int64_t OutStride() const { return c_.hidden + c_.out_pad; }

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
    slots_.clear();
  }

  void NewX(std::mt19937& rng) {
    std::uniform_real_distribution<float> unit(-1.f, 1.f);
    x_bits_.resize(static_cast<size_t>(c_.tokens * c_.hidden));
    x_.resize(x_bits_.size());
    for (size_t i = 0; i < x_.size(); ++i) {
      x_bits_[i] = FloatToBFloat16(unit(rng));
      x_[i] = BFloat16ToFloat(x_bits_[i]);
    }
    slots_.clear();
  }

  TensorView x() const {
    return TensorView::Strided(x_dev_->data(), DType::kBFloat16, {c_.tokens, c_.hidden}, {XStride(), 1});
  }
  TensorView out() const {
    return TensorView::Strided(out_dev_->data(), DType::kBFloat16, {c_.tokens, c_.hidden}, {OutStride(), 1});
  }
  TensorView w13() const {
    return TensorView::Contiguous(w13_dev_->data(), DType::kFloat8E4M3, {c_.experts, 2 * c_.inter, c_.hidden});
  }
  TensorView w13_scales() const {
    return TensorView::Contiguous(w13_s_dev_->data(), DType::kFloat32,
                                  {c_.experts, Blocks(2 * c_.inter), Blocks(c_.hidden)});
  }
  TensorView w2() const {
    return TensorView::Contiguous(w2_dev_->data(), DType::kFloat8E4M3, {c_.experts, c_.hidden, c_.inter});
  }
  TensorView w2_scales() const {
    return TensorView::Contiguous(w2_s_dev_->data(), DType::kFloat32,
                                  {c_.experts, Blocks(c_.hidden), Blocks(c_.inter)});
  }
  TensorView ids() const { return TensorView::Contiguous(ids_dev_->data(), DType::kInt32, {c_.tokens, c_.top_k}); }
  TensorView weights() const {
    return TensorView::Contiguous(weights_dev_->data(), DType::kFloat32, {c_.tokens, c_.top_k});
  }
  TensorView workspace() const {
    return TensorView::Contiguous(workspace_dev_->data(), DType::kUInt8, {workspace_bytes_});
  }
  const DeviceBuffer& workspace_buffer() const { return *workspace_dev_; }

  void Prepare() {
    std::vector<uint16_t> rows(static_cast<size_t>((c_.tokens + 1) * XStride()), 0xFFFF);
    for (int64_t t = 0; t < c_.tokens; ++t)
      std::copy_n(x_bits_.data() + t * c_.hidden, c_.hidden, rows.data() + t * XStride());
    x_dev_->Upload(kiln::testing::Bytes(rows.data(), rows.size() * 2));
    out_dev_->Poison();
    workspace_dev_->Poison();
  }

  kiln::Status Call(const TensorView& o, void* stream = nullptr) {
    return kiln::ops::fused_moe_fp8(o, x(), w13(), w13_scales(), w2(), w2_scales(), ids(), weights(), workspace(),
                                    stream);
  }

  // Prepares, calls (out = x itself with `in_place`) and reads the T rows back (bf16 bits).
  std::vector<uint16_t> Run(bool in_place = false) {
    Prepare();
    const kiln::Status status = Call(in_place ? x() : out());
    INFO(Describe(c_) << (in_place ? " in place: " : ": ") << status.ToString());
    REQUIRE(status.ok());
    return Read(in_place);
  }

  std::vector<uint16_t> RunC() {
    Prepare();
    const TensorView o = out(), xv = x(), a = w13(), as = w13_scales(), b = w2(), bs = w2_scales(), i = ids(),
                     w = weights(), ws = workspace();
    DLTensor o_dl = kiln::testing::ToDLTensor(o), x_dl = kiln::testing::ToDLTensor(xv);
    DLTensor a_dl = kiln::testing::ToDLTensor(a), as_dl = kiln::testing::ToDLTensor(as);
    DLTensor b_dl = kiln::testing::ToDLTensor(b), bs_dl = kiln::testing::ToDLTensor(bs);
    DLTensor i_dl = kiln::testing::ToDLTensor(i), w_dl = kiln::testing::ToDLTensor(w);
    DLTensor ws_dl = kiln::testing::ToDLTensor(ws);
    ws_dl.dtype = {kDLUInt, 8, 1};
    const kiln_status status = kiln_fused_moe_fp8(&o_dl, &x_dl, &a_dl, &as_dl, &b_dl, &bs_dl, &i_dl, &w_dl, &ws_dl,
                                                  nullptr);
    INFO(Describe(c_) << ": " << kiln_last_error());
    REQUIRE(status == KILN_OK);
    return Read(false);
  }

  // The T x H values of out (or x, in place); its row padding and the guard row must be untouched.
  std::vector<uint16_t> Read(bool in_place) {
    KILN_CU(Cuda().cuCtxSynchronize());
    const std::vector<uint8_t> bytes = in_place ? x_dev_->Download() : out_dev_->Download();
    const int64_t stride = in_place ? XStride() : OutStride();
    std::vector<uint16_t> rows(static_cast<size_t>(c_.tokens * c_.hidden));
    int64_t touched = 0;
    for (int64_t t = 0; t <= c_.tokens; ++t)
      for (int64_t h = 0; h < stride; ++h) {
        uint16_t v;
        std::memcpy(&v, bytes.data() + (t * stride + h) * 2, 2);
        if (t < c_.tokens && h < c_.hidden) rows[static_cast<size_t>(t * c_.hidden + h)] = v;
        else touched += v != 0xFFFF;
      }
    INFO(Describe(c_) << ": " << touched << " padding or guard elements written");
    CHECK(touched == 0);
    return rows;
  }

  const SlotReference* Slot(int64_t t, int64_t j) {
    if (slots_.empty()) {
      slots_.resize(ids_.size());
      for (int64_t tt = 0; tt < c_.tokens; ++tt)
        for (int64_t jj = 0; jj < c_.top_k; ++jj) {
          const int32_t e = ids_[static_cast<size_t>(tt * c_.top_k + jj)];
          if (e < 0 || e >= c_.experts) continue;
          slots_[static_cast<size_t>(tt * c_.top_k + jj)] = std::make_unique<SlotReference>(
              FusedMoeFp8Reference(x_.data() + tt * c_.hidden, experts_[static_cast<size_t>(e)], c_.hidden, c_.inter));
        }
    }
    return slots_[static_cast<size_t>(t * c_.top_k + j)].get();
  }

  // The checks of the file's comment on the result `got` of the last Run and the workspace it left.
  void Check(const std::vector<uint16_t>& got) {
    using kiln::client::FusedMoeFp8WorkspaceOf;
    const auto layout = FusedMoeFp8WorkspaceOf(c_.tokens, c_.top_k, c_.experts, c_.hidden, c_.inter);
    const std::vector<uint8_t> ws = workspace_dev_->Download();
    auto at = [&](int64_t offset) { return ws.data() + offset; };
    const int64_t kb_i = Blocks(c_.inter);
    std::vector<std::string> problems;
    auto note = [&](const std::string& what) {
      if (problems.size() < 8) problems.push_back(what);
    };
    int64_t codes = 0, flipped = 0, far = 0, rows_seen = 0;
    std::vector<double> y_dev(static_cast<size_t>(c_.tokens * c_.top_k * c_.hidden), 0.0);
    std::vector<bool> has_row(static_cast<size_t>(c_.tokens * c_.top_k), false);
    for (int64_t t = 0; t < c_.tokens; ++t)
      for (int64_t j = 0; j < c_.top_k; ++j) {
        int32_t row;
        std::memcpy(&row, at(layout.slot_to_row) + (t * c_.top_k + j) * 4, 4);
        const SlotReference* want = Slot(t, j);
        if (want == nullptr) {
          if (row != -1)
            note("slot (" + std::to_string(t) + ", " + std::to_string(j) + ") dropped but has row " +
                 std::to_string(row));
          continue;
        }
        if (row < 0 || row >= layout.rows) {
          note("slot (" + std::to_string(t) + ", " + std::to_string(j) + ") has no row");
          continue;
        }
        ++rows_seen;
        has_row[static_cast<size_t>(t * c_.top_k + j)] = true;
        // The activations: scales and dequantized values against the reference's, within the
        // allowances FusedMoeFp8Reference derives from the GEMM's error; the codes that differ counted.
        const uint8_t* q = at(layout.act_q) + row * c_.inter;
        const float* s = reinterpret_cast<const float*>(at(layout.act_scales)) + row * kb_i;
        for (int64_t g = 0; g < kb_i; ++g)
          if (!(std::fabs(s[g] - want->act_s[g]) <= want->scale_allow[g] + 1e-6 * want->act_s[g]))
            note("act_scales[" + std::to_string(row) + ", " + std::to_string(g) + "] = " + std::to_string(s[g]) +
                 ", want " + std::to_string(want->act_s[g]) + " +- " + std::to_string(want->scale_allow[g]));
        std::vector<double> ad(static_cast<size_t>(c_.inter));
        for (int64_t i = 0; i < c_.inter; ++i) {
          ++codes;
          const uint8_t a = q[i], b = want->act_q[static_cast<size_t>(i)];
          flipped += a != b;
          ad[static_cast<size_t>(i)] = static_cast<double>(Fp8E4M3ToFloat(a)) * s[i / 128];
          const double ref = static_cast<double>(Fp8E4M3ToFloat(b)) * want->act_s[i / 128];
          if (!(std::fabs(ad[static_cast<size_t>(i)] - ref) <= want->act_allow[static_cast<size_t>(i)])) {
            ++far;
            note("act[" + std::to_string(row) + ", " + std::to_string(i) +
                 "] = " + std::to_string(ad[static_cast<size_t>(i)]) + ", want " + std::to_string(ref) + " +- " +
                 std::to_string(want->act_allow[static_cast<size_t>(i)]));
          }
        }
        // The expert's row from the device's own activations.
        const Expert& ex = experts_[static_cast<size_t>(ids_[static_cast<size_t>(t * c_.top_k + j)])];
        const uint16_t* y = reinterpret_cast<const uint16_t*>(at(layout.expert_out)) + row * c_.hidden;
        for (int64_t h = 0; h < c_.hidden; ++h) {
          double sum = 0, magnitude = 0;
          for (int64_t i = 0; i < c_.inter; ++i) {
            const double p = ex.w2_d[static_cast<size_t>(h * c_.inter + i)] * ad[static_cast<size_t>(i)];
            sum += p;
            magnitude += std::fabs(p);
          }
          const double v = BFloat16ToFloat(y[h]);
          y_dev[static_cast<size_t>((t * c_.top_k + j) * c_.hidden + h)] = v;
          // bf16's rounding and the GEMM's in-block sums (kGemmError).
          const double bound = 4.0 / 256 * std::fabs(sum) + magnitude * kGemmError;
          if (!(std::fabs(v - sum) <= bound))
            note("expert_out[" + std::to_string(row) + ", " + std::to_string(h) + "] = " + std::to_string(v) +
                 ", want " + std::to_string(sum) + " +- " + std::to_string(bound));
        }
      }
    // out: the device's rows combined (tight); the float64 layer, with what the activations' allowance
    // moves each expert row by (sum over i of |w2[h, i]| allow_i) and the rows' own errors.
    int64_t off_layer = 0;
    for (int64_t t = 0; t < c_.tokens; ++t)
      for (int64_t h = 0; h < c_.hidden; ++h) {
        double from_rows = 0, layer = 0, magnitude = 0, moved = 0;
        for (int64_t j = 0; j < c_.top_k; ++j) {
          const size_t slot = static_cast<size_t>(t * c_.top_k + j);
          if (!has_row[slot]) continue;
          const double w = weights_[slot];
          const SlotReference& want = *Slot(t, j);
          from_rows += w * y_dev[slot * static_cast<size_t>(c_.hidden) + static_cast<size_t>(h)];
          layer += w * want.y[static_cast<size_t>(h)];
          magnitude += std::fabs(w * want.y[static_cast<size_t>(h)]);
          const Expert& ex = experts_[static_cast<size_t>(ids_[slot])];
          double row_moved = 0;
          for (int64_t i = 0; i < c_.inter; ++i)
            row_moved += std::fabs(ex.w2_d[static_cast<size_t>(h * c_.inter + i)]) *
                         (want.act_allow[static_cast<size_t>(i)] * (1 + kGemmError));
          moved += std::fabs(w) * row_moved;
        }
        const double v = BFloat16ToFloat(got[static_cast<size_t>(t * c_.hidden + h)]);
        const double tight = 2.0 / 256 * std::fabs(from_rows) + 1e-6 * magnitude;
        if (!(std::fabs(v - from_rows) <= tight))
          note("out[" + std::to_string(t) + ", " + std::to_string(h) + "] = " + std::to_string(v) + ", the rows give " +
               std::to_string(from_rows));
        if (!(std::fabs(v - layer) <= 4.0 / 256 * std::fabs(layer) + 4.0 / 256 * magnitude + moved)) ++off_layer;
      }
    if (off_layer > 0) note(std::to_string(off_layer) + " elements of out off the float64 layer");
    if (far > 0) note(std::to_string(far) + " activation codes more than one code from the reference's");
    // The header's rate: 1 in 20 (0.6-1.1 % seen on an H100, both paths). Rounding by truncation
    // instead of to nearest even would flip about half.
    if (flipped * 20 > codes)
      note(std::to_string(flipped) + " of " + std::to_string(codes) + " activation codes flipped");
    std::string joined;
    for (const auto& p : problems) joined += "\n  " + p;
    INFO(Describe(c_) << ": " << rows_seen << " rows, " << flipped << " of " << codes << " codes flipped" << joined);
    CHECK(problems.empty());
  }

 private:
  Case c_;
  int64_t workspace_bytes_ = 0;
  std::vector<uint16_t> x_bits_;
  std::vector<float> x_;
  std::vector<Expert> experts_;
  std::vector<int32_t> ids_;
  std::vector<float> weights_;
  std::vector<std::unique_ptr<SlotReference>> slots_;
  std::unique_ptr<DeviceBuffer> x_dev_, out_dev_, ids_dev_, weights_dev_, workspace_dev_, w13_dev_, w2_dev_, w13_s_dev_,
      w2_s_dev_;
};

Case Make(int64_t tokens, int64_t experts, int64_t top_k, int64_t hidden, int64_t inter, Ids ids = Ids::kRouter) {
  Case c{tokens, experts, top_k, hidden, inter};
  c.ids = ids;
  return c;
}

using kiln::client::FusedMoePath;
using kiln::testing::CheckBothPaths;
using kiln::testing::kBothPaths;
using kiln::testing::PathName;
using kiln::testing::PathScope;

TEST_CASE("fused_moe_fp8 matches the quantized float64 layer step by step", "[gpu][moe][fused][fp8]") {
  kiln::testing::GpuSession session = kiln::testing::HopperSession();
  std::mt19937 rng(20261205);
  const int64_t experts[] = {8, 64, 128, 256};
  size_t n = 0;
  for (int64_t tokens : {1, 3, 64, 1000}) {
    for (int64_t top_k : {1, 2, 8}) {
      Case c = Make(tokens, experts[n % 4], top_k, 272, 208);
      c.x_pad = n % 3 == 1 ? 16 : 0;
      c.out_pad = n % 5 == 2 ? 8 : 0;
      ++n;
      Layer layer(c, rng);
      CheckBothPaths(layer);
    }
  }
  // The decode path's edges: more than one pass of 8 slots over an expert (one expert for all),
  // dropped ids (rows the silu skips), few experts (the others NaN), K in one k half only (H and I
  // below 128: the second half of the warps has no k block).
  for (const Case& c : {Make(200, 64, 8, 256, 128, Ids::kFewExperts), Make(500, 128, 1, 256, 128, Ids::kOneExpert),
                        Make(300, 8, 8, 256, 128, Ids::kOneExpert), Make(333, 256, 8, 256, 128, Ids::kDropped),
                        Make(2048, 128, 8, 512, 384), Make(20, 8, 2, 256, 128, Ids::kOneExpert),
                        Make(16, 32, 4, 256, 128, Ids::kDropped), Make(5, 16, 2, 96, 48), Make(64, 128, 8, 448, 128)}) {
    Layer layer(c, rng);
    CheckBothPaths(layer);
  }
}

// (Catch2 indents a failure's header after its name's first ": ", and aborts when that passes
// the console's width: keep the colon early.)
TEST_CASE("fused_moe_fp8 gives the same bits in place, twice, through the C ABI, with and without "
          "programmatic launches, with L2 prefetching and at every k split",
          "[gpu][moe][fused][fp8]") {
  kiln::testing::GpuSession session = kiln::testing::HopperSession();
  std::mt19937 rng(7);
  Case c = Make(100, 64, 8, 272, 208);
  c.x_pad = 16;
  Layer layer(c, rng);
  for (FusedMoePath path : kBothPaths) {
    const PathScope scope(path);
    INFO(PathName(path));
    const std::vector<uint16_t> first = layer.Run();
    layer.Check(first);
    CHECK(layer.Run() == first);
    CHECK(layer.RunC() == first);
    CHECK(layer.Run(/*in_place=*/true) == first);
    // The decode path's launches as programmatic dependents (the default) and in plain order.
    kiln::client::SetFusedMoeProgrammaticLaunchForTesting(0);
    const std::vector<uint16_t> plain = layer.Run();
    kiln::client::SetFusedMoeProgrammaticLaunchForTesting(-1);
    CHECK(plain == first);
    // The decode GEMVs' L2 prefetching (KILN_FUSED_MOE_FP8_PREFETCH) moves no bit.
    for (int blocks : {1, 4, 8}) {
      kiln::client::SetFusedMoeFp8PrefetchBlocksForTesting(blocks);
      const std::vector<uint16_t> prefetched = layer.Run();
      kiln::client::SetFusedMoeFp8PrefetchBlocksForTesting(-1);
      INFO("prefetch " << blocks);
      CHECK(prefetched == first);
    }
    // The decode GEMVs' k parts (KILN_FUSED_MOE_FP8_K_PARTS; the rule picks 8 for this small layer on
    // a big GPU): each sums the k blocks in another order, so each is checked against the float64
    // layer and for repeatability; the grouped path does not read them.
    for (int parts : {2, 4, 8}) {
      kiln::client::SetFusedMoeFp8GemvKPartsForTesting(parts);
      const std::vector<uint16_t> split = layer.Run();
      const std::vector<uint16_t> again = layer.Run();
      kiln::client::SetFusedMoeFp8GemvKPartsForTesting(0);
      INFO("k parts " << parts);
      layer.Check(split);
      CHECK(again == split);
      if (path == FusedMoePath::kGrouped) CHECK(split == first);
    }
  }
}

TEST_CASE("fused_moe_fp8's grouped path quantizes silu(gate) * up in the gate-and-up GEMM or in its own kernel, "
          "and gathers x's codes by token in that GEMM or copies them per row, with the same bits",
          "[gpu][moe][fused][fp8]") {
  kiln::testing::GpuSession session = kiln::testing::HopperSession();
  std::mt19937 rng(29);
  const PathScope scope(FusedMoePath::kGrouped);
  // I 128 and 384 (one and three tiles of the epilogue a row), partial and empty groups, one
  // expert for all (a group of every row), dropped ids (row_to_slot -1: rows the gather fills
  // with zeros), H 272 (a stage past K's end: the gather's zero-filled units).
  for (const Case& c :
       {Make(1000, 64, 8, 256, 128), Make(777, 16, 2, 512, 384), Make(300, 8, 8, 256, 128, Ids::kOneExpert),
        Make(333, 256, 8, 256, 384, Ids::kDropped), Make(411, 32, 4, 272, 208)}) {
    Layer layer(c, rng);
    std::vector<uint16_t> results[2][2];  // [silu in the epilogue][gathered]
    for (int fused : {1, 0})
      for (int gather : {1, 0}) {
        kiln::client::SetFusedMoeFp8SiluEpilogueForTesting(fused);
        kiln::client::SetFusedMoeGatherXForTesting(gather);
        INFO((fused ? "silu in the GEMM's epilogue" : "silu in its own kernel")
             << (gather ? ", x's codes gathered by the GEMM" : ", x's codes copied per row"));
        results[fused][gather] = layer.Run();
        layer.Check(results[fused][gather]);
        CHECK(layer.Run() == results[fused][gather]);
      }
    kiln::client::SetFusedMoeFp8SiluEpilogueForTesting(-1);
    kiln::client::SetFusedMoeGatherXForTesting(-1);
    // The same accumulators, the same roundings and functions: the same codes, scales and out (a
    // token's codes do not depend on which rows copy them).
    CHECK(results[1][0] == results[1][1]);
    CHECK(results[0][1] == results[1][1]);
    CHECK(results[0][0] == results[1][1]);
  }
}

TEST_CASE("fused_moe_fp8 replays in a CUDA graph on new ids and new x", "[gpu][moe][fused][fp8]") {
  kiln::testing::GpuSession session = kiln::testing::HopperSession();
  std::mt19937 rng(11);
  Case c = Make(64, 128, 8, 256, 128);
  c.poison_unused = false;
  Layer layer(c, rng);
  // 512 slots = 4 E: the decode path can take it.
  for (FusedMoePath path : kBothPaths) {
    const PathScope scope(path);
    INFO(PathName(path));
    layer.Check(layer.Run());  // loads the kernels outside the capture
    const kiln::testing::CapturedCall graph([&](CUstream stream) { return layer.Call(layer.out(), stream); });
    INFO(graph.status().ToString());
    REQUIRE(graph.status().ok());
    kiln::testing::ReplayOnEveryRouting(layer, graph, rng);
  }
}

TEST_CASE("fused_moe_fp8 with no tokens launches nothing, and refuses bad arguments through the real path",
          "[gpu][moe][fused][fp8]") {
  kiln::testing::GpuSession session = kiln::testing::HopperSession();
  std::mt19937 rng(3);
  Layer none(Make(0, 8, 2, 256, 128), rng);
  none.Prepare();
  const kiln::ClientStats s0 = kiln::GetClientStats();
  const kiln::Status status = none.Call(none.out());
  INFO(status.ToString());
  REQUIRE(status.ok());
  const kiln::ClientStats s1 = kiln::GetClientStats();
  CHECK(s1.op_fast_hits + s1.op_fast_misses == s0.op_fast_hits + s0.op_fast_misses);
  const std::vector<uint8_t> scratch = none.workspace_buffer().Download();
  CHECK(std::all_of(scratch.begin(), scratch.end(), [](uint8_t v) { return v == 0xFF; }));

  Layer layer(Make(7, 8, 2, 256, 128), rng);
  auto require_invalid = [](const kiln::Status& s, const std::string& fragment) {
    INFO(s.ToString());
    REQUIRE(s.code() == kiln::StatusCode::kInvalidArgument);
    CHECK(s.message().find(fragment) != std::string::npos);
  };
  const TensorView bf16_w13 = TensorView::Contiguous(layer.w13().data, DType::kBFloat16, {8, 128, 256});
  require_invalid(kiln::ops::fused_moe_fp8(layer.out(), layer.x(), bf16_w13, layer.w13_scales(), layer.w2(),
                                           layer.w2_scales(), layer.ids(), layer.weights(), layer.workspace()),
                  "kiln::ops::fused_moe_fp8: w13: expected dtype fp8_e4m3, found bf16");
  const TensorView flat = TensorView::Contiguous(layer.w13_scales().data, DType::kFloat32, {8, 2, 1});
  require_invalid(kiln::ops::fused_moe_fp8(layer.out(), layer.x(), layer.w13(), flat, layer.w2(), layer.w2_scales(),
                                           layer.ids(), layer.weights(), layer.workspace()),
                  "w13_scales: expected shape [8, 2, 2] (one per 128 x 128 block of w13[e]), found [8, 2, 1]");
  const TensorView inside = TensorView::Contiguous(layer.workspace().data, DType::kBFloat16, {7, 256});
  require_invalid(layer.Call(inside), "overlap in memory");
}

}  // namespace
