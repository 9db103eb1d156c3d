// The moe_unpermute generator (kernels/ops/moe/moe_unpermute_generator.cpp): its registry entry
// and param, readable URIs (one per dtype), the config it renders, the launch hint the contract
// states, the contract's grid rule, and every bad or missing param refused by name.
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "kernels/jit/op_generator.h"
#include "kiln/moe/moe_contract.h"
#include "tests/kernels/generator_fixture.h"

namespace kiln::kernels {
namespace {

using namespace generator_test;

TEST_CASE("the builtin registry serves moe_unpermute with the param dtype", "[moe]") {
  const OpGenerator* op = OpRegistry::Builtin().Find("moe_unpermute");
  REQUIRE(op != nullptr);
  CHECK(op->family() == "moe");
  CHECK(!op->description().empty());
  REQUIRE(op->params().size() == 1);
  CHECK(op->params()[0].name == "dtype");
  CHECK(op->params()[0].required());
  CHECK(op->params()[0].choices == std::vector<std::string>{"fp16", "bf16"});
}

TEST_CASE("moe_unpermute URIs are readable and one per dtype", "[moe]") {
  const JitSpec spec = MustGenerate("moe_unpermute", {{"dtype", "bf16"}});
  CHECK(spec.uri == "moe_unpermute_bf16");
  CHECK(spec.params == Params{{"dtype", "bf16"}});
  REQUIRE(spec.headers.size() == 1);
  CHECK(Contains(spec.headers[0].content, "#define KILN_MOE_UNPERMUTE_T __nv_bfloat16"));
  CHECK(spec.entries == std::vector<std::string>{"kiln_moe_unpermute"});
  REQUIRE(spec.launch.size() == 1);
  CHECK(spec.launch[0].entry == moe::kMoeUnpermuteEntry);
  CHECK(spec.launch[0].block == moe::kUnpermuteBlock);
  CHECK(spec.launch[0].items_per_block == moe::kUnpermuteBlock);  // units of a row per block
  CHECK(spec.launch[0].dynamic_smem == 0);

  const JitSpec fp16 = MustGenerate("moe_unpermute", {{"dtype", "fp16"}});
  CHECK(fp16.uri == "moe_unpermute_fp16");
  CHECK(Contains(fp16.headers[0].content, "#define KILN_MOE_UNPERMUTE_T __half"));
}

TEST_CASE("moe_unpermute refuses a bad, unknown or missing param by name", "[moe]") {
  const Params good = {{"dtype", "fp16"}};
  auto refused = [&](Params params, const std::string& key, const char* value, std::string_view part) {
    if (value == nullptr) params.erase(key);
    else params[key] = value;
    const auto spec = Generate("moe_unpermute", params);
    INFO(key << " = " << (value ? value : "(missing)") << ": " << spec.status().ToString());
    REQUIRE(!spec.ok());
    CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(spec.status().message(), part));
  };
  refused(good, "dtype", "fp32", "dtype");
  refused(good, "dtype", "int32", "dtype");
  refused(good, "dtype", nullptr, "dtype");
  refused(good, "vec", "8", "vec");
  refused(good, "hidden", "4096", "hidden");
}

TEST_CASE("moe_unpermute's grid splits a row's units evenly over whole warps", "[moe]") {
  // Qwen3-30B-A3B, bf16 in 16-byte units: 256 units, one full block.
  STATIC_REQUIRE(moe::MoeUnpermuteBlocksPerRow(256) == 1);
  STATIC_REQUIRE(moe::MoeUnpermuteThreads(256) == 256);
  // Mixtral: 512 units, two full blocks.
  STATIC_REQUIRE(moe::MoeUnpermuteBlocksPerRow(512) == 2);
  STATIC_REQUIRE(moe::MoeUnpermuteThreads(512) == 256);
  // DeepSeek-V3: 896 units, four blocks of 224 (not three of 256 and one of 128).
  STATIC_REQUIRE(moe::MoeUnpermuteBlocksPerRow(896) == 4);
  STATIC_REQUIRE(moe::MoeUnpermuteThreads(896) == 224);
  // Small rows: one warp at least (the first top_k <= 16 threads load the indices).
  STATIC_REQUIRE(moe::MoeUnpermuteThreads(1) == 32);
  STATIC_REQUIRE(moe::MoeUnpermuteThreads(33) == 64);
  // 257 units: two blocks of 160 threads (129 units each at most).
  STATIC_REQUIRE(moe::MoeUnpermuteBlocksPerRow(257) == 2);
  STATIC_REQUIRE(moe::MoeUnpermuteThreads(257) == 160);
  for (long long units = 1; units <= 5000; ++units) {
    const long long blocks = moe::MoeUnpermuteBlocksPerRow(units);
    const int threads = moe::MoeUnpermuteThreads(units);
    INFO("units " << units);
    CHECK(threads % 32 == 0);
    CHECK(threads <= moe::kUnpermuteBlock);
    CHECK(blocks * threads >= units);       // every unit has a thread
    CHECK((blocks - 1) * threads < units);  // and no block is idle
  }
}

}  // namespace
}  // namespace kiln::kernels
