// The batch_prefill_ragged and batch_prefill_paged generators (family prefill): one unit,
// kernels/src/prefill/batch_prefill.cu, specialized on the dtype, head dim, group, causal mask,
// soft cap, row tile (which of the two kernels) and — paged — the page size; the URI names them
// and the tile: batch_prefill_ragged_bf16_d128_g4_causal_t128x128 (the Hopper kernel),
// batch_prefill_paged_bf16_d128_g4_p16_t64x64_softcap (the mma.sync kernel).
// sm_scale, the cap value and the window are launch arguments. Contract:
// kiln/prefill/prefill_contract.h; docs/kernels-prefill.md.
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/generator_support.h"
#include "kiln/prefill/prefill_contract.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

constexpr DTypeInfo kDTypes[] = {kFp16Info, kBf16Info};

constexpr const char* kUnitPath = "src/prefill/batch_prefill.cu";

// Host memory of one compile: NVRTC's ru_maxrss for one specialization (both entries) for
// sm_90a is about that of batch_decode's (both are unrolled mma.sync loops); 256 MB leaves
// room for head_dim 256.
constexpr int64_t kCompileMemoryMb = 256;

template <bool kPaged>
class BatchPrefillGenerator : public OpGenerator {
 public:
  std::string_view name() const override {
    return kPaged ? prefill::kBatchPrefillPagedOp : prefill::kBatchPrefillRaggedOp;
  }
  std::string_view family() const override { return "prefill"; }

  std::string_view description() const override {
    return kPaged ? "prefill attention of a batch's queries over the paged KV cache (chunked prefill, speculative "
                    "verification): causal aligned to the end or not, GQA, optional soft cap and sliding window, "
                    "split-KV chunks merged by log-sum-exp; entries kiln_batch_prefill and kiln_batch_prefill_merge"
                  : "prefill attention of a batch's queries over its ragged keys and values (requests "
                    "concatenated, qo_indptr and kv_indptr in tokens): causal aligned to the end or not, GQA, "
                    "optional soft cap and sliding window, split-KV chunks merged by log-sum-exp; entries "
                    "kiln_batch_prefill and kiln_batch_prefill_merge";
  }

  std::vector<ParamInfo> params() const override {
    std::vector<ParamInfo> all = {
        {.name = kParamDType,
         .help = "element type of q, k, v and out (the kernel runs on fp16/bf16 tensor-core MMAs)",
         .choices = DTypeNames(kDTypes)},
        {.name = prefill::kParamHeadDim, .help = "elements per head", .choices = {"64", "128", "256"}},
        {.name = prefill::kParamGroup,
         .help = "query heads per kv head (num_qo_heads / num_kv_heads; they share the kv head's tiles)",
         .choices = {"1", "2", "4", "8"}},
        {.name = prefill::kParamCausal,
         .help = "1: query i of q_len sees kv positions <= kv_len - q_len + i (whole tiles above skipped); 0: all",
         .choices = {"0", "1"}},
        {.name = prefill::kParamSoftCap,
         .help = "1: logits are cap * tanh(logits / cap) (cap given at run time); 0: plain",
         .choices = {"0", "1"},
         .default_value = "0"},
        {.name = prefill::kParamTileRows,
         .help = "rows of a block's tile: 128 runs the Hopper kernel (wgmma; head_dim 64 and 128), 64 the "
                 "mma.sync kernel (two blocks an SM; for requests of few rows, as in speculative verification). "
                 "auto: 128 where the Hopper kernel serves the head_dim, else 64",
         .choices = {"64", "128"},
         .default_value = kAuto},
    };
    if (kPaged)
      all.push_back({.name = prefill::kParamPageSize,
                     .kind = ParamInfo::Kind::kInt,
                     .help = "tokens per page of the KV cache",
                     .min = 1,
                     .max = prefill::kMaxPageSize,
                     .power_of_two = true});
    return all;
  }

  // The kernels are Hopper ones (TMA and wgmma in the next tactic); the contract stays
  // sm_90a-only from the first kernel so that no caller depends on another arch.
  std::vector<ArchFamily> arch_families() const override { return {FamilyArchSpecific(90)}; }

 protected:
  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const DTypeInfo& dtype = FindDType(kDTypes, values.Text(kParamDType));
    const int head_dim = values.Int(prefill::kParamHeadDim);
    const int group = values.Int(prefill::kParamGroup);
    const bool causal = values.Text(prefill::kParamCausal) == "1";
    const bool soft_cap = values.Text(prefill::kParamSoftCap) == "1";
    const int page_size = kPaged ? values.Int(prefill::kParamPageSize) : 1;
    const int tile_rows = values.IsAuto(prefill::kParamTileRows) ? prefill::DefaultTileRows(head_dim)
                                                                 : values.Int(prefill::kParamTileRows);
    if (!prefill::ValidTileRows(head_dim, tile_rows))
      return absl::InvalidArgumentError(absl::StrCat(op, ": param 'tile_rows' = '", tile_rows,
                                                     "' is not allowed for head_dim ", head_dim,
                                                     ": the Hopper kernel (128-row tiles) serves head_dim 64 and "
                                                     "128; use tile_rows 64 (or auto)"));
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit, UnitFromTree(op, tree, kUnitPath));

    const int tile_kv = prefill::TileKv(head_dim, tile_rows);
    JitSpec spec;
    spec.uri = absl::StrCat(op, "_", dtype.name, "_d", head_dim, "_g", group,
                            kPaged ? absl::StrCat("_p", page_size) : "", causal ? "_causal" : "", "_t", tile_rows, "x",
                            tile_kv, soft_cap ? "_softcap" : "");
    spec.params = {{kParamDType, dtype.name},
                   {prefill::kParamHeadDim, std::to_string(head_dim)},
                   {prefill::kParamGroup, std::to_string(group)},
                   {prefill::kParamCausal, causal ? "1" : "0"},
                   {prefill::kParamSoftCap, soft_cap ? "1" : "0"},
                   {prefill::kParamTileRows, std::to_string(tile_rows)}};
    if (kPaged) spec.params[prefill::kParamPageSize] = std::to_string(page_size);
    spec.headers.push_back(ConfigHeader(op, spec.uri, "kernels/ops/prefill/batch_prefill_generator.cpp",
                                        {{"KILN_PREFILL_T", dtype.cuda_type},
                                         {"KILN_PREFILL_HEAD_DIM", std::to_string(head_dim)},
                                         {"KILN_PREFILL_GROUP", std::to_string(group)},
                                         {"KILN_PREFILL_CAUSAL", causal ? "1" : "0"},
                                         {"KILN_PREFILL_SOFT_CAP", soft_cap ? "1" : "0"},
                                         {"KILN_PREFILL_PAGED", kPaged ? "1" : "0"},
                                         {"KILN_PREFILL_PAGE_SIZE", std::to_string(page_size)},
                                         {"KILN_PREFILL_TILE_ROWS", std::to_string(tile_rows)}}));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {prefill::kBatchPrefillEntry, prefill::kBatchPrefillMergeEntry};
    spec.launch = {{.entry = prefill::kBatchPrefillEntry,
                    .block = prefill::PrefillThreads(tile_rows),
                    .dynamic_smem = prefill::PrefillSmemBytes(head_dim, tile_rows),
                    .items_per_block = tile_rows},
                   {.entry = prefill::kBatchPrefillMergeEntry,
                    .block = prefill::kMergeThreads,
                    .items_per_block = prefill::kMergePositions}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }
};

using RaggedGenerator = BatchPrefillGenerator<false>;
using PagedGenerator = BatchPrefillGenerator<true>;
KILN_REGISTER_OP_GENERATOR(RaggedGenerator);
KILN_REGISTER_OP_GENERATOR(PagedGenerator);

}  // namespace
}  // namespace kiln::kernels
