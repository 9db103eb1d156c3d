// DaemonProcess: a real kilnd in its own folders (socket, cache, generated sources), started
// as a child process and waited for until it answers its health check.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace grpc {
class Channel;
}

namespace kiln::testing {

// The binaries and kernels under test: the build tree's, unless KILN_TEST_KILND, KILN_TEST_CLI,
// KILN_TEST_DIAG_CHILD, KILN_TEST_EMBEDDED_CHILD or KILN_TEST_KERNELS_DIR name others (a bundle
// on the GPU machine).
std::string KilndPath();
std::string KilnCliPath();
// kiln_diag_child, the child process of the API call logging tests (KILN_TEST_DIAG_CHILD).
std::string DiagChildPath();
// kiln_embedded_child, the child process of the embedded-engine tests (KILN_TEST_EMBEDDED_CHILD).
std::string EmbeddedChildPath();
std::string KernelsDir();

struct DaemonOptions {
  std::string root;         // folder holding run/, cache/, gen/ unless overridden below
  std::string socket;       // default <root>/run/kilnd.sock
  std::string cache_dir;    // default <root>/cache
  std::string gen_dir;      // default <root>/gen
  std::string kernels_dir;  // default the source tree's kernels/
  std::vector<std::string> extra_args;
  std::map<std::string, std::string> env;
  std::vector<std::string> unset_env;
  int run_as_uid = -1;  // see SubprocessOptions
  bool wait_ready = true;
  std::chrono::milliseconds ready_timeout = std::chrono::seconds(30);
};

class DaemonProcess;

// The kiln CLI against `daemon` (--socket), run to completion.
RunResult RunCli(const DaemonProcess& daemon, std::vector<std::string> args,
                 std::chrono::milliseconds timeout = std::chrono::seconds(300));

class DaemonProcess {
 public:
  explicit DaemonProcess(DaemonOptions options);  // starts; waits for health when asked
  ~DaemonProcess();                               // SIGTERM, then SIGKILL after 10 s

  const std::string& socket() const { return options_.socket; }
  const std::string& cache_dir() const { return options_.cache_dir; }
  const std::string& gen_dir() const { return options_.gen_dir; }
  std::string target() const { return "unix:" + options_.socket; }
  std::shared_ptr<grpc::Channel> channel() const;
  Subprocess& process() { return *process_; }

  // True once the health service says SERVING; false when the process exited or timed out.
  bool WaitReady(std::chrono::milliseconds timeout);
  void Kill9();
  int Terminate(std::chrono::milliseconds timeout = std::chrono::seconds(30));  // exit code
  std::string Log() const { return process_->Output(); }

 private:
  DaemonOptions options_;
  std::unique_ptr<Subprocess> process_;
};

}  // namespace kiln::testing
