// The module cache's identities of LoadOp's and LoadSource's requests (ModuleCache::OpIdentity,
// SourceIdentity): built from the API's structs without protobuf, they must still tell apart
// every two requests that could get different cubins — a change in any field, a byte moved
// from one field to its neighbour, another arch — and give equal requests one identity.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "client/core/loader/module_cache.h"

namespace {

using kiln::client::ModuleCache;

kiln::SourceRequest Axpy() {
  return {"axpy",
          "extern \"C\" __global__ void axpy(float* y) { y[0] += 1; }",
          {"axpy", "axpy_tail"},
          {"-DN=4", "-DM=8"},
          {{"helper.cu", "__device__ int helper() { return 1; }"}}};
}

TEST_CASE("a source's identity changes with every field and every arch, and equal sources share one",
          "[client][module_cache]") {
  const std::string base = ModuleCache::SourceIdentity(Axpy(), "sm_90a");
  CHECK(ModuleCache::SourceIdentity(Axpy(), "sm_90a") == base);

  std::set<std::string> seen{base};
  auto differs = [&](const kiln::SourceRequest& s, const std::string& arch = "sm_90a") {
    const std::string id = ModuleCache::SourceIdentity(s, arch);
    CHECK(seen.insert(id).second);  // unlike the base and every variant before it
  };
  differs(Axpy(), "sm_90");
  kiln::SourceRequest s = Axpy();
  s.name = "axpy2";
  differs(s);
  s = Axpy();
  s.code += " ";
  differs(s);
  s = Axpy();
  s.entries.pop_back();
  differs(s);
  s = Axpy();
  std::swap(s.entries[0], s.entries[1]);  // the order of entries is the order of the module's
  differs(s);
  s = Axpy();
  s.options[1] = "-DM=9";
  differs(s);
  s = Axpy();
  s.options.clear();
  differs(s);
  s = Axpy();
  s.extra_units[0].name = "helper2.cu";
  differs(s);
  s = Axpy();
  s.extra_units[0].code += "\n";
  differs(s);
  s = Axpy();
  s.extra_units.clear();
  differs(s);

  // A byte moved across a field boundary: the lengths keep these apart.
  kiln::SourceRequest a = Axpy(), b = Axpy();
  a.options = {"-DA", "B"};
  b.options = {"-DAB"};
  CHECK(ModuleCache::SourceIdentity(a, "sm_90a") != ModuleCache::SourceIdentity(b, "sm_90a"));
  a = Axpy();
  b = Axpy();
  a.entries = {"ab", "c"};
  b.entries = {"a", "bc"};
  CHECK(ModuleCache::SourceIdentity(a, "sm_90a") != ModuleCache::SourceIdentity(b, "sm_90a"));
  a = Axpy();
  b = Axpy();
  a.name = "k1";
  a.code = "2x";
  b.name = "k12";
  b.code = "x";
  CHECK(ModuleCache::SourceIdentity(a, "sm_90a") != ModuleCache::SourceIdentity(b, "sm_90a"));
}

TEST_CASE("an op's identity changes with its name, params and arch, and never equals a source's",
          "[client][module_cache]") {
  const kiln::OpRequest op{"rmsnorm", {{"dtype", "bf16"}, {"hidden", "4096"}}};
  const std::string base = ModuleCache::OpIdentity(op, "sm_90");
  CHECK(ModuleCache::OpIdentity(op, "sm_90") == base);
  CHECK(ModuleCache::OpIdentity(op, "sm_90a") != base);
  CHECK(ModuleCache::OpIdentity({"rmsnorm", {{"dtype", "fp16"}, {"hidden", "4096"}}}, "sm_90") != base);
  CHECK(ModuleCache::OpIdentity({"rmsnorm", {{"dtype", "bf16"}}}, "sm_90") != base);
  CHECK(ModuleCache::OpIdentity({"layernorm", op.params}, "sm_90") != base);
  const kiln::SourceRequest named_like_op{"rmsnorm", "", {}, {}, {}};
  CHECK(ModuleCache::SourceIdentity(named_like_op, "sm_90") != base);
  // Separators inside a value do not make it another request's params.
  CHECK(ModuleCache::OpIdentity({"rmsnorm", {{"dtype", "bf16\nhidden=4096"}}}, "sm_90") != base);
  CHECK(ModuleCache::OpIdentity({"rmsnorm", {{"dtype", "bf16"}, {"hidden", "4096"}}}, "sm_90") == base);
  CHECK(ModuleCache::OpIdentity({"rmsnorm", {{"dtypebf16", ""}, {"hidden", "4096"}}}, "sm_90") != base);
}

}  // namespace
