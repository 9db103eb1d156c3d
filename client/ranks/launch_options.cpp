#include "client/ranks/launch_options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace kiln::launch {
namespace {

bool ParseRanks(const std::string& text, int* out) {
  if (text.empty() || text.size() > 3) return false;
  for (char c : text)
    if (c < '0' || c > '9') return false;
  *out = std::atoi(text.c_str());
  return *out >= 1 && *out <= kMaxRanks;
}

bool ParseSeconds(const std::string& text, std::chrono::milliseconds* out) {
  if (text.empty() || text[0] == '-' || text[0] == '+') return false;
  char* end = nullptr;
  errno = 0;
  double s = std::strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size() || !std::isfinite(s) || s < 0 || s > 86400) return false;
  *out = std::chrono::milliseconds(static_cast<long long>(std::llround(s * 1000)));
  return true;
}

}  // namespace

ParsedLaunch ParseLaunchArguments(const std::vector<std::string>& args) {
  ParsedLaunch parsed;
  LaunchOptions& o = parsed.options;
  bool have_nproc = false;
  size_t i = 0;
  // The value of "--opt VALUE", "--opt=VALUE" or "-nVALUE"; false when it is missing.
  auto value_of = [&](const std::string& arg, const std::string& name, std::string* value) {
    if (arg.size() > name.size()) {
      *value = arg.substr(name.size() + (arg[name.size()] == '=' ? 1 : 0));
      return true;
    }
    if (i + 1 >= args.size()) return false;
    *value = args[++i];
    return true;
  };
  auto is = [](const std::string& arg, const std::string& name) {
    return arg == name || arg.rfind(name + "=", 0) == 0;
  };

  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-' || arg == "-") break;  // the command starts here
    std::string value;
    if (arg == "-h" || arg == "--help") {
      o.help = true;
    } else if (arg == "--version") {
      o.version = true;
    } else if (arg == "--tag") {
      o.tag = true;
    } else if (is(arg, "--nproc") || arg.rfind("-n", 0) == 0) {
      const std::string name = arg.rfind("--nproc", 0) == 0 ? "--nproc" : "-n";
      if (!value_of(arg, name, &value)) {
        parsed.error = name + " needs a value: the number of processes (1.." + std::to_string(kMaxRanks) + ")";
        return parsed;
      }
      if (!ParseRanks(value, &o.nproc)) {
        parsed.error = name + " '" + value + "': the number of processes must be a whole number " + "from 1 to " +
                       std::to_string(kMaxRanks);
        return parsed;
      }
      have_nproc = true;
    } else if (is(arg, "--grace-s")) {
      if (!value_of(arg, "--grace-s", &value)) {
        parsed.error = "--grace-s needs a value: seconds (0 or more)";
        return parsed;
      }
      if (!ParseSeconds(value, &o.grace)) {
        parsed.error = "--grace-s '" + value + "': give seconds from 0 to 86400 (fractions allowed)";
        return parsed;
      }
    } else {
      parsed.error = "unknown option '" + arg + "' (put the command after --, or see --help)";
      return parsed;
    }
  }
  o.command.assign(args.begin() + static_cast<long>(std::min(i, args.size())), args.end());
  if (o.help || o.version) return parsed;
  if (!have_nproc)
    parsed.error = "-n/--nproc is required: how many processes to start (1.." + std::to_string(kMaxRanks) + ")";
  else if (o.command.empty()) parsed.error = "no command given: kiln-launch -n N [--] CMD [ARGS...]";
  return parsed;
}

std::string LaunchUsage() {
  return R"(usage: kiln-launch -n N [--grace-s S] [--tag] [--] CMD [ARGS...]

Starts N copies of CMD on this node (one per GPU) and waits for them. Each gets:
  KILN_RANK, KILN_LOCAL_RANK               0..N-1 (also RANK, LOCAL_RANK)
  KILN_WORLD_SIZE, KILN_LOCAL_WORLD_SIZE   N (also WORLD_SIZE, LOCAL_WORLD_SIZE)
  KILN_COMM_ADDRESS                        a fresh rendezvous address for this launch
  MASTER_ADDR, MASTER_PORT                 127.0.0.1 and a free TCP port (torch.distributed)
CUDA_VISIBLE_DEVICES is left as it is: rank r uses device r.

Options:
  -n, --nproc N   number of processes, 1..64 (required)
  --grace-s S     after a rank fails, how long the others may go on before they get
                  SIGTERM (default 30; SIGKILL follows 5 s later)
  --tag           prefix every output line with "[rank] "
  -h, --help      this help
  --version       print the version

SIGINT and SIGTERM are passed on to every rank (SIGKILL follows 5 s later).

Exit status:
  0    every rank exited 0
  77   every rank exited 0 or 77, at least one 77 (a skipped test)
  N    the status of the first rank that failed (128+S when killed by signal S)
  2    usage error
  126  CMD could not be executed; 127: CMD was not found
)";
}

}  // namespace kiln::launch
