// What every `kiln` command shares: its declaration (name, options, help), the parsed
// invocation it runs with, and the exit codes.
#pragma once

#include <chrono>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "client/core/rpc/transport_security.h"
#include "kiln/status.h"

namespace kiln::client {
class DaemonConnection;
}

namespace kiln::cli {

// Documented in `kiln --help`; scripts rely on them.
enum ExitCode : int {
  kExitOk = 0,
  kExitDaemonError = 1,  // the daemon answered with an error (compile error, unknown op, ...)
  kExitUsage = 2,        // bad command line
  kExitUnreachable = 3,  // the daemon could not be reached
  kExitProblem = 4,      // doctor or cache verify found something wrong
};

// Thrown for a bad command line; main prints it with the command's usage and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct OptionSpec {
  std::string name;        // "--arch"
  std::string value_name;  // "ARCH"; empty for a flag
  std::string help;
  bool repeatable = false;
};

class Invocation;

struct CommandSpec {
  std::string path;       // "cache ls"
  std::string arguments;  // "OP [KEY=VALUE...]" (for the usage line)
  std::string summary;    // one line
  std::string details;    // paragraphs after the options in --help
  std::vector<OptionSpec> options;
  int min_positionals = 0;
  int max_positionals = 0;  // -1: unlimited
  std::function<int(Invocation&)> run;
  // Set for a command whose --help depends on its arguments: with positionals, --help runs
  // this instead of printing the command's help (`kiln get OP --help`: OP's params).
  std::function<int(Invocation&)> help_with_arguments;
};

class Invocation {
 public:
  Invocation(const CommandSpec& spec, std::ostream& out, std::ostream& err) : out(out), err(err), spec_(spec) {}

  const CommandSpec& spec() const { return spec_; }
  bool Has(const std::string& option) const { return values_.count(option) > 0; }
  std::string Get(const std::string& option, const std::string& fallback = "") const;
  const std::vector<std::string>& All(const std::string& option) const;
  const std::vector<std::string>& positionals() const { return positionals_; }

  // Global options.
  std::string socket;  // --socket, else "" (KILN_SOCKET or the default)
  // --tls-ca, --tls-cert, --tls-key, --insecure; all unset: the KILN_TLS_* and KILN_INSECURE variables.
  client::TransportSecurity security;
  std::chrono::milliseconds timeout = std::chrono::seconds(300);

  // The daemon connection for --socket (made on first use). Throws UsageError when it cannot be
  // made: a TCP target with neither TLS nor --insecure, an unreadable certificate.
  const client::DaemonConnection& Connection();
  std::chrono::system_clock::time_point Deadline() const { return std::chrono::system_clock::now() + timeout; }

  // Points this process's library client (kiln::Configure) at the invocation's daemon when
  // --socket was given, with the TLS options and --timeout: for commands that call ops in
  // process (replay, tune run). Without --socket the library's own defaults stay (KILN_SOCKET,
  // KILN_MODE, ...).
  Status ConfigureLibraryClient() const;

  // Prints "kiln <command>: <message>" and returns the exit code for `status`:
  // UNAVAILABLE → 3, anything else → 1.
  int Fail(const Status& status);

  std::ostream& out;
  std::ostream& err;

 private:
  friend class ArgumentParser;
  const CommandSpec& spec_;
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positionals_;
  std::shared_ptr<client::DaemonConnection> connection_;
};

// Each command group adds its commands (one file each).
void AddGetCommand(std::vector<CommandSpec>& commands);
void AddCompileCommand(std::vector<CommandSpec>& commands);
void AddCacheCommands(std::vector<CommandSpec>& commands);
void AddJobsCommands(std::vector<CommandSpec>& commands);
void AddInspectCommand(std::vector<CommandSpec>& commands);
void AddReplayCommand(std::vector<CommandSpec>& commands);
void AddDoctorCommand(std::vector<CommandSpec>& commands);
void AddOpsCommand(std::vector<CommandSpec>& commands);
void AddTuneCommands(std::vector<CommandSpec>& commands);
void AddTuneRunCommand(std::vector<CommandSpec>& commands);
void AddAotCommands(std::vector<CommandSpec>& commands);
void AddWarmCommand(std::vector<CommandSpec>& commands);
void AddExportListCommand(std::vector<CommandSpec>& commands);

// `kiln get OP --help` (command_ops.cpp): OP's params, arch families and trace definition, from
// the daemon's ListOps.
int RunOpHelp(Invocation& invocation);

}  // namespace kiln::cli
