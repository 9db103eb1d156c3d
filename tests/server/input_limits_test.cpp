// Issue 15: a request with a huge string (a 1 MB op name) must be refused as INVALID_ARGUMENT
// with a short message naming the field and its limit, not echoed into a grpc-message that
// gRPC replaces by RESOURCE_EXHAUSTED; and the daemon keeps serving.
#include <catch2/catch.hpp>

#include <string>

#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;
namespace v1 = kiln::v1;

namespace {

const std::map<std::string, std::string> kBf16_4096 = {{"dtype", "bf16"}, {"hidden", "4096"}};
constexpr size_t kShort = 1024;  // what "a short message" means here

void CheckRefused(const grpc::Status& status, const std::string& field, const std::string& limit) {
  INFO(status.error_message().substr(0, 2048));
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(status.error_message().size() < kShort);
  CHECK_THAT(status.error_message(), Catch::Contains(field));
  CHECK_THAT(status.error_message(), Catch::Contains(limit));
}

}  // namespace

TEST_CASE("huge strings in GetKernel are refused naming the field and its limit", "[input_limits]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  const std::string mb(1 << 20, 'a');
  const std::string kb100(100 << 10, 'b');

  CheckRefused(Get(rpc, OpRequest(mb, kBf16_4096)).status, "op.name is 1048576 bytes long", "at most 64 bytes");
  CheckRefused(Get(rpc, OpRequest("rmsnorm", {{"dtype", kb100}, {"hidden", "4096"}})).status,
               "op.params['dtype'] is 102400 bytes long", "at most 256 bytes");
  CheckRefused(Get(rpc, OpRequest("rmsnorm", {{kb100, "bf16"}, {"hidden", "4096"}})).status,
               "a key of op.params is 102400 bytes long", "at most 64 bytes");
  CheckRefused(Get(rpc, SourceRequest("vadd", VaddSource(), {"vadd"}, {"-DN=" + kb100})).status,
               "source.options[0] is 102404 bytes long", "at most 1024 bytes");
  CheckRefused(Get(rpc, SourceRequest(kb100, VaddSource(), {"vadd"})).status, "source.name", "at most 64 bytes");
  CheckRefused(Get(rpc, SourceRequest("vadd", VaddSource(), {kb100})).status, "source.entries[0]", "at most 128 bytes");
  auto unit = SourceRequest("vadd", VaddSource(), {"vadd"});
  auto* extra = unit.mutable_source()->add_extra_units();
  extra->set_name(kb100);
  extra->set_code("__device__ int f() { return 1; }");
  CheckRefused(Get(rpc, unit).status, "source.extra_units[0].name", "at most 64 bytes");
  CheckRefused(Get(rpc, OpRequest("rmsnorm", kBf16_4096, kb100)).status, "target.arch", "at most 32 bytes");
  auto client = OpRequest("rmsnorm", kBf16_4096);
  client.set_client_id(mb);
  CheckRefused(Get(rpc, client).status, "client_id", "at most 256 bytes");

  // The code may be up to 1 MiB, and the include policy quotes the line it refuses: the message
  // is cut all the same.
  auto include = Get(rpc, SourceRequest("inc", "#include \"" + kb100 + ".h\"\n" + VaddSource(), {"vadd"})).status;
  CHECK(include.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(include.error_message().size() < 8192);
  CHECK_THAT(include.error_message(), Catch::Contains("more bytes of this message left out"));

  v1::ListOpsRequest list_ops;
  list_ops.set_name(mb);
  v1::ListOpsResponse ops;
  grpc::ClientContext ctx;
  CheckRefused(rpc.kernels->ListOps(&ctx, list_ops, &ops), "name is 1048576 bytes long", "at most 64 bytes");

  // The daemon is still there, and a normal request is served.
  CHECK(Stats(rpc).compiles() == 0);
  CHECK(Get(rpc, OpRequest("rmsnorm", kBf16_4096)).status.ok());
}

TEST_CASE("huge strings in the cache and job services are refused naming the field and its limit", "[input_limits]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  const std::string mb(1 << 20, 'c');
  {
    v1::GetEntryRequest request;
    request.set_cache_key(mb);
    v1::CacheEntry entry;
    grpc::ClientContext ctx;
    CheckRefused(rpc.cache->GetEntry(&ctx, request, &entry), "cache_key is 1048576 bytes long", "at most 64 bytes");
  }
  {
    v1::EvictEntriesRequest request;
    request.add_cache_keys(mb);
    v1::EvictEntriesResponse evicted;
    grpc::ClientContext ctx;
    CheckRefused(rpc.cache->EvictEntries(&ctx, request, &evicted), "cache_keys[0]", "at most 64 bytes");
  }
  {
    v1::ListEntriesRequest request;
    request.set_uri_prefix(mb);
    v1::ListEntriesResponse list;
    grpc::ClientContext ctx;
    CheckRefused(rpc.cache->ListEntries(&ctx, request, &list), "uri_prefix", "at most 256 bytes");
  }
  {
    v1::GetJobRequest request;
    request.set_id(mb);
    v1::Job job;
    grpc::ClientContext ctx;
    CheckRefused(rpc.jobs->GetJob(&ctx, request, &job), "id is 1048576 bytes long", "at most 64 bytes");
  }
  {
    // Within the limit but wrong: the message quotes a bounded prefix.
    v1::GetJobRequest request;
    request.set_id(std::string(64, 'j'));
    v1::Job job;
    grpc::ClientContext ctx;
    auto s = rpc.jobs->GetJob(&ctx, request, &job);
    CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
    CHECK(s.error_message().size() < kShort);
  }
  CHECK(Get(rpc, OpRequest("rmsnorm", kBf16_4096)).status.ok());
}
