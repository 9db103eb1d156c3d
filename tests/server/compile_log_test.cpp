// Issue 15: a source with thousands of warnings. NVRTC quotes the source line under each
// warning, so warnings from one long line make a log that grows with their square (2,000 made
// 57 MB). The daemon keeps the log's head and tail with a line saying what it left out, in the
// job and in the cache entry, and the compile still succeeds.
#include <catch2/catch.hpp>

#include <string>

#include "server/engine/compile_log.h"
#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;
namespace v1 = kiln::v1;

namespace {

constexpr size_t kKept = kiln::server::kCompileLogHeadBytes + kiln::server::kCompileLogTailBytes + 512;

// A kernel that declares `n` unused variables on one line: n warnings, each quoting the line
// (and `more`, at its end).
std::string Noisy(int n, const std::string& more = "") {
  std::string code = "extern \"C\" __global__ void noisy(float* out) {";
  for (int i = 0; i < n; ++i) code += " int v" + std::to_string(i) + " = 0;";
  return code + more + "\n  out[threadIdx.x] = 1.0f;\n}\n";
}

v1::Job GetJob(Rpc& rpc, const std::string& id) {
  v1::GetJobRequest request;
  request.set_id(id);
  v1::Job job;
  grpc::ClientContext ctx;
  auto s = rpc.jobs->GetJob(&ctx, request, &job);
  INFO(s.error_message().substr(0, 512));
  REQUIRE(s.ok());
  return job;
}

}  // namespace

TEST_CASE("a compile log is kept bounded: head and tail with what was left out", "[compile_log]") {
  const std::string log = std::string(100, 'h') + "\n" + std::string(300000, 'm') + "\n" + "last line\n";
  const std::string kept = kiln::server::BoundedCompileLog(log, 1024, 1024);
  CHECK(kept.size() < 3000);
  CHECK_THAT(kept, Catch::StartsWith(std::string(100, 'h') + "\n"));
  CHECK_THAT(kept, Catch::Contains("[... kiln left out "));
  CHECK_THAT(kept, Catch::EndsWith("last line\n"));
  CHECK(kiln::server::BoundedCompileLog("short\n") == "short\n");
}

TEST_CASE("thousands of warnings compile with a bounded log in the job and the cache entry", "[compile_log]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  auto r = Get(rpc, SourceRequest("noisy", Noisy(2000), {"noisy"}), 600);
  INFO(r.status.error_message().substr(0, 2048));
  REQUIRE(r.status.ok());
  CHECK(r.response.origin() == v1::ORIGIN_COMPILED);

  const v1::Job job = GetJob(rpc, r.response.job_id());
  CHECK(job.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(job.log().size() <= kKept);
  CHECK_THAT(job.log(), Catch::Contains("declared but never referenced"));
  CHECK_THAT(job.log(), Catch::Contains("kiln left out"));

  v1::GetEntryRequest request;
  request.set_cache_key(r.response.cache_key());
  v1::CacheEntry entry;
  grpc::ClientContext ctx;
  REQUIRE(rpc.cache->GetEntry(&ctx, request, &entry).ok());
  CHECK(entry.compile_log() == job.log());
}

TEST_CASE("a compile error after thousands of warnings is reported in a short message", "[compile_log]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  auto r = Get(rpc, SourceRequest("noisy", Noisy(2000, " this_is_not_declared = 1;"), {"noisy"}), 600);
  REQUIRE(r.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(r.status.error_message().size() < 8192);
  CHECK_THAT(r.status.error_message(), Catch::Contains("this_is_not_declared"));
  CHECK_THAT(r.status.error_message(), Catch::Contains("more bytes"));  // the long line, cut
  const auto jobs = Jobs(rpc);
  REQUIRE(jobs.size() == 1);
  const v1::Job job = GetJob(rpc, jobs[0].id());
  CHECK(job.state() == v1::JOB_STATE_FAILED);
  CHECK(job.log().size() <= kKept);
  CHECK_THAT(job.log(), Catch::Contains("this_is_not_declared"));
  // The daemon goes on serving.
  CHECK(Get(rpc, SourceRequest("vadd", VaddSource(), {"vadd"})).status.ok());
}
