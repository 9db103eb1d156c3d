#include "kernels/ops/rope/rope_generator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/generator_support.h"
#include "kiln/rope/rope_contract.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

// fp32 q/k are not served: the family is for fp16/bf16 activations (vLLM, FlashInfer alike).
constexpr DTypeInfo kDTypes[] = {kFp16Info, kBf16Info};

struct PosType {
  const char* name;        // param value
  const char* short_name;  // in the URI
  const char* cuda_type;
};
constexpr PosType kPosTypes[] = {{"int32", "i32", "int"}, {"int64", "i64", "long long"}};

constexpr const char* kUnitPath = "src/rope/rope.cu";

// Host memory of one compile. Not measured per specialization: the unit is as small as
// rmsnorm's (one kernel, no loops over large register arrays), whose compiles grew a fresh
// process's ru_maxrss by 40-52 MB; the same 128 MB budget holds.
constexpr int64_t kCompileMemoryMb = 128;

class RopeGenerator : public OpGenerator {
 public:
  explicit RopeGenerator(bool cos_sin_cache) : cos_sin_cache_(cos_sin_cache) {}

  std::string_view name() const override {
    return cos_sin_cache_ ? rope::kApplyRopeWithCosSinCacheOp : rope::kApplyRopeOp;
  }
  std::string_view family() const override { return "rope"; }

  std::string_view description() const override {
    return cos_sin_cache_ ? "rotary position embedding in place on q [tokens, q_heads, head_dim] and k "
                            "[tokens, k_heads, head_dim]: cos/sin of each token's position read from an fp32 "
                            "cos_sin_cache [max_position, rotary_dim] (cos half, then sin half)"
                          : "rotary position embedding in place on q [tokens, q_heads, head_dim] and k "
                            "[tokens, k_heads, head_dim]: angle position * theta^(-2i/rotary_dim), optionally "
                            "with Llama-3.1 frequency scaling";
  }

  std::vector<ParamInfo> params() const override {
    return {
        {.name = kParamDType, .help = "element type of q and k", .choices = DTypeNames(kDTypes)},
        {.name = rope::kParamRotaryDim,
         .kind = ParamInfo::Kind::kInt,
         .help = "elements of each head that rotate (the first ones)",
         .min = 2,
         .max = rope::kMaxRotaryDim,
         .even = true},
        {.name = rope::kParamStyle,
         .help = "pairs: neox (i, i + rotary_dim/2) or gptj (2i, 2i + 1, interleaved)",
         .choices = {rope::kStyleNeox, rope::kStyleGptj},
         .default_value = rope::kStyleNeox},
        {.name = rope::kParamPosDType,
         .help = "element type of positions",
         .choices = {kPosTypes[0].name, kPosTypes[1].name},
         .default_value = kPosTypes[1].name},
        VecParam("elements per vector access: vec * sizeof(dtype) <= 16 and vec divides rotary_dim / 2; q, "
                 "k and their token and head strides must be multiples of it (and, for the cache, the cache "
                 "and its row stride multiples of min(vec, 4) floats). auto: the largest such value"),
    };
  }

  // bf16 conversions (cvt.rn.bf16.f32) need sm_80; nothing needs sm_90a features.
  std::vector<ArchFamily> arch_families() const override { return {FamilyAtLeast(80)}; }

 protected:
  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const DTypeInfo& dtype = FindDType(kDTypes, values.Text(kParamDType));
    const int rotary_dim = values.Int(rope::kParamRotaryDim);
    const bool interleaved = values.Text(rope::kParamStyle) == rope::kStyleGptj;
    const PosType& pos = values.Text(rope::kParamPosDType) == kPosTypes[0].name ? kPosTypes[0] : kPosTypes[1];
    KILN_ABSL_ASSIGN_OR_RETURN(const int vec, ResolveVec(op, values, dtype, rotary_dim / 2, "rotary_dim / 2"));
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit, UnitFromTree(op, tree, kUnitPath));

    const RopeLaunchShape shape = ChooseRopeShape(rotary_dim, vec);
    const char* style = interleaved ? rope::kStyleGptj : rope::kStyleNeox;
    JitSpec spec;
    spec.uri = absl::StrCat(op, "_", dtype.name, "_r", rotary_dim, "_", style, "_", pos.short_name,
                            VecSuffix(vec, WidestVec(dtype.bytes, rotary_dim / 2)));
    spec.params = {{kParamDType, dtype.name},
                   {rope::kParamRotaryDim, std::to_string(rotary_dim)},
                   {rope::kParamStyle, style},
                   {rope::kParamPosDType, pos.name},
                   {kParamVec, std::to_string(vec)}};
    spec.headers.push_back(ConfigHeader(op, spec.uri, "kernels/ops/rope/rope_generator.cpp",
                                        {{"KILN_ROPE_COS_SIN_CACHE", cos_sin_cache_ ? "1" : "0"},
                                         {"KILN_ROPE_T", dtype.cuda_type},
                                         {"KILN_ROPE_POS", pos.cuda_type},
                                         {"KILN_ROPE_ROTARY_DIM", std::to_string(rotary_dim)},
                                         {"KILN_ROPE_VEC", std::to_string(vec)},
                                         {"KILN_ROPE_INTERLEAVED", interleaved ? "1" : "0"},
                                         {"KILN_ROPE_TOKENS_PER_BLOCK", std::to_string(shape.tokens_per_block)}}));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    const char* entry = cos_sin_cache_ ? rope::kApplyRopeWithCosSinCacheEntry : rope::kApplyRopeEntry;
    spec.entries = {entry};
    spec.launch = {{.entry = entry, .block = shape.block, .items_per_block = shape.tokens_per_block}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }

 private:
  bool cos_sin_cache_;
};

KILN_REGISTER_OP_GENERATOR(RopeGenerator, false);
KILN_REGISTER_OP_GENERATOR(RopeGenerator, true);

}  // namespace

RopeLaunchShape ChooseRopeShape(int rotary_dim, int vec) {
  RopeLaunchShape shape;
  shape.vec = vec;
  shape.threads_per_token = std::max(1, rotary_dim / 2 / vec);
  shape.tokens_per_block = std::max(1, kRopeTargetBlock / shape.threads_per_token);
  shape.block = shape.threads_per_token * shape.tokens_per_block;
  return shape;
}

}  // namespace kiln::kernels
