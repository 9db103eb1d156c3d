#include "client/core/tuning/tuning_environment.h"

#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "client/core/api/invalid_argument.h"
#include "client/core/driver/cuda_driver.h"
#include "client/core/rpc/client_settings.h"
#include "client/core/tuning/daemon_tuning.h"
#include "kiln/version.h"
#include "proto/tuning_environment.h"

namespace kiln::client {

TuningEnvironment MakeTuningEnvironment(const DeviceInfo& device, int driver_version, const std::string& nvrtc_version,
                                        int tactic_space_version) {
  TuningEnvironment e;
  e.set_gpu_name(device.name);
  e.set_sm_count(device.multiprocessors);
  e.set_driver_version(driver_version);
  e.set_nvrtc_version(nvrtc_version);
  e.set_kiln_version(KILN_VERSION_STRING);
  e.set_tactic_space_version(tactic_space_version);
  return e;
}

StatusOr<TuningEnvironment> CurrentTuningEnvironment(int ordinal, int tactic_space_version) {
  if (tactic_space_version < 1)
    return InvalidArgument("tactic_space_version " + std::to_string(tactic_space_version) +
                           " must be at least 1 (the op's version of its tactic space)");
  const std::string target = CurrentSettings()->connection->target();
  // NOTES: the driver and the daemon are asked once; a gemm call then pays one map lookup.
  static std::mutex mu;
  static std::map<std::tuple<std::string, int, int>, TuningEnvironment> known;
  const auto key = std::make_tuple(target, ordinal, tactic_space_version);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = known.find(key); it != known.end()) return it->second;
  }
  KILN_ASSIGN_OR_RETURN(const CudaDriver* driver, CudaDriver::Get());
  KILN_ASSIGN_OR_RETURN(DeviceInfo device, DescribeDevice(*driver, ordinal));
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<const DaemonTuning> daemon, GetDaemonTuning());
  TuningEnvironment e = MakeTuningEnvironment(device, driver->version(), daemon->info.nvrtc_version(),
                                              tactic_space_version);
  std::lock_guard<std::mutex> lock(mu);
  known.emplace(key, e);
  return e;
}

std::string DescribeMismatch(const TuningEnvironment& stored, const TuningEnvironment& here) {
  std::string out;
  for (const std::string& d : proto::TuningEnvironmentDifferences(stored, here)) out += (out.empty() ? "" : ", ") + d;
  return out;
}

}  // namespace kiln::client
