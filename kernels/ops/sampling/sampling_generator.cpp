// The sampling family's generators (ops "top_k_sampling", "top_p_sampling",
// "top_k_top_p_sampling", "min_p_sampling" and "argmax"): one compilation unit
// (kernels/src/sampling/sampling.cu) and one kernel parameter struct for all five; blocks of
// sampling::kBlock threads, one per row or a cluster of `cluster` per row. Contract:
// kiln/sampling/sampling_contract.h, docs/kernels-sampling.md.
#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/generator_support.h"
#include "kiln/sampling/sampling_contract.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

constexpr const char* kUnitPath = "src/sampling/sampling.cu";
// probs are fp32: vec counts floats (1, 2 or 4 per load).
constexpr DTypeInfo kProbsType = kFp32Info;

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
  const char* name;     // registry name
  const char* op_enum;  // kiln::sampling::SamplingOp
  const char* entry;    // extern "C" kernel
  bool uses_list;       // needs SelectSmem (dynamic shared memory)
  const char* description;
};

constexpr OpInfo kTopK = {sampling::kTopKOp, "kTopK", sampling::kTopKEntry, true,
                          "samples[b] ~ probs[b, :] restricted to the tokens whose value is >= the k-th largest value "
                          "of the row (ties kept), renormalized; deterministic in (seed, offset)"};
constexpr OpInfo kTopP = {sampling::kTopPOp, "kTopP", sampling::kTopPEntry, true,
                          "samples[b] ~ probs[b, :] restricted to the tokens whose value v has (sum of values > v) < "
                          "p * (row sum), renormalized; deterministic in (seed, offset)"};
constexpr OpInfo kTopKTopP = {sampling::kTopKTopPOp, "kTopKTopP", sampling::kTopKTopPEntry, true,
                              "top-k, then top-p over the renormalized top-k set, then a draw from what is left; "
                              "deterministic in (seed, offset)"};
constexpr OpInfo kMinP = {sampling::kMinPOp, "kMinP", sampling::kMinPEntry, false,
                          "samples[b] ~ probs[b, :] restricted to the tokens with value >= min_p * (row max), "
                          "renormalized; deterministic in (seed, offset)"};
constexpr OpInfo kArgmax = {sampling::kArgmaxOp, "kArgmax", sampling::kArgmaxEntry, false,
                            "samples[b] = the index of the largest value of probs[b, :] (ties: the "
                            "lowest index)"};

class SamplingGenerator : public OpGenerator {
 public:
  explicit SamplingGenerator(const OpInfo& op) : op_(op) {}

  std::string_view name() const override { return op_.name; }
  std::string_view family() const override { return "sampling"; }
  std::string_view description() const override { return op_.description; }

  std::vector<ParamInfo> params() const override {
    return {
        {.name = sampling::kParamOutDType,
         .help = "element type of samples[]",
         .choices = {kOutDTypes[0].name, kOutDTypes[1].name},
         .default_value = kOutDTypes[0].name},
        VecParam("floats per load of probs (at most 4); the vocabulary size, the row stride and the pointer "
                 "must be multiples of it. auto: 4"),
        {.name = sampling::kParamCluster,
         .help = "blocks that share one row (a thread-block cluster; above 1 needs sm_90+): small batches over "
                 "more SMs",
         .choices = {"1", "2", "4", "8"},
         .default_value = "1"},
    };
  }

  // A block per row needs nothing beyond sm_70 (shuffles, shared atomics); sm_80+ is the
  // family the rest of the library targets and the one tested. A row over a cluster needs
  // sm_90+ (Build narrows the family).
  std::vector<ArchFamily> arch_families() const override { return {FamilyAtLeast(80)}; }

 protected:
  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const OutDType& out = values.Text(sampling::kParamOutDType) == kOutDTypes[0].name ? kOutDTypes[0] : kOutDTypes[1];
    KILN_ABSL_ASSIGN_OR_RETURN(const int vec, ResolveVec(op, values, kProbsType));
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit, UnitFromTree(op, tree, kUnitPath));
    const int cluster = values.Int(sampling::kParamCluster);

    const int smem = !op_.uses_list ? 0
                                    : (cluster > 1 ? sampling::kClusterSelectSmemBytes : sampling::kSelectSmemBytes);
    JitSpec spec;
    spec.uri = absl::StrCat(op, "_", out.name, VecSuffix(vec, WidestVec(kProbsType.bytes)),
                            cluster > 1 ? absl::StrCat("_c", cluster) : "");
    spec.params = {{sampling::kParamOutDType, out.name},
                   {kParamVec, std::to_string(vec)},
                   {sampling::kParamCluster, std::to_string(cluster)}};
    if (cluster > 1) spec.arch_families = {FamilyAtLeast(90)};
    spec.headers.push_back(ConfigHeader(op, spec.uri, "kernels/ops/sampling/sampling_generator.cpp",
                                        {{"KILN_SAMPLING_OP", op_.op_enum},
                                         {"KILN_SAMPLING_ENTRY", op_.entry},
                                         {"KILN_SAMPLING_OUT", out.cuda_type},
                                         {"KILN_SAMPLING_VEC", std::to_string(vec)},
                                         {"KILN_SAMPLING_THREADS", std::to_string(sampling::kBlock)},
                                         {"KILN_SAMPLING_USES_LIST", op_.uses_list ? "1" : "0"},
                                         {"KILN_SAMPLING_CLUSTER", std::to_string(cluster)}}));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {op_.entry};
    spec.launch = {{.entry = op_.entry, .block = sampling::kBlock, .dynamic_smem = smem, .items_per_block = 1}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }

 private:
  const OpInfo& op_;
};

KILN_REGISTER_OP_GENERATOR(SamplingGenerator, kTopK);
KILN_REGISTER_OP_GENERATOR(SamplingGenerator, kTopP);
KILN_REGISTER_OP_GENERATOR(SamplingGenerator, kTopKTopP);
KILN_REGISTER_OP_GENERATOR(SamplingGenerator, kMinP);
KILN_REGISTER_OP_GENERATOR(SamplingGenerator, kArgmax);

}  // namespace
}  // namespace kiln::kernels
