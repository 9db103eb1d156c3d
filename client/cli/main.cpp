// kiln: the command line of Kiln. Finds the command, parses its options, runs it, and turns
// the outcome into the documented exit code.
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "client/cli/arguments.h"
#include "client/cli/command.h"
#include "kiln/version.h"

namespace {

using kiln::cli::CommandSpec;

// The command whose words start `words`, preferring the longest ("cache ls" over "cache").
const CommandSpec* FindCommand(const std::vector<CommandSpec>& commands, const std::vector<std::string>& words,
                               size_t* used) {
  const CommandSpec* best = nullptr;
  for (const auto& c : commands) {
    std::vector<std::string> path;
    size_t start = 0;
    while (start <= c.path.size()) {
      size_t space = c.path.find(' ', start);
      if (space == std::string::npos) space = c.path.size();
      path.push_back(c.path.substr(start, space - start));
      start = space + 1;
    }
    if (path.size() > words.size()) continue;
    if (!std::equal(path.begin(), path.end(), words.begin())) continue;
    if (best == nullptr || path.size() > *used) {
      best = &c;
      *used = path.size();
    }
  }
  return best;
}

bool IsGroup(const std::vector<CommandSpec>& commands, const std::string& word) {
  for (const auto& c : commands)
    if (c.path.rfind(word + " ", 0) == 0) return true;
  return false;
}

int Run(const std::vector<std::string>& args) {
  std::vector<CommandSpec> commands;
  kiln::cli::AddGetCommand(commands);
  kiln::cli::AddOpsCommand(commands);
  kiln::cli::AddCompileCommand(commands);
  kiln::cli::AddCacheCommands(commands);
  kiln::cli::AddJobsCommands(commands);
  kiln::cli::AddInspectCommand(commands);
  kiln::cli::AddReplayCommand(commands);
  kiln::cli::AddDoctorCommand(commands);
  kiln::cli::AddTuneCommands(commands);
  kiln::cli::AddTuneRunCommand(commands);
  kiln::cli::AddAotCommands(commands);
  kiln::cli::AddWarmCommand(commands);
  kiln::cli::AddExportListCommand(commands);

  kiln::cli::GlobalOptions global;
  try {
    global = kiln::cli::ExtractGlobalOptions(args);
  } catch (const kiln::cli::UsageError& e) {
    std::cerr << "kiln: " << e.what() << "\n(see kiln --help)" << std::endl;
    return kiln::cli::kExitUsage;
  }
  if (global.version) {
    std::cout << "kiln " << KILN_VERSION_STRING << std::endl;
    return kiln::cli::kExitOk;
  }
  std::vector<std::string> words;
  for (const auto& a : global.rest) {
    if (!a.empty() && a[0] == '-') break;
    words.push_back(a);
  }
  if (words.empty() || words[0] == "help") {
    if (global.help || (!words.empty() && words.size() == 1)) {
      std::cout << kiln::cli::GroupHelp(commands, "");
      return kiln::cli::kExitOk;
    }
    if (words.empty()) {
      std::cerr << kiln::cli::GroupHelp(commands, "");
      return kiln::cli::kExitUsage;
    }
    words.erase(words.begin());  // "kiln help cache ls" = "kiln cache ls --help"
    global.help = true;
    global.rest.erase(global.rest.begin());
  }
  size_t used = 0;
  const CommandSpec* spec = FindCommand(commands, words, &used);
  if (spec == nullptr) {
    if (IsGroup(commands, words[0])) {
      const bool asked = global.help && words.size() == 1;
      (asked ? std::cout : std::cerr) << kiln::cli::GroupHelp(commands, words[0]);
      if (!asked && words.size() > 1)
        std::cerr << "\nkiln " << words[0] << ": unknown command '" << words[1] << "'" << std::endl;
      return asked ? kiln::cli::kExitOk : kiln::cli::kExitUsage;
    }
    std::cerr << "kiln: unknown command '" << words[0] << "' (see kiln --help)" << std::endl;
    return kiln::cli::kExitUsage;
  }
  if (global.help && !spec->help_with_arguments) {
    std::cout << kiln::cli::CommandHelp(*spec);
    return kiln::cli::kExitOk;
  }

  kiln::cli::Invocation invocation(*spec, std::cout, std::cerr);
  try {
    invocation.socket = global.socket;
    invocation.security = {global.tls_ca, global.tls_cert, global.tls_key, global.insecure};
    if (!global.timeout.empty()) {
      size_t end = 0;
      double seconds = -1;
      try {
        seconds = std::stod(global.timeout, &end);
      } catch (const std::exception&) {
      }
      if (end != global.timeout.size() || !(seconds > 0) || seconds > 86400 * 7)
        throw kiln::cli::UsageError("--timeout wants a number of seconds > 0, got '" + global.timeout + "'");
      invocation.timeout = std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
    }
    const std::vector<std::string> rest(global.rest.begin() + static_cast<long>(used), global.rest.end());
    if (global.help) {  // a command whose help depends on its arguments
      try {
        kiln::cli::ArgumentParser::Parse(rest, invocation);
      } catch (const kiln::cli::UsageError&) {
        if (!invocation.positionals().empty()) throw;
      }
      if (invocation.positionals().empty()) {  // `kiln get --help`: the command's own help
        std::cout << kiln::cli::CommandHelp(*spec);
        return kiln::cli::kExitOk;
      }
      return spec->help_with_arguments(invocation);
    }
    kiln::cli::ArgumentParser::Parse(rest, invocation);
    return spec->run(invocation);
  } catch (const kiln::cli::UsageError& e) {
    std::cerr << "kiln " << spec->path << ": " << e.what() << "\nUsage: " << kiln::cli::UsageLine(*spec)
              << "\n(see kiln " << spec->path << " --help)" << std::endl;
    return kiln::cli::kExitUsage;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::cerr << "kiln: internal error: " << e.what() << std::endl;
    return kiln::cli::kExitDaemonError;
  }
}
