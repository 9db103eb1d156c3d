#include "kernels/ops/norm/rmsnorm_generator.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/ops/generator_params.h"

namespace kiln::kernels {
namespace {

constexpr DTypeInfo kDTypes[] = {kFp32Info, kFp16Info, kBf16Info};

constexpr const char* kUnitPath = "src/norm/rmsnorm.cu";
constexpr const char* kConfigName = "kiln_config.cuh";

// Host memory of one compile. Measured on CUDA 13.0 (NVRTC runs ptxas in process): a fresh
// process's ru_maxrss grows by 40-52 MB during one compile, over fp32/bf16, hidden 1..65536,
// vec 1..8, sm_80 and sm_90a (peak 73-84 MB including the 32 MB of a process that has
// loaded NVRTC). 128 MB leaves headroom for -pch (its heap held ~7.5 MB here) and for
// larger specializations.
constexpr int64_t kCompileMemoryMb = 128;

int CeilDiv(int a, int b) { return (a + b - 1) / b; }

std::string AllowedVecs(int hidden, int dtype_bytes) {
  std::vector<std::string> allowed;
  for (int vec = 1; vec * dtype_bytes <= 16; vec *= 2) {
    if (hidden % vec == 0) allowed.push_back(std::to_string(vec));
  }
  return absl::StrJoin(allowed, ", ");
}

std::string RenderConfig(const JitSpec& spec, const DTypeInfo& dtype, int hidden,
                         const RmsNormLaunchShape& shape, bool fused_add) {
  return absl::StrCat(
      "// ", kConfigName, " of ", spec.uri, ", rendered by the rmsnorm generator\n",
      "// (kernels/ops/norm/rmsnorm_generator.cpp) from the request params. Do not edit.\n",
      "#pragma once\n",
      "#define KILN_RMSNORM_FUSED_ADD ", fused_add ? 1 : 0, "\n",
      "#define KILN_RMSNORM_T ", dtype.cuda_type, "\n",
      "#define KILN_RMSNORM_HIDDEN ", hidden, "\n",
      "#define KILN_RMSNORM_VEC ", shape.vec, "\n",
      "#define KILN_RMSNORM_THREADS_PER_ROW ", shape.threads_per_row, "\n",
      "#define KILN_RMSNORM_ROWS_PER_BLOCK ", shape.rows_per_block, "\n");
}

class RmsNormGenerator : public OpGenerator {
 public:
  explicit RmsNormGenerator(bool fused_add) : fused_add_(fused_add) {}

  std::string_view name() const override { return fused_add_ ? "fused_add_rmsnorm" : "rmsnorm"; }

  std::string_view description() const override {
    return fused_add_ ? "x = input + residual (rounded to dtype); residual = x; "
                        "input = x * rsqrt(mean(x^2) + eps) * weight, per row, in place"
                      : "out = input * rsqrt(mean(input^2) + eps) * weight, per row "
                        "(out may be input)";
  }

  std::vector<ParamInfo> params() const override {
    return {
        {"dtype", "element type of every tensor", {"fp32", "fp16", "bf16"}, ""},
        {"hidden", "row length in elements, an integer in 1..65536", {}, ""},
        {"vec",
         "elements per vector access: a power of two with vec * sizeof(dtype) <= 16 that "
         "divides hidden; pointers and row strides must be multiples of it. Omit (or 'auto') "
         "for the largest such value",
         {},
         "auto"},
    };
  }

  absl::StatusOr<JitSpec> Generate(const Params& params, const TreeSnapshot& tree) const override {
    const std::string op(name());
    absl::Status known = CheckKnownParams(op, params, {"dtype", "hidden", "vec"},
                                          absl::StrCat("params are dtype (fp32|fp16|bf16, required), hidden (1..",
                                                       kRmsNormMaxHidden, ", required) and vec (optional)"));
    if (!known.ok()) return known;

    absl::StatusOr<const DTypeInfo*> found = RequiredDType(op, params, kDTypes);
    if (!found.ok()) return found.status();
    const DTypeInfo* dtype = *found;

    auto hidden_it = params.find("hidden");
    if (hidden_it == params.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": param 'hidden' is required: the row length, an integer in 1..", kRmsNormMaxHidden));
    }
    int hidden = 0;
    if (!ParseBoundedInt(hidden_it->second, 1, kRmsNormMaxHidden, &hidden)) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": param 'hidden' = '", hidden_it->second,
                                                     "' is not allowed; allowed: an integer in 1..",
                                                     kRmsNormMaxHidden));
    }

    const int default_vec = DefaultRmsNormVec(hidden, dtype->bytes);
    int vec = default_vec;
    if (auto vec_it = params.find("vec"); vec_it != params.end() && vec_it->second != "auto") {
      int requested = 0;
      if (!ParseBoundedInt(vec_it->second, 1, 16, &requested) || !IsPowerOfTwo(requested) ||
          requested * dtype->bytes > 16 || hidden % requested != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": param 'vec' = '", vec_it->second, "' is not allowed for dtype ", dtype->name,
            " and hidden ", hidden, ": vec is a power of two with vec * ", dtype->bytes,
            " bytes <= 16 that divides hidden; allowed here: ", AllowedVecs(hidden, dtype->bytes),
            " (omit it for ", default_vec, ")"));
      }
      vec = requested;
    }

    absl::StatusOr<std::string_view> unit = tree.Read(kUnitPath);
    if (!unit.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(op, ": the kernels tree is incomplete: ",
                                                        unit.status().message()));
    }

    const RmsNormLaunchShape shape = ChooseRmsNormShape(hidden, vec, dtype->bytes);
    JitSpec spec;
    spec.op = op;
    spec.uri = absl::StrCat(op, "_", dtype->name, "_h", hidden);
    if (vec != default_vec) absl::StrAppend(&spec.uri, "_v", vec);
    spec.params = {{"dtype", dtype->name}, {"hidden", std::to_string(hidden)}, {"vec", std::to_string(vec)}};
    spec.headers.push_back({kConfigName, RenderConfig(spec, *dtype, hidden, shape, fused_add_),
                            SourceFile::Origin::kGenerated, ""});
    spec.units.push_back({"rmsnorm.cu", std::string(*unit), SourceFile::Origin::kKernels, kUnitPath});
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {fused_add_ ? "kiln_fused_add_rmsnorm" : "kiln_rmsnorm"};
    // bf16 arithmetic (cvt.rn.bf16.f32) needs sm_80; one portable family keeps sm_90 devices
    // on plain sm_90 code (nothing here needs sm_90a features).
    spec.arch_families = {FamilyAtLeast(80)};
    spec.launch = {{"block", std::to_string(shape.block)},
                   {"rows_per_block", std::to_string(shape.rows_per_block)},
                   {"vec", std::to_string(vec)},
                   {"dynamic_smem", "0"}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }

 private:
  bool fused_add_;
};

}  // namespace

int DefaultRmsNormVec(int hidden, int dtype_bytes) {
  int vec = 1;
  while ((vec * 2) * dtype_bytes <= 16 && hidden % (vec * 2) == 0) vec *= 2;
  return vec;
}

RmsNormLaunchShape ChooseRmsNormShape(int hidden, int vec, int dtype_bytes) {
  // 4 vectors per thread keep 16 data registers for a 16-byte vector, leave headroom for
  // __launch_bounds__(1024)'s 64-register cap, and still give each thread 4 independent
  // loads in flight; a row of up to 128 vectors fits one warp.
  constexpr int kItemsPerThreadTarget = 4;
  constexpr int kSmallRowBlock = 128;
  RmsNormLaunchShape shape;
  shape.vec = vec;
  const int vectors = hidden / vec;
  if (vectors <= 32) {
    int group = 1;
    while (group < vectors) group *= 2;
    shape.threads_per_row = group;
    shape.rows_per_block = kSmallRowBlock / group;
  } else if (vectors <= 32 * kItemsPerThreadTarget) {
    shape.threads_per_row = 32;
    shape.rows_per_block = kSmallRowBlock / 32;
  } else {
    shape.threads_per_row = std::min(1024, CeilDiv(CeilDiv(vectors, kItemsPerThreadTarget), 32) * 32);
    shape.rows_per_block = 1;
    if (shape.threads_per_row == 1024) {
      // A thread holds its vectors in 32-bit registers (a 2-byte scalar still takes one).
      const int registers_per_vector = std::max(1, vec * dtype_bytes / 4);
      auto data_registers = [&](int threads) { return CeilDiv(vectors, threads) * registers_per_vector; };
      if (data_registers(1024) > 24 && data_registers(512) <= 96) shape.threads_per_row = 512;
    }
  }
  shape.block = shape.threads_per_row * shape.rows_per_block;
  shape.items_per_thread = CeilDiv(vectors, shape.threads_per_row);
  return shape;
}

std::unique_ptr<OpGenerator> MakeRmsNormGenerator() { return std::make_unique<RmsNormGenerator>(false); }

std::unique_ptr<OpGenerator> MakeFusedAddRmsNormGenerator() {
  return std::make_unique<RmsNormGenerator>(true);
}

}  // namespace kiln::kernels
