// SymmetricMemory: one allocation of the same size on every rank's GPU, each mapped into every
// rank's address space, so a kernel on one GPU reads and writes its peers' memory over
// NVLink with ordinary loads and stores.
//
// How: cuMemCreate on the rank's device with a POSIX file descriptor as its shareable handle,
// the fd passed to the other ranks' processes over the rendezvous socket (SCM_RIGHTS), where
// cuMemImportFromShareableHandle + cuMemMap + cuMemSetAccess map it for their own device. No
// legacy CUDA IPC handles and no NVLink multicast objects (cuMulticastCreate is never used).
// Physical memory lives until every process that mapped it has released it, so a rank that
// exits first never pulls memory from under a peer's running kernel.
#pragma once

#include <cuda.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "client/comm/rendezvous.h"
#include "client/core/driver/cuda_driver.h"
#include "kiln/status.h"

namespace kiln::client::comm {

class SymmetricMemory {
 public:
  // Collective: every rank calls it with the same `bytes`. The allocation (rounded up to the
  // driver's granularity) is zeroed before any peer can see it. The calling thread must have a
  // context of `device` current.
  static StatusOr<std::unique_ptr<SymmetricMemory>> Create(const CudaDriver& driver, int device, size_t bytes,
                                                           Rendezvous& rendezvous, std::chrono::milliseconds timeout);
  ~SymmetricMemory();
  SymmetricMemory(const SymmetricMemory&) = delete;
  SymmetricMemory& operator=(const SymmetricMemory&) = delete;

  size_t size() const { return size_; }
  int rank() const { return rank_; }
  int world_size() const { return static_cast<int>(mappings_.size()); }
  // Rank r's allocation as mapped in this process (r == rank(): this rank's own memory).
  CUdeviceptr base(int r) const { return mappings_[static_cast<size_t>(r)].ptr; }
  CUdeviceptr local() const { return base(rank_); }
  // Whether [p, p + bytes) lies inside this rank's own allocation.
  bool ContainsLocal(const void* p, size_t bytes) const;

 private:
  struct Mapping {
    CUdeviceptr ptr = 0;
    size_t reserved = 0;  // address range reserved (0: none)
    bool mapped = false;
    CUmemGenericAllocationHandle handle = 0;
    bool has_handle = false;
  };
  SymmetricMemory(const CudaDriver& driver, int rank) : driver_(driver), rank_(rank) {}
  Status MapHandle(Mapping& m, int device);

  const CudaDriver& driver_;
  int rank_ = 0;
  size_t size_ = 0;
  std::vector<Mapping> mappings_;
};

}  // namespace kiln::client::comm
