// Issue 15: the cache's folders removed under a running daemon (rm -rf blobs/, locks/, tmp/).
// The daemon recreates each on the next write and logs it once; a new key compiles, an entry
// whose blob went is recompiled, and Verify lists the missing blob instead of failing.
#include <catch2/catch.hpp>

#include <filesystem>

#include "cache/sha256.h"
#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;
namespace v1 = kiln::v1;
namespace fs = std::filesystem;

namespace {

v1::GetKernelRequest Rms(const std::string& dtype) {
  return OpRequest("rmsnorm", {{"dtype", dtype}, {"hidden", "4096"}});
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("blobs removed under a running daemon are recreated and the lost entry recompiled", "[cache][layout]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  auto first = Get(rpc, Rms("bf16"));
  REQUIRE(first.status.ok());
  REQUIRE(first.response.origin() == v1::ORIGIN_COMPILED);

  fs::remove_all(d.cache_dir() + "/blobs");

  // A new key compiles and is stored: blobs/ is back.
  auto second = Get(rpc, Rms("fp16"));
  INFO(second.status.error_message());
  REQUIRE(second.status.ok());
  CHECK(second.response.origin() == v1::ORIGIN_COMPILED);
  CHECK(fs::is_regular_file(d.cache_dir() + "/blobs/" + second.response.sha256().substr(0, 2) + "/" +
                            second.response.sha256()));
  CHECK(Count(d.Log(), "/blobs was missing") == 1);

  // The first key is still in memory: served as bytes, never as a path to a removed blob.
  auto from_memory = Rms("bf16");
  from_memory.set_prefer_blob_path(true);
  auto served = Get(rpc, from_memory);
  REQUIRE(served.status.ok());
  CHECK(served.response.blob_path().empty());
  CHECK(kiln::cache::Sha256Hex(served.response.cubin()) == first.response.sha256());

  // Verify names the entry whose blob is gone, and keeps the good one.
  auto report = Verify(rpc);
  REQUIRE(report.problems_size() == 1);
  CHECK(report.problems(0).cache_key() == first.response.cache_key());
  CHECK_THAT(report.problems(0).problem(), Catch::StartsWith("blob missing"));
  CHECK_THAT(report.problems(0).action(), Catch::Contains("the next request recompiles it"));

  // ... and the next request for it compiles it again, transparently.
  auto again = Get(rpc, Rms("bf16"));
  REQUIRE(again.status.ok());
  CHECK(again.response.origin() == v1::ORIGIN_COMPILED);
  CHECK(again.response.cache_key() == first.response.cache_key());
  CHECK(Verify(rpc).problems_size() == 0);
  CHECK(Count(d.Log(), "/blobs was missing") == 1);
}

TEST_CASE("locks and tmp removed under a running daemon are recreated on the next compile", "[cache][layout]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  REQUIRE(Get(rpc, Rms("bf16")).status.ok());

  fs::remove_all(d.cache_dir() + "/locks");
  fs::remove_all(d.cache_dir() + "/tmp");
  auto next = Get(rpc, Rms("fp16"));
  INFO(next.status.error_message());
  REQUIRE(next.status.ok());
  CHECK(next.response.origin() == v1::ORIGIN_COMPILED);
  CHECK(fs::is_directory(d.cache_dir() + "/locks"));
  CHECK(fs::is_directory(d.cache_dir() + "/tmp"));
  CHECK(Count(d.Log(), "/locks was missing") == 1);
  CHECK(Count(d.Log(), "/tmp was missing") == 1);
  CHECK(Verify(rpc).problems_size() == 0);
}

TEST_CASE("Verify with the blobs folder removed lists every missing blob rather than failing", "[cache][layout]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  REQUIRE(Get(rpc, Rms("bf16")).status.ok());
  fs::remove_all(d.cache_dir() + "/blobs");
  auto report = Verify(rpc);
  REQUIRE(report.problems_size() == 1);
  CHECK_THAT(report.problems(0).problem(), Catch::Contains("is not in the store"));
  auto again = Get(rpc, Rms("bf16"));
  REQUIRE(again.status.ok());
  CHECK(again.response.origin() == v1::ORIGIN_COMPILED);
}
