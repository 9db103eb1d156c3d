#include "client/core/loader/module_info.h"

namespace kiln::client {

ModuleInfo ToModuleInfo(const v1::GetKernelResponse& reply) {
  ModuleInfo info;
  info.uri = reply.uri();
  info.cache_key = reply.cache_key();
  info.arch = reply.arch();
  info.sha256 = reply.sha256();
  info.cubin_size = reply.cubin_size() != 0 ? reply.cubin_size() : reply.cubin().size();
  info.origin = static_cast<Origin>(reply.origin() >= 0 && reply.origin() <= 6 ? reply.origin() : 0);
  info.job_id = reply.job_id();
  info.daemon_ms = reply.timings().total_ms();
  info.params.insert(reply.params().begin(), reply.params().end());
  for (const auto& l : reply.launch())
    info.launch.push_back({l.entry(), l.block(), l.dynamic_smem(), l.items_per_block(), l.max_blocks()});
  for (const auto& k : reply.kernels()) {
    KernelAttributes a;
    a.name = k.name();
    a.registers = k.registers();
    a.static_shared_bytes = k.static_shared_bytes();
    a.max_dynamic_shared_bytes = k.max_dynamic_shared_bytes();
    a.max_threads_per_block = k.max_threads_per_block();
    a.stack_bytes = k.stack_bytes();
    a.spill_store_bytes = k.spill_store_bytes();
    a.spill_load_bytes = k.spill_load_bytes();
    a.const_bytes = k.const_bytes();
    info.kernels.push_back(std::move(a));
  }
  return info;
}

}  // namespace kiln::client
