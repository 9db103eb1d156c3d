#include "kernels/ops/comm/all_reduce_generator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/generator_support.h"
#include "kiln/comm/comm_contract.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

constexpr DTypeInfo kDTypes[] = {kFp32Info, kFp16Info, kBf16Info};

constexpr const char* kAllReduceUnitPath = "src/comm/all_reduce.cu";
constexpr const char* kAddRmsNormUnitPath = "src/comm/all_reduce_add_rmsnorm.cu";

// Host memory of one compile. On CUDA 13.0 the compile tests' peak RSS grows by 53-55 MB
// over a process that compiled nothing (every all_reduce dtype x world, or the add_rmsnorm
// set up to hidden 16384, sm_80 and sm_90a), as rmsnorm's does (56 MB) by the same measure;
// so the same 128 MB as rmsnorm, with its headroom for -pch.
constexpr int64_t kCompileMemoryMb = 128;

int CeilDiv(int a, int b) { return (a + b - 1) / b; }

class AllReduceGenerator : public OpGenerator {
 public:
  explicit AllReduceGenerator(bool add_rmsnorm) : add_rmsnorm_(add_rmsnorm) {}

  std::string_view name() const override { return add_rmsnorm_ ? comm::kAllReduceAddRmsNormOp : comm::kAllReduceOp; }
  std::string_view family() const override { return "comm"; }

  std::string_view description() const override {
    return add_rmsnorm_ ? "single-node all-reduce (sum over ranks, fp32) fused with residual add and RMSNorm, "
                          "per row: x = sum + residual; residual = x; output = x * rsqrt(mean(x^2) + eps) * "
                          "weight; over peer-mapped (NVLink P2P) buffers"
                        : "single-node all-reduce (sum over ranks, fp32, the same bits on every rank) over "
                          "peer-mapped (NVLink P2P) buffers; entries one_shot and two_shot";
  }

  std::vector<ParamInfo> params() const override {
    std::vector<ParamInfo> params = {
        {.name = kParamDType, .help = "element type of every buffer", .choices = DTypeNames(kDTypes)},
        {.name = comm::kParamWorldSize,
         .kind = ParamInfo::Kind::kInt,
         .help = "ranks of the communicator",
         .min = comm::kMinWorld,
         .max = comm::kMaxWorld},
    };
    if (add_rmsnorm_) {
      params.push_back({.name = comm::kParamHidden,
                        .kind = ParamInfo::Kind::kInt,
                        .help = "row length in elements",
                        .min = 1,
                        .max = comm::kMaxAddRmsNormHidden});
      params.push_back(VecParam("elements per vector access: vec * sizeof(dtype) <= 16 and vec divides hidden; "
                                "every pointer must be a multiple of it, and it must be the same on every rank. "
                                "auto: the largest such value"));
    } else {
      params.push_back(VecParam("elements per vector access: vec * sizeof(dtype) <= 16; every pointer must be a "
                                "multiple of it, and it must be the same on every rank. auto: 16 bytes"));
    }
    return params;
  }

  // bf16 conversion needs sm_80 (ld.acquire / st.release at .sys scope need sm_70); one
  // portable family keeps sm_90 devices on plain sm_90 code (nothing here needs sm_90a).
  std::vector<ArchFamily> arch_families() const override { return {FamilyAtLeast(80)}; }

 protected:
  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const DTypeInfo& dtype = FindDType(kDTypes, values.Text(kParamDType));
    const int world = values.Int(comm::kParamWorldSize);
    const int hidden = add_rmsnorm_ ? values.Int(comm::kParamHidden) : 0;  // 0: no hidden (all_reduce)
    KILN_ABSL_ASSIGN_OR_RETURN(const int vec, ResolveVec(op, values, dtype, hidden, comm::kParamHidden));
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit,
                               UnitFromTree(op, tree, add_rmsnorm_ ? kAddRmsNormUnitPath : kAllReduceUnitPath));

    JitSpec spec;
    spec.uri = absl::StrCat(op, "_", dtype.name, "_w", world, add_rmsnorm_ ? absl::StrCat("_h", hidden) : "",
                            VecSuffix(vec, WidestVec(dtype.bytes, hidden)));
    spec.params = {
        {kParamDType, dtype.name}, {comm::kParamWorldSize, std::to_string(world)}, {kParamVec, std::to_string(vec)}};
    if (add_rmsnorm_) spec.params[comm::kParamHidden] = std::to_string(hidden);

    const int block = add_rmsnorm_ ? AllReduceAddRmsNormBlock(hidden, vec) : kAllReduceBlock;
    const int max_blocks = add_rmsnorm_ ? AllReduceAddRmsNormMaxBlocks(block) : kAllReduceMaxBlocks;
    const std::string prefix = add_rmsnorm_ ? "KILN_AR_RMSNORM_" : "KILN_ALL_REDUCE_";
    std::vector<std::pair<std::string, std::string>> defines = {{prefix + "T", dtype.cuda_type},
                                                                {prefix + "WORLD", std::to_string(world)}};
    if (add_rmsnorm_) defines.push_back({prefix + "HIDDEN", std::to_string(hidden)});
    defines.push_back({prefix + "VEC", std::to_string(vec)});
    defines.push_back({prefix + "BLOCK", std::to_string(block)});
    spec.headers.push_back(ConfigHeader(op, spec.uri, "kernels/ops/comm/all_reduce_generator.cpp", defines));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    if (add_rmsnorm_) {
      spec.entries = {comm::kAddRmsNormEntry};
    } else {
      spec.entries = {comm::kOneShotEntry, comm::kTwoShotEntry};
    }
    for (const std::string& entry : spec.entries)
      spec.launch.push_back({.entry = entry, .block = block, .max_blocks = max_blocks});
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }

 private:
  bool add_rmsnorm_;
};

KILN_REGISTER_OP_GENERATOR(AllReduceGenerator, false);
KILN_REGISTER_OP_GENERATOR(AllReduceGenerator, true);

}  // namespace

int AllReduceAddRmsNormBlock(int hidden, int vec) {
  // 4 vectors per thread give each thread 4 x world independent loads in flight and keep
  // the row in registers; 512 threads hold the largest row (16384 scalar elements: 32 per
  // thread) within __launch_bounds__(512)'s 128 registers.
  constexpr int kItemsPerThreadTarget = 4;
  const int vectors = hidden / vec;
  return std::clamp(CeilDiv(CeilDiv(vectors, kItemsPerThreadTarget), 32) * 32, 32, 512);
}

int AllReduceAddRmsNormMaxBlocks(int block) { return std::min(comm::kMaxBlocks, 64 * (512 / block)); }

}  // namespace kiln::kernels
