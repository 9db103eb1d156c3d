#include "server/jit/cubin_info.h"

#include <catch2/catch.hpp>

#include "server/jit/nvrtc_compiler.h"

namespace kiln::server {
namespace {

std::string CompileRaw(const std::string& code, const std::vector<std::string>& entries, const char* arch) {
  kernels::JitSpec spec;
  spec.op = "source";
  spec.uri = "src_cubin_info";
  spec.units.push_back({"k.cu", code, kernels::SourceFile::Origin::kRequest, ""});
  spec.entries = entries;
  NvrtcCompiler compiler(CompilerOptions{KILN_TEST_CUDA_INCLUDE_DIR, ""});
  auto parsed = kernels::GpuArch::Parse(arch);
  REQUIRE(parsed.ok());
  auto result = compiler.Compile(CompileRequest{&spec, nullptr, *parsed, {}, false, ""});
  INFO(result.status().ToString());
  REQUIRE(result.ok());
  return result->cubin;
}

constexpr const char* kKernels = R"(
__constant__ float table[100];
extern "C" __global__ void __launch_bounds__(256) bounded(float* o) { o[threadIdx.x] = table[threadIdx.x % 100]; }
extern "C" __global__ void __launch_bounds__(96, 2) bounded96(float* o) { o[threadIdx.x] = 1.0f; }
extern "C" __global__ void unbounded(float* o, long long n) { o[threadIdx.x] = float(n); }
)";

TEST_CASE("ReadCubinKernelInfo finds launch bounds and constant bank sizes", "[cubin]") {
  for (const char* arch : {"sm_80", "sm_90a", "sm_120"}) {
    INFO(arch);
    auto info = ReadCubinKernelInfo(CompileRaw(kKernels, {"bounded", "bounded96", "unbounded"}, arch));
    REQUIRE(info.count("bounded") == 1);
    REQUIRE(info.count("bounded96") == 1);
    REQUIRE(info.count("unbounded") == 1);
    CHECK(info["bounded"].max_threads == 256);
    CHECK(info["bounded96"].max_threads == 96);
    CHECK(info["unbounded"].max_threads == 0);
    // Bank 0 holds at least the parameters (8 and 16 bytes) past the driver's fixed part.
    CHECK(info["bounded"].const0_bytes > 8);
    CHECK(info["unbounded"].const0_bytes >= info["bounded"].const0_bytes + 8);
  }
}

TEST_CASE("the cubin's kernels, registers and stack agree with ptxas' report", "[cubin]") {
  const std::string code = std::string(kKernels) + R"(
__device__ __noinline__ float helper(float x) { return x * 2.0f; }
extern "C" __global__ void heavy(double* x, int n) {
  double a = x[0], b = x[1], c = x[2], d = x[3];
  for (int i = 0; i < n; ++i) { a = a * b + c; b = b * c + d; c = c * d + a; d = d * a + b; }
  x[threadIdx.x] = a + b + c + d + helper(float(n));
}
)";
  const std::vector<std::string> entries = {"bounded", "bounded96", "unbounded", "heavy"};
  for (const char* arch : {"sm_80", "sm_90a"}) {
    INFO(arch);
    kernels::JitSpec spec;
    spec.op = "source";
    spec.uri = "src_cubin_regs";
    spec.units.push_back({"k.cu", code, kernels::SourceFile::Origin::kRequest, ""});
    spec.entries = entries;
    NvrtcCompiler compiler(CompilerOptions{KILN_TEST_CUDA_INCLUDE_DIR, ""});
    auto parsed = kernels::GpuArch::Parse(arch);
    REQUIRE(parsed.ok());
    auto result = compiler.Compile(CompileRequest{&spec, nullptr, *parsed, {}, /*verbose_log=*/true, ""});
    REQUIRE(result.ok());
    auto info = ReadCubinKernelInfo(result->cubin);
    auto reported = ParsePtxasInfo(result->log, entries, *parsed);
    REQUIRE(reported.size() == entries.size());
    for (const auto& k : reported) {
      INFO(k.name);
      CHECK(info[k.name].is_kernel);
      CHECK(info[k.name].registers == k.registers);
      CHECK(k.registers > 0);
    }
    CHECK_FALSE(info["helper"].is_kernel);  // a device function is not an entry
  }
}

TEST_CASE("ReadCubinKernelInfo tolerates what is not a cubin", "[cubin]") {
  CHECK(ReadCubinKernelInfo("").empty());
  CHECK(ReadCubinKernelInfo("not an ELF file at all, but long enough to have a header of sixty-four").empty());
  std::string truncated = CompileRaw(kKernels, {"bounded"}, "sm_90a");
  truncated.resize(200);
  CHECK_NOTHROW(ReadCubinKernelInfo(truncated));
  std::string garbled = CompileRaw(kKernels, {"bounded"}, "sm_90a");
  for (size_t i = 64; i < garbled.size(); i += 7) garbled[i] = static_cast<char>(garbled[i] ^ 0x5a);
  CHECK_NOTHROW(ReadCubinKernelInfo(garbled));
}

}  // namespace
}  // namespace kiln::server
