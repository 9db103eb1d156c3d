#include "client/cli/call_replay.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>

#include "client/core/api/invalid_argument.h"
#include "client/core/driver/cuda_driver.h"
#include "client/diag/call_trace.h"
#include "client/diag/tensor_copy.h"
#include "client/ops/op_table.h"

namespace kiln::cli {
namespace {

using client::InvalidArgument;
using client::diag::DumpedCall;
using client::diag::DumpedTensor;
using client::diag::Role;

}  // namespace

std::string NotReplayableReason(const std::string& op) {
  const client::OpDescriptor* known = client::FindOp(op);
  if (known == nullptr) return "this kiln does not know the op '" + op + "'";
  if (known->invoke == nullptr) return op + " is " + known->not_invokable;
  return "";
}

StatusOr<std::unique_ptr<CallReplay>> CallReplay::Prepare(const DumpedCall& dump, int device) {
  if (!dump.inputs) return Status(StatusCode::kFailedPrecondition, dump.inputs_missing);
  KILN_ASSIGN_OR_RETURN(auto driver, client::CudaDriver::Get());
  const client::CudaDriver& d = *driver;
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
    if (data == nullptr) return InvalidArgument("inputs.safetensors has no tensor '" + t.name + "'");
    const TensorView& v = r->views_[i].second;
    if (data->bytes.size() != static_cast<size_t>(v.numel()) * DTypeSize(v.dtype))
      return InvalidArgument("inputs.safetensors: " + t.name + " has " + std::to_string(data->bytes.size()) +
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

const TensorView* CallReplay::Tensor(std::string_view name) const {
  for (const auto& [n, v] : views_)
    if (n == name) return &v;
  return nullptr;
}

const std::string* CallReplay::Param(std::string_view name) const { return dump_.Param(std::string(name)); }

const std::vector<uint8_t>* CallReplay::HostBytes(std::string_view name) const {
  const auto* data = dump_.inputs ? dump_.inputs->Find(std::string(name)) : nullptr;
  return data != nullptr ? &data->bytes : nullptr;
}

StatusOr<void*> CallReplay::Scratch(size_t bytes) {
  KILN_ASSIGN_OR_RETURN(auto driver, client::CudaDriver::Get());
  Buffer b;
  b.bytes = bytes;
  KILN_RETURN_IF_ERROR(driver->Check(driver->cuMemAlloc(&b.base, bytes), "cuMemAlloc(workspace)"));
  buffers_.push_back(b);
  return reinterpret_cast<void*>(b.base);
}

Status CallReplay::Run() {
  const client::OpDescriptor* op = client::FindOp(dump_.op);
  if (op == nullptr || op->invoke == nullptr) return Status(StatusCode::kUnimplemented, NotReplayableReason(dump_.op));
  client::diag::SetCallObserver([this](const client::diag::OpCall& call, const Status&) {
    if (!observed_) observed_ = std::make_unique<client::diag::OpCall>(call);
  });
  // The default stream, as the original call's own stream is not recorded.
  Status status = op->invoke(*op, *this, nullptr);
  client::diag::SetCallObserver(nullptr);
  if (!status.ok()) return status;
  KILN_ASSIGN_OR_RETURN(auto driver, client::CudaDriver::Get());
  return driver->Check(driver->cuCtxSynchronize(), "cuCtxSynchronize (after the replayed call)");
}

StatusOr<std::vector<uint8_t>> CallReplay::Read(const std::string& name) const {
  const TensorView* v = Tensor(name);
  if (v == nullptr) return InvalidArgument("the replay has no tensor '" + name + "'");
  return client::diag::ReadTensor(*v, nullptr);
}

}  // namespace kiln::cli
