#include "client/comm/symmetric_memory.h"

#include <unistd.h>

#include <string>

#include "client/core/api/invalid_argument.h"

namespace kiln::client::comm {
namespace {

CUmemAllocationProp DeviceProp(int device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

// Closes the fds it holds when it goes out of scope.
struct FdList {
  std::vector<int> fds;
  ~FdList() {
    for (int fd : fds)
      if (fd >= 0) close(fd);
  }
};

}  // namespace

Status SymmetricMemory::MapHandle(Mapping& m, int device) {
  KILN_RETURN_IF_ERROR(driver_.Check(driver_.cuMemAddressReserve(&m.ptr, size_, 0, 0, 0), "cuMemAddressReserve"));
  m.reserved = size_;
  KILN_RETURN_IF_ERROR(driver_.Check(driver_.cuMemMap(m.ptr, size_, 0, m.handle, 0), "cuMemMap"));
  m.mapped = true;
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return driver_.Check(driver_.cuMemSetAccess(m.ptr, size_, &access, 1), "cuMemSetAccess");
}

StatusOr<std::unique_ptr<SymmetricMemory>> SymmetricMemory::Create(const CudaDriver& driver, int device, size_t bytes,
                                                                   Rendezvous& rendezvous,
                                                                   std::chrono::milliseconds timeout) {
  const int world = rendezvous.world_size();
  const int rank = rendezvous.rank();
  std::unique_ptr<SymmetricMemory> memory(new SymmetricMemory(driver, rank));
  memory->mappings_.resize(static_cast<size_t>(world));

  CUmemAllocationProp prop = DeviceProp(device);
  size_t granularity = 0;
  KILN_RETURN_IF_ERROR(
      driver.Check(driver.cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
                   "cuMemGetAllocationGranularity"));
  if (granularity == 0) granularity = 2u << 20;
  memory->size_ = (bytes + granularity - 1) / granularity * granularity;

  // This rank's own allocation: created, mapped and zeroed before anyone else can see it.
  Mapping& own = memory->mappings_[static_cast<size_t>(rank)];
  KILN_RETURN_IF_ERROR(driver.Check(driver.cuMemCreate(&own.handle, memory->size_, &prop, 0),
                                    "cuMemCreate(" + std::to_string(memory->size_) +
                                        " bytes on cuda:" + std::to_string(device) + ", POSIX fd handle)"));
  own.has_handle = true;
  KILN_RETURN_IF_ERROR(memory->MapHandle(own, device));
  KILN_RETURN_IF_ERROR(driver.Check(driver.cuMemsetD8(own.ptr, 0, memory->size_), "cuMemsetD8"));
  KILN_RETURN_IF_ERROR(driver.Check(driver.cuCtxSynchronize(), "cuCtxSynchronize"));

  int exported = -1;
  KILN_RETURN_IF_ERROR(driver.Check(driver.cuMemExportToShareableHandle(&exported, own.handle,
                                                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                                    "cuMemExportToShareableHandle(POSIX fd)"));
  FdList own_fd{{exported}};

  auto gathered = rendezvous.AllGather(std::to_string(memory->size_), own_fd.fds, timeout);
  if (!gathered.ok()) return gathered.status().WithContext("exchanging GPU memory handles");
  FdList received;
  for (auto& c : *gathered)
    for (int fd : c.fds) received.fds.push_back(fd);

  for (int r = 0; r < world; ++r) {
    const PeerContribution& c = (*gathered)[static_cast<size_t>(r)];
    if (c.payload != std::to_string(memory->size_) || c.fds.size() != 1)
      return InvalidArgument("rank " + std::to_string(r) + " shares " + c.payload + " bytes (" +
                             std::to_string(c.fds.size()) + " handles) where rank " + std::to_string(rank) +
                             " shares " + std::to_string(memory->size_) +
                             " (1 handle): every rank must ask for the same buffer size");
    if (r == rank) continue;
    Mapping& m = memory->mappings_[static_cast<size_t>(r)];
    void* os_handle = reinterpret_cast<void*>(static_cast<uintptr_t>(c.fds[0]));
    KILN_RETURN_IF_ERROR(driver.Check(driver.cuMemImportFromShareableHandle(&m.handle, os_handle,
                                                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                                      "cuMemImportFromShareableHandle(rank " + std::to_string(r) + ")"));
    m.has_handle = true;
    Status mapped = memory->MapHandle(m, device);
    if (!mapped.ok())
      return mapped.WithContext("mapping rank " + std::to_string(r) + "'s memory on cuda:" + std::to_string(device) +
                                " (are the GPUs connected by NVLink or PCIe P2P?)");
  }
  return memory;
}

SymmetricMemory::~SymmetricMemory() {
  for (Mapping& m : mappings_) {
    if (m.mapped) driver_.cuMemUnmap(m.ptr, m.reserved);
    if (m.reserved != 0) driver_.cuMemAddressFree(m.ptr, m.reserved);
    if (m.has_handle) driver_.cuMemRelease(m.handle);
  }
}

bool SymmetricMemory::ContainsLocal(const void* p, size_t bytes) const {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t base_ptr = static_cast<uintptr_t>(local());
  return begin >= base_ptr && bytes <= size_ && begin - base_ptr <= size_ - bytes;
}

}  // namespace kiln::client::comm
