// The generator of fused_moe (the moe family): its own kernels, the decode path's two GEMVs (gate
// and up with silu_and_mul, then down; each also in its form for the folded combine; both in one
// grid after a preparing block), one compilation unit (kernels/src/moe/fused_moe.cu) specialized
// on the element type; tokens, top_k, E, H and I are launch arguments, so one cubin per dtype
// serves every model. The grouped path launches moe_permute's, grouped_gemm's and
// moe_unpermute's kernels (the trace definition's composed_of). Contract: kiln/moe/moe_contract.h, docs/kernels-moe.md.
#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/generator_support.h"
#include "kiln/moe/moe_contract.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

constexpr DTypeInfo kDTypes[] = {kFp16Info, kBf16Info};
constexpr const char* kUnitPath = "src/moe/fused_moe.cu";

// Host memory of one compile: two short GEMV bodies of four pass widths each, the size of the
// moe_unpermute unit's class; the norm family's 128 MB (measured there, ptxas in process) covers it.
constexpr int64_t kCompileMemoryMb = 128;

class FusedMoeGenerator : public OpGenerator {
 public:
  std::string_view name() const override { return moe::kFusedMoeOp; }
  std::string_view family() const override { return "moe"; }
  std::string_view description() const override {
    return "a mixture-of-experts layer's decode path for a few routed tokens: act[s] = silu(w13[e, :I] . x[t]) * "
           "(w13[e, I:] . x[t]), then y[s] = w2[e] . act[s], for each slot s = (t, j) with e = topk_ids[t, j] in [0, "
           "E); a block per chosen expert and column group reads that expert's rows once per two of its slots; fp32 "
           "sums, rounded once; deterministic. moe_unpermute combines y (the grouped path uses moe_permute and "
           "grouped_gemm instead)";
  }

  std::vector<ParamInfo> params() const override {
    return {{.name = kParamDType, .help = "element type of x, the weights and out", .choices = DTypeNames(kDTypes)}};
  }

  // sm_90a only, like the grouped path's kernels (wgmma, TMA): the GEMVs would run on sm_80, but
  // then whether a call succeeds would depend on its token count; the decode path also launches
  // with griddepcontrol, which sm_90 brought.
  std::vector<ArchFamily> arch_families() const override { return {FamilyArchSpecific(90)}; }

 protected:
  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const DTypeInfo& dtype = FindDType(kDTypes, values.Text(kParamDType));
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit, UnitFromTree(op, tree, kUnitPath));

    JitSpec spec;
    spec.uri = absl::StrCat(op, "_", dtype.name);
    spec.params = {{kParamDType, dtype.name}};
    spec.headers.push_back(
        ConfigHeader(op, spec.uri, "kernels/ops/moe/fused_moe_generator.cpp", {{"KILN_FUSED_MOE_T", dtype.cuda_type}}));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {moe::kFusedMoeGateUpEntry,     moe::kFusedMoeDownEntry,           moe::kFusedMoeGateUpFoldedEntry,
                    moe::kFusedMoeDownFoldedEntry, moe::kFusedMoeOneGridPrepareEntry, moe::kFusedMoeOneGridEntry};
    // items_per_block: output columns per block (grid.x = ceil(columns / items_per_block)); the
    // folded down GEMV's: per column group (grid.x also divides by its column_groups).
    spec.launch = {
        {.entry = moe::kFusedMoeGateUpEntry, .block = moe::kGemvBlock, .items_per_block = moe::kGemvGateUpColumns},
        {.entry = moe::kFusedMoeDownEntry, .block = moe::kGemvBlock, .items_per_block = moe::kGemvDownColumns},
        {.entry = moe::kFusedMoeGateUpFoldedEntry,
         .block = moe::kGemvBlock,
         .items_per_block = moe::kGemvGateUpColumns},
        {.entry = moe::kFusedMoeDownFoldedEntry, .block = moe::kGemvBlock, .items_per_block = moe::kGemvDownColumns},
        // The one-grid form: a block's columns depend on its role (its ticket), so no items.
        {.entry = moe::kFusedMoeOneGridPrepareEntry, .block = moe::kGemvBlock},
        {.entry = moe::kFusedMoeOneGridEntry, .block = moe::kGemvBlock}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }
};

KILN_REGISTER_OP_GENERATOR(FusedMoeGenerator);

}  // namespace
}  // namespace kiln::kernels
