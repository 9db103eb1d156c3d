// What the API call logging tests share (call_log_test, call_dump_test, gpu_call_log_test):
// the child process kiln_diag_child and `kiln replay` started with exactly the diagnostics
// variables a test gives (every other one removed from the inherited environment), and the
// readers of what they leave behind.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace kiln::testing {

// kiln_diag_child ARGS... with `env`; the diagnostics variables not in `env` are unset.
SubprocessOptions DiagChildOptions(std::vector<std::string> args, std::map<std::string, std::string> env);

// kiln PREFIX... replay ARGS... with no diagnostics variable set except those in `env`.
SubprocessOptions ReplayOptions(std::vector<std::string> prefix, std::vector<std::string> args,
                                std::map<std::string, std::string> env = {});

// The names in a folder, sorted, without "." and ".." (none when it cannot be read).
std::vector<std::string> FolderEntries(const std::string& dir);

// The lines of a text, without their '\n'.
std::vector<std::string> TextLines(const std::string& text);

}  // namespace kiln::testing
