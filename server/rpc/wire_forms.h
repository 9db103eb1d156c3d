// The engine's records as the wire API's messages, for every service that sends them (a
// kernel's attributes, an entry's launch hints): one spelling of each conversion.
#pragma once

#include <google/protobuf/repeated_field.h>

#include <vector>

#include "kernels/jit/jit_spec.h"
#include "kiln/v1/kernel.pb.h"
#include "server/jit/kernel_attributes.h"

namespace kiln::server {

void ToWire(const KernelAttributes& k, v1::KernelAttributes* out);
void ToWire(const std::vector<kernels::EntryLaunch>& launch, google::protobuf::RepeatedPtrField<v1::EntryLaunch>* out);
// A kernel's attributes as a prebuilt bundle's manifest holds them.
KernelAttributes FromWire(const v1::KernelAttributes& k);

}  // namespace kiln::server
