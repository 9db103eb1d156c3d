#include "client/comm/comm_kernels.h"

#include "client/comm/comm_abi.h"
#include "client/loader/launch_hint.h"
#include "client/ops/op_dispatch.h"

namespace kiln::client::comm {

StatusOr<const CommKernel*> CommKernels::AllReduce(DType dtype, int vec, const char* entry) {
  return Get({entry, static_cast<int>(dtype), 0, vec}, "all_reduce",
             {{"dtype", DTypeName(dtype)},
              {"world_size", std::to_string(world_size_)},
              {"vec", std::to_string(vec)}});
}

StatusOr<const CommKernel*> CommKernels::AddRmsNorm(DType dtype, int64_t hidden, int vec) {
  return Get({kAddRmsNormEntry, static_cast<int>(dtype), hidden, vec}, "all_reduce_add_rmsnorm",
             {{"dtype", DTypeName(dtype)},
              {"world_size", std::to_string(world_size_)},
              {"hidden", std::to_string(hidden)},
              {"vec", std::to_string(vec)}});
}

StatusOr<const CommKernel*> CommKernels::Get(const Key& key, const std::string& op_name,
                                             std::map<std::string, std::string> params) {
  if (auto it = kernels_.find(key); it != kernels_.end()) return &it->second;
  const std::string& entry = std::get<0>(key);

  OpRequest op{op_name, std::move(params)};
  auto library = FetchOpModule(driver_, op, {entry}, context_);
  if (!library.ok()) return library.status();
  const ModuleInfo& info = (*library)->info;
  auto block = LaunchHint(info, "block", 32, 1024);
  if (!block.ok()) return block.status();
  auto max_blocks = LaunchHint(info, "max_blocks", 1, kMaxBlocks);
  if (!max_blocks.ok()) return max_blocks.status();
  auto launch = EntryLaunch(driver_, *library, entry.c_str(), context_, *block, 0);
  if (!launch.ok()) return launch.status();

  CommKernel kernel;
  kernel.function = launch->function;
  kernel.block = launch->block;
  kernel.max_blocks = static_cast<unsigned>(*max_blocks);
  kernel.library = std::move(launch->library);
  return &kernels_.emplace(key, std::move(kernel)).first->second;
}

}  // namespace kiln::client::comm
