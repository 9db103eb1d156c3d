#include "kernels/ops/rope/rope_generator.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/ops/generator_params.h"

namespace kiln::kernels {
namespace {

// fp32 q/k are not served: the family is for fp16/bf16 activations (vLLM, FlashInfer alike).
constexpr DTypeInfo kDTypes[] = {kFp16Info, kBf16Info};

struct PosType {
  const char* name;       // param value
  const char* short_name;  // in the URI
  const char* cuda_type;
};
constexpr PosType kPosTypes[] = {{"int32", "i32", "int"}, {"int64", "i64", "long long"}};

constexpr const char* kUnitPath = "src/rope/rope.cu";
constexpr const char* kConfigName = "kiln_config.cuh";

// Host memory of one compile. Not measured per specialization: the unit is as small as
// rmsnorm's (one kernel, no loops over large register arrays), whose compiles grew a fresh
// process's ru_maxrss by 40-52 MB; the same 128 MB budget holds.
constexpr int64_t kCompileMemoryMb = 128;

std::string AllowedVecs(int rotary_dim, int dtype_bytes) {
  std::vector<std::string> allowed;
  for (int vec = 1; vec * dtype_bytes <= 16; vec *= 2) {
    if ((rotary_dim / 2) % vec == 0) allowed.push_back(std::to_string(vec));
  }
  return absl::StrJoin(allowed, ", ");
}

class RopeGenerator : public OpGenerator {
 public:
  explicit RopeGenerator(bool cos_sin_cache) : cos_sin_cache_(cos_sin_cache) {}

  std::string_view name() const override {
    return cos_sin_cache_ ? "apply_rope_with_cos_sin_cache" : "apply_rope";
  }

  std::string_view description() const override {
    return cos_sin_cache_
               ? "rotary position embedding in place on q [tokens, q_heads, head_dim] and k "
                 "[tokens, k_heads, head_dim]: cos/sin of each token's position read from an fp32 "
                 "cos_sin_cache [max_position, rotary_dim] (cos half, then sin half)"
               : "rotary position embedding in place on q [tokens, q_heads, head_dim] and k "
                 "[tokens, k_heads, head_dim]: angle position * theta^(-2i/rotary_dim), optionally "
                 "with Llama-3.1 frequency scaling";
  }

  std::vector<ParamInfo> params() const override {
    return {
        {"dtype", "element type of q and k", {"fp16", "bf16"}, ""},
        {"rotary_dim",
         absl::StrCat("elements of each head that rotate (the first ones): an even integer in 2..",
                      kRopeMaxRotaryDim),
         {},
         ""},
        {"style", "pairs: neox (i, i + rotary_dim/2) or gptj (2i, 2i + 1, interleaved)", {"neox", "gptj"}, "neox"},
        {"pos_dtype", "element type of positions", {"int32", "int64"}, "int64"},
        {"vec",
         "elements per vector access: a power of two with vec * sizeof(dtype) <= 16 that divides "
         "rotary_dim / 2; q, k and their token and head strides must be multiples of it (and, "
         "for the cache, the cache and its row stride multiples of min(vec, 4) floats). Omit "
         "(or 'auto') for the largest such value",
         {},
         "auto"},
    };
  }

  absl::StatusOr<JitSpec> Generate(const Params& params, const TreeSnapshot& tree) const override {
    const std::string op(name());
    absl::Status known = CheckKnownParams(
        op, params, {"dtype", "rotary_dim", "style", "pos_dtype", "vec"},
        absl::StrCat("params are dtype (fp16|bf16, required), rotary_dim (even, 2..", kRopeMaxRotaryDim,
                     ", required), style (neox|gptj), pos_dtype (int32|int64) and vec (optional)"));
    if (!known.ok()) return known;

    absl::StatusOr<const DTypeInfo*> found = RequiredDType(op, params, kDTypes);
    if (!found.ok()) return found.status();
    const DTypeInfo* dtype = *found;

    auto rotary_it = params.find("rotary_dim");
    if (rotary_it == params.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": param 'rotary_dim' is required: the rotated elements per head, an even integer in 2..",
          kRopeMaxRotaryDim));
    }
    int rotary_dim = 0;
    if (!ParseBoundedInt(rotary_it->second, 2, kRopeMaxRotaryDim, &rotary_dim) || rotary_dim % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": param 'rotary_dim' = '", rotary_it->second,
                                                     "' is not allowed; allowed: an even integer in 2..",
                                                     kRopeMaxRotaryDim));
    }

    bool interleaved = false;
    if (auto it = params.find("style"); it != params.end() && it->second != "neox") {
      if (it->second != "gptj") {
        return absl::InvalidArgumentError(
            absl::StrCat(op, ": param 'style' = '", it->second, "' is not allowed; allowed: neox, gptj"));
      }
      interleaved = true;
    }

    const PosType* pos = &kPosTypes[1];
    if (auto it = params.find("pos_dtype"); it != params.end()) {
      pos = nullptr;
      for (const PosType& p : kPosTypes) {
        if (it->second == p.name) pos = &p;
      }
      if (pos == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(op, ": param 'pos_dtype' = '", it->second, "' is not allowed; allowed: int32, int64"));
      }
    }

    const int default_vec = DefaultRopeVec(rotary_dim, dtype->bytes);
    int vec = default_vec;
    if (auto vec_it = params.find("vec"); vec_it != params.end() && vec_it->second != "auto") {
      int requested = 0;
      if (!ParseBoundedInt(vec_it->second, 1, 16, &requested) || !IsPowerOfTwo(requested) ||
          requested * dtype->bytes > 16 || (rotary_dim / 2) % requested != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": param 'vec' = '", vec_it->second, "' is not allowed for dtype ", dtype->name,
            " and rotary_dim ", rotary_dim, ": vec is a power of two with vec * ", dtype->bytes,
            " bytes <= 16 that divides rotary_dim / 2; allowed here: ", AllowedVecs(rotary_dim, dtype->bytes),
            " (omit it for ", default_vec, ")"));
      }
      vec = requested;
    }

    absl::StatusOr<std::string_view> unit = tree.Read(kUnitPath);
    if (!unit.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(op, ": the kernels tree is incomplete: ", unit.status().message()));
    }

    const RopeLaunchShape shape = ChooseRopeShape(rotary_dim, vec);
    const char* style = interleaved ? "gptj" : "neox";
    JitSpec spec;
    spec.op = op;
    spec.uri = absl::StrCat(op, "_", dtype->name, "_r", rotary_dim, "_", style, "_", pos->short_name);
    if (vec != default_vec) absl::StrAppend(&spec.uri, "_v", vec);
    spec.params = {{"dtype", dtype->name},
                   {"rotary_dim", std::to_string(rotary_dim)},
                   {"style", style},
                   {"pos_dtype", pos->name},
                   {"vec", std::to_string(vec)}};
    spec.headers.push_back({kConfigName,
                            absl::StrCat("// ", kConfigName, " of ", spec.uri, ", rendered by the rope generator\n",
                                         "// (kernels/ops/rope/rope_generator.cpp) from the request params. Do not edit.\n",
                                         "#pragma once\n",
                                         "#define KILN_ROPE_COS_SIN_CACHE ", cos_sin_cache_ ? 1 : 0, "\n",
                                         "#define KILN_ROPE_T ", dtype->cuda_type, "\n",
                                         "#define KILN_ROPE_POS ", pos->cuda_type, "\n",
                                         "#define KILN_ROPE_ROTARY_DIM ", rotary_dim, "\n",
                                         "#define KILN_ROPE_VEC ", vec, "\n",
                                         "#define KILN_ROPE_INTERLEAVED ", interleaved ? 1 : 0, "\n",
                                         "#define KILN_ROPE_TOKENS_PER_BLOCK ", shape.tokens_per_block, "\n"),
                            SourceFile::Origin::kGenerated, ""});
    spec.units.push_back({"rope.cu", std::string(*unit), SourceFile::Origin::kKernels, kUnitPath});
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {cos_sin_cache_ ? "kiln_apply_rope_with_cos_sin_cache" : "kiln_apply_rope"};
    // bf16 conversions (cvt.rn.bf16.f32) need sm_80; nothing needs sm_90a features.
    spec.arch_families = {FamilyAtLeast(80)};
    spec.launch = {{"block", std::to_string(shape.block)},
                   {"tokens_per_block", std::to_string(shape.tokens_per_block)},
                   {"threads_per_token", std::to_string(shape.threads_per_token)},
                   {"vec", std::to_string(vec)},
                   {"dynamic_smem", "0"}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }

 private:
  bool cos_sin_cache_;
};

}  // namespace

int DefaultRopeVec(int rotary_dim, int dtype_bytes) {
  int vec = 1;
  while ((vec * 2) * dtype_bytes <= 16 && (rotary_dim / 2) % (vec * 2) == 0) vec *= 2;
  return vec;
}

RopeLaunchShape ChooseRopeShape(int rotary_dim, int vec) {
  RopeLaunchShape shape;
  shape.vec = vec;
  shape.threads_per_token = std::max(1, rotary_dim / 2 / vec);
  shape.tokens_per_block = std::max(1, kRopeTargetBlock / shape.threads_per_token);
  shape.block = shape.threads_per_token * shape.tokens_per_block;
  return shape;
}

std::unique_ptr<OpGenerator> MakeApplyRopeGenerator() { return std::make_unique<RopeGenerator>(false); }

std::unique_ptr<OpGenerator> MakeApplyRopeWithCosSinCacheGenerator() {
  return std::make_unique<RopeGenerator>(true);
}

}  // namespace kiln::kernels
