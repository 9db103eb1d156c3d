// The generator of scale_add (kiln/elementwise/elementwise_contract.h): one specialization per
// dtype; n is a launch argument.
#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/generator_support.h"
#include "kiln/elementwise/elementwise_contract.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

constexpr DTypeInfo kDTypes[] = {kFp16Info, kBf16Info};
constexpr const char* kUnitPath = "src/elementwise/scale_add.cu";
// 256 threads of 4 elements each: 1024 elements (2 KiB of each tensor) per block.
constexpr int kBlock = 256;
constexpr int kItemsPerThread = 4;

class ScaleAddGenerator : public OpGenerator {
 public:
  std::string_view name() const override { return elementwise::kScaleAddOp; }
  std::string_view family() const override { return "elementwise"; }
  std::string_view description() const override {
    return "out = alpha * x + y over tensors of one shape, in fp32, rounded once";
  }
  std::vector<ParamInfo> params() const override {
    return {{.name = kParamDType, .help = "element type of x, y and out", .choices = DTypeNames(kDTypes)}};
  }
  std::vector<ArchFamily> arch_families() const override { return {FamilyAtLeast(80)}; }

 protected:
  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const DTypeInfo& dtype = FindDType(kDTypes, values.Text(kParamDType));
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit, UnitFromTree(op, tree, kUnitPath));
    JitSpec spec;
    spec.uri = absl::StrCat(op, "_", dtype.name);
    spec.params = {{kParamDType, dtype.name}};
    spec.headers.push_back(ConfigHeader(op, spec.uri, "kernels/ops/elementwise/scale_add_generator.cpp",
                                        {{"KILN_SCALE_ADD_T", dtype.cuda_type},
                                         {"KILN_SCALE_ADD_BLOCK", std::to_string(kBlock)},
                                         {"KILN_SCALE_ADD_ITEMS", std::to_string(kItemsPerThread)}}));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {elementwise::kScaleAddEntry};
    spec.launch = {{.entry = elementwise::kScaleAddEntry, .block = kBlock, .items_per_block = kBlock * kItemsPerThread}};
    spec.compile_memory_mb = 128;
    return spec;
  }
};

KILN_REGISTER_OP_GENERATOR(ScaleAddGenerator);

}  // namespace
}  // namespace kiln::kernels
