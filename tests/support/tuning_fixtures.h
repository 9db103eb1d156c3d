// Tuning records for the tests of the stores (proto/, server/tuning, client/core/tuning): a
// complete, valid record whose fields a test changes one at a time.
#pragma once

#include <string>

#include "kiln/v1/tuning.pb.h"

namespace kiln::testing {

// NVIDIA H200, 132 SMs, driver 13000, NVRTC 13.0, Kiln 0.1.0, tactic space 1 (or `gpu`).
v1::TuningEnvironment TestEnvironment(const std::string& gpu = "NVIDIA H200");

// A gemm record of `bucket` in `environment`: `tactic` chosen at `median_us` by CUPTI, one
// other candidate that failed, recorded at `recorded_s` (Unix seconds).
v1::TuningRecord TestRecord(const std::string& bucket = "bf16.obf16.m4096.n4096.k4096",
                            const v1::TuningEnvironment& environment = TestEnvironment(),
                            const std::string& tactic = "t128x256x64s4g8", double median_us = 412.5,
                            int64_t recorded_s = 1796000000);

}  // namespace kiln::testing
