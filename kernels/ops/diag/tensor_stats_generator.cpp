#include "kernels/ops/diag/tensor_stats_generator.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/ops/generator_params.h"

namespace kiln::kernels {
namespace {

// Every dtype a kiln::TensorView can hold: API logging takes statistics of any op argument.
// The integer types as kiln/diag/tensor_stats.cuh's ToDouble overloads take them.
constexpr DTypeInfo kDTypes[] = {kFp32Info,
                                 kFp16Info,
                                 kBf16Info,
                                 {"int8", "signed char", 1},
                                 {"uint8", "unsigned char", 1},
                                 {"int32", "int", 4},
                                 {"int64", "long long", 8}};

constexpr const char* kOp = "tensor_stats";
constexpr const char* kEntry = "kiln_tensor_stats";
constexpr const char* kUnitPath = "src/diag/tensor_stats.cu";
constexpr const char* kConfigName = "kiln_config.cuh";

// Host memory of one compile. On CUDA 13.0 the compile test's peak RSS (14 compiles, sm_80 and
// sm_90a) is 127 MB against 71 MB for a process of the same suite that compiled nothing: about
// 55 MB, as activation's ~50 MB; so the same 128 MB, with its headroom for -pch.
constexpr int64_t kCompileMemoryMb = 128;

std::string RenderConfig(const JitSpec& spec, const DTypeInfo& dtype) {
  return absl::StrCat("// ", kConfigName, " of ", spec.uri, ", rendered by the ", kOp, " generator\n",
                      "// (kernels/ops/diag/tensor_stats_generator.cpp) from the request params. Do not edit.\n",
                      "#pragma once\n",
                      "#define KILN_STATS_T ", dtype.cuda_type, "\n",
                      "#define KILN_STATS_BLOCK ", kTensorStatsBlock, "\n");
}

class TensorStatsGenerator : public OpGenerator {
 public:
  std::string_view name() const override { return kOp; }
  std::string_view description() const override {
    return "statistics of one tensor for API call logging (KILN_LOGLEVEL=5): NaN, Inf and finite "
           "counts, min, max and the sum of the finite elements in double, one partial record per "
           "block (deterministic; the client combines them); any shape and strides";
  }

  std::vector<ParamInfo> params() const override {
    return {{"dtype", "element type of the tensor", {"fp32", "fp16", "bf16", "int8", "uint8", "int32", "int64"}, ""}};
  }

  absl::StatusOr<JitSpec> Generate(const Params& params, const TreeSnapshot& tree) const override {
    absl::Status known = CheckKnownParams(kOp, params, {"dtype"},
                                          "the only param is dtype (required); the shape and strides are not "
                                          "params, the kernel takes them at launch");
    if (!known.ok()) return known;
    absl::StatusOr<const DTypeInfo*> found = RequiredDType(kOp, params, kDTypes);
    if (!found.ok()) return found.status();
    const DTypeInfo* dtype = *found;

    absl::StatusOr<std::string_view> unit = tree.Read(kUnitPath);
    if (!unit.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(kOp, ": the kernels tree is incomplete: ", unit.status().message()));
    }

    JitSpec spec;
    spec.op = kOp;
    spec.uri = absl::StrCat(kOp, "_", dtype->name);
    spec.params = {{"dtype", dtype->name}};
    spec.headers.push_back({kConfigName, RenderConfig(spec, *dtype), SourceFile::Origin::kGenerated, ""});
    spec.units.push_back({"tensor_stats.cu", std::string(*unit), SourceFile::Origin::kKernels, kUnitPath});
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {kEntry};
    // The device code needs nothing past sm_75 (double shuffles, bf16 widened by a shift), but
    // every op it reports on is sm_80+ (the library's one family), so it serves exactly the
    // devices that can run an op, and no arch that no test covers.
    spec.arch_families = {FamilyAtLeast(80)};
    spec.launch = {{"block", std::to_string(kTensorStatsBlock)},
                   {"max_blocks", std::to_string(kTensorStatsMaxBlocks)},
                   {"dynamic_smem", "0"}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }
};

}  // namespace

std::unique_ptr<OpGenerator> MakeTensorStatsGenerator() { return std::make_unique<TensorStatsGenerator>(); }

}  // namespace kiln::kernels
