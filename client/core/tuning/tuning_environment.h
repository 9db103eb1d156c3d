// TuningEnvironment: where a tuning result was measured, computed for a device of this
// process. The type is the wire's kiln.v1.TuningEnvironment: the daemon's store, the
// KILN_TUNING_FILE and the tuner share that one description (proto/kiln/v1/tuning.proto).
#pragma once

#include <string>

#include "client/core/driver/devices.h"
#include "kiln/status.h"
#include "kiln/v1/tuning.pb.h"

namespace kiln::client {

using TuningEnvironment = v1::TuningEnvironment;
using TuningRecord = v1::TuningRecord;
using BlockedTactic = v1::BlockedTactic;

// The environment from what the driver and the daemon said (pure, for tests).
TuningEnvironment MakeTuningEnvironment(const DeviceInfo& device, int driver_version, const std::string& nvrtc_version,
                                        int tactic_space_version);

// The environment of device `ordinal` for an op whose tactic space is at
// `tactic_space_version`: the device's name and SM count and the driver's version through the
// dlopen'ed driver, the daemon's NVRTC (asked once per process, daemon_tuning.h), and this
// library's VERSION. kNoDriver without a driver; INVALID_ARGUMENT for a device that does not
// exist or a version < 1; the daemon's error when it cannot be asked. Computed once per
// (device, version) and daemon.
StatusOr<TuningEnvironment> CurrentTuningEnvironment(int ordinal, int tactic_space_version);

// Which fields of `stored` differ from `here`, for a log line: "gpu_name: stored 'NVIDIA H100',
// here 'NVIDIA H200', driver_version: stored 12080, here 13000"; empty when they are equal.
std::string DescribeMismatch(const TuningEnvironment& stored, const TuningEnvironment& here);

}  // namespace kiln::client
