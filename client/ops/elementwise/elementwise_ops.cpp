// The elementwise family's ops, scale_add (kiln/ops/elementwise.h): validation, the op table
// entry, the launch, and the C++ and C APIs. The kernel contract is
// kiln/elementwise/elementwise_contract.h.
#include <climits>

#include "client/core/loader/kernel_launch.h"
#include "client/core/loader/launch_preparation.h"
#include "client/ops/op_table.h"
#include "client/ops/row_view.h"
#include "kiln/elementwise/elementwise_contract.h"
#include "kiln/ops/elementwise.h"

namespace kiln::client {
namespace {

// One cubin per dtype: n is a launch argument.
struct ScaleAddSpec {
  DType dtype = DType::kBFloat16;
  bool operator==(const ScaleAddSpec&) const = default;
  auto Fields() const { return std::tie(dtype); }
  std::map<std::string, std::string> Params() const { return {{kParamDType, DTypeName(dtype)}}; }
};
const OpKernels kScaleAddKernels = {elementwise::kScaleAddOp, {{{elementwise::kScaleAddEntry, 1, true}}}};

struct ScaleAddArgs {
  const TensorView* out = nullptr;
  const TensorView* x = nullptr;
  const TensorView* y = nullptr;
  float alpha = 1;
  template <typename Self, typename V>
  static void Visit(Self& a, V& v) {
    v.Out("out", a.out).In("x", a.x).In("y", a.y).Param("alpha", a.alpha);
  }
};

// A contiguous tensor of x's dtype, shape and device: its view as one row of n elements.
StatusOr<RowView> Contiguous(const TensorView& t, const char* name, const TensorView& x) {
  KILN_ASSIGN_OR_RETURN(const RowView v, ViewAsRows(t, name));
  if (t.dtype != DType::kFloat16 && t.dtype != DType::kBFloat16)
    return Status(StatusCode::kInvalidArgument,
                  std::string(name) + ": dtype " + DTypeName(t.dtype) + " is not supported; expected fp16 or bf16");
  if (&t != &x && t.dtype != x.dtype)
    return Status(StatusCode::kInvalidArgument, std::string(name) + ": expected dtype " + DTypeName(x.dtype) +
                                                    " (x's), found " + DTypeName(t.dtype));
  if (&t != &x && ShapeText(t) != ShapeText(x))
    return Status(StatusCode::kInvalidArgument,
                  std::string(name) + ": expected shape " + ShapeText(x) + " (x's), found " + ShapeText(t));
  if (t.device != x.device)
    return Status(StatusCode::kInvalidArgument, std::string(name) + ": on " + DeviceName(t.device) +
                                                    ", but x is on " + DeviceName(x.device));
  if (v.rows > 1 && v.row_stride != v.hidden)
    return Status(StatusCode::kInvalidArgument, std::string(name) + ": must be contiguous (shape " + ShapeText(t) +
                                                    ", row stride " + std::to_string(v.row_stride) + ")");
  return v;
}

Status RunScaleAdd(const ScaleAddArgs& a, const char* api, void* stream) {
  Status checked = [&]() -> Status {
    KILN_ASSIGN_OR_RETURN(const RowView x, Contiguous(*a.x, "x", *a.x));
    KILN_ASSIGN_OR_RETURN(const RowView y, Contiguous(*a.y, "y", *a.x));
    KILN_ASSIGN_OR_RETURN(const RowView out, Contiguous(*a.out, "out", *a.x));
    KILN_RETURN_IF_ERROR(CheckNoOverlap(out, x, /*same_is_ok=*/true));
    return CheckNoOverlap(out, y, /*same_is_ok=*/true);
  }();
  KILN_RETURN_IF_ERROR(checked.WithContext(api));
  const int64_t n = a.x->numel();
  if (n == 0) return OkStatus();  // nothing to do, and nothing to launch
  KILN_ASSIGN_OR_RETURN(const PreparedLaunch ready,
                        PrepareOpLaunch(kScaleAddKernels, ScaleAddSpec{a.x->dtype}, a.x->device.index, api));
  const EntryLaunchReady& e = ready.launch->entry();
  const int64_t blocks = (n + e.items_per_block - 1) / e.items_per_block;
  if (blocks > INT_MAX)
    return Status(StatusCode::kInvalidArgument, std::string(api) + ": " + std::to_string(n) +
                                                    " elements need more than 2^31-1 blocks; split the call");
  LaunchConfig config;
  config.grid.x = static_cast<unsigned>(blocks);
  config.block.x = e.block;
  config.stream = stream;
  elementwise::ScaleAddParams params = {a.out->data, a.x->data, a.y->data, n, a.alpha};
  void* args[] = {&params};
  return LaunchFunction(*ready.driver, e.function, config, args, elementwise::kScaleAddEntry,
                        &ready.launch->library->info);
}

const OpDescriptor kScaleAdd = {.name = "scale_add",
                                .op = elementwise::kScaleAddOp,
                                .family = "elementwise",
                                .cpp_api = "kiln::ops::scale_add",
                                .c_api = "kiln_scale_add",
                                .invoke = InvokeByVisit<ScaleAddArgs, RunScaleAdd>};
KILN_REGISTER_OP(kScaleAdd);

}  // namespace
}  // namespace kiln::client

namespace kiln::ops {

Status scale_add(const TensorView& out, const TensorView& x, const TensorView& y, float alpha, void* stream) {
  return client::CallOp(client::kScaleAdd, client::kScaleAdd.cpp_api, client::ScaleAddArgs{&out, &x, &y, alpha},
                        stream, client::RunScaleAdd);
}

}  // namespace kiln::ops

extern "C" kiln_status kiln_scale_add(DLTensor* out, const DLTensor* x, const DLTensor* y, float alpha, void* stream) {
  using namespace kiln::client;
  return CallOpC(kScaleAdd, stream, RunScaleAdd, [&](CTensors& t) {
    return ScaleAddArgs{t.Tensor(out, "out"), t.Tensor(x, "x"), t.Tensor(y, "y"), alpha};
  });
}
