// Subprocess: a real child process (fork + exec) with its own environment, its output
// captured to a file, that tests can wait for, signal, or kill -9.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln::testing {

struct SubprocessOptions {
  std::vector<std::string> argv;               // argv[0] is the executable path
  std::map<std::string, std::string> set_env;  // added or replaced
  std::vector<std::string> unset_env;          // removed
  std::string output_path;                     // stdout+stderr; empty: a temp file
  std::string working_dir;                     // empty: inherit
  std::string stdin_text;                      // fed on stdin, then closed
  // When >= 0 and we are root: the child drops to this uid/gid before exec (root ignores
  // file permissions, so read-only tests need an unprivileged process).
  int run_as_uid = -1;
  int run_as_gid = -1;
};

class Subprocess {
 public:
  explicit Subprocess(SubprocessOptions options);  // starts it; throws on fork/exec setup failure
  ~Subprocess();                                   // kills -9 if still running
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  bool running();
  void Signal(int sig);
  // Waits for exit; the exit code, or 128+signal when killed. nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  std::string Output() const;  // everything written so far
  const std::string& output_path() const { return output_path_; }

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  std::string output_path_;
  bool owns_output_ = false;
};

struct RunResult {
  int exit_code = -1;
  std::string output;
};

// Runs to completion (fails the test's expectations via exit_code -1 on timeout).
RunResult Run(SubprocessOptions options, std::chrono::milliseconds timeout = std::chrono::seconds(120));

}  // namespace kiln::testing
