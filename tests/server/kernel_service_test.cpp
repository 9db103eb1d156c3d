// KernelService.GetKernel against a real kilnd: origins, keys, raw sources, the LTO path,
// arch context, compile errors, malformed requests, and kernel edits picked up live.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <thread>

#include "cache/sha256.h"
#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;
namespace v1 = kiln::v1;
namespace fs = std::filesystem;

namespace {
const std::map<std::string, std::string> kBf16_4096 = {{"dtype", "bf16"}, {"hidden", "4096"}};

bool IsElf(const std::string& bytes) {
  return bytes.size() > 4 && bytes.compare(0, 4,
                                           "\x7f"
                                           "ELF") == 0;
}
}  // namespace

TEST_CASE("an op is compiled once, then served from memory, then from disk after a restart", "[kernel]") {
  TempDir dir;
  std::string key, sha;
  {
    DaemonProcess d({.root = dir.path()});
    Rpc rpc(d.channel());
    auto first = Get(rpc, OpRequest("rmsnorm", kBf16_4096));
    REQUIRE(first.status.ok());
    const auto& r = first.response;
    CHECK(r.origin() == v1::ORIGIN_COMPILED);
    CHECK(r.uri() == "rmsnorm_bf16_h4096");
    CHECK(r.arch() == "sm_90a");
    CHECK(IsElf(r.cubin()));
    CHECK(r.cubin_size() == r.cubin().size());
    CHECK(r.sha256() == kiln::cache::Sha256Hex(r.cubin()));
    CHECK(r.cache_key().size() == 64);
    CHECK_FALSE(r.job_id().empty());
    REQUIRE(r.kernels_size() == 1);
    CHECK(r.kernels(0).name() == "kiln_rmsnorm");
    CHECK(r.kernels(0).registers() > 0);
    CHECK(r.kernels(0).max_threads_per_block() > 0);
    REQUIRE(r.launch_size() == 1);  // the one entry's launch hints, as the generator chose them
    CHECK(r.launch(0).entry() == "kiln_rmsnorm");
    CHECK(r.launch(0).block() > 0);
    CHECK(r.launch(0).items_per_block() > 0);
    CHECK(r.params().at("vec") == "8");
    CHECK(r.timings().compile_ms() > 0);
    key = r.cache_key();
    sha = r.sha256();

    auto second = Get(rpc, OpRequest("rmsnorm", kBf16_4096));
    REQUIRE(second.status.ok());
    CHECK(second.response.origin() == v1::ORIGIN_MEMORY);
    CHECK(second.response.cache_key() == key);
    CHECK(second.response.cubin() == r.cubin());
    CHECK(second.response.timings().compile_ms() == 0);
    auto stats = Stats(rpc);
    CHECK(stats.compiles() == 1);
    CHECK(stats.memory_hits() == 1);
    CHECK(stats.misses() == 1);
    CHECK(stats.entries() == 1);
  }
  DaemonProcess again({.root = dir.path()});
  Rpc rpc(again.channel());
  auto third = Get(rpc, OpRequest("rmsnorm", kBf16_4096));
  REQUIRE(third.status.ok());
  CHECK(third.response.origin() == v1::ORIGIN_DISK);
  CHECK(third.response.cache_key() == key);
  CHECK(third.response.sha256() == sha);
  CHECK(Stats(rpc).compiles() == 0);
}

TEST_CASE("equal requests give equal keys, every param and the arch change the key", "[kernel]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  auto key_of = [&](const std::string& op, std::map<std::string, std::string> params, const std::string& arch) {
    auto r = Get(rpc, OpRequest(op, params, arch));
    INFO(r.status.error_message());
    REQUIRE(r.status.ok());
    return std::pair(r.response.cache_key(), r.response.uri());
  };
  auto base = key_of("rmsnorm", kBf16_4096, "sm_90a");
  CHECK(key_of("rmsnorm", kBf16_4096, "sm_90a") == base);
  // An explicit default is the same specialization.
  CHECK(key_of("rmsnorm", {{"dtype", "bf16"}, {"hidden", "4096"}, {"vec", "8"}}, "sm_90a") == base);
  std::set<std::string> keys = {base.first};
  for (auto [op, params, arch] : std::vector<std::tuple<std::string, std::map<std::string, std::string>, std::string>>{
           {"rmsnorm", {{"dtype", "fp16"}, {"hidden", "4096"}}, "sm_90a"},
           {"rmsnorm", {{"dtype", "bf16"}, {"hidden", "4095"}}, "sm_90a"},
           {"rmsnorm", {{"dtype", "bf16"}, {"hidden", "4096"}, {"vec", "4"}}, "sm_90a"},
           {"rmsnorm", kBf16_4096, "sm_80"},
           {"rmsnorm", kBf16_4096, "sm_90"},
           {"fused_add_rmsnorm", kBf16_4096, "sm_90a"}}) {
    auto k = key_of(op, params, arch);
    CHECK(keys.insert(k.first).second);
  }
  auto v4 = Get(rpc, OpRequest("rmsnorm", {{"dtype", "bf16"}, {"hidden", "4096"}, {"vec", "4"}}));
  CHECK(v4.response.uri() == "rmsnorm_bf16_h4096_v4");
  auto sm90 = Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_90"));
  CHECK(sm90.response.arch() == "sm_90");  // a portable spec is built for the target as asked
}

TEST_CASE("raw sources compile with allowed options, options and code change the key", "[kernel]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  auto a = Get(rpc, SourceRequest("vadd", VaddSource(), {"vadd"}, {"-DN=4"}));
  INFO(a.status.error_message());
  REQUIRE(a.status.ok());
  CHECK(a.response.origin() == v1::ORIGIN_COMPILED);
  CHECK(IsElf(a.response.cubin()));
  REQUIRE(a.response.kernels_size() == 1);
  CHECK(a.response.kernels(0).name() == "vadd");
  CHECK(a.response.uri().rfind("src_vadd_", 0) == 0);
  auto b = Get(rpc, SourceRequest("vadd", VaddSource(), {"vadd"}, {"-DN=5"}));
  REQUIRE(b.status.ok());
  CHECK(b.response.cache_key() != a.response.cache_key());
  auto c = Get(rpc, SourceRequest("vadd", VaddSource() + "\n// edited\n", {"vadd"}, {"-DN=4"}));
  REQUIRE(c.status.ok());
  CHECK(c.response.cache_key() != a.response.cache_key());
  auto again = Get(rpc, SourceRequest("vadd", VaddSource(), {"vadd"}, {"-DN=4"}));
  CHECK(again.response.origin() == v1::ORIGIN_MEMORY);
  CHECK(again.response.cache_key() == a.response.cache_key());
}

TEST_CASE("an option string holding several words is refused naming it", "[kernel]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  // "-DN=1 -I/etc" once passed as one -D whose value smuggled an include path.
  auto r = Get(rpc, SourceRequest("vadd", VaddSource(), {"vadd"}, {"-DN=1 -I/etc"}));
  CHECK(r.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(r.status.error_message(), Catch::Contains("'-DN=1 -I/etc'") && Catch::Contains("more than one option"));
  CHECK(Jobs(rpc).empty());  // refused before any compile
  // The same words as separate options are checked one by one: -I is refused on its own.
  auto split = Get(rpc, SourceRequest("vadd", VaddSource(), {"vadd"}, {"-DN=1", "-I/etc"}));
  CHECK(split.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(split.status.error_message(), Catch::Contains("'-I/etc'"));
}

TEST_CASE("units that call each other's device functions are linked by nvJitLink", "[kernel]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  auto request = SourceRequest("linked",
                               "extern __device__ float scale(float x);\n"
                               "extern \"C\" __global__ void apply(float* x, int n) {\n"
                               "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                               "  if (i < n) x[i] = scale(x[i]);\n}\n",
                               {"apply"});
  auto* unit = request.mutable_source()->add_extra_units();
  unit->set_name("scale.cu");
  unit->set_code("__device__ float scale(float x) { return 3.0f * x; }\n");
  auto r = Get(rpc, request);
  INFO(r.status.error_message());
  REQUIRE(r.status.ok());
  CHECK(IsElf(r.response.cubin()));
  CHECK(r.response.timings().link_ms() > 0);
  REQUIRE(r.response.kernels_size() == 1);
  CHECK(r.response.kernels(0).name() == "apply");
}

TEST_CASE("a target no family of the spec supports fails before compiling, naming both", "[kernel]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  auto r = Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_75"));
  REQUIRE(r.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(r.status.error_message(), Catch::Contains("sm_75"));
  CHECK_THAT(r.status.error_message(), Catch::Contains("sm_80"));
  CHECK_THAT(r.status.error_message(), Catch::Contains("rmsnorm_bf16_h4096"));
  CHECK(Stats(rpc).compiles() == 0);
  CHECK(Jobs(rpc).empty());
}

TEST_CASE("a daemon started with --arch compiles only for those targets", "[kernel]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path(), .extra_args = {"--arch", "sm_90a"}});
  Rpc rpc(d.channel());
  auto r = Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_80"));
  REQUIRE(r.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(r.status.error_message(), Catch::Contains("compiles only for sm_90a"));
  CHECK(Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_90a")).status.ok());
}

TEST_CASE("malformed requests get a clear status and the daemon keeps serving", "[kernel]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  struct Case {
    std::string what;
    v1::GetKernelRequest request;
    grpc::StatusCode code;
    std::string says;
  };
  v1::GetKernelRequest nothing;
  nothing.mutable_target()->set_arch("sm_90a");
  auto no_arch = OpRequest("rmsnorm", kBf16_4096, "");
  auto big = SourceRequest("big", std::string(2 << 20, ' ') + VaddSource(), {"vadd"});
  std::vector<Case> cases = {
      {"no kernel named", nothing, grpc::StatusCode::INVALID_ARGUMENT, "set \"op\""},
      {"unknown op", OpRequest("softmaxx", kBf16_4096), grpc::StatusCode::NOT_FOUND, "softmaxx"},
      {"bad dtype", OpRequest("rmsnorm", {{"dtype", "int3"}, {"hidden", "4096"}}), grpc::StatusCode::INVALID_ARGUMENT,
       "int3"},
      {"bad hidden", OpRequest("rmsnorm", {{"dtype", "bf16"}, {"hidden", "-4"}}), grpc::StatusCode::INVALID_ARGUMENT,
       "hidden"},
      {"missing param", OpRequest("rmsnorm", {{"dtype", "bf16"}}), grpc::StatusCode::INVALID_ARGUMENT, "hidden"},
      {"unknown param", OpRequest("rmsnorm", {{"dtype", "bf16"}, {"hidden", "8"}, {"colour", "red"}}),
       grpc::StatusCode::INVALID_ARGUMENT, "colour"},
      {"no arch", no_arch, grpc::StatusCode::INVALID_ARGUMENT, "target.arch is required"},
      {"unknown arch", OpRequest("rmsnorm", kBf16_4096, "sm_999"), grpc::StatusCode::INVALID_ARGUMENT, "sm_999"},
      {"not an arch", OpRequest("rmsnorm", kBf16_4096, "gfx90a"), grpc::StatusCode::INVALID_ARGUMENT, "gfx90a"},
      {"empty source", SourceRequest("empty", "", {"vadd"}), grpc::StatusCode::INVALID_ARGUMENT, "empty"},
      {"oversized source", big, grpc::StatusCode::INVALID_ARGUMENT, "bytes"},
      {"no entries", SourceRequest("vadd", VaddSource(), {}), grpc::StatusCode::INVALID_ARGUMENT, "entr"},
      {"bad name", SourceRequest("../etc", VaddSource(), {"vadd"}), grpc::StatusCode::INVALID_ARGUMENT, "name"},
      {"forbidden option", SourceRequest("vadd", VaddSource(), {"vadd"}, {"--include-path=/etc"}),
       grpc::StatusCode::INVALID_ARGUMENT, "--include-path=/etc"},
      {"forbidden include", SourceRequest("inc", "#include \"/etc/passwd\"\n" + VaddSource(), {"vadd"}),
       grpc::StatusCode::INVALID_ARGUMENT, "/etc/passwd"},
      {"include escaping", SourceRequest("inc", "#include \"../../secret.h\"\n" + VaddSource(), {"vadd"}),
       grpc::StatusCode::INVALID_ARGUMENT, ".."},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    auto r = Get(rpc, c.request);
    INFO(r.status.error_message());
    CHECK(r.status.error_code() == c.code);
    CHECK_THAT(r.status.error_message(), Catch::Contains(c.says));
  }
  CHECK(Stats(rpc).compiles() == 0);
  auto ok = Get(rpc, OpRequest("rmsnorm", kBf16_4096));
  CHECK(ok.status.ok());
}

TEST_CASE("a compile error returns the NVRTC log and the generated source folder", "[kernel]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  auto r = Get(rpc, SourceRequest("broken", "extern \"C\" __global__ void broken(int* x) { x[0] = undeclared; }\n",
                                  {"broken"}));
  REQUIRE(r.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  const std::string msg = r.status.error_message();
  CHECK_THAT(msg, Catch::Contains("undeclared"));
  CHECK_THAT(msg, Catch::Contains(d.gen_dir()));
  auto jobs = Jobs(rpc);
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0].state() == v1::JOB_STATE_FAILED);
  CHECK_THAT(msg, Catch::Contains(jobs[0].id()));
  v1::GetJobRequest get;
  get.set_id(jobs[0].id());
  v1::Job job;
  grpc::ClientContext ctx;
  REQUIRE(rpc.jobs->GetJob(&ctx, get, &job).ok());
  CHECK_THAT(job.log(), Catch::Contains("undeclared"));
  CHECK(Stats(rpc).compile_failures() == 1);
  CHECK(Stats(rpc).entries() == 0);
  // The sources are where the message says.
  CHECK(fs::exists(job.manifest().generated_dir()));
}

TEST_CASE("editing a kernel header changes the key and recompiles with no restart", "[kernel]") {
  TempDir dir;
  std::string kernels = dir / "kernels";
  fs::copy(KernelsDir(), kernels, fs::copy_options::recursive);
  DaemonProcess d({.root = dir.path(), .kernels_dir = kernels});
  Rpc rpc(d.channel());
  auto before = Get(rpc, OpRequest("rmsnorm", kBf16_4096));
  REQUIRE(before.status.ok());
  // Any header of the include tree may be included by the compile.
  std::string header;
  for (auto& e : fs::recursive_directory_iterator(kernels + "/include"))
    if (e.path().extension() == ".cuh") header = e.path().string();
  REQUIRE_FALSE(header.empty());
  std::string original = ReadFile(header);
  WriteFile(header, original + "\n// an edit a kernel author made\n");
  auto after = Get(rpc, OpRequest("rmsnorm", kBf16_4096));
  REQUIRE(after.status.ok());
  CHECK(after.response.cache_key() != before.response.cache_key());
  CHECK(after.response.origin() == v1::ORIGIN_COMPILED);
  WriteFile(header, original);
  auto reverted = Get(rpc, OpRequest("rmsnorm", kBf16_4096));
  REQUIRE(reverted.status.ok());
  CHECK(reverted.response.cache_key() == before.response.cache_key());
  CHECK(reverted.response.origin() == v1::ORIGIN_MEMORY);
}

TEST_CASE("a local client may take the read-only blob path instead of the bytes", "[kernel]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  auto request = OpRequest("fused_add_rmsnorm", {{"dtype", "fp16"}, {"hidden", "5120"}});
  request.set_prefer_blob_path(true);
  auto r = Get(rpc, request);
  REQUIRE(r.status.ok());
  CHECK(r.response.cubin().empty());
  REQUIRE_FALSE(r.response.blob_path().empty());
  CHECK(r.response.blob_path().rfind(d.cache_dir(), 0) == 0);
  std::string bytes = ReadFile(r.response.blob_path());
  CHECK(bytes.size() == r.response.cubin_size());
  CHECK(kiln::cache::Sha256Hex(bytes) == r.response.sha256());
  CHECK(r.response.kernels(0).name() == "kiln_fused_add_rmsnorm");
}

TEST_CASE("a compile past --job-timeout-s is abandoned: waiters told, result discarded", "[kernel]") {
  TempDir dir;
  // 3 s: enough for a small compile beside the big one on two busy cores.
  DaemonProcess d({.root = dir.path(), .extra_args = {"--job-timeout-s", "3", "--shutdown-grace-s", "0"}});
  Rpc rpc(d.channel());
  // Two thousand unrolled kernels: ~20 s of NVRTC here, several seconds on a fast CPU.
  std::string slow = "template <int K> __device__ __forceinline__ float chain(float x) {\n"
                     "#pragma unroll\n"
                     "  for (int i = 0; i < 64; ++i) x = fmaf(x, 1.0001f + K * 1e-6f, 0.5f * (i + K));\n"
                     "  return x;\n}\n";
  for (int k = 0; k < 2000; ++k)
    slow += "extern \"C\" __global__ void k" + std::to_string(k) + "(float* x) { x[threadIdx.x] = chain<" +
            std::to_string(k) + ">(x[threadIdx.x]); }\n";
  auto r = Get(rpc, SourceRequest("slow", slow, {"k0"}));
  REQUIRE(r.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  CHECK_THAT(r.status.error_message(), Catch::Contains("--job-timeout-s"));
  auto jobs = Jobs(rpc);
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0].state() == v1::JOB_STATE_ABANDONED);
  // The daemon keeps serving while NVRTC grinds on in its slot.
  auto other = Get(rpc, OpRequest("rmsnorm", {{"dtype", "fp16"}, {"hidden", "128"}}));
  INFO(other.status.error_message() << "\n" << d.Log());
  CHECK(other.status.ok());
  // When NVRTC finally returns, the abandoned job's cubin is thrown away, not committed.
  const std::string discarded = "finished after it was abandoned; its cubin is discarded";
  for (int i = 0; i < 1800 && d.Log().find(discarded) == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_THAT(d.Log(), Catch::Contains(discarded));
  CHECK(Stats(rpc).entries() == 1);
  CHECK(Jobs(rpc).back().state() == v1::JOB_STATE_ABANDONED);
}
