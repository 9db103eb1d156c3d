// The command line of `kiln`: global options, the command words, each command's own options,
// and the --help text made from the command declarations.
#pragma once

#include <string>
#include <vector>

#include "client/cli/command.h"

namespace kiln::cli {

struct GlobalOptions {
  std::string socket;
  std::string tls_ca, tls_cert, tls_key;  // --tls-ca, --tls-cert, --tls-key FILE
  bool insecure = false;                  // --insecure
  std::string timeout;                    // as given; empty: default
  bool help = false;
  bool version = false;
  std::vector<std::string> rest;  // everything else, in order
};

// Takes --socket, --timeout, --tls-ca, --tls-cert, --tls-key, --insecure, -h/--help and
// --version from anywhere before a "--".
// Throws UsageError for a global option without its value.
GlobalOptions ExtractGlobalOptions(const std::vector<std::string>& args);

class ArgumentParser {
 public:
  // Parses a command's own arguments (after its words) into `invocation`: "--opt VALUE",
  // "--opt=VALUE", flags, positionals, and "--" (everything after it is positional).
  // Throws UsageError naming the command for an unknown option, a missing value, a repeated
  // single option, or a wrong number of positionals.
  static void Parse(const std::vector<std::string>& args, Invocation& invocation);
};

std::string UsageLine(const CommandSpec& spec);  // "kiln cache ls [OPTIONS]"
std::string CommandHelp(const CommandSpec& spec);
// Help of a group ("cache") listing its commands, or of kiln itself (group empty).
std::string GroupHelp(const std::vector<CommandSpec>& commands, const std::string& group);

}  // namespace kiln::cli
