// The generator of moe_route (the moe family): one compilation unit (kernels/src/moe/moe_route.cu),
// specialized on logits' dtype, the scoring and max_experts (the values each lane holds); every
// other choice is a launch argument. Contract: kiln/moe/moe_contract.h, docs/kernels-moe.md.
#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/generator_support.h"
#include "kiln/moe/moe_contract.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

constexpr DTypeInfo kDTypes[] = {kFp32Info, kFp16Info, kBf16Info};
constexpr const char* kUnitPath = "src/moe/moe_route.cu";

// Host memory of one compile: a small unit (one warp per token, at most 8 values per lane); the
// norm family's 128 MB (measured there for units of this size, ptxas in process) covers it.
constexpr int64_t kCompileMemoryMb = 128;

class MoeRouteGenerator : public OpGenerator {
 public:
  std::string_view name() const override { return moe::kMoeRouteOp; }
  std::string_view family() const override { return "moe"; }
  std::string_view description() const override {
    return "router logits [T, E] -> the top_k experts of each token (topk_ids int32, ties: the lower id) and their "
           "weights (fp32): softmax or sigmoid scores, an optional correction bias for the choice only, an optional "
           "group limit (DeepSeek-V3), optional renormalization, a scaling factor";
  }

  std::vector<ParamInfo> params() const override {
    return {
        {.name = kParamDType, .help = "element type of logits", .choices = DTypeNames(kDTypes)},
        {.name = moe::kParamScoring,
         .help = "the experts' scores: softmax over the row, or an elementwise sigmoid",
         .choices = {moe::kScoringSoftmax, moe::kScoringSigmoid}},
        {.name = moe::kParamMaxExperts,
         .help = "the largest E the kernel takes (E values of a row over one warp: max_experts / 32 per lane); "
                 "the client asks for the smallest that holds E",
         .choices = {"32", "64", "128", "256"}},
    };
  }

  // bf16 loads (and fp64 math) need nothing beyond sm_80, the family the library targets.
  std::vector<ArchFamily> arch_families() const override { return {FamilyAtLeast(80)}; }

 protected:
  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const DTypeInfo& dtype = FindDType(kDTypes, values.Text(kParamDType));
    const std::string scoring(values.Text(moe::kParamScoring));
    const int max_experts = values.Int(moe::kParamMaxExperts);
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit, UnitFromTree(op, tree, kUnitPath));

    JitSpec spec;
    spec.uri = absl::StrCat(op, "_", dtype.name, "_", scoring, "_e", max_experts);
    spec.params = {
        {kParamDType, dtype.name}, {moe::kParamScoring, scoring}, {moe::kParamMaxExperts, std::to_string(max_experts)}};
    spec.headers.push_back(ConfigHeader(op, spec.uri, "kernels/ops/moe/moe_route_generator.cpp",
                                        {{"KILN_MOE_T", dtype.cuda_type},
                                         {"KILN_MOE_SIGMOID", scoring == moe::kScoringSigmoid ? "1" : "0"},
                                         {"KILN_MOE_SLOTS", std::to_string(max_experts / 32)},
                                         {"KILN_MOE_WARPS", std::to_string(moe::kWarpsPerBlock)}}));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {moe::kMoeRouteEntry};
    spec.launch = {{.entry = moe::kMoeRouteEntry, .block = moe::kBlock, .items_per_block = moe::kWarpsPerBlock}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }
};

KILN_REGISTER_OP_GENERATOR(MoeRouteGenerator);

}  // namespace
}  // namespace kiln::kernels
