// Tests of cache/cache_key.h: every input changes the key, equal inputs give equal keys, and
// the canonical encoding has no concatenation ambiguity.
#include "cache/cache_key.h"

#include <catch2/catch.hpp>
#include <functional>
#include <set>

#include "cache/sha256.h"

namespace kiln::cache {
namespace {

KeyInputs BaseInputs() {
  KeyInputs in;
  in.op = "rmsnorm";
  in.uri = "rmsnorm_bf16_h4096";
  in.params = {{"dtype", "bf16"}, {"hidden", "4096"}};
  in.sources = {{"kiln_config.cuh", Sha256Hex("config")}, {"rmsnorm.cu", Sha256Hex("unit")}};
  in.kernels_tree_digest = Sha256Hex("tree");
  in.options = {"-std=c++17", "-DKILN_HIDDEN=4096"};
  in.link_options = {"-lto"};
  in.entries = {"rmsnorm_kernel"};
  in.arch = "sm_90a";
  in.nvrtc_version = "13.0";
  in.nvjitlink_version = "13.0";
  in.cuda_headers_version = "13000";
  in.kiln_version = "0.1.0";
  return in;
}

TEST_CASE("equal inputs give equal keys, map insertion order does not matter", "[cache_key]") {
  KeyInputs a = BaseInputs();
  KeyInputs b = BaseInputs();
  b.params.clear();
  b.params["hidden"] = "4096";  // inserted in the other order
  b.params["dtype"] = "bf16";
  CHECK(ComputeCacheKey(a) == ComputeCacheKey(BaseInputs()));
  CHECK(ComputeCacheKey(a) == ComputeCacheKey(b));
  CHECK(CanonicalEncoding(a) == CanonicalEncoding(b));
  CHECK(IsSha256Hex(ComputeCacheKey(a)));
  CHECK(ComputeCacheKey(a) == Sha256Hex(CanonicalEncoding(a)));
}

TEST_CASE("every key input changes the key", "[cache_key]") {
  const std::vector<std::pair<std::string, std::function<void(KeyInputs&)>>> changes = {
      {"op", [](KeyInputs& k) { k.op = "layernorm"; }},
      {"uri", [](KeyInputs& k) { k.uri = "rmsnorm_bf16_h8192"; }},
      {"param value", [](KeyInputs& k) { k.params["hidden"] = "8192"; }},
      {"param added", [](KeyInputs& k) { k.params["eps"] = "1e-6"; }},
      {"param removed", [](KeyInputs& k) { k.params.erase("dtype"); }},
      {"source hash", [](KeyInputs& k) { k.sources[1].sha256 = Sha256Hex("unit v2"); }},
      {"source name", [](KeyInputs& k) { k.sources[1].name = "rmsnorm2.cu"; }},
      {"source order", [](KeyInputs& k) { std::swap(k.sources[0], k.sources[1]); }},
      {"source added",
       [](KeyInputs& k) {
         k.sources.push_back({"extra.cuh", Sha256Hex("e")});
       }},
      {"kernels tree", [](KeyInputs& k) { k.kernels_tree_digest = Sha256Hex("tree v2"); }},
      {"option", [](KeyInputs& k) { k.options.push_back("-lineinfo"); }},
      {"option order", [](KeyInputs& k) { std::swap(k.options[0], k.options[1]); }},
      {"link option", [](KeyInputs& k) { k.link_options.clear(); }},
      {"entry", [](KeyInputs& k) { k.entries.push_back("other_kernel"); }},
      {"arch", [](KeyInputs& k) { k.arch = "sm_100a"; }},
      {"nvrtc", [](KeyInputs& k) { k.nvrtc_version = "13.1"; }},
      {"nvjitlink", [](KeyInputs& k) { k.nvjitlink_version = "13.1"; }},
      {"cuda headers", [](KeyInputs& k) { k.cuda_headers_version = "13010"; }},
      {"kiln", [](KeyInputs& k) { k.kiln_version = "0.2.0"; }},
      {"format", [](KeyInputs& k) { k.format_version = kCacheFormatVersion + 1; }},
  };
  const std::string base = ComputeCacheKey(BaseInputs());
  std::set<std::string> seen{base};
  for (const auto& [name, change] : changes) {
    INFO("changed: " << name);
    KeyInputs in = BaseInputs();
    change(in);
    std::string key = ComputeCacheKey(in);
    CHECK(key != base);
    CHECK(seen.insert(key).second);  // and no two changes collide with each other
  }
}

TEST_CASE("the encoding has no concatenation ambiguity", "[cache_key]") {
  auto differ = [](const std::function<void(KeyInputs&)>& one, const std::function<void(KeyInputs&)>& two) {
    KeyInputs a = BaseInputs(), b = BaseInputs();
    one(a);
    two(b);
    CHECK(CanonicalEncoding(a) != CanonicalEncoding(b));
    CHECK(ComputeCacheKey(a) != ComputeCacheKey(b));
  };
  SECTION("param name/value boundary") {
    differ([](KeyInputs& k) { k.params = {{"a", "bc"}}; }, [](KeyInputs& k) { k.params = {{"ab", "c"}}; });
  }
  SECTION("option list split") {
    differ([](KeyInputs& k) { k.options = {"-Da", "b"}; }, [](KeyInputs& k) { k.options = {"-Dab"}; });
  }
  SECTION("an empty option is still an option") {
    differ([](KeyInputs& k) { k.options = {"-Da", ""}; }, [](KeyInputs& k) { k.options = {"-Da"}; });
  }
  SECTION("an option moved into the link options") {
    differ(
        [](KeyInputs& k) {
          k.options = {"-x"};
          k.link_options = {};
        },
        [](KeyInputs& k) {
          k.options = {};
          k.link_options = {"-x"};
        });
  }
  SECTION("an entry moved into the options") {
    differ(
        [](KeyInputs& k) {
          k.options = {};
          k.entries = {"kern"};
        },
        [](KeyInputs& k) {
          k.options = {"kern"};
          k.entries = {};
        });
  }
  SECTION("op/uri boundary") {
    differ(
        [](KeyInputs& k) {
          k.op = "rms";
          k.uri = "norm";
        },
        [](KeyInputs& k) {
          k.op = "rmsnorm";
          k.uri = "";
        });
  }
  SECTION("a value that imitates the encoding") {
    differ(
        [](KeyInputs& k) {
          k.params = {{"a", "1"}, {"b", "2"}};
        },
        [](KeyInputs& k) {
          k.params = {{"a", "1\nparam 1:b 1:2"}};
        });
  }
  SECTION("source name/hash boundary") {
    differ(
        [](KeyInputs& k) {
          k.sources = {{"a.cu", Sha256Hex("x")}};
        },
        [](KeyInputs& k) {
          k.sources = {{"a.c", "u" + Sha256Hex("x")}};
        });
  }
  SECTION("versions swapped between fields") {
    differ(
        [](KeyInputs& k) {
          k.nvrtc_version = "13.0";
          k.nvjitlink_version = "13.1";
        },
        [](KeyInputs& k) {
          k.nvrtc_version = "13.1";
          k.nvjitlink_version = "13.0";
        });
  }
}

TEST_CASE("ValidateKeyInputs rejects absolute paths and missing fields", "[cache_key]") {
  CHECK(ValidateKeyInputs(BaseInputs()).ok());
  KeyInputs abs_source = BaseInputs();
  abs_source.sources[0].name = "/home/me/kernels/kiln_config.cuh";
  auto status = ValidateKeyInputs(abs_source);
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(status.message()), Catch::Contains("/home/me/kernels/kiln_config.cuh"));

  for (std::string option : {"-I/usr/local/cuda/include", "--include-path=/opt/x", "/abs.cu"}) {
    INFO(option);
    KeyInputs in = BaseInputs();
    in.options.push_back(option);
    CHECK(ValidateKeyInputs(in).code() == absl::StatusCode::kInvalidArgument);
  }
  KeyInputs bad_hash = BaseInputs();
  bad_hash.sources[0].sha256 = "abc";
  CHECK(ValidateKeyInputs(bad_hash).code() == absl::StatusCode::kInvalidArgument);
  KeyInputs no_arch = BaseInputs();
  no_arch.arch.clear();
  CHECK(ValidateKeyInputs(no_arch).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("the encoding carries no absolute path of its own", "[cache_key]") {
  const std::string encoding = CanonicalEncoding(BaseInputs());
  CHECK(encoding.find("/usr") == std::string::npos);
  CHECK(encoding.find("/tmp") == std::string::npos);
  CHECK(encoding.find("/home") == std::string::npos);
}

}  // namespace
}  // namespace kiln::cache
