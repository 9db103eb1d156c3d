// The gemm family's grouped ops, grouped_gemm (contiguous rows, m_indptr) and
// grouped_gemm_masked ([E, M_max] rows, masked_m), and their block-scaled fp8 forms
// grouped_fp8_gemm and grouped_fp8_gemm_masked (kiln/ops/gemm.h): their entries in the op
// table, the tactic, the tensor maps, the launch, and the C++ and C APIs. Validation is
// grouped_gemm_plan.h's, the heuristic gemm_plan.h's; the kernel contract
// kiln/gemm/gemm_contract.h.
#include <algorithm>
#include <map>
#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/capi/c_status.h"
#include "client/core/loader/launch_preparation.h"
#include "client/ops/gemm/gemm_launch.h"
#include "client/ops/gemm/gemm_plan.h"
#include "client/ops/gemm/gemm_tuning.h"
#include "client/ops/gemm/grouped_gemm_ops.h"
#include "client/ops/gemm/grouped_gemm_plan.h"
#include "client/ops/op_table.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/ops/gemm.h"

namespace kiln::client {
namespace {

// What selects a kernel: one cubin per (layout, dtype, out_dtype, tactic); the groups, their
// rows, N and K are launch arguments.
struct GroupedGemmSpec {
  DType dtype = DType::kBFloat16;
  DType out_dtype = DType::kBFloat16;
  int32_t tile_m = 0;
  int32_t tile_n = 0;
  int32_t stages = 0;
  int32_t group_m = 0;
  bool silu_and_mul = false;
  bool a_gather = false;  // A's rows through GemmParams::a_rows (contiguous only)
  bool operator==(const GroupedGemmSpec&) const = default;
  auto Fields() const { return std::tie(dtype, out_dtype, tile_m, tile_n, stages, group_m, silu_and_mul, a_gather); }
  std::map<std::string, std::string> Params() const {
    std::map<std::string, std::string> params = {{gemm::kParamOutDType, DTypeName(out_dtype)},
                                                 {gemm::kParamTileM, std::to_string(tile_m)},
                                                 {gemm::kParamTileN, std::to_string(tile_n)},
                                                 {gemm::kParamStages, std::to_string(stages)},
                                                 {gemm::kParamGroupM, std::to_string(group_m)}};
    if (dtype != DType::kFloat8E4M3) params[kParamDType] = DTypeName(dtype);  // the fp8 ops' inputs are e4m3
    if (silu_and_mul) params[gemm::kParamEpilogue] = gemm::kGemmEpilogueNames[gemm::kSiluAndMulEpilogue];
    if (a_gather) params[gemm::kParamAGather] = "1";
    return params;
  }
};

const OpKernels kContiguousKernels = {
    gemm::kGroupedGemmOp, {{{.name = gemm::kGroupedGemmEntry, .min_block = 256, .uses_items_per_block = true}}}};
const OpKernels kMaskedKernels = {
    gemm::kGroupedGemmMaskedOp, {{{.name = gemm::kGroupedGemmEntry, .min_block = 256, .uses_items_per_block = true}}}};
const OpKernels kFp8ContiguousKernels = {
    gemm::kGroupedFp8GemmOp, {{{.name = gemm::kGroupedGemmEntry, .min_block = 256, .uses_items_per_block = true}}}};
const OpKernels kFp8MaskedKernels = {
    gemm::kGroupedFp8GemmMaskedOp,
    {{{.name = gemm::kGroupedGemmEntry, .min_block = 256, .uses_items_per_block = true}}}};

const OpKernels& KernelsOf(const GroupedGemmPlan& plan) {
  if (plan.dtype == DType::kFloat8E4M3) return plan.masked ? kFp8MaskedKernels : kFp8ContiguousKernels;
  return plan.masked ? kMaskedKernels : kContiguousKernels;
}

// The rows a group has on average (contiguous) or at most (masked): the device holds the rest.
int64_t RowsPerGroup(const GroupedGemmPlan& plan) {
  return plan.masked ? plan.group_stride : (plan.rows + plan.groups - 1) / plan.groups;
}

// The groups that can have rows: contiguous, at most one per row (a decode step's few tokens
// reach few experts: the heuristic then counts their tiles, not E groups' worth, and picks tiles
// that spread the weights over the SMs); masked, every group up to M_max.
int BusyGroups(const GroupedGemmPlan& plan) {
  return plan.masked ? plan.groups : static_cast<int>(std::min<int64_t>(plan.groups, std::max<int64_t>(plan.rows, 1)));
}

// The call's tuning bucket. The silu_and_mul kernel is another kernel than the plain one of the
// same shape (its tiles make half the columns, its epilogue does more): a bucket of its own, which
// kiln::tune (plain grouped_gemm) never fills, so it takes the heuristic's tactic rather than one
// measured on the plain kernel.
std::string BucketOf(const GroupedGemmPlan& plan, int64_t rows_per_group) {
  std::string bucket = GroupedTuningBucket(plan.dtype, plan.out_dtype, plan.groups, rows_per_group, plan.n, plan.k);
  if (plan.silu_and_mul) bucket += std::string("_") + gemm::kGemmEpilogueNames[gemm::kSiluAndMulEpilogue];
  return bucket;
}

// D as e4m3 codes and scales (the fp8 silu_and_mul epilogue).
bool CodesOut(const GroupedGemmPlan& plan) { return plan.out_dtype == DType::kFloat8E4M3; }

// The fp8 silu_and_mul epilogue quantizes a tile's 128 columns of D as one scale group: tile_n
// 256 whatever the heuristic's ranking, its tile_m and raster group, the most stages that fit.
gemm::GemmTactic WithCodesTile(gemm::GemmTactic t) {
  t.tile_n = kCodesTileN;
  t.stages = gemm::GemmMaxStages(t.tile_m, t.tile_n, 1, /*grouped=*/true, 1);
  return t;
}

// The tactic of a call (ChooseTactic: forced, tuned, the heuristic's first unblocked). With codes
// out, a blocklisted 256-wide heuristic falls back to other 256-wide tactics only, and a forced
// narrower tile is refused here, by name, rather than by the generator.
StatusOr<ChosenGemmTactic> GroupedTacticFor(const GroupedGemmPlan& plan, const GemmDeviceFacts& device,
                                            bool skip_tuned) {
  const StatusOr<GemmTacticControls>& controls = GemmTacticControlsFromEnvironment();
  if (!controls.ok()) return controls.status().WithContext(plan.api);
  const int64_t rows_per_group = RowsPerGroup(plan);
  const gemm::GemmTactic heuristic = ChooseGroupedGemmTactic(rows_per_group, BusyGroups(plan), plan.n, plan.k,
                                                             device.sms, plan.masked);
  const char* op = KernelsOf(plan).op;
  TacticQuestion q{.op = op,
                   .device_ordinal = plan.device,
                   .device = &device,
                   .api = plan.api,
                   .bucket = BucketOf(plan, rows_per_group),
                   .heuristic = CodesOut(plan) ? WithCodesTile(heuristic) : heuristic};
  if (!CodesOut(plan)) return ChooseTactic(q, *controls, skip_tuned);
  if (!CodesTileAllowedBy(*controls))
    return InvalidArgument("KILN_FORCE_TACTIC", std::string("forces ") + op + " to tile_n " +
                                                    std::to_string(controls->Forced(op)->tile_n) +
                                                    "; its silu_and_mul epilogue into e4m3 takes tile_n " +
                                                    std::to_string(kCodesTileN) + " only")
        .WithContext(plan.api);
  q.ranked = [&] {
    std::vector<gemm::GemmTactic> wide;
    for (const gemm::GemmTactic& t : FallbackTactics(op, q.heuristic))
      if (t.tile_n == kCodesTileN) wide.push_back(t);
    return wide;
  };
  return ChooseTactic(q, *controls, skip_tuned);
}

// `forced` null: the tactic of the call (GroupedTacticFor, remembered per thread).
Status LaunchGrouped(const GroupedGemmPlan& plan, const gemm::GemmTactic* forced, void* stream) {
  if (plan.rows == 0) return OkStatus();  // no rows in any group: nothing to launch
  auto driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status().WithContext(plan.api);
  KILN_ASSIGN_OR_RETURN(const GemmDeviceFacts* device, GemmFactsOf(**driver, plan.device));
  gemm::GemmTactic tactic{};
  if (forced != nullptr) {
    tactic = *forced;
  } else {
    const TacticCallKey key{KernelsOf(plan).op,
                            plan.device,
                            plan.dtype,
                            plan.out_dtype,
                            RowsPerGroup(plan),
                            plan.n,
                            plan.k,
                            plan.groups,
                            plan.silu_and_mul ? gemm::kSiluAndMulEpilogue : gemm::kPlainEpilogue};
    KILN_ASSIGN_OR_RETURN(const ChosenGemmTactic chosen,
                          RememberedTactic(key, [&] { return GroupedTacticFor(plan, *device, false); }));
    tactic = chosen.tactic;
  }
  const bool a_gather = plan.a_rows != nullptr;
  const GroupedGemmSpec spec{plan.dtype,    plan.out_dtype, tactic.tile_m,     tactic.tile_n,
                             tactic.stages, tactic.group_m, plan.silu_and_mul, a_gather};
  KILN_ASSIGN_OR_RETURN(const PreparedLaunch ready, PrepareOpLaunch(KernelsOf(plan), spec, plan.device, plan.api));
  KILN_RETURN_IF_ERROR(CheckGemmBlock(ready.launch->entry().block, tactic.tile_m, plan.api, KernelsOf(plan).op));

  gemm::GemmParams params{};
  KILN_RETURN_IF_ERROR(EncodeGemmOperands(**driver,
                                          {plan.dtype, plan.a, a_gather ? plan.a_source_rows : plan.rows,
                                           plan.a_row_stride, plan.b, plan.groups * plan.n, plan.b_row_stride, plan.k,
                                           /*b_halves=*/plan.silu_and_mul ? 2 : 1},
                                          tactic, &params));
  params.d = plan.d;
  params.m = plan.rows;
  params.n = plan.n;
  params.k = plan.k;
  params.d_row_stride = plan.d_row_stride;
  params.group_rows = plan.group_rows;
  params.group_stride = plan.group_stride;
  params.groups = plan.groups;
  params.a_scales = plan.a_scales;
  params.b_scales = plan.b_scales;
  params.a_scale_stride = plan.a_scale_stride;
  params.b_scale_stride = plan.b_scale_stride;
  params.d_scales = plan.d_scales;
  params.d_scale_stride = plan.d_scale_stride;
  if (a_gather) {  // the producer warp copies A's rows by the table (its map describes a, unread)
    params.a = plan.a;
    params.a_rows = plan.a_rows;
    params.a_row_stride = plan.a_row_stride * static_cast<int64_t>(DTypeSize(plan.dtype));
    params.a_row_divisor = plan.a_row_divisor;
    params.a_row_count = static_cast<int>(plan.a_source_rows);
  }
  // D as rows of all groups (masked: E * M_max rows), n / 2 columns with silu_and_mul; through
  // TMA where the plan says so (by default from kGroupedTmaStoreMinRows rows a group).
  const bool tma_store = plan.stores == GroupedGemmPlan::Stores::kByRows
                             ? GroupedGemmStoresThroughTma(RowsPerGroup(plan))
                             : plan.stores == GroupedGemmPlan::Stores::kThroughTma;
  if (tma_store && !CodesOut(plan))  // codes: stored from registers with their scales
    KILN_RETURN_IF_ERROR(EncodeGemmOutput(**driver, tactic,
                                          {.dtype = plan.out_dtype,
                                           .d = plan.d,
                                           .m = plan.rows,
                                           .n = plan.silu_and_mul ? plan.n / 2 : plan.n,
                                           .row_stride = plan.d_row_stride,
                                           .grouped = true,
                                           .silu_and_mul = plan.silu_and_mul,
                                           .fp8_inputs = plan.dtype == DType::kFloat8E4M3},
                                          &params));

  // Persistent blocks, one per SM: how many tiles the groups have is known only on the device
  // (blocks without a tile return at once).
  return LaunchGemmKernel(**driver, ready, gemm::kGroupedGemmEntry, device->sms, params, stream);
}

// The arguments of the four grouped ops: kMasked picks the rows' table (m_indptr or masked_m),
// kFp8 adds the scales (null for the bf16/fp16 ops).
template <bool kMasked, bool kFp8>
struct GroupedArgs {
  const TensorView* d = nullptr;
  const TensorView* a = nullptr;
  const TensorView* b = nullptr;
  const TensorView* a_scales = nullptr;
  const TensorView* b_scales = nullptr;
  const TensorView* group_rows = nullptr;
  template <typename Self, typename V>
  static void Visit(Self& x, V& v) {
    v.Out("d", x.d).In("a", x.a).In("b", x.b);
    if constexpr (kFp8) v.In("a_scales", x.a_scales).In("b_scales", x.b_scales);
    v.In(kMasked ? "masked_m" : "m_indptr", x.group_rows);
  }
};
using ContiguousArgs = GroupedArgs<false, false>;
using MaskedArgs = GroupedArgs<true, false>;
using Fp8ContiguousArgs = GroupedArgs<false, true>;
using Fp8MaskedArgs = GroupedArgs<true, true>;

template <bool kMasked, bool kFp8>
StatusOr<GroupedGemmPlan> PlanOf(const GroupedArgs<kMasked, kFp8>& x, const char* api) {
  if constexpr (kFp8)
    return kMasked ? PlanGroupedFp8GemmMasked(*x.d, *x.a, *x.b, *x.a_scales, *x.b_scales, *x.group_rows, api)
                   : PlanGroupedFp8Gemm(*x.d, *x.a, *x.b, *x.a_scales, *x.b_scales, *x.group_rows, api);
  else
    return kMasked ? PlanGroupedGemmMasked(*x.d, *x.a, *x.b, *x.group_rows, api)
                   : PlanGroupedGemm(*x.d, *x.a, *x.b, *x.group_rows, api);
}
template <bool kMasked, bool kFp8>
Status RunGrouped(const GroupedArgs<kMasked, kFp8>& x, const char* api, void* stream) {
  KILN_ASSIGN_OR_RETURN(const GroupedGemmPlan plan, PlanOf(x, api));
  return LaunchGrouped(plan, nullptr, stream);
}
constexpr auto RunContiguous = RunGrouped<false, false>;
constexpr auto RunMasked = RunGrouped<true, false>;
constexpr auto RunFp8Contiguous = RunGrouped<false, true>;
constexpr auto RunFp8Masked = RunGrouped<true, true>;

const OpDescriptor kGroupedGemm = {.name = "grouped_gemm",
                                   .op = gemm::kGroupedGemmOp,
                                   .family = "gemm",
                                   .cpp_api = "kiln::ops::grouped_gemm",
                                   .c_api = "kiln_grouped_gemm",
                                   .invoke = InvokeByVisit<ContiguousArgs, RunContiguous>};
const OpDescriptor kGroupedGemmMasked = {.name = "grouped_gemm_masked",
                                         .op = gemm::kGroupedGemmMaskedOp,
                                         .family = "gemm",
                                         .cpp_api = "kiln::ops::grouped_gemm_masked",
                                         .c_api = "kiln_grouped_gemm_masked",
                                         .invoke = InvokeByVisit<MaskedArgs, RunMasked>};
const OpDescriptor kGroupedFp8Gemm = {.name = "grouped_fp8_gemm",
                                      .op = gemm::kGroupedFp8GemmOp,
                                      .family = "gemm",
                                      .cpp_api = "kiln::ops::grouped_fp8_gemm",
                                      .c_api = "kiln_grouped_fp8_gemm",
                                      .invoke = InvokeByVisit<Fp8ContiguousArgs, RunFp8Contiguous>};
const OpDescriptor kGroupedFp8GemmMasked = {.name = "grouped_fp8_gemm_masked",
                                            .op = gemm::kGroupedFp8GemmMaskedOp,
                                            .family = "gemm",
                                            .cpp_api = "kiln::ops::grouped_fp8_gemm_masked",
                                            .c_api = "kiln_grouped_fp8_gemm_masked",
                                            .invoke = InvokeByVisit<Fp8MaskedArgs, RunFp8Masked>};
KILN_REGISTER_OP(kGroupedGemm);
KILN_REGISTER_OP(kGroupedGemmMasked);
KILN_REGISTER_OP(kGroupedFp8Gemm);
KILN_REGISTER_OP(kGroupedFp8GemmMasked);

}  // namespace

bool CodesTileAllowedBy(const GemmTacticControls& controls) {
  const gemm::GemmTactic* forced = controls.Forced(gemm::kGroupedFp8GemmOp);
  return forced == nullptr || forced->tile_n == kCodesTileN;
}

bool GroupedFp8CodesTileAllowed() {
  const StatusOr<GemmTacticControls>& controls = GemmTacticControlsFromEnvironment();
  return !controls.ok() || CodesTileAllowedBy(*controls);  // a bad value fails the GEMM's call itself
}

StatusOr<ChosenGemmTactic> GroupedGemmTacticOfCall(const GroupedGemmPlan& plan, bool skip_tuned) {
  KILN_ASSIGN_OR_RETURN(const CudaDriver* driver, CudaDriver::Get());
  KILN_ASSIGN_OR_RETURN(const GemmDeviceFacts* device, GemmFactsOf(*driver, plan.device));
  return GroupedTacticFor(plan, *device, skip_tuned);
}

Status LaunchGroupedGemmPlan(const GroupedGemmPlan& plan, const gemm::GemmTactic& tactic, void* stream) {
  if (!gemm::GemmTacticFits(tactic, /*grouped=*/true))
    return InvalidArgument(std::string(plan.api) + ": tactic " + std::to_string(tactic.tile_m) + "x" +
                           std::to_string(tactic.tile_n) + " with " + std::to_string(tactic.stages) +
                           " stages, group_m " + std::to_string(tactic.group_m) + ", split_k " +
                           std::to_string(tactic.split_k) + " is not in the " + KernelsOf(plan).op + " tactic space");
  return LaunchGrouped(plan, &tactic, stream);
}

Status LaunchGroupedGemmPlanOfCall(const GroupedGemmPlan& plan, void* stream) {
  return LaunchGrouped(plan, nullptr, stream);
}

}  // namespace kiln::client

namespace kiln::ops {

Status grouped_gemm(const TensorView& d, const TensorView& a, const TensorView& b, const TensorView& m_indptr,
                    void* stream) {
  return client::CallOp(client::kGroupedGemm, client::kGroupedGemm.cpp_api,
                        client::ContiguousArgs{&d, &a, &b, nullptr, nullptr, &m_indptr}, stream, client::RunContiguous);
}

Status grouped_gemm_masked(const TensorView& d, const TensorView& a, const TensorView& b, const TensorView& masked_m,
                           void* stream) {
  return client::CallOp(client::kGroupedGemmMasked, client::kGroupedGemmMasked.cpp_api,
                        client::MaskedArgs{&d, &a, &b, nullptr, nullptr, &masked_m}, stream, client::RunMasked);
}

Status grouped_fp8_gemm(const TensorView& d, const TensorView& a, const TensorView& b, const TensorView& a_scales,
                        const TensorView& b_scales, const TensorView& m_indptr, void* stream) {
  return client::CallOp(client::kGroupedFp8Gemm, client::kGroupedFp8Gemm.cpp_api,
                        client::Fp8ContiguousArgs{&d, &a, &b, &a_scales, &b_scales, &m_indptr}, stream,
                        client::RunFp8Contiguous);
}

Status grouped_fp8_gemm_masked(const TensorView& d, const TensorView& a, const TensorView& b,
                               const TensorView& a_scales, const TensorView& b_scales, const TensorView& masked_m,
                               void* stream) {
  return client::CallOp(client::kGroupedFp8GemmMasked, client::kGroupedFp8GemmMasked.cpp_api,
                        client::Fp8MaskedArgs{&d, &a, &b, &a_scales, &b_scales, &masked_m}, stream,
                        client::RunFp8Masked);
}

}  // namespace kiln::ops

extern "C" {

kiln_status kiln_grouped_gemm(DLTensor* d, const DLTensor* a, const DLTensor* b, const DLTensor* m_indptr,
                              void* stream) {
  using namespace kiln::client;
  return CallOpC(kGroupedGemm, stream, RunContiguous, [&](CTensors& t) {
    return ContiguousArgs{t.Tensor(d, "d"), t.Tensor(a, "a"), t.Tensor(b, "b"),
                          nullptr,          nullptr,          t.Tensor(m_indptr, "m_indptr")};
  });
}

kiln_status kiln_grouped_gemm_masked(DLTensor* d, const DLTensor* a, const DLTensor* b, const DLTensor* masked_m,
                                     void* stream) {
  using namespace kiln::client;
  return CallOpC(kGroupedGemmMasked, stream, RunMasked, [&](CTensors& t) {
    return MaskedArgs{t.Tensor(d, "d"), t.Tensor(a, "a"), t.Tensor(b, "b"),
                      nullptr,          nullptr,          t.Tensor(masked_m, "masked_m")};
  });
}

kiln_status kiln_grouped_fp8_gemm(DLTensor* d, const DLTensor* a, const DLTensor* b, const DLTensor* a_scales,
                                  const DLTensor* b_scales, const DLTensor* m_indptr, void* stream) {
  using namespace kiln::client;
  return CallOpC(kGroupedFp8Gemm, stream, RunFp8Contiguous, [&](CTensors& t) {
    return Fp8ContiguousArgs{t.Tensor(d, "d"),
                             t.Tensor(a, "a"),
                             t.Tensor(b, "b"),
                             t.Tensor(a_scales, "a_scales"),
                             t.Tensor(b_scales, "b_scales"),
                             t.Tensor(m_indptr, "m_indptr")};
  });
}

kiln_status kiln_grouped_fp8_gemm_masked(DLTensor* d, const DLTensor* a, const DLTensor* b, const DLTensor* a_scales,
                                         const DLTensor* b_scales, const DLTensor* masked_m, void* stream) {
  using namespace kiln::client;
  return CallOpC(kGroupedFp8GemmMasked, stream, RunFp8Masked, [&](CTensors& t) {
    return Fp8MaskedArgs{t.Tensor(d, "d"),
                         t.Tensor(a, "a"),
                         t.Tensor(b, "b"),
                         t.Tensor(a_scales, "a_scales"),
                         t.Tensor(b_scales, "b_scales"),
                         t.Tensor(masked_m, "masked_m")};
  });
}

}  // extern "C"
