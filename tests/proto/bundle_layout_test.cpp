// The prebuilt bundle layout (proto/bundle_layout.h): where things live, the manifest's checks,
// and a manifest written and read back.
#include "proto/bundle_layout.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.h"

using namespace kiln;

namespace {

v1::BundleManifest GoodManifest() {
  v1::BundleManifest m;
  m.set_bundle_format(proto::kBundleFormatVersion);
  m.set_kiln_version("0.1.0");
  m.mutable_toolchain()->set_nvrtc("13.0");
  m.add_archs("sm_90a");
  auto* e = m.add_entries();
  e->set_op("rmsnorm");
  (*e->mutable_params())["dtype"] = "bf16";
  e->set_uri("rmsnorm_bf16_h4096");
  e->set_arch("sm_90a");
  e->set_cache_key(std::string(64, 'a'));
  e->set_sha256(std::string(64, 'b'));
  e->set_size_bytes(100);
  return m;
}

}  // namespace

TEST_CASE("a bundle's blobs live under blobs/<first two digits>/", "[bundle]") {
  CHECK(proto::BundleBlobPath("/b", "ab12" + std::string(60, '0')) == "/b/blobs/ab/ab12" + std::string(60, '0'));
  CHECK(proto::BundleManifestPath("/b") == "/b/manifest.json");
}

TEST_CASE("a manifest is trusted only when every entry is complete and well formed", "[bundle]") {
  CHECK(proto::CheckBundleManifest(GoodManifest()).empty());
  struct Case {
    std::function<void(v1::BundleManifest&)> spoil;
    const char* says;
  };
  for (const Case& c : {
           Case{[](v1::BundleManifest& m) { m.set_bundle_format(2); }, "bundle format 2 is not the format"},
           Case{[](v1::BundleManifest& m) { m.clear_kiln_version(); }, "names no kiln_version"},
           Case{[](v1::BundleManifest& m) { m.mutable_toolchain()->clear_nvrtc(); }, "names no toolchain"},
           Case{[](v1::BundleManifest& m) { m.mutable_entries(0)->clear_uri(); }, "lacks its op, uri or arch"},
           Case{[](v1::BundleManifest& m) { m.mutable_entries(0)->set_cache_key("ABC"); }, "cache_key 'ABC' is not"},
           Case{[](v1::BundleManifest& m) { m.mutable_entries(0)->set_sha256(std::string(64, 'G')); }, "sha256 '"},
           Case{[](v1::BundleManifest& m) { m.mutable_entries(0)->set_size_bytes(0); }, "size_bytes 0"},
           Case{[](v1::BundleManifest& m) { *m.add_entries() = m.entries(0); }, "appears twice"},
       }) {
    v1::BundleManifest m = GoodManifest();
    c.spoil(m);
    CHECK_THAT(proto::CheckBundleManifest(m), Catch::Contains(c.says));
  }
}

TEST_CASE("a manifest written is read back and a broken or foreign one is refused naming the file", "[bundle]") {
  testing::TempDir dir;
  REQUIRE(proto::WriteBundleManifest(dir.path(), GoodManifest()).empty());
  auto loaded = proto::ReadBundleManifest(dir.path());
  REQUIRE(loaded.error.empty());
  CHECK(loaded.manifest.entries(0).uri() == "rmsnorm_bf16_h4096");
  CHECK(loaded.manifest.entries(0).params().at("dtype") == "bf16");
  // No temp file is left beside it.
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file();
  CHECK(files == 1);

  testing::TempDir empty;
  CHECK_THAT(proto::ReadBundleManifest(empty.path()).error, Catch::Contains("cannot read manifest.json"));
  testing::WriteFile(dir / "manifest.json", "{ not json");
  CHECK_THAT(proto::ReadBundleManifest(dir.path()).error, Catch::Contains("is not a bundle manifest"));
  // A field this Kiln does not know is a newer format's: refused, not ignored.
  testing::WriteFile(dir / "manifest.json", R"({"bundle_format": 1, "from_the_future": true})");
  CHECK_THAT(proto::ReadBundleManifest(dir.path()).error, Catch::Contains("is not a bundle manifest"));
  testing::WriteFile(dir / "manifest.json", R"({"bundle_format": 7, "kiln_version": "9"})");
  CHECK_THAT(proto::ReadBundleManifest(dir.path()).error, Catch::Contains("bundle format 7"));
}
