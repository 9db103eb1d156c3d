#include "kernels/ops/norm/rmsnorm_generator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/generator_support.h"
#include "kiln/norm/norm_contract.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

constexpr DTypeInfo kDTypes[] = {kFp32Info, kFp16Info, kBf16Info};

constexpr const char* kUnitPath = "src/norm/rmsnorm.cu";

// Host memory of one compile. Measured on CUDA 13.0 (NVRTC runs ptxas in process): a fresh
// process's ru_maxrss grows by 40-52 MB during one compile, over fp32/bf16, hidden 1..65536,
// vec 1..8, sm_80 and sm_90a (peak 73-84 MB including the 32 MB of a process that has
// loaded NVRTC). 128 MB leaves headroom for -pch (its heap held ~7.5 MB here) and for
// larger specializations.
constexpr int64_t kCompileMemoryMb = 128;

int CeilDiv(int a, int b) { return (a + b - 1) / b; }

class RmsNormGenerator : public OpGenerator {
 public:
  explicit RmsNormGenerator(bool fused_add) : fused_add_(fused_add) {}

  std::string_view name() const override { return fused_add_ ? norm::kFusedAddRmsNormOp : norm::kRmsNormOp; }
  std::string_view family() const override { return "norm"; }

  std::string_view description() const override {
    return fused_add_ ? "x = input + residual (rounded to dtype); residual = x; "
                        "input = x * rsqrt(mean(x^2) + eps) * weight, per row, in place"
                      : "out = input * rsqrt(mean(input^2) + eps) * weight, per row "
                        "(out may be input)";
  }

  std::vector<ParamInfo> params() const override {
    return {
        {.name = kParamDType, .help = "element type of every tensor", .choices = DTypeNames(kDTypes)},
        {.name = norm::kParamHidden,
         .kind = ParamInfo::Kind::kInt,
         .help = "row length in elements (the reduction shape is compiled in)",
         .min = 1,
         .max = norm::kMaxHidden},
        VecParam("elements per vector access: vec * sizeof(dtype) <= 16 and vec divides hidden; pointers "
                 "and row strides must be multiples of it. auto: the largest such value"),
    };
  }

  // bf16 arithmetic (cvt.rn.bf16.f32) needs sm_80; one portable family keeps sm_90 devices on
  // plain sm_90 code (nothing here needs sm_90a features).
  std::vector<ArchFamily> arch_families() const override { return {FamilyAtLeast(80)}; }

 protected:
  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const DTypeInfo& dtype = FindDType(kDTypes, values.Text(kParamDType));
    const int hidden = values.Int(norm::kParamHidden);
    KILN_ABSL_ASSIGN_OR_RETURN(const int vec, ResolveVec(op, values, dtype, hidden, norm::kParamHidden));
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit, UnitFromTree(op, tree, kUnitPath));

    const RmsNormLaunchShape shape = ChooseRmsNormShape(hidden, vec, dtype.bytes);
    JitSpec spec;
    spec.uri = absl::StrCat(op, "_", dtype.name, "_h", hidden, VecSuffix(vec, WidestVec(dtype.bytes, hidden)));
    spec.params = {
        {kParamDType, dtype.name}, {norm::kParamHidden, std::to_string(hidden)}, {kParamVec, std::to_string(vec)}};
    spec.headers.push_back(ConfigHeader(op, spec.uri, "kernels/ops/norm/rmsnorm_generator.cpp",
                                        {{"KILN_RMSNORM_FUSED_ADD", fused_add_ ? "1" : "0"},
                                         {"KILN_RMSNORM_T", dtype.cuda_type},
                                         {"KILN_RMSNORM_HIDDEN", std::to_string(hidden)},
                                         {"KILN_RMSNORM_VEC", std::to_string(shape.vec)},
                                         {"KILN_RMSNORM_THREADS_PER_ROW", std::to_string(shape.threads_per_row)},
                                         {"KILN_RMSNORM_ROWS_PER_BLOCK", std::to_string(shape.rows_per_block)}}));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    const char* entry = fused_add_ ? norm::kFusedAddRmsNormEntry : norm::kRmsNormEntry;
    spec.entries = {entry};
    spec.launch = {{.entry = entry, .block = shape.block, .items_per_block = shape.rows_per_block}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }

 private:
  bool fused_add_;
};

KILN_REGISTER_OP_GENERATOR(RmsNormGenerator, false);
KILN_REGISTER_OP_GENERATOR(RmsNormGenerator, true);

}  // namespace

RmsNormLaunchShape ChooseRmsNormShape(int hidden, int vec, int dtype_bytes) {
  // 4 vectors per thread keep 16 data registers for a 16-byte vector, leave headroom for
  // __launch_bounds__(1024)'s 64-register cap, and still give each thread 4 independent
  // loads in flight; a row of up to 128 vectors fits one warp.
  constexpr int kItemsPerThreadTarget = 4;
  constexpr int kSmallRowBlock = 128;
  RmsNormLaunchShape shape;
  shape.vec = vec;
  const int vectors = hidden / vec;
  if (vectors <= 32) {
    int group = 1;
    while (group < vectors) group *= 2;
    shape.threads_per_row = group;
    shape.rows_per_block = kSmallRowBlock / group;
  } else if (vectors <= 32 * kItemsPerThreadTarget) {
    shape.threads_per_row = 32;
    shape.rows_per_block = kSmallRowBlock / 32;
  } else {
    shape.threads_per_row = std::min(1024, CeilDiv(CeilDiv(vectors, kItemsPerThreadTarget), 32) * 32);
    shape.rows_per_block = 1;
    if (shape.threads_per_row == 1024) {
      // A thread holds its vectors in 32-bit registers (a 2-byte scalar still takes one).
      const int registers_per_vector = std::max(1, vec * dtype_bytes / 4);
      auto data_registers = [&](int threads) { return CeilDiv(vectors, threads) * registers_per_vector; };
      if (data_registers(1024) > 24 && data_registers(512) <= 96) shape.threads_per_row = 512;
    }
  }
  shape.block = shape.threads_per_row * shape.rows_per_block;
  shape.items_per_thread = CeilDiv(vectors, shape.threads_per_row);
  return shape;
}

}  // namespace kiln::kernels
