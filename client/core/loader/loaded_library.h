// LoadedLibrary: one verified cubin loaded with cuLibraryLoadData (context-independent), its
// kernels (CUkernel), and their per-context functions (CUfunction), made on first use in each
// context. The object behind kiln::Module and kiln::Kernel.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "client/core/driver/cuda_driver.h"
#include "kiln/kernel.h"

namespace kiln::detail {

struct LoadedLibrary {
  struct Entry {
    std::string name;
    CUkernel kernel = nullptr;
  };

  // Loads `cubin` and resolves each kernel named in `info.kernels` and in `entries`; a name
  // the cubin lacks is NOT_FOUND listing the names it has. The library keeps the bytes while it
  // is loaded (the driver is told it may read them rather than copy them).
  static StatusOr<std::shared_ptr<const LoadedLibrary>> Load(const client::CudaDriver& driver, std::string cubin,
                                                             ModuleInfo info, const std::vector<std::string>& entries);
  ~LoadedLibrary();

  // `device`: where its kernels launch when no context is current.
  static Module MakeModule(std::shared_ptr<const LoadedLibrary> library, int device);

  // Index of `name` in entries, or -1.
  int FindEntry(std::string_view name) const;
  std::string EntryNames() const;  // "kiln_rmsnorm, kiln_other"

  // The entry's function in `context`, which must be current on this thread. A kernel that
  // needs more than 48 KiB of dynamic shared memory is opted in (once per context and size).
  StatusOr<CUfunction> Function(size_t entry, CUcontext context, unsigned dynamic_smem) const;

  const client::CudaDriver* driver = nullptr;
  CUlibrary library = nullptr;
  ModuleInfo info;
  std::vector<Entry> entries;

 private:
  struct ContextFunction {
    CUcontext context;
    size_t entry;
    CUfunction function;
    unsigned smem_opt_in;
  };
  // The loaded bytes: the driver may read them until ~LoadedLibrary's cuLibraryUnload
  // (CU_LIBRARY_BINARY_IS_PRESERVED); members are destroyed after that.
  std::string cubin_;
  mutable std::mutex mu_;
  mutable std::vector<ContextFunction> functions_;
};

}  // namespace kiln::detail
