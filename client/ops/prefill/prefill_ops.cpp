// The prefill family's ops, batch_prefill_ragged and batch_prefill_paged (kiln/ops/prefill.h):
// their entries in the op table, their launch, and their C++ and C APIs (with the C ABI's plan
// handle). Validation is prefill_call.h's and the plan prefill_plan.h's; the kernel contract
// kiln/prefill/prefill_contract.h.
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/core/loader/entry_launch_config.h"
#include "client/core/loader/kernel_launch.h"
#include "client/core/loader/launch_preparation.h"
#include "client/ops/attention_args.h"
#include "client/ops/op_table.h"
#include "client/ops/prefill/prefill_call.h"
#include "client/ops/prefill/prefill_plan.h"
#include "client/ops/prefill/prefill_tensor_maps.h"
#include "kiln/ops/prefill.h"
#include "kiln/prefill/prefill_contract.h"

struct kiln_batch_prefill_plan {
  kiln::ops::BatchPrefillPlan plan;
};

namespace kiln::client {
namespace {

// What selects a kernel: one cubin per (dtype, head_dim, group, causal, soft cap, row tile
// [, page_size]); the plan's schedule chose the row tile.
struct PrefillSpec {
  DType dtype = DType::kBFloat16;
  int32_t head_dim = 0;
  int32_t group = 0;
  bool causal = false;
  bool soft_cap = false;
  int32_t tile_rows = 0;
  int32_t page_size = 0;  // paged only
  bool operator==(const PrefillSpec&) const = default;
  auto Fields() const { return std::tie(dtype, head_dim, group, causal, soft_cap, tile_rows, page_size); }
  std::map<std::string, std::string> Params() const {
    std::map<std::string, std::string> p = {{kParamDType, DTypeName(dtype)},
                                            {prefill::kParamHeadDim, std::to_string(head_dim)},
                                            {prefill::kParamGroup, std::to_string(group)},
                                            {prefill::kParamCausal, causal ? "1" : "0"},
                                            {prefill::kParamSoftCap, soft_cap ? "1" : "0"},
                                            {prefill::kParamTileRows, std::to_string(tile_rows)}};
    if (page_size > 0) p[prefill::kParamPageSize] = std::to_string(page_size);
    return p;
  }
};

// Entry 0 attends, entry 1 merges split chunks (query positions per merge block: items_per_block).
const OpKernels kRaggedKernels = {
    prefill::kBatchPrefillRaggedOp,
    {{{.name = prefill::kBatchPrefillEntry, .min_block = 32},
      {.name = prefill::kBatchPrefillMergeEntry, .min_block = 32, .uses_items_per_block = true}}}};
const OpKernels kPagedKernels = {
    prefill::kBatchPrefillPagedOp,
    {{{.name = prefill::kBatchPrefillEntry, .min_block = 32},
      {.name = prefill::kBatchPrefillMergeEntry, .min_block = 32, .uses_items_per_block = true}}}};

// One call of either op; kv_indices and kv_last_page_len null when ragged.
struct BatchPrefillArgs {
  bool paged = false;
  const ops::BatchPrefillPlan* plan = nullptr;
  const TensorView* out = nullptr;
  const TensorView* lse = nullptr;
  const TensorView* q = nullptr;
  const TensorView* k = nullptr;
  const TensorView* v = nullptr;
  const TensorView* qo_indptr = nullptr;
  const TensorView* kv_indptr = nullptr;
  const TensorView* kv_indices = nullptr;
  const TensorView* kv_last_page_len = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  const char* KName() const { return paged ? "k_cache" : "k"; }
  const char* VName() const { return paged ? "v_cache" : "v"; }

  // The tensors, then what the plan was made from (sizes, dtype, options, device), so that
  // `kiln replay` can make the plan again from the dumped index arrays (InvokeBatchPrefill).
  static void Visit(const BatchPrefillArgs& a, TraceWriter& v) {
    v.Out("out", a.out).OptionalOut("lse", a.lse).In("q", a.q).In(a.KName(), a.k).In(a.VName(), a.v);
    v.In("qo_indptr", a.qo_indptr).In("kv_indptr", a.kv_indptr);
    if (a.paged) v.In("kv_indices", a.kv_indices).In("kv_last_page_len", a.kv_last_page_len);
    const ops::BatchPrefillPlan& plan = *a.plan;
    const ops::PrefillOptions& o = plan.options();
    v.Param("batch_size", plan.batch_size())
        .Param("num_qo_heads", plan.num_qo_heads())
        .Param("num_kv_heads", plan.num_kv_heads())
        .Param("head_dim", plan.head_dim())
        .Param("page_size", plan.page_size())
        .Param("dtype", std::string(DTypeName(plan.dtype())))
        .Param("causal", static_cast<int64_t>(o.causal ? 1 : 0))
        .Param("sm_scale", o.sm_scale)
        .Param("logits_soft_cap", o.logits_soft_cap)
        .Param("window_left", o.window_left)
        .Param("plan_device", plan.device())
        .Param("workspace", PointerText(a.workspace))
        .Param("workspace_bytes", static_cast<uint64_t>(a.workspace_bytes))
        .Param("plan", plan.Describe());
  }
};

Status RunBatchPrefill(const BatchPrefillArgs& a, const char* api, void* stream) {
  const PrefillKv kv{a.k, a.v, a.kv_indptr, a.kv_indices, a.kv_last_page_len};
  KILN_ASSIGN_OR_RETURN(BatchPrefillCall call, CheckBatchPrefill(*a.plan, a.paged, *a.out, a.lse, *a.q, *a.qo_indptr,
                                                                 kv, a.workspace, a.workspace_bytes, api));
  const ops::BatchPrefillPlan::State& plan = *call.plan;
  if (plan.schedule.num_items == 0) return OkStatus();  // no query in the batch: nothing to launch
  const PrefillSpec spec{.dtype = plan.dtype,
                         .head_dim = static_cast<int32_t>(plan.head_dim),
                         .group = static_cast<int32_t>(plan.group),
                         .causal = plan.options.causal,
                         .soft_cap = plan.options.logits_soft_cap > 0,
                         .tile_rows = static_cast<int32_t>(plan.schedule.tile_rows),
                         .page_size = static_cast<int32_t>(plan.page_size)};
  KILN_ASSIGN_OR_RETURN(const PreparedLaunch ready,
                        PrepareOpLaunch(a.paged ? kPagedKernels : kRaggedKernels, spec, plan.device, api));
  const EntryLaunchReady& attend = ready.launch->entry(0);
  const EntryLaunchReady& merge = ready.launch->entry(1);
  const int page_size = a.paged ? spec.page_size : 0;
  const bool tma_kv = PrefillUsesTmaKv(a.paged, page_size, spec.tile_rows, call.params);
  if (tma_kv)
    KILN_RETURN_IF_ERROR(
        EncodePrefillKvMaps(*ready.driver, plan.dtype, spec.head_dim, page_size, &call.params).WithContext(api));

  // The schedule is this op's tactic: the call log and dumps name it.
  if (KILN_UNLIKELY(diag::Level() != 0) && diag::InTracedCall())
    diag::NoteBackend((plan.schedule.split
                           ? "split-kv:" + std::to_string(plan.schedule.num_items) + "-items-chunks-of-" +
                                 std::to_string(plan.schedule.chunk_tokens) + "-positions+merge"
                           : "tiles:" + std::to_string(plan.schedule.num_items) + "-items") +
                      (tma_kv ? "+tma-kv" : ""));
  void* args[] = {&call.params};
  const LaunchConfig config = EntryLaunchConfig(attend,
                                                {static_cast<unsigned>(plan.schedule.num_items),  // < 2^31 (plan)
                                                 static_cast<unsigned>(plan.num_kv_heads)},       // <= 65535 (plan)
                                                stream);
  KILN_RETURN_IF_ERROR(LaunchFunction(*ready.driver, attend.function, config, args, prefill::kBatchPrefillEntry,
                                      &ready.launch->library->info)
                           .WithContext(api));
  if (!plan.schedule.split) return OkStatus();

  const LaunchConfig merge_config = EntryLaunchConfig(
      merge,
      {static_cast<unsigned>(plan.batch),
       static_cast<unsigned>((plan.schedule.merge_max_q_len + merge.items_per_block - 1) / merge.items_per_block)},
      stream);
  return LaunchFunction(*ready.driver, merge.function, merge_config, args, prefill::kBatchPrefillMergeEntry,
                        &ready.launch->library->info)
      .WithContext(api);
}

// An int32 array the call recorded on the host (the replay plans again from it).
StatusOr<std::vector<int32_t>> HostInts(NamedArgs& named, const char* name, const TensorView* t, int64_t at_least) {
  const std::vector<uint8_t>* bytes = named.HostBytes(name);
  if (bytes == nullptr || t == nullptr || t->dtype != DType::kInt32)
    return InvalidArgument(std::string("the call needs int32 ") + name + " on the host to plan it again");
  std::vector<int32_t> out(bytes->size() / 4);
  std::memcpy(out.data(), bytes->data(), out.size() * 4);
  if (static_cast<int64_t>(out.size()) < at_least)
    return InvalidArgument(std::string(name) + " is shorter than the recorded batch needs (" +
                           std::to_string(at_least) + " entries)");
  return out;
}

// Replay: the plan is made again from the dumped index arrays (the device copies must equal the
// host ones the original plan came from: the op's contract), for the replaying GPU's SM count.
template <bool kPaged>
Status InvokeBatchPrefill(const OpDescriptor& op, NamedArgs& named, void* stream) {
  BatchPrefillArgs a;
  a.paged = kPaged;
  ArgReader r(named);
  r.Out("out", a.out).OptionalOut("lse", a.lse).In("q", a.q).In(a.KName(), a.k).In(a.VName(), a.v);
  r.In("qo_indptr", a.qo_indptr).In("kv_indptr", a.kv_indptr);
  if (kPaged) r.In("kv_indices", a.kv_indices).In("kv_last_page_len", a.kv_last_page_len);
  int64_t batch = 0, num_qo_heads = 0, num_kv_heads = 0, head_dim = 0, page_size = 0, causal = 0;
  std::string dtype_name;
  ops::PrefillOptions o;
  r.Param("batch_size", batch).Param("num_qo_heads", num_qo_heads).Param("num_kv_heads", num_kv_heads);
  r.Param("head_dim", head_dim).Param("page_size", page_size).Param("dtype", dtype_name).Param("causal", causal);
  r.Param("sm_scale", o.sm_scale).Param("logits_soft_cap", o.logits_soft_cap).Param("window_left", o.window_left);
  KILN_RETURN_IF_ERROR(r.status());
  o.causal = causal != 0;
  DType dtype = DType::kBFloat16;
  if (dtype_name == "fp16") dtype = DType::kFloat16;
  else if (dtype_name != "bf16")
    return InvalidArgument("param dtype='" + dtype_name + "' is not a prefill dtype (fp16, bf16)");

  KILN_ASSIGN_OR_RETURN(const std::vector<int32_t> qo, HostInts(named, "qo_indptr", a.qo_indptr, batch + 1));
  KILN_ASSIGN_OR_RETURN(const std::vector<int32_t> kv, HostInts(named, "kv_indptr", a.kv_indptr, batch + 1));
  std::vector<int32_t> last;
  if (kPaged) {
    KILN_ASSIGN_OR_RETURN(last, HostInts(named, "kv_last_page_len", a.kv_last_page_len, batch));
  }
  auto made = kPaged ? ops::BatchPrefillPlan::CreatePaged(qo.data(), kv.data(), last.data(), batch, num_qo_heads,
                                                          num_kv_heads, head_dim, page_size, dtype, o, named.device())
                     : ops::BatchPrefillPlan::CreateRagged(qo.data(), kv.data(), batch, num_qo_heads, num_kv_heads,
                                                           head_dim, dtype, o, named.device());
  if (!made.ok()) return made.status();
  const ops::BatchPrefillPlan plan = std::move(made).value();
  named.Note("plan made again: " + plan.Describe());
  if (const std::string* recorded = named.Param("plan"); recorded != nullptr && *recorded != plan.Describe())
    named.Note("the recorded plan differs: " + *recorded);
  a.plan = &plan;
  a.workspace_bytes = plan.workspace_bytes();
  if (a.workspace_bytes > 0) {
    KILN_ASSIGN_OR_RETURN(a.workspace, named.Scratch(a.workspace_bytes));
  }
  return CallOp(op, op.cpp_api, a, stream, RunBatchPrefill);
}

const OpDescriptor kBatchPrefillRagged = {.name = "batch_prefill_ragged",
                                          .op = prefill::kBatchPrefillRaggedOp,
                                          .family = "prefill",
                                          .cpp_api = "kiln::ops::batch_prefill_ragged",
                                          .c_api = "kiln_batch_prefill_ragged",
                                          .invoke = InvokeBatchPrefill<false>,
                                          .planned_on_host = true};
const OpDescriptor kBatchPrefillPaged = {.name = "batch_prefill_paged",
                                         .op = prefill::kBatchPrefillPagedOp,
                                         .family = "prefill",
                                         .cpp_api = "kiln::ops::batch_prefill_paged",
                                         .c_api = "kiln_batch_prefill_paged",
                                         .invoke = InvokeBatchPrefill<true>,
                                         .planned_on_host = true};
KILN_REGISTER_OP(kBatchPrefillRagged);
KILN_REGISTER_OP(kBatchPrefillPaged);

// A C plan's creation (PlanStatusForC renames the C++ API in a failure's message).
template <typename Make>
kiln_status CreatePlanC(const char* api, const char* cpp_api, DLDataType dtype, int causal, double sm_scale,
                        double logits_soft_cap, int64_t window_left, kiln_batch_prefill_plan** plan, Make make) {
  return GuardC(api, [&]() -> Status {
    if (plan == nullptr) return InvalidArgument(std::string(api) + ": plan (the result pointer) is NULL");
    *plan = nullptr;
    KILN_ASSIGN_OR_RETURN(const DType kiln_dtype, PlanDTypeFromDL(dtype, api));
    if (causal != 0 && causal != 1)
      return InvalidArgument(std::string(api) + ": causal: expected 0 or 1, found " + std::to_string(causal));
    ops::PrefillOptions options;
    options.causal = causal == 1;
    options.sm_scale = sm_scale;
    options.logits_soft_cap = logits_soft_cap;
    options.window_left = window_left;
    StatusOr<ops::BatchPrefillPlan> made = make(kiln_dtype, options);
    if (!made.ok()) return PlanStatusForC(made.status(), cpp_api, api);
    *plan = new kiln_batch_prefill_plan{std::move(made).value()};
    return OkStatus();
  });
}

kiln_status NullPlan(const OpDescriptor& op) {
  return GuardC(op.c_api, [&] {
    return InvalidArgument(std::string(op.c_api) +
                           ": plan is NULL (make one with kiln_batch_prefill_plan_create_ragged or _paged)");
  });
}

}  // namespace
}  // namespace kiln::client

namespace kiln::ops {

Status batch_prefill_ragged(const BatchPrefillPlan& plan, const TensorView& out, const TensorView* lse,
                            const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& qo_indptr,
                            const TensorView& kv_indptr, void* workspace, size_t workspace_bytes, void* stream) {
  using namespace client;
  BatchPrefillArgs a{false,   &plan,     &out,           lse, &q, &k, &v, &qo_indptr, &kv_indptr, nullptr,
                     nullptr, workspace, workspace_bytes};
  return CallOp(kBatchPrefillRagged, kBatchPrefillRagged.cpp_api, a, stream, RunBatchPrefill);
}

Status batch_prefill_paged(const BatchPrefillPlan& plan, const TensorView& out, const TensorView* lse,
                           const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                           const TensorView& qo_indptr, const TensorView& kv_indptr, const TensorView& kv_indices,
                           const TensorView& kv_last_page_len, void* workspace, size_t workspace_bytes, void* stream) {
  using namespace client;
  BatchPrefillArgs a{true,
                     &plan,
                     &out,
                     lse,
                     &q,
                     &k_cache,
                     &v_cache,
                     &qo_indptr,
                     &kv_indptr,
                     &kv_indices,
                     &kv_last_page_len,
                     workspace,
                     workspace_bytes};
  return CallOp(kBatchPrefillPaged, kBatchPrefillPaged.cpp_api, a, stream, RunBatchPrefill);
}

}  // namespace kiln::ops

extern "C" {

using namespace kiln::client;

kiln_status kiln_batch_prefill_plan_create_ragged(const int32_t* qo_indptr_host, const int32_t* kv_indptr_host,
                                                  int64_t batch_size, int64_t num_qo_heads, int64_t num_kv_heads,
                                                  int64_t head_dim, DLDataType dtype, int causal, double sm_scale,
                                                  double logits_soft_cap, int64_t window_left, int device,
                                                  kiln_batch_prefill_plan** plan) {
  return CreatePlanC("kiln_batch_prefill_plan_create_ragged", "kiln::ops::BatchPrefillPlan::CreateRagged", dtype,
                     causal, sm_scale, logits_soft_cap, window_left, plan,
                     [&](kiln::DType t, const kiln::ops::PrefillOptions& o) {
                       return kiln::ops::BatchPrefillPlan::CreateRagged(qo_indptr_host, kv_indptr_host, batch_size,
                                                                        num_qo_heads, num_kv_heads, head_dim, t, o,
                                                                        device);
                     });
}

kiln_status kiln_batch_prefill_plan_create_paged(const int32_t* qo_indptr_host, const int32_t* kv_indptr_host,
                                                 const int32_t* kv_last_page_len_host, int64_t batch_size,
                                                 int64_t num_qo_heads, int64_t num_kv_heads, int64_t head_dim,
                                                 int64_t page_size, DLDataType dtype, int causal, double sm_scale,
                                                 double logits_soft_cap, int64_t window_left, int device,
                                                 kiln_batch_prefill_plan** plan) {
  return CreatePlanC("kiln_batch_prefill_plan_create_paged", "kiln::ops::BatchPrefillPlan::CreatePaged", dtype, causal,
                     sm_scale, logits_soft_cap, window_left, plan,
                     [&](kiln::DType t, const kiln::ops::PrefillOptions& o) {
                       return kiln::ops::BatchPrefillPlan::CreatePaged(qo_indptr_host, kv_indptr_host,
                                                                       kv_last_page_len_host, batch_size, num_qo_heads,
                                                                       num_kv_heads, head_dim, page_size, t, o, device);
                     });
}

size_t kiln_batch_prefill_plan_workspace_bytes(const kiln_batch_prefill_plan* plan) {
  return plan != nullptr ? plan->plan.workspace_bytes() : 0;
}

void kiln_batch_prefill_plan_destroy(kiln_batch_prefill_plan* plan) { delete plan; }

kiln_status kiln_batch_prefill_ragged(const kiln_batch_prefill_plan* plan, DLTensor* out, DLTensor* lse,
                                      const DLTensor* q, const DLTensor* k, const DLTensor* v,
                                      const DLTensor* qo_indptr, const DLTensor* kv_indptr, void* workspace,
                                      size_t workspace_bytes, void* stream) {
  if (plan == nullptr) return NullPlan(kBatchPrefillRagged);
  return CallOpC(kBatchPrefillRagged, stream, RunBatchPrefill, [&](CTensors& t) {
    BatchPrefillArgs a;
    a.plan = &plan->plan;
    a.out = t.Tensor(out, "out");
    a.lse = t.Optional(lse, "lse");
    a.q = t.Tensor(q, "q");
    a.k = t.Tensor(k, "k");
    a.v = t.Tensor(v, "v");
    a.qo_indptr = t.Tensor(qo_indptr, "qo_indptr");
    a.kv_indptr = t.Tensor(kv_indptr, "kv_indptr");
    a.workspace = workspace;
    a.workspace_bytes = workspace_bytes;
    return a;
  });
}

kiln_status kiln_batch_prefill_paged(const kiln_batch_prefill_plan* plan, DLTensor* out, DLTensor* lse,
                                     const DLTensor* q, const DLTensor* k_cache, const DLTensor* v_cache,
                                     const DLTensor* qo_indptr, const DLTensor* kv_indptr, const DLTensor* kv_indices,
                                     const DLTensor* kv_last_page_len, void* workspace, size_t workspace_bytes,
                                     void* stream) {
  if (plan == nullptr) return NullPlan(kBatchPrefillPaged);
  return CallOpC(kBatchPrefillPaged, stream, RunBatchPrefill, [&](CTensors& t) {
    BatchPrefillArgs a;
    a.paged = true;
    a.plan = &plan->plan;
    a.out = t.Tensor(out, "out");
    a.lse = t.Optional(lse, "lse");
    a.q = t.Tensor(q, "q");
    a.k = t.Tensor(k_cache, "k_cache");
    a.v = t.Tensor(v_cache, "v_cache");
    a.qo_indptr = t.Tensor(qo_indptr, "qo_indptr");
    a.kv_indptr = t.Tensor(kv_indptr, "kv_indptr");
    a.kv_indices = t.Tensor(kv_indices, "kv_indices");
    a.kv_last_page_len = t.Tensor(kv_last_page_len, "kv_last_page_len");
    a.workspace = workspace;
    a.workspace_bytes = workspace_bytes;
    return a;
  });
}

}  // extern "C"
