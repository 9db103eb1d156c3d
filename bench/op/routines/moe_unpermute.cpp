// Routine "moe_unpermute" (kiln::ops::moe_unpermute), the combine: expert_out [rows, hidden] (the
// experts' output rows in moe_permute's layout) -> out [tokens, hidden], out[t] = sum over j of
// topk_weights[t, j] * expert_out[slot_to_row[t, j]]. The map is drawn like moe_permute's: the
// slots take distinct rows (a random permutation); when a case has fewer rows than slots, the
// slots past them get -1 (no row), so the check shapes cover skipped choices.
//
// backends: kiln (the op: one thread per 16-byte unit of a token's row), reference (one thread
// per output element, fp32 sum in the order of j). Outputs are compared with the dtype's
// tolerance against the float64 CPU reference.
#include <algorithm>
#include <numeric>
#include <vector>

#include "bench/op/reference_kernel.h"
#include "bench/op/routine.h"
#include "client/core/api/invalid_argument.h"
#include "kiln/moe/moe_contract.h"
#include "kiln/ops/moe.h"

namespace kiln::bench {
namespace {

// The tensors of a case, in CaseSpec order.
enum : size_t { kOut = 0, kExpertOut, kSlotToRow, kWeights };

constexpr const char* kReferenceSource = R"(
// One thread per element of out: the valid rows of its token, in the order of j, in fp32.
extern "C" __global__ void kiln_bench_ref_moe_unpermute(T* out, const T* expert_out, const int* slot_to_row,
                                                        const float* weights, long long tokens, int top_k,
                                                        long long hidden, long long rows) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= tokens * hidden) return;
  const long long t = i / hidden, h = i % hidden;
  float acc = 0.0f;
  for (int j = 0; j < top_k; ++j) {
    const int r = slot_to_row[t * top_k + j];
    if (r >= 0 && r < rows) acc += weights[t * top_k + j] * ToF(expert_out[r * hidden + h]);
  }
  out[i] = FromF<T>(acc);
}
)";

class MoeUnpermuteRoutine : public Routine {
 public:
  std::string_view name() const override { return moe::kMoeUnpermuteOp; }
  std::string_view description() const override {
    return "the combine: the experts' output rows back to one weighted sum per token (kiln::ops::moe_unpermute)";
  }
  std::vector<std::string> axes() const override { return {"tokens", "top_k", "hidden", "rows"}; }
  std::vector<DType> dtypes() const override { return {DType::kBFloat16, DType::kFloat16}; }
  std::vector<BackendInfo> backends() const override {
    return {{"kiln", "the op through kiln::ops (one thread per 16-byte unit of a token's row)"},
            {"reference", "one thread per output element, fp32 in the order of j (the refcheck baseline)"}};
  }

  StatusOr<CaseSpec> Describe(const ShapeAxes& shape, DType dtype) const override {
    const int64_t tokens = AxisValue(shape, "tokens"), top_k = AxisValue(shape, "top_k");
    const int64_t hidden = AxisValue(shape, "hidden"), rows = AxisValue(shape, "rows");
    const std::string where = std::string(name()) + ": ";
    if (top_k < 1 || top_k > moe::kMaxTopK)
      return client::InvalidArgument(where + "top_k=" + std::to_string(top_k) + " is outside 1.." +
                                     std::to_string(moe::kMaxTopK));
    if (tokens < 1 || hidden < 1 || rows < 0)
      return client::InvalidArgument(where + "tokens and hidden must be at least 1, rows at least 0");
    CaseSpec spec;
    spec.axes = shape;
    TensorSpec map{"slot_to_row", DType::kInt32, {tokens, top_k}, TensorRole::kInput};
    map.routine_fills = true;
    TensorSpec weights{"topk_weights", DType::kFloat32, {tokens, top_k}, TensorRole::kInput};
    weights.lo = 0;
    weights.hi = 1;
    spec.tensors = {{"out", dtype, {tokens, hidden}, TensorRole::kOutput},
                    {"expert_out", dtype, {rows, hidden}, TensorRole::kInput},
                    map,
                    weights};
    // Each valid slot's row read once, out written once, the indices and weights read once.
    const double valid = static_cast<double>(std::min(tokens * top_k, rows));
    spec.bytes = 2.0 * static_cast<double>(hidden) * (valid + static_cast<double>(tokens)) +
                 8.0 * static_cast<double>(tokens * top_k);
    return spec;
  }

  // Distinct rows for the slots (a shuffle of the rows); slots past the rows get -1.
  Status FillInputs(const CaseSpec& spec, const ShapeAxes& shape, std::mt19937_64& rng,
                    std::vector<HostTensor>* tensors) const override {
    const int64_t slots = AxisValue(shape, "tokens") * AxisValue(shape, "top_k");
    const int64_t rows = AxisValue(shape, "rows");
    std::vector<int64_t> perm(static_cast<size_t>(rows));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    HostTensor& map = (*tensors)[kSlotToRow];
    for (int64_t s = 0; s < slots; ++s)
      map.Set(static_cast<size_t>(s), s < rows ? static_cast<double>(perm[static_cast<size_t>(s)]) : -1.0);
    return OkStatus();
  }

  ShapeAxes SmallShape() const override { return Shape(7, 3, 64, 21); }
  // One token; one unit per row; hidden sizes that take 8-, 4- and 2-byte units; fewer rows than
  // slots (-1 entries); top_k 16; the models' sizes.
  std::vector<ShapeAxes> CheckShapes() const override {
    return {SmallShape(),
            Shape(1, 2, 4096, 2),
            Shape(33, 1, 8, 33),
            Shape(64, 8, 4, 512),
            Shape(64, 8, 2050, 512),
            Shape(100, 2, 2049, 150),
            Shape(50, 16, 256, 800),
            Shape(64, 8, 7168, 512),
            Shape(1000, 8, 2048, 8000)};
  }

  Status CpuReference(const CaseSpec& spec, const std::vector<HostTensor>& t,
                      std::map<size_t, std::vector<double>>* expected) const override {
    const int64_t tokens = spec.tensors[kOut].shape[0], hidden = spec.tensors[kOut].shape[1];
    const int64_t rows = spec.tensors[kExpertOut].shape[0], top_k = spec.tensors[kSlotToRow].shape[1];
    std::vector<double> out(static_cast<size_t>(tokens * hidden), 0.0);
    for (int64_t tk = 0; tk < tokens; ++tk)
      for (int64_t j = 0; j < top_k; ++j) {
        const auto r = static_cast<int64_t>(t[kSlotToRow].Get(static_cast<size_t>(tk * top_k + j)));
        if (r < 0 || r >= rows) continue;
        const double w = t[kWeights].Get(static_cast<size_t>(tk * top_k + j));
        for (int64_t h = 0; h < hidden; ++h)
          out[static_cast<size_t>(tk * hidden + h)] += w * t[kExpertOut].Get(static_cast<size_t>(r * hidden + h));
      }
    (*expected)[kOut] = std::move(out);
    return OkStatus();
  }

  StatusOr<BackendFn> Prepare(const std::string& backend, const CaseSpec& spec, const ShapeAxes& shape,
                              DType dtype) const override {
    if (backend == "kiln") {
      return BackendFn([](const TensorSet& t, CUstream stream) {
        return ops::moe_unpermute(t[kOut], t[kExpertOut], t[kSlotToRow], t[kWeights], stream);
      });
    }
    if (backend == "reference") {
      KILN_ASSIGN_OR_RETURN(auto kernel, LoadReferenceKernel("kiln_bench_ref_moe_unpermute", kReferenceSource,
                                                             "kiln_bench_ref_moe_unpermute", dtype));
      const long long tokens = AxisValue(shape, "tokens"), hidden = AxisValue(shape, "hidden");
      const long long rows = AxisValue(shape, "rows");
      const int top_k = static_cast<int>(AxisValue(shape, "top_k"));
      return BackendFn([k = kernel, tokens, hidden, rows, top_k](const TensorSet& t, CUstream stream) {
        LaunchConfig config;
        config.block.x = 256;
        config.grid.x = static_cast<unsigned>((tokens * hidden + 255) / 256);
        config.stream = stream;
        return k(config, t[kOut].data, t[kExpertOut].data, t[kSlotToRow].data, t[kWeights].data, tokens, top_k, hidden,
                 rows);
      });
    }
    return Status(StatusCode::kNotFound, std::string(name()) + " has no backend '" + backend + "'");
  }

 private:
  static ShapeAxes Shape(int64_t tokens, int64_t top_k, int64_t hidden, int64_t rows) {
    return {{"tokens", tokens}, {"top_k", top_k}, {"hidden", hidden}, {"rows", rows}};
  }
};

}  // namespace

KILN_BENCH_REGISTER_ROUTINE(MoeUnpermuteRoutine);

}  // namespace kiln::bench
