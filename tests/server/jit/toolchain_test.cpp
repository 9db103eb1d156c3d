#include "server/jit/toolchain.h"

#include <catch2/catch.hpp>
#include <regex>

#include "tests/support/temp_dir.h"

namespace kiln::server {
namespace {

TEST_CASE("DetectToolchain reads NVRTC, nvJitLink, cuda.h and Kiln versions", "[toolchain]") {
  Toolchain toolchain = DetectToolchain(KILN_TEST_CUDA_INCLUDE_DIR);
  CHECK(std::regex_match(toolchain.nvrtc, std::regex("[0-9]+\\.[0-9]+")));
  CHECK(std::regex_match(toolchain.nvjitlink, std::regex("[0-9]+\\.[0-9]+")));
  CHECK(std::regex_match(toolchain.cuda_headers, std::regex("[0-9]{4,6}")));
  // cuda.h's CUDA_VERSION is major*1000 + minor*10, and NVRTC comes from the same toolkit.
  const int cuda_version = std::stoi(toolchain.cuda_headers);
  CHECK(toolchain.nvrtc == std::to_string(cuda_version / 1000) + "." + std::to_string(cuda_version % 1000 / 10));
  std::string version = testing::ReadFile(std::string(KILN_TEST_SOURCE_DIR) + "/VERSION");
  version.erase(version.find_last_not_of(" \n\r\t") + 1);
  CHECK(toolchain.kiln == version);
  CHECK(std::string(KilnVersion()) == version);
}

TEST_CASE("DetectToolchain leaves the headers version empty without cuda.h", "[toolchain]") {
  testing::TempDir dir("kiln-toolchain");
  CHECK(DetectToolchain(dir.path()).cuda_headers.empty());
  testing::WriteFile(dir / "cuda.h", "// not a real one\n#define CUDA_VERSION_X 1\n#define CUDA_VERSION 12040\n");
  CHECK(DetectToolchain(dir.path()).cuda_headers == "12040");
}

}  // namespace
}  // namespace kiln::server
