// An installed kilnd: `cmake --install` into a prefix that is then made read-only; kilnd
// started from it with no kernels flag finds the kernel library in <prefix>/share/kiln and
// serves a compile and its ops' trace definitions, and nothing in the prefix changes.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <map>
#include <thread>

#include <signal.h>

#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;
namespace v1 = kiln::v1;
namespace fs = std::filesystem;

namespace {}  // namespace

TEST_CASE("an installed kilnd finds its kernels in the prefix and writes nothing into it", "[daemon][install]") {
  TempDir dir;
  std::string prefix = dir / "prefix", work = dir / "work";
  auto install = Run({.argv = {KILN_TEST_CMAKE, "--install", KILN_TEST_BINARY_DIR, "--prefix", prefix}});
  INFO(install.output);
  REQUIRE(install.exit_code == 0);
  REQUIRE(fs::exists(prefix + "/bin/kilnd"));
  REQUIRE(fs::exists(prefix + "/share/kiln/kernels/include"));
  // Read-only for everyone; the daemon runs unprivileged so that read-only means it.
  const int nobody = 65534;
  for (auto& e : fs::recursive_directory_iterator(prefix))
    if (!e.is_symlink())
      fs::permissions(e.path(), fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                      fs::perm_options::remove);
  fs::permissions(prefix, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                  fs::perm_options::remove);
  fs::permissions(dir.path(), fs::perms::others_exec | fs::perms::others_read, fs::perm_options::add);
  fs::create_directories(work);
  if (geteuid() == 0) REQUIRE(chown(work.c_str(), nobody, nobody) == 0);
  auto before = SnapshotTree(prefix);

  // No --kernels-dir and no KILN_KERNELS_DIR: the default must find <prefix>/share/kiln/kernels.
  SubprocessOptions p;
  p.argv = {prefix + "/bin/kilnd", "--socket", work + "/kilnd.sock", "--cache-dir", work + "/cache"};
  p.unset_env = {"KILN_SOCKET", "KILN_CACHE_DIR", "KILN_GEN_DIR", "KILN_KERNELS_DIR"};
  p.run_as_uid = geteuid() == 0 ? nobody : -1;
  Subprocess daemon(p);
  Rpc rpc(grpc::CreateChannel("unix:" + work + "/kilnd.sock", grpc::InsecureChannelCredentials()));
  Reply r;
  for (int i = 0; i < 300; ++i) {  // until it listens
    r = Get(rpc, OpRequest("rmsnorm", {{"dtype", "fp32"}, {"hidden", "512"}}, "sm_80"), 60);
    if (r.status.error_code() != grpc::StatusCode::UNAVAILABLE || !daemon.running()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  INFO(r.status.error_message() << "\n" << daemon.Output());
  REQUIRE(r.status.ok());
  CHECK(r.response.origin() == v1::ORIGIN_COMPILED);
  CHECK_THAT(daemon.Output(), Catch::Contains(prefix + "/share/kiln/kernels"));
  // The trace definitions are installed beside the device code, and ListOps serves them.
  {
    v1::ListOpsRequest request;
    request.set_name("rmsnorm");
    v1::ListOpsResponse ops;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto status = rpc.kernels->ListOps(&context, request, &ops);
    INFO(status.error_message());
    REQUIRE(status.ok());
    REQUIRE(ops.ops_size() == 1);
    CHECK(ops.ops(0).trace_definition() ==
          ReadFile(std::string(KILN_TEST_SOURCE_DIR) + "/kernels/traces/rmsnorm.json"));
  }
  daemon.Signal(SIGTERM);
  CHECK(daemon.Wait(std::chrono::seconds(30)) == 0);
  CHECK(SnapshotTree(prefix) == before);
}
