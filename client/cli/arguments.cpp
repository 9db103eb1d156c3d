#include "client/cli/arguments.h"

#include <algorithm>
#include <sstream>

#include "proto/endpoint.h"

namespace kiln::cli {
namespace {

const OptionSpec* FindOption(const CommandSpec& spec, const std::string& name) {
  for (const auto& o : spec.options)
    if (o.name == name) return &o;
  return nullptr;
}

std::string Pad(const std::string& s, size_t width) {
  return s.size() >= width ? s + "  " : s + std::string(width - s.size(), ' ');
}

constexpr const char* kExitCodes =
    "Exit codes:\n"
    "  0  success\n"
    "  1  the daemon answered with an error (compile error, unknown op, no matching arch, ...)\n"
    "  2  usage error (bad command line)\n"
    "  3  the daemon could not be reached\n"
    "  4  a problem was found (kiln doctor, kiln cache verify)\n";

// Where a global option that takes a value keeps it; nullptr for any other argument.
std::string* ValueSlot(GlobalOptions& g, const std::string& name) {
  if (name == "--socket") return &g.socket;
  if (name == "--timeout") return &g.timeout;
  if (name == "--tls-ca") return &g.tls_ca;
  if (name == "--tls-cert") return &g.tls_cert;
  if (name == "--tls-key") return &g.tls_key;
  return nullptr;
}

}  // namespace

GlobalOptions ExtractGlobalOptions(const std::vector<std::string>& args) {
  GlobalOptions g;
  bool literal = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (literal) {
      g.rest.push_back(a);
      continue;
    }
    if (a == "--") {
      literal = true;
      g.rest.push_back(a);
    } else if (a == "-h" || a == "--help") {
      g.help = true;
    } else if (a == "--version") {
      g.version = true;
    } else if (a == "--insecure") {
      g.insecure = true;
    } else if (std::string* slot = ValueSlot(g, a.substr(0, a.find('=')))) {
      if (a.find('=') != std::string::npos) {
        *slot = a.substr(a.find('=') + 1);
      } else {
        if (i + 1 >= args.size()) throw UsageError(a + " needs a value");
        *slot = args[++i];
      }
    } else {
      g.rest.push_back(a);
    }
  }
  return g;
}

void ArgumentParser::Parse(const std::vector<std::string>& args, Invocation& inv) {
  const CommandSpec& spec = inv.spec();
  bool literal = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (literal || a.size() < 2 || a[0] != '-' || a == "-") {
      inv.positionals_.push_back(a);
      continue;
    }
    if (a == "--") {
      literal = true;
      continue;
    }
    std::string name = a;
    std::string value;
    bool inline_value = false;
    if (auto eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      inline_value = true;
    }
    const OptionSpec* option = FindOption(spec, name);
    if (option == nullptr) throw UsageError("unknown option " + name);
    if (option->value_name.empty()) {
      if (inline_value) throw UsageError(name + " takes no value");
      value = "1";
    } else if (!inline_value) {
      if (i + 1 >= args.size()) throw UsageError(name + " needs a value (" + option->value_name + ")");
      value = args[++i];
    }
    auto& slot = inv.values_[name];
    if (!slot.empty() && !option->repeatable) throw UsageError(name + " given more than once");
    slot.push_back(value);
  }
  const int n = static_cast<int>(inv.positionals_.size());
  if (n < spec.min_positionals) throw UsageError("missing " + spec.arguments);
  if (spec.max_positionals >= 0 && n > spec.max_positionals)
    throw UsageError("unexpected argument '" + inv.positionals_[spec.max_positionals] + "'");
}

std::string UsageLine(const CommandSpec& spec) {
  std::string line = "kiln " + spec.path;
  if (!spec.arguments.empty()) line += " " + spec.arguments;
  if (!spec.options.empty()) line += " [OPTIONS]";
  return line;
}

std::string CommandHelp(const CommandSpec& spec) {
  std::ostringstream s;
  s << "Usage: " << UsageLine(spec) << "\n\n" << spec.summary << "\n";
  if (!spec.options.empty()) {
    s << "\nOptions:\n";
    for (const auto& o : spec.options) {
      std::string left = "  " + o.name + (o.value_name.empty() ? "" : " " + o.value_name);
      s << Pad(left, 26) << o.help << (o.repeatable ? " (repeatable)" : "") << "\n";
    }
  }
  s << "  " << Pad("-h, --help", 24) << "this help\n";
  if (!spec.details.empty()) s << "\n" << spec.details << "\n";
  s << "\nGlobal options: --socket PATH, --timeout SECONDS, --tls-ca FILE, --tls-cert FILE, --tls-key FILE, "
       "--insecure (see kiln --help).\n\n"
    << kExitCodes;
  return s.str();
}

std::string GroupHelp(const std::vector<CommandSpec>& commands, const std::string& group) {
  std::ostringstream s;
  if (group.empty()) {
    s << "kiln: the command line of Kiln, a JIT compilation service for CUDA kernels.\n"
         "It talks to the daemon kilnd over its unix socket and needs no GPU (replay runs a call on one).\n\n"
         "Usage: kiln [--socket PATH] [--timeout SECONDS] COMMAND [ARGS...]\n\n"
         "Commands:\n";
  } else {
    s << "Usage: kiln " << group << " COMMAND [ARGS...]\n\nCommands:\n";
  }
  for (const auto& c : commands) {
    if (!group.empty() && c.path.rfind(group + " ", 0) != 0) continue;
    std::string left = "  " + c.path + (c.arguments.empty() ? "" : " " + c.arguments);
    s << Pad(left, 34) << c.summary << "\n";
  }
  s << "\nRun `kiln " << (group.empty() ? "" : group + " ") << "COMMAND --help` for its options.\n";
  if (group.empty()) {
    s << "\nGlobal options:\n"
      << "  " << Pad("--socket PATH", 24) << "kilnd's unix socket, or a gRPC target (unix:/path, host:port).\n"
      << std::string(26, ' ') << "Default: $" << proto::kSocketEnv << ", else " << proto::DefaultSocketPath() << "\n"
      << "  " << Pad("--timeout SECONDS", 24) << "how long to wait for one answer of the daemon (default 300)\n"
      << "  " << Pad("--tls-ca FILE", 24) << "a host:port target is TLS: the PEM CA that signed kilnd's certificate\n"
      << "  " << Pad("--tls-cert FILE", 24) << "a client certificate (PEM), for a kilnd that requires one\n"
      << "  " << Pad("--tls-key FILE", 24) << "its private key (PEM)\n"
      << "  " << Pad("--insecure", 24) << "plaintext to a host:port target, for a kilnd started with --insecure.\n"
      << std::string(26, ' ') << "A host:port target needs --tls-ca or --insecure; a unix socket neither\n"
      << "  " << Pad("-h, --help", 24) << "help for kiln or for a command\n"
      << "  " << Pad("--version", 24) << "print the version\n"
      << "\nEnvironment:\n"
      << "  " << Pad(proto::kSocketEnv, 24) << "the daemon's socket (as --socket)\n"
      << "  " << Pad("KILN_TLS_CA", 24) << "as --tls-ca; KILN_TLS_CERT, KILN_TLS_KEY as --tls-cert, --tls-key\n"
      << "  " << Pad("KILN_INSECURE=1", 24)
      << "as --insecure (the variables are read only when no TLS option is given)\n"
      << "  " << Pad("KILN_CACHE_DIR", 24) << "the cache workspace kiln doctor checks\n"
      << "  " << Pad("KILN_GEN_DIR", 24) << "the generated-sources workspace kiln doctor checks\n";
  }
  s << "\n" << kExitCodes;
  return s.str();
}

}  // namespace kiln::cli
