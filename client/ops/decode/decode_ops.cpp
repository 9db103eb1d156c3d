// The decode family's ops, append_paged_kv and batch_decode (kiln/ops/decode.h): their entries
// in the op table, their launch, and their C++ and C APIs (with the C ABI's plan handle).
// Validation is decode_call.h's and the plan decode_plan.h's; the kernel contract
// kiln/decode/decode_contract.h.
#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/core/loader/entry_launch_config.h"
#include "client/core/loader/kernel_launch.h"
#include "client/core/loader/launch_preparation.h"
#include "client/ops/attention_args.h"
#include "client/ops/decode/decode_call.h"
#include "client/ops/decode/decode_plan.h"
#include "client/ops/op_table.h"
#include "kiln/decode/decode_contract.h"
#include "kiln/ops/decode.h"

struct kiln_batch_decode_plan {
  kiln::ops::BatchDecodePlan plan;
};

namespace kiln::client {
namespace {

// --- append_paged_kv: one cubin per (dtype, head_dim, vec) ---

struct AppendSpec {
  DType dtype = DType::kBFloat16;
  int32_t head_dim = 0;
  int32_t vec = 1;
  bool operator==(const AppendSpec&) const = default;
  auto Fields() const { return std::tie(dtype, head_dim, vec); }
  std::map<std::string, std::string> Params() const {
    return {{kParamDType, DTypeName(dtype)},
            {decode::kParamHeadDim, std::to_string(head_dim)},
            {kParamVec, std::to_string(vec)}};
  }
};

const OpKernels kAppendKernels = {decode::kAppendPagedKvOp,
                                  {{{.name = decode::kAppendPagedKvEntry, .min_block = 32, .waits_first = true}}}};

struct AppendPagedKvArgs {
  const TensorView* k_cache = nullptr;
  const TensorView* v_cache = nullptr;
  const TensorView* k = nullptr;
  const TensorView* v = nullptr;
  const TensorView* batch_indices = nullptr;
  const TensorView* positions = nullptr;
  const TensorView* kv_indptr = nullptr;
  const TensorView* kv_indices = nullptr;
  const TensorView* kv_last_page_len = nullptr;
  template <typename Self, typename V>
  static void Visit(Self& a, V& v) {
    v.InOut("k_cache", a.k_cache).InOut("v_cache", a.v_cache).In("k", a.k).In("v", a.v);
    v.In("batch_indices", a.batch_indices).In("positions", a.positions);
    v.In("kv_indptr", a.kv_indptr).In("kv_indices", a.kv_indices).In("kv_last_page_len", a.kv_last_page_len);
  }
};

// grid.x = min(ceil(threads / block), max_blocks): the kernel loops over the rest.
Status RunAppendPagedKv(const AppendPagedKvArgs& a, const char* api, void* stream) {
  KILN_ASSIGN_OR_RETURN(AppendPagedKvCall call,
                        CheckAppendPagedKv(*a.k_cache, *a.v_cache, *a.k, *a.v, *a.batch_indices, *a.positions,
                                           *a.kv_indptr, *a.kv_indices, *a.kv_last_page_len, api));
  if (call.params.nnz == 0) return OkStatus();  // nothing to write, and nothing to launch
  const AppendSpec spec{call.dtype, static_cast<int32_t>(call.head_dim), call.vec};
  KILN_ASSIGN_OR_RETURN(const PreparedLaunch ready, PrepareOpLaunch(kAppendKernels, spec, call.device, api));
  const EntryLaunchReady& e = ready.launch->entry();
  const int64_t threads = call.params.nnz * call.params.num_kv_heads * (call.head_dim / call.vec);
  int64_t blocks = (threads + e.block - 1) / e.block;
  if (e.max_blocks > 0) blocks = std::min(blocks, e.max_blocks);
  void* args[] = {&call.params};
  const LaunchConfig config = EntryLaunchConfig(e, {static_cast<unsigned>(std::min<int64_t>(blocks, INT_MAX))}, stream);
  return LaunchFunction(*ready.driver, e.function, config, args, decode::kAppendPagedKvEntry,
                        &ready.launch->library->info)
      .WithContext(api);
}

const OpDescriptor kAppendPagedKv = {.name = "append_paged_kv",
                                     .op = decode::kAppendPagedKvOp,
                                     .family = "decode",
                                     .cpp_api = "kiln::ops::append_paged_kv",
                                     .c_api = "kiln_append_paged_kv",
                                     .invoke = InvokeByVisit<AppendPagedKvArgs, RunAppendPagedKv>};
KILN_REGISTER_OP(kAppendPagedKv);

// --- batch_decode: one cubin per (dtype, head_dim, group, page_size, soft cap), two entries ---

struct DecodeSpec {
  DType dtype = DType::kBFloat16;
  int32_t head_dim = 0;
  int32_t group = 0;
  int32_t page_size = 0;
  bool soft_cap = false;
  bool operator==(const DecodeSpec&) const = default;
  auto Fields() const { return std::tie(dtype, head_dim, group, page_size, soft_cap); }
  std::map<std::string, std::string> Params() const {
    return {{kParamDType, DTypeName(dtype)},
            {decode::kParamHeadDim, std::to_string(head_dim)},
            {decode::kParamGroup, std::to_string(group)},
            {decode::kParamPageSize, std::to_string(page_size)},
            {decode::kParamSoftCap, soft_cap ? "1" : "0"}};
  }
};

// Entry 0 attends, entry 1 merges split chunks (query heads per merge block: items_per_block).
const OpKernels kDecodeKernels = {
    decode::kBatchDecodeOp,
    {{{.name = decode::kBatchDecodeEntry, .min_block = 32, .waits_first = true},
      {.name = decode::kBatchDecodeMergeEntry, .min_block = 32, .uses_items_per_block = true, .waits_first = true}}}};

struct BatchDecodeArgs {
  const ops::BatchDecodePlan* plan = nullptr;
  const TensorView* out = nullptr;
  const TensorView* lse = nullptr;  // optional
  const TensorView* q = nullptr;
  const TensorView* k_cache = nullptr;
  const TensorView* v_cache = nullptr;
  const TensorView* kv_indptr = nullptr;
  const TensorView* kv_indices = nullptr;
  const TensorView* kv_last_page_len = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  // The tensors, then what the plan was made from (sizes, dtype, options, device), so that
  // `kiln replay` can make the plan again from the dumped page table (InvokeBatchDecode).
  static void Visit(const BatchDecodeArgs& a, TraceWriter& v) {
    v.Out("out", a.out).OptionalOut("lse", a.lse).In("q", a.q).In("k_cache", a.k_cache).In("v_cache", a.v_cache);
    v.In("kv_indptr", a.kv_indptr).In("kv_indices", a.kv_indices).In("kv_last_page_len", a.kv_last_page_len);
    const ops::BatchDecodePlan& plan = *a.plan;
    const ops::DecodeOptions& o = plan.options();
    v.Param("batch_size", plan.batch_size())
        .Param("num_qo_heads", plan.num_qo_heads())
        .Param("num_kv_heads", plan.num_kv_heads())
        .Param("head_dim", plan.head_dim())
        .Param("page_size", plan.page_size())
        .Param("dtype", std::string(DTypeName(plan.dtype())))
        .Param("sm_scale", o.sm_scale)
        .Param("logits_soft_cap", o.logits_soft_cap)
        .Param("window_left", o.window_left)
        .Param("plan_device", plan.device())
        .Param("workspace", PointerText(a.workspace))
        .Param("workspace_bytes", static_cast<uint64_t>(a.workspace_bytes))
        .Param("plan", plan.Describe());
  }
};

Status RunBatchDecode(const BatchDecodeArgs& a, const char* api, void* stream) {
  KILN_ASSIGN_OR_RETURN(BatchDecodeCall call,
                        CheckBatchDecode(*a.plan, *a.out, a.lse, *a.q, *a.k_cache, *a.v_cache, *a.kv_indptr,
                                         *a.kv_indices, *a.kv_last_page_len, a.workspace, a.workspace_bytes, api));
  const ops::BatchDecodePlan::State& plan = *call.plan;
  const DecodeSpec spec{plan.dtype, static_cast<int32_t>(plan.head_dim), static_cast<int32_t>(plan.group),
                        static_cast<int32_t>(plan.page_size), plan.options.logits_soft_cap > 0};
  KILN_ASSIGN_OR_RETURN(const PreparedLaunch ready, PrepareOpLaunch(kDecodeKernels, spec, call.device, api));
  const EntryLaunchReady& decode = ready.launch->entry(0);
  const EntryLaunchReady& merge = ready.launch->entry(1);

  // The schedule is this op's tactic: the call log and dumps name it (a replay on a GPU with
  // another SM count may choose differently).
  if (KILN_UNLIKELY(diag::Level() != 0) && diag::InTracedCall())
    diag::NoteBackend(plan.schedule.split ? "split-kv:" + std::to_string(plan.schedule.num_items) + "-items-of-" +
                                                std::to_string(plan.schedule.chunk_tokens) + "-positions+merge"
                                          : std::string("single-pass:no-split"));
  void* args[] = {&call.params};
  const LaunchConfig config = EntryLaunchConfig(
      decode, {static_cast<unsigned>(plan.schedule.num_items * plan.num_kv_heads)},  // < 2^31 (plan)
      stream);
  KILN_RETURN_IF_ERROR(LaunchFunction(*ready.driver, decode.function, config, args, decode::kBatchDecodeEntry,
                                      &ready.launch->library->info)
                           .WithContext(api));
  if (!plan.schedule.split) return OkStatus();

  const LaunchConfig merge_config = EntryLaunchConfig(
      merge,
      {static_cast<unsigned>(plan.batch),
       static_cast<unsigned>((plan.num_qo_heads + merge.items_per_block - 1) / merge.items_per_block)},
      stream);
  return LaunchFunction(*ready.driver, merge.function, merge_config, args, decode::kBatchDecodeMergeEntry,
                        &ready.launch->library->info)
      .WithContext(api);
}

// Replay: the plan is made again from the dumped page table (the device copies must equal the
// host ones the original plan came from: the op's contract), for the replaying GPU's SM count.
Status InvokeBatchDecode(const OpDescriptor& op, NamedArgs& named, void* stream) {
  BatchDecodeArgs a;
  ArgReader r(named);
  r.Out("out", a.out).OptionalOut("lse", a.lse).In("q", a.q).In("k_cache", a.k_cache).In("v_cache", a.v_cache);
  r.In("kv_indptr", a.kv_indptr).In("kv_indices", a.kv_indices).In("kv_last_page_len", a.kv_last_page_len);
  int64_t batch = 0, num_qo_heads = 0, num_kv_heads = 0, head_dim = 0, page_size = 0;
  std::string dtype_name;
  ops::DecodeOptions o;
  r.Param("batch_size", batch).Param("num_qo_heads", num_qo_heads).Param("num_kv_heads", num_kv_heads);
  r.Param("head_dim", head_dim).Param("page_size", page_size).Param("dtype", dtype_name);
  r.Param("sm_scale", o.sm_scale).Param("logits_soft_cap", o.logits_soft_cap).Param("window_left", o.window_left);
  KILN_RETURN_IF_ERROR(r.status());
  DType dtype = DType::kBFloat16;
  if (dtype_name == "fp16") dtype = DType::kFloat16;
  else if (dtype_name != "bf16")
    return InvalidArgument("param dtype='" + dtype_name + "' is not a decode dtype (fp16, bf16)");

  const std::vector<uint8_t>* indptr = named.HostBytes("kv_indptr");
  const std::vector<uint8_t>* last = named.HostBytes("kv_last_page_len");
  if (indptr == nullptr || last == nullptr || a.kv_indptr->dtype != DType::kInt32 ||
      a.kv_last_page_len->dtype != DType::kInt32)
    return InvalidArgument("the call needs int32 kv_indptr and kv_last_page_len on the host to plan it again");
  std::vector<int32_t> indptr_host(indptr->size() / 4), last_host(last->size() / 4);
  std::memcpy(indptr_host.data(), indptr->data(), indptr_host.size() * 4);
  std::memcpy(last_host.data(), last->data(), last_host.size() * 4);
  if (static_cast<int64_t>(indptr_host.size()) < batch + 1 || static_cast<int64_t>(last_host.size()) < batch)
    return InvalidArgument("the page table is shorter than batch_size " + std::to_string(batch));
  KILN_ASSIGN_OR_RETURN(const ops::BatchDecodePlan plan,
                        ops::BatchDecodePlan::Create(indptr_host.data(), last_host.data(), batch, num_qo_heads,
                                                     num_kv_heads, head_dim, page_size, dtype, o, named.device()));
  named.Note("plan made again: " + plan.Describe());
  if (const std::string* recorded = named.Param("plan"); recorded != nullptr && *recorded != plan.Describe())
    named.Note("the recorded plan differs: " + *recorded);
  a.plan = &plan;
  a.workspace_bytes = plan.workspace_bytes();
  if (a.workspace_bytes > 0) {
    KILN_ASSIGN_OR_RETURN(a.workspace, named.Scratch(a.workspace_bytes));
  }
  return CallOp(op, op.cpp_api, a, stream, RunBatchDecode);
}

const OpDescriptor kBatchDecode = {.name = "batch_decode",
                                   .op = decode::kBatchDecodeOp,
                                   .family = "decode",
                                   .cpp_api = "kiln::ops::batch_decode",
                                   .c_api = "kiln_batch_decode",
                                   .invoke = InvokeBatchDecode,
                                   .planned_on_host = true};
KILN_REGISTER_OP(kBatchDecode);

}  // namespace
}  // namespace kiln::client

namespace kiln::ops {

Status append_paged_kv(const TensorView& k_cache, const TensorView& v_cache, const TensorView& k, const TensorView& v,
                       const TensorView& batch_indices, const TensorView& positions, const TensorView& kv_indptr,
                       const TensorView& kv_indices, const TensorView& kv_last_page_len, void* stream) {
  using namespace client;
  return CallOp(kAppendPagedKv, kAppendPagedKv.cpp_api,
                AppendPagedKvArgs{&k_cache, &v_cache, &k, &v, &batch_indices, &positions, &kv_indptr, &kv_indices,
                                  &kv_last_page_len},
                stream, RunAppendPagedKv);
}

Status batch_decode(const BatchDecodePlan& plan, const TensorView& out, const TensorView* lse, const TensorView& q,
                    const TensorView& k_cache, const TensorView& v_cache, const TensorView& kv_indptr,
                    const TensorView& kv_indices, const TensorView& kv_last_page_len, void* workspace,
                    size_t workspace_bytes, void* stream) {
  using namespace client;
  return CallOp(kBatchDecode, kBatchDecode.cpp_api,
                BatchDecodeArgs{&plan, &out, lse, &q, &k_cache, &v_cache, &kv_indptr, &kv_indices, &kv_last_page_len,
                                workspace, workspace_bytes},
                stream, RunBatchDecode);
}

}  // namespace kiln::ops

extern "C" {

using namespace kiln::client;

kiln_status kiln_append_paged_kv(DLTensor* k_cache, DLTensor* v_cache, const DLTensor* k, const DLTensor* v,
                                 const DLTensor* batch_indices, const DLTensor* positions, const DLTensor* kv_indptr,
                                 const DLTensor* kv_indices, const DLTensor* kv_last_page_len, void* stream) {
  return CallOpC(kAppendPagedKv, stream, RunAppendPagedKv, [&](CTensors& t) {
    return AppendPagedKvArgs{t.Tensor(k_cache, "k_cache"),
                             t.Tensor(v_cache, "v_cache"),
                             t.Tensor(k, "k"),
                             t.Tensor(v, "v"),
                             t.Tensor(batch_indices, "batch_indices"),
                             t.Tensor(positions, "positions"),
                             t.Tensor(kv_indptr, "kv_indptr"),
                             t.Tensor(kv_indices, "kv_indices"),
                             t.Tensor(kv_last_page_len, "kv_last_page_len")};
  });
}

kiln_status kiln_batch_decode_plan_create(const int32_t* kv_indptr_host, const int32_t* kv_last_page_len_host,
                                          int64_t batch_size, int64_t num_qo_heads, int64_t num_kv_heads,
                                          int64_t head_dim, int64_t page_size, DLDataType dtype, double sm_scale,
                                          double logits_soft_cap, int64_t window_left, int device,
                                          kiln_batch_decode_plan** plan) {
  static constexpr const char* kApi = "kiln_batch_decode_plan_create";
  return GuardC(kApi, [&]() -> kiln::Status {
    if (plan == nullptr) return InvalidArgument(std::string(kApi) + ": plan (the result pointer) is NULL");
    *plan = nullptr;
    KILN_ASSIGN_OR_RETURN(const kiln::DType kiln_dtype, PlanDTypeFromDL(dtype, kApi));
    kiln::ops::DecodeOptions options;
    options.sm_scale = sm_scale;
    options.logits_soft_cap = logits_soft_cap;
    options.window_left = window_left;
    auto made = kiln::ops::BatchDecodePlan::Create(kv_indptr_host, kv_last_page_len_host, batch_size, num_qo_heads,
                                                   num_kv_heads, head_dim, page_size, kiln_dtype, options, device);
    if (!made.ok()) return PlanStatusForC(made.status(), "kiln::ops::BatchDecodePlan::Create", kApi);
    *plan = new kiln_batch_decode_plan{std::move(made).value()};
    return kiln::OkStatus();
  });
}

size_t kiln_batch_decode_plan_workspace_bytes(const kiln_batch_decode_plan* plan) {
  return plan != nullptr ? plan->plan.workspace_bytes() : 0;
}

void kiln_batch_decode_plan_destroy(kiln_batch_decode_plan* plan) { delete plan; }

kiln_status kiln_batch_decode(const kiln_batch_decode_plan* plan, DLTensor* out, DLTensor* lse, const DLTensor* q,
                              const DLTensor* k_cache, const DLTensor* v_cache, const DLTensor* kv_indptr,
                              const DLTensor* kv_indices, const DLTensor* kv_last_page_len, void* workspace,
                              size_t workspace_bytes, void* stream) {
  if (plan == nullptr)
    return GuardC(kBatchDecode.c_api, [] {
      return InvalidArgument(std::string(kBatchDecode.c_api) +
                             ": plan is NULL (make one with kiln_batch_decode_plan_create)");
    });
  return CallOpC(kBatchDecode, stream, RunBatchDecode, [&](CTensors& t) {
    BatchDecodeArgs a;
    a.plan = &plan->plan;
    a.out = t.Tensor(out, "out");
    a.q = t.Tensor(q, "q");
    a.k_cache = t.Tensor(k_cache, "k_cache");
    a.v_cache = t.Tensor(v_cache, "v_cache");
    a.kv_indptr = t.Tensor(kv_indptr, "kv_indptr");
    a.kv_indices = t.Tensor(kv_indices, "kv_indices");
    a.kv_last_page_len = t.Tensor(kv_last_page_len, "kv_last_page_len");
    a.lse = t.Optional(lse, "lse");
    a.workspace = workspace;
    a.workspace_bytes = workspace_bytes;
    return a;
  });
}

}  // extern "C"
