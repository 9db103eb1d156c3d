#include "kernels/ops/activation/act_and_mul_generator.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/ops/generator_params.h"

namespace kiln::kernels {
namespace {

// fp16 and bf16 only: the ops exist for the gated MLPs of 16-bit models.
constexpr DTypeInfo kDTypes[] = {kFp16Info, kBf16Info};

// One op of the family: its name, the activation the unit's config selects, its entry.
struct Activation {
  const char* op;
  int kind;  // KILN_ACT_KIND in src/activation/act_and_mul.cu
  const char* entry;
  const char* description;
};
constexpr Activation kSilu = {"silu_and_mul", 0, "kiln_silu_and_mul",
                              "out = silu(x) * y for input [..., 2d] = [x | y], out [..., d]; "
                              "silu(x) = x / (1 + exp(-x)), in fp32"};
constexpr Activation kGelu = {"gelu_and_mul", 1, "kiln_gelu_and_mul",
                              "out = gelu(x) * y for input [..., 2d] = [x | y], out [..., d]; "
                              "exact gelu(x) = 0.5 x (1 + erf(x / sqrt(2))), in fp32"};
constexpr Activation kGeluTanh = {"gelu_tanh_and_mul", 2, "kiln_gelu_tanh_and_mul",
                                  "out = gelu_tanh(x) * y for input [..., 2d] = [x | y], out [..., d]; "
                                  "gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), "
                                  "in fp32"};

constexpr const char* kUnitPath = "src/activation/act_and_mul.cu";
constexpr const char* kConfigName = "kiln_config.cuh";

// Host memory of one compile. On CUDA 13.0 the compile test's peak RSS (15 compiles, sm_80 and
// sm_90a) is 121 MB against 72 MB for a process of the same suite that compiled nothing: about
// 50 MB, as rmsnorm's 40-52 MB; so the same 128 MB, with its headroom for -pch.
constexpr int64_t kCompileMemoryMb = 128;

std::string AllowedVecs(int dtype_bytes) {
  std::vector<std::string> allowed;
  for (int vec = 1; vec * dtype_bytes <= 16; vec *= 2) allowed.push_back(std::to_string(vec));
  return absl::StrJoin(allowed, ", ");
}

std::string RenderConfig(const JitSpec& spec, const Activation& act, const DTypeInfo& dtype,
                         const ActAndMulLaunchShape& shape) {
  return absl::StrCat(
      "// ", kConfigName, " of ", spec.uri, ", rendered by the ", act.op, " generator\n",
      "// (kernels/ops/activation/act_and_mul_generator.cpp) from the request params. Do not edit.\n",
      "#pragma once\n",
      "#define KILN_ACT_KIND ", act.kind, "\n",
      "#define KILN_ACT_T ", dtype.cuda_type, "\n",
      "#define KILN_ACT_VEC ", shape.vec, "\n",
      "#define KILN_ACT_BLOCK ", shape.block, "\n",
      "#define KILN_ACT_ITEMS ", shape.items_per_thread, "\n");
}

class ActAndMulGenerator : public OpGenerator {
 public:
  explicit ActAndMulGenerator(const Activation& act) : act_(act) {}

  std::string_view name() const override { return act_.op; }
  std::string_view description() const override { return act_.description; }

  std::vector<ParamInfo> params() const override {
    return {
        {"dtype", "element type of input and out", {"fp16", "bf16"}, ""},
        {"vec",
         "elements per vector access: a power of two with vec * sizeof(dtype) <= 16; d, the row "
         "strides and both pointers must be multiples of it. Omit (or 'auto') for 16 bytes (8)",
         {},
         "auto"},
    };
  }

  absl::StatusOr<JitSpec> Generate(const Params& params, const TreeSnapshot& tree) const override {
    const std::string op(name());
    absl::Status known = CheckKnownParams(op, params, {"dtype", "vec"},
                                          "params are dtype (fp16|bf16, required) and vec (optional); d is "
                                          "not a param, the kernel takes it at launch");
    if (!known.ok()) return known;
    absl::StatusOr<const DTypeInfo*> found = RequiredDType(op, params, kDTypes);
    if (!found.ok()) return found.status();
    const DTypeInfo* dtype = *found;

    const int default_vec = DefaultActAndMulVec(dtype->bytes);
    int vec = default_vec;
    if (auto vec_it = params.find("vec"); vec_it != params.end() && vec_it->second != "auto") {
      int requested = 0;
      if (!ParseBoundedInt(vec_it->second, 1, 16, &requested) || !IsPowerOfTwo(requested) ||
          requested * dtype->bytes > 16) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": param 'vec' = '", vec_it->second, "' is not allowed for dtype ", dtype->name,
            ": vec is a power of two with vec * ", dtype->bytes, " bytes <= 16; allowed: ",
            AllowedVecs(dtype->bytes), " (omit it for ", default_vec, ")"));
      }
      vec = requested;
    }

    absl::StatusOr<std::string_view> unit = tree.Read(kUnitPath);
    if (!unit.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(op, ": the kernels tree is incomplete: ",
                                                        unit.status().message()));
    }

    const ActAndMulLaunchShape shape = ChooseActAndMulShape(vec, dtype->bytes);
    JitSpec spec;
    spec.op = op;
    spec.uri = absl::StrCat(op, "_", dtype->name);
    if (vec != default_vec) absl::StrAppend(&spec.uri, "_v", vec);
    spec.params = {{"dtype", dtype->name}, {"vec", std::to_string(vec)}};
    spec.headers.push_back({kConfigName, RenderConfig(spec, act_, *dtype, shape),
                            SourceFile::Origin::kGenerated, ""});
    spec.units.push_back({"act_and_mul.cu", std::string(*unit), SourceFile::Origin::kKernels, kUnitPath});
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {act_.entry};
    // bf16 conversions (cvt.rn.bf16x2.f32) need sm_80; nothing here needs sm_90a features, so
    // one portable family keeps sm_90 devices on plain sm_90 code.
    spec.arch_families = {FamilyAtLeast(80)};
    spec.launch = {{"block", std::to_string(shape.block)},
                   {"cols_per_block", std::to_string(shape.cols_per_block)},
                   {"vec", std::to_string(vec)},
                   {"dynamic_smem", "0"}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }

 private:
  const Activation& act_;
};

}  // namespace

int DefaultActAndMulVec(int dtype_bytes) { return std::max(1, 16 / dtype_bytes); }

ActAndMulLaunchShape ChooseActAndMulShape(int vec, int dtype_bytes) {
  constexpr int kBlock = 128;
  constexpr int kBytesPerHalfPerThread = 64;
  ActAndMulLaunchShape shape;
  shape.vec = vec;
  shape.block = kBlock;
  shape.items_per_thread = std::clamp(kBytesPerHalfPerThread / (vec * dtype_bytes), 1, 16);
  shape.cols_per_block = shape.block * shape.items_per_thread * vec;
  return shape;
}

std::unique_ptr<OpGenerator> MakeSiluAndMulGenerator() { return std::make_unique<ActAndMulGenerator>(kSilu); }
std::unique_ptr<OpGenerator> MakeGeluAndMulGenerator() { return std::make_unique<ActAndMulGenerator>(kGelu); }
std::unique_ptr<OpGenerator> MakeGeluTanhAndMulGenerator() {
  return std::make_unique<ActAndMulGenerator>(kGeluTanh);
}

}  // namespace kiln::kernels
