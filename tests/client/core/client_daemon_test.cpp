// The client library against a real kilnd (a child process in temp folders), on what needs no
// GPU: fetching cubins (blob file or bytes, checksum verified, falling back to bytes when the
// blob file is gone or damaged), the daemon's errors as kiln::Status, Ping and kiln_connect.
#include <catch2/catch.hpp>

#include <filesystem>

#include "client/core/rpc/sha256.h"
#include "kiln/c_abi.h"
#include "kiln/client.h"
#include "kiln/kernel.h"
#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/temp_dir.h"

namespace {

using kiln::StatusCode;
namespace fs = std::filesystem;

struct Daemon {
  kiln::testing::TempDir dir{"kiln-client-daemon"};
  kiln::testing::DaemonProcess daemon{kiln::testing::DaemonOptions{.root = dir.path()}};
  Daemon() {
    kiln::ClientOptions options;
    options.socket = daemon.socket();
    options.mode = kiln::ClientMode::kDaemon;  // these tests are about the daemon, whatever KILN_MODE says
    REQUIRE(kiln::Configure(options).ok());
  }
  ~Daemon() { kiln::Configure(kiln::ClientOptions{}); }

  // The daemon's blob file of a cubin (blobs are named by their SHA-256).
  std::string BlobOf(const std::string& sha256) const {
    for (const auto& e : fs::recursive_directory_iterator(daemon.cache_dir()))
      if (e.is_regular_file() && e.path().filename() == sha256) return e.path().string();
    return "";
  }
};

kiln::OpRequest Rmsnorm(const std::string& dtype = "bf16", const std::string& hidden = "4096") {
  return {"rmsnorm", {{"dtype", dtype}, {"hidden", hidden}}};
}

TEST_CASE("Prefetch compiles once, then the daemon serves it from memory", "[client][daemon]") {
  Daemon d;
  CHECK(kiln::Ping().ok());
  const auto before = kiln::GetClientStats();
  auto first = kiln::Prefetch(Rmsnorm(), "sm_90");
  REQUIRE(first.ok());
  CHECK(first->origin == kiln::Origin::kCompiled);
  CHECK(first->uri == "rmsnorm_bf16_h4096");
  CHECK(first->arch == "sm_90");
  CHECK(first->sha256.size() == 64);
  CHECK(first->cache_key.size() == 64);
  CHECK(first->cubin_size > 0);
  CHECK(first->params.at("vec") == "8");
  REQUIRE(first->launch.size() == 1);  // the entry's launch hints
  CHECK(first->launch[0].entry == "kiln_rmsnorm");
  CHECK(first->launch[0].block > 0);
  CHECK(first->launch[0].items_per_block > 0);  // rows per block
  REQUIRE(first->kernels.size() == 1);
  CHECK(first->kernels[0].name == "kiln_rmsnorm");

  auto second = kiln::Prefetch(Rmsnorm(), "sm_90");
  REQUIRE(second.ok());
  CHECK(second->origin == kiln::Origin::kMemory);
  CHECK(second->cache_key == first->cache_key);
  CHECK(second->sha256 == first->sha256);
  const auto after = kiln::GetClientStats();
  CHECK(after.get_kernel_rpcs == before.get_kernel_rpcs + 2);
  // On a unix socket the cubin is read from the daemon's read-only blob file.
  CHECK(after.blob_path_reads == before.blob_path_reads + 2);
}

TEST_CASE("a blob file that vanished or was damaged is fetched again as bytes", "[client][daemon]") {
  Daemon d;
  auto first = kiln::Prefetch(Rmsnorm("fp16", "1024"), "sm_90");
  REQUIRE(first.ok());
  const std::string blob = d.BlobOf(first->sha256);
  REQUIRE_FALSE(blob.empty());

  // A damaged blob: the client reads the path, finds the wrong bytes and asks again for the
  // bytes (two RPCs). A vanished blob: the daemon sees it is gone and sends the bytes at once.
  uint64_t rpcs = 0;
  SECTION("damaged") {
    fs::permissions(blob, fs::perms::owner_write, fs::perm_options::add);
    kiln::testing::WriteFile(blob, "not a cubin");
    rpcs = 2;
  }
  SECTION("vanished") {
    fs::remove(blob);
    rpcs = 1;
  }

  const auto before = kiln::GetClientStats();
  auto again = kiln::Prefetch(Rmsnorm("fp16", "1024"), "sm_90");
  INFO(again.status().ToString());
  REQUIRE(again.ok());
  CHECK(again->sha256 == first->sha256);
  const auto after = kiln::GetClientStats();
  CHECK(after.get_kernel_rpcs == before.get_kernel_rpcs + rpcs);
  CHECK(after.blob_path_reads == before.blob_path_reads);
}

TEST_CASE("without prefer_blob_path the bytes come over gRPC, still verified", "[client][daemon]") {
  Daemon d;
  kiln::ClientOptions options = kiln::CurrentOptions();
  options.prefer_blob_path = false;
  REQUIRE(kiln::Configure(options).ok());
  const auto before = kiln::GetClientStats();
  auto info = kiln::Prefetch(Rmsnorm("fp32", "512"), "sm_80");
  REQUIRE(info.ok());
  CHECK(info->arch == "sm_80");
  CHECK(kiln::GetClientStats().blob_path_reads == before.blob_path_reads);
}

TEST_CASE("the daemon's errors arrive as kiln::Status with its message", "[client][daemon]") {
  Daemon d;
  SECTION("unknown op") {
    auto info = kiln::Prefetch(kiln::OpRequest{"no_such_op", {}}, "sm_90");
    REQUIRE_FALSE(info.ok());
    INFO(info.status().ToString());
    CHECK(info.status().code() == StatusCode::kNotFound);
    CHECK(info.status().message().find("no_such_op") != std::string::npos);
  }
  SECTION("bad params") {
    auto info = kiln::Prefetch(Rmsnorm("int4"), "sm_90");
    REQUIRE_FALSE(info.ok());
    INFO(info.status().ToString());
    CHECK(info.status().code() == StatusCode::kInvalidArgument);
    CHECK(info.status().message().find("dtype") != std::string::npos);
  }
  SECTION("an arch the op cannot be built for") {
    auto info = kiln::Prefetch(Rmsnorm(), "sm_75");
    REQUIRE_FALSE(info.ok());
    INFO(info.status().ToString());
    CHECK(info.status().code() == StatusCode::kFailedPrecondition);
    CHECK(info.status().message().find("sm_75") != std::string::npos);
  }
  SECTION("a raw source that does not compile") {
    kiln::SourceRequest source{"broken", "extern \"C\" __global__ void k() { this is not C++; }", {"k"}, {}, {}};
    auto info = kiln::Prefetch(source, "sm_90a");
    REQUIRE_FALSE(info.ok());
    INFO(info.status().ToString());
    CHECK(info.status().code() == StatusCode::kInvalidArgument);
    CHECK(info.status().message().find("error") != std::string::npos);
  }
}

TEST_CASE("a raw source compiles through Prefetch", "[client][daemon]") {
  Daemon d;
  kiln::SourceRequest source{"vadd", kiln::testing::VaddSource(), {"vadd"}, {"-DN=4"}, {}};
  auto info = kiln::Prefetch(source, "sm_90a");
  INFO(info.status().ToString());
  REQUIRE(info.ok());
  CHECK(info->arch == "sm_90a");
  CHECK(info->uri.rfind("src_vadd_", 0) == 0);
  REQUIRE(info->kernels.size() == 1);
  CHECK(info->kernels[0].name == "vadd");
}

TEST_CASE("kiln_connect succeeds against a running daemon", "[client][daemon][capi]") {
  Daemon d;
  CHECK(kiln_connect(d.daemon.socket().c_str(), 5000) == KILN_OK);
  CHECK(std::string(kiln_last_error()).empty());
  CHECK(kiln::DaemonTarget() == "unix:" + d.daemon.socket());
}

TEST_CASE("kiln_prefetch compiles an op for an explicit arch and says where it came from", "[client][daemon][capi]") {
  Daemon d;
  const char* summary = nullptr;
  REQUIRE(kiln_prefetch("rmsnorm", "dtype=bf16 hidden=4096", "sm_90", &summary) == KILN_OK);
  REQUIRE(summary != nullptr);
  const std::string first = summary;
  CHECK(first.rfind("uri=rmsnorm_bf16_h4096 arch=sm_90 origin=compiled key=", 0) == 0);
  CHECK(first.find(" sha256=") != std::string::npos);
  REQUIRE(kiln_prefetch("rmsnorm", "  hidden=4096   dtype=bf16 ", "sm_90", &summary) == KILN_OK);
  CHECK(std::string(summary).find("origin=memory") != std::string::npos);
  CHECK(kiln_prefetch("rmsnorm", "dtype=bf16 hidden=4096", "sm_90", nullptr) == KILN_OK);

  CHECK(kiln_prefetch("rmsnorm", "dtype=bf16 hidden", "sm_90", &summary) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(summary == nullptr);
  CHECK(std::string(kiln_last_error()).find("'hidden' is not KEY=VALUE") != std::string::npos);
  CHECK(kiln_prefetch("rmsnorm", "dtype=bf16 dtype=fp16", "sm_90", nullptr) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kiln_last_error()).find("dtype is given twice") != std::string::npos);
  CHECK(kiln_prefetch("rmsnorm", "dtype=bf16 hidden=4096 @sm_80", "sm_90", nullptr) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kiln_last_error()).find("give the arch as the arch argument") != std::string::npos);
  CHECK(kiln_prefetch(nullptr, "", "sm_90", nullptr) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(kiln_prefetch("rmsnorm", "dtype=bf16 hidden=4096", "", nullptr) == KILN_ERROR_INVALID_ARGUMENT);
  // The daemon's own refusal comes through with its message.
  CHECK(kiln_prefetch("rmsnorm", "dtype=int7 hidden=4096", "sm_90", nullptr) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kiln_last_error()).find("int7") != std::string::npos);
}

}  // namespace
