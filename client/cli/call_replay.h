// CallReplay: the device side of `kiln replay` — a dumped call's tensors made again on a GPU
// (recorded strides and pointer alignment kept, so the op picks the same specialization;
// tensors that were the same memory share one buffer again), the op called once more through
// its invoker in the op table (client/ops/op_table.h: its public path, with the arguments read
// back from the dump), and its outputs read back. Collectives need every rank and are not
// replayed.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/diag/dumped_call.h"
#include "client/diag/op_call.h"
#include "client/ops/op_args.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::cli {

// "" when `op` can be replayed, else why not.
std::string NotReplayableReason(const std::string& op);

class CallReplay : public client::NamedArgs {
 public:
  // Allocates and fills the call's tensors on `device`, whose context is current. Needs the
  // dump's inputs.
  static StatusOr<std::unique_ptr<CallReplay>> Prepare(const client::diag::DumpedCall& dump, int device);
  ~CallReplay() override;
  CallReplay(const CallReplay&) = delete;
  CallReplay& operator=(const CallReplay&) = delete;

  // Calls the op on the default stream and waits for it. The call's record (the kernels it
  // launched) is kept for observed().
  Status Run();
  const client::diag::OpCall* observed() const { return observed_.get(); }
  // Notes the op's invoker made for the reproduction (e.g. the decode plan made again).
  const std::vector<std::string>& notes() const { return notes_; }

  // A tensor's elements after Run(), dense and row-major.
  StatusOr<std::vector<uint8_t>> Read(const std::string& name) const;

  // The dump's arguments, as the op's invoker reads them (client::NamedArgs).
  const client::diag::DumpedCall& dump() const { return dump_; }
  const TensorView* Tensor(std::string_view name) const override;
  const std::string* Param(std::string_view name) const override;
  const std::vector<uint8_t>* HostBytes(std::string_view name) const override;
  void Note(std::string note) override { notes_.push_back(std::move(note)); }
  int device() const override { return device_; }
  StatusOr<void*> Scratch(size_t bytes) override;  // device memory freed with the replay

 private:
  struct Buffer {
    CUdeviceptr base = 0;
    size_t bytes = 0;
  };
  CallReplay(const client::diag::DumpedCall& dump, int device) : dump_(dump), device_(device) {}

  const client::diag::DumpedCall& dump_;
  int device_ = 0;
  std::vector<Buffer> buffers_;
  std::vector<std::pair<std::string, TensorView>> views_;
  std::vector<std::string> notes_;
  std::unique_ptr<client::diag::OpCall> observed_;
};

}  // namespace kiln::cli
