// WatchJobs holds a server thread per open stream (issue 15: 6,000 idle watchers, 6,012
// threads), so kilnd serves at most --max-watchers at once and refuses one more by name.
#include <catch2/catch.hpp>

#include <thread>

#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;
namespace v1 = kiln::v1;

namespace {

// One open WatchJobs stream; the first read proves the daemon took it (or refused it).
struct Watcher {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> stream;
  Watcher(Rpc& rpc) {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    stream = rpc.jobs->WatchJobs(&ctx, v1::WatchJobsRequest());
    stream->WaitForInitialMetadata();
  }
  grpc::Status Close() {
    ctx.TryCancel();
    v1::JobEvent event;
    while (stream->Read(&event)) {
    }
    return stream->Finish();
  }
};

// A refused watcher's stream ends at once with its status.
grpc::Status Refusal(Rpc& rpc) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  auto stream = rpc.jobs->WatchJobs(&ctx, v1::WatchJobsRequest());
  v1::JobEvent event;
  while (stream->Read(&event)) {
  }
  return stream->Finish();
}

}  // namespace

TEST_CASE("WatchJobs streams beyond --max-watchers are refused RESOURCE_EXHAUSTED naming the cap", "[jobs]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path(), .extra_args = {"--max-watchers", "4"}});
  Rpc rpc(d.channel());
  std::vector<std::unique_ptr<Watcher>> open;
  for (int i = 0; i < 4; ++i) open.push_back(std::make_unique<Watcher>(rpc));

  grpc::Status extra = Refusal(rpc);
  CHECK(extra.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK_THAT(extra.error_message(), Catch::Contains("4 WatchJobs streams") && Catch::Contains("--max-watchers"));

  // Unary RPCs are served while the watchers hold their places.
  CHECK(Stats(rpc).entries() == 0);
  CHECK(Jobs(rpc).empty());

  // Closing one lets a new one in: it stays open past the deadline of a refusal.
  open.back()->Close();
  open.pop_back();
  grpc::Status again = grpc::Status::OK;
  for (int i = 0; i < 50; ++i) {  // the daemon notices the cancel within its 200 ms poll
    again = Refusal(rpc);
    if (again.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(again.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  for (auto& w : open) w->Close();
}

TEST_CASE("kilnd refuses a --max-watchers outside 1 to 1024", "[jobs][config]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path(), .extra_args = {"--max-watchers", "0"}, .wait_ready = false});
  CHECK(d.process().Wait(std::chrono::seconds(30)) == 2);
  CHECK_THAT(d.Log(), Catch::Contains("--max-watchers \"0\" must be an integer from 1 to 1024"));
}
