#include "server/jit/kernel_attributes.h"

#include <catch2/catch.hpp>

namespace kiln::server {
namespace {

const kernels::GpuArch kSm90a{90, 'a'};
const kernels::GpuArch kSm80{80, '\0'};

// As NVRTC 13.0 prints it (sm_90a: no cmem line).
constexpr const char* kNvrtcLog = R"(ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k3' for 'sm_90a'
ptxas info    : Function properties for k3
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 0 barriers
ptxas info    : Compile time = 24.737 ms
ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Function properties for k
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 14 registers, used 1 barriers, 256 bytes smem
ptxas info    : Compile time = 5.070 ms
)";

// As nvcc prints it for sm_80, with a device function of -rdc code first.
constexpr const char* kNvccLog = R"(ptxas info    : 0 bytes gmem, 400 bytes cmem[3]
ptxas info    : Function properties for helper$3
    136 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'k' for 'sm_80'
ptxas info    : Function properties for k
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 24 registers, used 1 barriers, 128 bytes smem, 360 bytes cmem[0]
ptxas info    : Compile time = 1.378 ms
ptxas info    : Function properties for helper
    136 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
)";

TEST_CASE("ParsePtxasInfo reads registers, shared memory, stack and spills per entry", "[attributes]") {
  auto kernels = ParsePtxasInfo(kNvrtcLog, {"k", "k3"}, kSm90a);
  REQUIRE(kernels.size() == 2);
  CHECK(kernels[0].name == "k");  // in the order of the entries asked for
  CHECK(kernels[0].registers == 14);
  CHECK(kernels[0].static_shared_bytes == 256);
  CHECK(kernels[0].stack_bytes == 0);
  CHECK(kernels[0].max_threads_per_block == 1024);
  CHECK(kernels[0].max_dynamic_shared_bytes == 227 * 1024 - 256);
  CHECK(kernels[0].const_bytes == 0);  // not reported for sm_90a (the compiler reads the cubin)
  CHECK(kernels[1].name == "k3");
  CHECK(kernels[1].registers == 255);
  CHECK(kernels[1].stack_bytes == 16);
  CHECK(kernels[1].spill_store_bytes == 8);
  CHECK(kernels[1].spill_load_bytes == 12);
  CHECK(kernels[1].static_shared_bytes == 0);
  CHECK(kernels[1].max_threads_per_block == 256);
}

TEST_CASE("ParsePtxasInfo attributes lines to the right function and reads cmem[0]", "[attributes]") {
  auto kernels = ParsePtxasInfo(kNvccLog, {"k"}, kSm80);
  REQUIRE(kernels.size() == 1);
  CHECK(kernels[0].registers == 24);
  CHECK(kernels[0].static_shared_bytes == 128);
  CHECK(kernels[0].const_bytes == 360);
  CHECK(kernels[0].stack_bytes == 0);  // helper's frame is not k's
  CHECK(kernels[0].max_dynamic_shared_bytes == 163 * 1024 - 128);
}

TEST_CASE("ParsePtxasInfo takes the cumulative stack of code with calls", "[attributes]") {
  constexpr const char* log = R"(ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Function properties for k
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 136 bytes cumulative stack size, 128 bytes smem
)";
  auto kernels = ParsePtxasInfo(log, {"k"}, kSm90a);
  REQUIRE(kernels.size() == 1);
  CHECK(kernels[0].stack_bytes == 136);
  CHECK(kernels[0].static_shared_bytes == 128);
}

TEST_CASE("ParsePtxasInfo leaves out entries the log does not report", "[attributes]") {
  CHECK(ParsePtxasInfo(kNvrtcLog, {"missing"}, kSm90a).empty());
  CHECK(ParsePtxasInfo("", {"k"}, kSm90a).empty());
  auto kernels = ParsePtxasInfo(kNvrtcLog, {"missing", "k"}, kSm90a);
  REQUIRE(kernels.size() == 1);
  CHECK(kernels[0].name == "k");
  CHECK(PtxasEntryFunctions(kNvrtcLog) == std::vector<std::string>{"k3", "k"});
}

TEST_CASE("MaxThreadsForRegisters follows the occupancy calculator's register rules", "[attributes]") {
  CHECK(MaxThreadsForRegisters(0) == 1024);
  CHECK(MaxThreadsForRegisters(16) == 1024);
  CHECK(MaxThreadsForRegisters(64) == 1024);
  CHECK(MaxThreadsForRegisters(65) == 896);  // 65*32 → 2304 per warp: 7 warps per quarter
  CHECK(MaxThreadsForRegisters(72) == 896);
  CHECK(MaxThreadsForRegisters(80) == 768);   // 2560 per warp: 6
  CHECK(MaxThreadsForRegisters(96) == 640);   // 3072: 5
  CHECK(MaxThreadsForRegisters(128) == 512);  // 4096: 4
  CHECK(MaxThreadsForRegisters(168) == 384);  // 5376: 3
  CHECK(MaxThreadsForRegisters(255) == 256);  // 8192: 2
}

TEST_CASE("MaxOptInSharedBytes knows each arch's opt-in limit", "[attributes]") {
  CHECK(MaxOptInSharedBytes(80) == 166912);
  CHECK(MaxOptInSharedBytes(86) == 101376);
  CHECK(MaxOptInSharedBytes(89) == 101376);
  CHECK(MaxOptInSharedBytes(90) == 232448);
  CHECK(MaxOptInSharedBytes(100) == 232448);
  CHECK(MaxOptInSharedBytes(120) == 101376);
  CHECK(MaxOptInSharedBytes(75) == 65536);
  CHECK(MaxOptInSharedBytes(999) == 49152);
}

}  // namespace
}  // namespace kiln::server
