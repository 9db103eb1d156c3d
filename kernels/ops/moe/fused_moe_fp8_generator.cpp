// The generator of fused_moe_fp8 (the moe family): its own kernels, the two that quantize the
// layer's activations to block-scaled e4m3 (the gathered tokens; silu(gate) * up) and the decode
// path's two GEMVs on the e4m3 experts (fp8 tensor-core MMAs over each chosen expert's slots), one
// compilation unit (kernels/src/moe/fused_moe_fp8.cu) specialized on the activations' element type; rows,
// H, I and top_k are launch arguments, so one cubin serves every model. The layer's other steps
// are moe_permute's, grouped_fp8_gemm's and moe_unpermute's kernels (the trace definition's
// composed_of). Contract: kiln/moe/moe_contract.h, docs/kernels-moe.md.
#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/generator_support.h"
#include "kiln/moe/moe_contract.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

// bf16 only: grouped_fp8_gemm writes bf16 (or fp32), so the layer's rows between its GEMMs and
// its output are bf16 (DeepSeek-V3's and Qwen3's fp8 checkpoints run bf16 activations).
constexpr DTypeInfo kDTypes[] = {kBf16Info};
constexpr const char* kUnitPath = "src/moe/fused_moe_fp8.cu";

// Host memory of one compile: two short elementwise bodies and two GEMVs, about fused_moe's unit
// (its figure: 128 MB, ptxas in process).
constexpr int64_t kCompileMemoryMb = 128;

class FusedMoeFp8Generator : public OpGenerator {
 public:
  std::string_view name() const override { return moe::kFusedMoeFp8Op; }
  std::string_view family() const override { return "moe"; }
  std::string_view description() const override {
    return "a mixture-of-experts layer's activation quantizers for block-scaled fp8 experts: the tokens gathered "
           "into the grouped layout, and silu(gate) * up of the gate-and-up GEMM's rows, each quantized to e4m3 with "
           "an fp32 scale per row and 128 columns (max |v| / 448, an IEEE division, round to nearest even, "
           "saturated); a warp per 256 to 1024 columns of a row, deterministic. grouped_fp8_gemm multiplies what they "
           "write; at decode, two GEMVs over each chosen expert's slots multiply it instead (fp8 MMAs, each "
           "128-column k block promoted into fp32)";
  }

  std::vector<ParamInfo> params() const override {
    return {
        {.name = kParamDType, .help = "element type of x and out (the activations)", .choices = DTypeNames(kDTypes)}};
  }

  // sm_90a only, like grouped_fp8_gemm whose inputs these kernels write (cvt to e4m3 needs sm_89).
  std::vector<ArchFamily> arch_families() const override { return {FamilyArchSpecific(90)}; }

 protected:
  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const DTypeInfo& dtype = FindDType(kDTypes, values.Text(kParamDType));
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit, UnitFromTree(op, tree, kUnitPath));

    JitSpec spec;
    spec.uri = absl::StrCat(op, "_", dtype.name);
    spec.params = {{kParamDType, dtype.name}};
    spec.headers.push_back(ConfigHeader(op, spec.uri, "kernels/ops/moe/fused_moe_fp8_generator.cpp",
                                        {{"KILN_FUSED_MOE_FP8_T", dtype.cuda_type}}));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {moe::kFusedMoeFp8QuantizeEntry, moe::kFusedMoeFp8SiluAndMulQuantizeEntry,
                    moe::kFusedMoeFp8GateUpEntry, moe::kFusedMoeFp8DownEntry};
    // items_per_block (grid.x = ceil(items / items_per_block)): the quantizers' warps, each 256
    // columns of an activation row (moe::FusedMoeFp8QuantBlocks); the GEMVs' widest block's weight
    // rows (their launch divides n by moe::FusedMoeFp8GemvRows(k parts): 64, 32 or 16).
    spec.launch = {
        {.entry = moe::kFusedMoeFp8QuantizeEntry, .block = moe::kFp8QuantBlock, .items_per_block = moe::kFp8QuantWarps},
        {.entry = moe::kFusedMoeFp8SiluAndMulQuantizeEntry,
         .block = moe::kFp8QuantBlock,
         .items_per_block = moe::kFp8QuantWarps},
        {.entry = moe::kFusedMoeFp8GateUpEntry, .block = moe::kGemvBlock, .items_per_block = moe::kFp8GemvColumns},
        {.entry = moe::kFusedMoeFp8DownEntry, .block = moe::kGemvBlock, .items_per_block = moe::kFp8GemvColumns}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }
};

KILN_REGISTER_OP_GENERATOR(FusedMoeFp8Generator);

}  // namespace
}  // namespace kiln::kernels
