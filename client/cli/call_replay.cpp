#include "client/cli/call_replay.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>

#include "client/diag/call_trace.h"
#include "client/diag/tensor_copy.h"
#include "client/driver/cuda_driver.h"
#include "kiln/comm.h"
#include "kiln/ops.h"

namespace kiln::cli {
namespace {

using client::diag::DumpedCall;
using client::diag::DumpedTensor;
using client::diag::Role;

Status Invalid(const std::string& what) { return Status(StatusCode::kInvalidArgument, what); }

// --- params as recorded (client/diag/op_call.h writes them) ---

StatusOr<std::string> ParamText(const CallReplay& r, const char* name) {
  const std::string* v = r.dump().Param(name);
  if (v == nullptr) return Invalid("the dump records no param '" + std::string(name) + "'");
  return *v;
}

StatusOr<double> ParamDouble(const CallReplay& r, const char* name) {
  auto text = ParamText(r, name);
  if (!text.ok()) return text.status();
  char* end = nullptr;
  const double v = std::strtod(text->c_str(), &end);  // also reads "inf" and "nan"
  if (end == text->c_str() || *end != '\0') return Invalid("param " + std::string(name) + "='" + *text + "' is not a number");
  return v;
}

StatusOr<int64_t> ParamInt(const CallReplay& r, const char* name) {
  auto text = ParamText(r, name);
  if (!text.ok()) return text.status();
  char* end = nullptr;
  const long long v = std::strtoll(text->c_str(), &end, 10);
  if (end == text->c_str() || *end != '\0') return Invalid("param " + std::string(name) + "='" + *text + "' is not an integer");
  return v;
}

StatusOr<uint64_t> ParamUint(const CallReplay& r, const char* name) {
  auto text = ParamText(r, name);
  if (!text.ok()) return text.status();
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text->c_str(), &end, 10);
  if (end == text->c_str() || *end != '\0') return Invalid("param " + std::string(name) + "='" + *text + "' is not an integer");
  return v;
}

StatusOr<bool> ParamBool(const CallReplay& r, const char* name) {
  auto text = ParamText(r, name);
  if (!text.ok()) return text.status();
  if (*text != "true" && *text != "false") return Invalid("param " + std::string(name) + "='" + *text + "' is not true/false");
  return *text == "true";
}

#define KILN_ASSIGN(var, expr)              \
  auto var##_or = (expr);                   \
  if (!var##_or.ok()) return var##_or.status(); \
  auto var = std::move(var##_or).value()

// --- one invoker per op ---

Status RmsNorm(CallReplay& r) {
  KILN_ASSIGN(out, r.Need("out"));
  KILN_ASSIGN(input, r.Need("input"));
  KILN_ASSIGN(weight, r.Need("weight"));
  KILN_ASSIGN(eps, ParamDouble(r, "eps"));
  return ops::rms_norm(out, input, weight, eps);
}

Status FusedAddRmsNorm(CallReplay& r) {
  KILN_ASSIGN(input, r.Need("input"));
  KILN_ASSIGN(residual, r.Need("residual"));
  KILN_ASSIGN(weight, r.Need("weight"));
  KILN_ASSIGN(eps, ParamDouble(r, "eps"));
  return ops::fused_add_rms_norm(input, residual, weight, eps);
}

template <Status (*Op)(const TensorView&, const TensorView&, void*)>
Status ActAndMul(CallReplay& r) {
  KILN_ASSIGN(out, r.Need("out"));
  KILN_ASSIGN(input, r.Need("input"));
  return Op(out, input, nullptr);
}

Status ApplyRope(CallReplay& r) {
  KILN_ASSIGN(q, r.Need("q"));
  KILN_ASSIGN(k, r.Need("k"));
  KILN_ASSIGN(positions, r.Need("positions"));
  ops::RopeOptions o;
  KILN_ASSIGN(rotary_dim, ParamInt(r, "rotary_dim"));
  KILN_ASSIGN(interleaved, ParamBool(r, "interleaved"));
  KILN_ASSIGN(theta, ParamDouble(r, "theta"));
  o.rotary_dim = rotary_dim;
  o.interleaved = interleaved;
  o.theta = theta;
  if (r.dump().Param("llama31") == nullptr) {
    ops::Llama31RopeScaling s;
    KILN_ASSIGN(factor, ParamDouble(r, "llama31_factor"));
    KILN_ASSIGN(low, ParamDouble(r, "llama31_low_freq_factor"));
    KILN_ASSIGN(high, ParamDouble(r, "llama31_high_freq_factor"));
    KILN_ASSIGN(original, ParamInt(r, "llama31_original_max_position"));
    s.factor = factor;
    s.low_freq_factor = low;
    s.high_freq_factor = high;
    s.original_max_position = original;
    o.llama31 = s;
  }
  return ops::apply_rope(q, k, positions, o);
}

Status ApplyRopeWithCache(CallReplay& r) {
  KILN_ASSIGN(q, r.Need("q"));
  KILN_ASSIGN(k, r.Need("k"));
  KILN_ASSIGN(positions, r.Need("positions"));
  KILN_ASSIGN(cache, r.Need("cos_sin_cache"));
  KILN_ASSIGN(interleaved, ParamBool(r, "interleaved"));
  return ops::apply_rope_with_cos_sin_cache(q, k, positions, cache, interleaved);
}

Status AppendPagedKv(CallReplay& r) {
  const char* names[] = {"k_cache", "v_cache", "k", "v", "batch_indices", "positions", "kv_indptr", "kv_indices",
                         "kv_last_page_len"};
  TensorView t[9];
  for (int i = 0; i < 9; ++i) {
    KILN_ASSIGN(view, r.Need(names[i]));
    t[i] = view;
  }
  return ops::append_paged_kv(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8]);
}

// The plan is made again from the dumped page table (the device copies must equal the host
// ones the original plan came from: the op's contract), for the replaying GPU's SM count.
Status BatchDecode(CallReplay& r) {
  KILN_ASSIGN(out, r.Need("out"));
  KILN_ASSIGN(q, r.Need("q"));
  KILN_ASSIGN(k_cache, r.Need("k_cache"));
  KILN_ASSIGN(v_cache, r.Need("v_cache"));
  KILN_ASSIGN(kv_indptr, r.Need("kv_indptr"));
  KILN_ASSIGN(kv_indices, r.Need("kv_indices"));
  KILN_ASSIGN(kv_last_page_len, r.Need("kv_last_page_len"));
  const TensorView* lse = r.Find("lse");
  KILN_ASSIGN(batch, ParamInt(r, "batch_size"));
  KILN_ASSIGN(num_qo_heads, ParamInt(r, "num_qo_heads"));
  KILN_ASSIGN(num_kv_heads, ParamInt(r, "num_kv_heads"));
  KILN_ASSIGN(head_dim, ParamInt(r, "head_dim"));
  KILN_ASSIGN(page_size, ParamInt(r, "page_size"));
  KILN_ASSIGN(dtype_name, ParamText(r, "dtype"));
  ops::DecodeOptions o;
  KILN_ASSIGN(sm_scale, ParamDouble(r, "sm_scale"));
  KILN_ASSIGN(soft_cap, ParamDouble(r, "logits_soft_cap"));
  KILN_ASSIGN(window, ParamInt(r, "window_left"));
  o.sm_scale = sm_scale;
  o.logits_soft_cap = soft_cap;
  o.window_left = window;
  DType dtype = DType::kBFloat16;
  if (dtype_name == "fp16")
    dtype = DType::kFloat16;
  else if (dtype_name != "bf16")
    return Invalid("param dtype='" + dtype_name + "' is not a decode dtype (fp16, bf16)");

  const auto* indptr = r.dump().inputs->Find("kv_indptr");
  const auto* last = r.dump().inputs->Find("kv_last_page_len");
  if (indptr == nullptr || last == nullptr || indptr->dtype != DType::kInt32 || last->dtype != DType::kInt32)
    return Invalid("inputs.safetensors needs int32 kv_indptr and kv_last_page_len to plan the call again");
  std::vector<int32_t> indptr_host(indptr->bytes.size() / 4), last_host(last->bytes.size() / 4);
  std::memcpy(indptr_host.data(), indptr->bytes.data(), indptr_host.size() * 4);
  std::memcpy(last_host.data(), last->bytes.data(), last_host.size() * 4);
  if (static_cast<int64_t>(indptr_host.size()) < batch + 1 || static_cast<int64_t>(last_host.size()) < batch)
    return Invalid("the dumped page table is shorter than batch_size " + std::to_string(batch));
  auto plan = ops::BatchDecodePlan::Create(indptr_host.data(), last_host.data(), batch, num_qo_heads, num_kv_heads,
                                           head_dim, page_size, dtype, o, r.device());
  if (!plan.ok()) return plan.status();
  r.Note("plan made again: " + plan->Describe());
  if (const std::string* recorded = r.dump().Param("plan"); recorded != nullptr && *recorded != plan->Describe())
    r.Note("the recorded plan differs: " + *recorded);
  void* workspace = nullptr;
  if (plan->workspace_bytes() > 0) {
    auto scratch = r.Scratch(plan->workspace_bytes());
    if (!scratch.ok()) return scratch.status();
    workspace = *scratch;
  }
  return ops::batch_decode(*plan, out, lse, q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, workspace,
                           plan->workspace_bytes());
}

StatusOr<ops::PerRequestInt> PerRowInt(const CallReplay& r, const char* name) {
  ops::PerRequestInt p;
  if ((p.values = r.Find(name)) != nullptr) return p;
  KILN_ASSIGN(v, ParamInt(r, name));
  p.scalar = v;
  return p;
}

StatusOr<ops::PerRequestFloat> PerRowFloat(const CallReplay& r, const char* name) {
  ops::PerRequestFloat p;
  if ((p.values = r.Find(name)) != nullptr) return p;
  KILN_ASSIGN(v, ParamDouble(r, name));
  p.scalar = v;
  return p;
}

StatusOr<ops::SamplingSeed> Seed(const CallReplay& r) {
  KILN_ASSIGN(seed, ParamUint(r, "seed"));
  KILN_ASSIGN(offset, ParamUint(r, "offset"));
  return ops::SamplingSeed{seed, offset};
}

Status TopK(CallReplay& r) {
  KILN_ASSIGN(samples, r.Need("samples"));
  KILN_ASSIGN(probs, r.Need("probs"));
  KILN_ASSIGN(k, PerRowInt(r, "top_k"));
  KILN_ASSIGN(seed, Seed(r));
  return ops::top_k_sampling(samples, probs, k, seed);
}

Status TopP(CallReplay& r) {
  KILN_ASSIGN(samples, r.Need("samples"));
  KILN_ASSIGN(probs, r.Need("probs"));
  KILN_ASSIGN(p, PerRowFloat(r, "top_p"));
  KILN_ASSIGN(seed, Seed(r));
  return ops::top_p_sampling(samples, probs, p, seed);
}

Status TopKTopP(CallReplay& r) {
  KILN_ASSIGN(samples, r.Need("samples"));
  KILN_ASSIGN(probs, r.Need("probs"));
  KILN_ASSIGN(k, PerRowInt(r, "top_k"));
  KILN_ASSIGN(p, PerRowFloat(r, "top_p"));
  KILN_ASSIGN(seed, Seed(r));
  return ops::top_k_top_p_sampling(samples, probs, k, p, seed);
}

Status MinP(CallReplay& r) {
  KILN_ASSIGN(samples, r.Need("samples"));
  KILN_ASSIGN(probs, r.Need("probs"));
  KILN_ASSIGN(p, PerRowFloat(r, "min_p"));
  KILN_ASSIGN(seed, Seed(r));
  return ops::min_p_sampling(samples, probs, p, seed);
}

Status Argmax(CallReplay& r) {
  KILN_ASSIGN(samples, r.Need("samples"));
  KILN_ASSIGN(probs, r.Need("probs"));
  return ops::argmax(samples, probs);
}

struct Invoker {
  const char* op;
  Status (*run)(CallReplay&);
};

// Every op that traces its calls (client/diag/call_trace.h), by the name it records.
const Invoker kInvokers[] = {
    {"rms_norm", RmsNorm},
    {"fused_add_rms_norm", FusedAddRmsNorm},
    {"silu_and_mul", ActAndMul<ops::silu_and_mul>},
    {"gelu_and_mul", ActAndMul<ops::gelu_and_mul>},
    {"gelu_tanh_and_mul", ActAndMul<ops::gelu_tanh_and_mul>},
    {"apply_rope", ApplyRope},
    {"apply_rope_with_cos_sin_cache", ApplyRopeWithCache},
    {"append_paged_kv", AppendPagedKv},
    {"batch_decode", BatchDecode},
    {"top_k_sampling", TopK},
    {"top_p_sampling", TopP},
    {"top_k_top_p_sampling", TopKTopP},
    {"min_p_sampling", MinP},
    {"argmax", Argmax},
};

const Invoker* FindInvoker(const std::string& op) {
  for (const auto& i : kInvokers)
    if (op == i.op) return &i;
  return nullptr;
}

}  // namespace

std::string NotReplayableReason(const std::string& op) {
  if (op == "all_reduce" || op == "all_reduce_add_rms_norm")
    return op + " is a collective: its result depends on every rank's input, and one process holds one "
                "rank's dump; replay the ranks' dumps with a communicator of the same world size instead";
  if (FindInvoker(op) == nullptr) return "this kiln does not know the op '" + op + "'";
  return "";
}

StatusOr<std::unique_ptr<CallReplay>> CallReplay::Prepare(const DumpedCall& dump, int device) {
  if (!dump.inputs) return Status(StatusCode::kFailedPrecondition, dump.inputs_missing);
  auto driver = client::CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  const client::CudaDriver& d = **driver;
  std::unique_ptr<CallReplay> r(new CallReplay(dump, device));

  // Tensors that were the same memory (an in-place call) share one buffer again.
  using Alias = std::tuple<uint64_t, int, std::vector<int64_t>, std::vector<int64_t>>;
  std::map<Alias, size_t> aliases;
  std::vector<std::vector<uint8_t>> images;
  std::vector<std::pair<size_t, int64_t>> where;  // per view: buffer, span begin
  for (const DumpedTensor& t : dump.tensors) {
    TensorView v;
    v.dtype = t.dtype;
    v.device = Device::CUDA(device);
    v.ndim = static_cast<int>(t.shape.size());
    bool strided = true;
    for (size_t i = 0; i < t.shape.size(); ++i) {
      v.shape[i] = t.shape[i];
      v.strides[i] = t.strides[i];
      strided &= t.strides[i] >= 0;
    }
    if (!strided) {  // a negative stride: dense instead (the op would refuse the original anyway)
      int64_t s = 1;
      for (int i = v.ndim - 1; i >= 0; --i) {
        v.strides[i] = s;
        s *= v.shape[i] > 0 ? v.shape[i] : 1;
      }
    }
    const size_t es = DTypeSize(t.dtype);
    const Alias key{t.pointer, static_cast<int>(t.dtype), t.shape, t.strides};
    auto found = aliases.find(key);
    if (found != aliases.end() && t.pointer != 0) {
      v.data = r->views_[found->second].second.data;
      r->views_.emplace_back(t.name, v);
      where.push_back(where[found->second]);
      continue;
    }
    const client::diag::ElementSpan span = client::diag::CoveringSpan(v);
    const size_t offset = static_cast<size_t>(t.pointer % 256);  // keep the caller's alignment
    const size_t span_bytes = static_cast<size_t>(span.end - span.begin) * es;
    Buffer b;
    b.bytes = offset + span_bytes + 1;
    KILN_RETURN_IF_ERROR(d.Check(d.cuMemAlloc(&b.base, b.bytes), "cuMemAlloc(" + t.name + ")"));
    r->buffers_.push_back(b);
    v.data = reinterpret_cast<char*>(b.base) + offset - span.begin * static_cast<int64_t>(es);
    aliases[key] = r->views_.size();
    r->views_.emplace_back(t.name, v);
    images.emplace_back(span_bytes, 0xFF);  // poison: NaN in every float dtype
    where.emplace_back(r->buffers_.size() - 1, span.begin);
  }
  for (size_t i = 0; i < dump.tensors.size(); ++i) {
    const DumpedTensor& t = dump.tensors[i];
    if (t.role == Role::kOutput) continue;
    const auto* data = dump.inputs->Find(t.name);
    if (data == nullptr) return Invalid("inputs.safetensors has no tensor '" + t.name + "'");
    const TensorView& v = r->views_[i].second;
    if (data->bytes.size() != static_cast<size_t>(v.numel()) * DTypeSize(v.dtype))
      return Invalid("inputs.safetensors: " + t.name + " has " + std::to_string(data->bytes.size()) +
                     " bytes, its metadata says " + v.Describe());
    client::diag::ScatterInto(v, data->bytes, where[i].second, &images[where[i].first]);
  }
  for (size_t i = 0; i < images.size(); ++i) {
    const Buffer& b = r->buffers_[i];
    const size_t offset = b.bytes - images[i].size() - 1;
    if (!images[i].empty())
      KILN_RETURN_IF_ERROR(
          d.Check(d.cuMemcpyHtoD(b.base + offset, images[i].data(), images[i].size()), "cuMemcpyHtoD"));
  }
  return r;
}

CallReplay::~CallReplay() {
  auto driver = client::CudaDriver::Get();
  if (!driver.ok()) return;
  for (const Buffer& b : buffers_) (*driver)->cuMemFree(b.base);
}

const TensorView* CallReplay::Find(const std::string& name) const {
  for (const auto& [n, v] : views_)
    if (n == name) return &v;
  return nullptr;
}

StatusOr<TensorView> CallReplay::Need(const std::string& name) const {
  const TensorView* v = Find(name);
  if (v == nullptr) return Invalid("the dump records no tensor '" + name + "'");
  return *v;
}

StatusOr<void*> CallReplay::Scratch(size_t bytes) {
  auto driver = client::CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  Buffer b;
  b.bytes = bytes;
  KILN_RETURN_IF_ERROR((*driver)->Check((*driver)->cuMemAlloc(&b.base, bytes), "cuMemAlloc(workspace)"));
  buffers_.push_back(b);
  return reinterpret_cast<void*>(b.base);
}

Status CallReplay::Run() {
  const Invoker* invoker = FindInvoker(dump_.op);
  if (invoker == nullptr) return Status(StatusCode::kUnimplemented, NotReplayableReason(dump_.op));
  client::diag::SetCallObserver([this](const client::diag::OpCall& call, const Status&) {
    if (!observed_) observed_ = std::make_unique<client::diag::OpCall>(call);
  });
  Status status = invoker->run(*this);
  client::diag::SetCallObserver(nullptr);
  if (!status.ok()) return status;
  auto driver = client::CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  return (*driver)->Check((*driver)->cuCtxSynchronize(), "cuCtxSynchronize (after the replayed call)");
}

StatusOr<std::vector<uint8_t>> CallReplay::Read(const std::string& name) const {
  const TensorView* v = Find(name);
  if (v == nullptr) return Invalid("the replay has no tensor '" + name + "'");
  return client::diag::ReadTensor(*v, nullptr);
}

}  // namespace kiln::cli
