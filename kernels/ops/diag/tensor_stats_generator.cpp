#include "kernels/ops/diag/tensor_stats_generator.h"

#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/generator_support.h"
#include "kiln/diag/diag_contract.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

// Every dtype a kiln::TensorView can hold: API logging takes statistics of any op argument.
// The integer types as kiln/diag/tensor_stats.cuh's ToDouble overloads take them.
constexpr DTypeInfo kDTypes[] = {kFp32Info,
                                 kFp16Info,
                                 kBf16Info,
                                 {"int8", "signed char", 1},
                                 {"uint8", "unsigned char", 1},
                                 {"int32", "int", 4},
                                 {"int64", "long long", 8}};

constexpr const char* kUnitPath = "src/diag/tensor_stats.cu";

// Host memory of one compile. On CUDA 13.0 the compile test's peak RSS (14 compiles, sm_80 and
// sm_90a) is 127 MB against 71 MB for a process of the same suite that compiled nothing: about
// 55 MB, as activation's ~50 MB; so the same 128 MB, with its headroom for -pch.
constexpr int64_t kCompileMemoryMb = 128;

class TensorStatsGenerator : public OpGenerator {
 public:
  std::string_view name() const override { return diag::kTensorStatsOp; }
  std::string_view family() const override { return "diag"; }
  std::string_view description() const override {
    return "statistics of one tensor for API call logging (KILN_LOGLEVEL=5): NaN, Inf and finite "
           "counts, min, max and the sum of the finite elements in double, one partial record per "
           "block (deterministic; the client combines them); any shape and strides";
  }

  std::vector<ParamInfo> params() const override {
    return {{.name = kParamDType,
             .help = "element type of the tensor; the shape and strides are not params, the kernel takes "
                     "them at launch",
             .choices = DTypeNames(kDTypes)}};
  }

  // The device code needs nothing past sm_75 (double shuffles, bf16 widened by a shift), but
  // every op it reports on is sm_80+ (the library's one family), so it serves exactly the
  // devices that can run an op, and no arch that no test covers.
  std::vector<ArchFamily> arch_families() const override { return {FamilyAtLeast(80)}; }

 protected:
  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const DTypeInfo& dtype = FindDType(kDTypes, values.Text(kParamDType));
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit, UnitFromTree(op, tree, kUnitPath));

    JitSpec spec;
    spec.uri = absl::StrCat(op, "_", dtype.name);
    spec.params = {{kParamDType, dtype.name}};
    spec.headers.push_back(
        ConfigHeader(op, spec.uri, "kernels/ops/diag/tensor_stats_generator.cpp",
                     {{"KILN_STATS_T", dtype.cuda_type}, {"KILN_STATS_BLOCK", std::to_string(kTensorStatsBlock)}}));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {diag::kTensorStatsEntry};
    spec.launch = {{.entry = diag::kTensorStatsEntry, .block = kTensorStatsBlock, .max_blocks = kTensorStatsMaxBlocks}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }
};

KILN_REGISTER_OP_GENERATOR(TensorStatsGenerator);

}  // namespace
}  // namespace kiln::kernels
