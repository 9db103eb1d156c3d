#include "kernels/ops/decode/append_paged_kv_generator.h"

#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/generator_support.h"
#include "kiln/decode/decode_contract.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

constexpr DTypeInfo kDTypes[] = {kFp16Info, kBf16Info};

constexpr const char* kUnitPath = "src/decode/append_paged_kv.cu";

// A small copy kernel: the same budget as rmsnorm's (whose compiles grow ru_maxrss by 40-52 MB).
constexpr int64_t kCompileMemoryMb = 128;

class AppendPagedKvGenerator : public OpGenerator {
 public:
  std::string_view name() const override { return decode::kAppendPagedKvOp; }
  std::string_view family() const override { return "decode"; }

  std::string_view description() const override {
    return "writes new tokens' k and v [nnz, num_kv_heads, head_dim] into their slots of a paged KV "
           "cache (page = kv_indices[kv_indptr[b] + pos / page_size], slot = pos % page_size)";
  }

  std::vector<ParamInfo> params() const override {
    return {
        {.name = kParamDType, .help = "element type of k, v and the KV cache", .choices = DTypeNames(kDTypes)},
        {.name = decode::kParamHeadDim, .help = "elements per head", .choices = {"64", "128", "256"}},
        VecParam("elements per vector access; every pointer and stride must be a multiple of it. auto: 16 "
                 "bytes"),
    };
  }

  // A copy: nothing needs more than sm_80 (the family's floor, shared with batch_decode).
  std::vector<ArchFamily> arch_families() const override { return {FamilyAtLeast(80)}; }

 protected:
  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const DTypeInfo& dtype = FindDType(kDTypes, values.Text(kParamDType));
    const int head_dim = values.Int(decode::kParamHeadDim);
    KILN_ABSL_ASSIGN_OR_RETURN(const int vec, ResolveVec(op, values, dtype));
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit, UnitFromTree(op, tree, kUnitPath));

    JitSpec spec;
    spec.uri = absl::StrCat(op, "_", dtype.name, "_d", head_dim, VecSuffix(vec, WidestVec(dtype.bytes)));
    spec.params = {
        {kParamDType, dtype.name}, {decode::kParamHeadDim, std::to_string(head_dim)}, {kParamVec, std::to_string(vec)}};
    spec.headers.push_back(ConfigHeader(op, spec.uri, "kernels/ops/decode/append_paged_kv_generator.cpp",
                                        {{"KILN_APPEND_T", dtype.cuda_type},
                                         {"KILN_APPEND_HEAD_DIM", std::to_string(head_dim)},
                                         {"KILN_APPEND_VEC", std::to_string(vec)},
                                         {"KILN_APPEND_BLOCK", std::to_string(kAppendPagedKvBlock)}}));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {decode::kAppendPagedKvEntry};
    spec.launch = {
        {.entry = decode::kAppendPagedKvEntry, .block = kAppendPagedKvBlock, .max_blocks = kAppendPagedKvMaxBlocks}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }
};

KILN_REGISTER_OP_GENERATOR(AppendPagedKvGenerator);

}  // namespace
}  // namespace kiln::kernels
