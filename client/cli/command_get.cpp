// kiln get OP KEY=VALUE...: one op of the kernel library from the daemon.
#include "client/cli/command.h"
#include "client/cli/kernel_fetch.h"
#include "client/core/rpc/kernel_request.h"

namespace kiln::cli {
namespace {

int RunGet(Invocation& inv) {
  const auto& args = inv.positionals();
  OpRequest op;
  op.name = args[0];
  for (size_t i = 1; i < args.size(); ++i) {
    const auto eq = args[i].find('=');
    if (eq == std::string::npos || eq == 0) throw UsageError("'" + args[i] + "' is not KEY=VALUE (e.g. dtype=bf16)");
    const std::string key = args[i].substr(0, eq);
    if (op.params.count(key)) throw UsageError("param '" + key + "' given twice");
    op.params[key] = args[i].substr(eq + 1);
  }
  return FetchAndReport(inv, client::MakeKernelRequest(op, ""));
}

}  // namespace

void AddGetCommand(std::vector<CommandSpec>& commands) {
  CommandSpec c;
  c.path = "get";
  c.arguments = "OP [KEY=VALUE...]";
  c.summary = "get an op of the kernel library from the daemon (compiled on a miss)";
  c.details = "Prints where the cubin came from (memory, disk, prebuilt, compiled), the daemon's timings,\n"
              "the launch hints and each kernel's registers, shared memory and spills. The cubin's\n"
              "SHA-256 is checked on the way in. `kiln get OP --help` lists OP's params, what each\n"
              "allows and its default (asked of the daemon); `kiln ops` lists every op.\n\n"
              "Example:\n"
              "  kiln get rmsnorm dtype=bf16 hidden=4096 --arch sm_90a --out rmsnorm.cubin";
  c.options = KernelFetchOptions();
  c.min_positionals = 1;
  c.max_positionals = -1;
  c.run = RunGet;
  c.help_with_arguments = RunOpHelp;
  commands.push_back(std::move(c));
}

}  // namespace kiln::cli
