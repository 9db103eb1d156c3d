// `kiln inspect` against a real kilnd (real NVRTC compiles): by full key, by 8-digit prefix and
// by URI, human and --json; debug variants are separate entries shown together for a URI;
// the generated folder checked against the manifest (and reported removed); a job the daemon
// no longer remembers; unknown keys and URIs, an ambiguous prefix and bad usage.
#include <catch2/catch.hpp>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/cache_index.h"
#include "tests/support/daemon_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace {

using kiln::testing::RunResult;
using nlohmann::json;
namespace fs = std::filesystem;

struct Daemon {
  kiln::testing::TempDir dir{"kiln-cli-inspect"};
  std::unique_ptr<kiln::testing::DaemonProcess> daemon = Start();

  std::unique_ptr<kiln::testing::DaemonProcess> Start() const {
    return std::make_unique<kiln::testing::DaemonProcess>(kiln::testing::DaemonOptions{.root = dir.path()});
  }
  RunResult Cli(std::vector<std::string> args) const {
    kiln::testing::SubprocessOptions p;
    p.argv = {kiln::testing::KilnCliPath()};
    for (auto& a : args) p.argv.push_back(std::move(a));
    p.set_env = {{"KILN_SOCKET", daemon->socket()}};
    p.unset_env = {"KILN_DEBUG_COMPILE", "KILN_LOADER_LOG"};
    return kiln::testing::Run(p, std::chrono::seconds(120));
  }
};

json Json(const RunResult& r) {
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.output);
}

bool Has(const RunResult& r, const std::string& text) { return r.output.find(text) != std::string::npos; }

const std::vector<std::string> kGet = {"get", "rmsnorm", "dtype=bf16", "hidden=4096", "--arch", "sm_90a", "--json"};
const std::string kUri = "rmsnorm_bf16_h4096";

std::vector<std::string> With(std::vector<std::string> args, std::initializer_list<std::string> more) {
  args.insert(args.end(), more);
  return args;
}

bool Contains(const json& list, const std::string& value) {
  for (const auto& item : list)
    if (item == value) return true;
  return false;
}

}  // namespace

TEST_CASE("kiln inspect by key, 8-digit prefix and URI: entry, manifest, generated sources, kernels, job",
          "[client][cli][daemon][inspect]") {
  Daemon d;
  json got = Json(d.Cli(kGet));
  const std::string key = got["cacheKey"];
  const std::string job_id = got["jobId"];

  json full = Json(d.Cli({"inspect", key, "--json"}));
  REQUIRE(full["entries"].size() == 1);
  const json& view = full["entries"][0];
  const json& e = view["entry"];
  CHECK(e["cacheKey"] == key);
  CHECK(e["uri"] == kUri);
  CHECK(e["arch"] == "sm_90a");
  CHECK(e["jobId"] == job_id);
  CHECK(e["blobPath"].get<std::string>().find(e["sha256"].get<std::string>()) != std::string::npos);
  CHECK_FALSE(e["debug"].value("lineinfo", false));
  const json& m = e["manifest"];
  CHECK(m["uri"] == kUri);
  CHECK(m["arch"] == "sm_90a");
  CHECK(m["kernelsTreeSha256"].get<std::string>().size() == 64);
  CHECK(m["toolchain"].contains("nvrtc"));
  REQUIRE(m["sources"].size() >= 2);
  for (const auto& s : m["sources"]) {
    CHECK(s["sha256"].get<std::string>().size() == 64);
    CHECK(s.contains("origin"));
    CHECK(s.contains("path"));
  }
  REQUIRE(e["kernels"].size() == 1);
  CHECK(e["kernels"][0]["name"] == "kiln_rmsnorm");
  CHECK(e["kernels"][0]["registers"].get<int>() > 0);
  CHECK(e["kernels"][0]["maxThreadsPerBlock"].get<int>() > 0);
  // The job that built it, from the daemon's job history.
  REQUIRE(view.contains("job"));
  CHECK(view["job"]["id"] == job_id);
  CHECK(view["job"]["state"] == "JOB_STATE_SUCCEEDED");
  CHECK(view["job"]["cacheKey"] == key);
  // The generated folder, read here and checked against the manifest's hashes.
  const json& g = view["generated"];
  CHECK(g["path"] == d.daemon->gen_dir() + "/" + kUri);
  CHECK(g["exists"] == true);
  REQUIRE(g["files"].size() >= 2);
  for (const auto& f : g["files"]) {
    INFO(f.dump());
    CHECK(f["versusManifest"] == "same");
    CHECK(f["sha256"].get<std::string>().size() == 64);
  }

  // A prefix of 8 hex digits is the same entry, and the human view has every part.
  json by_prefix = Json(d.Cli({"inspect", key.substr(0, 8), "--json"}));
  CHECK(by_prefix["entries"][0]["entry"]["cacheKey"] == key);
  auto human = d.Cli({"inspect", key.substr(0, 8)});
  INFO(human.output);
  REQUIRE(human.exit_code == 0);
  const std::vector<std::string> parts = {"key",
                                          key,
                                          "debug",
                                          "none (the optimized default",
                                          "manifest",
                                          "manifest sources",
                                          "ORIGIN",
                                          "SHA256",
                                          "generated sources  " + d.daemon->gen_dir() + "/" + kUri,
                                          "same",
                                          "kernels",
                                          "REGISTERS",
                                          "kiln_rmsnorm",
                                          "job " + job_id,
                                          "succeeded",
                                          "timings",
                                          "versions",
                                          "NVRTC"};
  for (const std::string& text : parts) CHECK(Has(human, text));

  // By URI: the one entry of it.
  json by_uri = Json(d.Cli({"inspect", kUri, "--json"}));
  REQUIRE(by_uri["entries"].size() == 1);
  CHECK(by_uri["entries"][0]["entry"]["cacheKey"] == key);
  CHECK(by_uri["entries"][0]["entry"].contains("manifest"));  // fetched whole, not from the light listing
}

TEST_CASE("kiln inspect URI shows every entry of it: archs and debug variants, --arch picks one",
          "[client][cli][daemon][inspect]") {
  Daemon d;
  const std::string plain = Json(d.Cli(kGet))["cacheKey"];
  const std::string lineinfo = Json(d.Cli(With(kGet, {"--lineinfo"})))["cacheKey"];
  CHECK(lineinfo != plain);
  const std::string sm80 = Json(
      d.Cli({"get", "rmsnorm", "dtype=bf16", "hidden=4096", "--arch", "sm_80", "--json"}))["cacheKey"];

  json all = Json(d.Cli({"inspect", kUri, "--json"}));
  REQUIRE(all["entries"].size() == 3);
  int with_lineinfo = 0;
  for (const auto& v : all["entries"]) {
    const json& e = v["entry"];
    const bool li = e["debug"].value("lineinfo", false);
    with_lineinfo += li;
    CHECK(li == (e["cacheKey"] == lineinfo));
    CHECK(Contains(e["manifest"]["options"], "-lineinfo") == li);
    CHECK(Contains(e["options"], "-lineinfo") == li);
  }
  CHECK(with_lineinfo == 1);

  json sm_90a = Json(d.Cli({"inspect", kUri, "--arch", "sm_90a", "--json"}));
  CHECK(sm_90a["entries"].size() == 2);
  json only_80 = Json(d.Cli({"inspect", kUri, "--arch", "sm_80", "--json"}));
  REQUIRE(only_80["entries"].size() == 1);
  CHECK(only_80["entries"][0]["entry"]["cacheKey"] == sm80);

  auto human = d.Cli({"inspect", kUri, "--arch", "sm_90a"});
  INFO(human.output);
  REQUIRE(human.exit_code == 0);
  CHECK(Has(human, "=== entry 1 of 2 for " + kUri));
  CHECK(Has(human, "=== entry 2 of 2 for " + kUri));
  CHECK(Has(human, "DEBUG COMPILE: lineinfo (-lineinfo)"));
}

TEST_CASE("kiln inspect says when the generated folder changed or was removed, and when the job is forgotten",
          "[client][cli][daemon][inspect]") {
  Daemon d;
  const std::string key = Json(d.Cli(kGet))["cacheKey"];
  const std::string folder = d.daemon->gen_dir() + "/" + kUri;

  // A file rewritten since the entry was built no longer matches its manifest hash.
  std::string rewritten;
  for (const auto& f : fs::directory_iterator(folder))
    if (f.path().extension() == ".cuh") rewritten = f.path().filename().string();
  REQUIRE_FALSE(rewritten.empty());
  kiln::testing::WriteFile(folder + "/" + rewritten, "// edited\n");
  json changed = Json(d.Cli({"inspect", key, "--json"}));
  bool saw_differs = false;
  for (const auto& f : changed["entries"][0]["generated"]["files"])
    if (f["name"] == rewritten) saw_differs = f["versusManifest"].get<std::string>().rfind("DIFFERS", 0) == 0;
  CHECK(saw_differs);

  fs::remove_all(folder);
  auto removed = d.Cli({"inspect", key});
  INFO(removed.output);
  REQUIRE(removed.exit_code == 0);
  CHECK(Has(removed, "REMOVED: the folder no longer exists"));
  CHECK(Has(removed, "manifest sources"));  // the manifest still names every source
  json removed_json = Json(d.Cli({"inspect", key, "--json"}));
  CHECK(removed_json["entries"][0]["generated"]["exists"] == false);

  // A restarted daemon has forgotten the job; the entry still has its manifest and log.
  const std::string job_id = removed_json["entries"][0]["entry"]["jobId"];
  d.daemon.reset();
  d.daemon = d.Start();
  json after = Json(d.Cli({"inspect", key, "--json"}));
  const json& v = after["entries"][0];
  CHECK_FALSE(v.contains("job"));
  CHECK(v["jobNote"].get<std::string>().find("job " + job_id + " is no longer in the daemon's job history") !=
        std::string::npos);
  CHECK(v["entry"]["manifest"]["sources"].size() >= 2);
  auto human = d.Cli({"inspect", key});
  CHECK(human.exit_code == 0);
  CHECK(Has(human, "is no longer in the daemon's job history"));
}

TEST_CASE("kiln inspect errors: unknown key or URI exit 1, an ambiguous prefix exits 1, bad usage exits 2",
          "[client][cli][daemon][inspect]") {
  Daemon d;
  const std::string key = Json(d.Cli(kGet))["cacheKey"];

  auto unknown_key = d.Cli({"inspect", key[0] == '0' ? "11111111" : "00000000"});
  INFO(unknown_key.output);
  CHECK(unknown_key.exit_code == 1);
  CHECK(Has(unknown_key, "no cache entry has a key starting with"));

  auto unknown_uri = d.Cli({"inspect", "rmsnorm_bf16_h40"});
  INFO(unknown_uri.output);
  CHECK(unknown_uri.exit_code == 1);
  CHECK(Has(unknown_uri, "no cache entry has URI rmsnorm_bf16_h40"));
  CHECK(Has(unknown_uri, "URIs that start with it: " + kUri));

  auto other_arch = d.Cli({"inspect", kUri, "--arch", "sm_100"});
  INFO(other_arch.output);
  CHECK(other_arch.exit_code == 1);
  CHECK(Has(other_arch, "it has entries for sm_90a"));

  auto key_with_arch = d.Cli({"inspect", key, "--arch", "sm_90a"});
  CHECK(key_with_arch.exit_code == 2);
  CHECK(Has(key_with_arch, "--arch picks among the entries of a URI"));
  CHECK(d.Cli({"inspect"}).exit_code == 2);

  // A second row whose key shares the first 12 digits (written into the daemon's real index,
  // as another process sharing the cache could): an 8-digit prefix is then ambiguous.
  {
    auto index = kiln::cache::CacheIndex::Open(d.daemon->cache_dir() + "/index.sqlite");
    REQUIRE(index.ok());
    auto row = (*index)->Find(key);
    REQUIRE(row.ok());
    REQUIRE(row->has_value());
    kiln::cache::EntryRecord twin = **row;
    twin.key = key.substr(0, 12) + std::string(52, key[12] == 'f' ? '0' : 'f');
    REQUIRE((*index)->Upsert(twin).ok());
  }
  auto ambiguous = d.Cli({"inspect", key.substr(0, 8)});
  INFO(ambiguous.output);
  CHECK(ambiguous.exit_code == 1);
  CHECK(Has(ambiguous, "several entries have keys starting with " + key.substr(0, 8)));
  CHECK(Json(d.Cli({"inspect", key, "--json"}))["entries"].size() == 1);  // the full key still names one
}
