#include "kernels/ops/sampling/sampling_generator.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kiln::kernels {
namespace {

constexpr const char* kUnitPath = "src/sampling/sampling.cu";
constexpr const char* kConfigName = "kiln_config.cuh";
constexpr int kDefaultVec = 4;  // 16-byte loads of fp32

// Host memory of one compile. Measured on CUDA 13.0 with NVRTC in process (ptxas included, no
// PCH): a process compiling eight specializations in turn (every op; sm_80 and sm_90a) peaked
// at 245 MB of ru_maxrss, 171 MB above its size before NVRTC loaded, so one compile stays well
// under that; top_k_top_p, the largest unit, takes ~1.5 s of ptxas. 256 leaves headroom.
constexpr int64_t kCompileMemoryMb = 256;

struct OutDType {
  const char* name;       // param value
  const char* cuda_type;  // the device type of samples[]
};
constexpr OutDType kOutDTypes[] = {{"int32", "int"}, {"int64", "long long"}};

struct OpInfo {
  const char* name;         // registry name
  const char* op_enum;      // kiln::sampling::SamplingOp
  const char* entry;        // extern "C" kernel
  bool uses_list;           // needs SelectSmem (dynamic shared memory)
  const char* description;
};

constexpr OpInfo kTopK = {
    "top_k_sampling", "kTopK", "kiln_top_k_sampling", true,
    "samples[b] ~ probs[b, :] restricted to the tokens whose value is >= the k-th largest value "
    "of the row (ties kept), renormalized; deterministic in (seed, offset)"};
constexpr OpInfo kTopP = {
    "top_p_sampling", "kTopP", "kiln_top_p_sampling", true,
    "samples[b] ~ probs[b, :] restricted to the tokens whose value v has (sum of values > v) < "
    "p * (row sum), renormalized; deterministic in (seed, offset)"};
constexpr OpInfo kTopKTopP = {
    "top_k_top_p_sampling", "kTopKTopP", "kiln_top_k_top_p_sampling", true,
    "top-k, then top-p over the renormalized top-k set, then a draw from what is left; "
    "deterministic in (seed, offset)"};
constexpr OpInfo kMinP = {
    "min_p_sampling", "kMinP", "kiln_min_p_sampling", false,
    "samples[b] ~ probs[b, :] restricted to the tokens with value >= min_p * (row max), "
    "renormalized; deterministic in (seed, offset)"};
constexpr OpInfo kArgmax = {"argmax", "kArgmax", "kiln_argmax", false,
                            "samples[b] = the index of the largest value of probs[b, :] (ties: the "
                            "lowest index)"};

std::string RenderConfig(const JitSpec& spec, const OpInfo& op, const OutDType& out, int vec) {
  return absl::StrCat(
      "// ", kConfigName, " of ", spec.uri, ", rendered by the sampling generator\n",
      "// (kernels/ops/sampling/sampling_generator.cpp) from the request params. Do not edit.\n",
      "#pragma once\n",
      "#define KILN_SAMPLING_OP ", op.op_enum, "\n",
      "#define KILN_SAMPLING_ENTRY ", op.entry, "\n",
      "#define KILN_SAMPLING_OUT ", out.cuda_type, "\n",
      "#define KILN_SAMPLING_VEC ", vec, "\n",
      "#define KILN_SAMPLING_THREADS ", kSamplingBlock, "\n",
      "#define KILN_SAMPLING_USES_LIST ", op.uses_list ? 1 : 0, "\n");
}

class SamplingGenerator : public OpGenerator {
 public:
  explicit SamplingGenerator(const OpInfo& op) : op_(op) {}

  std::string_view name() const override { return op_.name; }
  std::string_view description() const override { return op_.description; }

  std::vector<ParamInfo> params() const override {
    return {
        {"out_dtype", "element type of samples[]", {"int32", "int64"}, "int32"},
        {"vec",
         "floats per load of probs: 1, 2 or 4; the vocabulary size, the row stride and the "
         "pointer must be multiples of it. Omit (or 'auto') for 4",
         {"1", "2", "4", "auto"},
         "auto"},
    };
  }

  absl::StatusOr<JitSpec> Generate(const Params& params, const TreeSnapshot& tree) const override {
    const std::string op(name());
    for (const auto& [key, value] : params) {
      if (key != "out_dtype" && key != "vec") {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": unknown param '", key, "' (= '", value,
            "'); params are out_dtype (int32|int64, default int32) and vec (1|2|4, default 4)"));
      }
    }

    const OutDType* out = &kOutDTypes[0];
    if (auto it = params.find("out_dtype"); it != params.end()) {
      out = nullptr;
      for (const OutDType& d : kOutDTypes) {
        if (it->second == d.name) out = &d;
      }
      if (out == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": param 'out_dtype' = '", it->second,
                                                       "' is not allowed; allowed: int32, int64"));
      }
    }

    int vec = kDefaultVec;
    if (auto it = params.find("vec"); it != params.end() && it->second != "auto") {
      if (it->second == "1" || it->second == "2" || it->second == "4") {
        vec = it->second[0] - '0';
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": param 'vec' = '", it->second,
            "' is not allowed; allowed: 1, 2, 4 (floats per load; omit it for 4)"));
      }
    }

    absl::StatusOr<std::string_view> unit = tree.Read(kUnitPath);
    if (!unit.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(op, ": the kernels tree is incomplete: ",
                                                        unit.status().message()));
    }

    JitSpec spec;
    spec.op = op;
    spec.uri = absl::StrCat(op, "_", out->name);
    if (vec != kDefaultVec) absl::StrAppend(&spec.uri, "_v", vec);
    spec.params = {{"out_dtype", out->name}, {"vec", std::to_string(vec)}};
    spec.headers.push_back({kConfigName, RenderConfig(spec, op_, *out, vec), SourceFile::Origin::kGenerated, ""});
    spec.units.push_back({"sampling.cu", std::string(*unit), SourceFile::Origin::kKernels, kUnitPath});
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {op_.entry};
    // Nothing needs more than sm_70 (64-bit shared atomics, shuffles); sm_80+ is the family
    // the rest of the library targets and the one tested.
    spec.arch_families = {FamilyAtLeast(80)};
    spec.launch = {{"block", std::to_string(kSamplingBlock)},
                   {"rows_per_block", "1"},
                   {"vec", std::to_string(vec)},
                   {"dynamic_smem", std::to_string(op_.uses_list ? kSamplingSelectSmem : 0)},
                   {"max_vocab", std::to_string(kSamplingMaxVocab)}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }

 private:
  const OpInfo& op_;
};

}  // namespace

std::unique_ptr<OpGenerator> MakeTopKSamplingGenerator() { return std::make_unique<SamplingGenerator>(kTopK); }
std::unique_ptr<OpGenerator> MakeTopPSamplingGenerator() { return std::make_unique<SamplingGenerator>(kTopP); }
std::unique_ptr<OpGenerator> MakeTopKTopPSamplingGenerator() {
  return std::make_unique<SamplingGenerator>(kTopKTopP);
}
std::unique_ptr<OpGenerator> MakeMinPSamplingGenerator() { return std::make_unique<SamplingGenerator>(kMinP); }
std::unique_ptr<OpGenerator> MakeArgmaxGenerator() { return std::make_unique<SamplingGenerator>(kArgmax); }

}  // namespace kiln::kernels
