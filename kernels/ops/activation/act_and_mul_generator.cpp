#include "kernels/ops/activation/act_and_mul_generator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/generator_support.h"
#include "kiln/activation/activation_contract.h"
#include "kiln_base/status_macros.h"

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
constexpr Activation kSilu = {activation::kSiluAndMulOp, 0, activation::kSiluAndMulEntry,
                              "out = silu(x) * y for input [..., 2d] = [x | y], out [..., d]; "
                              "silu(x) = x / (1 + exp(-x)), in fp32"};
constexpr Activation kGelu = {activation::kGeluAndMulOp, 1, activation::kGeluAndMulEntry,
                              "out = gelu(x) * y for input [..., 2d] = [x | y], out [..., d]; "
                              "exact gelu(x) = 0.5 x (1 + erf(x / sqrt(2))), in fp32"};
constexpr Activation kGeluTanh = {activation::kGeluTanhAndMulOp, 2, activation::kGeluTanhAndMulEntry,
                                  "out = gelu_tanh(x) * y for input [..., 2d] = [x | y], out [..., d]; "
                                  "gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), "
                                  "in fp32"};

constexpr const char* kUnitPath = "src/activation/act_and_mul.cu";

// Host memory of one compile. On CUDA 13.0 the compile test's peak RSS (15 compiles, sm_80 and
// sm_90a) is 121 MB against 72 MB for a process of the same suite that compiled nothing: about
// 50 MB, as rmsnorm's 40-52 MB; so the same 128 MB, with its headroom for -pch.
constexpr int64_t kCompileMemoryMb = 128;

class ActAndMulGenerator : public OpGenerator {
 public:
  explicit ActAndMulGenerator(const Activation& act) : act_(act) {}

  std::string_view name() const override { return act_.op; }
  std::string_view family() const override { return "activation"; }
  std::string_view description() const override { return act_.description; }

  std::vector<ParamInfo> params() const override {
    return {
        {.name = kParamDType, .help = "element type of input and out", .choices = DTypeNames(kDTypes)},
        VecParam("elements per vector access: vec * sizeof(dtype) <= 16; d, the row strides and both "
                 "pointers must be multiples of it. auto: 16 bytes. d is not a param: the kernel takes it "
                 "at launch"),
    };
  }

  // bf16 conversions (cvt.rn.bf16x2.f32) need sm_80; nothing here needs sm_90a features, so
  // one portable family keeps sm_90 devices on plain sm_90 code.
  std::vector<ArchFamily> arch_families() const override { return {FamilyAtLeast(80)}; }

 protected:
  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const DTypeInfo& dtype = FindDType(kDTypes, values.Text(kParamDType));
    KILN_ABSL_ASSIGN_OR_RETURN(const int vec, ResolveVec(op, values, dtype));
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit, UnitFromTree(op, tree, kUnitPath));

    const ActAndMulLaunchShape shape = ChooseActAndMulShape(vec, dtype.bytes);
    JitSpec spec;
    spec.uri = absl::StrCat(op, "_", dtype.name, VecSuffix(vec, WidestVec(dtype.bytes)));
    spec.params = {{kParamDType, dtype.name}, {kParamVec, std::to_string(vec)}};
    spec.headers.push_back(ConfigHeader(op, spec.uri, "kernels/ops/activation/act_and_mul_generator.cpp",
                                        {{"KILN_ACT_KIND", std::to_string(act_.kind)},
                                         {"KILN_ACT_T", dtype.cuda_type},
                                         {"KILN_ACT_VEC", std::to_string(shape.vec)},
                                         {"KILN_ACT_BLOCK", std::to_string(shape.block)},
                                         {"KILN_ACT_ITEMS", std::to_string(shape.items_per_thread)}}));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {act_.entry};
    spec.launch = {{.entry = act_.entry, .block = shape.block, .items_per_block = shape.cols_per_block}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }

 private:
  const Activation& act_;
};

KILN_REGISTER_OP_GENERATOR(ActAndMulGenerator, kSilu);
KILN_REGISTER_OP_GENERATOR(ActAndMulGenerator, kGelu);
KILN_REGISTER_OP_GENERATOR(ActAndMulGenerator, kGeluTanh);

}  // namespace

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

}  // namespace kiln::kernels
