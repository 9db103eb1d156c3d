#include "kernels/jit/arch.h"

#include <nvrtc.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>

namespace kiln::kernels {
namespace {

TEST_CASE("SupportedComputeCapabilities lists what NVRTC can build, sorted", "[arch]") {
  const std::vector<int>& archs = SupportedComputeCapabilities();
  REQUIRE(!archs.empty());
  CHECK(std::is_sorted(archs.begin(), archs.end()));
  CHECK(std::count(archs.begin(), archs.end(), 80) == 1);
  CHECK(std::count(archs.begin(), archs.end(), 90) == 1);
}

TEST_CASE("GpuArch::Parse reads sm_<cc>[a|f] and str() gives it back", "[arch]") {
  for (const char* text :
       {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_100f", "sm_120", "sm_120a", "sm_120f"}) {
    INFO(text);
    auto arch = GpuArch::Parse(text);
    REQUIRE(arch.ok());
    CHECK(arch->str() == text);
  }
  auto arch = GpuArch::Parse("sm_90a");
  REQUIRE(arch.ok());
  CHECK(arch->cc == 90);
  CHECK(arch->variant == 'a');
  CHECK(GpuArch::Parse("sm_100f")->cc == 100);
  CHECK(GpuArch::Parse("sm_80")->variant == '\0');
}

TEST_CASE("GpuArch::Parse refuses what NVRTC cannot target, listing what it can", "[arch]") {
  struct Case {
    const char* text;
    const char* reason;
  };
  for (Case c :
       {Case{"compute_90a", "virtual"}, Case{"sm90", "not of the form"}, Case{"sm_", "not of the form"},
        Case{"sm_9x", "not of the form"}, Case{"90", "not of the form"}, Case{"sm_090", "not of the form"},
        Case{"SM_90", "not of the form"}, Case{"sm_90 ", "not of the form"}, Case{"sm_80a", "no arch-specific"},
        Case{"sm_90f", "no family-specific"}, Case{"sm_95", "not supported"}, Case{"sm_1000", "not of the form"},
        Case{"sm_20", "not supported"}, Case{"", "not of the form"}}) {
    INFO(c.text);
    auto arch = GpuArch::Parse(c.text);
    REQUIRE(!arch.ok());
    CHECK(arch.status().code() == absl::StatusCode::kInvalidArgument);
    std::string message(arch.status().message());
    CHECK(message.find(std::string("'") + c.text + "'") != std::string::npos);
    CHECK(message.find(c.reason) != std::string::npos);
    CHECK(message.find("sm_80, ") != std::string::npos);  // the supported list
  }
  CHECK(std::string(GpuArch::Parse("compute_90a").status().message()).find("sm_90a") != std::string::npos);
}

// Every target Parse accepts is one NVRTC really builds.
TEST_CASE("every arch Parse accepts compiles with NVRTC", "[arch][nvrtc]") {
  const char* source = "extern \"C\" __global__ void k(int* p) { p[threadIdx.x] = 1; }";
  for (int cc : SupportedComputeCapabilities()) {
    for (char variant : {'\0', 'a', 'f'}) {
      std::string text = "sm_" + std::to_string(cc);
      if (variant != '\0') text.push_back(variant);
      auto arch = GpuArch::Parse(text);
      if (!arch.ok()) continue;
      INFO(text);
      nvrtcProgram program;
      REQUIRE(nvrtcCreateProgram(&program, source, "k.cu", 0, nullptr, nullptr) == NVRTC_SUCCESS);
      std::string option = "--gpu-architecture=" + arch->str();
      const char* options[] = {option.c_str()};
      CHECK(nvrtcCompileProgram(program, 1, options) == NVRTC_SUCCESS);
      size_t cubin_size = 0;
      CHECK(nvrtcGetCUBINSize(program, &cubin_size) == NVRTC_SUCCESS);
      CHECK(cubin_size > 0);
      nvrtcDestroyProgram(&program);
    }
  }
}

TEST_CASE("families have readable names", "[arch]") {
  CHECK(FamilyAtLeast(80).name == "sm_80+");
  CHECK(FamilyAtLeast(80).min_cc == 80);
  CHECK(FamilyAtLeast(80).max_cc == 0);
  CHECK(FamilyArchSpecific(90).name == "sm_90a");
  CHECK(FamilyArchSpecific(90).variant == 'a');
  CHECK(DescribeFamilies({FamilyAtLeast(80), FamilyArchSpecific(90)}) == "sm_80+, sm_90a");
}

GpuArch Arch(const char* text) {
  auto arch = GpuArch::Parse(text);
  REQUIRE(arch.ok());
  return *arch;
}

TEST_CASE("ResolveArch: a portable family compiles the requested target unchanged", "[arch]") {
  const std::vector<ArchFamily> families = {FamilyAtLeast(80)};
  for (const char* text : {"sm_80", "sm_86", "sm_90", "sm_90a", "sm_100a", "sm_120"}) {
    auto resolved = ResolveArch(Arch(text), families, "rmsnorm_bf16_h4096");
    REQUIRE(resolved.ok());
    CHECK(resolved->str() == text);
  }
}

TEST_CASE("ResolveArch: an arch-specific family turns sm_90 into sm_90a", "[arch]") {
  const std::vector<ArchFamily> families = {FamilyArchSpecific(90)};
  CHECK(ResolveArch(Arch("sm_90"), families, "gemm")->str() == "sm_90a");
  CHECK(ResolveArch(Arch("sm_90a"), families, "gemm")->str() == "sm_90a");
  // The first matching family wins.
  const std::vector<ArchFamily> both = {FamilyArchSpecific(90), FamilyAtLeast(80)};
  CHECK(ResolveArch(Arch("sm_90"), both, "gemm")->str() == "sm_90a");
  CHECK(ResolveArch(Arch("sm_86"), both, "gemm")->str() == "sm_86");
  CHECK(ResolveArch(Arch("sm_100"), both, "gemm")->str() == "sm_100");
}

TEST_CASE("ResolveArch: no matching family is FAILED_PRECONDITION naming both sides", "[arch]") {
  auto below = ResolveArch(Arch("sm_75"), {FamilyAtLeast(80)}, "rmsnorm_bf16_h4096");
  REQUIRE(!below.ok());
  CHECK(below.status().code() == absl::StatusCode::kFailedPrecondition);
  std::string message(below.status().message());
  CHECK(message.find("sm_75") != std::string::npos);
  CHECK(message.find("sm_80+") != std::string::npos);
  CHECK(message.find("rmsnorm_bf16_h4096") != std::string::npos);

  auto other = ResolveArch(Arch("sm_100a"), {FamilyArchSpecific(90)}, "wgmma_gemm");
  REQUIRE(!other.ok());
  CHECK(other.status().code() == absl::StatusCode::kFailedPrecondition);
  message = std::string(other.status().message());
  CHECK(message.find("sm_100a") != std::string::npos);
  CHECK(message.find("sm_90a") != std::string::npos);
  CHECK(message.find("wgmma_gemm") != std::string::npos);

  auto none = ResolveArch(Arch("sm_90"), {}, "empty");
  REQUIRE(!none.ok());
  CHECK(none.status().code() == absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kiln::kernels
