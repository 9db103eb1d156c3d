// The systemd units as `cmake --install` writes them (deploy/): filled in for the install's
// prefix, accepted by `systemd-analyze verify` (which checks that ExecStart= exists), naming
// documentation that was installed, and sandboxed to an exposure of 3.0 or less by
// `systemd-analyze security`. Skipped where systemd-analyze is not installed.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;
namespace fs = std::filesystem;

namespace {

constexpr const char* kSystemdAnalyze = "/usr/bin/systemd-analyze";

// The file `cmake --install` reported installing whose path ends with `suffix`.
std::string Installed(const std::string& install_output, const std::string& suffix) {
  std::istringstream in(install_output);
  const std::string tag = "-- Installing: ";
  for (std::string line; std::getline(in, line);)
    if (line.rfind(tag, 0) == 0 && line.size() >= suffix.size() && line.ends_with(suffix))
      return line.substr(tag.size());
  return "";
}

// The value of every `key=` line of a unit file.
std::vector<std::string> Values(const std::string& unit, const std::string& key) {
  std::vector<std::string> out;
  std::istringstream in(unit);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + "=", 0) == 0) out.push_back(line.substr(key.size() + 1));
  return out;
}

}  // namespace

TEST_CASE("the installed systemd units verify and their sandbox is rated 3.0 or less", "[daemon][install][systemd]") {
  if (access(kSystemdAnalyze, X_OK) != 0) {
    std::printf("SKIPPED: %s is not installed (Debian package systemd)\n", kSystemdAnalyze);
    std::exit(KILN_TEST_SKIP_CODE);
  }
  TempDir dir;
  // Installed under DESTDIR (so an absolute KILN_SYSTEMD_UNIT_DIR stays in the test's folder),
  // with the prefix a link to where DESTDIR put it: the paths written into the units are the
  // prefix's, and they exist.
  const std::string root = dir / "root", prefix = dir / "prefix";
  const std::string staged = root + prefix;
  fs::create_directories(staged);
  fs::create_directory_symlink(staged, prefix);
  auto install = Run({.argv = {KILN_TEST_CMAKE, "--install", KILN_TEST_BINARY_DIR, "--prefix", prefix},
                      .set_env = {{"DESTDIR", root}}});
  INFO(install.output);
  REQUIRE(install.exit_code == 0);

  // Where KILN_SYSTEMD_UNIT_DIR, KILN_SYSUSERS_DIR and the bin folder put them, as the install says.
  const std::string service_path = Installed(install.output, "/kilnd.service");
  const std::string socket_path = Installed(install.output, "/kilnd.socket");
  const std::string kilnd_path = Installed(install.output, "/kilnd");
  REQUIRE(fs::exists(service_path));
  REQUIRE(fs::exists(socket_path));
  REQUIRE(fs::exists(kilnd_path));
  const std::string service = ReadFile(service_path), socket = ReadFile(socket_path);
  // Filled in at install time for this prefix, not the one configured.
  CHECK(Values(service, "ExecStart") == std::vector<std::string>{kilnd_path.substr(root.size())});
  CHECK(kilnd_path.rfind(staged + "/", 0) == 0);
  CHECK(Values(socket, "ListenStream") == std::vector<std::string>{"/run/kiln/kilnd.sock"});
  CHECK_THAT(service, !Catch::Contains("@KILN_"));
  CHECK_THAT(socket, !Catch::Contains("@KILN_"));
  for (const auto* unit : {&service, &socket}) {
    auto docs = Values(*unit, "Documentation");
    REQUIRE(docs.size() == 1);
    REQUIRE(docs[0].rfind("file://", 0) == 0);
    INFO(docs[0]);
    CHECK(fs::exists(root + docs[0].substr(std::strlen("file://"))));
  }
  // The user and group the units name are created by sysusers.d.
  const std::string sysusers = Installed(install.output, "sysusers.d/kiln.conf");
  REQUIRE(!sysusers.empty());
  CHECK_THAT(ReadFile(sysusers), Catch::Contains("u kiln "));

  // verify warns about a bad setting on stderr and still exits 0: any output fails the test.
  auto verify = Run({.argv = {kSystemdAnalyze, "verify", service_path, socket_path}});
  INFO(verify.output);
  CHECK(verify.exit_code == 0);
  CHECK(verify.output.empty());

  auto security = Run({.argv = {kSystemdAnalyze, "security", "--offline=yes", service_path}});
  INFO(security.output);
  REQUIRE(security.exit_code == 0);
  std::smatch score;
  REQUIRE(
      std::regex_search(security.output, score, std::regex(R"(Overall exposure level for kilnd\.service: ([0-9.]+))")));
  CHECK(std::stod(score[1]) <= 3.0);
}
