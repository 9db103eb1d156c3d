// The driver loader: libcuda.so.1 is dlopen'ed, never linked, and its absence is a clear
// NO_DRIVER error, not a crash or a refusal to start. Arch names and compatibility too.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include "client/core/driver/cuda_driver.h"
#include "client/core/driver/devices.h"
#include "client/core/loader/arch_compat.h"
#include "kiln/kernel.h"

namespace {

using kiln::StatusCode;
using kiln::client::CudaDriver;

TEST_CASE("a missing driver library is NO_DRIVER naming the library and dlopen's reason", "[client][driver]") {
  auto driver = CudaDriver::Load("/nonexistent/libcuda.so.1");
  REQUIRE_FALSE(driver.ok());
  CHECK(driver.status().code() == StatusCode::kNoDriver);
  CHECK(driver.status().message().rfind("no CUDA driver: /nonexistent/libcuda.so.1 not found (dlopen: ", 0) == 0);
}

TEST_CASE("the toolkit's stub libcuda is recognised as no driver", "[client][driver]") {
  const char* stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  void* probe = dlopen(stub, RTLD_NOW | RTLD_LOCAL);
  if (probe == nullptr) {
    std::printf("SKIPPED: no CUDA stub library at %s\n", stub);
    std::exit(KILN_TEST_SKIP_CODE);
  }
  dlclose(probe);
  auto driver = CudaDriver::Load(stub);
  REQUIRE_FALSE(driver.ok());
  INFO(driver.status().message());
  CHECK(driver.status().code() == StatusCode::kNoDriver);
  CHECK(driver.status().message().find("stub") != std::string::npos);
}

TEST_CASE("the process-wide driver loads, or says why not, and keeps its answer", "[client][driver]") {
  auto first = CudaDriver::Get();
  auto second = CudaDriver::Get();
  CHECK(first.ok() == second.ok());
  void* real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (real == nullptr) {
    // A machine without a GPU driver, as on CI.
    REQUIRE_FALSE(first.ok());
    CHECK(first.status().code() == StatusCode::kNoDriver);
    CHECK(first.status().message().rfind("no CUDA driver: libcuda.so.1 not found (dlopen: ", 0) == 0);
  } else {
    dlclose(real);
    if (!first.ok()) {
      // A driver without a usable GPU still answers with NO_DRIVER and the reason.
      CHECK(first.status().code() == StatusCode::kNoDriver);
    } else {
      CHECK(*first == *second);
      CHECK((*first)->version() >= kiln::client::kMinDriverVersion);
      CHECK((*first)->cuLaunchKernelEx != nullptr);
      CHECK((*first)->ErrorText(CUDA_ERROR_INVALID_VALUE).rfind("CUDA_ERROR_INVALID_VALUE", 0) == 0);
    }
  }
}

TEST_CASE("the client asks for the portable arch of a device", "[client][driver][arch]") {
  CHECK(kiln::client::ArchForComputeCapability(9, 0) == "sm_90");
  CHECK(kiln::client::ArchForComputeCapability(8, 6) == "sm_86");
  CHECK(kiln::client::ArchForComputeCapability(10, 0) == "sm_100");
  CHECK(kiln::client::ArchForComputeCapability(12, 0) == "sm_120");
  CHECK(kiln::client::CudaVersionString(13000) == "13.0");
  CHECK(kiln::client::CudaVersionString(12080) == "12.8");
}

TEST_CASE("a cubin's arch is checked against the device before launching", "[client][arch]") {
  using kiln::client::CubinRunsOn;
  CHECK(CubinRunsOn("sm_90a", 9, 0));
  CHECK_FALSE(CubinRunsOn("sm_90a", 10, 0));
  CHECK_FALSE(CubinRunsOn("sm_90a", 8, 9));
  CHECK(CubinRunsOn("sm_80", 8, 6));
  CHECK(CubinRunsOn("sm_80", 8, 0));
  CHECK_FALSE(CubinRunsOn("sm_86", 8, 0));
  CHECK_FALSE(CubinRunsOn("sm_80", 9, 0));  // SASS does not cross major versions
  CHECK(CubinRunsOn("sm_100f", 10, 3));
  CHECK_FALSE(CubinRunsOn("sm_100f", 12, 0));
  CHECK(CubinRunsOn("compute_90", 9, 0));  // not ours to judge: the driver decides
}

}  // namespace
