// The all-reduce kernels of a communicator: fetched from kilnd like every op's (ops
// "all_reduce" and "all_reduce_add_rmsnorm"), loaded once, resolved in the communicator's
// context, with the launch shape the generator prescribes.
#pragma once

#include <cuda.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "client/driver/cuda_driver.h"
#include "client/driver/current_context.h"
#include "client/loader/loaded_library.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client::comm {

inline constexpr const char* kOneShotEntry = "kiln_all_reduce_one_shot";
inline constexpr const char* kTwoShotEntry = "kiln_all_reduce_two_shot";
inline constexpr const char* kAddRmsNormEntry = "kiln_all_reduce_add_rmsnorm";

struct CommKernel {
  CUfunction function = nullptr;
  unsigned block = 0;       // launch hint "block"
  unsigned max_blocks = 1;  // launch hint "max_blocks"
  std::shared_ptr<const detail::LoadedLibrary> library;  // keeps `function` loaded
};

class CommKernels {
 public:
  CommKernels(const CudaDriver& driver, ContextInfo context, int world_size)
      : driver_(driver), context_(context), world_size_(world_size) {}

  // `entry` of op all_reduce {dtype, world_size, vec}.
  StatusOr<const CommKernel*> AllReduce(DType dtype, int vec, const char* entry);
  // all_reduce_add_rmsnorm {dtype, world_size, hidden, vec}.
  StatusOr<const CommKernel*> AddRmsNorm(DType dtype, int64_t hidden, int vec);

 private:
  using Key = std::tuple<std::string, int, int64_t, int>;  // entry, dtype, hidden, vec
  StatusOr<const CommKernel*> Get(const Key& key, const std::string& op,
                                  std::map<std::string, std::string> params);

  const CudaDriver& driver_;
  ContextInfo context_;
  int world_size_;
  std::map<Key, CommKernel> kernels_;
};

}  // namespace kiln::client::comm
