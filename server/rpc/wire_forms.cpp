#include "server/rpc/wire_forms.h"

namespace kiln::server {

void ToWire(const KernelAttributes& k, v1::KernelAttributes* out) {
  out->set_name(k.name);
  out->set_registers(k.registers);
  out->set_static_shared_bytes(k.static_shared_bytes);
  out->set_max_dynamic_shared_bytes(k.max_dynamic_shared_bytes);
  out->set_max_threads_per_block(k.max_threads_per_block);
  out->set_stack_bytes(k.stack_bytes);
  out->set_spill_store_bytes(k.spill_store_bytes);
  out->set_spill_load_bytes(k.spill_load_bytes);
  out->set_const_bytes(k.const_bytes);
}

KernelAttributes FromWire(const v1::KernelAttributes& k) {
  KernelAttributes out;
  out.name = k.name();
  out.registers = k.registers();
  out.static_shared_bytes = k.static_shared_bytes();
  out.max_dynamic_shared_bytes = k.max_dynamic_shared_bytes();
  out.max_threads_per_block = k.max_threads_per_block();
  out.stack_bytes = k.stack_bytes();
  out.spill_store_bytes = k.spill_store_bytes();
  out.spill_load_bytes = k.spill_load_bytes();
  out.const_bytes = k.const_bytes();
  return out;
}

void ToWire(const std::vector<kernels::EntryLaunch>& launch, google::protobuf::RepeatedPtrField<v1::EntryLaunch>* out) {
  for (const kernels::EntryLaunch& l : launch) {
    v1::EntryLaunch* e = out->Add();
    e->set_entry(l.entry);
    e->set_block(l.block);
    e->set_dynamic_smem(l.dynamic_smem);
    e->set_items_per_block(l.items_per_block);
    e->set_max_blocks(l.max_blocks);
  }
}

}  // namespace kiln::server
