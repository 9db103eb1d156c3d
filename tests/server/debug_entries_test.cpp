// Debug compiles through a real daemon: -lineinfo, -G and a verbose log are each their own
// cache entry (a verbose request for a cached kernel still gets a verbose log), and GetEntry
// shows what an entry was built from: its manifest, its compile log and its debug controls. A
// daemon started with the cache off says so.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;
namespace v1 = kiln::v1;

namespace {

const std::map<std::string, std::string> kFp16_768 = {{"dtype", "fp16"}, {"hidden", "768"}};

v1::GetKernelRequest WithDebug(v1::GetKernelRequest request, bool lineinfo, bool device_debug, bool verbose_log) {
  request.mutable_debug()->set_lineinfo(lineinfo);
  request.mutable_debug()->set_device_debug(device_debug);
  request.mutable_debug()->set_verbose_log(verbose_log);
  return request;
}

v1::CacheEntry Entry(Rpc& rpc, const std::string& key) {
  v1::GetEntryRequest get;
  get.set_cache_key(key);
  v1::CacheEntry entry;
  grpc::ClientContext ctx;
  auto status = rpc.cache->GetEntry(&ctx, get, &entry);
  INFO(status.error_message());
  REQUIRE(status.ok());
  return entry;
}

bool HasPtxasReport(const std::string& log) { return log.find("ptxas info") != std::string::npos; }

}  // namespace

TEST_CASE("GetEntry carries the entry's manifest, compile log and debug controls", "[cache][debug]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  auto r = Get(rpc, OpRequest("rmsnorm", kFp16_768, "sm_80"));
  REQUIRE(r.status.ok());
  v1::CacheEntry e = Entry(rpc, r.response.cache_key().substr(0, 10));
  CHECK(e.cache_key() == r.response.cache_key());
  CHECK_FALSE(e.debug().lineinfo());
  CHECK_FALSE(e.debug().device_debug());
  CHECK_FALSE(e.debug().verbose_log());
  CHECK_FALSE(e.cuda_headers_version().empty());

  const v1::Manifest& m = e.manifest();
  CHECK(m.uri() == "rmsnorm_fp16_h768");
  CHECK(m.arch() == "sm_80");
  CHECK(m.params().at("hidden") == "768");
  CHECK(m.entries(0) == "kiln_rmsnorm");
  CHECK(m.kernels_tree_sha256().size() == 64);
  CHECK(m.toolchain().cuda_headers() == e.cuda_headers_version());
  CHECK(m.generated_dir() == d.gen_dir() + "/rmsnorm_fp16_h768");
  REQUIRE(m.sources_size() >= 2);
  for (const auto& s : m.sources()) {
    CHECK(s.sha256().size() == 64);
    CHECK(s.size_bytes() > 0);
  }
  // The options of the manifest are the entry's key options.
  REQUIRE(m.options_size() == e.options_size());
  for (int i = 0; i < m.options_size(); ++i) CHECK(m.options(i) == e.options(i));
  // The default entry's log leaves out ptxas' report (the attributes are in the entry).
  CHECK_FALSE(HasPtxasReport(e.compile_log()));
  CHECK(e.kernels(0).registers() > 0);

  // A listing stays light: no manifest, no log, but the debug controls.
  v1::ListEntriesResponse list;
  grpc::ClientContext ctx;
  REQUIRE(rpc.cache->ListEntries(&ctx, v1::ListEntriesRequest(), &list).ok());
  REQUIRE(list.entries_size() == 1);
  CHECK_FALSE(list.entries(0).has_manifest());
  CHECK(list.entries(0).compile_log().empty());
}

TEST_CASE("lineinfo, -G and a verbose log are each a separate entry, a verbose request for a cached kernel gets "
          "its verbose log",
          "[cache][debug]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  const auto plain = OpRequest("rmsnorm", kFp16_768, "sm_80");
  auto base = Get(rpc, plain);
  REQUIRE(base.status.ok());
  REQUIRE(base.response.origin() == v1::ORIGIN_COMPILED);
  REQUIRE(Get(rpc, plain).response.origin() == v1::ORIGIN_MEMORY);

  // Verbose, with the default entry cached: compiled as its own entry, not the cached one.
  auto verbose = Get(rpc, WithDebug(plain, false, false, true));
  REQUIRE(verbose.status.ok());
  CHECK(verbose.response.origin() == v1::ORIGIN_COMPILED);
  CHECK(verbose.response.cache_key() != base.response.cache_key());
  // Same NVRTC arguments, same cubin: the blob store keeps it once.
  CHECK(verbose.response.sha256() == base.response.sha256());
  v1::CacheEntry ve = Entry(rpc, verbose.response.cache_key());
  CHECK(ve.debug().verbose_log());
  CHECK_FALSE(ve.debug().lineinfo());
  CHECK(HasPtxasReport(ve.compile_log()));
  CHECK(std::find(ve.options().begin(), ve.options().end(), "--ptxas-options=-v") != ve.options().end());
  // And its job's log has the report too.
  v1::GetJobRequest get_job;
  get_job.set_id(verbose.response.job_id());
  v1::Job job;
  grpc::ClientContext job_ctx;
  REQUIRE(rpc.jobs->GetJob(&job_ctx, get_job, &job).ok());
  CHECK(HasPtxasReport(job.log()));
  // A repeat verbose request is a hit on that entry.
  CHECK(Get(rpc, WithDebug(plain, false, false, true)).response.origin() == v1::ORIGIN_MEMORY);

  auto lineinfo = Get(rpc, WithDebug(plain, true, false, false));
  REQUIRE(lineinfo.status.ok());
  CHECK(lineinfo.response.origin() == v1::ORIGIN_COMPILED);
  v1::CacheEntry le = Entry(rpc, lineinfo.response.cache_key());
  CHECK(le.debug().lineinfo());
  CHECK_FALSE(le.debug().verbose_log());
  CHECK(std::find(le.options().begin(), le.options().end(), "-lineinfo") != le.options().end());

  auto device_debug = Get(rpc, WithDebug(plain, false, true, false));
  REQUIRE(device_debug.status.ok());
  v1::CacheEntry ge = Entry(rpc, device_debug.response.cache_key());
  CHECK(ge.debug().device_debug());
  CHECK(std::find(ge.options().begin(), ge.options().end(), "-G") != ge.options().end());

  std::set<std::string> keys = {base.response.cache_key(), verbose.response.cache_key(), lineinfo.response.cache_key(),
                                device_debug.response.cache_key()};
  CHECK(keys.size() == 4);
  CHECK(Stats(rpc).entries() == 4);
  // The default entry is untouched by the debug variants.
  v1::CacheEntry be = Entry(rpc, base.response.cache_key());
  CHECK_FALSE(HasPtxasReport(be.compile_log()));
  CHECK(be.job_id() == base.response.job_id());
}

TEST_CASE("a verbose log keeps ptxas' report on the nvJitLink path too", "[cache][debug]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  auto request = SourceRequest("linked",
                               "extern \"C\" __device__ float twice(float x);\n"
                               "extern \"C\" __global__ void k(float* p) { p[0] = twice(p[0]); }\n",
                               {"k"});
  auto* unit = request.mutable_source()->add_extra_units();
  unit->set_name("twice.cu");
  unit->set_code("extern \"C\" __device__ float twice(float x) { return 2 * x; }\n");
  auto plain = Get(rpc, request);
  INFO(plain.status.error_message());
  REQUIRE(plain.status.ok());
  auto verbose = Get(rpc, WithDebug(request, false, false, true));
  INFO(verbose.status.error_message());
  REQUIRE(verbose.status.ok());
  CHECK(verbose.response.cache_key() != plain.response.cache_key());
  v1::CacheEntry ve = Entry(rpc, verbose.response.cache_key());
  CHECK(ve.debug().verbose_log());
  CHECK(HasPtxasReport(ve.compile_log()));
  CHECK_FALSE(HasPtxasReport(Entry(rpc, plain.response.cache_key()).compile_log()));
}

TEST_CASE("the cache-off diagnostic control is said loudly when the daemon starts", "[cache][debug]") {
  TempDir dir;
  DaemonProcess off({.root = dir.path(), .env = {{"KILN_NO_CACHE", "1"}}});
  CHECK_THAT(off.Log(), Catch::Contains("the cache is OFF (--no-cache / KILN_NO_CACHE)"));
  CHECK_THAT(off.Log(), Catch::Contains("a diagnostic control"));
}
