// KeyInputsFor: what enters a kernel's cache key and in which order; what stays out; and the
// key of one fixed request, pinned, because changing it makes every warm cache miss once.
#include "server/engine/key_inputs.h"

#include <catch2/catch.hpp>

#include <functional>
#include <set>

#include "cache/cache_key.h"
#include "cache/sha256.h"

using namespace kiln;
using kiln::server::KeyInputsFor;
using kiln::server::Toolchain;

namespace {

using Origin = kernels::SourceFile::Origin;

struct Request {
  kernels::JitSpec spec;
  kernels::TreeSnapshot tree;
  std::vector<std::string> key_options = {"-std=c++17", "-DKILN_HIDDEN=4096", "-lineinfo"};
  kernels::GpuArch arch{90, 'a'};
  Toolchain toolchain{"13.0", "13.0", "13000", "0.1.0"};

  cache::KeyInputs Inputs() const { return KeyInputsFor(spec, tree, key_options, arch, toolchain); }
  std::string Key() const { return cache::ComputeCacheKey(Inputs()); }
};

Request Rmsnorm() {
  Request r;
  r.spec.op = "rmsnorm";
  r.spec.uri = "rmsnorm_bf16_h4096";
  r.spec.params = {{"dtype", "bf16"}, {"hidden", "4096"}};
  r.spec.headers.push_back({"kiln_config.cuh", "#define KILN_RMSNORM_HIDDEN 4096\n", Origin::kGenerated, ""});
  r.spec.units.push_back({"rmsnorm.cu", "#include \"kiln_config.cuh\"\n__global__ void rmsnorm() {}\n",
                          Origin::kKernels, "src/norm/rmsnorm.cu"});
  r.spec.units.push_back({"epilogue.cu", "__device__ void epilogue() {}\n", Origin::kGenerated, ""});
  r.spec.link_options = {"-O3"};
  r.spec.entries = {"rmsnorm"};
  r.spec.arch_families = {kernels::FamilyAtLeast(80)};
  r.spec.launch = {{.entry = "rmsnorm", .block = 256}};
  r.spec.compile_memory_mb = 64;
  r.tree.root = "/opt/kiln/share/kiln/kernels";
  r.tree.digest = cache::Sha256Hex("the kernels tree");
  r.tree.generation = 3;
  return r;
}

}  // namespace

TEST_CASE("the key inputs are the spec, its source hashes, the tree digest, options, arch and toolchain",
          "[key_inputs]") {
  const Request r = Rmsnorm();
  const cache::KeyInputs in = r.Inputs();
  CHECK(in.op == "rmsnorm");
  CHECK(in.uri == "rmsnorm_bf16_h4096");
  CHECK(in.params == r.spec.params);
  // Headers first, then units, each in spec order, hashed over their exact bytes.
  REQUIRE(in.sources.size() == 3);
  CHECK(in.sources[0].name == "kiln_config.cuh");
  CHECK(in.sources[0].sha256 == cache::Sha256Hex(r.spec.headers[0].content));
  CHECK(in.sources[1].name == "rmsnorm.cu");
  CHECK(in.sources[1].sha256 == cache::Sha256Hex(r.spec.units[0].content));
  CHECK(in.sources[2].name == "epilogue.cu");
  CHECK(in.sources[2].sha256 == cache::Sha256Hex(r.spec.units[1].content));
  CHECK(in.kernels_tree_digest == r.tree.digest);
  CHECK(in.options == r.key_options);
  CHECK(in.link_options == r.spec.link_options);
  CHECK(in.entries == r.spec.entries);
  CHECK(in.arch == "sm_90a");
  CHECK(in.nvrtc_version == "13.0");
  CHECK(in.nvjitlink_version == "13.0");
  CHECK(in.cuda_headers_version == "13000");
  CHECK(in.kiln_version == "0.1.0");
  CHECK(in.format_version == cache::kCacheFormatVersion);
  // Portable: the tree's absolute root stays out, so a moved warm cache stays warm.
  CHECK(cache::ValidateKeyInputs(in).ok());
  CHECK(cache::CanonicalEncoding(in).find(r.tree.root) == std::string::npos);
}

TEST_CASE("what cannot change the cubin stays out of the key", "[key_inputs]") {
  const std::string key = Rmsnorm().Key();
  std::vector<std::function<void(Request&)>> changes = {
      [](Request& r) { r.tree.root = "/home/someone/kiln/kernels"; },
      [](Request& r) { r.tree.generation = 4; },
      [](Request& r) { r.spec.launch[0].block = 512; },
      [](Request& r) { r.spec.compile_memory_mb = 4096; },
      [](Request& r) { r.spec.units[0].origin = Origin::kRequest; },
      [](Request& r) { r.spec.units[0].tree_path = "src/elsewhere/rmsnorm.cu"; },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    Request r = Rmsnorm();
    changes[i](r);
    INFO("change " << i);
    CHECK(r.Key() == key);
  }
}

TEST_CASE("every input that can change the cubin changes the key", "[key_inputs]") {
  std::vector<std::function<void(Request&)>> changes = {
      [](Request& r) { r.spec.op = "fused_add_rmsnorm"; },
      [](Request& r) { r.spec.uri = "rmsnorm_bf16_h8192"; },
      [](Request& r) { r.spec.params["hidden"] = "8192"; },
      [](Request& r) { r.spec.headers[0].content += " "; },
      [](Request& r) { r.spec.units[1].content += " "; },
      [](Request& r) { r.spec.units[1].name = "epilogue2.cu"; },
      [](Request& r) { std::swap(r.spec.units[0], r.spec.units[1]); },
      [](Request& r) { r.tree.digest = cache::Sha256Hex("an edited kernels tree"); },
      [](Request& r) { r.key_options.pop_back(); },
      [](Request& r) { r.spec.link_options.clear(); },
      [](Request& r) { r.spec.entries.push_back("rmsnorm_tail"); },
      [](Request& r) {
        r.arch = kernels::GpuArch{90, '\0'};
      },
      [](Request& r) { r.toolchain.nvrtc = "13.1"; },
      [](Request& r) { r.toolchain.nvjitlink = "13.1"; },
      [](Request& r) { r.toolchain.cuda_headers = "13010"; },
      [](Request& r) { r.toolchain.kiln = "0.2.0"; },
  };
  std::set<std::string> keys = {Rmsnorm().Key()};
  for (size_t i = 0; i < changes.size(); ++i) {
    Request r = Rmsnorm();
    changes[i](r);
    INFO("change " << i);
    CHECK(keys.insert(r.Key()).second);
  }
}

TEST_CASE("the key of a fixed request is pinned: a change here makes every warm cache miss once", "[key_inputs]") {
  // First computed with the engine's inline assembly this function replaced (the move changed
  // no byte); then cache format 2 (typed launch hints in the index) changed the format field.
  CHECK(Rmsnorm().Key() == "35e5ac80a8b4c1b2bd3870efbf42c25abff5ccc83163e32d8be0e04d561fb686");
}
