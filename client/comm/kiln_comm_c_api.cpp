// The C ABI of kiln::comm (kiln/kiln.h, "Collectives"): an opaque kiln_comm around a
// kiln::comm::Communicator, DLTensor arguments, kiln_status and kiln_last_error out.
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/capi/c_status.h"
#include "client/core/capi/dlpack_tensor.h"
#include "kiln/c_abi.h"
#include "kiln/comm.h"

struct kiln_comm {
  std::unique_ptr<kiln::comm::Communicator> comm;
};

namespace {

using kiln::Status;
using kiln::StatusCode;
using kiln::client::FromDLTensor;
using kiln::client::GuardC;
using kiln::client::InvalidArgument;

kiln::StatusOr<kiln::comm::CommOptions> ToOptions(const kiln_comm_options* c, const char* api) {
  kiln::comm::CommOptions options;
  if (c == nullptr) return options;
  if (c->struct_size < sizeof(kiln_comm_options))
    return InvalidArgument(std::string(api) + ": options->struct_size is " + std::to_string(c->struct_size) +
                           ", expected at least " + std::to_string(sizeof(kiln_comm_options)) +
                           " (call kiln_comm_options_init)");
  options.device = c->device;
  if (c->buffer_bytes != 0) options.buffer_bytes = c->buffer_bytes;
  if (c->setup_timeout_ms > 0) options.setup_timeout = std::chrono::milliseconds(c->setup_timeout_ms);
  if (c->kernel_timeout_ms >= 0) options.kernel_timeout = std::chrono::milliseconds(c->kernel_timeout_ms);
  return options;
}

Status Create(const char* api, kiln_comm** out,
              const std::function<kiln::StatusOr<std::unique_ptr<kiln::comm::Communicator>>()>& make) {
  if (out == nullptr) return InvalidArgument(std::string(api) + ": comm (the result pointer) is NULL");
  *out = nullptr;
  KILN_ASSIGN_OR_RETURN(auto comm, make());
  *out = new kiln_comm{std::move(comm)};
  return kiln::OkStatus();
}

Status NeedComm(const kiln_comm* comm, const char* api) {
  if (comm == nullptr || !comm->comm)
    return InvalidArgument(std::string(api) + ": comm is NULL (create it with kiln_comm_create)");
  return kiln::OkStatus();
}

}  // namespace

extern "C" {

void kiln_comm_options_init(kiln_comm_options* options) {
  if (options == nullptr) return;
  const kiln::comm::CommOptions defaults;
  options->struct_size = sizeof(kiln_comm_options);
  options->device = defaults.device;
  options->buffer_bytes = defaults.buffer_bytes;
  options->setup_timeout_ms = static_cast<int>(defaults.setup_timeout.count());
  options->kernel_timeout_ms = static_cast<int>(defaults.kernel_timeout.count());
}

kiln_status kiln_comm_create(int rank, int world_size, const char* address, const kiln_comm_options* options,
                             kiln_comm** comm) {
  const char* api = "kiln_comm_create";
  return GuardC(api, [&] {
    if (comm != nullptr) *comm = nullptr;
    KILN_ASSIGN_OR_RETURN(auto resolved, ToOptions(options, api));
    return Create(api, comm,
                  [&] { return kiln::comm::Communicator::Create(rank, world_size, address ? address : "", resolved); });
  });
}

kiln_status kiln_comm_create_from_env(const kiln_comm_options* options, kiln_comm** comm) {
  const char* api = "kiln_comm_create_from_env";
  return GuardC(api, [&] {
    if (comm != nullptr) *comm = nullptr;
    KILN_ASSIGN_OR_RETURN(auto resolved, ToOptions(options, api));
    return Create(api, comm, [&] { return kiln::comm::Communicator::FromEnvironment(resolved); });
  });
}

void kiln_comm_destroy(kiln_comm* comm) {
  try {
    delete comm;
  } catch (...) {
  }
}

int kiln_comm_rank(const kiln_comm* comm) { return comm && comm->comm ? comm->comm->rank() : -1; }
int kiln_comm_world_size(const kiln_comm* comm) { return comm && comm->comm ? comm->comm->world_size() : -1; }
int kiln_comm_device(const kiln_comm* comm) { return comm && comm->comm ? comm->comm->device() : -1; }

kiln_status kiln_all_reduce(kiln_comm* comm, DLTensor* out, const DLTensor* in, kiln_all_reduce_algorithm algorithm,
                            void* stream) {
  const char* api = "kiln_all_reduce";
  return GuardC(api, [&]() -> Status {
    KILN_RETURN_IF_ERROR(NeedComm(comm, api));
    auto o = FromDLTensor(out, "out");
    if (!o.ok()) return o.status().WithContext(api);
    auto i = FromDLTensor(in, "in");
    if (!i.ok()) return i.status().WithContext(api);
    if (algorithm < KILN_ALL_REDUCE_AUTO || algorithm > KILN_ALL_REDUCE_TWO_SHOT)
      return InvalidArgument(std::string(api) + ": algorithm " + std::to_string(static_cast<int>(algorithm)) +
                             " is not one of KILN_ALL_REDUCE_AUTO (0), _ONE_SHOT (1), _TWO_SHOT (2)");
    return comm->comm->AllReduce(*o, *i, stream, static_cast<kiln::comm::AllReduceAlgorithm>(algorithm));
  });
}

kiln_status kiln_all_reduce_add_rms_norm(kiln_comm* comm, DLTensor* out, const DLTensor* in, DLTensor* residual,
                                         const DLTensor* weight, double eps, void* stream) {
  const char* api = "kiln_all_reduce_add_rms_norm";
  return GuardC(api, [&]() -> Status {
    KILN_RETURN_IF_ERROR(NeedComm(comm, api));
    auto o = FromDLTensor(out, "out");
    if (!o.ok()) return o.status().WithContext(api);
    auto i = FromDLTensor(in, "in");
    if (!i.ok()) return i.status().WithContext(api);
    auto r = FromDLTensor(residual, "residual");
    if (!r.ok()) return r.status().WithContext(api);
    auto w = FromDLTensor(weight, "weight");
    if (!w.ok()) return w.status().WithContext(api);
    return comm->comm->AllReduceAddRmsNorm(*o, *i, *r, *w, eps, stream);
  });
}

kiln_status kiln_comm_alloc_registered(kiln_comm* comm, size_t bytes, void** ptr) {
  const char* api = "kiln_comm_alloc_registered";
  return GuardC(api, [&]() -> Status {
    KILN_RETURN_IF_ERROR(NeedComm(comm, api));
    if (ptr == nullptr) return InvalidArgument(std::string(api) + ": ptr (the result pointer) is NULL");
    *ptr = nullptr;
    KILN_ASSIGN_OR_RETURN(auto p, comm->comm->AllocateRegistered(bytes));
    *ptr = p;
    return kiln::OkStatus();
  });
}

kiln_status kiln_comm_async_error(const kiln_comm* comm) {
  const char* api = "kiln_comm_async_error";
  return GuardC(api, [&]() -> Status {
    KILN_RETURN_IF_ERROR(NeedComm(comm, api));
    return comm->comm->AsyncError();
  });
}

kiln_status kiln_comm_synchronize(kiln_comm* comm, void* stream) {
  const char* api = "kiln_comm_synchronize";
  return GuardC(api, [&]() -> Status {
    KILN_RETURN_IF_ERROR(NeedComm(comm, api));
    return comm->comm->Synchronize(stream);
  });
}

}  // extern "C"
