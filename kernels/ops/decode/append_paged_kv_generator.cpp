#include "kernels/ops/decode/append_paged_kv_generator.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/ops/generator_params.h"

namespace kiln::kernels {
namespace {

constexpr DTypeInfo kDTypes[] = {kFp16Info, kBf16Info};

constexpr const char* kUnitPath = "src/decode/append_paged_kv.cu";
constexpr const char* kConfigName = "kiln_config.cuh";
constexpr int kDefaultVec = 8;  // 16 bytes of a 2-byte type

// A small copy kernel: the same budget as rmsnorm's (whose compiles grow ru_maxrss by 40-52 MB).
constexpr int64_t kCompileMemoryMb = 128;

class AppendPagedKvGenerator : public OpGenerator {
 public:
  std::string_view name() const override { return "append_paged_kv"; }

  std::string_view description() const override {
    return "writes new tokens' k and v [nnz, num_kv_heads, head_dim] into their slots of a paged KV "
           "cache (page = kv_indices[kv_indptr[b] + pos / page_size], slot = pos % page_size)";
  }

  std::vector<ParamInfo> params() const override {
    return {
        {"dtype", "element type of k, v and the KV cache", {"fp16", "bf16"}, ""},
        {"head_dim", "elements per head", {"64", "128", "256"}, ""},
        {"vec",
         "elements per vector access: 1, 2, 4 or 8; every pointer and stride must be a multiple of "
         "it. Omit (or 'auto') for 8 (16 bytes)",
         {},
         "auto"},
    };
  }

  absl::StatusOr<JitSpec> Generate(const Params& params, const TreeSnapshot& tree) const override {
    const std::string op(name());
    absl::Status known = CheckKnownParams(
        op, params, {"dtype", "head_dim", "vec"},
        "params are dtype (fp16|bf16, required), head_dim (64|128|256, required) and vec (optional)");
    if (!known.ok()) return known;
    absl::StatusOr<const DTypeInfo*> found = RequiredDType(op, params, kDTypes);
    if (!found.ok()) return found.status();
    const DTypeInfo* dtype = *found;
    auto head_dim_it = params.find("head_dim");
    if (head_dim_it == params.end()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": param 'head_dim' is required; allowed: 64, 128, 256"));
    }
    int head_dim = 0;
    if (!ParseBoundedInt(head_dim_it->second, 1, 256, &head_dim) ||
        (head_dim != 64 && head_dim != 128 && head_dim != 256)) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": param 'head_dim' = '", head_dim_it->second,
                                                     "' is not allowed; allowed: 64, 128, 256"));
    }
    int vec = kDefaultVec;
    if (auto vec_it = params.find("vec"); vec_it != params.end() && vec_it->second != "auto") {
      if (!ParseBoundedInt(vec_it->second, 1, 8, &vec) || (vec & (vec - 1)) != 0) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": param 'vec' = '", vec_it->second,
                                                       "' is not allowed; allowed: 1, 2, 4, 8 (omit it for 8)"));
      }
    }

    absl::StatusOr<std::string_view> unit = tree.Read(kUnitPath);
    if (!unit.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(op, ": the kernels tree is incomplete: ", unit.status().message()));
    }

    JitSpec spec;
    spec.op = op;
    spec.uri = absl::StrCat(op, "_", dtype->name, "_d", head_dim);
    if (vec != kDefaultVec) absl::StrAppend(&spec.uri, "_v", vec);
    spec.params = {{"dtype", dtype->name}, {"head_dim", std::to_string(head_dim)}, {"vec", std::to_string(vec)}};
    spec.headers.push_back(
        {kConfigName,
         absl::StrCat("// ", kConfigName, " of ", spec.uri, ", rendered by the append_paged_kv generator\n",
                      "// (kernels/ops/decode/append_paged_kv_generator.cpp) from the request params. Do not edit.\n",
                      "#pragma once\n",
                      "#define KILN_APPEND_T ", dtype->cuda_type, "\n",
                      "#define KILN_APPEND_HEAD_DIM ", head_dim, "\n",
                      "#define KILN_APPEND_VEC ", vec, "\n",
                      "#define KILN_APPEND_BLOCK ", kAppendPagedKvBlock, "\n"),
         SourceFile::Origin::kGenerated, ""});
    spec.units.push_back({"append_paged_kv.cu", std::string(*unit), SourceFile::Origin::kKernels, kUnitPath});
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {"kiln_append_paged_kv"};
    // A copy: nothing needs more than sm_80 (the family's floor, shared with batch_decode).
    spec.arch_families = {FamilyAtLeast(80)};
    spec.launch = {{"block", std::to_string(kAppendPagedKvBlock)},
                   {"max_blocks", std::to_string(kAppendPagedKvMaxBlocks)},
                   {"vec", std::to_string(vec)},
                   {"dynamic_smem", "0"}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }
};

}  // namespace

std::unique_ptr<OpGenerator> MakeAppendPagedKvGenerator() { return std::make_unique<AppendPagedKvGenerator>(); }

}  // namespace kiln::kernels
