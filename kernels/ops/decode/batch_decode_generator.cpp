#include "kernels/ops/decode/batch_decode_generator.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/ops/generator_params.h"

namespace kiln::kernels {
namespace {

constexpr DTypeInfo kDTypes[] = {kFp16Info, kBf16Info};

constexpr const char* kUnitPath = "src/decode/batch_decode.cu";
constexpr const char* kConfigName = "kiln_config.cuh";

// Host memory of one compile: a fresh process's ru_maxrss grows by about 60-70 MB while
// NVRTC compiles one specialization (both entries) for sm_90a on CUDA 13.0; 192 MB leaves
// headroom for -pch and for the largest (head_dim 256) unrolling.
constexpr int64_t kCompileMemoryMb = 192;

class BatchDecodeGenerator : public OpGenerator {
 public:
  std::string_view name() const override { return "batch_decode"; }

  std::string_view description() const override {
    return "decode attention over a paged KV cache (one query token per request, GQA group "
           "heads per block, split-KV chunks merged by log-sum-exp): out = softmax(s) V with "
           "s = sm_scale q.k, optionally cap * tanh(s / cap), over an optional sliding window; "
           "entries kiln_batch_decode and kiln_batch_decode_merge";
  }

  std::vector<ParamInfo> params() const override {
    return {
        {"dtype", "element type of q, out and the KV cache", {"fp16", "bf16"}, ""},
        {"head_dim", "elements per head", {"64", "128", "256"}, ""},
        {"group", "query heads per kv head (num_qo_heads / num_kv_heads)", {"1", "2", "4", "8"}, ""},
        {"page_size", "tokens per page of the KV cache: a power of two, 1..256", {}, ""},
        {"soft_cap", "1: logits are cap * tanh(logits / cap) (cap given at run time); 0: plain",
         {"0", "1"}, "0"},
    };
  }

  absl::StatusOr<JitSpec> Generate(const Params& params, const TreeSnapshot& tree) const override {
    const std::string op(name());
    absl::Status known = CheckKnownParams(op, params, {"dtype", "head_dim", "group", "page_size", "soft_cap"},
                                          "params are dtype (fp16|bf16), head_dim (64|128|256), group "
                                          "(1|2|4|8), page_size (a power of two, 1..256), all required, and "
                                          "soft_cap (0|1, default 0)");
    if (!known.ok()) return known;
    auto required = [&](const char* param, const char* allowed) -> absl::StatusOr<std::string> {
      auto it = params.find(param);
      if (it == params.end()) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": param '", param, "' is required; allowed: ", allowed));
      }
      return it->second;
    };

    absl::StatusOr<const DTypeInfo*> found =
        RequiredDType(op, params, kDTypes, " (the kernel runs on fp16/bf16 tensor-core MMAs)");
    if (!found.ok()) return found.status();
    const DTypeInfo* dtype = *found;

    auto head_dim_text = required("head_dim", "64, 128, 256");
    if (!head_dim_text.ok()) return head_dim_text.status();
    int head_dim = 0;
    if (!ParseBoundedInt(*head_dim_text, 1, 256, &head_dim) ||
        (head_dim != 64 && head_dim != 128 && head_dim != 256)) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": param 'head_dim' = '", *head_dim_text, "' is not allowed; allowed: 64, 128, 256"));
    }

    auto group_text = required("group", "1, 2, 4, 8");
    if (!group_text.ok()) return group_text.status();
    int group = 0;
    if (!ParseBoundedInt(*group_text, 1, 8, &group) || !IsPowerOfTwo(group)) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": param 'group' = '", *group_text,
          "' is not allowed; allowed: 1, 2, 4, 8 (query heads per kv head; one mma covers 8 heads)"));
    }

    auto page_size_text = required("page_size", "a power of two, 1..256");
    if (!page_size_text.ok()) return page_size_text.status();
    int page_size = 0;
    if (!ParseBoundedInt(*page_size_text, 1, 256, &page_size) || !IsPowerOfTwo(page_size)) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": param 'page_size' = '", *page_size_text,
                                                     "' is not allowed; allowed: a power of two, 1..256"));
    }

    bool soft_cap = false;
    if (auto it = params.find("soft_cap"); it != params.end()) {
      if (it->second != "0" && it->second != "1") {
        return absl::InvalidArgumentError(
            absl::StrCat(op, ": param 'soft_cap' = '", it->second, "' is not allowed; allowed: 0, 1"));
      }
      soft_cap = it->second == "1";
    }

    absl::StatusOr<std::string_view> unit = tree.Read(kUnitPath);
    if (!unit.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(op, ": the kernels tree is incomplete: ", unit.status().message()));
    }

    const BatchDecodeLaunchShape shape = ChooseBatchDecodeShape(head_dim);
    JitSpec spec;
    spec.op = op;
    spec.uri = absl::StrCat(op, "_", dtype->name, "_d", head_dim, "_g", group, "_p", page_size);
    if (soft_cap) absl::StrAppend(&spec.uri, "_softcap");
    spec.params = {{"dtype", dtype->name},
                   {"head_dim", std::to_string(head_dim)},
                   {"group", std::to_string(group)},
                   {"page_size", std::to_string(page_size)},
                   {"soft_cap", soft_cap ? "1" : "0"}};
    spec.headers.push_back({kConfigName,
                            absl::StrCat("// ", kConfigName, " of ", spec.uri, ", rendered by the batch_decode generator\n",
                                         "// (kernels/ops/decode/batch_decode_generator.cpp) from the request params. "
                                         "Do not edit.\n",
                                         "#pragma once\n",
                                         "#define KILN_DECODE_T ", dtype->cuda_type, "\n",
                                         "#define KILN_DECODE_HEAD_DIM ", head_dim, "\n",
                                         "#define KILN_DECODE_GROUP ", group, "\n",
                                         "#define KILN_DECODE_PAGE_SIZE ", page_size, "\n",
                                         "#define KILN_DECODE_SOFT_CAP ", soft_cap ? 1 : 0, "\n",
                                         "#define KILN_DECODE_WARPS ", shape.block / 32, "\n",
                                         "#define KILN_DECODE_STAGES ", shape.stages, "\n"),
                            SourceFile::Origin::kGenerated, ""});
    spec.units.push_back({"batch_decode.cu", std::string(*unit), SourceFile::Origin::kKernels, kUnitPath});
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {"kiln_batch_decode", "kiln_batch_decode_merge"};
    // mma.sync m16n8k16 with bf16, cp.async and movmatrix need sm_80; nothing needs sm_90a, so
    // one portable family keeps sm_90 devices on plain sm_90 code.
    spec.arch_families = {FamilyAtLeast(80)};
    spec.launch = {{"block", std::to_string(shape.block)},
                   {"tile_tokens", std::to_string(shape.tile_tokens)},
                   {"stages", std::to_string(shape.stages)},
                   {"dynamic_smem", std::to_string(shape.dynamic_smem)},
                   {"merge_block", std::to_string(shape.merge_block)},
                   {"merge_heads_per_block", std::to_string(shape.merge_heads_per_block)}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }
};

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

std::unique_ptr<OpGenerator> MakeBatchDecodeGenerator() { return std::make_unique<BatchDecodeGenerator>(); }

}  // namespace kiln::kernels
