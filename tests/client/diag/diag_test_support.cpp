#include "tests/client/diag/diag_test_support.h"

#include <dirent.h>

#include <algorithm>

#include "tests/support/daemon_process.h"

namespace kiln::testing {
namespace {

// Every variable that changes what a traced call does (docs/diagnostics.md), and the socket.
const char* const kDiagVariables[] = {
    "KILN_LOGLEVEL",     "KILN_LOGDEST",      "KILN_DUMP_DIR",           "KILN_DUMP_MAX_COUNT", "KILN_DUMP_MAX_BYTES",
    "KILN_DUMP_INCLUDE", "KILN_DUMP_EXCLUDE", "KILN_DUMP_TEST_PAUSE_MS", "KILN_SOCKET"};

SubprocessOptions WithOnly(std::vector<std::string> argv, std::map<std::string, std::string> env) {
  SubprocessOptions p;
  p.argv = std::move(argv);
  for (const char* name : kDiagVariables)
    if (!env.count(name)) p.unset_env.push_back(name);
  p.set_env = std::move(env);
  return p;
}

}  // namespace

SubprocessOptions DiagChildOptions(std::vector<std::string> args, std::map<std::string, std::string> env) {
  args.insert(args.begin(), DiagChildPath());
  return WithOnly(std::move(args), std::move(env));
}

SubprocessOptions ReplayOptions(std::vector<std::string> prefix, std::vector<std::string> args,
                                std::map<std::string, std::string> env) {
  std::vector<std::string> argv = {KilnCliPath()};
  argv.insert(argv.end(), prefix.begin(), prefix.end());
  argv.push_back("replay");
  argv.insert(argv.end(), args.begin(), args.end());
  return WithOnly(std::move(argv), std::move(env));
}

std::vector<std::string> FolderEntries(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") names.push_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> TextLines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

}  // namespace kiln::testing
