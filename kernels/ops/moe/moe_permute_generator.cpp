// The generator of moe_permute (the moe family): one compilation unit
// (kernels/src/moe/moe_permute.cu) with five entries, the permutation (one block, or the
// multi-block count, rank and invert for many slots) and the optional gather,
// specialized on max_experts (the size of the permutation's shared tables); tokens, top_k, E,
// the alignment and the gather's row size are launch arguments. Contract:
// kiln/moe/moe_contract.h, docs/kernels-moe.md.
#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/generator_support.h"
#include "kiln/moe/moe_contract.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

constexpr const char* kUnitPath = "src/moe/moe_permute.cu";

// Host memory of one compile: a small unit without math (moe_route's 128 MB, measured for the
// norm family's units of this size, covers it).
constexpr int64_t kCompileMemoryMb = 128;

class MoePermuteGenerator : public OpGenerator {
 public:
  std::string_view name() const override { return moe::kMoePermuteOp; }
  std::string_view family() const override { return "moe"; }
  std::string_view description() const override {
    return "topk_ids [T, top_k] -> the contiguous grouped layout of grouped_gemm: expert_counts [E], m_indptr "
           "[E + 1] (groups padded to a multiple of align), row_to_slot (permuted row -> slot t * top_k + j, -1 for "
           "padding) and slot_to_row [T, top_k]; stable (slot order inside a group), ids outside [0, E) get no row; "
           "optionally gathers x's rows into permuted_x";
  }

  std::vector<ParamInfo> params() const override {
    return {
        {.name = moe::kParamMaxExperts,
         .help = "the largest E the kernel takes (the size of its shared per-expert tables); the client asks for the "
                 "smallest that holds E",
         .choices = {"32", "64", "128", "256"}},
    };
  }

  // __match_any_sync needs sm_70; the library's family is sm_80+.
  std::vector<ArchFamily> arch_families() const override { return {FamilyAtLeast(80)}; }

 protected:
  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const int max_experts = values.Int(moe::kParamMaxExperts);
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit, UnitFromTree(op, tree, kUnitPath));

    JitSpec spec;
    spec.uri = absl::StrCat(op, "_e", max_experts);
    spec.params = {{moe::kParamMaxExperts, std::to_string(max_experts)}};
    spec.headers.push_back(ConfigHeader(op, spec.uri, "kernels/ops/moe/moe_permute_generator.cpp",
                                        {{"KILN_MOE_PERMUTE_MAX_EXPERTS", std::to_string(max_experts)}}));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {moe::kMoePermuteEntry, moe::kMoePermuteGatherEntry, moe::kMoePermuteCountEntry,
                    moe::kMoePermuteRankEntry, moe::kMoePermuteInvertEntry};
    spec.launch = {
        {.entry = moe::kMoePermuteEntry, .block = moe::kPermuteBlock},
        {.entry = moe::kMoePermuteGatherEntry, .block = moe::kGatherBlock, .items_per_block = moe::kGatherWarps},
        {.entry = moe::kMoePermuteCountEntry, .block = moe::kPermuteBlock},
        {.entry = moe::kMoePermuteRankEntry, .block = moe::kPermuteBlock},
        {.entry = moe::kMoePermuteInvertEntry, .block = moe::kInvertBlock, .items_per_block = moe::kInvertBlock}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }
};

KILN_REGISTER_OP_GENERATOR(MoePermuteGenerator);

}  // namespace
}  // namespace kiln::kernels
