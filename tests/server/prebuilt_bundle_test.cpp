// Prebuilt bundles end to end, with real daemons and the real CLI: `kiln aot build` writes a
// bundle from one daemon; another daemon with `--prebuilt` serves it (ORIGIN_PREBUILT, verified,
// then stored in its cache) without compiling; an entry of another Kiln version, toolchain or
// kernels tree never answers (unless --prebuilt-ignore-version, which never stores it); a flipped
// byte in a bundle blob is caught; the bundle folder is never written.
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "cache/cache_key.h"
#include "cache/sha256.h"
#include "proto/bundle_layout.h"
#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;
namespace v1 = kiln::v1;
namespace fs = std::filesystem;

namespace {

const std::map<std::string, std::string> kBf16_4096 = {{"dtype", "bf16"}, {"hidden", "4096"}};
const std::map<std::string, std::string> kFp16_2048 = {{"dtype", "fp16"}, {"hidden", "2048"}};

// `kiln aot build` of `list` for `archs` from `daemon` into `out`; requires success.
void BuildBundle(const DaemonProcess& daemon, const std::string& list, const std::string& archs,
                 const std::string& out) {
  auto r = RunCli(daemon, {"aot", "build", "--arch", archs, "--ops", list, "--out", out});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
}

v1::CacheEntry Entry(Rpc& rpc, const std::string& key) {
  v1::GetEntryRequest request;
  request.set_cache_key(key);
  v1::CacheEntry entry;
  grpc::ClientContext context;
  REQUIRE(rpc.cache->GetEntry(&context, request, &entry).ok());
  return entry;
}

// The key inputs of a cache entry, rebuilt from the manifest the daemon recorded for it.
kiln::cache::KeyInputs InputsOf(const v1::CacheEntry& e) {
  const v1::Manifest& m = e.manifest();
  kiln::cache::KeyInputs in;
  in.op = m.op();
  in.uri = m.uri();
  in.params = {m.params().begin(), m.params().end()};
  for (const auto& s : m.sources()) in.sources.push_back({s.name(), s.sha256()});
  in.kernels_tree_digest = m.kernels_tree_sha256();
  in.options = {m.options().begin(), m.options().end()};
  in.link_options = {m.link_options().begin(), m.link_options().end()};
  in.entries = {m.entries().begin(), m.entries().end()};
  in.arch = m.arch();
  in.nvrtc_version = m.toolchain().nvrtc();
  in.nvjitlink_version = m.toolchain().nvjitlink();
  in.cuda_headers_version = m.toolchain().cuda_headers();
  in.kiln_version = m.toolchain().kiln();
  in.format_version = m.toolchain().cache_format();
  return in;
}

void CopyTree(const std::string& from, const std::string& to) {
  fs::copy(from, to, fs::copy_options::recursive);
  for (auto& e : fs::recursive_directory_iterator(to))
    fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
}

}  // namespace

TEST_CASE("kiln aot build writes a bundle that a fresh daemon serves as prebuilt, verified, without compiling",
          "[prebuilt]") {
  TempDir dir;
  WriteFile(dir / "fleet.list", "# two specs\nrmsnorm dtype=bf16 hidden=4096\nrmsnorm dtype=fp16 hidden=2048\n");
  std::map<std::string, std::string> sha_of;  // key -> sha256, as the building daemon served them
  {
    DaemonProcess builder({.root = dir / "builder"});
    BuildBundle(builder, dir / "fleet.list", "sm_80 sm_90a", dir / "bundle");
    Rpc rpc(builder.channel());
    for (const auto& arch : {"sm_80", "sm_90a"})
      for (const auto& params : {kBf16_4096, kFp16_2048}) {
        auto r = Get(rpc, OpRequest("rmsnorm", params, arch));
        REQUIRE(r.status.ok());
        sha_of[r.response.cache_key()] = r.response.sha256();
      }
  }
  auto loaded = kiln::proto::ReadBundleManifest(dir / "bundle");
  REQUIRE(loaded.error.empty());
  const v1::BundleManifest& m = loaded.manifest;
  CHECK(m.bundle_format() == kiln::proto::kBundleFormatVersion);
  CHECK(m.archs_size() == 2);
  CHECK(m.kiln_version() == m.toolchain().kiln());
  CHECK(m.toolchain().nvrtc() == "13.0");
  REQUIRE(m.entries_size() == 4);
  for (const auto& e : m.entries()) {
    INFO(e.uri() << " " << e.arch());
    REQUIRE(sha_of.count(e.cache_key()) == 1);
    CHECK(e.sha256() == sha_of[e.cache_key()]);
    const std::string blob = ReadFile(kiln::proto::BundleBlobPath(dir / "bundle", e.sha256()));
    CHECK(blob.size() == e.size_bytes());
    CHECK(kiln::cache::Sha256Hex(blob) == e.sha256());
    CHECK(e.op() == "rmsnorm");
    CHECK(e.kernels_size() == 1);
    CHECK(e.params().at("vec") != "");  // the canonical params, defaults filled in
  }
  const FileTreeSnapshot before = SnapshotTree(dir / "bundle");

  {
    DaemonProcess fresh({.root = dir / "fresh", .extra_args = {"--prebuilt", dir / "bundle", "--disable-jit"}});
    Rpc rpc(fresh.channel());
    for (const auto& arch : {"sm_80", "sm_90a"})
      for (const auto& params : {kBf16_4096, kFp16_2048}) {
        auto first = Get(rpc, OpRequest("rmsnorm", params, arch));
        REQUIRE(first.status.ok());
        CHECK(first.response.origin() == v1::ORIGIN_PREBUILT);
        CHECK(first.response.sha256() == sha_of[first.response.cache_key()]);
        CHECK(first.response.kernels_size() == 1);
        CHECK(first.response.launch_size() == 1);
        auto again = Get(rpc, OpRequest("rmsnorm", params, arch));
        REQUIRE(again.status.ok());
        CHECK(again.response.origin() == v1::ORIGIN_MEMORY);
      }
    const v1::CacheStats stats = Stats(rpc);
    CHECK(stats.compiles() == 0);
    CHECK(stats.prebuilt_hits() == 4);
    CHECK(stats.prebuilt_rejected() == 0);
    CHECK(stats.entries() == 4);  // stored in the cache
    REQUIRE(stats.prebuilt_bundles_size() == 1);
    CHECK(stats.prebuilt_bundles(0) == dir / "bundle");

    // A spec the bundle lacks, with JIT off: refused, naming the spec and the bundles searched.
    auto miss = Get(rpc, OpRequest("rmsnorm", {{"dtype", "bf16"}, {"hidden", "1024"}}, "sm_90a"));
    REQUIRE(miss.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK_THAT(miss.status.error_message(), Catch::Contains("rmsnorm_bf16_h1024"));
    CHECK_THAT(miss.status.error_message(),
               Catch::Contains("prebuilt bundles searched (" + dir / "bundle" + " (4 entries))"));
  }
  // What it stored is its own now: the same cache without the bundle serves it from disk.
  DaemonProcess restarted({.root = dir / "fresh", .extra_args = {"--disable-jit"}});
  Rpc rpc(restarted.channel());
  auto hit = Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_90a"));
  REQUIRE(hit.status.ok());
  CHECK(hit.response.origin() == v1::ORIGIN_DISK);
  CHECK(Verify(rpc).problems_size() == 0);
  CHECK(SnapshotTree(dir / "bundle") == before);  // read-only: never written
}

TEST_CASE("a bundle entry of another Kiln version, toolchain or kernels tree never answers", "[prebuilt]") {
  TempDir dir;
  WriteFile(dir / "one.list", "rmsnorm dtype=bf16 hidden=4096\n");

  // Another kernels tree, for real: a daemon whose copy of the kernels folder has one header
  // changed by a comment builds the bundle.
  CopyTree(KernelsDir(), dir / "kernels-edited");
  const std::string header = dir / "kernels-edited/include/kiln/common/numeric.cuh";
  REQUIRE(fs::exists(header));
  WriteFile(header, ReadFile(header) + "\n// edited\n");
  {
    DaemonProcess other_tree({.root = dir / "other", .kernels_dir = dir / "kernels-edited"});
    BuildBundle(other_tree, dir / "one.list", "sm_90a", dir / "tree-bundle");
  }

  // Another Kiln version and another toolchain: the entry's key recomputed from the recorded
  // key inputs with that one field changed, exactly the key such a build would carry.
  std::string good_key;
  {
    DaemonProcess builder({.root = dir / "builder"});
    BuildBundle(builder, dir / "one.list", "sm_90a", dir / "bundle");
    Rpc rpc(builder.channel());
    auto manifest = kiln::proto::ReadBundleManifest(dir / "bundle");
    REQUIRE(manifest.error.empty());
    good_key = manifest.manifest.entries(0).cache_key();
    const kiln::cache::KeyInputs inputs = InputsOf(Entry(rpc, good_key));
    REQUIRE(kiln::cache::ComputeCacheKey(inputs) == good_key);  // the inputs are the whole key
    for (auto [name, change] : std::vector<std::pair<std::string, std::function<void(kiln::cache::KeyInputs&)>>>{
             {"version-bundle", [](kiln::cache::KeyInputs& in) { in.kiln_version = "0.0.9"; }},
             {"toolchain-bundle", [](kiln::cache::KeyInputs& in) { in.nvrtc_version = "12.8"; }}}) {
      kiln::cache::KeyInputs changed = inputs;
      change(changed);
      CopyTree(dir / "bundle", dir / name);
      v1::BundleManifest foreign = manifest.manifest;
      foreign.mutable_entries(0)->set_cache_key(kiln::cache::ComputeCacheKey(changed));
      if (name == "version-bundle") foreign.set_kiln_version("0.0.9");
      REQUIRE(kiln::proto::WriteBundleManifest(dir / name, foreign).empty());
    }
  }

  for (const std::string name : {"tree-bundle", "version-bundle", "toolchain-bundle"}) {
    INFO(name);
    auto foreign = kiln::proto::ReadBundleManifest(dir / name);
    REQUIRE(foreign.error.empty());
    REQUIRE(foreign.manifest.entries(0).cache_key() != good_key);
    {
      DaemonProcess strict(
          {.root = dir / ("strict-" + name), .extra_args = {"--prebuilt", dir / name, "--disable-jit"}});
      Rpc rpc(strict.channel());
      auto r = Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_90a"));
      CHECK(r.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
      CHECK(Stats(rpc).prebuilt_hits() == 0);
    }
    {
      // With JIT on, the request simply compiles.
      DaemonProcess jit({.root = dir / ("jit-" + name), .extra_args = {"--prebuilt", dir / name}});
      Rpc rpc(jit.channel());
      auto r = Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_90a"));
      REQUIRE(r.status.ok());
      CHECK(r.response.origin() == v1::ORIGIN_COMPILED);
      CHECK(r.response.cache_key() == good_key);
    }
    {
      // The one deliberate override: served by URI, arch and options, loudly, and never stored.
      DaemonProcess loose({.root = dir / ("loose-" + name),
                           .extra_args = {"--prebuilt", dir / name, "--prebuilt-ignore-version", "--disable-jit"}});
      Rpc rpc(loose.channel());
      auto r = Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_90a"));
      REQUIRE(r.status.ok());
      CHECK(r.response.origin() == v1::ORIGIN_PREBUILT);
      CHECK(r.response.sha256() == foreign.manifest.entries(0).sha256());
      auto again = Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_90a"));
      CHECK(again.response.origin() == v1::ORIGIN_PREBUILT);  // not memoized either
      CHECK(Stats(rpc).entries() == 0);
      CHECK_THAT(loose.Log(), Catch::Contains("--prebuilt-ignore-version is ON"));
      CHECK_THAT(loose.Log(), Catch::Contains("under ANOTHER key"));
    }
  }
}

TEST_CASE("a flipped byte in a bundle blob is detected and never served", "[prebuilt]") {
  TempDir dir;
  WriteFile(dir / "one.list", "rmsnorm dtype=bf16 hidden=4096 @sm_90a\n");
  std::string good_sha;
  {
    DaemonProcess builder({.root = dir / "builder"});
    auto r = RunCli(builder, {"aot", "build", "--arch", "sm_90a", "--ops", dir / "one.list", "--out", dir / "bundle"});
    REQUIRE(r.exit_code == 0);
  }
  auto manifest = kiln::proto::ReadBundleManifest(dir / "bundle");
  REQUIRE(manifest.error.empty());
  good_sha = manifest.manifest.entries(0).sha256();
  const std::string blob = kiln::proto::BundleBlobPath(dir / "bundle", good_sha);
  std::string bytes = ReadFile(blob);
  bytes[bytes.size() / 2] = char(bytes[bytes.size() / 2] ^ 0x5a);
  WriteFile(blob, bytes);
  {
    DaemonProcess strict({.root = dir / "strict", .extra_args = {"--prebuilt", dir / "bundle", "--disable-jit"}});
    Rpc rpc(strict.channel());
    auto r = Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_90a"));
    CHECK(r.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK(Stats(rpc).prebuilt_rejected() == 1);
    CHECK_THAT(strict.Log(), Catch::Contains("SHA-256"));
    CHECK_THAT(strict.Log(), Catch::Contains("not served"));
  }
  DaemonProcess jit({.root = dir / "jit", .extra_args = {"--prebuilt", dir / "bundle"}});
  Rpc rpc(jit.channel());
  auto r = Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_90a"));
  REQUIRE(r.status.ok());
  CHECK(r.response.origin() == v1::ORIGIN_COMPILED);
  CHECK(r.response.sha256() == good_sha);  // the true cubin, compiled here
  CHECK(Stats(rpc).prebuilt_rejected() == 1);
}

TEST_CASE("a bundle entry that names another URI than its key is never served", "[prebuilt]") {
  TempDir dir;
  WriteFile(dir / "one.list", "rmsnorm dtype=bf16 hidden=4096 @sm_90a\n");
  {
    DaemonProcess builder({.root = dir / "builder"});
    auto r = RunCli(builder, {"aot", "build", "--arch", "sm_90a", "--ops", dir / "one.list", "--out", dir / "bundle"});
    REQUIRE(r.exit_code == 0);
  }
  // The manifest's entry keeps its key (the key covers the URI) but names another URI.
  auto manifest = nlohmann::json::parse(ReadFile(dir / "bundle/manifest.json"));
  REQUIRE(manifest["entries"].size() == 1);
  manifest["entries"][0]["uri"] = "rmsnorm_tampered";
  WriteFile(dir / "bundle/manifest.json", manifest.dump());
  DaemonProcess strict({.root = dir / "strict", .extra_args = {"--prebuilt", dir / "bundle", "--disable-jit"}});
  Rpc rpc(strict.channel());
  auto r = Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_90a"));
  CHECK(r.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(Stats(rpc).prebuilt_rejected() == 1);
  CHECK_THAT(strict.Log(), Catch::Contains("says rmsnorm_tampered for sm_90a, the request is rmsnorm_"));
  CHECK_THAT(strict.Log(), Catch::Contains("not served"));
}

TEST_CASE("kilnd refuses to start on a bundle it cannot trust, naming it", "[prebuilt]") {
  TempDir dir;
  fs::create_directories(dir / "empty");
  fs::create_directories(dir / "future");
  WriteFile(dir / "future/manifest.json", R"({"bundle_format": 9, "kiln_version": "9.0"})");
  for (auto [name, says] : {std::pair{"empty", "cannot read manifest.json"}, std::pair{"future", "bundle format 9"}}) {
    DaemonProcess d(
        {.root = dir / (std::string("d-") + name), .extra_args = {"--prebuilt", dir / name}, .wait_ready = false});
    auto code = d.process().Wait(std::chrono::seconds(30));
    REQUIRE(code.has_value());
    CHECK(*code != 0);
    CHECK_THAT(d.Log(), Catch::Contains(dir / name));
    CHECK_THAT(d.Log(), Catch::Contains(says));
  }
}

TEST_CASE("kiln aot build takes an explicit arch list and a new folder, and names a bad list line", "[prebuilt]") {
  TempDir dir;
  DaemonProcess d({.root = dir / "d"});
  WriteFile(dir / "bad.list", "rmsnorm dtype=bf16\nrmsnorm hidden\n");
  WriteFile(dir / "good.list", "rmsnorm dtype=bf16 hidden=4096\nrmsnorm dtype=int8 hidden=4096\n");
  auto no_arch = RunCli(d, {"aot", "build", "--ops", dir / "good.list", "--out", dir / "b1"});
  CHECK(no_arch.exit_code == 2);
  CHECK_THAT(no_arch.output, Catch::Contains("--arch is required"));
  auto bad = RunCli(d, {"aot", "build", "--arch", "sm_90a", "--ops", dir / "bad.list", "--out", dir / "b2"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Catch::Contains(dir / "bad.list" + ":2: 'rmsnorm hidden'"));
  fs::create_directories(dir / "used");
  WriteFile(dir / "used/x", "x");
  auto used = RunCli(d, {"aot", "build", "--arch", "sm_90a", "--ops", dir / "good.list", "--out", dir / "used"});
  CHECK(used.exit_code == 2);
  CHECK_THAT(used.output, Catch::Contains("is not an empty folder"));

  // One spec fails (dtype=int8 is refused by the generator): exit 1, the bundle holds the other,
  // and each spec had its JSON line.
  auto partial = RunCli(d, {"aot", "build", "--arch", "sm_90a", "--ops", dir / "good.list", "--out", dir / "b3"});
  INFO(partial.output);
  CHECK(partial.exit_code == 1);
  int lines = 0, failed = 0;
  std::istringstream in(partial.output);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '{') continue;
    auto j = nlohmann::json::parse(line);
    ++lines;
    failed += j["ok"].get<bool>() ? 0 : 1;
  }
  CHECK(lines == 2);
  CHECK(failed == 1);
  CHECK_THAT(partial.output, Catch::Contains("1 failed"));
  auto manifest = kiln::proto::ReadBundleManifest(dir / "b3");
  REQUIRE(manifest.error.empty());
  CHECK(manifest.manifest.entries_size() == 1);
}
