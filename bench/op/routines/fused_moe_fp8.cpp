// Routine "fused_moe_fp8" (kiln::ops::fused_moe_fp8): fused_moe on block-scaled fp8 experts. The
// ids are fused_moe's (FusedMoeRoutedIds, fused_moe_layer.h: the same fixed seed from the shape,
// so Describe knows which experts are chosen and the bytes are those of the experts actually
// selected). Weight codes uniform in [-1, 1] with a scale per 128 x 128 block in [1.5, 4.5] /
// sqrt(fan-in) (products of order 1), x in [-1, 1], topk_weights in [0, 1].
//
// The references quantize as the op does: x's rows and silu(gate) * up per 128 columns with scale
// max(amax, 1e-10) / 448 and e4m3 codes rounded to nearest even; gate and up, and each expert's
// output row, rounded to bf16 where the op stores them.
//
// backends: kiln (the op), reference (one warp per activation element, then one per output element,
// fp32: obviously correct).
#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "bench/op/reference_kernel.h"
#include "bench/op/routine.h"
#include "bench/op/routines/fused_moe_layer.h"
#include "bench/op/routines/hopper_only.h"
#include "client/core/api/float16.h"
#include "client/core/api/invalid_argument.h"
#include "kiln/moe/moe_contract.h"
#include "kiln/ops/moe.h"

namespace kiln::bench {

namespace {

enum : size_t { kOut = 0, kX, kW13, kW13Scales, kW2, kW2Scales, kIds, kWeights, kWorkspace };

constexpr const char* kReferenceSource = R"(
__device__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// e4m3(v / scale) * scale: the value a quantized element stands for.
__device__ float Quantized(float v, float scale) {
  unsigned short p;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(p) : "f"(0.f), "f"(v / scale));
  return E4M3ToF((unsigned char)(p & 0xff)) * scale;
}
__device__ float Bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
// act[r, i] = silu(gate) * up in fp32 (scratch), gate and up the dot products of q(x[t]) with
// w13[e]'s rows i and I + i, each rounded to bf16. A warp per element: warp w of the block is
// i = blockIdx.x * 8 + w, slot r = blockIdx.y; lane l holds columns l, l + 32, l + 64, l + 96 of
// each 128-column group.
extern "C" __global__ void kiln_bench_ref_fused_moe_fp8_act(float* act, const T* x, const unsigned char* w13,
                                                            const float* w13_s, const int* ids, long long slots,
                                                            int top_k, int experts, long long hidden, long long inter) {
  const long long i = (long long)blockIdx.x * 8 + threadIdx.x / 32;
  const long long r = blockIdx.y;
  const int lane = threadIdx.x % 32;
  if (i >= inter || r >= slots) return;
  const int e = ids[r];
  if (e < 0 || e >= experts) return;
  const T* xr = x + (r / top_k) * hidden;
  const long long hb = (hidden + 127) / 128, gb = (2 * inter + 127) / 128;
  const unsigned char* g = w13 + ((long long)e * 2 * inter + i) * hidden;
  const unsigned char* u = g + inter * hidden;
  float gate = 0.f, up = 0.f;
  for (long long b = 0; b < hb; ++b) {
    float v[4], amax = 0.f;
    for (int q = 0; q < 4; ++q) {
      const long long c = b * 128 + lane + 32 * q;
      v[q] = c < hidden ? ToF(xr[c]) : 0.f;
      amax = fmaxf(amax, fabsf(v[q]));
    }
    const float scale = fmaxf(WarpMax(amax), 1e-10f) / 448.f;
    const float sg = w13_s[((long long)e * gb + i / 128) * hb + b], su = w13_s[((long long)e * gb + (inter + i) / 128) * hb + b];
    for (int q = 0; q < 4; ++q) {
      const long long c = b * 128 + lane + 32 * q;
      if (c >= hidden) continue;
      const float xq = Quantized(v[q], scale);
      gate += xq * E4M3ToF(g[c]) * sg;
      up += xq * E4M3ToF(u[c]) * su;
    }
  }
  gate = Bf16(WarpSum(gate));
  up = Bf16(WarpSum(up));
  if (lane == 0) act[r * inter + i] = gate / (1.f + expf(-gate)) * up;
}
// out[t, h] = sum over j of weights[t, j] * bf16(q(act[t * top_k + j]) . w2[e, h]), fp32. Warp w of
// the block: column h = blockIdx.x * 8 + w.
extern "C" __global__ void kiln_bench_ref_fused_moe_fp8_out(T* out, const float* act, const unsigned char* w2,
                                                            const float* w2_s, const int* ids, const float* weights,
                                                            long long tokens, int top_k, int experts, long long hidden,
                                                            long long inter) {
  const long long h = (long long)blockIdx.x * 8 + threadIdx.x / 32;
  const long long t = blockIdx.y;
  const int lane = threadIdx.x % 32;
  if (h >= hidden || t >= tokens) return;
  const long long ib = (inter + 127) / 128, hb = (hidden + 127) / 128;
  float acc = 0.f;
  for (int j = 0; j < top_k; ++j) {
    const int e = ids[t * top_k + j];
    if (e < 0 || e >= experts) continue;
    const float* a = act + (t * top_k + j) * inter;
    const unsigned char* w = w2 + ((long long)e * hidden + h) * inter;
    float y = 0.f;
    for (long long b = 0; b < ib; ++b) {
      float v[4], amax = 0.f;
      for (int q = 0; q < 4; ++q) {
        const long long c = b * 128 + lane + 32 * q;
        v[q] = c < inter ? a[c] : 0.f;
        amax = fmaxf(amax, fabsf(v[q]));
      }
      const float scale = fmaxf(WarpMax(amax), 1e-10f) / 448.f;
      const float s = w2_s[((long long)e * hb + h / 128) * ib + b];
      for (int q = 0; q < 4; ++q) {
        const long long c = b * 128 + lane + 32 * q;
        if (c < inter) y += Quantized(v[q], scale) * E4M3ToF(w[c]) * s;
      }
    }
    acc += weights[t * top_k + j] * Bf16(WarpSum(y));
  }
  if (lane == 0) out[t * hidden + h] = FromF<T>(acc);
}
)";

int64_t Blocks(int64_t n) { return (n + 127) / 128; }
double RoundBf16(double v) { return client::BFloat16ToFloat(client::FloatToBFloat16(static_cast<float>(v))); }

// v[0, n) quantized as the op quantizes a row: the values its codes stand for.
void QuantizedRow(const float* v, int64_t n, std::vector<double>* out) {
  out->resize(static_cast<size_t>(n));
  for (int64_t b = 0; b < Blocks(n); ++b) {
    const int64_t end = std::min<int64_t>(n, (b + 1) * 128);
    float amax = 0.f;
    for (int64_t c = b * 128; c < end; ++c) amax = std::max(amax, std::fabs(v[c]));
    const float scale = std::max(amax, 1e-10f) / 448.0f;
    for (int64_t c = b * 128; c < end; ++c)
      (*out)[static_cast<size_t>(c)] =
          static_cast<double>(client::Fp8E4M3ToFloat(client::FloatToFp8E4M3(v[c] / scale))) * scale;
  }
}

class FusedMoeFp8Routine : public Routine {
 public:
  std::string_view name() const override { return moe::kFusedMoeFp8Op; }
  std::string_view description() const override {
    return "fused_moe on block-scaled fp8 experts: permute, gather and quantize, grouped fp8 GEMM, silu and quantize, "
           "grouped fp8 GEMM, combine (kiln::ops::fused_moe_fp8)";
  }
  std::vector<std::string> axes() const override {
    return {"tokens",         "top_k",          "experts",
            "hidden",         "intermediate",   "gate_up",
            "hidden_blocks",  "gate_up_blocks", "intermediate_blocks",
            "workspace_bytes"};
  }
  std::vector<DType> dtypes() const override { return {DType::kBFloat16}; }
  std::vector<BackendInfo> backends() const override {
    return {{"kiln",
             "the op through kiln::ops (the decode path's 5 launches for few tokens, else the grouped "
             "path's 6; KILN_FUSED_MOE_PATH forces one; the activations quantized to e4m3 before each product)"},
            {"reference", "one warp per activation element, then one per output element, fp32, the op's "
                          "quantization (the refcheck baseline)"}};
  }
  StatusOr<CaseSpec> Describe(const ShapeAxes& shape, DType dtype) const override {
    const int64_t tokens = AxisValue(shape, "tokens"), top_k = AxisValue(shape, "top_k");
    const int64_t experts = AxisValue(shape, "experts"), hidden = AxisValue(shape, "hidden");
    const int64_t inter = AxisValue(shape, "intermediate"), gate_up = AxisValue(shape, "gate_up");
    const int64_t ws = AxisValue(shape, "workspace_bytes");
    KILN_RETURN_IF_ERROR(CheckFusedMoeAxes(name(), shape, 16,
                                           ops::fused_moe_fp8_workspace_bytes(tokens, top_k, experts, hidden, inter)));
    if (AxisValue(shape, "hidden_blocks") != Blocks(hidden) || AxisValue(shape, "gate_up_blocks") != Blocks(gate_up) ||
        AxisValue(shape, "intermediate_blocks") != Blocks(inter))
      return client::InvalidArgument(std::string(name()) + ": the *_blocks axes must be ceil(axis / 128)");
    CaseSpec spec;
    spec.axes = shape;
    const double h = static_cast<double>(hidden), i = static_cast<double>(inter);
    TensorSpec out{"out", dtype, {tokens, hidden}, TensorRole::kOutput};
    // bf16's allowance, and an absolute term for an activation code that the op and the reference
    // round to neighbours (their fp32 sums differ at a boundary): one code is 1/8 of its value.
    out.tolerance = {3e-2, 1.6e-2};
    const auto scales = [](const char* name, std::vector<int64_t> shape, double fan_in) {
      return TensorSpec{name,
                        DType::kFloat32,
                        std::move(shape),
                        TensorRole::kInput,
                        1.5 / std::sqrt(fan_in),
                        4.5 / std::sqrt(fan_in)};
    };
    TensorSpec ids{"topk_ids", DType::kInt32, {tokens, top_k}, TensorRole::kInput};
    ids.routine_fills = true;
    TensorSpec workspace{"workspace", DType::kUInt8, {ws}, TensorRole::kInput};
    workspace.routine_fills = true;  // scratch
    spec.tensors = {out,
                    {"x", dtype, {tokens, hidden}, TensorRole::kInput, -1, 1},
                    {"w13", DType::kFloat8E4M3, {experts, gate_up, hidden}, TensorRole::kInput, -1, 1},
                    scales("w13_scales", {experts, Blocks(gate_up), Blocks(hidden)}, h),
                    {"w2", DType::kFloat8E4M3, {experts, hidden, inter}, TensorRole::kInput, -1, 1},
                    scales("w2_scales", {experts, Blocks(hidden), Blocks(inter)}, i),
                    ids,
                    {"topk_weights", DType::kFloat32, {tokens, top_k}, TensorRole::kInput, 0, 1},
                    workspace};
    const std::vector<int> routed = FusedMoeRoutedIds(tokens, top_k, experts);
    const double selected = static_cast<double>(std::set<int>(routed.begin(), routed.end()).size());
    const double rows = static_cast<double>(tokens * top_k);
    // The selected experts' weights and scales once; x and out; the quantized rows, the GEMMs'
    // bf16 rows and the quantized activations written and read once each; the ids and weights.
    spec.bytes = selected * (3.0 * h * i + 4.0 * 3.0 * h * i / (128.0 * 128.0)) +
                 4.0 * static_cast<double>(tokens) * h + 2.0 * rows * (h + 4.0 * i + i + 2.0 * h) + 8.0 * rows;
    spec.footprint = spec.bytes;
    spec.flops = 6.0 * rows * h * i;
    return spec;
  }

  Status FillInputs(const CaseSpec& spec, const ShapeAxes& shape, std::mt19937_64& rng,
                    std::vector<HostTensor>* tensors) const override {
    FillFusedMoeIds(shape, &(*tensors)[kIds]);
    return OkStatus();
  }

  ShapeAxes SmallShape() const override { return Shape(7, 2, 8, 128, 32); }
  // A token alone; awkward counts and widths (scale groups of 16 and 80 columns, a w13 block across
  // the gate and up rows); top_k 1 and 8; the models' widths at one token.
  std::vector<ShapeAxes> CheckShapes() const override {
    return {SmallShape(), Shape(1, 8, 128, 256, 128), Shape(3, 1, 33, 272, 208), Shape(64, 8, 128, 256, 96),
            Shape(1, 8, 16, 1024, 256)};
  }

  Status CpuReference(const CaseSpec& spec, const std::vector<HostTensor>& t,
                      std::map<size_t, std::vector<double>>* expected) const override {
    const int64_t tokens = spec.tensors[kX].shape[0], hidden = spec.tensors[kX].shape[1];
    const int64_t experts = spec.tensors[kW13].shape[0], inter = spec.tensors[kW13].shape[1] / 2;
    const int64_t top_k = spec.tensors[kIds].shape[1];
    const int64_t hb = Blocks(hidden), gb = Blocks(2 * inter), ib = Blocks(inter);
    std::vector<double> out(static_cast<size_t>(tokens * hidden), 0.0), xq, aq;
    std::vector<float> xrow(static_cast<size_t>(hidden)), act(static_cast<size_t>(inter));
    for (int64_t tk = 0; tk < tokens; ++tk) {
      for (int64_t c = 0; c < hidden; ++c)
        xrow[static_cast<size_t>(c)] = t[kX].Get(static_cast<size_t>(tk * hidden + c));
      QuantizedRow(xrow.data(), hidden, &xq);
      for (int64_t j = 0; j < top_k; ++j) {
        const auto e = static_cast<int64_t>(t[kIds].Get(static_cast<size_t>(tk * top_k + j)));
        if (e < 0 || e >= experts) continue;
        for (int64_t i = 0; i < inter; ++i) {
          double gate = 0, up = 0;
          for (int64_t k = 0; k < hidden; ++k) {
            const double sg = t[kW13Scales].Get(static_cast<size_t>((e * gb + i / 128) * hb + k / 128));
            const double su = t[kW13Scales].Get(static_cast<size_t>((e * gb + (inter + i) / 128) * hb + k / 128));
            gate += xq[static_cast<size_t>(k)] * sg *
                    t[kW13].Get(static_cast<size_t>((e * 2 * inter + i) * hidden + k));
            up += xq[static_cast<size_t>(k)] * su *
                  t[kW13].Get(static_cast<size_t>((e * 2 * inter + inter + i) * hidden + k));
          }
          gate = RoundBf16(gate);
          up = RoundBf16(up);
          act[static_cast<size_t>(i)] = static_cast<float>(gate / (1.0 + std::exp(-gate)) * up);
        }
        QuantizedRow(act.data(), inter, &aq);
        const double w = t[kWeights].Get(static_cast<size_t>(tk * top_k + j));
        for (int64_t h = 0; h < hidden; ++h) {
          double y = 0;
          for (int64_t i = 0; i < inter; ++i)
            y += aq[static_cast<size_t>(i)] * t[kW2Scales].Get(static_cast<size_t>((e * hb + h / 128) * ib + i / 128)) *
                 t[kW2].Get(static_cast<size_t>((e * hidden + h) * inter + i));
          out[static_cast<size_t>(tk * hidden + h)] += w * RoundBf16(y);
        }
      }
    }
    (*expected)[kOut] = std::move(out);
    return OkStatus();
  }

  StatusOr<BackendFn> Prepare(const std::string& backend, const CaseSpec& spec, const ShapeAxes& shape,
                              DType dtype) const override {
    if (backend == "kiln") {
      KILN_RETURN_IF_ERROR(RequireSm90(moe::kFusedMoeFp8Op));
      return BackendFn([](const TensorSet& t, CUstream stream) {
        return ops::fused_moe_fp8(t[kOut], t[kX], t[kW13], t[kW13Scales], t[kW2], t[kW2Scales], t[kIds], t[kWeights],
                                  t[kWorkspace], stream);
      });
    }
    if (backend == "reference") {
      KILN_ASSIGN_OR_RETURN(auto act_kernel, LoadReferenceKernel("kiln_bench_ref_fused_moe_fp8", kReferenceSource,
                                                                 "kiln_bench_ref_fused_moe_fp8_act", dtype));
      KILN_ASSIGN_OR_RETURN(auto out_kernel, LoadReferenceKernel("kiln_bench_ref_fused_moe_fp8", kReferenceSource,
                                                                 "kiln_bench_ref_fused_moe_fp8_out", dtype));
      const long long tokens = AxisValue(shape, "tokens"), hidden = AxisValue(shape, "hidden");
      const long long inter = AxisValue(shape, "intermediate");
      const int top_k = static_cast<int>(AxisValue(shape, "top_k"));
      const int experts = static_cast<int>(AxisValue(shape, "experts"));
      // The fp32 activations [slots, I] in the workspace (scratch for the reference): 4 * rows * I
      // bytes, within the op's smallest workspace (its first region holds [rows, 2I] bf16).
      return BackendFn([act_kernel, out_kernel, tokens, hidden, inter, top_k, experts](const TensorSet& t,
                                                                                       CUstream stream) {
        const long long slots = tokens * top_k;
        KILN_RETURN_IF_ERROR(act_kernel(FusedMoeReferenceGrid(inter, slots, stream), t[kWorkspace].data, t[kX].data,
                                        t[kW13].data, t[kW13Scales].data, t[kIds].data, slots, top_k, experts, hidden,
                                        inter));
        return out_kernel(FusedMoeReferenceGrid(hidden, tokens, stream), t[kOut].data, t[kWorkspace].data, t[kW2].data,
                          t[kW2Scales].data, t[kIds].data, t[kWeights].data, tokens, top_k, experts, hidden, inter);
      });
    }
    return Status(StatusCode::kNotFound, std::string(name()) + " has no backend '" + backend + "'");
  }

 private:
  static ShapeAxes Shape(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t inter) {
    return {{"tokens", tokens},
            {"top_k", top_k},
            {"experts", experts},
            {"hidden", hidden},
            {"intermediate", inter},
            {"gate_up", 2 * inter},
            {"hidden_blocks", Blocks(hidden)},
            {"gate_up_blocks", Blocks(2 * inter)},
            {"intermediate_blocks", Blocks(inter)},
            {"workspace_bytes", ops::fused_moe_fp8_workspace_bytes(tokens, top_k, experts, hidden, inter)}};
  }
};

}  // namespace

KILN_BENCH_REGISTER_ROUTINE(FusedMoeFp8Routine);

}  // namespace kiln::bench
