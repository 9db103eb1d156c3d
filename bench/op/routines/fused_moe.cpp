// Routine "fused_moe" (kiln::ops::fused_moe): a whole expert layer on routed tokens, out[t] =
// sum over j of topk_weights[t, j] * w2[e] . (silu(w13[e, :I] . x[t]) * (w13[e, I:] . x[t])),
// e = topk_ids[t, j]. The ids are drawn like a router's, top_k distinct experts per token, from a
// fixed seed drawn from the shape (FusedMoeRoutedIds), so Describe knows which experts are chosen: the
// bytes are those of the experts actually selected (the decode target is a share of the copy
// bandwidth on them) plus the activations; footprint likewise. Weights are uniform in
// +-sqrt(3 / fan_in) (unit-variance products), x in [-1, 1], topk_weights in [0, 1].
//
// The float64 reference (and the GPU reference) rounds the activation silu(gate) * up and each
// expert's output row to the case's dtype, as the op (and a layer of separate calls) stores them.
//
// backends: kiln (the op), reference (one warp per activation element, then one per output
// element, fp32 accumulation: obviously correct).
#include <algorithm>
#include <cmath>
#include <numeric>
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

std::vector<int> FusedMoeRoutedIds(int64_t tokens, int64_t top_k, int64_t experts) {
  std::mt19937_64 rng(0x6675736564 + static_cast<uint64_t>(tokens) * 977 + static_cast<uint64_t>(experts) * 31 +
                      static_cast<uint64_t>(top_k));
  std::vector<int> pool(static_cast<size_t>(experts));
  std::vector<int> ids;
  ids.reserve(static_cast<size_t>(tokens * top_k));
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(pool.begin(), pool.end(), 0);
    for (int64_t j = 0; j < top_k; ++j) {
      std::uniform_int_distribution<int64_t> pick(j, experts - 1);
      std::swap(pool[static_cast<size_t>(j)], pool[static_cast<size_t>(pick(rng))]);
      ids.push_back(pool[static_cast<size_t>(j)]);
    }
  }
  return ids;
}

void FillFusedMoeIds(const ShapeAxes& shape, HostTensor* ids) {
  const std::vector<int> routed = FusedMoeRoutedIds(AxisValue(shape, "tokens"), AxisValue(shape, "top_k"),
                                                    AxisValue(shape, "experts"));
  for (size_t s = 0; s < routed.size(); ++s) ids->Set(s, routed[s]);
}

Status CheckFusedMoeAxes(std::string_view routine, const ShapeAxes& shape, int64_t multiple, int64_t need) {
  const int64_t tokens = AxisValue(shape, "tokens"), top_k = AxisValue(shape, "top_k");
  const int64_t experts = AxisValue(shape, "experts"), hidden = AxisValue(shape, "hidden");
  const int64_t inter = AxisValue(shape, "intermediate"), gate_up = AxisValue(shape, "gate_up");
  const int64_t ws = AxisValue(shape, "workspace_bytes");
  const std::string where = std::string(routine) + ": ";
  if (experts < 1 || experts > moe::kMaxExperts || top_k < 1 || top_k > std::min<int64_t>(experts, moe::kMaxTopK))
    return client::InvalidArgument(where + "experts must be 1.." + std::to_string(moe::kMaxExperts) +
                                   " and top_k 1..min(experts, " + std::to_string(moe::kMaxTopK) + ")");
  if (tokens < 1 || hidden < multiple || hidden % multiple != 0 || inter < multiple || inter % multiple != 0 ||
      gate_up != 2 * inter)
    return client::InvalidArgument(where + "tokens >= 1, hidden and intermediate positive multiples of " +
                                   std::to_string(multiple) + ", gate_up = 2 * intermediate");
  if (ws < need)
    return client::InvalidArgument(where + "workspace_bytes " + std::to_string(ws) + " is below the " +
                                   std::to_string(need) + " the case needs");
  return OkStatus();
}

LaunchConfig FusedMoeReferenceGrid(long long columns, long long rows, CUstream stream) {
  LaunchConfig config;
  config.block.x = 256;
  config.grid.x = static_cast<unsigned>((columns + 7) / 8);
  config.grid.y = static_cast<unsigned>(rows);
  config.stream = stream;
  return config;
}

namespace {

enum : size_t { kOut = 0, kX, kW13, kW2, kIds, kWeights, kWorkspace };

constexpr const char* kReferenceSource = R"(
// One warp per output element, its lanes over K (coalesced rows; a lane's fp32 partial sums, then
// a butterfly): slow next to the op, but not 1000x (a thread per element reading its own row was
// 9 s at Mixtral's 4096 tokens).
__device__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// act[r, i] = T(silu(x[t] . w13[e, i]) * (x[t] . w13[e, I + i])), r = t * top_k + j, into the
// workspace (scratch for the reference). Warp w of the block: element i = blockIdx.x * 8 + w.
extern "C" __global__ void kiln_bench_ref_fused_moe_act(T* act, const T* x, const T* w13, const int* ids,
                                                        long long slots, int top_k, int experts, long long hidden,
                                                        long long inter) {
  const long long i = (long long)blockIdx.x * 8 + threadIdx.x / 32;
  const long long r = blockIdx.y;
  const int lane = threadIdx.x % 32;
  if (i >= inter || r >= slots) return;
  const int e = ids[r];
  if (e < 0 || e >= experts) return;
  const T* xr = x + (r / top_k) * hidden;
  const T* g = w13 + ((long long)e * 2 * inter + i) * hidden;
  const T* u = g + inter * hidden;
  float gate = 0.f, up = 0.f;
  for (long long k = lane; k < hidden; k += 32) {
    gate += ToF(xr[k]) * ToF(g[k]);
    up += ToF(xr[k]) * ToF(u[k]);
  }
  gate = WarpSum(gate);
  up = WarpSum(up);
  if (lane == 0) act[r * inter + i] = FromF<T>(gate / (1.f + expf(-gate)) * up);
}
// out[t, h] = sum over j of weights[t, j] * T(act[t * top_k + j] . w2[e, h]), fp32. Warp w of
// the block: column h = blockIdx.x * 8 + w.
extern "C" __global__ void kiln_bench_ref_fused_moe_out(T* out, const T* act, const T* w2, const int* ids,
                                                        const float* weights, long long tokens, int top_k, int experts,
                                                        long long hidden, long long inter) {
  const long long h = (long long)blockIdx.x * 8 + threadIdx.x / 32;
  const long long t = blockIdx.y;
  const int lane = threadIdx.x % 32;
  if (h >= hidden || t >= tokens) return;
  float acc = 0.f;
  for (int j = 0; j < top_k; ++j) {
    const int e = ids[t * top_k + j];
    if (e < 0 || e >= experts) continue;
    const T* a = act + (t * top_k + j) * inter;
    const T* w = w2 + ((long long)e * hidden + h) * inter;
    float y = 0.f;
    for (long long i = lane; i < inter; i += 32) y += ToF(a[i]) * ToF(w[i]);
    y = WarpSum(y);
    acc += weights[t * top_k + j] * ToF(FromF<T>(y));  // the expert's output row, rounded as the op stores it
  }
  if (lane == 0) out[t * hidden + h] = FromF<T>(acc);
}
)";

// v rounded to the case's dtype (to nearest even, as the kernels' stores round).
double RoundTo(double v, DType dtype) {
  const auto f = static_cast<float>(v);
  return dtype == DType::kBFloat16 ? client::BFloat16ToFloat(client::FloatToBFloat16(f))
                                   : client::HalfToFloat(client::FloatToHalf(f));
}

class FusedMoeRoutine : public Routine {
 public:
  std::string_view name() const override { return moe::kFusedMoeOp; }
  std::string_view description() const override {
    return "a whole expert layer on routed tokens: permute, grouped GEMM with silu_and_mul, grouped GEMM, combine "
           "(kiln::ops::fused_moe)";
  }
  std::vector<std::string> axes() const override {
    return {"tokens", "top_k", "experts", "hidden", "intermediate", "gate_up", "workspace_bytes"};
  }
  std::vector<DType> dtypes() const override { return {DType::kBFloat16, DType::kFloat16}; }
  std::vector<BackendInfo> backends() const override {
    return {{"kiln", "the op through kiln::ops (4-5 launches, silu_and_mul in the first GEMM's epilogue)"},
            {"reference", "one warp per activation element, then one per output element, fp32 (the refcheck "
                          "baseline)"}};
  }
  StatusOr<CaseSpec> Describe(const ShapeAxes& shape, DType dtype) const override {
    const int64_t tokens = AxisValue(shape, "tokens"), top_k = AxisValue(shape, "top_k");
    const int64_t experts = AxisValue(shape, "experts"), hidden = AxisValue(shape, "hidden");
    const int64_t inter = AxisValue(shape, "intermediate"), gate_up = AxisValue(shape, "gate_up");
    const int64_t ws = AxisValue(shape, "workspace_bytes");
    KILN_RETURN_IF_ERROR(
        CheckFusedMoeAxes(name(), shape, 8, ops::fused_moe_workspace_bytes(tokens, top_k, experts, hidden, inter)));
    CaseSpec spec;
    spec.axes = shape;
    const double h = static_cast<double>(hidden), i = static_cast<double>(inter);
    TensorSpec x{"x", dtype, {tokens, hidden}, TensorRole::kInput};
    x.lo = -1;
    x.hi = 1;
    TensorSpec w13{"w13", dtype, {experts, gate_up, hidden}, TensorRole::kInput};
    w13.lo = -std::sqrt(3.0 / h);
    w13.hi = std::sqrt(3.0 / h);
    TensorSpec w2{"w2", dtype, {experts, hidden, inter}, TensorRole::kInput};
    w2.lo = -std::sqrt(3.0 / i);
    w2.hi = std::sqrt(3.0 / i);
    TensorSpec ids{"topk_ids", DType::kInt32, {tokens, top_k}, TensorRole::kInput};
    ids.routine_fills = true;
    TensorSpec weights{"topk_weights", DType::kFloat32, {tokens, top_k}, TensorRole::kInput};
    weights.lo = 0;
    weights.hi = 1;
    TensorSpec workspace{"workspace", DType::kUInt8, {ws}, TensorRole::kInput};
    workspace.routine_fills = true;  // scratch: its contents do not matter
    spec.tensors = {{"out", dtype, {tokens, hidden}, TensorRole::kOutput}, x, w13, w2, ids, weights, workspace};
    const std::vector<int> routed = FusedMoeRoutedIds(tokens, top_k, experts);
    const double selected = static_cast<double>(std::set<int>(routed.begin(), routed.end()).size());
    const double rows = static_cast<double>(tokens * top_k);
    const double elem = static_cast<double>(DTypeSize(dtype));
    // The selected experts' weights once; x and out once; the gathered rows, the activations and
    // the experts' outputs written and read once each; the ids and weights.
    const double weight_bytes = selected * 3.0 * h * i * elem;
    spec.bytes = weight_bytes + 2.0 * static_cast<double>(tokens) * h * elem + 2.0 * rows * (2.0 * h + i) * elem +
                 8.0 * rows;
    spec.footprint = spec.bytes;
    spec.flops = 6.0 * rows * h * i;
    return spec;
  }

  Status FillInputs(const CaseSpec& spec, const ShapeAxes& shape, std::mt19937_64& rng,
                    std::vector<HostTensor>* tensors) const override {
    FillFusedMoeIds(shape, &(*tensors)[kIds]);
    return OkStatus();
  }

  ShapeAxes SmallShape() const override { return Shape(7, 2, 8, 64, 32); }
  // A token alone; awkward counts (3 tokens, 33 experts with some empty); top_k 1 and 8; every
  // token to the experts of a few; the models' widths at small token counts.
  std::vector<ShapeAxes> CheckShapes() const override {
    return {SmallShape(),
            Shape(1, 2, 8, 256, 128),
            Shape(3, 1, 33, 136, 40),
            Shape(64, 8, 128, 256, 96),
            Shape(100, 2, 4, 512, 264),
            Shape(16, 8, 256, 128, 64)};
  }

  Status CpuReference(const CaseSpec& spec, const std::vector<HostTensor>& t,
                      std::map<size_t, std::vector<double>>* expected) const override {
    const int64_t tokens = spec.tensors[kX].shape[0], hidden = spec.tensors[kX].shape[1];
    const int64_t experts = spec.tensors[kW13].shape[0], inter = spec.tensors[kW13].shape[1] / 2;
    const int64_t top_k = spec.tensors[kIds].shape[1];
    const DType dtype = spec.tensors[kX].dtype;
    std::vector<double> out(static_cast<size_t>(tokens * hidden), 0.0), act(static_cast<size_t>(inter));
    for (int64_t tk = 0; tk < tokens; ++tk)
      for (int64_t j = 0; j < top_k; ++j) {
        const auto e = static_cast<int64_t>(t[kIds].Get(static_cast<size_t>(tk * top_k + j)));
        if (e < 0 || e >= experts) continue;
        for (int64_t i = 0; i < inter; ++i) {
          double gate = 0, up = 0;
          for (int64_t k = 0; k < hidden; ++k) {
            const double xv = t[kX].Get(static_cast<size_t>(tk * hidden + k));
            gate += xv * t[kW13].Get(static_cast<size_t>((e * 2 * inter + i) * hidden + k));
            up += xv * t[kW13].Get(static_cast<size_t>((e * 2 * inter + inter + i) * hidden + k));
          }
          act[static_cast<size_t>(i)] = RoundTo(gate / (1.0 + std::exp(-gate)) * up, dtype);
        }
        const double w = t[kWeights].Get(static_cast<size_t>(tk * top_k + j));
        for (int64_t h = 0; h < hidden; ++h) {
          double y = 0;
          for (int64_t i = 0; i < inter; ++i)
            y += act[static_cast<size_t>(i)] * t[kW2].Get(static_cast<size_t>((e * hidden + h) * inter + i));
          out[static_cast<size_t>(tk * hidden + h)] += w * RoundTo(y, dtype);
        }
      }
    (*expected)[kOut] = std::move(out);
    return OkStatus();
  }

  StatusOr<BackendFn> Prepare(const std::string& backend, const CaseSpec& spec, const ShapeAxes& shape,
                              DType dtype) const override {
    if (backend == "kiln") {
      KILN_RETURN_IF_ERROR(RequireSm90(moe::kFusedMoeOp));
      return BackendFn([](const TensorSet& t, CUstream stream) {
        return ops::fused_moe(t[kOut], t[kX], t[kW13], t[kW2], t[kIds], t[kWeights], t[kWorkspace], stream);
      });
    }
    if (backend == "reference") {
      KILN_ASSIGN_OR_RETURN(auto act_kernel, LoadReferenceKernel("kiln_bench_ref_fused_moe", kReferenceSource,
                                                                 "kiln_bench_ref_fused_moe_act", dtype));
      KILN_ASSIGN_OR_RETURN(auto out_kernel, LoadReferenceKernel("kiln_bench_ref_fused_moe", kReferenceSource,
                                                                 "kiln_bench_ref_fused_moe_out", dtype));
      const long long tokens = AxisValue(shape, "tokens"), hidden = AxisValue(shape, "hidden");
      const long long inter = AxisValue(shape, "intermediate");
      const int top_k = static_cast<int>(AxisValue(shape, "top_k"));
      const int experts = static_cast<int>(AxisValue(shape, "experts"));
      return BackendFn(
          [act_kernel, out_kernel, tokens, hidden, inter, top_k, experts](const TensorSet& t, CUstream stream) {
            const long long slots = tokens * top_k;
            KILN_RETURN_IF_ERROR(act_kernel(FusedMoeReferenceGrid(inter, slots, stream), t[kWorkspace].data, t[kX].data,
                                            t[kW13].data, t[kIds].data, slots, top_k, experts, hidden, inter));
            return out_kernel(FusedMoeReferenceGrid(hidden, tokens, stream), t[kOut].data, t[kWorkspace].data,
                              t[kW2].data, t[kIds].data, t[kWeights].data, tokens, top_k, experts, hidden, inter);
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
            {"workspace_bytes", ops::fused_moe_workspace_bytes(tokens, top_k, experts, hidden, inter)}};
  }
};

}  // namespace

KILN_BENCH_REGISTER_ROUTINE(FusedMoeRoutine);

}  // namespace kiln::bench
