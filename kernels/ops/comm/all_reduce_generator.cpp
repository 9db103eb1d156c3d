#include "kernels/ops/comm/all_reduce_generator.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/ops/generator_params.h"

namespace kiln::kernels {
namespace {

constexpr DTypeInfo kDTypes[] = {kFp32Info, kFp16Info, kBf16Info};

constexpr const char* kAllReduceUnitPath = "src/comm/all_reduce.cu";
constexpr const char* kAddRmsNormUnitPath = "src/comm/all_reduce_add_rmsnorm.cu";
constexpr const char* kConfigName = "kiln_config.cuh";

// Host memory of one compile. On CUDA 13.0 the compile tests' peak RSS grows by 53-55 MB
// over a process that compiled nothing (every all_reduce dtype x world, or the add_rmsnorm
// set up to hidden 16384, sm_80 and sm_90a), as rmsnorm's does (56 MB) by the same measure;
// so the same 128 MB as rmsnorm, with its headroom for -pch.
constexpr int64_t kCompileMemoryMb = 128;

int CeilDiv(int a, int b) { return (a + b - 1) / b; }

// The vecs allowed for a dtype (and, when hidden > 0, dividing hidden).
std::string AllowedVecs(int dtype_bytes, int hidden) {
  std::vector<std::string> allowed;
  for (int vec = 1; vec * dtype_bytes <= 16; vec *= 2) {
    if (hidden == 0 || hidden % vec == 0) allowed.push_back(std::to_string(vec));
  }
  return absl::StrJoin(allowed, ", ");
}

class AllReduceGenerator : public OpGenerator {
 public:
  explicit AllReduceGenerator(bool add_rmsnorm) : add_rmsnorm_(add_rmsnorm) {}

  std::string_view name() const override { return add_rmsnorm_ ? "all_reduce_add_rmsnorm" : "all_reduce"; }

  std::string_view description() const override {
    return add_rmsnorm_
               ? "single-node all-reduce (sum over ranks, fp32) fused with residual add and RMSNorm, "
                 "per row: x = sum + residual; residual = x; output = x * rsqrt(mean(x^2) + eps) * "
                 "weight; over peer-mapped (NVLink P2P) buffers"
               : "single-node all-reduce (sum over ranks, fp32, the same bits on every rank) over "
                 "peer-mapped (NVLink P2P) buffers; entries one_shot and two_shot";
  }

  std::vector<ParamInfo> params() const override {
    std::vector<ParamInfo> params = {
        {"dtype", "element type of every buffer", {"fp32", "fp16", "bf16"}, ""},
        {"world_size",
         absl::StrCat("ranks of the communicator, an integer in ", kAllReduceMinWorld, "..", kCommMaxWorld),
         {},
         ""},
    };
    if (add_rmsnorm_) {
      params.push_back({"hidden",
                        absl::StrCat("row length in elements, an integer in 1..", kAllReduceAddRmsNormMaxHidden),
                        {},
                        ""});
      params.push_back({"vec",
                        "elements per vector access: a power of two with vec * sizeof(dtype) <= 16 that "
                        "divides hidden; every pointer must be a multiple of it, and it must be the same "
                        "on every rank. Omit (or 'auto') for the largest such value",
                        {},
                        "auto"});
    } else {
      params.push_back({"vec",
                        "elements per vector access: a power of two with vec * sizeof(dtype) <= 16; every "
                        "pointer must be a multiple of it, and it must be the same on every rank. Omit "
                        "(or 'auto') for 16 bytes",
                        {},
                        "auto"});
    }
    return params;
  }

  absl::StatusOr<JitSpec> Generate(const Params& params, const TreeSnapshot& tree) const override {
    const std::string op(name());
    for (const auto& [key, value] : params) {
      if (key != "dtype" && key != "world_size" && key != "vec" && (!add_rmsnorm_ || key != "hidden")) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": unknown param '", key, "' (= '", value, "'); params are dtype (fp32|fp16|bf16, required), ",
            "world_size (", kAllReduceMinWorld, "..", kCommMaxWorld, ", required), ",
            add_rmsnorm_ ? absl::StrCat("hidden (1..", kAllReduceAddRmsNormMaxHidden, ", required), ") : "",
            "and vec (optional)"));
      }
    }

    absl::StatusOr<const DTypeInfo*> found = RequiredDType(op, params, kDTypes);
    if (!found.ok()) return found.status();
    const DTypeInfo* dtype = *found;

    auto world_it = params.find("world_size");
    if (world_it == params.end()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": param 'world_size' is required: the number of ranks, "
                                                     "an integer in ", kAllReduceMinWorld, "..", kCommMaxWorld));
    }
    int world = 0;
    if (!ParseBoundedInt(world_it->second, kAllReduceMinWorld, kCommMaxWorld, &world)) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": param 'world_size' = '", world_it->second,
                                                     "' is not allowed; allowed: an integer in ",
                                                     kAllReduceMinWorld, "..", kCommMaxWorld));
    }

    int hidden = 0;  // 0: no hidden (all_reduce)
    if (add_rmsnorm_) {
      auto hidden_it = params.find("hidden");
      if (hidden_it == params.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": param 'hidden' is required: the row length, an integer in 1..", kAllReduceAddRmsNormMaxHidden));
      }
      if (!ParseBoundedInt(hidden_it->second, 1, kAllReduceAddRmsNormMaxHidden, &hidden)) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": param 'hidden' = '", hidden_it->second,
                                                       "' is not allowed; allowed: an integer in 1..",
                                                       kAllReduceAddRmsNormMaxHidden));
      }
    }

    const int default_vec =
        add_rmsnorm_ ? DefaultAllReduceAddRmsNormVec(hidden, dtype->bytes) : DefaultAllReduceVec(dtype->bytes);
    int vec = default_vec;
    if (auto vec_it = params.find("vec"); vec_it != params.end() && vec_it->second != "auto") {
      int requested = 0;
      if (!ParseBoundedInt(vec_it->second, 1, 16, &requested) || !IsPowerOfTwo(requested) ||
          requested * dtype->bytes > 16 || (add_rmsnorm_ && hidden % requested != 0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": param 'vec' = '", vec_it->second, "' is not allowed for dtype ", dtype->name,
            add_rmsnorm_ ? absl::StrCat(" and hidden ", hidden) : "", ": vec is a power of two with vec * ",
            dtype->bytes, " bytes <= 16", add_rmsnorm_ ? " that divides hidden" : "",
            "; allowed here: ", AllowedVecs(dtype->bytes, hidden), " (omit it for ", default_vec, ")"));
      }
      vec = requested;
    }

    const char* unit_path = add_rmsnorm_ ? kAddRmsNormUnitPath : kAllReduceUnitPath;
    absl::StatusOr<std::string_view> unit = tree.Read(unit_path);
    if (!unit.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(op, ": the kernels tree is incomplete: ",
                                                        unit.status().message()));
    }

    JitSpec spec;
    spec.op = op;
    spec.uri = absl::StrCat(op, "_", dtype->name, "_w", world);
    if (add_rmsnorm_) absl::StrAppend(&spec.uri, "_h", hidden);
    if (vec != default_vec) absl::StrAppend(&spec.uri, "_v", vec);
    spec.params = {{"dtype", dtype->name}, {"world_size", std::to_string(world)}, {"vec", std::to_string(vec)}};
    if (add_rmsnorm_) spec.params["hidden"] = std::to_string(hidden);

    const int block = add_rmsnorm_ ? AllReduceAddRmsNormBlock(hidden, vec) : kAllReduceBlock;
    const int max_blocks = add_rmsnorm_ ? AllReduceAddRmsNormMaxBlocks(block) : kAllReduceMaxBlocks;
    std::string config = absl::StrCat(
        "// ", kConfigName, " of ", spec.uri, ", rendered by the ", op, " generator\n",
        "// (kernels/ops/comm/all_reduce_generator.cpp) from the request params. Do not edit.\n",
        "#pragma once\n");
    const char* prefix = add_rmsnorm_ ? "KILN_AR_RMSNORM_" : "KILN_ALL_REDUCE_";
    absl::StrAppend(&config, "#define ", prefix, "T ", dtype->cuda_type, "\n", "#define ", prefix, "WORLD ", world,
                    "\n");
    if (add_rmsnorm_) absl::StrAppend(&config, "#define ", prefix, "HIDDEN ", hidden, "\n");
    absl::StrAppend(&config, "#define ", prefix, "VEC ", vec, "\n", "#define ", prefix, "BLOCK ", block, "\n");
    spec.headers.push_back({kConfigName, std::move(config), SourceFile::Origin::kGenerated, ""});

    const std::string unit_name(std::string_view(unit_path).substr(std::string_view(unit_path).rfind('/') + 1));
    spec.units.push_back({unit_name, std::string(*unit), SourceFile::Origin::kKernels, unit_path});
    spec.nvrtc_options = {"-std=c++17"};
    if (add_rmsnorm_) {
      spec.entries = {"kiln_all_reduce_add_rmsnorm"};
    } else {
      spec.entries = {"kiln_all_reduce_one_shot", "kiln_all_reduce_two_shot"};
    }
    // bf16 conversion needs sm_80 (ld.acquire / st.release at .sys scope need sm_70); one
    // portable family keeps sm_90 devices on plain sm_90 code (nothing here needs sm_90a).
    spec.arch_families = {FamilyAtLeast(80)};
    spec.launch = {{"block", std::to_string(block)},
                   {"max_blocks", std::to_string(max_blocks)},
                   {"vec", std::to_string(vec)},
                   {"dynamic_smem", "0"}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }

 private:
  bool add_rmsnorm_;
};

}  // namespace

int DefaultAllReduceVec(int dtype_bytes) { return 16 / dtype_bytes; }

int DefaultAllReduceAddRmsNormVec(int hidden, int dtype_bytes) {
  int vec = 1;
  while ((vec * 2) * dtype_bytes <= 16 && hidden % (vec * 2) == 0) vec *= 2;
  return vec;
}

int AllReduceAddRmsNormBlock(int hidden, int vec) {
  // 4 vectors per thread give each thread 4 x world independent loads in flight and keep
  // the row in registers; 512 threads hold the largest row (16384 scalar elements: 32 per
  // thread) within __launch_bounds__(512)'s 128 registers.
  constexpr int kItemsPerThreadTarget = 4;
  const int vectors = hidden / vec;
  return std::clamp(CeilDiv(CeilDiv(vectors, kItemsPerThreadTarget), 32) * 32, 32, 512);
}

int AllReduceAddRmsNormMaxBlocks(int block) { return std::min(kCommMaxBlocks, 64 * (512 / block)); }

std::unique_ptr<OpGenerator> MakeAllReduceGenerator() { return std::make_unique<AllReduceGenerator>(false); }

std::unique_ptr<OpGenerator> MakeAllReduceAddRmsNormGenerator() {
  return std::make_unique<AllReduceGenerator>(true);
}

}  // namespace kiln::kernels
