#include "kernels/ops/decode/append_paged_kv_generator.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kiln::kernels {
namespace {

struct DType {
  const char* name;       // param value
  const char* cuda_type;  // the device type (kiln/common/numeric.cuh)
};
constexpr DType kDTypes[] = {{"fp16", "__half"}, {"bf16", "__nv_bfloat16"}};

constexpr const char* kUnitPath = "src/decode/append_paged_kv.cu";
constexpr const char* kConfigName = "kiln_config.cuh";
constexpr int kDefaultVec = 8;  // 16 bytes of a 2-byte type

// A small copy kernel: the same budget as rmsnorm's (whose compiles grow ru_maxrss by 40-52 MB).
constexpr int64_t kCompileMemoryMb = 128;

bool ParseBoundedInt(std::string_view text, int lo, int hi, int* value) {
  if (text.empty() || text.size() > 9) return false;
  if (!std::all_of(text.begin(), text.end(), [](char c) { return absl::ascii_isdigit(c); })) return false;
  int n = 0;
  for (char c : text) n = n * 10 + (c - '0');
  if (n < lo || n > hi) return false;
  *value = n;
  return true;
}

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
    for (const auto& [key, value] : params) {
      if (key != "dtype" && key != "head_dim" && key != "vec") {
        return absl::InvalidArgumentError(absl::StrCat(op, ": unknown param '", key, "' (= '", value,
                                                       "'); params are dtype (fp16|bf16, required), head_dim "
                                                       "(64|128|256, required) and vec (optional)"));
      }
    }
    auto dtype_it = params.find("dtype");
    if (dtype_it == params.end()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": param 'dtype' is required; allowed: fp16, bf16"));
    }
    const DType* dtype = nullptr;
    for (const DType& d : kDTypes) {
      if (dtype_it->second == d.name) dtype = &d;
    }
    if (dtype == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": param 'dtype' = '", dtype_it->second,
                                                     "' is not allowed; allowed: fp16, bf16"));
    }
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
