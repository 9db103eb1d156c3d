#include "kernels/ops/decode/batch_decode_generator.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/generator_support.h"
#include "kiln/decode/decode_contract.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

constexpr DTypeInfo kDTypes[] = {kFp16Info, kBf16Info};

constexpr const char* kUnitPath = "src/decode/batch_decode.cu";

// Host memory of one compile: a fresh process's ru_maxrss grows by about 60-70 MB while
// NVRTC compiles one specialization (both entries) for sm_90a on CUDA 13.0; 192 MB leaves
// headroom for -pch and for the largest (head_dim 256) unrolling.
constexpr int64_t kCompileMemoryMb = 192;

class BatchDecodeGenerator : public OpGenerator {
 public:
  std::string_view name() const override { return decode::kBatchDecodeOp; }
  std::string_view family() const override { return "decode"; }

  std::string_view description() const override {
    return "decode attention over a paged KV cache (one query token per request, GQA group "
           "heads per block, split-KV chunks merged by log-sum-exp): out = softmax(s) V with "
           "s = sm_scale q.k, optionally cap * tanh(s / cap), over an optional sliding window; "
           "entries kiln_batch_decode and kiln_batch_decode_merge";
  }

  std::vector<ParamInfo> params() const override {
    return {
        {.name = kParamDType,
         .help = "element type of q, out and the KV cache (the kernel runs on fp16/bf16 tensor-core MMAs)",
         .choices = DTypeNames(kDTypes)},
        {.name = decode::kParamHeadDim, .help = "elements per head", .choices = {"64", "128", "256"}},
        {.name = decode::kParamGroup,
         .help = "query heads per kv head (num_qo_heads / num_kv_heads; one mma covers 8 heads)",
         .choices = {"1", "2", "4", "8"}},
        {.name = decode::kParamPageSize,
         .kind = ParamInfo::Kind::kInt,
         .help = "tokens per page of the KV cache",
         .min = 1,
         .max = decode::kMaxPageSize,
         .power_of_two = true},
        {.name = decode::kParamSoftCap,
         .help = "1: logits are cap * tanh(logits / cap) (cap given at run time); 0: plain",
         .choices = {"0", "1"},
         .default_value = "0"},
    };
  }

  // mma.sync m16n8k16 with bf16, cp.async and movmatrix need sm_80; nothing needs sm_90a, so
  // one portable family keeps sm_90 devices on plain sm_90 code.
  std::vector<ArchFamily> arch_families() const override { return {FamilyAtLeast(80)}; }

 protected:
  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const DTypeInfo& dtype = FindDType(kDTypes, values.Text(kParamDType));
    const int head_dim = values.Int(decode::kParamHeadDim);
    const int group = values.Int(decode::kParamGroup);
    const int page_size = values.Int(decode::kParamPageSize);
    const bool soft_cap = values.Text(decode::kParamSoftCap) == "1";
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit, UnitFromTree(op, tree, kUnitPath));

    const BatchDecodeLaunchShape shape = ChooseBatchDecodeShape(head_dim);
    JitSpec spec;
    spec.uri = absl::StrCat(op, "_", dtype.name, "_d", head_dim, "_g", group, "_p", page_size,
                            soft_cap ? "_softcap" : "");
    spec.params = {{kParamDType, dtype.name},
                   {decode::kParamHeadDim, std::to_string(head_dim)},
                   {decode::kParamGroup, std::to_string(group)},
                   {decode::kParamPageSize, std::to_string(page_size)},
                   {decode::kParamSoftCap, soft_cap ? "1" : "0"}};
    spec.headers.push_back(ConfigHeader(op, spec.uri, "kernels/ops/decode/batch_decode_generator.cpp",
                                        {{"KILN_DECODE_T", dtype.cuda_type},
                                         {"KILN_DECODE_HEAD_DIM", std::to_string(head_dim)},
                                         {"KILN_DECODE_GROUP", std::to_string(group)},
                                         {"KILN_DECODE_PAGE_SIZE", std::to_string(page_size)},
                                         {"KILN_DECODE_SOFT_CAP", soft_cap ? "1" : "0"},
                                         {"KILN_DECODE_WARPS", std::to_string(shape.block / 32)},
                                         {"KILN_DECODE_STAGES", std::to_string(shape.stages)}}));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {decode::kBatchDecodeEntry, decode::kBatchDecodeMergeEntry};
    spec.launch = {{.entry = decode::kBatchDecodeEntry, .block = shape.block, .dynamic_smem = shape.dynamic_smem},
                   {.entry = decode::kBatchDecodeMergeEntry,
                    .block = shape.merge_block,
                    .items_per_block = shape.merge_heads_per_block}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }
};

KILN_REGISTER_OP_GENERATOR(BatchDecodeGenerator);

}  // namespace

BatchDecodeLaunchShape ChooseBatchDecodeShape(int head_dim) {
  BatchDecodeLaunchShape shape;
  const int warps = head_dim <= 128 ? 4 : 2;
  shape.block = 32 * warps;
  shape.tile_tokens = 16 * warps;
  shape.stages = head_dim <= 64 ? 4 : 3;
  shape.dynamic_smem = shape.stages * 2 * shape.tile_tokens * head_dim * 2;  // K and V, 2-byte elements
  return shape;
}

}  // namespace kiln::kernels
