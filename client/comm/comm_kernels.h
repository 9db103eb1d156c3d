// The all-reduce kernels of a communicator: fetched from kilnd like every op's (ops
// "all_reduce" and "all_reduce_add_rmsnorm", kiln/comm/comm_contract.h), loaded once per
// process, resolved in the communicator's context with the launch shape the generator
// prescribes, through the loader's launch cache.
#pragma once

#include "client/core/driver/cuda_driver.h"
#include "client/core/driver/current_context.h"
#include "client/core/loader/launch_cache.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client::comm {

// Entry 0 of the result is kiln_all_reduce_one_shot, entry 1 kiln_all_reduce_two_shot, for op
// all_reduce {dtype, world_size, vec}.
StatusOr<const OpLaunch*> AllReduceKernels(const CudaDriver& driver, const ContextInfo& context, DType dtype,
                                           int world_size, int vec);
// kiln_all_reduce_add_rmsnorm of op all_reduce_add_rmsnorm {dtype, world_size, hidden, vec}.
StatusOr<const OpLaunch*> AddRmsNormKernel(const CudaDriver& driver, const ContextInfo& context, DType dtype,
                                           int world_size, int64_t hidden, int vec);

}  // namespace kiln::client::comm
