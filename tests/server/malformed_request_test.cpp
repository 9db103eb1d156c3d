// A request whose bytes are not the method's protobuf message (issue 15): gRPC's own answer
// was INTERNAL with no details; kilnd answers INVALID_ARGUMENT saying which message could not
// be parsed, and keeps serving.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <mutex>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;

namespace {

// Calls `method` with `bytes` as the request body, whatever they are.
grpc::Status CallWithBytes(const DaemonProcess& d, const std::string& method, const std::string& bytes) {
  grpc::GenericStub stub(d.channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), reply;
  grpc::Status status;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &reply, [&](grpc::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    status = s;
    done = true;
    cv.notify_one();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return status;
}

}  // namespace

TEST_CASE("a request that is not its method's protobuf message is INVALID_ARGUMENT saying so", "[kernel]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  // A field 1 (op) that claims 2^28 bytes and ends after four: no parser can read it.
  const std::string garbage("\x0a\xff\xff\xff\x7f"
                            "abcd",
                            9);
  for (const char* method : {"/kiln.v1.KernelService/GetKernel", "/kiln.v1.CacheService/GetStats",
                             "/kiln.v1.JobService/GetJob", "/grpc.health.v1.Health/Check"}) {
    INFO(method);
    grpc::Status s = CallWithBytes(d, method, garbage);
    INFO(s.error_message());
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(s.error_message(), Catch::Contains("could not be parsed"));
  }
  Rpc rpc(d.channel());
  CHECK(Stats(rpc).entries() == 0);  // still serving
}
