// kilnd's side of the same-node fetch (proto/local_fetch.h), spoken over raw sockets: a request
// gets the reply gRPC would give; a malformed or oversized frame gets INVALID_ARGUMENT (and the
// daemon keeps serving); connections that say nothing, or half the magic, hold up neither
// gRPC nor the protocol; gRPC clients on the same socket are untouched.
#include <google/protobuf/util/message_differencer.h>
#include <sys/socket.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/v1/kernel.grpc.pb.h"
#include "proto/crc32c.h"
#include "proto/local_fetch.h"
#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/local_fetch_wire.h"
#include "tests/support/temp_dir.h"

using namespace kiln;
using namespace kiln::testing;

namespace {

using Clock = std::chrono::steady_clock;

// A connection to kilnd's socket (tests/support/local_fetch_wire.h speaks the frames).
int Connect(const std::string& path) {
  const int fd = ConnectUnixSocket(path);
  REQUIRE(fd >= 0);
  return fd;
}

v1::GetKernelRequest RmsnormRequest(const std::string& dtype) {
  v1::GetKernelRequest request;
  request.mutable_op()->set_name("rmsnorm");
  (*request.mutable_op()->mutable_params())["dtype"] = dtype;
  (*request.mutable_op()->mutable_params())["hidden"] = "1024";
  request.mutable_target()->set_arch("sm_90");
  return request;
}

bool ClosedByPeer(int fd, std::chrono::milliseconds within) {
  char c;
  return proto::ReadExact(fd, &c, 1, Clock::now() + within).outcome == proto::IoOutcome::kClosed;
}

}  // namespace

TEST_CASE("kilnd answers the same-node protocol as it answers gRPC", "[daemon][local_fetch]") {
  TempDir dir("kiln-local-fetch-protocol");
  DaemonProcess daemon(DaemonOptions{.root = dir.path()});
  // Connections that never speak, or stop after half the magic, are waiting to be sorted.
  std::vector<int> silent = {Connect(daemon.socket()), Connect(daemon.socket())};
  REQUIRE(::send(silent[1], "KILN", 4, MSG_NOSIGNAL) == 4);

  int fd = Connect(daemon.socket());
  REQUIRE(proto::WriteAll(fd, proto::kLocalFetchMagic, {}, Clock::now() + std::chrono::seconds(5)).ok());
  LocalFetchReply r = ExchangeLocalFrame(fd, RmsnormRequest("bf16").SerializeAsString(),
                                         RmsnormRequest("bf16").ByteSizeLong());
  REQUIRE_FALSE(r.closed);
  REQUIRE(r.code == 0);
  v1::GetKernelResponse local;
  REQUIRE(local.ParseFromString(r.body));
  CHECK(local.uri() == "rmsnorm_bf16_h1024");
  CHECK(local.origin() == v1::ORIGIN_COMPILED);
  REQUIRE(local.has_cubin_crc32c());
  CHECK(local.blob_path().empty());  // prefer_blob_path unset: the bytes
  CHECK(proto::Crc32c(local.cubin()) == local.cubin_crc32c());

  // The same request over gRPC on the same socket: the same entry, the same checksums.
  auto stub = v1::KernelService::NewStub(daemon.channel());
  grpc::ClientContext context;
  v1::GetKernelResponse via_grpc;
  REQUIRE(stub->GetKernel(&context, RmsnormRequest("bf16"), &via_grpc).ok());
  CHECK(via_grpc.cache_key() == local.cache_key());
  CHECK(via_grpc.sha256() == local.sha256());
  CHECK(via_grpc.cubin_crc32c() == local.cubin_crc32c());
  CHECK(proto::Crc32c(via_grpc.cubin()) == local.cubin_crc32c());
  CHECK(via_grpc.origin() == v1::ORIGIN_MEMORY);
  // The same-node reply is the artifact's fields serialized once and this serve's appended
  // (kernel_wire.h, ArtifactReplyFields): parsed, it must be the message gRPC builds, field for
  // field, but for what differs between a compile and a memory hit.
  for (v1::GetKernelResponse* reply : {&local, &via_grpc}) {
    CHECK(reply->has_timings());
    reply->clear_timings();
    reply->clear_origin();
    reply->clear_job_id();
  }
  REQUIRE(local.kernels_size() > 0);
  REQUIRE(local.launch_size() > 0);
  REQUIRE(local.params_size() > 0);
  std::string difference;
  google::protobuf::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(&difference);
  CHECK(differ.Compare(local, via_grpc));
  INFO(difference);
  CHECK(difference.empty());

  SECTION("the connection stays open for the next request, blob path included") {
    auto request = RmsnormRequest("bf16");
    request.set_prefer_blob_path(true);
    LocalFetchReply again = ExchangeLocalFrame(fd, request.SerializeAsString(), request.ByteSizeLong());
    REQUIRE(again.code == 0);
    v1::GetKernelResponse second;
    REQUIRE(second.ParseFromString(again.body));
    CHECK(second.origin() == v1::ORIGIN_MEMORY);
    CHECK_FALSE(second.blob_path().empty());
    CHECK(proto::Crc32c(ReadFile(second.blob_path())) == second.cubin_crc32c());
  }
  SECTION("each request on the connection is answered as itself, nothing of the one before kept") {
    // The connection parses each request into the last one's message (local_fetch_server.cpp):
    // a field the next request leaves out must not survive.
    auto with_blob = RmsnormRequest("bf16");
    with_blob.set_prefer_blob_path(true);
    with_blob.set_client_id("first-client");
    LocalFetchReply first = ExchangeLocalFrame(fd, with_blob.SerializeAsString(), with_blob.ByteSizeLong());
    REQUIRE(first.code == 0);
    v1::GetKernelResponse blob_reply;
    REQUIRE(blob_reply.ParseFromString(first.body));
    CHECK_FALSE(blob_reply.blob_path().empty());
    // A request larger than the connection's first arena block (64 KiB): a source whose code
    // carries a 100 KB comment.
    v1::GetKernelRequest large;
    large.mutable_source()->set_name("padded");
    large.mutable_source()->set_code("// " + std::string(100 * 1024, 'x') +
                                     "\nextern \"C\" __global__ void padded(float* p) { p[0] = 1.0f; }\n");
    large.mutable_source()->add_entries("padded");
    large.mutable_target()->set_arch("sm_90");
    LocalFetchReply big = ExchangeLocalFrame(fd, large.SerializeAsString(), large.ByteSizeLong());
    INFO(big.body.substr(0, 300));
    REQUIRE(big.code == 0);
    v1::GetKernelResponse big_reply;
    REQUIRE(big_reply.ParseFromString(big.body));
    CHECK(big_reply.blob_path().empty());
    const auto fp16 = RmsnormRequest("fp16");  // no blob path wished, another spec
    LocalFetchReply second = ExchangeLocalFrame(fd, fp16.SerializeAsString(), fp16.ByteSizeLong());
    REQUIRE(second.code == 0);
    v1::GetKernelResponse bytes_reply;
    REQUIRE(bytes_reply.ParseFromString(second.body));
    CHECK(bytes_reply.uri() == "rmsnorm_fp16_h1024");
    CHECK(bytes_reply.blob_path().empty());
    CHECK_FALSE(bytes_reply.cubin().empty());
    CHECK(proto::Crc32c(bytes_reply.cubin()) == bytes_reply.cubin_crc32c());
  }
  SECTION("the daemon's refusal comes as its code and message") {
    LocalFetchReply bad = ExchangeLocalFrame(fd, RmsnormRequest("int3").SerializeAsString(),
                                             RmsnormRequest("int3").ByteSizeLong());
    CHECK(bad.code == static_cast<uint32_t>(grpc::StatusCode::INVALID_ARGUMENT));
    CHECK(bad.body.find("int3") != std::string::npos);
  }
  SECTION("bytes that are not a request: INVALID_ARGUMENT, and the connection still serves") {
    LocalFetchReply bad = ExchangeLocalFrame(fd, std::string("\xff\xff\xff\xff not protobuf", 17), 17);
    CHECK(bad.code == static_cast<uint32_t>(grpc::StatusCode::INVALID_ARGUMENT));
    CHECK(bad.body.find("not a kiln.v1.GetKernelRequest") != std::string::npos);
    LocalFetchReply good = ExchangeLocalFrame(fd, RmsnormRequest("bf16").SerializeAsString(),
                                              RmsnormRequest("bf16").ByteSizeLong());
    CHECK(good.code == 0);
  }
  SECTION("a frame over the size limit: INVALID_ARGUMENT naming the limit, then closed") {
    LocalFetchReply big = ExchangeLocalFrame(fd, "", proto::kMaxLocalRequestBytes + 1);
    CHECK(big.code == static_cast<uint32_t>(grpc::StatusCode::INVALID_ARGUMENT));
    CHECK(big.body.find(std::to_string(proto::kMaxLocalRequestBytes)) != std::string::npos);
    CHECK(ClosedByPeer(fd, std::chrono::seconds(5)));
    // The daemon serves on.
    int other = Connect(daemon.socket());
    REQUIRE(proto::WriteAll(other, proto::kLocalFetchMagic, {}, Clock::now() + std::chrono::seconds(5)).ok());
    CHECK(ExchangeLocalFrame(other, RmsnormRequest("bf16").SerializeAsString(), RmsnormRequest("bf16").ByteSizeLong())
              .code == 0);
    ::close(other);
  }
  SECTION("half a magic is closed once the sorting time is over") {
    CHECK(ClosedByPeer(silent[1], std::chrono::milliseconds(3 * 1000)));
  }
  ::close(fd);
  for (int s : silent) ::close(s);
}
