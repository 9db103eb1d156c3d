// JobService: jobs are visible while queued and compiling, watchers see every transition,
// and a job's manifest says exactly what was compiled and how.
#include <catch2/catch.hpp>

#include <future>
#include <thread>

#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;
namespace v1 = kiln::v1;

TEST_CASE("jobs are visible while queued and compiling, and watchers see each transition", "[jobs]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path(), .extra_args = {"--max-jobs", "1"}});
  Rpc rpc(d.channel());

  grpc::ClientContext watch_ctx;
  v1::WatchJobsRequest watch_req;
  auto stream = rpc.jobs->WatchJobs(&watch_ctx, watch_req);
  std::map<std::string, std::vector<v1::JobState>> seen;
  std::thread watcher([&] {
    v1::JobEvent event;
    while (stream->Read(&event)) seen[event.job().id()].push_back(event.job().state());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the stream is set up

  std::vector<std::future<Reply>> replies;
  for (const char* hidden : {"3000", "3001", "3002", "3003"})
    replies.push_back(std::async(std::launch::async, [&rpc, hidden] {
      return Get(rpc, OpRequest("rmsnorm", {{"dtype", "fp32"}, {"hidden", hidden}}));
    }));
  bool saw_queued = false, saw_compiling = false;
  for (int i = 0; i < 3000 && !(saw_queued && saw_compiling); ++i) {
    for (const auto& j : Jobs(rpc)) {
      saw_queued |= j.state() == v1::JOB_STATE_QUEUED;
      saw_compiling |= j.state() == v1::JOB_STATE_COMPILING;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (auto& r : replies) CHECK(r.get().status.ok());
  CHECK(saw_queued);
  CHECK(saw_compiling);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  watch_ctx.TryCancel();
  watcher.join();
  REQUIRE(seen.size() == 4);
  for (const auto& [id, states] : seen) {
    INFO(id);
    CHECK(states.front() == v1::JOB_STATE_QUEUED);
    CHECK(std::find(states.begin(), states.end(), v1::JOB_STATE_COMPILING) != states.end());
    CHECK(states.back() == v1::JOB_STATE_SUCCEEDED);
  }
}

TEST_CASE("a job's manifest lists its sources with hashes, options, arch and toolchain", "[jobs]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  auto r = Get(rpc, OpRequest("rmsnorm", {{"dtype", "fp16"}, {"hidden", "768"}}, "sm_80"));
  REQUIRE(r.status.ok());
  v1::GetJobRequest get;
  get.set_id(r.response.job_id());
  v1::Job job;
  grpc::ClientContext ctx;
  REQUIRE(rpc.jobs->GetJob(&ctx, get, &job).ok());
  CHECK(job.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(job.cache_key() == r.response.cache_key());
  const auto& m = job.manifest();
  CHECK(m.uri() == "rmsnorm_fp16_h768");
  CHECK(m.arch() == "sm_80");
  CHECK(m.params().at("hidden") == "768");
  REQUIRE(m.sources_size() >= 2);
  for (const auto& s : m.sources()) {
    CHECK(s.sha256().size() == 64);
    CHECK(s.size_bytes() > 0);
    CHECK((s.origin() == "generated" || s.origin() == "kernels"));
  }
  CHECK(m.kernels_tree_sha256().size() == 64);
  CHECK(m.toolchain().nvrtc().rfind("13.", 0) == 0);
  CHECK(m.toolchain().kiln() == KILN_TEST_VERSION);
  CHECK(m.entries(0) == "kiln_rmsnorm");
  CHECK(job.waiters_size() == 1);
  CHECK_THAT(job.waiters(0).client(), Catch::Contains("kiln-test"));
  CHECK(job.timings().compile_ms() > 0);

  v1::GetJobRequest missing;
  missing.set_id("j0-0");
  grpc::ClientContext c2;
  CHECK(rpc.jobs->GetJob(&c2, missing, &job).error_code() == grpc::StatusCode::NOT_FOUND);
}
