#include "client/comm/comm_kernels.h"

#include "client/core/loader/launch_preparation.h"
#include "kiln/comm/comm_contract.h"

namespace kiln::client::comm {
namespace {

struct AllReduceSpec {
  DType dtype = DType::kFloat32;
  int32_t world_size = 0;
  int32_t vec = 1;
  bool operator==(const AllReduceSpec&) const = default;
  auto Fields() const { return std::tie(dtype, world_size, vec); }
  std::map<std::string, std::string> Params() const {
    return {{kParamDType, DTypeName(dtype)},
            {::kiln::comm::kParamWorldSize, std::to_string(world_size)},
            {kParamVec, std::to_string(vec)}};
  }
};

struct AddRmsNormSpec {
  DType dtype = DType::kFloat32;
  int32_t world_size = 0;
  int32_t hidden = 0;
  int32_t vec = 1;
  bool operator==(const AddRmsNormSpec&) const = default;
  auto Fields() const { return std::tie(dtype, world_size, hidden, vec); }
  std::map<std::string, std::string> Params() const {
    return {{kParamDType, DTypeName(dtype)},
            {::kiln::comm::kParamWorldSize, std::to_string(world_size)},
            {::kiln::comm::kParamHidden, std::to_string(hidden)},
            {kParamVec, std::to_string(vec)}};
  }
};

const OpKernels kAllReduceKernels = {
    ::kiln::comm::kAllReduceOp,
    {{{.name = ::kiln::comm::kOneShotEntry, .min_block = 32}, {.name = ::kiln::comm::kTwoShotEntry, .min_block = 32}}}};
const OpKernels kAddRmsNormKernels = {::kiln::comm::kAllReduceAddRmsNormOp,
                                      {{{.name = ::kiln::comm::kAddRmsNormEntry, .min_block = 32}}}};

// Every entry's grid must fit the flag slots of a rank (kMaxBlocks), which the kernels index by
// block: a daemon that prescribes more is refused before anything launches.
StatusOr<const OpLaunch*> CheckedGrid(StatusOr<const OpLaunch*> launch, int entries) {
  KILN_RETURN_IF_ERROR(launch.status());
  for (int i = 0; i < entries; ++i) {
    const int64_t max_blocks = (*launch)->entry(i).max_blocks;
    if (max_blocks < 1 || max_blocks > ::kiln::comm::kMaxBlocks)
      return Status(StatusCode::kFailedPrecondition,
                    "the launch hint max_blocks=" + std::to_string(max_blocks) + " of " + (*launch)->library->info.uri +
                        " is not in 1.." + std::to_string(::kiln::comm::kMaxBlocks) + " (the flag slots of a rank)");
  }
  return launch;
}

}  // namespace

StatusOr<const OpLaunch*> AllReduceKernels(const CudaDriver& driver, const ContextInfo& context, DType dtype,
                                           int world_size, int vec) {
  return CheckedGrid(FindOrResolveLaunch(driver, kAllReduceKernels, AllReduceSpec{dtype, world_size, vec}, context), 2);
}

StatusOr<const OpLaunch*> AddRmsNormKernel(const CudaDriver& driver, const ContextInfo& context, DType dtype,
                                           int world_size, int64_t hidden, int vec) {
  return CheckedGrid(FindOrResolveLaunch(driver, kAddRmsNormKernels,
                                         AddRmsNormSpec{dtype, world_size, static_cast<int32_t>(hidden), vec}, context),
                     1);
}

}  // namespace kiln::client::comm
