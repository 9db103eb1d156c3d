// The generator of moe_unpermute (the moe family), the combine: one compilation unit
// (kernels/src/moe/moe_unpermute.cu) specialized on the element type of expert_out and out; the
// copy unit, tokens, top_k, the rows and the hidden size are launch arguments, so one cubin per
// dtype serves every model. Contract: kiln/moe/moe_contract.h, docs/kernels-moe.md.
#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/generator_support.h"
#include "kiln/moe/moe_contract.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

constexpr DTypeInfo kDTypes[] = {kFp16Info, kBf16Info};
constexpr const char* kUnitPath = "src/moe/moe_unpermute.cu";

// Host memory of one compile: a small unit (four copies of one short loop body); the norm
// family's 128 MB (measured there for units of this size, ptxas in process) covers it.
constexpr int64_t kCompileMemoryMb = 128;

class MoeUnpermuteGenerator : public OpGenerator {
 public:
  std::string_view name() const override { return moe::kMoeUnpermuteOp; }
  std::string_view family() const override { return "moe"; }
  std::string_view description() const override {
    return "the combine of a mixture of experts: expert_out [R, H] (the grouped GEMM's output rows in moe_permute's "
           "layout) -> out [T, H], out[t] = sum over j of topk_weights[t, j] * expert_out[slot_to_row[t, j]] in fp32 "
           "in the order of j, rows outside [0, R) (-1) skipped, a token without rows zeros; deterministic";
  }

  std::vector<ParamInfo> params() const override {
    return {{.name = kParamDType, .help = "element type of expert_out and out", .choices = DTypeNames(kDTypes)}};
  }

  // bf16 conversions need sm_80, the family the library targets.
  std::vector<ArchFamily> arch_families() const override { return {FamilyAtLeast(80)}; }

 protected:
  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const DTypeInfo& dtype = FindDType(kDTypes, values.Text(kParamDType));
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit, UnitFromTree(op, tree, kUnitPath));

    JitSpec spec;
    spec.uri = absl::StrCat(op, "_", dtype.name);
    spec.params = {{kParamDType, dtype.name}};
    spec.headers.push_back(ConfigHeader(op, spec.uri, "kernels/ops/moe/moe_unpermute_generator.cpp",
                                        {{"KILN_MOE_UNPERMUTE_T", dtype.cuda_type}}));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {moe::kMoeUnpermuteEntry};
    // items_per_block: units of one token's row (grid.y = MoeUnpermuteBlocksPerRow); the block is
    // the most threads the client launches (MoeUnpermuteThreads may take fewer).
    spec.launch = {
        {.entry = moe::kMoeUnpermuteEntry, .block = moe::kUnpermuteBlock, .items_per_block = moe::kUnpermuteBlock}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }
};

KILN_REGISTER_OP_GENERATOR(MoeUnpermuteGenerator);

}  // namespace
}  // namespace kiln::kernels
