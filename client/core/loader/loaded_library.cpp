#include "client/core/loader/loaded_library.h"

#include <algorithm>
#include <chrono>
#include <string_view>
#include <unordered_set>

#include "client/core/rpc/client_counters.h"

namespace kiln::detail {
namespace {

// Dynamic shared memory above this needs an explicit opt-in per function.
constexpr unsigned kDefaultDynamicSmemLimit = 48 * 1024;

}  // namespace

StatusOr<std::shared_ptr<const LoadedLibrary>> LoadedLibrary::Load(const client::CudaDriver& driver, std::string cubin,
                                                                   ModuleInfo info,
                                                                   const std::vector<std::string>& entries) {
  const auto start = std::chrono::steady_clock::now();
  auto lib = std::make_shared<LoadedLibrary>();
  lib->driver = &driver;
  lib->info = std::move(info);
  lib->cubin_ = std::move(cubin);
  // The bytes stay with the library until it is unloaded (cubin_ outlives the destructor's
  // cuLibraryUnload), so the driver may use them instead of copying its own: ~3 us of a ~100 KB
  // load on the H200 (kiln-bench-service's load_parts, which passes the option the same way: a
  // flag without a value), and no second copy in host memory. The option is a hint: the driver
  // may still copy.
  // Messages are built only for a failure (a load resolves tens of kernels: their strings cost
  // ~14 000 instructions a warm fetch when built for every successful call).
  CUlibraryOption preserved = CU_LIBRARY_BINARY_IS_PRESERVED;
  const CUresult loaded = driver.cuLibraryLoadData(&lib->library, lib->cubin_.data(), nullptr, nullptr, 0, &preserved,
                                                   nullptr, 1);
  if (loaded != CUDA_SUCCESS)
    return driver.Check(loaded, "cuLibraryLoadData")
        .WithContext("loading " + lib->info.uri + " (" + lib->info.arch + ", key " + lib->info.cache_key + ")");
  client::Bump(client::Counters().modules_loaded);

  // The module's kernels, then the requested entries, each once: a set of the names taken, not
  // a search of the entries so far (quadratic: a 40-kernel source cost ~70 000 instructions of
  // string compares per load).
  std::vector<std::string_view> names;
  names.reserve(lib->info.kernels.size() + entries.size());
  for (const auto& k : lib->info.kernels) names.push_back(k.name);
  for (const auto& e : entries) names.push_back(e);
  std::unordered_set<std::string_view> taken;
  taken.reserve(names.size());
  lib->entries.reserve(names.size());
  for (const std::string_view name : names) {
    if (name.empty() || !taken.insert(name).second) continue;
    CUkernel kernel = nullptr;
    std::string name_z(name);  // NUL-terminated for the driver; then the entry's name
    CUresult r = driver.cuLibraryGetKernel(&kernel, lib->library, name_z.c_str());
    if (r == CUDA_ERROR_NOT_FOUND) {
      std::string has = lib->EntryNames();
      return Status(StatusCode::kNotFound, "the cubin of " + lib->info.uri + " has no kernel '" + name_z + "'" +
                                               (has.empty() ? "" : " (it has: " + has + ")"));
    }
    if (r != CUDA_SUCCESS) return driver.Check(r, "cuLibraryGetKernel(" + name_z + ")");
    lib->entries.push_back({std::move(name_z), kernel});
  }
  lib->info.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return std::shared_ptr<const LoadedLibrary>(std::move(lib));
}

LoadedLibrary::~LoadedLibrary() {
  // At process exit the driver may already be shut down; the result does not matter then.
  if (library != nullptr && driver != nullptr) driver->cuLibraryUnload(library);
}

Module LoadedLibrary::MakeModule(std::shared_ptr<const LoadedLibrary> library, int device) {
  Module module;
  module.library_ = std::move(library);
  module.device_ = device;
  return module;
}

int LoadedLibrary::FindEntry(std::string_view name) const {
  for (size_t i = 0; i < entries.size(); ++i)
    if (entries[i].name == name) return static_cast<int>(i);
  return -1;
}

std::string LoadedLibrary::EntryNames() const {
  std::string s;
  for (const auto& e : entries) s += (s.empty() ? "" : ", ") + e.name;
  return s;
}

StatusOr<CUfunction> LoadedLibrary::Function(size_t entry, CUcontext context, unsigned dynamic_smem) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(functions_.begin(), functions_.end(),
                         [&](const ContextFunction& f) { return f.context == context && f.entry == entry; });
  if (it == functions_.end()) {
    CUfunction function = nullptr;
    KILN_RETURN_IF_ERROR(driver
                             ->Check(driver->cuKernelGetFunction(&function, entries[entry].kernel),
                                     "cuKernelGetFunction(" + entries[entry].name + ")")
                             .WithContext(info.uri));
    functions_.push_back({context, entry, function, kDefaultDynamicSmemLimit});
    it = functions_.end() - 1;
  }
  if (dynamic_smem > it->smem_opt_in) {
    KILN_RETURN_IF_ERROR(
        driver
            ->Check(driver->cuFuncSetAttribute(it->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                               static_cast<int>(dynamic_smem)),
                    "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES = " + std::to_string(dynamic_smem) + ") for " +
                        entries[entry].name)
            .WithContext(info.uri));
    it->smem_opt_in = dynamic_smem;
  }
  return it->function;
}

}  // namespace kiln::detail
