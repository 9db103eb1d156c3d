// The CUDA context of an op call (client/core/driver/current_context.h) against the no-op driver
// of bench/op/null_cuda_driver.cpp (a CUDA driver API that does nothing; built with the
// benchmarks, skipped without them): a repeat call on a thread finds the context it saw before
// without building a Status (SeenCurrentContext, the op-call overhead); a context it has not
// seen, none current, or another thread's state all go to CurrentContext, which makes the
// device's primary context current as the CUDA runtime would.
//
// In a child process: what the process learns of devices and contexts is process-wide, and the
// no-op driver's must not stand in for a real GPU's in the tests that run after this one.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "client/core/driver/current_context.h"

namespace {

using kiln::client::ContextInfo;
using kiln::client::CudaDriver;
using kiln::client::CurrentContext;
using kiln::client::SeenCurrentContext;

// The scenario, in the child: each failed expectation is a line on `out`.
void Scenario(FILE* out) {
  auto expect = [out](bool ok, const char* what) {
    if (!ok) std::fprintf(out, "failed: %s\n", what);
  };
  auto loaded = CudaDriver::Load(KILN_NULL_DRIVER_PATH);
  if (!loaded.ok()) {
    std::fprintf(out, "failed: loading the no-op driver: %s\n", loaded.status().ToString().c_str());
    return;
  }
  const CudaDriver& driver = **loaded;

  expect(driver.cuCtxSetCurrent(nullptr) == CUDA_SUCCESS, "no context made current");
  expect(SeenCurrentContext(driver) == nullptr, "none current: not seen");

  auto found = CurrentContext(driver, 0);  // the primary context of cuda:0, made current
  if (!found.ok() || found->context == nullptr) {
    std::fprintf(out, "failed: CurrentContext: %s\n", found.status().ToString().c_str());
    return;
  }
  expect(found->device == 0, "the primary context is cuda:0's");
  CUcontext current = nullptr;
  expect(driver.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == found->context,
         "CurrentContext made the primary context current");

  const ContextInfo* seen = SeenCurrentContext(driver);
  expect(seen != nullptr, "the context CurrentContext described is seen");
  if (seen != nullptr) {
    expect(seen->context == found->context && seen->device == found->device && seen->cc_major == found->cc_major &&
               seen->cc_minor == found->cc_minor && seen->multiprocessors == found->multiprocessors,
           "what is seen is what CurrentContext said");
  }

  // Another context made current behind the library's back: not the one seen, until described.
  expect(driver.cuCtxSetCurrent(reinterpret_cast<CUcontext>(uintptr_t{0x5eed0})) == CUDA_SUCCESS, "set another");
  expect(SeenCurrentContext(driver) == nullptr, "another context current: not seen");
  expect(driver.cuCtxSetCurrent(found->context) == CUDA_SUCCESS, "set the first again");
  expect(SeenCurrentContext(driver) != nullptr, "the first context again: seen");

  // What one thread has seen is its own.
  std::thread([&] {
    expect(driver.cuCtxSetCurrent(found->context) == CUDA_SUCCESS, "set on a new thread");
    expect(SeenCurrentContext(driver) == nullptr, "a new thread has seen nothing");
    auto again = CurrentContext(driver, 0);
    expect(again.ok() && again->context == found->context, "the new thread's CurrentContext");
    expect(SeenCurrentContext(driver) != nullptr, "then the new thread sees it");
  }).join();
}

TEST_CASE("an op call's context is the one seen before on its thread, else found as the runtime would",
          "[client][driver]") {
  if (std::string(KILN_NULL_DRIVER_PATH).empty()) {
    std::printf("SKIPPED: the no-op CUDA driver is built with the benchmarks (KILN_BUILD_BENCH=ON)\n");
    std::exit(KILN_TEST_SKIP_CODE);
  }
  if (::access(KILN_NULL_DRIVER_PATH, R_OK) != 0) {  // a test binary carried away from its build
    std::printf("SKIPPED: the build's no-op CUDA driver is not at %s\n", KILN_NULL_DRIVER_PATH);
    std::exit(KILN_TEST_SKIP_CODE);
  }
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    FILE* out = ::fdopen(fds[1], "w");
    Scenario(out);
    std::fclose(out);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string report;
  char buffer[256];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof(buffer))) > 0;) report.append(buffer, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  INFO(report);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(report.empty());
}

}  // namespace
